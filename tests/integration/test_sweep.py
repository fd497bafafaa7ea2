"""`benchctl sweep`: a local campaign whose runner died with real Dynamo processes up, its pool scaled and
its lock held is torn down by the sweeper; a running one is left alone."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("dynamo.frontend")

from benchctl import campaign
from benchctl.campaign import Task
from benchctl.campaign.context import start_context
from benchctl.campaign.records import RunnerRecord
from benchctl.campaign.runstate import RunState
from benchctl.local.runner import LocalEngine, campaign_running, prepare
from benchctl.local.runstore import LocalRunStore
from tests.e2e.conftest import leftovers, read_table

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_tears_down_what_a_dead_campaign_left(tmp_path):
    out = tmp_path / "ws"
    start, _ = prepare(ROOT / "examples" / "smoke.yaml", out, "dead-1")
    engine = LocalEngine(out)
    ctx = start_context(start, None, runs_uri=engine.runs_uri, lake_uri=engine.lake_uri)
    run_dir, lake = Path(ctx.run_uri), Path(ctx.lake_uri)
    p = engine.providers(ctx)
    campaign.plan(p, ctx, Task(state="Plan", input=start.to_json()))
    campaign.scale_pools(p, ctx, Task("agg"))
    campaign.deploy(p, ctx, Task("agg"))
    deadline = time.time() + 60
    while not campaign.check_ready(p, ctx, Task("agg"))["done"]:
        assert time.time() < deadline, "deployment not ready"
        time.sleep(1)
    assert leftovers(run_dir), "the deployment's processes should be up"
    # the runner "died": its pid is gone and it wrote no result
    RunState(LocalRunStore(run_dir)).save_runner(RunnerRecord(pid=_dead_pid(), start_time=None, started=""))
    assert campaign_running(run_dir) is False
    # a second, still running campaign in the same workspace must be left alone
    prepare(ROOT / "examples" / "smoke.yaml", out, "live-1")
    RunState(LocalRunStore(engine.run_dir("live-1"))).save_runner(
        RunnerRecord(pid=__import__("os").getpid(), start_time=None, started=""))

    dry = subprocess.run([sys.executable, "-m", "benchctl.cli.main", "sweep", "--out", str(out), "--dry-run"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert dry.returncode == 0 and "dead-1: would tear down (experiments: agg)" in dry.stdout
    assert leftovers(run_dir)  # a dry run changes nothing

    res = subprocess.run([sys.executable, "-m", "benchctl.cli.main", "sweep", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "dead-1: swept (experiments: agg)" in res.stdout
    assert "live-1: left alone: still running" in res.stdout
    assert leftovers(run_dir) == []
    pools = RunState(LocalRunStore(run_dir)).pools("agg")
    assert pools is not None and pools.restored and pools.restored[0]["now"]["desired"] == 0
    assert not list((out / "locks").glob("*.json"))  # the dead campaign's lock is released
    status = {r["campaign_id"]: (r["status"], r["error"]) for r in read_table(lake, "campaigns")}
    assert status["dead-1"] == ("failed", "Swept")
    again = subprocess.run([sys.executable, "-m", "benchctl.cli.main", "sweep", "--out", str(out)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "dead-1: nothing left" in again.stdout
