"""Which campaign a stopped execution's status-change event names, and whether anything of it is left to tear
down (benchctl.campaign.stopped); the whole path runs in tests/integration/test_stopped_campaign.py."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchctl.campaign.context import Ctx
from benchctl.campaign.records import CampaignRecord
from benchctl.campaign.stopped import (
    StopVerifier,
    check_execution_arn,
    claimed_execution,
    execution_context,
    resolve_stopped,
)
from benchctl.local.lake import LocalLake
from tests.fakes.campaign_executions import campaign_execution
from tests.fakes.ports import providers_for_test

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:benchctl-campaign"
ARN = "arn:aws:states:us-east-1:123456789012:execution:benchctl-campaign:"
INPUT = {"spec_uri": "s3://b/specs/s.yaml", "campaign_id": "seed-1"}


def _event(status: str = "ABORTED", name: str = "seed-1", inp: Any = None, **detail: Any) -> dict[str, Any]:
    d = {"executionArn": ARN + name, "stateMachineArn": MACHINE, "name": name, "status": status,
         "stopDate": 1764950400000, "input": json.dumps(inp) if inp is not None else None, **detail}
    return {"source": "aws.states", "detail-type": "Step Functions Execution Status Change", "detail": d}


class _Engine:
    name = "aws"

    def __init__(self, root: Path) -> None:
        self.runs_uri, self.lake_uri, self.root = str(root / "runs"), str(root / "lake"), root
        self.seen: list[Ctx] = []

    def providers(self, ctx: Ctx) -> Any:
        self.seen.append(ctx)
        return providers_for_test(Path(ctx.run_uri), LocalLake(self.lake_uri), engine="aws")


@pytest.fixture
def sfn_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's Step Functions running definitions (so that executions end RUNNING, ABORTED, TIMED_OUT, FAILED)."""
    import boto3
    from moto import mock_aws

    for k, v in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        yield boto3.session.Session(region_name="us-east-1")


def _ended(session: Any, end: str, name: str = "seed-1", inp: dict[str, Any] | None = None,
           machine: str = "benchctl-campaign") -> StopVerifier:
    """An execution ``name`` of ``machine`` brought to ``end``; the verifier of the campaign state machine."""
    campaign_execution(session, machine, name, end, INPUT if inp is None else inp)
    return StopVerifier(MACHINE, session.client("stepfunctions"))


def _untouched(engine: _Engine, status: str = "running") -> None:
    """Nothing written: no failure recorded, no stop claimed, the run record as it was."""
    p = engine.providers(engine.seen[-1])
    rec = p.state.campaign()
    assert rec is not None and rec.status == status and p.state.failure() is None
    assert p.state.store.read_json("stop_claim.json") is None


def test_the_campaign_id_is_derived_as_the_described_execution_derived_it() -> None:
    """The described input's campaign_id when it has one (a scheduled execution's input has none: its name),
    its poll period kept, never its injected failure."""
    desc = {"executionArn": ARN + "exec-1", "name": "exec-1", "status": "ABORTED", "stateMachineArn": MACHINE,
            "input": json.dumps({"spec_uri": "s3://b/s.yaml", "campaign_id": "mine", "poll_seconds": 7,
                                 "fail_at": "CheckLoad"})}
    ctx, status, arn = execution_context(desc, runs_uri="s3://b/runs", lake_uri="s3://b/lake")
    assert (ctx.campaign_id, ctx.run_uri, ctx.poll_seconds, ctx.fail_at) == ("mine", "s3://b/runs/mine", 7, None)
    assert (status, arn) == ("ABORTED", ARN + "exec-1")
    desc = {**desc, "executionArn": ARN + "0b6c1e2a-3f4d", "name": "0b6c1e2a-3f4d", "status": "TIMED_OUT",
            "input": json.dumps({"spec_uri": "s3://b/s.yaml"})}
    ctx, _, _ = execution_context(desc, runs_uri="s3://b/runs", lake_uri="s3://b/lake")
    assert ctx.campaign_id == "0b6c1e2a-3f4d"


@pytest.mark.parametrize(("event", "named"), [
    ({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}, "expected source 'aws.states'"),
    (_event("RUNNING"), "detail.status 'RUNNING' is not a stop"),
    (_event(executionArn=""), "detail.executionArn is ''"),
    ({**_event(), "detail": None}, "detail.status is None"),
    ("not an event", "not an object"),
])
def test_an_event_that_is_not_a_stopped_execution_is_refused_naming_the_field(event: Any, named: str) -> None:
    with pytest.raises(ValueError, match=named.replace(".", r"\.").replace("(", r"\(")):
        claimed_execution(event)


@pytest.mark.parametrize(("arn", "named"), [
    ("seed-1", "is not a Step Functions execution ARN"),
    ("arn:aws:states:us-east-1:123456789012:stateMachine:benchctl-campaign", "is not a Step Functions execution ARN"),
    (ARN + "seed 1", "is not a Step Functions execution ARN"),  # white space in a name
    (ARN + "seed-1:extra", "is not a Step Functions execution ARN"),
    (ARN + "s" * 81, "is not a Step Functions execution ARN"),  # a name is 1..80 characters
    (ARN + "seed-1\x1b[2J", "is not a Step Functions execution ARN"),
    ("arn:aws:states:us-east-1:123456789012:execution:another-machine:seed-1", "is not an execution of the campaign"),
    ("arn:aws:states:us-east-1:999999999999:execution:benchctl-campaign:seed-1", "is not an execution of the campaign"),
    ("arn:aws:states:eu-west-1:123456789012:execution:benchctl-campaign:seed-1", "is not an execution of the campaign"),
])
def test_an_execution_arn_of_another_form_or_machine_is_refused_naming_why(arn: str, named: str) -> None:
    from benchctl.campaign.stopped import StopRefused

    with pytest.raises(StopRefused, match=named):
        check_execution_arn(arn, MACHINE)
    check_execution_arn(ARN + "seed-1", MACHINE)  # the campaign machine's own execution passes


def test_a_forged_aborted_event_for_a_running_execution_tears_nothing_down(tmp_path: Path, sfn_world: Any) -> None:
    engine = _Engine(tmp_path)
    verifier = _ended(sfn_world, "RUNNING")
    engine.providers(execution_context({"executionArn": ARN + "seed-1", "name": "seed-1", "status": "RUNNING",
                                        "input": json.dumps(INPUT)}, runs_uri=engine.runs_uri,
                                       lake_uri=engine.lake_uri)[0]).state.save_campaign(
        CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    out = resolve_stopped(engine, _event("ABORTED", inp=INPUT), verifier=verifier)
    assert not out["todo"] and out["ctx"] is None and out["error"] is None
    assert out["refused"] == f"execution {ARN}seed-1 is RUNNING, not ended by a stop (one of ABORTED, TIMED_OUT, FAILED)"
    assert "nothing torn down" in out["why"]
    _untouched(engine)


def test_an_event_naming_no_execution_or_another_machines_is_refused(tmp_path: Path, sfn_world: Any) -> None:
    """An execution Step Functions does not know (ExecutionDoesNotExist), one of another state machine (by its
    ARN, and by what DescribeExecution says), and a non-ARN: each refused by its own check, nothing written."""
    engine = _Engine(tmp_path)
    verifier = _ended(sfn_world, "ABORTED", name="other-1", machine="another-machine")
    out = resolve_stopped(engine, _event(inp=INPUT), verifier=verifier)
    assert out["refused"] == f"DescribeExecution of {ARN}seed-1: ExecutionDoesNotExist (no such execution)", out
    other = "arn:aws:states:us-east-1:123456789012:execution:another-machine:other-1"
    out = resolve_stopped(engine, _event(executionArn=other), verifier=verifier)
    assert out["refused"] == f"execution {other} is not an execution of the campaign state machine {MACHINE}", out
    # the machine named in the environment is not the machine that ran it: DescribeExecution says so
    foreign = StopVerifier("arn:aws:states:us-east-1:123456789012:stateMachine:another-machine",
                           sfn_world.client("stepfunctions"))
    check_execution_arn(other, foreign.machine_arn)
    lying = StopVerifier(foreign.machine_arn, _Answering({"executionArn": other, "status": "ABORTED",
                                                          "stateMachineArn": MACHINE, "name": "other-1"}))
    out = resolve_stopped(engine, _event(executionArn=other), verifier=lying)
    assert out["refused"] == (f"execution {other} belongs to state machine {MACHINE!r}, not the campaign state "
                              f"machine {foreign.machine_arn}"), out
    out = resolve_stopped(engine, _event(executionArn="seed-1"), verifier=verifier)
    assert out["refused"] == "detail.executionArn 'seed-1' is not a Step Functions execution ARN " \
        "(arn:<partition>:states:<region>:<account>:execution:<stateMachineName>:<executionName>)", out
    assert engine.seen == []  # no campaign's providers were even built


class _Answering:
    """A DescribeExecution that answers ``desc`` for its own ARN and raises as AWS does for any other."""

    def __init__(self, desc: dict[str, Any]) -> None:
        self.desc = desc

    def describe_execution(self, *, executionArn: str) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        if executionArn != self.desc["executionArn"]:
            raise ClientError({"Error": {"Code": "ExecutionDoesNotExist", "Message": executionArn}},
                              "DescribeExecution")
        return self.desc


def test_the_campaign_and_status_are_the_described_executions_not_the_events(tmp_path: Path,
                                                                              sfn_world: Any) -> None:
    """The event claims ABORTED and names another campaign in its input; Step Functions says TIMED_OUT and its
    input names seed-1: seed-1 is torn down, as timed out."""
    engine = _Engine(tmp_path)
    verifier = _ended(sfn_world, "TIMED_OUT")
    forged = _event("ABORTED", inp={"spec_uri": "s3://b/specs/s.yaml", "campaign_id": "someone-else"})
    resolve_stopped(engine, forged, verifier=verifier)
    assert [c.campaign_id for c in engine.seen] == ["seed-1"]
    p = engine.providers(engine.seen[-1])
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    out = resolve_stopped(engine, forged, verifier=verifier)
    assert out["todo"] and out["error"]["Error"] == "ExecutionTimedOut" and out["refused"] is None
    assert {c.campaign_id for c in engine.seen} == {"seed-1"}


def test_no_stop_is_verified_without_the_campaign_machines_arn(tmp_path: Path) -> None:
    from benchctl.aws.executions import stop_verifier_from_env

    with pytest.raises(ValueError, match="environment has no BENCHCTL_CAMPAIGN_MACHINE_ARN"):
        stop_verifier_from_env({"BENCHCTL_RUNS_URI": "s3://b/runs", "BENCHCTL_LAKE_URI": "s3://b/lake"})
    with pytest.raises(ValueError, match="environment has no BENCHCTL_CAMPAIGN_MACHINE_ARN"):
        resolve_stopped(_Engine(tmp_path), _event(), verifier=StopVerifier("", _Answering({})))


def test_only_the_running_campaign_of_this_very_execution_is_torn_down(tmp_path: Path, sfn_world: Any) -> None:
    engine = _Engine(tmp_path)
    verifier = _ended(sfn_world, "TIMED_OUT")
    out = resolve_stopped(engine, _event(), verifier=verifier)
    assert not out["todo"] and "no run record" in out["why"] and out["error"] is None
    ctx = engine.seen[-1]
    p = engine.providers(ctx)
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "another"))
    out = resolve_stopped(engine, _event(), verifier=verifier)
    assert not out["todo"] and "belongs to execution" in out["why"] and p.state.failure() is None
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    out = resolve_stopped(engine, _event("TIMED_OUT"), verifier=verifier)
    assert out["todo"] and out["ctx"] == ctx.to_json()
    assert out["error"]["Error"] == "ExecutionTimedOut"
    # the stop time is the described stopDate's when Step Functions gives one (moto gives none for TIMED_OUT)
    assert re.fullmatch(r"its execution reached its timeout \(the state machine's TimeoutSeconds\)"
                        r"( at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00)?", out["error"]["Cause"]), out["error"]
    failure = p.state.failure()
    assert failure is not None and (failure.error, failure.state) == ("ExecutionTimedOut", None)
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1", status="stopped"))
    out = resolve_stopped(engine, _event(), verifier=verifier)
    assert not out["todo"] and "ended already (stopped)" in out["why"]


def test_a_failed_execution_is_a_stop_only_while_its_campaign_still_runs(tmp_path: Path, sfn_world: Any) -> None:
    """FAILED is in the rule (an error no Catch takes ends an execution FAILED without its failure path): torn
    down while the run record still says running; one whose own failure path ran (failed) is left alone."""
    engine = _Engine(tmp_path)
    verifier = _ended(sfn_world, "FAILED")
    resolve_stopped(engine, _event("FAILED"), verifier=verifier)
    p = engine.providers(engine.seen[-1])
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1", status="failed"))
    out = resolve_stopped(engine, _event("FAILED"), verifier=verifier)
    assert not out["todo"] and "ended already (failed)" in out["why"] and p.state.failure() is None
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    out = resolve_stopped(engine, _event("FAILED"), verifier=verifier)
    assert out["todo"] and out["error"]["Error"] == "ExecutionFailed" and "States.Runtime" in out["why"]


def test_one_stop_is_claimed_once_and_a_retry_of_the_claimant_goes_on(tmp_path: Path, sfn_world: Any) -> None:
    """Two deliveries of one event (two stopped-campaign executions): the first claims the teardown (create-only)
    and marks the campaign stopping; the second finds the claim and does nothing; the first's own retry (its
    ResolveStopped retried after a transient error) goes on."""
    from benchctl.campaign.stopped import STOPPING

    engine = _Engine(tmp_path)
    verifier = _ended(sfn_world, "ABORTED")
    resolve_stopped(engine, _event(), verifier=verifier)
    p = engine.providers(engine.seen[-1])
    p.state.save_campaign(CampaignRecord(campaign_id="seed-1", execution=ARN + "seed-1"))
    first = resolve_stopped(engine, _event(), "exec:stopped:a", verifier=verifier)
    rec = p.state.campaign()
    assert first["todo"] and rec is not None and rec.status == STOPPING
    second = resolve_stopped(engine, _event(), "exec:stopped:b", verifier=verifier)
    assert not second["todo"] and "claimed by exec:stopped:a" in second["why"]
    assert resolve_stopped(engine, _event(), "exec:stopped:a", verifier=verifier)["todo"]


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
