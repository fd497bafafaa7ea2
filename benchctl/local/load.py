"""``LoadPort`` on this machine: real AIPerf as a local process (group).

``launch`` runs the venv's ``aiperf`` console script (the one next to ``sys.executable``; falls back to
``python -m aiperf``) with the given arguments; when they start with an option rather than a
sub-command, ``profile`` is put in front (``aiperf --isl 64 ...`` is not a valid command line).
The tokenizer environment of ``modeldir.tokenizer_env()`` is merged in (HF_HOME pointing at the
generated hub cache, offline mode), so ``--tokenizer Qwen/Qwen3-30B-A3B`` resolves without a network.

The log (AIPerf's stdout+stderr) goes NEXT TO the artifact directory, to
``<artifact_dir>/../<job_id>.aiperf.log``, so that the artifact directory holds only what AIPerf
writes (AIPerf keeps its own detailed log in ``<artifact_dir>/logs/aiperf.log``).

AIPerf spawns several service processes; they stay in the process group of the session that
``processes.start`` creates, so ``stop`` (and ``poll`` once AIPerf ended) signal the whole group.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchctl.local import modeldir, processes
from benchctl.ports import JSON, LoadRequest

_STOP_GRACE_S = 10.0  # AIPerf shuts its services down on SIGTERM; SIGKILL the group after this


def aiperf_command() -> list[str]:
    script = Path(sys.executable).parent / "aiperf"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "aiperf"]


def _result_exists(artifact_dir: str) -> bool:
    return (Path(artifact_dir) / "profile_export_aiperf.json").is_file()


class LocalLoad:
    """AIPerf processes on this machine; states are JSON-able and can be polled from another process."""

    def launch(self, request: LoadRequest) -> JSON:
        """Start AIPerf with the request's arguments; its artifacts go to ``request.artifact_uri`` (a
        directory: the local lake's raw area of the step)."""
        args = list(request.argv)
        artifact_dir, job_id = request.artifact_uri, request.job_id
        if not args or args[0].startswith("-"):
            args = ["profile", *args]
        adir = Path(artifact_dir).resolve()
        adir.mkdir(parents=True, exist_ok=True)
        log = adir.parent / f"{job_id}.aiperf.log"
        modeldir.ensure_model_dir()
        # AIPerf caches datasets under ~/.cache/aiperf by default: nothing outside our directories
        env = {**modeldir.tokenizer_env(), "PYTHONUNBUFFERED": "1", "AIPERF_DATASET_MMAP_CACHE_ENABLED": "false"}
        rec = processes.start(f"aiperf-{job_id}", [*aiperf_command(), *args], env, log, cwd=adir.parent)
        return {"job_id": job_id, "artifact_dir": str(adir), "log": str(log), "process": rec}

    def poll(self, state: JSON) -> int | None:
        """None while AIPerf runs, else its exit code.

        If the process was started by another Python process its exit code is unknown here; then 0 is
        reported when AIPerf wrote its summary (``profile_export_aiperf.json``), else 1.
        """
        rec = state["process"]
        if processes.is_alive(rec):
            return None
        processes.stop([rec], grace_s=2.0)  # reap the leader and any straggling child of the group
        code = processes.exit_code(rec)
        if code is None:
            code = 0 if _result_exists(state["artifact_dir"]) else 1
        return code

    def stop(self, state: JSON) -> None:
        """Terminate AIPerf and all its child processes now; idempotent."""
        processes.stop([state["process"]], grace_s=_STOP_GRACE_S)

    def failure_logs(self, state: JSON) -> JSON:
        """Nothing to collect: AIPerf's log stays next to its artifact directory (``state["log"]``)."""
        return {}
