"""The per-step budget guard: accrued cost + the remaining estimate over budget.max_usd aborts before
the step starts, and says why."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchctl import campaign
from benchctl.campaign import Task
from benchctl.context import Ctx
from benchctl.errors import BudgetExceeded
from benchctl.local.lake import LocalLake
from benchctl.local.pool import LocalPool
from benchctl.ports import Providers
from benchctl.runstate import DeploymentRecord
from benchctl.spec import parse_spec
from tests.fakes.ports import FakeServing, providers_for_test

ROOT = Path(__file__).resolve().parents[2]


class Load:
    def __init__(self) -> None:
        self.launched: list[str] = []

    def launch(self, request):
        self.launched.append(request.job_id)
        return {"job_id": request.job_id}

    def pending(self, state):
        return None


def _providers(tmp_path: Path, max_usd: float, clock) -> tuple[Providers, Ctx, Load]:
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data["budget"] = {"max_usd": max_usd}
    spec = parse_spec(data)
    load = Load()
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, pools=LocalPool(),
                           serving=FakeServing(), load=load, clock=clock)
    p.state.save_deployment("agg", DeploymentRecord(state={"url": "http://127.0.0.1:1", "deployment_id": "agg"},
                                                    deployed_at=0))
    return p, Ctx("camp-b", str(tmp_path / "run"), str(tmp_path / "lake"), 1, None), load


@pytest.mark.parametrize(("hours_held", "max_usd", "refused"), [(0.0, 100.0, False), (5.0, 100.0, True)])
def test_guard_before_each_step(tmp_path, hours_held, max_usd, refused):
    t = [1_700_000_000.0]
    p, ctx, load = _providers(tmp_path, max_usd, lambda: t[0])
    campaign.scale_pools(p, ctx, Task("agg"))  # 1 node of p4d.24xlarge at $21.96/h from now
    t[0] += hours_held * 3600
    if not refused:
        campaign.launch_step(p, ctx, Task("agg", "concurrency-sweep-c1-r0"))
        assert load.launched == ["agg-concurrency-sweep-c1-r0"]
        return
    # the remaining estimate: the rest of agg on one p4d and disagg on two (its prefill and decode never
    # share an EFA node)
    with pytest.raises(BudgetExceeded, match=r"budget.max_usd: accrued \$110\.30 \+ remaining estimate "
                                             r"\$\d+\.\d\d = \$113\.\d\d exceeds \$100\.00 before step "
                                             r"concurrency-sweep-c1-r0 of experiment agg"):
        campaign.launch_step(p, ctx, Task("agg", "concurrency-sweep-c1-r0"))
    assert load.launched == []  # nothing started
    events = [r["event"] for r in p.lake.read_table("timeline", "camp-b")]
    assert "budget_exceeded" in events


class NoTimelineReads(LocalLake):
    def read_table(self, table, campaign_id=None):
        if table == "timeline":
            raise AssertionError("the budget guard read the timeline table")
        return super().read_table(table, campaign_id)


def test_guard_reads_the_run_stores_pool_rows_not_the_timeline_and_agrees_with_it(tmp_path):
    """The guard's accrued cost comes from the run store's pool rows (one object per experiment); the
    same figure the costs module computes from the whole timeline table."""
    from benchctl.costs import accrued_usd
    from benchctl.runstate import RunState

    t = [1_700_000_000.0]
    p, ctx, load = _providers(tmp_path, 100.0, lambda: t[0])
    p.lake = NoTimelineReads(tmp_path / "lake")
    campaign.scale_pools(p, ctx, Task("agg"))
    t[0] += 5 * 3600
    with pytest.raises(BudgetExceeded, match=r"accrued \$110\.30"):
        campaign.launch_step(p, ctx, Task("agg", "concurrency-sweep-c1-r0"))
    assert load.launched == []  # refused before anything started
    rows = RunState(p.state.store).pool_events()
    assert [r["event"] for r in rows] == ["scale_requested"]
    spec, plan = p.state.spec(), p.state.plan()
    timeline = LocalLake(tmp_path / "lake").read_table("timeline", "camp-b")
    now = "2023-11-15T03:13:20+00:00"
    assert accrued_usd(spec, plan, rows, now) == pytest.approx(accrued_usd(spec, plan, timeline, now))
