"""The budget guard: before a step and on every poll of a wait, accrued cost plus the estimate of what is left
must stay within the budget; and the longest a wait nobody polls may last."""

from __future__ import annotations

from benchctl.campaign.base import JSON, now_iso, record_event
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.campaign.records import CampaignRecord
from benchctl.errors import BudgetExceeded
from benchctl.lake import timeline

AWAIT_TIMEOUT_MAX_S = 99_999_999  # Step Functions' largest TimeoutSeconds


def budget_guard(p: Providers, ctx: Ctx, experiment: str, step_id: str | None, *, waiting: str | None = None) -> None:
    """Before a step, and on every poll of the capacity, readiness and load waits: accrued cost + the remaining
    estimate must stay within the budget (the spec's, else the deployment's ceiling the plan records), else
    abort: ``BudgetExceeded``, whose Catch tears the experiment down.

    ``step_id``: the step about to run or being waited for (None: before the experiment's first step, as in
    its capacity and readiness waits); ``waiting``: the wait it runs in (named in the refusal). Reads one small
    object per experiment (its pools' rows, ``RunState.pool_events``) and the campaign record, never the
    timeline table (hundreds of objects on S3 by the end of a long campaign). What is done follows from the
    plan's order: experiments run one at a time and steps in order, and a failed step or experiment ends the
    campaign, so every step before this one is done."""
    from benchctl.planning.budget import budget_problem, guarded

    spec, plan = p.state.spec(), p.state.plan()
    if not guarded(spec, plan):  # no budget, no Capacity Block's end to keep
        return
    rows, done, now = _budget_inputs(p, ctx, experiment, step_id)
    ran_s: dict[tuple[str, str], float] = {}
    if waiting and step_id is not None and (rec := p.state.load(experiment, step_id)) and rec.running_at:
        ran_s[(experiment, step_id)] = max(0.0, p.clock() - rec.running_at)  # accrued, not estimated twice
    problem = budget_problem(spec, plan, rows, done, now, ran_s)
    if problem:
        if waiting:
            problem += f" (while waiting for {waiting})"
        record_event(p, ctx.campaign_id, experiment, timeline.BUDGET_EXCEEDED, key=step_id or waiting or "",
                     step_id=step_id, reason=problem)
        raise BudgetExceeded(problem)


def _budget_inputs(p: Providers, ctx: Ctx, experiment: str,
                   step_id: str | None) -> tuple[list[JSON], set[tuple[str, str]], str]:
    """The budget's inputs before ``step_id`` (None: before the experiment's first step): the pools' rows, the
    steps done, now."""
    plan = p.state.plan()
    done: set[tuple[str, str]] = set()
    for e in plan.experiments:
        ids = [s.step_id for s in e.steps]
        if e.name == experiment:
            done.update((e.name, s) for s in ids[: ids.index(step_id) if step_id is not None else 0])
            break
        done.update((e.name, s) for s in ids)
    rows = p.state.pool_events()
    started = (p.state.campaign() or CampaignRecord(campaign_id=ctx.campaign_id)).started_at
    if started:  # elapsed time runs from the campaign's start (its first timeline event, Plan's)
        rows.append({"event": "", "at": started})
    return rows, done, now_iso(p.clock)


def await_timeout_s(p: Providers, ctx: Ctx, experiment: str, step_id: str, est_s: float) -> int:
    """AwaitLoadEnd's ``TimeoutSecondsPath``: nobody polls the budget while a task token waits (AWS), so the
    wait itself ends where the guard would refuse: the step's estimate plus the budget's slack at the pools'
    rate now (``budget.budget_slack_s``); Step Functions' largest timeout without a budget."""
    from benchctl.planning.budget import budget_slack_s, guarded

    spec, plan = p.state.spec(), p.state.plan()
    slack = None
    if guarded(spec, plan):
        slack = budget_slack_s(spec, plan, *_budget_inputs(p, ctx, experiment, step_id))
    if slack is None:
        return AWAIT_TIMEOUT_MAX_S
    return int(min(AWAIT_TIMEOUT_MAX_S, max(1.0, est_s + slack)))
