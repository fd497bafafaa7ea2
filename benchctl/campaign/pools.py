"""ScalePools and CheckCapacity: each pool an experiment needs, its prior size recorded before it changes."""

from __future__ import annotations

from benchctl.campaign.base import JSON, Task, record_event
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.campaign.records import PoolsRecord
from benchctl.errors import CeilingExceeded, DeadlineExceeded, NotReadyYet, ScaleInterrupted
from benchctl.lake import timeline
from benchctl.planning.plan import WARM_CAPACITY_S


def scale_pools(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """Scale each pool the experiment needs. The prior size is persisted BEFORE each change (the pool
    adapter calls back first), so a crash at any point leaves teardown what to restore.

    Only for a running campaign (``base.require_running``): first, so a redriven execution of a campaign that
    ended scales nothing; and again after each pool's change, because StopExecution does not cancel this
    invocation: a stop's teardown that read the pools before they were recorded would miss the change, so
    the pools scaled here are restored here (a pool still busy with the change is left recorded: the
    stopped-campaign machine's second pass restores it) and :class:`~benchctl.errors.CampaignNotRunning`
    is raised."""
    from benchctl.campaign.base import require_running
    from benchctl.errors import CampaignNotRunning

    require_running(p, task.state or "ScalePools")
    experiment = task.exp
    existing = p.state.pools(experiment)
    if existing is not None:
        if not existing.interrupted:
            return {"pools": existing.records, "reused": True}  # redelivered event: never scale twice
        raise ScaleInterrupted(
            f"ScalePools of {experiment} was interrupted mid-change; teardown restores the recorded sizes "
            "instead of scaling again on top of an unknown state")
    exp = p.state.plan().experiment(experiment)
    if p.ceilings is not None:  # again here: the deployment's ceilings may have been lowered since Plan
        from benchctl.planning import ceilings

        spec = p.state.spec()
        index = [e.name for e in spec.experiments].index(exp.tune.get("arm", exp.lake_name))  # a pilot: its arm's
        over = ceilings.pool_problems(spec, exp.nodes, p.ceilings, f"experiments[{index}]")
        if over:
            raise CeilingExceeded(p.state.where("spec"), ceilings.lines(over))
    # what needs no GPU node starts first (EKS: the image pre-pull on the pools, the model prefetch on a CPU
    # node), so it runs while the GPU nodes boot, not after
    from benchctl.campaign.serving import deployment_request, record_intent
    from benchctl.campaign.tuning import choose, experiment_of

    choose(p, ctx, experiment)  # a tuned arm: its configuration, from its pilots (which all ran by now)
    request = deployment_request(p.state.spec(), ctx.campaign_id, experiment, experiment_of(p, experiment))
    if p.state.deployment(experiment) is None:  # what prepare creates is torn down on every failure path
        record_intent(p, request, prepared=True)
    p.serving.prepare(request)
    records: list[JSON] = []

    def persist(pending: JSON | None = None, complete: bool = False) -> None:
        recs = records + ([{**pending, "pending": True}] if pending else [])
        p.state.save_pools(experiment, PoolsRecord(records=recs, requested_at=p.clock(), complete=complete))

    adopted = handed_over_to(p, experiment)

    def adopt(rec: JSON) -> JSON:
        """A warm pool from the previous experiment: its prior size is the one recorded before it."""
        if rec["pool"] in adopted:
            return {**rec, "previous": adopted[rec["pool"]]["previous"], "handed_from": adopted[rec["pool"]]["from"]}
        return rec

    persist()
    for pool, nodes in exp.nodes.items():
        try:
            rec = adopt(p.pools.scale(pool, nodes, owner=f"{ctx.campaign_id}/{experiment}",
                                      before_change=lambda r: persist(adopt(r))))
        except NotReadyYet:
            persist()  # nothing changed (e.g. the node group is still being restored): retry cleanly
            raise
        records.append(rec)
        persist()
        record_event(p, ctx.campaign_id, experiment, timeline.SCALE_REQUESTED, key=pool, pool=pool,
                     nodes=nodes, previous=rec["previous"], simulated=rec.get("simulated", False))
        try:
            require_running(p, task.state or "ScalePools")
        except CampaignNotRunning as stopped:
            undone: list[JSON] = []
            for r in records:
                try:
                    undone.append({"pool": r["pool"], "now": p.pools.restore(r)})
                except NotReadyYet:
                    continue  # still changing: recorded unrestored, the second abort pass restores it
            p.state.save_pools(experiment, PoolsRecord(records=records, requested_at=p.clock(), complete=True,
                                                       restored=undone))
            raise CampaignNotRunning(f"{stopped} (stopped while ScalePools of {experiment} ran: restored "
                                     f"{sorted(u['pool'] for u in undone) or 'nothing yet'} of "
                                     f"{sorted(r['pool'] for r in records)})") from None
    persist(complete=True)
    return {"pools": records, "reused": False}


def handed_over_to(p: Providers, experiment: str) -> JSON:
    """Pools the experiment before this one (in plan order) kept warm for it: {pool: {previous, from}}."""
    names = p.state.experiment_names()
    if experiment not in names or names.index(experiment) == 0:
        return {}
    before = names[names.index(experiment) - 1]
    rec = p.state.pools(before)
    handed = rec.handed_over if rec is not None else {}
    return {pool: {"previous": h["previous"], "from": before} for pool, h in handed.items()}


def check_capacity(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """CheckCapacity: ``done`` once every pool of the experiment is ready. A pool adapter raises (CapacityUnavailable,
    PoolScalingFailed) when its nodes will not come, which ends the experiment through its teardown at this poll;
    otherwise the wait is bounded by ``timeouts.capacity_s`` (a warm pool's by WARM_CAPACITY_S)."""
    experiment = task.exp
    rec = p.state.pools(experiment)
    if rec is None:
        raise FileNotFoundError(f"the pools of {experiment} are not recorded: ScalePools did not run")
    spec = p.state.spec()
    # every pool asked at every poll (not all() over a generator, which stops at the first one still booting): a pool
    # whose nodes cannot be had raises CapacityUnavailable at this poll even while another pool is still coming up
    ready = [p.pools.ready(r) for r in rec.records]
    if all(ready):
        for r in rec.records:
            record_event(p, ctx.campaign_id, experiment, timeline.NODES_READY, key=r["pool"], pool=r["pool"],
                         nodes=r["requested"], simulated=r.get("simulated", False))
        return {"done": True}
    from benchctl.campaign.spend import budget_guard

    budget_guard(p, ctx, experiment, None, waiting="capacity")
    handed = handed_over_to(p, experiment)
    if rec.records and all(r["pool"] in handed for r in rec.records):  # kept warm: its nodes should be there at once
        limit = min(spec.timeouts.capacity_s, WARM_CAPACITY_S)
        if p.clock() - rec.requested_at > limit:
            raise DeadlineExceeded(f"pools of {experiment}, kept warm by {next(iter(handed.values()))['from']}, not "
                                   f"ready within {limit:g} s (a node of theirs went away: a warm pool waits at most "
                                   f"{WARM_CAPACITY_S:g} s, then the teardown restores it)")
    if p.clock() - rec.requested_at > spec.timeouts.capacity_s:
        raise DeadlineExceeded(f"pools of {experiment} not ready within timeouts.capacity_s={spec.timeouts.capacity_s}")
    return {"done": False}
