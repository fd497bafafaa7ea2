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
