"""Plan: take the spec the execution was started with, expand the plan, refuse what cannot run, write the
run manifest (and the experiments and comparisons rows) and take the pool locks; and RecordPlanFailure, the record of a Plan that failed."""

from __future__ import annotations

from benchctl.campaign.base import (
    JSON,
    Cleanup,
    Task,
    error_of,
    experiment_row,
    now_iso,
    record_event,
    write_campaign,
)
from benchctl.campaign.context import Ctx, StartInput
from benchctl.campaign.locks import lock_keys
from benchctl.campaign.ports import Providers
from benchctl.campaign.records import CampaignRecord
from benchctl.errors import CampaignIdInUse, CeilingExceeded, PreflightFailed, SpecError
from benchctl.lake import timeline
from benchctl.planning.history import aws_limits
from benchctl.planning.placement import feasible
from benchctl.planning.plan import plan_campaign
from benchctl.spec.comparisons import comparison_rows
from benchctl.spec.model import parse_spec_text


def _import_spec(p: Providers, uri: str) -> None:
    """Keep the spec given by URI in the run state: validated, its raw text beside it."""
    raw = p.read_uri(uri)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(uri, [f"(file): not UTF-8 text ({err.reason} at byte {err.start})"]) from None
    p.state.keep_spec(feasible(parse_spec_text(text, uri), uri), source=uri, text=text)


def plan(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """Validate the spec, expand the plan, refuse what exceeds the budget (and, on AWS, what one execution
    cannot hold), check the engine's prerequisites, take the pool locks, write the manifest."""
    if not p.state.has_spec():
        if task.input is None:
            raise FileNotFoundError(f"{p.state.where('spec')} is missing and the task has no execution input")
        _import_spec(p, StartInput.parse(task.input).spec_uri)
    spec = p.state.spec()
    the_plan = plan_campaign(spec, p.engine, ranker=p.ranker, start=p.clock())  # start: a Capacity Block's window
    problems = list(the_plan.budget_problems)
    if p.engine == "aws":  # one Step Functions execution: its history quota and timeout (started from a
        problems += aws_limits(spec, the_plan, ctx.poll_seconds)[1]  # console or schedule, nothing checked them)
    if problems:
        raise SpecError(p.state.where("spec"), problems)
    if p.ceilings is not None:  # the deployment's, whoever started the execution (console, schedule, start)
        from dataclasses import replace

        from benchctl.planning import ceilings

        over = ceilings.check(spec, the_plan, p.ceilings, ctx.poll_seconds if p.engine == "aws" else None)
        if over:
            raise CeilingExceeded(p.state.where("spec"), ceilings.lines(over))
        the_plan = replace(the_plan, max_usd=p.ceilings.budget_usd(spec))  # the guard's budget
    if p.preflight is not None and not p.state.preflight_done():
        # before anything is scaled: every missing prerequisite, by name (NotReadyYet while its image
        # checks still run: the state's Retry calls Plan again)
        missing = p.preflight.check(spec)
        if missing:
            raise PreflightFailed(missing)
        p.state.mark_preflight(now_iso(p.clock))
    if p.locks is not None:  # one campaign per pool; a second one fails here, before touching anything
        ttl = the_plan.est_s + spec.timeouts.capacity_s + spec.timeouts.ready_s + 3600 * (1 + len(spec.experiments))
        p.locks.acquire(lock_keys(spec), ctx.campaign_id, ttl)
    p.state.keep_plan(the_plan)
    if p.state.campaign() is None:
        p.state.save_campaign(CampaignRecord(
            campaign_id=ctx.campaign_id, execution=task.execution, spec_hash=the_plan.spec_hash,
            spec_name=spec.name, model=spec.model.name, started_at=now_iso(p.clock), versions=dict(p.versions),
            pricing=spec.pricing.model_dump(mode="json"), status="running"))
    write_campaign(p, ctx, "running")
    p.lake.write("experiments", [experiment_row(ctx.campaign_id, i, e, spec) for i, e in enumerate(spec.experiments)],
                 part_name="experiment")
    p.lake.write("comparisons", comparison_rows(ctx.campaign_id, spec), part_name="comparisons")
    record_event(p, ctx.campaign_id, timeline.CAMPAIGN, timeline.PLANNED,
                 steps=sum(len(e.steps) for e in the_plan.experiments))
    return {
        "ctx": ctx.to_json(),
        "experiments": [
            {"index": e.index, "name": e.name, "steps": [s.step_id for s in e.steps]} for e in the_plan.experiments
        ],
    }


def plan_failed(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """RecordPlanFailure: the campaign record says Plan failed and why; only this campaign's locks are
    released (a LockHeld failure leaves the holder's locks alone). Its entry claim (``Operation.claims``)
    made sure the campaign id is this execution's; a CampaignIdInUse is not recorded at all."""
    from benchctl.campaign.teardown import release_identity, release_locks

    name, cause = error_of(task.error)
    if name == CampaignIdInUse.__name__:  # the ASL ends such an execution before this state; should it come
        return {"error": name, "cause": cause}  # here anyway, the campaign is another execution's: touch nothing
    c = Cleanup(p, ctx, timeline.CAMPAIGN)
    if c.attempt("read campaign", p.state.campaign) is None:
        c.attempt("campaign record", p.state.save_campaign,
                  CampaignRecord(campaign_id=ctx.campaign_id, execution=task.execution, started_at=now_iso(p.clock)))
    status = "aborted" if name == "Aborted" else "failed"
    c.attempt("campaign record", write_campaign, p, ctx, status, failed_state="Plan", error=name, cause=cause)
    c.attempt("locks", release_locks, p, ctx)
    c.attempt("runner identity", release_identity, p, ctx)
    c.finish()
    return {"error": name, "cause": cause}


def plan_failed_without_context(task: Task) -> JSON:
    """RecordPlanFailure of an execution whose input names no campaign: nothing to record it in."""
    name, cause = error_of(task.error)
    return {"error": name, "cause": cause}
