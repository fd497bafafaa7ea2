"""The per-step budget guard: accrued cost + the remaining estimate over budget.max_usd aborts before
the step starts, and says why."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchctl import campaign
from benchctl.campaign import Task
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.campaign.records import DeploymentRecord
from benchctl.errors import BudgetExceeded
from benchctl.local.lake import LocalLake
from benchctl.local.pool import LocalPool
from benchctl.spec.model import parse_spec
from tests.fakes.ports import FakeServing, providers_for_test, record_asl_waits

ROOT = Path(__file__).resolve().parents[2]


class Load:
    def __init__(self) -> None:
        self.launched: list[str] = []

    def launch(self, request):
        self.launched.append(request.job_id)
        return {"job_id": request.job_id}

    def pending(self, state):
        return None

    def poll(self, state):
        return None

    def stop(self, state):
        pass

    def failure_logs(self, state):
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
                                             r"\$\d+\.\d\d = \$11\d\.\d\d exceeds \$100\.00 before step "
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
    from benchctl.campaign.runstate import RunState
    from benchctl.planning.costs import accrued_usd

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


# ------------------------------------------------------------------ inside the waits, through the real ASL

WAIT_S = 1200.0  # what one not-yet poll of the slow wait lasts on the world's clock
WAITS = ("capacity", "readiness", "load")


class SlowWorld:
    """``tests.fakes.ports.FakeWorld`` whose one wait (``capacity``: the pool; ``readiness``: the deployment;
    ``load``: the first step's load) says "not yet" twice, each time WAIT_S on the campaign's clock, before the
    fakes' usual instant answer. Within every deadline (timeouts 7200 s, load grace 3600 s): without the guard,
    the campaign succeeds."""

    def __init__(self, lake_root: Path, wait: str) -> None:
        from tests.fakes.ports import FakeWorld

        self.world = FakeWorld(lake_root)
        self.t = 1_700_000_000.0
        self.slow = {"left": 2}
        world, slow = self.world, self.slow

        def not_yet(real):  # type: ignore[no-untyped-def]
            def wrapped(arg, *more):  # type: ignore[no-untyped-def]
                if slow["left"] > 0 and (wait != "load" or arg.get("job_id", "").endswith("-c1-r0")):
                    slow["left"] -= 1
                    self.t += WAIT_S
                    return None if wait == "load" else False
                return real(arg, *more)
            return wrapped

        if wait == "capacity":
            world.pool.ready = not_yet(world.pool.ready)  # type: ignore[method-assign]
        elif wait == "readiness":
            world.serving.probe_ready = not_yet(world.serving.probe_ready)  # type: ignore[method-assign]
        else:
            world.load.poll = not_yet(world.load.poll)  # type: ignore[method-assign]

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.world, name)

    def providers(self, ctx: Ctx) -> Providers:
        p = self.world.providers(ctx)
        p.clock = lambda: self.t
        return p


def _slow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait: str,  # type: ignore[no-untyped-def]
              max_usd_over_estimate: float):
    """The campaign through the real ASL in the slow world; its Wait states are recorded, not slept (the world's
    clock is what they advance): (result, world, the Wait states' seconds)."""
    from benchctl.campaign.context import StartInput
    from benchctl.local.engine import Progress, execute
    from benchctl.local.runner import prepare
    from benchctl.planning.plan import plan_campaign

    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data["workloads"] = [{"kind": "concurrency_sweep", "name": "concurrency-sweep", "concurrency": [1], "isl": 256,
                          "osl": 32, "request_count": 4}]
    data["timeouts"] = {"capacity_s": 7200, "ready_s": 7200, "load_grace_s": 3600}
    data["budget"] = {"max_usd": 1.0}
    est = plan_campaign(parse_spec(data), "local").est_usd
    data["budget"] = {"max_usd": round(est + max_usd_over_estimate, 2)}  # 1 p4d node for WAIT_S: $7.32
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    start, _ = prepare(path, tmp_path / "out", "slow")
    world = SlowWorld(tmp_path / "out" / "lake", wait)
    import io

    waited = record_asl_waits(monkeypatch)
    result = execute(engine=world, start=StartInput(start.spec_uri, "slow", poll_seconds=1),
                     progress=Progress(out=io.StringIO()))
    return result, world, waited


@pytest.mark.parametrize("wait", WAITS)
def test_a_wait_that_crosses_the_budget_ends_in_teardown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         wait: str) -> None:
    result, world, waited = _slow_run(tmp_path, monkeypatch, wait, max_usd_over_estimate=5.0)
    # refused at the first look past the budget (one WAIT_S on one p4d node: $7.32, + the EKS fee), not at the
    # wait's end; the load's end is awaited by the relay's wake check, whose look is the first "not yet", and
    # CheckLoad's the second
    accrued = {"capacity": "7.35", "readiness": "7.35", "load": "14.71"}[wait]
    assert f"accrued ${accrued} + remaining estimate" in result.cause, result.cause
    assert (result.status, result.error) == ("FAILED", "BudgetExceeded"), result.cause
    assert f"(while waiting for {'the load concurrency-sweep-c1-r0' if wait == 'load' else wait})" in result.cause
    assert "before step concurrency-sweep-c1-r0 of experiment agg" in result.cause
    # teardown ran: the pool back at its size, nothing deployed, prepared or loading left
    assert world.leftovers() == {"deployments": [], "prepared": [], "loads": [], "pools": []}
    assert world.pool_sizes_now() == world.initial_sizes
    assert "disagg" not in world.serving.deploy_calls  # the campaign ended there
    events = [r["event"] for r in world.lake.read_table("timeline", "slow")]
    assert "budget_exceeded" in events
    assert waited == []  # refused at that first look: no Wait state entered


@pytest.mark.parametrize("wait", WAITS)
def test_the_same_slow_wait_within_the_budget_runs_to_success(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              wait: str) -> None:
    """The control: the guard refuses because of the budget, not because the wait was slow."""
    result, world, waited = _slow_run(tmp_path, monkeypatch, wait, max_usd_over_estimate=100.0)
    assert world.slow["left"] == 0
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    # each "not yet" of a polled wait is one Wait state of poll_seconds; the load's end is awaited as an event
    assert waited == ([] if wait == "load" else [1, 1])


def test_an_unpolled_load_wait_ends_where_the_polling_guard_would_refuse(tmp_path):
    """Nobody polls the budget while AwaitLoadEnd waits for the runner's task token (AWS), so LaunchLoad gives
    the wait a timeout (``timeout_s``): the step's estimate plus the budget's slack at the held pools' rate.
    The polling guard agrees: a running step on its estimate is not refused (its spend so far is accrued, not
    also estimated), and it is refused once it overran its estimate by the slack, not before."""
    from benchctl.planning.costs import remaining_usd

    t = [1_700_000_000.0]
    p, _ctx, _load = _providers(tmp_path / "probe", 1000.0, lambda: t[0])
    spec, plan = p.state.spec(), p.state.plan()
    rate = 21.96 + spec.pricing.eks_cluster_usd_per_hour  # $/h while agg holds its one node
    slack_s = 600.0
    tight = remaining_usd(spec, plan, set()) + rate * slack_s / 3600  # 10 minutes of slack at the start
    p, ctx, _load = _providers(tmp_path, tight, lambda: t[0])
    campaign.scale_pools(p, ctx, Task("agg"))  # 1 node of p4d.24xlarge at $21.96/h from now
    plan = p.state.plan()
    step = "concurrency-sweep-c1-r0"
    out = campaign.launch_step(p, ctx, Task("agg", step))
    est = plan.step("agg", step).est_s
    assert out["timeout_s"] == pytest.approx(est + slack_s, abs=2)
    rec = p.state.load("agg", step)
    rec.running_at = t[0]
    p.state.save_load("agg", step, rec)
    waiting = f"the load {step}"
    t[0] += est  # on its estimate: within the budget
    campaign.load.budget_guard(p, ctx, "agg", step, waiting=waiting)
    t[0] += out["timeout_s"] - est - 5
    campaign.load.budget_guard(p, ctx, "agg", step, waiting=waiting)
    t[0] += 10  # past the wait's timeout: the polling guard refuses too
    with pytest.raises(BudgetExceeded, match="while waiting for the load"):
        campaign.load.budget_guard(p, ctx, "agg", step, waiting=waiting)
    # the wait's timeout (States.Timeout on AWS) is named for what it was
    ended = campaign.stop_load_after_failure(p, ctx, Task.parse({
        "action": "stop_load_after_failure", "state": "StopLoadAfterFailure", "ctx": ctx.to_json(),
        "experiment": "agg", "step": step,
        "error": {"Error": "States.Timeout", "Cause": ""}}))
    assert ended["error"] == "BudgetExceeded" and "accrued" in ended["cause"]
