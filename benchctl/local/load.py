"""``LoadPort`` on this machine: real AIPerf runs, forked by one load runner per campaign.

``launch`` sends the step's arguments to the load runner (``benchctl.load_runner``), which the
first launch starts with the venv's Python; the runner forks one ordinary ``aiperf profile`` run per
request, sharing only the start-up that does not depend on the step (imports, tokenizer, corpus tokens).
When the arguments start with an option rather than a sub-command, ``profile`` is put in front
(``aiperf --isl 64 ...`` is not a valid command line). The tokenizer environment of
``modeldir.tokenizer_env()`` (HF_HOME pointing at the generated hub cache, offline mode) is the runner's,
so ``--tokenizer Qwen/Qwen3-30B-A3B`` resolves without a network.

The log (AIPerf's stdout+stderr) goes NEXT TO the artifact directory, to
``<artifact_dir>/../<job_id>.aiperf.log``, so that the artifact directory holds what AIPerf writes (AIPerf
keeps its own detailed log in ``<artifact_dir>/logs/aiperf.log``) and, as on EKS, the runner's
``runner-record.json`` (the run's exit code and AIPerf's own CPU use, which ingestion reads:
``benchctl.lake.client_load``); the runner's start and end records of the run go next to it
(``<job_id>.aiperf.started.json``, ``<job_id>.aiperf.exit.json``).

Processes: the runner is started like every process of the local engine (``processes.start``, its own
session). Each forked AIPerf run leads its own process group, whose record (pid and start time) is the
load's state: ``stop`` (and ``poll`` once AIPerf ended) signal that whole group, also from another process;
this process also adopts the record, so its safety net (``processes.stop_all_started``) stops it too.
The runner stops its runs and exits when it is stopped or when this process goes away (its stdin closes).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchctl.campaign.ports import JSON, LoadRequest
from benchctl.errors import LoadFailed
from benchctl.lake.ingest.base import RUNNER_RECORD
from benchctl.local import loopback, modeldir, processes

_STOP_GRACE_S = 10.0  # AIPerf shuts its services down on SIGTERM; SIGKILL the group after this
_RUNNER_READY_S = 180.0  # the runner's one start-up (imports, tokenizer, corpus) on a loaded 2-core machine
_EXIT_RECORD_S = 2.0  # after the run's group is gone, how long the runner may take to write its exit record


def aiperf_command() -> list[str]:
    script = Path(sys.executable).parent / "aiperf"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "aiperf"]


SERVER_METRICS_FLUSH_S = 0.5


def aiperf_env() -> dict[str, str]:
    """The environment of every AIPerf run (fixed for the runner's lifetime: AIPerf reads it at import).
    AIPerf caches datasets under ~/.cache/aiperf by default: nothing outside our directories.

    AIPerf scrapes the server's ``/metrics`` once more this long after the last response (default 2 s, for
    exporters that refresh on an interval). Dynamo's frontend and mocker workers update their counters as
    each request completes, so locally 0.5 s loses nothing: ``bench/local_campaign.py`` checks, step for
    step, that the final scrape counted every request the step sent, at the frontend and at every worker."""
    return {**modeldir.tokenizer_env(), "PYTHONUNBUFFERED": "1", "AIPERF_DATASET_MMAP_CACHE_ENABLED": "false",
            "AIPERF_SERVER_METRICS_COLLECTION_FLUSH_PERIOD": str(SERVER_METRICS_FLUSH_S)}


def _result_exists(artifact_dir: str) -> bool:
    return (Path(artifact_dir) / "profile_export_aiperf.json").is_file()


def _read_json(path: Path) -> JSON | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class LocalLoad:
    """AIPerf runs on this machine; states are JSON-able and can be polled or stopped from another process.

    ``log_dir``: where the runner's own log goes (the engine's workspace cache)."""

    def __init__(self, log_dir: Path | None = None) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self._mmap_dir: str | None = None
        self._runner: JSON | None = None
        self._pipe: Any = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------- the runner

    def _ensure_runner(self, log: Path | None = None) -> JSON:
        if self._runner is not None and processes.is_alive(self._runner):
            return self._runner
        if self.log_dir is None and log is None:
            raise ValueError("the load runner needs a log directory (LocalLoad(log_dir)) or a step's log")
        log_path = (self.log_dir / "aiperf-runner.log") if self.log_dir else Path(str(log)).parent / "aiperf-runner.log"
        # AIPerf's services talk over IPC; the shim keeps any TCP listener it may open on loopback too
        # AIPerf writes each run's dataset as memory-mapped files under aiperf_mmap_<id>/ in its base path
        # (default: the system's temp directory, where the emptied directory stays: one a step, thousands after
        # a few campaigns): under a directory of the runner's own, removed with it (close)
        self._mmap_dir = self._mmap_dir or tempfile.mkdtemp(prefix="benchctl-aiperf-mmap-")
        env = {**aiperf_env(), **loopback.preload_env(), "BENCHCTL_RUNNER_TOKENIZER": modeldir.TOKENIZER_NAME,
               "AIPERF_DATASET_MMAP_BASE_PATH": self._mmap_dir}
        rec = processes.start("aiperf-runner", [sys.executable, "-m", "benchctl.load_runner"], env,
                              log_path, stdin_pipe=True)
        self._runner, self._pipe = rec, processes.stdin_of(rec)
        return rec

    def prepare(self) -> JSON:
        """Start the runner now, so that its one start-up overlaps what comes before the first load (plan,
        scaling, deploy, readiness); returns its record at once. Needs ``log_dir``."""
        with self._lock:
            return dict(self._ensure_runner())

    def runner_record(self) -> JSON | None:
        return dict(self._runner) if self._runner else None

    def close(self) -> None:
        """Stop the runner (and whatever it still runs); idempotent."""
        with self._lock:
            if self._runner is not None:
                processes.stop([self._runner], grace_s=_STOP_GRACE_S + 5)
            self._runner, self._pipe = None, None
            if self._mmap_dir is not None:  # the runner and its runs are stopped: their datasets go too
                shutil.rmtree(self._mmap_dir, ignore_errors=True)
                self._mmap_dir = None

    # ------------------------------------------------------------------------------------ the port

    def launch(self, request: LoadRequest) -> JSON:
        """Start AIPerf with the request's arguments; its artifacts go to ``request.artifact_uri`` (a
        directory: the local lake's raw area of the step). Returns once the run is forked."""
        args = list(request.argv)
        artifact_dir, job_id = request.artifact_uri, request.job_id
        if not args or args[0].startswith("-"):
            args = ["profile", *args]
        adir = Path(artifact_dir).resolve()
        adir.mkdir(parents=True, exist_ok=True)
        log = adir.parent / f"{job_id}.aiperf.log"
        started, exit_file = adir.parent / f"{job_id}.aiperf.started.json", adir.parent / f"{job_id}.aiperf.exit.json"
        record = adir / RUNNER_RECORD
        for f in (started, exit_file, record):
            f.unlink(missing_ok=True)
        modeldir.ensure_model_dir()
        req = {"job_id": job_id, "argv": args, "log": str(log), "cwd": str(adir.parent), "started": str(started),
               "exit": str(exit_file), "record": str(record)}
        with self._lock:
            runner = self._ensure_runner(log)
            self._pipe.write((json.dumps(req) + "\n").encode())
            self._pipe.flush()
            deadline = time.monotonic() + _RUNNER_READY_S
            while (rec := _read_json(started)) is None:
                if not processes.is_alive(runner):
                    raise LoadFailed(f"the AIPerf load runner exited before it started {job_id}; see {runner['log']}")
                if time.monotonic() > deadline:
                    raise LoadFailed(f"the AIPerf load runner did not start {job_id} within {_RUNNER_READY_S:.0f} s; "
                                     f"see {runner['log']}")
                time.sleep(0.005)
        proc = {"name": f"aiperf-{job_id}", "pid": int(rec["pid"]), "start_time": int(rec["start_time"]),
                "log": str(log), "cmd": ["aiperf", *args]}
        processes.adopt(proc)
        return {"job_id": job_id, "artifact_dir": str(adir), "log": str(log), "process": proc,
                "exit_record": str(exit_file), "runner": dict(runner)}

    def poll(self, state: JSON) -> int | None:
        """None while AIPerf runs, else its exit code (the runner's record of it).

        Without that record (a runner gone with its run), 0 is reported when AIPerf wrote its summary
        (``profile_export_aiperf.json``), else 1."""
        rec = state["process"]
        if processes.is_alive(rec):
            return None
        processes.stop([rec], grace_s=2.0)  # any straggling service of the group
        exit_file = Path(state["exit_record"]) if state.get("exit_record") else None
        deadline = time.monotonic() + _EXIT_RECORD_S
        while exit_file is not None:
            done = _read_json(exit_file)
            if done is not None:
                return int(done["exit_code"])
            runner = state.get("runner")
            if not runner or not processes.is_alive(runner) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        code = processes.exit_code(rec)
        if code is None:
            code = 0 if _result_exists(state["artifact_dir"]) else 1
        return code

    def ended_at(self, state: JSON) -> float | None:
        """When the AIPerf run's process ended (the runner's record), or None."""
        done = _read_json(Path(state["exit_record"])) if state.get("exit_record") else None
        return float(done["ended_at"]) if done else None

    def stop(self, state: JSON) -> None:
        """Terminate AIPerf and all its child processes now; idempotent."""
        processes.stop([state["process"]], grace_s=_STOP_GRACE_S)

    def observe(self, state: JSON) -> JSON:
        """Read AIPerf's process back by its pid and start time (``/proc``)."""
        rec = state["process"]
        alive = processes.is_alive(rec)
        return {"kind": "process", "name": f"aiperf {state.get('job_id') or ''} (pid {rec['pid']})".replace("  ", " "),
                "pid": int(rec["pid"]), "present": alive, "why": "still running after teardown" if alive else ""}

    def failure_logs(self, state: JSON) -> JSON:
        """Nothing to collect: AIPerf's log stays next to its artifact directory (``state["log"]``)."""
        return {}

    def pending(self, state: JSON) -> str | None:
        """Never: the runner forked the run before ``launch`` returned."""
        return None
