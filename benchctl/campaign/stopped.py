"""A campaign whose execution was stopped from outside: the console's (or the API's) Stop execution, or the
execution's own timeout. No state of the campaign runs after such a stop, so nothing inside the state machine
can tear it down: the execution's status-change event (EventBridge, ``ABORTED`` or ``TIMED_OUT``) starts the
stopped-campaign state machine (``state_machines/stopped.asl.json``), whose first state is
:func:`resolve_stopped` and whose others are the campaign's own failure path: AbortCampaign (the load first,
then serving, then the pools back to their recorded sizes, locks and runner identity released), then
ReportFailure with the ending ``stopped``.

:func:`resolve_stopped` finds the campaign the event names (the campaign id as the execution derived it: its
input's ``campaign_id``, else its name) and says whether there is anything to do: only for the campaign whose
run record names exactly this execution and is still ``running``. Another execution's campaign (a reused id),
one whose Plan recorded nothing, and one that ended already (a duplicate event, the hourly sweeper first, the
state machine's own ending) are left alone. May import the foundation and the core.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

from benchctl import logtext
from benchctl.campaign.base import record_failure
from benchctl.campaign.context import Ctx, StartInput, start_context
from benchctl.campaign.ports import JSON, Engine

# the EventBridge event (Step Functions developer guide, "Automating Step Functions event delivery with
# EventBridge": source aws.states, detail-type "Step Functions Execution Status Change", detail with
# executionArn, stateMachineArn, name, status, startDate, stopDate, input, inputDetails)
SOURCE = "aws.states"
DETAIL_TYPE = "Step Functions Execution Status Change"
# the status of a stopped execution -> the error its campaign ends with (the campaigns row's error)
STOPPED_ERRORS = {"ABORTED": "ExecutionStopped", "TIMED_OUT": "ExecutionTimedOut"}
HOW = {"ABORTED": "its execution was stopped from outside (Step Functions' Stop execution)",
       "TIMED_OUT": "its execution reached its timeout (the state machine's TimeoutSeconds)"}


class ExecutionStopped(Exception):
    """The campaign's execution was stopped from outside (Stop execution)."""


class ExecutionTimedOut(Exception):
    """The campaign's execution reached its timeout."""


def _field(obj: Any, key: str, where: str) -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(value, str) or not value:
        raise ValueError(f"stopped-execution event: {where}.{key} is {value!r}; expected a non-empty string "
                         f"(an EventBridge '{DETAIL_TYPE}' event of source {SOURCE})")
    return value


def event_context(event: Any, *, runs_uri: str, lake_uri: str) -> tuple[Ctx, str, str]:
    """(campaign context, status, execution ARN) of a stopped execution's status-change event, the campaign
    id derived as the execution derived it (``context.start_context``). ValueError naming the field that is
    not what such an event holds."""
    if not isinstance(event, dict) or event.get("source") != SOURCE or event.get("detail-type") != DETAIL_TYPE:
        raise ValueError(f"stopped-execution event: expected source {SOURCE!r} and detail-type {DETAIL_TYPE!r}, got "
                         f"{(event or {}).get('source')!r} and {(event or {}).get('detail-type')!r}"
                         if isinstance(event, dict) else "stopped-execution event: not an object")
    detail = event.get("detail") or {}
    status = _field(detail, "status", "detail")
    if status not in STOPPED_ERRORS:
        raise ValueError(f"stopped-execution event: detail.status {status!r} is not a stop: expected one of "
                         f"{sorted(STOPPED_ERRORS)}")
    arn = _field(detail, "executionArn", "detail")
    name = _field(detail, "name", "detail")
    raw = detail.get("input")
    try:  # the execution's input, when the event carries it (inputDetails.included); else its name alone
        inp = StartInput.parse(json.loads(raw)) if isinstance(raw, str) and raw.strip() else StartInput(spec_uri="")
    except ValueError:
        inp = StartInput(spec_uri="")  # an input its own Plan refused: the execution's name is what it went by
    ctx = start_context(inp, f"{arn.rsplit(':', 1)[0]}:{name}", runs_uri=runs_uri, lake_uri=lake_uri)
    return dataclasses.replace(ctx, fail_at=None), status, arn  # no injected failure in a teardown


def resolve_stopped(engine: Engine, event: Any) -> JSON:
    """The first state of the stopped-campaign state machine: ``{"todo", "why", "ctx", "error"}``. With ``todo``
    the campaign's failure is recorded (the error :data:`STOPPED_ERRORS` names, its cause saying how and where it
    stopped) and ``ctx``/``error`` are what AbortCampaign takes; without it nothing was read or written but
    the campaign's run record. Every key is always present (the state's ResultSelector reads them all)."""
    ctx, status, arn = event_context(event, runs_uri=engine.runs_uri, lake_uri=engine.lake_uri)
    p = engine.providers(ctx)
    rec = p.state.campaign()
    skip = {"todo": False, "ctx": ctx.to_json(), "error": None}
    if rec is None:
        return {**skip, "why": f"campaign {ctx.campaign_id}: no run record (its Plan created nothing): nothing to do"}
    if rec.execution != arn:
        return {**skip, "why": f"campaign {ctx.campaign_id} belongs to execution {rec.execution}, not {arn}: "
                               "left alone"}
    if rec.status != "running":
        return {**skip, "why": f"campaign {ctx.campaign_id} ended already ({rec.status}): nothing to do"}
    running = [f"{exp}/{step}" for exp in p.state.experiment_names() for step, load in p.state.loads(exp)
               if load.running]
    stop = (event.get("detail") or {}).get("stopDate")  # epoch milliseconds
    when = datetime.fromtimestamp(stop / 1000, UTC).isoformat(timespec="seconds") if isinstance(stop, int) else None
    cause = HOW[status] + (f" at {when}" if when else "") + (
        f", while the load of {', '.join(running)} ran" if running else "")
    exc = (ExecutionStopped if status == "ABORTED" else ExecutionTimedOut)(cause)
    record_failure(p, None, exc)
    return {"todo": True, "why": cause, "ctx": ctx.to_json(),
            "error": {"Error": STOPPED_ERRORS[status], "Cause": logtext.readable(cause)}}
