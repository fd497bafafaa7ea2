"""The sweeper: tear down what campaigns left behind when their execution is no longer running.

A campaign whose runner died without its abort path (a killed process, a deleted execution, a Lambda
that never ran its Catch) may have left pools scaled, a deployment up, a load running or its pool locks
held. For every campaign that is NOT running, the sweeper runs the same teardown the state machine
would (``campaign.teardown_experiment``: load first, then serving, then pools back to their recorded
sizes), releases its locks, and records what it did in the timeline and the campaign record. On EKS it
then deletes any object still labelled with that campaign (created but never recorded: a crash between
the API call and the run-store write). Running campaigns are never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from benchctl import campaign
from benchctl.campaign import Task
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.lake import timeline

JSON = dict[str, Any]


def leftovers(p: Providers) -> list[str]:
    """Experiments of this campaign that still have something up (per the run state): a pool nobody
    restored (a pool handed over to the next experiment is that experiment's), a deployment not torn
    down, or a load that never ended."""
    pools = campaign.unrestored_pools(p)
    out = []
    for exp in p.state.experiment_names():
        dep = p.state.deployment(exp)
        if (exp in pools or (dep is not None and not dep.torn_down)
                or any(rec.running for _, rec in p.state.loads(exp))):
            out.append(exp)
    return out


def sweep(campaign_ids: Iterable[str], providers_for: Callable[[str], tuple[Providers, Ctx]],
          is_running: Callable[[str], bool], *, dry_run: bool = False,
          extra: Callable[[str], Any] | None = None) -> list[JSON]:
    """Sweep each campaign that is not running; one report line (a dict) per campaign looked at. One
    campaign's sweep raising (its store unreadable, a teardown call refused) is that campaign's line
    (``action: failed``, the error and its cause) and the next campaign is swept all the same: a campaign
    after a broken one must not keep its GPUs. The caller reports the failed lines (:func:`failed`)."""
    report: list[JSON] = []
    for cid in sorted(set(campaign_ids)):
        try:
            report.append(_sweep_one(cid, providers_for, is_running, dry_run=dry_run, extra=extra))
        except Exception as exc:  # recorded in the report, which the caller fails on
            report.append({"campaign_id": cid, "action": "failed", "error": type(exc).__name__, "cause": str(exc)})
    return report


def failed(report: list[JSON]) -> list[JSON]:
    """The report lines of campaigns whose sweep raised."""
    return [r for r in report if r.get("action") == "failed"]


def _sweep_one(cid: str, providers_for: Callable[[str], tuple[Providers, Ctx]], is_running: Callable[[str], bool],
               *, dry_run: bool, extra: Callable[[str], Any] | None) -> JSON:
    if is_running(cid):
        return {"campaign_id": cid, "action": "left alone: still running"}
    p, ctx = providers_for(cid)
    todo = leftovers(p)
    entry: JSON = {"campaign_id": cid, "experiments": todo}
    if dry_run:
        entry["action"] = "would tear down" if todo else "nothing left"
        return entry
    for exp in todo:
        entry.setdefault("teardown", {})[exp] = campaign.teardown_experiment(p, ctx, Task(exp))
    entry["locks_released"] = campaign.release_locks(p, ctx)
    entry["identity_released"] = campaign.release_identity(p, ctx)
    if extra is not None:
        entry["labelled_objects_deleted"] = extra(cid)
    # a finished campaign's inert runner service account and its grant (Report removes its association) are only
    # tidied
    credentials = [r for r in entry["identity_released"] if not r.startswith(("ServiceAccount/", "grant of "))]
    if todo or entry["locks_released"] or credentials or entry.get("labelled_objects_deleted"):
        entry["action"] = "swept"
        campaign.record_event(p, cid, timeline.CAMPAIGN, timeline.SWEPT, experiments=todo)
        record = p.state.campaign()
        if record is None or record.status in (None, "running"):
            campaign.mark_campaign(p, ctx, "failed", error="Swept",
                                   cause="its execution ended without tearing down; the sweeper did")
    else:
        entry["action"] = "nothing left"
    return entry
