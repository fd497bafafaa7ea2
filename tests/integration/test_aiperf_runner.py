"""The load runner with the real AIPerf 0.13.0 (no server needed): one start-up, one forked `aiperf` run per
request, each its own process group with a start and an exit record, and nothing left running after it
is stopped. AIPerf's own command-line check answers a bad option, so a run ends at once with AIPerf's code.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from benchctl.campaign.ports import LoadRequest
from benchctl.local import processes
from benchctl.local.load import LocalLoad, aiperf_command

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
            # AIPerf's own CPU, sampled from the fork to its end, also beside its artifacts for ingestion
            record = json.loads((Path(state["artifact_dir"]) / "runner-record.json").read_text())
            assert record["cpu"] == exit_record["cpu"] and record["exit_code"] == alone.returncode
            samples = exit_record["cpu"]["samples"]
            assert samples[0][0] == pytest.approx(exit_record["started_at"], abs=1e-3)
            assert samples[-1] == [pytest.approx(exit_record["ended_at"], abs=1e-3), exit_record["cpu_s"], None]
            assert exit_record["cpu_s"] > 0 and exit_record["cpu"]["cores"] >= 1
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


def test_aiperfs_dataset_files_live_under_the_runners_own_directory_and_go_with_it(tmp_path: Path) -> None:
    """AIPerf writes each run's dataset as memory-mapped files in aiperf_mmap_<id>/ (by default in the system's temp
    directory, where the directory stays after the run: one per step, thousands after a few campaigns): the runner
    gives it a directory of its own, removed when the runner stops."""
    import tempfile

    load = LocalLoad(tmp_path / "cache")
    try:
        state = load.launch(_unserved(tmp_path, "mmap"))
        assert _wait(load, state) != 0  # nobody serves: what matters is the dataset it wrote first
        own = Path(str(load._mmap_dir))
        written = sorted(own.glob("aiperf_mmap_*"))
        assert written, "AIPerf made no dataset directory under the runner's own"
        assert not any((Path(tempfile.gettempdir()) / d.name).exists() for d in written)
    finally:
        load.close()
    assert not own.exists()


def _unserved(tmp: Path, job: str) -> LoadRequest:
    """A run against an endpoint nobody serves (loopback port 9): AIPerf configures everything (tokenizer,
    dataset from the built-in corpus), sends, every request fails, and it exits non-zero."""
    return _request(tmp, job, [
        "profile", "--model", "Qwen/Qwen3-30B-A3B", "--tokenizer", "Qwen/Qwen3-30B-A3B", "--url", "http://127.0.0.1:9",
        "--endpoint-type", "chat", "--streaming", "--request-count", "4", "--concurrency", "1", "--ui-type", "none",
        "--synthetic-input-tokens-mean", "128", "--output-tokens-mean", "8", "--random-seed", "42",
        "--artifact-dir", str(tmp / "lake" / f"step_id={job}")])


def test_a_run_reuses_the_preloaded_tokenizer_and_corpus(tmp_path: Path) -> None:
    load = LocalLoad(tmp_path / "cache")
    try:
        state = load.launch(_unserved(tmp_path, "unserved"))
        assert _wait(load, state) != 0  # AIPerf's own verdict: every request failed
        log = (Path(state["artifact_dir"]) / "logs" / "aiperf.log").read_text()
        # the tokenizer is the runner's (memoised): no load at all in the run; the corpus tokens too
        tokenizer_s = float(log.split("Tokenizer(s) configured in ")[1].split(" ")[0])
        assert tokenizer_s < 0.5, tokenizer_s  # loading it takes 2-4.5 s on this kind of machine
        dataset_s = float(log.split("Dataset configured in ")[1].split(" ")[0])
        assert dataset_s < 3.0, dataset_s  # tokenizing the corpus alone takes 2.6-6 s on this kind of machine
    finally:
        load.close()


def test_the_safety_net_stops_a_runner_and_its_running_aiperf(tmp_path: Path) -> None:
    load = LocalLoad(tmp_path / "cache")
    state = load.launch(_unserved(tmp_path, "stopped"))
    runner = load.runner_record()
    assert runner is not None
    assert processes.is_alive(state["process"])  # AIPerf's start-up alone takes longer than this
    processes.stop_all_started()
    assert not processes.is_alive(runner) and not processes.is_alive(state["process"])
    assert not processes.group_members(int(state["process"]["pid"]))  # none of its services either
    assert load.poll(state) is not None


def test_the_load_jobs_runner_runs_each_step_when_its_request_appears_and_stops_one_past_its_deadline(
        tmp_path: Path) -> None:
    """The runner as the EKS load Job runs it (``python3 -c <benchctl/load_runner.py> --steps-dir DIR STEP...``)
    with the real AIPerf: each step starts when its request file appears, its exit code file carries AIPerf's
    own code, a step past its deadline is stopped with all its services (124), the Job's log shows a failed
    step's last lines, and the runner leaves by itself after the last step, beating ``alive`` meanwhile."""
    import os
    import signal
    import subprocess
    import sys

    from benchctl.aws.k8s.jobs import runner_source
    from benchctl.local.load import aiperf_env

    alone = subprocess.run([*aiperf_command(), "profile", "--no-such-option"], capture_output=True, text=True,
                           timeout=120, check=False)
    work = tmp_path / "artifacts"
    work.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", runner_source(), "--steps-dir", str(work), "s1", "s2"],
                            env={**os.environ, **aiperf_env()}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        def request(step: str, argv: list[str], deadline_s: float) -> Path:
            (work / step).mkdir()
            tmp = work / step / "request.part"
            tmp.write_text(json.dumps({"argv": argv, "deadline_s": deadline_s}))
            tmp.rename(work / step / "request.json")  # as the control container hands it over
            deadline = time.monotonic() + 120
            while not (work / step / "exit_code").exists():
                assert time.monotonic() < deadline and proc.poll() is None, f"step {step} did not end"
                time.sleep(0.05)
            return work / step

        time.sleep(1.0)
        assert not (work / "s1" / "exit_code").exists()  # nothing runs before its request
        s1 = request("s1", ["profile", "--no-such-option"], 60.0)
        assert int((s1 / "exit_code").read_text()) == alone.returncode
        assert "no-such-option" in (s1 / "aiperf.log").read_text()  # AIPerf's own error, in the step's log
        cpu = json.loads((s1 / "out" / "runner-record.json").read_text())["cpu"]  # uploaded: AIPerf's CPU
        assert cpu["samples"][-1][1] > 0 and cpu["cores"] >= 1
        s2_out = work / "s2" / "out"
        s2 = request("s2", [*_unserved(tmp_path, "s2").argv[:-1], str(s2_out)], 1.5)
        assert int((s2 / "exit_code").read_text()) == 124  # past its deadline: stopped
        started = json.loads((s2 / "started.json").read_text())
        assert not processes.group_members(int(started["pid"]))  # AIPerf and all its services are gone
        assert proc.wait(timeout=60) == 0  # the last step done: the runner leaves
        out = proc.stdout.read() if proc.stdout else ""
        assert f"step s1: AIPerf exited {alone.returncode}" in out and "step s2: past its deadline" in out
        assert (work / "alive").is_file() and s2_out.is_dir()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _steps_runner(work: Path, *steps: str) -> subprocess.Popen[str]:
    import os
    import sys

    from benchctl.aws.k8s.jobs import runner_source
    from benchctl.local.load import aiperf_env

    return subprocess.Popen([sys.executable, "-c", runner_source(), "--steps-dir", str(work), *steps],
                            env={**os.environ, **aiperf_env()}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _hand_over(work: Path, step: str, argv: list[str], deadline_s: float = 120.0) -> None:
    (work / step).mkdir(exist_ok=True)
    (work / step / "request.part").write_text(json.dumps({"argv": argv, "deadline_s": deadline_s}))
    (work / step / "request.part").rename(work / step / "request.json")


def test_the_load_jobs_runner_stops_its_run_and_leaves_when_the_control_container_ended(tmp_path: Path) -> None:
    """The control container's way out (``control.ended``, RUNNER_CONTROL_SCRIPT's ``finish``) while AIPerf
    runs: the runner stops the run with all its services and leaves non-zero, so the pod ends too."""
    import os
    import signal

    work = tmp_path / "artifacts"
    work.mkdir()
    proc = _steps_runner(work, "s1", "s2")
    try:
        _hand_over(work, "s1", [*_unserved(tmp_path, "s1").argv[:-1], str(work / "s1" / "out")])
        deadline = time.monotonic() + 120
        while not (work / "s1" / "started.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the step never started"
            time.sleep(0.05)
        started = json.loads((work / "s1" / "started.json").read_text())
        assert processes.group_members(int(started["pid"]))  # AIPerf runs
        (work / "control.ended").write_text("97 LoadUploadFailed\n")
        assert proc.wait(timeout=60) == 1
        assert not processes.group_members(int(started["pid"]))  # AIPerf and all its services are gone
        out = proc.stdout.read() if proc.stdout else ""
        assert "step s1: the control container ended (97 LoadUploadFailed): stopping" in out
        assert not (work / "s1" / "exit_code").exists()  # no end of its own: the control container said why
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_load_jobs_runner_leaves_its_last_words_for_the_control_container_when_it_fails(tmp_path: Path) -> None:
    """A runner that cannot go on (here: the step's output directory cannot be made) writes why to
    ``runner.ended`` before it leaves, where the control container reads it (LoadRunnerDied, at once)."""
    import os
    import signal

    work = tmp_path / "artifacts"
    work.mkdir()
    proc = _steps_runner(work, "s1")
    try:
        (work / "s1").mkdir()
        (work / "s1" / "out").write_text("a file where the runner makes a directory")
        _hand_over(work, "s1", ["profile", "--no-such-option"])
        assert proc.wait(timeout=120) != 0
        last = (work / "runner.ended").read_text()
        assert last.startswith("FileExistsError:") and "out" in last
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
