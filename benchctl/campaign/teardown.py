"""TeardownExperiment, TeardownAfterFailure and AbortCampaign: everything an experiment created goes away,
its pools back to their recorded sizes (or kept warm for the next experiment), on every path."""

from __future__ import annotations

from benchctl.campaign.base import JSON, Cleanup, Task, error_of, record_event, write_campaign, write_costs
from benchctl.campaign.context import Ctx
from benchctl.campaign.load import stop_loads
from benchctl.campaign.locks import lock_keys
from benchctl.campaign.ports import Providers
from benchctl.campaign.receipt import experiment_receipt
from benchctl.campaign.records import PoolsRecord
from benchctl.lake import timeline

DEFAULT_TEARDOWN_S = 240.0  # the wait for a deployment to go away when the spec cannot be read


def teardown_experiment(p: Providers, ctx: Ctx, task: Task, *, handover: bool = False,
                        wait_gone: bool = False) -> JSON:
    """Stop load, remove the deployment, restore pools to their recorded sizes. Idempotent.

    Every item is attempted even when an earlier one fails (see ``Cleanup``): the load is stopped
    first, then the deployment, then each pool, each on its own.

    ``handover`` (the normal end of an experiment only): pools the next experiment also uses
    (``ExperimentPlan.handover``) stay as they are, kept warm instead of drained and booted again; the
    next experiment adopts their recorded prior size, and whoever ends last restores it. Every failure
    path calls this without ``handover``, so it restores everything still unrestored.

    ``wait_gone`` (the state machine's teardown states): while the deleted deployment's objects and pods
    are still there (``serving.remaining``), return ``done: False`` instead of restoring the pools; the
    state machine waits ``poll_seconds`` and calls again, for at most ``timeouts.teardown_s`` after the
    deletion, then the pools are restored anyway and what was left is recorded. Nothing sleeps here."""
    experiment = task.exp
    done: JSON = {"experiment": experiment}
    c = Cleanup(p, ctx, experiment)
    c.event(timeline.TEARDOWN_START)
    done["loads_stopped"] = c.attempt("stop load", stop_loads, p, ctx, experiment)
    left = c.attempt("deployment", _teardown_deployment, p, experiment, done, wait_gone)
    if left:  # the deployment is still going away: the pools wait (the state machine calls again)
        c.finish()
        return {**done, "done": False, "left": left}
    c.attempt("pools", _restore_pools, p, experiment, handover, done, c)
    if not c.errors:
        c.event(timeline.TEARDOWN_DONE)
    # read back what the experiment created (never raises); a failed item is retried, and read again
    done["receipt"] = len(experiment_receipt(p, ctx, experiment))
    c.finish()
    done["done"] = True
    return done


def _teardown_deployment(p: Providers, experiment: str, done: JSON, wait_gone: bool) -> list[str]:
    """Delete the deployment (once); what of it is still going away while the wait allows, else []."""
    d = p.state.deployment(experiment)
    if d is None or d.torn_down:
        return []
    if d.deleted_at is None:
        d.removed = p.serving.teardown(d.state)
        d.deleted_at = p.clock()
        p.state.save_deployment(experiment, d)
    left = list(p.serving.remaining(d.state)) if wait_gone else []
    if left:
        limit = p.state.spec().timeouts.teardown_s if p.state.has_spec() else DEFAULT_TEARDOWN_S
        if p.clock() - d.deleted_at < limit:
            return left
        d.left = left  # waited long enough: the pools go back anyway, and we say what stayed
    d.torn_down = True
    p.state.save_deployment(experiment, d)
    done["deployment"] = d.removed
    return []


def _restore_pools(p: Providers, experiment: str, handover: bool, done: JSON, c: Cleanup) -> None:
    rec = p.state.pools(experiment)
    if rec is None:
        return
    keep = p.state.plan().experiment(experiment).handover if handover and p.state.has_plan() else {}
    done_pools = rec.restored_pools()
    for r in rec.records:
        if r["pool"] in done_pools:
            continue
        if r["pool"] in keep:  # the next experiment needs it: keep it warm, restore after the last user
            rec.handed_over[r["pool"]] = {"previous": r["previous"], "nodes": r["requested"]}
            c.event(timeline.POOL_HANDED_OVER, key=r["pool"], pool=r["pool"], nodes=r["requested"],
                    simulated=r.get("simulated", False))
            continue
        now = c.attempt(f"pool {r['pool']}", p.pools.restore, r)
        if c.failed(f"pool {r['pool']}"):
            continue  # still recorded as unrestored: a retry, the abort path or the sweeper restores it
        rec.restored.append({"pool": r["pool"], "now": now})
        rec.handed_over.pop(r["pool"], None)
        c.event(timeline.POOL_RESTORED, key=r["pool"], pool=r["pool"], restored_to=now,
                simulated=r.get("simulated", False))
    p.state.save_pools(experiment, rec)
    done["pools"] = rec.restored
    if rec.handed_over:
        done["handed_over"] = sorted(rec.handed_over)


def unrestored_pools(p: Providers) -> dict[str, set[str]]:
    """{experiment: pools it scaled and nobody restored yet}. A pool handed over to the next experiment
    counts for the experiment that adopted it (which restores it), not for the one that handed it."""
    names = p.state.experiment_names()
    records: dict[str, PoolsRecord | None] = {exp: p.state.pools(exp) for exp in names}
    out: dict[str, set[str]] = {}
    for i, exp in enumerate(names):
        rec = records[exp]
        if rec is None:
            continue
        nxt = records[names[i + 1]] if i + 1 < len(names) else None
        adopted = {r["pool"] for r in nxt.records} if nxt is not None else set()
        restored = rec.restored_pools()
        for r in rec.records:
            if r["pool"] in restored or (r["pool"] in rec.handed_over and r["pool"] in adopted):
                continue
            out.setdefault(exp, set()).add(r["pool"])
    return out


def experiment_failed(p: Providers, ctx: Ctx, task: Task, *, wait_gone: bool = False) -> JSON:
    """TeardownAfterFailure: tear the experiment down, then record that it failed and why."""
    name, cause = error_of(task.error)
    if not teardown_experiment(p, ctx, task, wait_gone=wait_gone)["done"]:
        return {"done": False, "error": name, "cause": cause}
    record_event(p, ctx.campaign_id, task.exp, timeline.EXPERIMENT_FAILED, error=name, cause=cause)
    return {"done": True, "error": name, "cause": cause}


def release_locks(p: Providers, ctx: Ctx) -> list[str]:
    """Release this campaign's pool locks (only ours; nothing if none were taken). The lock of a pool
    this campaign scaled and could not restore is kept: another campaign would otherwise record the
    scaled size as its "previous" and never give those GPUs back. A retry, the sweeper or the lock's
    expiry releases it."""
    if p.locks is None or not p.state.has_spec():
        return []
    spec = p.state.spec()
    stuck = set(lock_keys(spec, set().union(*unrestored_pools(p).values())))
    released: list[str] = p.locks.release([k for k in lock_keys(spec) if k not in stuck], ctx.campaign_id)
    return released


def release_identity(p: Providers, ctx: Ctx, *, service_account: bool = True) -> list[str]:
    """Remove this campaign's load runner identity (its service account's association with the load Job role,
    and, unless ``service_account`` is False, the service account): every end path calls it beside
    :func:`release_locks`."""
    return p.identity.release(service_account) if p.identity is not None else []


def abort_campaign(p: Providers, ctx: Ctx, task: Task, *, wait_gone: bool = False) -> JSON:
    """Tear down every experiment of this campaign (found in the run state) and record the failure.

    Every item is attempted even when another fails (``Cleanup``): each experiment's teardown, the
    cost rows, the campaign record and the lock release. With ``wait_gone`` (the AbortCampaign state)
    it returns ``done: False`` while a deleted deployment is still going away (see
    ``teardown_experiment``); the failure is recorded once, when all is torn down."""

    name, cause = error_of(task.error)
    c = Cleanup(p, ctx, timeline.CAMPAIGN)
    names = c.attempt("read plan", p.state.experiment_names) or []
    waiting = []
    for exp in names:  # only experiments that created something
        if c.attempt(f"inspect {exp}", p.state.touched, exp):
            torn = c.attempt(f"teardown {exp}", teardown_experiment, p, ctx, Task(exp), wait_gone=wait_gone)
            if torn is not None and not torn["done"]:
                waiting.append(exp)
    if waiting:
        c.finish()
        return {"done": False, "error": name, "cause": cause, "waiting_for": waiting}
    failure = c.attempt("read failure", p.state.failure)
    first = failure.error if failure is not None else None
    status = ("aborted" if "Aborted" in (name, first)
              else "stopped" if {name, first} & {"ExecutionStopped", "ExecutionTimedOut"} else "failed")
    if failure is not None and failure.error and failure.error != name:
        # the Catch payload is the LAST failure (e.g. a cleanup state that failed too); the lake
        # keeps the first one, which started it all, and names the later one in the timeline
        c.event(timeline.CLEANUP_FAILED, error=name, cause=cause)
        name, cause = failure.error, failure.message or cause
    c.attempt("costs", write_costs, p, ctx)  # what the failed campaign cost is part of its record
    c.attempt("campaign record", write_campaign, p, ctx, status,
              failed_state=failure.state if failure is not None else None, error=name, cause=cause)
    c.event(timeline.CAMPAIGN_END[status], error=name, cause=cause, state=failure.state if failure else None)
    c.attempt("locks", release_locks, p, ctx)
    c.attempt("runner identity", release_identity, p, ctx)
    c.finish()
    return {"done": True, "error": name, "cause": cause}
