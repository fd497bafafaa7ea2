"""A campaign whose execution ended without its own teardown: the console's (or the API's) Stop execution, the
execution's own timeout, or an error no Catch can take (``States.Runtime``, ``States.DataLimitExceeded``, the
25,000-event history limit: the execution ends FAILED without running another state). No state of the campaign
runs after such an end, so nothing inside the state machine can tear it down: the execution's status-change event
(EventBridge, ``ABORTED``, ``TIMED_OUT`` or ``FAILED``) starts the stopped-campaign state machine (``state_machines/stopped.asl.json``), whose first state is
:func:`resolve_stopped` and whose others are the campaign's own failure path: AbortCampaign (the load first,
then serving, then the pools back to their recorded sizes, locks and runner identity released), then
ReportFailure with the ending ``stopped``.

:func:`resolve_stopped` first verifies the event, which is only a pointer (whoever may start the stopped-campaign
machine or invoke Teardown can write one): its execution ARN must have the execution ARN format and name an
execution of the campaign state machine (``BENCHCTL_CAMPAIGN_MACHINE_ARN``), and Step Functions' DescribeExecution
must say that execution belongs to that machine and ended ABORTED, TIMED_OUT or FAILED (RUNNING, SUCCEEDED,
PENDING_REDRIVE, an unknown execution: refused, nothing torn down, the refusal logged and returned). It then finds
the campaign the DESCRIBED execution ran (its input's ``campaign_id``, else its name; never the event's input) and
says whether there is anything to do: only for the campaign whose
run record names exactly this execution and is still ``running``. Another execution's campaign (a reused id),
one whose Plan recorded nothing, and one that ended already (a duplicate event, the hourly sweeper first, the
state machine's own ending, a FAILED execution whose own failure path ran) are left alone.

One stop runs one teardown: :func:`resolve_stopped` takes a create-only claim (``RunState.claim_stop``: S3's
conditional PUT, ``If-None-Match: *``) naming the stopped-campaign execution that tears the campaign down; a
duplicate event's execution (EventBridge targets are at-least-once), or the sweeper's watchdog, finds it taken
and does nothing. Before it returns it marks the run record ``stopping``, so that a ScalePools or Deploy still in
flight (StopExecution does not cancel a running Lambda invocation) sees the campaign is no longer running
(:func:`benchctl.campaign.base.require_running`), undoes what it scaled and raises :class:`CampaignNotRunning`; the same check refuses a
redriven execution (same ARN, its campaign no longer running). :func:`abort_again` is the machine's second pass,
after the longest function timeout (:data:`RECHECK_S`): whatever an invocation in flight left is torn down then.
May import the foundation and the core.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from benchctl import logtext
from benchctl.campaign.base import Operation, Task, record_failure
from benchctl.campaign.context import Ctx, StartInput, start_context
from benchctl.campaign.ports import JSON, Engine, Providers

# the EventBridge event (Step Functions developer guide, "Automating Step Functions event delivery with
# EventBridge": source aws.states, detail-type "Step Functions Execution Status Change", detail with
# executionArn, stateMachineArn, name, status, startDate, stopDate, input, inputDetails)
SOURCE = "aws.states"
DETAIL_TYPE = "Step Functions Execution Status Change"
# the status of a stopped execution -> the error its campaign ends with (the campaigns row's error)
STOPPED_ERRORS = {"ABORTED": "ExecutionStopped", "TIMED_OUT": "ExecutionTimedOut", "FAILED": "ExecutionFailed"}
HOW = {"ABORTED": "its execution was stopped from outside (Step Functions' Stop execution)",
       "TIMED_OUT": "its execution reached its timeout (the state machine's TimeoutSeconds)",
       "FAILED": "its execution ended FAILED without running its own failure path (an error no Catch takes: "
                 "States.Runtime, States.DataLimitExceeded or the 25,000-event history limit)"}
# the run record's status between ResolveStopped and the end of AbortCampaign: no longer running
STOPPING = "stopping"
# the second abort pass waits this long after the first: longer than the longest function timeout (15 min,
# stacks.function_needs and the sweeper), so every invocation in flight at the stop has ended by then
RECHECK_S = 16 * 60


class ExecutionStopped(Exception):
    """The campaign's execution was stopped from outside (Stop execution)."""


class ExecutionTimedOut(Exception):
    """The campaign's execution reached its timeout."""


class ExecutionFailed(Exception):
    """The campaign's execution ended FAILED without running its own failure path."""


# an execution ARN (Step Functions API reference, DescribeExecution ``executionArn``, 1..256 characters;
# StartExecution ``name`` and CreateStateMachine ``name``: 1..80 characters, no white space, no brackets < > { } [ ],
# no wildcard ? *, none of " # % \\ ^ | ~ ` $ & , ; : /, no control character U+0000-001F, U+007F-009F):
# arn:<partition>:states:<region>:<account>:execution:<stateMachineName>:<executionName>
_NAME = r"[^\s<>{}\[\]?*\"#%\\^|~`$&,;:/\x00-\x1f\x7f-\x9f]{1,80}"
EXECUTION_ARN = re.compile(rf"arn:(aws[a-z-]*):states:([a-z]{{2}}(?:-[a-z]+)+-\d+):(\d{{12}}):execution:({_NAME}):({_NAME})")
MAX_ARN = 256
# DescribeExecution's errors that mean "no such execution here": the event names none, so it is refused
NO_SUCH_EXECUTION = ("ExecutionDoesNotExist", "InvalidArn")


class ExecutionReader(Protocol):
    """What the stop path reads of Step Functions: boto3's ``stepfunctions`` client has this method (an unknown
    execution raises ``ExecutionDoesNotExist``, a malformed ARN ``InvalidArn``, both ``ClientError``s)."""

    def describe_execution(self, *, executionArn: str) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class StopVerifier:
    """How a stop event is checked before anything is torn down: the campaign state machine's ARN (the
    function's ``BENCHCTL_CAMPAIGN_MACHINE_ARN``) and a reader of its executions (``benchctl.aws.executions``)."""

    machine_arn: str
    executions: ExecutionReader


class StopRefused(ValueError):
    """A stop event that does not name an ended execution of the campaign state machine."""


def _field(obj: Any, key: str, where: str) -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, str) or not value:
        raise ValueError(f"stopped-execution event: {where}.{key} is {value!r}; expected a non-empty string "
                         f"(an EventBridge '{DETAIL_TYPE}' event of source {SOURCE})")
    return value


def claimed_execution(event: Any) -> str:
    """The execution ARN a stopped-execution event names: only that is taken from the event (its status, name
    and input are whatever its sender wrote; :func:`verified_execution` reads them from Step Functions).
    ValueError naming the field that is not what such an event holds."""
    if not isinstance(event, dict) or event.get("source") != SOURCE or event.get("detail-type") != DETAIL_TYPE:
        raise ValueError(f"stopped-execution event: expected source {SOURCE!r} and detail-type {DETAIL_TYPE!r}, got "
                         f"{(event or {}).get('source')!r} and {(event or {}).get('detail-type')!r}"
                         if isinstance(event, dict) else "stopped-execution event: not an object")
    detail = event.get("detail") or {}
    status = _field(detail, "status", "detail")
    if status not in STOPPED_ERRORS:
        raise ValueError(f"stopped-execution event: detail.status {status!r} is not a stop: expected one of "
                         f"{sorted(STOPPED_ERRORS)}")
    return _field(detail, "executionArn", "detail")


def check_execution_arn(arn: str, machine_arn: str) -> None:
    """StopRefused unless ``arn`` has the execution ARN format and names an execution of ``machine_arn`` (same
    partition, Region, account and state machine name)."""
    m = EXECUTION_ARN.fullmatch(arn) if len(arn) <= MAX_ARN else None
    if m is None:
        raise StopRefused(f"detail.executionArn {arn[:300]!r} is not a Step Functions execution ARN "
                          "(arn:<partition>:states:<region>:<account>:execution:<stateMachineName>:<executionName>)")
    partition, region, account, machine, _ = m.groups()
    if f"arn:{partition}:states:{region}:{account}:stateMachine:{machine}" != machine_arn:
        raise StopRefused(f"execution {arn} is not an execution of the campaign state machine {machine_arn}")


def verified_execution(verifier: StopVerifier, arn: str) -> Mapping[str, Any]:
    """Step Functions' own answer for ``arn`` (DescribeExecution), held to the campaign state machine and a
    terminal status; StopRefused saying which check failed. Any other error of the call (throttling, access)
    is raised: the state's Retry, then its Catch, handle it."""
    if not verifier.machine_arn:
        raise ValueError("this function's environment has no BENCHCTL_CAMPAIGN_MACHINE_ARN (the campaign state "
                         "machine's ARN; the control-plane stack sets it): no stop can be verified")
    check_execution_arn(arn, verifier.machine_arn)
    try:
        desc = verifier.executions.describe_execution(executionArn=arn)
    except Exception as err:
        code = str(((getattr(err, "response", None) or {}).get("Error") or {}).get("Code") or "")
        if code in NO_SUCH_EXECUTION:
            raise StopRefused(f"DescribeExecution of {arn}: {code} (no such execution)") from err
        raise
    machine, status = desc.get("stateMachineArn"), desc.get("status")
    if machine != verifier.machine_arn:
        raise StopRefused(f"execution {arn} belongs to state machine {machine!r}, not the campaign state machine "
                          f"{verifier.machine_arn}")
    if desc.get("executionArn") != arn:
        raise StopRefused(f"DescribeExecution of {arn} answered for {desc.get('executionArn')!r}")
    if status not in STOPPED_ERRORS:
        raise StopRefused(f"execution {arn} is {status}, not ended by a stop (one of {', '.join(STOPPED_ERRORS)})")
    return desc


def execution_context(desc: Mapping[str, Any], *, runs_uri: str, lake_uri: str) -> tuple[Ctx, str, str]:
    """(campaign context, status, execution ARN) of a DescribeExecution answer, the campaign id derived as the
    execution derived it (``context.start_context``: its input's ``campaign_id``, else its name)."""
    arn, name, raw = str(desc["executionArn"]), str(desc.get("name") or ""), desc.get("input")
    try:  # the execution's input as Step Functions holds it; an input its own Plan refused: its name alone
        inp = StartInput.parse(json.loads(raw)) if isinstance(raw, str) and raw.strip() else StartInput(spec_uri="")
    except ValueError:
        inp = StartInput(spec_uri="")
    ctx = start_context(inp, f"{arn.rsplit(':', 1)[0]}:{name}", runs_uri=runs_uri, lake_uri=lake_uri)
    return dataclasses.replace(ctx, fail_at=None), str(desc["status"]), arn  # no injected failure in a teardown


def _stopped_at(desc: Mapping[str, Any]) -> str | None:
    stop = desc.get("stopDate")  # boto3: a datetime; epoch seconds or milliseconds from other readers
    if isinstance(stop, datetime):
        return stop.astimezone(UTC).isoformat(timespec="seconds")
    if isinstance(stop, int | float) and not isinstance(stop, bool):
        return datetime.fromtimestamp(stop / 1000 if stop > 1e11 else stop, UTC).isoformat(timespec="seconds")
    return None


def resolve_stopped(engine: Engine, event: Any, claimant: str = "", *, verifier: StopVerifier) -> JSON:
    """The first state of the stopped-campaign state machine: ``{"todo", "why", "ctx", "error", "recheck_s",
    "refused"}``. The event is only a pointer: its execution ARN must have the execution ARN format and name an
    execution of the campaign state machine, and DescribeExecution must say that execution belongs to it and
    ended ABORTED, TIMED_OUT or FAILED; the campaign, status and stop time are then the described execution's
    (its input, its name), never the event's. A refused event (``refused`` says why) tears nothing down and
    writes nothing. ``claimant`` is the stopped-campaign execution asking (``$$.Execution.Id``; default the
    stopped execution's ARN). With ``todo`` this claimant holds the campaign's stop claim, the campaign's failure
    is recorded (the error :data:`STOPPED_ERRORS` names, its cause saying how and where it stopped), its run
    record says ``stopping``, and ``ctx``/``error`` are what AbortCampaign takes; a retry by the same claimant
    goes on. Without it nothing was written. Every key is always present (the state's ResultSelector reads them)."""
    arn = claimed_execution(event)
    try:
        desc = verified_execution(verifier, arn)
    except StopRefused as refused:
        return {"todo": False, "ctx": None, "error": None, "recheck_s": RECHECK_S, "refused": str(refused),
                "why": f"stop event refused: {refused}; nothing torn down, nothing to do"}
    ctx, status, arn = execution_context(desc, runs_uri=engine.runs_uri, lake_uri=engine.lake_uri)
    p = engine.providers(ctx)
    claimant = claimant or arn
    rec = p.state.campaign()
    skip = {"todo": False, "ctx": ctx.to_json(), "error": None, "recheck_s": RECHECK_S, "refused": None}
    if rec is None:
        return {**skip, "why": f"campaign {ctx.campaign_id}: no run record (its Plan created nothing): nothing to do"}
    if rec.execution != arn:
        return {**skip, "why": f"campaign {ctx.campaign_id} belongs to execution {rec.execution}, not {arn}: "
                               "left alone"}
    if rec.status not in ("running", STOPPING):
        return {**skip, "why": f"campaign {ctx.campaign_id} ended already ({rec.status}): nothing to do"}
    now = datetime.fromtimestamp(p.clock(), UTC).isoformat(timespec="seconds")
    held = p.state.claim_stop(claimant, now, status)
    if held is not None and held.get("claimant") != claimant:
        return {**skip, "why": f"campaign {ctx.campaign_id}: its teardown was claimed by {held.get('claimant')} at "
                               f"{held.get('claimed_at')} (a duplicate event, or the sweeper's watchdog): nothing "
                               "to do"}
    running = [f"{exp}/{step}" for exp in p.state.experiment_names() for step, load in p.state.loads(exp)
               if load.running]
    when = _stopped_at(desc)
    cause = HOW[status] + (f" at {when}" if when else "") + (
        f", while the load of {', '.join(running)} ran" if running else "")
    exc = {"ABORTED": ExecutionStopped, "TIMED_OUT": ExecutionTimedOut, "FAILED": ExecutionFailed}[status](cause)
    record_failure(p, None, exc)
    if rec.status == "running":  # what is in flight (ScalePools, Deploy) sees it is no longer running
        rec.status = STOPPING
        p.state.save_campaign(rec)
    return {"todo": True, "why": cause, "ctx": ctx.to_json(), "recheck_s": RECHECK_S, "refused": None,
            "error": {"Error": STOPPED_ERRORS[status], "Cause": logtext.readable(cause)}}


def leftovers_after_stop(p: Providers) -> list[str]:
    """What an invocation in flight at the stop may have left after the first abort pass: the experiments with a
    pool nobody restored, a deployment not torn down, or a load still running (``benchctl.campaign.sweep``)."""
    from benchctl.campaign.sweep import leftovers

    return leftovers(p)


def abort_again(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """The stopped-campaign machine's second pass (AbortAgain, :data:`RECHECK_S` after the first): a ScalePools
    or Deploy in flight at the stop that wrote after the first pass read is torn down now. Nothing left: ``done``
    and nothing touched. Else the locks of the pools left scaled are taken again first (the first pass released
    them; a pool another campaign took meanwhile is not restored under it: ``LockHeld`` names the holder, and
    the state's Catch says the teardown failed), then the same abort as the first pass (``abort_campaign``)."""
    from benchctl.campaign.teardown import abort_campaign, unrestored_pools

    left = leftovers_after_stop(p)
    if not left:
        return {"done": True, "left": [], "error": None, "cause": None}
    pools = set().union(*unrestored_pools(p).values())
    if pools and p.locks is not None and p.state.has_spec():
        from benchctl.campaign.locks import lock_keys

        p.locks.acquire(lock_keys(p.state.spec(), pools), ctx.campaign_id, RECHECK_S)
    out = abort_campaign(p, ctx, task, wait_gone=True)
    return {**out, "left": left}


ABORT_AGAIN = Operation(abort_again, cleanup=True)  # lambdas.teardown's action "stopped_again"
