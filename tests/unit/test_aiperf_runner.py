"""The load runner with the real AIPerf 0.13.0 (no server needed): one start-up, one forked `aiperf` run per
request, each its own process group with a start and an exit record, and nothing left running after it
is stopped. AIPerf's own command-line check answers a bad option, so a run ends at once with AIPerf's code.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from benchctl.local import processes
from benchctl.local.load import LocalLoad, aiperf_command
from benchctl.ports import LoadRequest

pytestmark = pytest.mark.timeout(300)


def _request(tmp: Path, job: str, argv: list[str]) -> LoadRequest:
    return LoadRequest(campaign_id="c", experiment="agg", step_id=job, argv=tuple(argv),
                       artifact_uri=str(tmp / "lake" / f"step_id={job}"), input_uri=None, est_s=1.0)


def _wait(load: LocalLoad, state: dict, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while (code := load.poll(state)) is None:
        assert time.monotonic() < deadline, "the forked AIPerf run did not end"
        time.sleep(0.05)
    return code


def test_forked_runs_end_with_aiperfs_own_exit_code_and_nothing_is_left(tmp_path: Path) -> None:
    import subprocess

    # what a separate `aiperf` process answers to the same bad command line
    alone = subprocess.run([*aiperf_command(), "profile", "--no-such-option"], capture_output=True, text=True,
                           timeout=120, check=False)
    assert alone.returncode != 0
    load = LocalLoad(tmp_path / "cache")
    try:
        prepared = load.prepare()  # started ahead of the first launch, which then uses it
        states = []
        for job in ("a", "b"):  # two runs from the one runner, one after the other
            state = load.launch(_request(tmp_path, job, ["--no-such-option"]))
            rec = state["process"]
            assert rec["pid"] != state["runner"]["pid"] and rec["start_time"] > 0
            assert _wait(load, state) == alone.returncode
            exit_record = json.loads(Path(state["exit_record"]).read_text())
            assert exit_record["exit_code"] == alone.returncode
            assert exit_record["ended_at"] >= exit_record["started_at"]
            assert load.ended_at(state) == exit_record["ended_at"]
            log = Path(state["log"]).read_text()
            assert log.startswith(f"[benchctl] starting aiperf-agg-{job} (forked by the load runner)")
            assert "no-such-option" in log  # AIPerf's own error message went to the step's log
            states.append(state)
        assert states[0]["runner"] == states[1]["runner"] == prepared  # one start-up for both
        runner = load.runner_record()
        assert runner is not None and processes.is_alive(runner)
        ready = Path(runner["log"]).read_text()
        assert '"ready": true' in ready and '"corpus": true' in ready  # tokenizer and corpus preloaded
        # every forked run is known to the safety net
        assert {s["process"]["pid"] for s in states} <= {r["pid"] for r in processes.started()}
    finally:
        load.close()
    assert not processes.is_alive(runner)
    assert all(not processes.is_alive(s["process"]) for s in states)


def test_the_safety_net_stops_a_runner_and_its_runs(tmp_path: Path) -> None:
    load = LocalLoad(tmp_path / "cache")
    # a run that stays up: AIPerf waits for an endpoint nobody serves (port 9 on loopback: discard)
    state = load.launch(_request(tmp_path, "hang", [
        "profile", "--model", "m", "--url", "http://127.0.0.1:9", "--endpoint-type", "chat", "--streaming",
        "--request-count", "1000", "--concurrency", "1", "--ui-type", "none",
        "--tokenizer", "Qwen/Qwen3-30B-A3B"]))
    runner = load.runner_record()
    assert runner is not None
    stopped = processes.stop_all_started()
    assert isinstance(stopped, list)
    assert not processes.is_alive(runner) and not processes.is_alive(state["process"])
    assert not processes.group_members(int(state["process"]["pid"]))
    assert load.poll(state) is not None
