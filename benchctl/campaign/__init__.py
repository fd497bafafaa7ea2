"""The campaign's operations, one per state-machine task, written against ports.

Every operation has one signature, ``op(p: Providers, ctx: Ctx, task: Task) -> dict``: the providers of
this campaign's engine (``benchctl.campaign.ports``), the campaign context (``benchctl.campaign.context``) and the task as
its event names it (experiment, step, the Catch payload on failure paths, the execution input for the
entry states). It reads the small state it needs through the run-state facade (``p.state``), acts
through the ports, records timeline events (``benchctl.lake.timeline``) and returns a small JSON-able dict.
The handlers in ``lambdas/`` dispatch an event's ``action`` to an :class:`Operation` of this module.
No AWS, Kubernetes or subprocess imports here: those live in the engines (``benchctl.aws``,
``benchctl.local``), which the core never imports. Every operation is idempotent: a redelivered event
neither double-scales, double-deploys nor duplicates rows.

To add a task: an operation in the module of its phase, an :class:`Operation` below, its action in the
handler that runs it, its state in ``state_machines/campaign.src.json``.

May import: the foundation, the spec, the lake, planning and analysis (never an engine: they plug in
through ``benchctl.campaign.ports``).
"""

from __future__ import annotations

from functools import partial

from benchctl.campaign.base import (
    Cleanup,
    Operation,
    Task,
    claim,
    error_of,
    guard,
    now_iso,
    record_event,
    record_failure,
    write_costs,
)
from benchctl.campaign.context import Ctx, new_campaign_id
from benchctl.campaign.finish import mark_campaign, report, report_ending
from benchctl.campaign.ingest import ingest_after_failure, ingest_last, ingest_previous, ingest_step
from benchctl.campaign.load import (
    await_load,
    check_load,
    check_warmup,
    launch_step,
    launch_warmup,
    load_wake,
    step_dataset,
    stop_load_after_failure,
    stop_loads,
)
from benchctl.campaign.planning import experiment_row, plan, plan_failed, plan_failed_without_context
from benchctl.campaign.pools import check_capacity, scale_pools
from benchctl.campaign.serving import (
    check_ready,
    check_smoke,
    deploy,
    deployment_request,
    mocker_knobs,
    smoke,
)
from benchctl.campaign.spend import budget_guard
from benchctl.campaign.teardown import (
    abort_campaign,
    experiment_failed,
    release_identity,
    release_locks,
    teardown_experiment,
    unrestored_pools,
)

# The operations as the handlers dispatch them (one per Task state of the ASL).
PLAN = Operation(plan, claims=True)
RECORD_PLAN_FAILURE = Operation(plan_failed, cleanup=True, without_context=plan_failed_without_context,
                                claims=True)
SCALE_POOLS = Operation(scale_pools)
CHECK_CAPACITY = Operation(check_capacity)
DEPLOY = Operation(deploy)
CHECK_READY = Operation(check_ready)
SMOKE_TEST = Operation(smoke)
CHECK_SMOKE = Operation(check_smoke)
LAUNCH_WARMUP = Operation(launch_warmup)
CHECK_WARMUP = Operation(check_warmup)
LAUNCH_LOAD = Operation(launch_step)
AWAIT_LOAD_END = Operation(await_load)
CHECK_LOAD = Operation(check_load)
STOP_LOAD_AFTER_FAILURE = Operation(stop_load_after_failure, cleanup=True)
INGEST_PREVIOUS_STEP = Operation(ingest_previous)
INGEST_LAST_STEP = Operation(ingest_last)
INGEST_AFTER_FAILURE = Operation(ingest_after_failure, cleanup=True)
TEARDOWN_EXPERIMENT = Operation(partial(teardown_experiment, handover=True, wait_gone=True), cleanup=True)
TEARDOWN_AFTER_FAILURE = Operation(partial(experiment_failed, wait_gone=True), cleanup=True)
ABORT_CAMPAIGN = Operation(partial(abort_campaign, wait_gone=True), cleanup=True)
REPORT = Operation(report)
REPORT_FAILURE = Operation(report_ending, cleanup=True)

__all__ = [
    "ABORT_CAMPAIGN", "AWAIT_LOAD_END", "CHECK_CAPACITY", "CHECK_LOAD", "CHECK_READY", "CHECK_SMOKE", "CHECK_WARMUP",
    "DEPLOY", "INGEST_AFTER_FAILURE", "INGEST_LAST_STEP", "INGEST_PREVIOUS_STEP", "LAUNCH_LOAD", "LAUNCH_WARMUP", "PLAN", "RECORD_PLAN_FAILURE", "REPORT", "REPORT_FAILURE", "SCALE_POOLS",
    "SMOKE_TEST", "STOP_LOAD_AFTER_FAILURE", "TEARDOWN_AFTER_FAILURE", "TEARDOWN_EXPERIMENT",
    "Cleanup", "Ctx", "Operation", "Task", "abort_campaign", "await_load", "budget_guard", "check_capacity",
    "check_load", "check_ready", "check_smoke", "check_warmup", "claim", "deploy", "deployment_request", "error_of",
    "experiment_failed", "experiment_row", "guard", "ingest_after_failure", "ingest_last", "ingest_previous", "ingest_step", "launch_step", "launch_warmup", "load_wake",
    "mark_campaign", "mocker_knobs", "new_campaign_id", "now_iso", "plan", "plan_failed",
    "plan_failed_without_context", "record_event", "record_failure", "release_identity", "release_locks", "report", "report_ending", "scale_pools",
    "smoke", "step_dataset", "stop_load_after_failure", "stop_loads", "teardown_experiment", "unrestored_pools",
    "write_costs",
]
