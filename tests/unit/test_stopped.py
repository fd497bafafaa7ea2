"""Which campaign a stopped execution's status-change event names, and whether anything of it is left to tear
down (benchctl.campaign.stopped); the whole path runs in tests/integration/test_stopped_campaign.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchctl.campaign.context import Ctx
from benchctl.campaign.records import CampaignRecord
from benchctl.campaign.stopped import event_context, resolve_stopped
from benchctl.local.lake import LocalLake
from tests.fakes.ports import providers_for_test

ARN = "arn:aws:states:us-east-1:123456789012:execution:benchctl-campaign:"


def _event(status: str = "ABORTED", name: str = "seed-1", inp: Any = None, **detail: Any) -> dict[str, Any]:
    d = {"executionArn": ARN + name, "stateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:x",
         "name": name, "status": status, "stopDate": 1764950400000,
         "input": json.dumps(inp) if inp is not None else None, **detail}
    return {"source": "aws.states", "detail-type": "Step Functions Execution Status Change", "detail": d}


class _Engine:
    name = "aws"

    def __init__(self, root: Path) -> None:
        self.runs_uri, self.lake_uri, self.root = str(root / "runs"), str(root / "lake"), root
        self.seen: list[Ctx] = []

    def providers(self, ctx: Ctx) -> Any:
        self.seen.append(ctx)
        return providers_for_test(Path(ctx.run_uri), LocalLake(self.lake_uri), engine="aws")


def test_the_campaign_id_is_derived_as_the_execution_derived_it() -> None:
    """The input's campaign_id when it has one (a scheduled execution's input has none: its name), its poll
    period kept, never its injected failure."""
    ctx, status, arn = event_context(_event(inp={"spec_uri": "s3://b/s.yaml", "campaign_id": "mine", "poll_seconds": 7,
                                                 "fail_at": "CheckLoad"}, name="exec-1"), runs_uri="s3://b/runs",
                                     lake_uri="s3://b/lake")
    assert (ctx.campaign_id, ctx.run_uri, ctx.poll_seconds, ctx.fail_at) == ("mine", "s3://b/runs/mine", 7, None)
    assert (status, arn) == ("ABORTED", ARN + "exec-1")
    ctx, _, _ = event_context(_event("TIMED_OUT", name="0b6c1e2a-3f4d", inp={"spec_uri": "s3://b/s.yaml"}),
                              runs_uri="s3://b/runs", lake_uri="s3://b/lake")
    assert ctx.campaign_id == "0b6c1e2a-3f4d"


@pytest.mark.parametrize(("event", "named"), [
    ({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}, "expected source 'aws.states'"),
    (_event("RUNNING"), "detail.status 'RUNNING' is not a stop"),
    (_event(name=""), "detail.name is ''"),
    (_event(name="Seed_1"), "is not a campaign id"),
    ({**_event(), "detail": None}, "detail.status is None"),
    ("not an event", "not an object"),
])
def test_an_event_that_is_not_a_stopped_execution_is_refused_naming_the_field(event: Any, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.").replace("(", r"\(")):
        event_context(event, runs_uri="r", lake_uri="l")


def test_only_the_running_campaign_of_this_very_execution_is_torn_down(tmp_path: Path) -> None:
    engine = _Engine(tmp_path)
    out = resolve_stopped(engine, _event())  # type: ignore[arg-type]
    assert not out["todo"] and "no run record" in out["why"] and out["error"] is None
    ctx = engine.seen[-1]
    p = engine.providers(ctx)
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "another"))
    out = resolve_stopped(engine, _event())  # type: ignore[arg-type]
    assert not out["todo"] and "belongs to execution" in out["why"] and p.state.failure() is None
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    out = resolve_stopped(engine, _event("TIMED_OUT"))  # type: ignore[arg-type]
    assert out["todo"] and out["ctx"] == ctx.to_json()
    assert out["error"] == {"Error": "ExecutionTimedOut", "Cause": "its execution reached its timeout (the state "
                            "machine's TimeoutSeconds) at 2025-12-05T16:00:00+00:00"}
    failure = p.state.failure()
    assert failure is not None and (failure.error, failure.state) == ("ExecutionTimedOut", None)
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1", status="stopped"))
    out = resolve_stopped(engine, _event())  # type: ignore[arg-type]
    assert not out["todo"] and "ended already (stopped)" in out["why"]


def test_a_failed_execution_is_a_stop_only_while_its_campaign_still_runs(tmp_path: Path) -> None:
    """FAILED is in the rule (an error no Catch takes ends an execution FAILED without its failure path): torn
    down while the run record still says running; one whose own failure path ran (failed) is left alone."""
    engine = _Engine(tmp_path)
    resolve_stopped(engine, _event("FAILED"))  # type: ignore[arg-type]
    p = engine.providers(engine.seen[-1])
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1", status="failed"))
    out = resolve_stopped(engine, _event("FAILED"))  # type: ignore[arg-type]
    assert not out["todo"] and "ended already (failed)" in out["why"] and p.state.failure() is None
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    out = resolve_stopped(engine, _event("FAILED"))  # type: ignore[arg-type]
    assert out["todo"] and out["error"]["Error"] == "ExecutionFailed" and "States.Runtime" in out["why"]


def test_one_stop_is_claimed_once_and_a_retry_of_the_claimant_goes_on(tmp_path: Path) -> None:
    """Two deliveries of one event (two stopped-campaign executions): the first claims the teardown (create-only)
    and marks the campaign stopping; the second finds the claim and does nothing; the first's own retry (its
    ResolveStopped retried after a transient error) goes on."""
    from benchctl.campaign.stopped import STOPPING

    engine = _Engine(tmp_path)
    resolve_stopped(engine, _event())  # type: ignore[arg-type]
    p = engine.providers(engine.seen[-1])
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    first = resolve_stopped(engine, _event(), "exec:stopped:a")  # type: ignore[arg-type]
    rec = p.state.campaign()
    assert first["todo"] and rec is not None and rec.status == STOPPING
    second = resolve_stopped(engine, _event(), "exec:stopped:b")  # type: ignore[arg-type]
    assert not second["todo"] and "claimed by exec:stopped:a" in second["why"]
    assert resolve_stopped(engine, _event(), "exec:stopped:a")["todo"]  # type: ignore[arg-type]


def test_a_state_that_scales_or_deploys_refuses_a_campaign_that_is_not_running(tmp_path: Path) -> None:
    from benchctl.campaign.base import require_running
    from benchctl.errors import CampaignNotRunning

    p = providers_for_test(tmp_path / "run", LocalLake(str(tmp_path / "lake")))
    require_running(p, "ScalePools")  # no record yet: nothing stopped it
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    require_running(p, "ScalePools")
    for status in ("stopping", "stopped", "failed", "succeeded"):
        p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1", status=status))
        with pytest.raises(CampaignNotRunning, match=rf"Deploy: campaign seed-1 is '{status}'.*campaign\.json"):
            require_running(p, "Deploy")


def test_the_second_abort_pass_waits_longer_than_any_function_can_run() -> None:
    """An invocation in flight at the stop has ended when AbortAgain runs: RECHECK_S exceeds every function's
    timeout (the stack's rows, and the sweeper's 15 minutes), and the machine waits exactly that long."""
    from benchctl.campaign import asl
    from benchctl.campaign.stopped import RECHECK_S
    from stacks.function_needs import FUNCTION_NEEDS

    longest = max([n.timeout_minutes for n in FUNCTION_NEEDS.values()] + [15]) * 60
    assert longest < RECHECK_S
    definition = asl.load(asl.STOPPED_ASL_PATH)
    wait = definition["States"]["WaitForInFlight"]
    assert wait["SecondsPath"] == "$.stopped.recheck_s" and wait["Next"] == "AbortAgain"
    assert definition["States"]["ResolveStopped"]["ResultSelector"]["recheck_s.$"] == "$.Payload.recheck_s"
