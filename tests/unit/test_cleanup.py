"""Cleanup that a bug in one item cannot take down: teardown and abort attempt every item (stop the
load, remove the deployment, restore each pool, write costs and the campaign record, release the locks)
even when one raises; the first error is the one raised, the others are recorded. And the sweeper,
which touches only what a dead campaign left: never a finished campaign, never a pool handed over to
the next experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchctl import campaign
from benchctl.campaign import Task, sweep
from benchctl.campaign.context import Ctx
from benchctl.campaign.locks import lock_keys
from benchctl.campaign.ports import Providers
from benchctl.campaign.records import DeploymentRecord, FailureRecord, LoadRecord
from benchctl.local.lake import LocalLake
from benchctl.local.locks import FileLocks
from benchctl.local.pool import LocalPool
from benchctl.spec.model import parse_spec
from tests.fakes.ports import providers_for_test
from tests.unit.test_fail_at_every_state import read_table, run

ROOT = Path(__file__).resolve().parents[2]


class Serving:
    def prepare(self, request):
        pass

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.torn: list[str] = []

    def teardown(self, state):
        if self.fail:
            raise RuntimeError("the serving API is down")
        self.torn.append(state["deployment_id"])
        return {"removed": True}


class Load:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.stopped: list[str] = []

    def stop(self, state):
        if self.fail:
            raise RuntimeError("cannot signal the load")
        self.stopped.append(state["job_id"])

    def poll(self, state):
        return -15


class FailingPool(LocalPool):
    def __init__(self, sizes, fail: set[str]) -> None:
        super().__init__(sizes)
        self.fail = fail

    def restore(self, record):
        if record["pool"] in self.fail:
            raise RuntimeError(f"node group {record['pool']} update rejected")
        return super().restore(record)


class BrokenLake(LocalLake):
    """A lake whose writes of some tables fail (an outage, a schema bug)."""

    def __init__(self, root, broken: set[str]) -> None:
        super().__init__(root)
        self.broken = broken

    def write(self, table, rows, *, part_name):
        if table in self.broken:
            raise OSError(f"cannot write {table}")
        return super().write(table, rows, part_name=part_name)


def _world(tmp_path: Path, *, serving=None, load=None, pool=None, lake=None) -> tuple[Providers, Ctx]:
    spec = parse_spec(yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text()))
    p = providers_for_test(tmp_path / "run", lake or LocalLake(tmp_path / "lake"), spec=spec,
                           pools=pool or LocalPool({"gpu-a100": 0}), serving=serving or Serving(), load=load or Load(),
                           locks=FileLocks(tmp_path / "locks"))
    ctx = Ctx("c1", str(tmp_path / "run"), str(tmp_path / "lake"), 1, None)
    p.locks.acquire(lock_keys(spec), "c1", 3600)
    return p, ctx


def _started(p: Providers, ctx: Ctx, exp: str = "agg") -> None:
    """An experiment with its pool scaled, its deployment up and its first step's load running."""
    campaign.scale_pools(p, ctx, Task(exp))
    p.state.save_deployment(exp, DeploymentRecord(state={"deployment_id": exp}, deployed_at=0))
    p.state.save_load(exp, "concurrency-sweep-c1-r0", LoadRecord(state={"job_id": f"{exp}-c1"}, launched_at=0, est_s=1))


def test_a_failing_deployment_teardown_still_stops_the_load_and_restores_the_pool(tmp_path):
    serving = Serving(fail=True)
    p, ctx = _world(tmp_path, serving=serving)
    _started(p, ctx)
    with pytest.raises(RuntimeError, match="the serving API is down"):
        campaign.teardown_experiment(p, ctx, Task("agg"))
    assert p.load.stopped == ["agg-c1"]  # type: ignore[attr-defined]
    assert p.pools.current("gpu-a100")["desired"] == 0  # type: ignore[attr-defined]
    assert p.state.pools("agg").restored[0]["pool"] == "gpu-a100"
    events = [r["event"] for r in p.lake.read_table("timeline", "c1")]
    assert "pool_restored" in events and "teardown_done" not in events  # not done: a retry finishes it
    serving.fail = False
    campaign.teardown_experiment(p, ctx, Task("agg"))  # the retry: only what is left
    assert serving.torn == ["agg"] and "teardown_done" in [r["event"] for r in p.lake.read_table("timeline", "c1")]


def test_a_failing_load_stop_does_not_keep_the_gpus(tmp_path):
    p, ctx = _world(tmp_path, load=Load(fail=True))
    _started(p, ctx)
    with pytest.raises(RuntimeError, match="cannot signal the load"):
        campaign.teardown_experiment(p, ctx, Task("agg"))
    assert p.serving.torn == ["agg"]  # type: ignore[attr-defined]
    assert p.pools.current("gpu-a100")["desired"] == 0  # type: ignore[attr-defined]


def test_abort_attempts_every_item_and_keeps_the_first_error(tmp_path):
    lake = BrokenLake(tmp_path / "lake", broken=set())
    p, ctx = _world(tmp_path, lake=lake)
    _started(p, ctx)
    p.state.record_failure(FailureRecord(state="CheckLoad", error="LoadFailed", message="step died"))
    lake.broken = {"costs", "campaigns"}  # the lake fails for the cost rows and the campaign record
    with pytest.raises(OSError, match=r"cannot write costs .*cleanup item 'costs'; 1 more cleanup error"):
        campaign.abort_campaign(p, ctx, Task(error={"Error": "LoadFailed", "Cause": "step died"}))
    assert p.load.stopped == ["agg-c1"] and p.serving.torn == ["agg"]  # type: ignore[attr-defined]
    assert p.pools.current("gpu-a100")["desired"] == 0  # type: ignore[attr-defined]
    assert not list((tmp_path / "locks").glob("*.json"))  # the locks were released all the same
    errors = [json.loads(r["detail_json"]) for r in lake.read_table("timeline", "c1") if r["event"] == "cleanup_error"]
    assert [(e["item"], e["error"]) for e in errors] == [("campaign record", "OSError")]
    assert campaign.unrestored_pools(p) == {}


def test_the_lock_of_a_pool_that_could_not_be_restored_is_kept(tmp_path):
    """Releasing it would let another campaign record our scaled size as its 'previous' size."""
    p, ctx = _world(tmp_path, pool=FailingPool({"gpu-a100": 0}, fail={"gpu-a100"}))
    _started(p, ctx)
    with pytest.raises(RuntimeError, match="update rejected"):
        campaign.abort_campaign(p, ctx, Task(error={"Error": "ServingFailed", "Cause": "x"}))
    assert campaign.unrestored_pools(p) == {"agg": {"gpu-a100"}}
    assert [f.name for f in (tmp_path / "locks").glob("*.json")] == ["local__gpu-a100.json"]
    camp = p.lake.read_table("campaigns", "c1")
    assert [(c["status"], c["error"]) for c in camp] == [("failed", "ServingFailed")]  # recorded anyway
    p.pools.fail = set()  # type: ignore[attr-defined]
    campaign.abort_campaign(p, ctx, Task(error={"Error": "ServingFailed", "Cause": "x"}))  # the retry restores, releases
    assert campaign.unrestored_pools(p) == {} and not list((tmp_path / "locks").glob("*.json"))


def test_a_handed_over_pool_is_the_next_experiments_to_restore(tmp_path):
    p, ctx = _world(tmp_path)
    campaign.scale_pools(p, ctx, Task("agg"))
    campaign.teardown_experiment(p, ctx, Task("agg"), handover=True)
    assert campaign.unrestored_pools(p) == {"agg": {"gpu-a100"}}  # handed over, not adopted yet: still agg's
    campaign.scale_pools(p, ctx, Task("disagg"))
    assert campaign.unrestored_pools(p) == {"disagg": {"gpu-a100"}}
    campaign.teardown_experiment(p, ctx, Task("disagg"), handover=True)
    assert campaign.unrestored_pools(p) == {}
    assert sweep.leftovers(p) == []


def _tree(root: Path) -> dict[str, float]:
    return {str(f.relative_to(root)): f.stat().st_mtime_ns for f in root.rglob("*") if f.is_file()}


def test_the_sweeper_leaves_a_succeeded_campaign_alone(tmp_path, monkeypatch):
    result, world, _, _ = run(tmp_path, monkeypatch, fail_at=None)
    assert result.status == "SUCCEEDED"
    out = tmp_path / "out"
    events = {(r["experiment"], r["event"]) for r in read_table(out / "lake", "timeline")}
    assert ("agg", "pool_handed_over") in events  # the case that used to count as "never restored"
    before = _tree(out)

    def providers_for(cid):
        c = Ctx(cid, str(out / "campaigns" / cid), str(out / "lake"), 1, None)
        return world.providers(c), c

    dry = sweep.sweep(["failat"], providers_for, lambda cid: False, dry_run=True)
    assert dry == [{"campaign_id": "failat", "experiments": [], "action": "nothing left"}]
    real = sweep.sweep(["failat"], providers_for, lambda cid: False)
    assert real[0]["action"] == "nothing left" and real[0]["experiments"] == []
    assert _tree(out) == before  # not one byte written into the finished campaign


class Identity:
    """The campaign's runner identity port: what was asked of it."""

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.released = fail, []

    def ensure(self) -> float:
        return 60.0

    def release(self, service_account: bool = True) -> list[str]:
        if self.fail:
            raise RuntimeError("EKS is down")
        self.released.append(service_account)
        return ["pod identity association a-1"] + (["ServiceAccount/c1"] if service_account else [])


@pytest.mark.parametrize(("path", "service_account"), [("abort", True), ("plan failed", True), ("report", False)])
def test_every_end_path_removes_the_runner_identity(tmp_path, path, service_account):
    """Abort, a failed Plan and the Report each remove the campaign's runner identity (its Pod Identity
    association, and its service account where the function calls Kubernetes: not Report's)."""
    p, ctx = _world(tmp_path)
    p.identity = Identity()
    if path == "abort":
        _started(p, ctx)
        campaign.abort_campaign(p, ctx, Task(error={"Error": "LoadFailed", "Cause": "step died"}))
    elif path == "plan failed":
        campaign.plan_failed(p, ctx, Task(error={"Error": "PreflightFailed", "Cause": "x"}))
    else:
        campaign.report(p, ctx, Task(state="Report"))
    assert p.identity.released == [service_account]  # type: ignore[attr-defined]


def test_a_failing_identity_removal_is_recorded_and_the_rest_of_the_abort_goes_on(tmp_path):
    p, ctx = _world(tmp_path)
    p.identity = Identity(fail=True)
    _started(p, ctx)
    with pytest.raises(RuntimeError, match="EKS is down"):
        campaign.abort_campaign(p, ctx, Task(error={"Error": "LoadFailed", "Cause": "step died"}))
    assert not list((tmp_path / "locks").glob("*.json"))  # the locks were released all the same
    assert p.load.stopped == ["agg-c1"] and p.serving.torn == ["agg"]  # type: ignore[attr-defined]
    record = p.state.campaign()
    assert record is not None and (record.status, record.error) == ("failed", "LoadFailed")
