"""An execution stopped from outside (Step Functions' Stop execution, or its timeout) runs no state of its own:
its status-change event starts the stopped-campaign state machine (``state_machines/stopped.asl.json``), whose
tasks are the failure path's own (benchctl.campaign.stopped).

Here the definition runs in moto's Step Functions interpreter (the one the local engine runs the campaign
with), each Lambda task dispatched to its real handler (``lambdas.teardown``, ``lambdas.report``), its SNS task
to moto's SNS; the campaign is an EKS one on the fake cluster API (RBAC and the admission policies enforced,
Kubernetes' deletion semantics: a deleted object lingers until its dependents are gone) and moto's EKS node
groups, stopped while its first load step's runner Job runs (AwaitLoadEnd). Every Kubernetes call is made as
the function whose task makes it. The event is the one EventBridge delivers (Step Functions developer guide,
"Step Functions Execution Status Change"; its fields as documented)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from benchctl import campaign
from benchctl.campaign import Task, asl
from benchctl.campaign.context import Ctx
from benchctl.campaign.sweep import sweep
from benchctl.local.engine import ACCOUNT, REGION, Dispatcher, Progress, function_arn
from benchctl.planning.plan import plan_campaign
from lambdas import FUNCTIONS
from tests.aws_checks import upstream_api
from tests.fakes import eks_world
from tests.fakes.campaign_executions import campaign_execution
from tests.fakes.eks_world import CID

SFN = {"stepfunctions": {"execute_state_machine": True}}
CAMPAIGN_MACHINE = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:benchctl-campaign"
EXECUTION = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:benchctl-campaign:{CID}"


def status_event(status: str, *, execution: str = EXECUTION, name: str = CID) -> dict[str, Any]:
    """The event EventBridge delivers when an execution of the campaign state machine stops."""
    return {
        "version": "0", "id": "315c1398-40ff-a850-213b-158f73e60175", "detail-type": "Step Functions Execution Status Change",
        "source": "aws.states", "account": ACCOUNT, "time": "2026-12-05T16:00:00Z", "region": REGION,
        "resources": [execution],
        "detail": {"executionArn": execution, "stateMachineArn": CAMPAIGN_MACHINE, "name": name, "status": status,
                   "startDate": 1764950000000, "stopDate": 1764950400000,
                   "input": json.dumps(CAMPAIGN_INPUT),
                   "inputDetails": {"included": True}, "output": None, "outputDetails": None},
    }


class _Engine:
    """The AWS engine's shape around the campaign's providers (the functions share them here)."""

    name = "aws"

    def __init__(self, p: Any, ctx: Ctx) -> None:
        self.p, self.runs_uri, self.lake_uri = p, str(Path(ctx.run_uri).parent), ctx.lake_uri

    def providers(self, ctx: Ctx) -> Any:
        assert ctx.campaign_id == CID, ctx
        return self.p


@contextmanager
def smoke_world(tmp: Path) -> Iterator[tuple[Any, Any, Any, Any, Any, Any, Any]]:
    """The smoke example on EKS node groups in the rehearsal world (moto's Step Functions and EKS, the fake cluster
    with its operator, Job and DaemonSet controllers and GPU nodes), nothing run yet: (spec, its first experiment's
    plan entry, api, session, caller, providers, ctx)."""
    spec = eks_world.example_specs()["smoke[managed-nodegroup]"]
    exp = plan_campaign(spec, "aws").experiments[0]
    with upstream_api() as api, eks_world.moto_eks(spec, SFN) as session:
        eks_world.cluster_prerequisites(api, spec)
        eks_world.dynamo_operator(api)
        eks_world.job_controller(api)
        eks_world.daemonset_controller(api)
        eks_world.gpu_nodes(api, spec)
        caller = eks_world.Caller()
        p, ctx, _ = eks_world.providers(spec, caller.client(api), tmp, session)
        yield spec, exp, api, session, caller, p, ctx


@contextmanager
def stopped_while_loading(tmp: Path) -> Iterator[dict[str, Any]]:
    """One experiment of the smoke example up to its first step's running load (each state as its function);
    the execution then stopped (nothing of the campaign state machine runs after it)."""
    with smoke_world(tmp) as (spec, exp, api, session, caller, p, ctx):
        e, step = Task(exp.name), exp.steps[0].step_id
        campaign.plan(p, ctx, Task(state="Plan", execution=EXECUTION))
        caller.function = "Pools"
        campaign.scale_pools(p, ctx, e)
        assert campaign.check_capacity(p, ctx, e)["done"]
        caller.function = "Serving"
        campaign.deploy(p, ctx, e)
        assert campaign.check_ready(p, ctx, e)["done"]
        caller.function = "Load"
        campaign.launch_step(p, ctx, Task(exp.name, step))
        rec = p.state.load(exp.name, step)
        assert rec is not None and rec.running  # AwaitLoadEnd waits on it
        nodegroup = str(spec.pools[0].nodegroup)
        eks = session.client("eks")
        assert eks.describe_nodegroup(clusterName=eks_world.CLUSTER, nodegroupName=nodegroup)[
            "nodegroup"]["scalingConfig"]["desiredSize"] > 0
        caller.function = "Teardown"  # every task of the stopped-campaign machine: Teardown's, then Report's
        yield {"api": api, "session": session, "p": p, "ctx": ctx, "experiment": exp.name, "step": step,
               "nodegroup": nodegroup, "caller": caller}


CAMPAIGN_INPUT = {"spec_uri": "s3://results-bucket/specs/example.yaml", "campaign_id": CID, "poll_seconds": 1}


def end_campaign_execution(world: dict[str, Any], end: str, *, name: str = CID,
                           machine: str = "benchctl-campaign") -> str:
    """The campaign's execution in moto's Step Functions (what ResolveStopped describes), brought to ``end``."""
    ended = world.setdefault("executions", {})
    if (machine, name) not in ended:
        ended[(machine, name)] = campaign_execution(world["session"], machine, name, end, CAMPAIGN_INPUT)
    return str(ended[(machine, name)])


def run_stopped_machine(world: dict[str, Any], event: dict[str, Any]) -> dict[str, Any]:
    """The stopped-campaign definition as CDK deploys it (its substitutions), one execution with ``event``."""
    return run_stopped_machines(world, [event])[0]


def run_stopped_machines(world: dict[str, Any], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """As :func:`run_stopped_machine`, one execution per event, all started before any is waited for (EventBridge
    delivering a duplicate while the first delivery's execution runs). ``invoked`` and ``messages`` are shared."""
    import os

    import boto3

    from lambdas._runtime import use_engine

    session = world["session"]
    for event in events:  # the execution each event names ended as it says, unless a test made it otherwise
        if event["detail"]["executionArn"] == EXECUTION:
            end_campaign_execution(world, event["detail"]["status"])
    topic = session.client("sns").create_topic(Name="benchctl-status")["TopicArn"]
    queue = session.client("sqs").create_queue(QueueName="status")["QueueUrl"]
    arn = session.client("sqs").get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"]
    session.client("sns").subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
    definition = asl.substitute({**{var: function_arn(var) for var in FUNCTIONS}, "StatusTopicArn": topic,
                                 "ReportsUri": "s3://results-bucket/reports"}, asl.STOPPED_ASL_PATH)
    boto3.setup_default_session(aws_access_key_id="a", aws_secret_access_key="b", region_name=REGION)
    assert boto3.DEFAULT_SESSION is not None
    dispatcher = Dispatcher(Progress(out=open("/dev/null", "w")))  # noqa: SIM115 (closed with the process)
    invoked: list[str] = []

    def watched(params: dict[str, Any], model: Any, **kw: Any) -> Any:
        invoked.append(json.loads(params.get("body") or b"{}").get("action"))
        world["caller"].function = "Report" if invoked[-1] == "report_failure" else "Teardown"
        return dispatcher(params, model, **kw)

    boto3.DEFAULT_SESSION.events.register("before-call.lambda.Invoke", watched)
    use_engine(_Engine(world["p"], world["ctx"]))  # type: ignore[arg-type]
    env_before = {k: os.environ.get(k) for k in ("BENCHCTL_CAMPAIGN_MACHINE_ARN", "BENCHCTL_RUNS_URI",
                                                 "BENCHCTL_LAKE_URI")}
    os.environ.update({"BENCHCTL_CAMPAIGN_MACHINE_ARN": CAMPAIGN_MACHINE,  # as the stack sets them on Teardown
                       "BENCHCTL_RUNS_URI": str(Path(world["ctx"].run_uri).parent),
                       "BENCHCTL_LAKE_URI": world["ctx"].lake_uri})
    try:
        sfn = session.client("stepfunctions")
        machine = sfn.create_state_machine(name=f"stopped-{len(invoked)}-{time.monotonic_ns()}", definition=definition,
                                           roleArn=f"arn:aws:iam::{ACCOUNT}:role/stopped")["stateMachineArn"]
        started = time.monotonic()
        executions = [sfn.start_execution(stateMachineArn=machine, name=f"delivery-{i}",  # EventBridge names each
                                          input=json.dumps(event))["executionArn"] for i, event in enumerate(events)]
        out = []
        for execution in executions:
            while (desc := sfn.describe_execution(executionArn=execution))["status"] == "RUNNING":
                assert time.monotonic() - started < 120, "the stopped-campaign execution still runs"
                time.sleep(0.1)
            took = time.monotonic() - started
            history = sfn.get_execution_history(executionArn=execution)["events"]
            out.append({"status": desc["status"], "invoked": invoked, "took": took, "execution": execution,
                        "output": json.loads(desc.get("output") or "null"),
                        "states": [e["stateEnteredEventDetails"]["name"] for e in history
                                   if "stateEnteredEventDetails" in e]})
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        use_engine(None)
        boto3.DEFAULT_SESSION.events.unregister("before-call.lambda.Invoke", watched)
    messages = [json.loads(m["Body"])["Message"] for m in
                session.client("sqs").receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])]
    return [{**o, "messages": messages} for o in out]


def _deleted(api: Any, plural: str) -> list[int]:
    return [i for i, (method, path) in enumerate(api.requests) if method == "DELETE" and f"/{plural}/" in path]


@pytest.mark.parametrize("status", ["ABORTED", "TIMED_OUT"])
def test_a_campaign_stopped_while_its_load_runs_is_torn_down_reported_and_announced(tmp_path: Path, status: str,
                                                                                     monkeypatch: Any) -> None:
    """The runner Job is stopped before the deployment is deleted, the node group is back at its recorded size,
    the campaign ends ``stopped`` with its error and receipt, the status topic names the report; the second pass,
    after the longest function timeout, finds nothing left; a duplicate event and the hourly sweeper afterwards
    find nothing to do."""
    from benchctl.campaign.stopped import RECHECK_S
    from tests.fakes.ports import record_asl_waits

    waited = record_asl_waits(monkeypatch)
    with stopped_while_loading(tmp_path) as w:
        api, p, ctx = w["api"], w["p"], w["ctx"]
        first = run_stopped_machine(w, status_event(status))
        assert first["status"] == "SUCCEEDED", first
        assert first["states"][:2] == ["ResolveStopped", "Todo?"] and "AbortCampaign" in first["states"]
        assert first["states"][-5:] == ["NotifyStopped", "WaitForInFlight", "AbortAgain", "AgainDone?", "Stopped"], \
            first["states"]
        assert RECHECK_S in waited and first["invoked"].count("stopped_again") == 1
        assert first["invoked"][0] == "stopped" and first["invoked"][-2:] == ["report_failure", "stopped_again"]
        # the load first: its runner Job deleted before the DynamoGraphDeployment
        jobs, dgds = _deleted(api, "jobs"), _deleted(api, "dynamographdeployments")
        assert jobs and dgds and min(jobs) < min(dgds), api.requests
        load = p.state.load(w["experiment"], w["step"])
        assert load is not None and load.stopped
        # the node group back at its recorded size (0), through the EKS API
        eks = w["session"].client("eks")
        assert eks.describe_nodegroup(clusterName=eks_world.CLUSTER, nodegroupName=w["nodegroup"])[
            "nodegroup"]["scalingConfig"]["desiredSize"] == 0
        assert not [o for kind in ("DynamoGraphDeployment", "Job", "DaemonSet") for o in api.all_stored(kind)
                    if (o["metadata"].get("labels") or {}).get("benchctl.io/campaign") == CID]
        rec = p.state.campaign()
        error = {"ABORTED": "ExecutionStopped", "TIMED_OUT": "ExecutionTimedOut"}[status]
        assert rec is not None and (rec.status, rec.error) == ("stopped", error), rec
        assert "while the load of" in str(rec.cause) and w["step"] in str(rec.cause)
        # the report (the Report function's code, over the campaign's lake with DuckDB) says how it ended
        from benchctl.local.report import write_report

        html = write_report(tmp_path / "lake", CID, tmp_path / "report.html", "html").read_text()
        ending = html[html.index('<section id="ending"'):]
        assert ending.startswith('<section id="ending" class="bad" data-status="stopped"'), ending[:300]
        assert "STOPPED FROM OUTSIDE" in ending[:400] and "in state" not in ending[:400], ending[:400]
        (message,) = first["messages"]
        assert f"benchctl campaign {CID} ended: {status} (its execution " in message and "and torn down" in message
        assert f"s3://results-bucket/reports/{CID}/report.html" in message and EXECUTION in message
        # the receipt: every resource read back gone, the node group restored to its recorded size (its nodes
        # draining: the fake cluster never removes a node, so billing is not judged here)
        from benchctl.campaign.receipt import campaign_receipt

        rows = campaign_receipt(p, ctx, why_unread="unread")
        kinds = {r["kind"]: r for r in rows}
        assert {"DynamoGraphDeployment", "DaemonSet", "Job", "node group"} <= set(kinds), rows
        assert all(r["state"] in ("gone", "restored") for r in rows), rows
        assert kinds["node group"]["now"] == kinds["node group"]["recorded"], rows
        # a second delivery of the event (or the other stop status): nothing to do, nothing touched
        before = len(api.requests)
        again = run_stopped_machine(w, status_event(status))
        assert again["status"] == "SUCCEEDED" and again["states"][-1] == "NothingToDo", again
        assert again["invoked"] == ["stopped"] and again["messages"] == []
        assert [r for r in api.requests[before:] if r[0] != "GET"] == []
        # the hourly sweeper afterwards: nothing left to tear down
        (line,) = sweep([CID], lambda cid: (p, ctx), lambda cid: False)
        assert line["experiments"] == [] and line.get("action") != "swept", line


def test_an_event_of_another_execution_of_the_same_campaign_id_touches_nothing(tmp_path: Path) -> None:
    """A reused campaign id: the stopped execution is not the one the run record names, so the campaign (another
    execution's, still running) is left alone; so is an event whose status is not a stop (refused by name)."""
    from benchctl.campaign.stopped import StopVerifier, resolve_stopped

    with stopped_while_loading(tmp_path) as w:
        api = w["api"]
        before = len(api.requests)
        other = end_campaign_execution(w, "ABORTED", name="another-execution")  # its input names CID too
        assert other == EXECUTION.replace(f":{CID}", ":another-execution")
        out = run_stopped_machine(w, status_event("ABORTED", execution=other))
        assert out["status"] == "SUCCEEDED" and out["states"][-1] == "NothingToDo" and out["messages"] == []
        assert [r for r in api.requests[before:] if r[0] != "GET"] == []
        rec = w["p"].state.campaign()
        assert rec is not None and rec.status == "running" and w["p"].state.failure() is None
        with pytest.raises(ValueError, match=r"detail.status 'SUCCEEDED' is not a stop"):
            resolve_stopped(_Engine(w["p"], w["ctx"]), status_event("SUCCEEDED"),
                            verifier=StopVerifier(CAMPAIGN_MACHINE, w["session"].client("stepfunctions")))


def _untouched_since(w: dict[str, Any], before: int) -> None:
    """Nothing torn down or written: only reads of the cluster, the node group still scaled, the campaign's
    objects still there, its run record running, no failure recorded, no stop claimed."""
    api, p = w["api"], w["p"]
    assert [r for r in api.requests[before:] if r[0] != "GET"] == []
    assert _desired(w) > 0
    assert [o for o in api.all_stored("DynamoGraphDeployment")
            if (o["metadata"].get("labels") or {}).get("benchctl.io/campaign") == CID]
    rec = p.state.campaign()
    assert rec is not None and rec.status == "running" and p.state.failure() is None
    assert p.state.store.read_json("stop_claim.json") is None


def test_a_forged_stop_event_tears_nothing_down(tmp_path: Path, monkeypatch: Any) -> None:
    """Whoever may start the stopped-campaign machine can write any event. An ABORTED event for the campaign's
    execution while Step Functions says it is RUNNING; the same campaign's id run by another state machine's
    execution; a non-ARN: each is refused by ResolveStopped (its why says which check), the machine ends
    NothingToDo, and the running campaign keeps its deployment, node group, load and records."""
    from tests.fakes.ports import record_asl_waits

    record_asl_waits(monkeypatch)  # a teardown that wrongly starts fails here at once, not after a real wait
    with stopped_while_loading(tmp_path) as w:
        end_campaign_execution(w, "RUNNING")  # the campaign's execution still runs
        other = end_campaign_execution(w, "ABORTED", machine="another-machine")
        before = len(w["api"].requests)
        cases = {
            "running": (status_event("ABORTED"), f"execution {EXECUTION} is RUNNING, not ended by a stop"),
            "another machine": (status_event("ABORTED", execution=other),
                                f"execution {other} is not an execution of the campaign state machine"),
            "not an ARN": (status_event("ABORTED", execution=CID), f"detail.executionArn {CID!r} is not a Step "
                                                                   "Functions execution ARN"),
        }
        outs = run_stopped_machines(w, [event for event, _ in cases.values()])
        for (case, (_, why)), out in zip(cases.items(), outs, strict=True):
            assert out["status"] == "SUCCEEDED" and out["states"][-1] == "NothingToDo", (case, out)
            assert out["output"]["stopped"]["why"].startswith(f"stop event refused: {why}"), (case, out["output"])
        assert outs[0]["invoked"] == ["stopped"] * 3 and outs[0]["messages"] == []
        _untouched_since(w, before)
        load = w["p"].state.load(w["experiment"], w["step"])
        assert load is not None and load.running and not load.stopped


# ------------------------------------------------------------------ a stop that misses nothing (issue: stop path)


class _TableLocks:
    """The pool-lock table as DynamoDB answers ``benchctl.aws.locks.DynamoLocks``: a put succeeds only when the
    item is absent, expired or already this campaign's (``ConditionExpression``; DynamoDB developer guide,
    "Condition expressions": a failed condition writes nothing), a delete only for the holder."""

    def __init__(self, clock: Any) -> None:
        self.items: dict[str, tuple[str, float]] = {}
        self.clock = clock

    def acquire(self, keys: list[str], campaign_id: str, ttl_s: float) -> None:
        from benchctl.campaign.locks import LockHeld, held_message

        now, taken = self.clock(), list[str]()
        for key in keys:
            holder = self.items.get(key)
            if holder is not None and holder[1] >= now and holder[0] != campaign_id:
                for k in taken:
                    self.items.pop(k, None)
                raise LockHeld(held_message(key, holder[0], holder[1], now))
            self.items[key] = (campaign_id, now + ttl_s)
            taken.append(key)

    def release(self, keys: list[str], campaign_id: str) -> list[str]:
        out = [k for k in keys if self.items.get(k, ("",))[0] == campaign_id]
        for k in out:
            del self.items[k]
        return out


@contextmanager
def planned(tmp: Path) -> Iterator[dict[str, Any]]:
    """The smoke example's campaign after its Plan (pool locks taken, nothing scaled yet), as the next state,
    ScalePools, is about to run."""
    with smoke_world(tmp) as (spec, exp, api, session, caller, p, ctx):
        p.locks = _TableLocks(p.clock)
        campaign.plan(p, ctx, Task(state="Plan", execution=EXECUTION))
        assert p.locks.items, "Plan took the pool locks"
        yield {"api": api, "session": session, "p": p, "ctx": ctx, "experiment": exp.name,
               "nodegroup": str(spec.pools[0].nodegroup), "caller": caller}


def _desired(w: dict[str, Any]) -> int:
    eks = w["session"].client("eks")
    return int(eks.describe_nodegroup(clusterName=eks_world.CLUSTER, nodegroupName=w["nodegroup"])[
        "nodegroup"]["scalingConfig"]["desiredSize"])


def test_a_failed_execution_that_ran_no_state_is_torn_down(tmp_path: Path, monkeypatch: Any) -> None:
    """States.Runtime / States.DataLimitExceeded / the history limit end an execution FAILED without its Catch:
    its run record still says running, so the FAILED event tears it down (the campaign ends failed, its error
    ExecutionFailed) and announces it."""
    from tests.fakes.ports import record_asl_waits

    record_asl_waits(monkeypatch)
    with stopped_while_loading(tmp_path) as w:
        out = run_stopped_machine(w, status_event("FAILED"))
        assert out["status"] == "SUCCEEDED" and "AbortCampaign" in out["states"], out
        assert _desired(w) == 0
        rec = w["p"].state.campaign()
        assert rec is not None and (rec.status, rec.error) == ("failed", "ExecutionFailed"), rec
        assert "without running its own failure path" in str(rec.cause)
        (message,) = out["messages"]
        assert f"benchctl campaign {CID} ended: FAILED (its execution ended FAILED without running" in message


def test_a_failed_execution_whose_own_teardown_ran_is_left_alone(tmp_path: Path, monkeypatch: Any) -> None:
    """A FAILED execution whose failure path ran (its run record says failed) is not torn down again: nothing
    but reads, no report, no message."""
    from tests.fakes.ports import record_asl_waits

    record_asl_waits(monkeypatch)
    with stopped_while_loading(tmp_path) as w:
        campaign.mark_campaign(w["p"], w["ctx"], "failed", error="LoadFailed", cause="its own failure path ran")
        before = len(w["api"].requests)
        out = run_stopped_machine(w, status_event("FAILED"))
        assert out["status"] == "SUCCEEDED" and out["states"][-1] == "NothingToDo", out
        assert out["invoked"] == ["stopped"] and out["messages"] == []
        assert [r for r in w["api"].requests[before:] if r[0] != "GET"] == []
        assert _desired(w) > 0  # what the campaign's own teardown would have restored is not touched here


def test_two_duplicate_events_run_one_teardown_and_one_report(tmp_path: Path, monkeypatch: Any) -> None:
    """EventBridge targets are at-least-once: the same event delivered twice starts two executions at once. The
    create-only stop claim lets one tear down and report; the other finds the claim and does nothing."""
    from tests.fakes.ports import record_asl_waits

    record_asl_waits(monkeypatch)
    with stopped_while_loading(tmp_path) as w:
        event = status_event("ABORTED")
        a, b = run_stopped_machines(w, [event, event])
        assert a["status"] == b["status"] == "SUCCEEDED", (a, b)
        torn = [o for o in (a, b) if "AbortCampaign" in o["states"]]
        idle = [o for o in (a, b) if o["states"][-1] == "NothingToDo"]
        assert len(torn) == 1 and len(idle) == 1, (a["states"], b["states"])
        assert a["invoked"].count("report_failure") == 1 and a["invoked"].count("stopped") == 2
        assert len(a["messages"]) == 1 and "and torn down" in a["messages"][0]
        assert "claimed by " + torn[0]["execution"] in idle[0]["output"]["stopped"]["why"]
        assert _desired(w) == 0


def test_a_stop_racing_an_in_flight_scale_pools_leaves_no_group_scaled(tmp_path: Path, monkeypatch: Any) -> None:
    """StopExecution does not cancel the ScalePools invocation in flight. Here the whole stop (first pass,
    report, second pass) runs after ScalePools recorded nothing and before it scales: the invocation's re-check
    after its change finds the campaign no longer running, restores the group itself and raises
    CampaignNotRunning. No group stays scaled and no lock stays held."""
    from benchctl.errors import CampaignNotRunning
    from tests.fakes.ports import record_asl_waits

    record_asl_waits(monkeypatch)
    with planned(tmp_path) as w:
        p = w["p"]
        real_scale = p.pools.scale
        stops: list[dict[str, Any]] = []

        def scale_after_a_stop(*args: Any, **kw: Any) -> Any:
            if not stops:
                stops.append(run_stopped_machine(w, status_event("ABORTED")))
            return real_scale(*args, **kw)

        monkeypatch.setattr(p.pools, "scale", scale_after_a_stop)
        updates: list[str] = []  # the hook the redrive test counts on, seen to count here
        w["session"].events.register("before-call.eks.UpdateNodegroupConfig", lambda **kw: updates.append("u"))
        w["caller"].function = "Pools"
        with pytest.raises(CampaignNotRunning, match=r"stopped while ScalePools of .* ran: restored"):
            campaign.scale_pools(p, w["ctx"], Task(w["experiment"], state="ScalePools"))
        (stop,) = stops
        assert stop["status"] == "SUCCEEDED" and "AbortCampaign" in stop["states"], stop
        assert len(updates) == 2  # scaled by the invocation in flight, then restored by it
        assert _desired(w) == 0
        assert campaign.unrestored_pools(p) == {}
        assert p.locks.items == {}


def test_a_scale_pools_that_died_after_its_change_is_restored_by_the_second_pass(tmp_path: Path,
                                                                                monkeypatch: Any) -> None:
    """An in-flight ScalePools whose re-check never ran (it scaled, then its invocation ended: a timeout) and
    whose record the first pass did not see: the second pass, after the longest function timeout, finds the
    group recorded unrestored, takes its lock again and restores it."""
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    from benchctl.campaign import base, stopped

    with planned(tmp_path) as w:
        p = w["p"]
        waited: list[int] = []

        def in_flight_scale_pools_ends_during_the_wait(self: Any, env: Any, wait_seconds: int) -> None:
            waited.append(wait_seconds)
            if wait_seconds == stopped.RECHECK_S:  # the invocation that passed its first check before the stop
                with monkeypatch.context() as m:
                    m.setattr(base, "require_running", lambda p, state: None)  # died before its re-check
                    w["caller"].function = "Pools"
                    campaign.scale_pools(p, w["ctx"], Task(w["experiment"], state="ScalePools"))
                    w["caller"].function = "Teardown"
                assert _desired(w) > 0

        monkeypatch.setattr(WaitFunction, "_wait_interval", in_flight_scale_pools_ends_during_the_wait)
        w["caller"].function = "Teardown"
        out = run_stopped_machine(w, status_event("ABORTED"))
        assert stopped.RECHECK_S in waited
        assert out["status"] == "SUCCEEDED" and out["states"][-3:] == ["AbortAgain", "AgainDone?", "Stopped"], out
        assert _desired(w) == 0
        assert campaign.unrestored_pools(p) == {} and p.locks.items == {}
        rec = p.state.campaign()
        assert rec is not None and rec.status == "stopped"


def test_a_redriven_stopped_campaign_scales_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """Redrive restarts a stopped execution where it stopped, same ARN; its campaign was torn down and its locks
    released. ScalePools and Deploy refuse it (CampaignNotRunning, naming the status and the run record), and
    no node group update is made."""
    from benchctl.errors import CampaignNotRunning
    from tests.fakes.ports import record_asl_waits

    record_asl_waits(monkeypatch)
    with planned(tmp_path) as w:
        p, ctx, e = w["p"], w["ctx"], Task(w["experiment"], state="ScalePools")
        assert run_stopped_machine(w, status_event("ABORTED"))["status"] == "SUCCEEDED"
        updates: list[str] = []  # every EKS write the pool adapter makes, seen as it leaves the client
        for op in ("UpdateNodegroupConfig", "UpdateNodegroupVersion", "CreateNodegroup"):
            w["session"].events.register(f"before-call.eks.{op}", lambda op=op, **kw: updates.append(op))
        before = len(w["api"].requests)
        with pytest.raises(CampaignNotRunning, match=r"ScalePools: campaign .* is 'stopped', not 'running'"):
            campaign.scale_pools(p, ctx, e)
        with pytest.raises(CampaignNotRunning, match=r"Deploy: campaign .* is 'stopped'"):
            campaign.deploy(p, ctx, Task(w["experiment"], state="Deploy"))
        assert updates == []
        assert [r for r in w["api"].requests[before:] if r[0] != "GET"] == []
        assert _desired(w) == 0 and p.state.pools(w["experiment"]) is None


def test_the_second_pass_never_restores_a_pool_another_campaign_took_meanwhile(tmp_path: Path,
                                                                                monkeypatch: Any) -> None:
    """The first pass released the locks; another campaign took the pool before the second pass. The second
    pass refuses to restore under it (LockHeld, naming the holder), the machine ends failed and says so on the
    status topic, and the other campaign's lock and group are as it left them."""
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    from benchctl.campaign import base, stopped
    from benchctl.campaign.locks import lock_keys

    with planned(tmp_path) as w:
        p = w["p"]

        def another_campaign_takes_the_pool(self: Any, env: Any, wait_seconds: int) -> None:
            if wait_seconds == stopped.RECHECK_S:
                with monkeypatch.context() as m:
                    m.setattr(base, "require_running", lambda p, state: None)
                    w["caller"].function = "Pools"
                    campaign.scale_pools(p, w["ctx"], Task(w["experiment"], state="ScalePools"))
                    w["caller"].function = "Teardown"
                p.locks.acquire(lock_keys(p.state.spec()), "other-campaign", 3600)

        monkeypatch.setattr(WaitFunction, "_wait_interval", another_campaign_takes_the_pool)
        out = run_stopped_machine(w, status_event("ABORTED"))
        assert out["status"] == "FAILED" and out["states"][-2:] == ["NotifyAgainFailed", "StoppedUntorn"], out
        assert any("second teardown pass after its stop FAILED" in m for m in out["messages"]), out["messages"]
        assert _desired(w) > 0 and {h for h, _ in p.locks.items.values()} == {"other-campaign"}
