"""Report: the campaign's cost rows, its final status, its views and report, its locks released."""

from __future__ import annotations

from benchctl import timeline
from benchctl.campaign.base import JSON, Task, guard, record_event, simulated, write_campaign
from benchctl.context import Ctx
from benchctl.ports import Providers


def write_costs(p: Providers, ctx: Ctx) -> list[JSON]:
    """The campaign's cost rows (experiment x pool, from its timeline and steps) into ``costs``."""
    from benchctl.costs import cost_rows

    if not (p.state.has_spec() and p.state.has_plan()):
        return []
    rows: list[JSON] = cost_rows(ctx.campaign_id, p.state.spec(), p.state.plan(),
                                 p.lake.read_table("timeline", ctx.campaign_id),
                                 p.lake.read_table("steps", ctx.campaign_id), simulated=simulated(p))
    p.lake.write("costs", rows, part_name="costs")
    return rows


def report(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """The campaign's end: cost rows, its final status, then the views and the report (which show that
    status), then its locks. An abort requested while the last experiment was torn down is honoured
    here, before the campaign is called succeeded."""
    from benchctl.campaign.teardown import release_identity, release_locks

    write_costs(p, ctx)
    guard(p, task.state or "Report", None)
    write_campaign(p, ctx, "succeeded")
    record_event(p, ctx.campaign_id, timeline.CAMPAIGN, timeline.SUCCEEDED)
    views = p.report.write(ctx.campaign_id) if p.report is not None else {}
    release_locks(p, ctx)
    # Report's function calls no Kubernetes: the association goes (the runner's credentials with it); the
    # service account, inert without it, is the sweeper's (by its campaign label)
    release_identity(p, ctx, service_account=False)
    return {"views": sorted(views)}


def mark_campaign(p: Providers, ctx: Ctx, status: str, *, error: str, cause: str) -> None:
    """Record the campaign's status (run state and lake), e.g. when the sweeper ended it."""
    write_campaign(p, ctx, status, error=error, cause=cause)
