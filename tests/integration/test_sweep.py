"""`benchctl sweep`: a local campaign whose runner died with real Dynamo processes up, its pool scaled and
its lock held is torn down by the sweeper; a running one is left alone."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("dynamo.frontend")

from benchctl import campaign
from benchctl.local.runner import LocalProviders, campaign_running, prepare
from tests.e2e.conftest import leftovers, read_table

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_tears_down_what_a_dead_campaign_left(tmp_path):
    out = tmp_path / "ws"
    cid, run_dir, lake = prepare(ROOT / "examples" / "smoke.yaml", out, "dead-1")
    ctx = campaign.Ctx(cid, str(run_dir), str(lake), 1, None)
    p = LocalProviders(run_dir, lake)(ctx)
    campaign.plan(p, {"input": {"ctx": ctx.to_json()}, "state": "Plan"})
    campaign.scale_pools(p, ctx, "agg")
    campaign.deploy(p, ctx, "agg")
    deadline = time.time() + 60
    while not campaign.check_ready(p, ctx, "agg")["done"]:
        assert time.time() < deadline, "deployment not ready"
        time.sleep(1)
    assert leftovers(run_dir), "the deployment's processes should be up"
    # the runner "died": its pid is gone and it wrote no result
    (run_dir / "runner.json").write_text(json.dumps({"pid": _dead_pid()}))
    assert campaign_running(run_dir) is False
    # a second, still running campaign in the same workspace must be left alone
    _, live_dir, _ = prepare(ROOT / "examples" / "smoke.yaml", out, "live-1")
    (live_dir / "runner.json").write_text(json.dumps({"pid": __import__("os").getpid()}))

    dry = subprocess.run([sys.executable, "-m", "benchctl.cli", "sweep", "--out", str(out), "--dry-run"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert dry.returncode == 0 and "dead-1: would tear down (experiments: agg)" in dry.stdout
    assert leftovers(run_dir)  # a dry run changes nothing

    res = subprocess.run([sys.executable, "-m", "benchctl.cli", "sweep", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "dead-1: swept (experiments: agg)" in res.stdout
    assert "live-1: left alone: still running" in res.stdout
    assert leftovers(run_dir) == []
    pools = json.loads((run_dir / "pools" / "agg.json").read_text())
    assert pools["restored"] and pools["restored"][0]["now"]["desired"] == 0
    assert not list((out / "locks").glob("*.json"))  # the dead campaign's lock is released
    status = {r["campaign_id"]: (r["status"], r["error"]) for r in read_table(lake, "campaigns")}
    assert status["dead-1"] == ("failed", "Swept")
    again = subprocess.run([sys.executable, "-m", "benchctl.cli", "sweep", "--out", str(out)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "dead-1: nothing left" in again.stdout
