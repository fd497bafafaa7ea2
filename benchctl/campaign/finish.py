"""Report: the campaign's cost rows, its final status, its views and report, its locks released."""

from __future__ import annotations

from benchctl.campaign.base import JSON, Task, guard, record_event, write_campaign, write_costs
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.lake import timeline


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


UNTORN = "failed-untorn"  # the campaign status of an ending whose teardown failed (the sweeper cleans up)
UNREAD = "its teardown did not finish, so nothing was read back: run `benchctl sweep` (AWS: `benchctl aws sweep`)"


def report_ending(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """ReportFailure: the report of a campaign that did not succeed (failed, aborted, or, ``task.ending ==
    "untorn"``, whose teardown failed), after its teardown. Never raises: what fails here is recorded in the
    timeline and returned (``report_error``); the state machine goes on to the campaign's failed end."""
    from benchctl.campaign.receipt import campaign_receipt, complete

    out: JSON = {"ending": task.ending or "failed"}
    try:
        rec = p.state.campaign()
        if task.ending == "untorn":  # whatever the abort path wrote before it failed, the teardown did not finish
            failure = p.state.failure()
            known = rec is not None and rec.error
            write_campaign(p, ctx, UNTORN, failed_state=None if known or failure is None else failure.state,
                           error=None if known else (failure.error if failure else "AbortFailed"),
                           cause=None if known else (failure.message if failure else "the campaign teardown failed"))
        rows = campaign_receipt(p, ctx, why_unread=UNREAD)
        out["receipt"] = {"rows": len(rows), "complete": complete(rows)}
        views = p.report.write(ctx.campaign_id) if p.report is not None else {}
        out["report"] = views.get("report")
    except Exception as exc:  # the report never fails the cleanup: recorded, not raised
        from benchctl import logtext

        out["report_error"] = f"{type(exc).__name__}: {logtext.readable(str(exc))}"
        try:
            record_event(p, ctx.campaign_id, timeline.CAMPAIGN, timeline.CLEANUP_ERROR, key="report", item="report",
                         error=type(exc).__name__, cause=out["report_error"])
        except Exception as lake_exc:  # the lake may be what failed: say so in the answer
            out["report_error"] += f"; recording it failed too: {type(lake_exc).__name__}: {lake_exc}"
    return out


def mark_campaign(p: Providers, ctx: Ctx, status: str, *, error: str, cause: str) -> None:
    """Record the campaign's status (run state and lake), e.g. when the sweeper ended it."""
    write_campaign(p, ctx, status, error=error, cause=cause)
