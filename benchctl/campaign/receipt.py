"""The teardown receipt: every resource an experiment created or changed, the action taken, and its state READ
BACK through the ports after the teardown (never taken from what the teardown believed it did).

One row per resource: a pool (a managed node group with its recorded and restored sizes, an Auto Mode
NodePool, a simulated local pool) with when its billing ended ("still billing" otherwise), each object or
process of the deployment (DynamoGraphDeployment, Jobs, pre-pull DaemonSets; locally each process by pid),
and each load. Written at the end of every experiment's teardown (the Teardown function, whose role may
read the pools and the cluster) into the lake (``timeline`` events :data:`benchctl.lake.timeline.RECEIPT`, one
per resource); the report shows the campaign's rows. Reading back never fails a teardown: a read that fails is a row whose
state is ``unknown`` and says why. :func:`unread_rows` lists what an experiment created from its records
alone, for an ending whose teardown did not finish (nothing could be read back then).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchctl import logtext
from benchctl.campaign.base import JSON, now_iso, record_event
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.lake import timeline

GONE, RESTORED, STILL_THERE, UNKNOWN, HANDED_OVER = "gone", "restored", "still there", "unknown", "handed over"
SETTLED = (GONE, RESTORED, HANDED_OVER)  # states a complete receipt may hold


def _read(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """(what a read-back returned, "") or (None, why it failed)."""
    try:
        return fn(*args), ""
    except Exception as exc:  # a read-back never fails a teardown: the row says why it is unknown
        return None, f"read back failed: {type(exc).__name__}: {logtext.readable(str(exc))[:300]}"


def _size(value: Any) -> str:
    if not isinstance(value, dict):
        return "" if value is None else str(value)
    return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))


def _record(p: Providers, ctx: Ctx, experiment: str, rows: list[JSON]) -> None:
    """The rows into the lake, one timeline event each (a failed write leaves the others)."""
    for n, r in enumerate(rows):
        _read(lambda n=n, r=r: record_event(p, ctx.campaign_id, experiment, timeline.RECEIPT, key=f"{n:03d}", **r))


def pool_rows(p: Providers, experiment: str, read_at: str) -> list[JSON]:
    rec = p.state.pools(experiment)
    if rec is None:
        return []
    restored = {r["pool"] for r in rec.restored}
    rows = []
    for r in rec.records:
        pool, requested = r["pool"], r.get("requested")
        if pool in rec.handed_over and pool not in restored:
            rows.append({"kind": "pool", "name": pool, "action": f"scaled to hold {requested} node(s); kept warm "
                         "for the next experiment, which restores it (its own receipt row)",
                         "recorded": _size(r.get("previous")), "now": "", "state": HANDED_OVER, "why": "",
                         "billing": "continues with the next experiment", "read_at": read_at})
            continue
        obs, why = _read(p.pools.observe, r)
        created = r.get("previous") is None
        action = (f"created for {requested} node(s), " + ("deleted" if pool in restored else "NOT deleted")
                  if created else f"scaled to hold {requested} node(s), "
                  + ("restored to the recorded size" if pool in restored else "NOT restored"))
        if obs is None:
            rows.append({"kind": "pool", "name": pool, "action": action, "recorded": _size(r.get("previous")),
                         "now": "", "state": UNKNOWN, "why": why, "billing": "unknown", "read_at": read_at})
            continue
        billing = str(obs.get("billing") or "unknown")
        rows.append({"kind": obs.get("kind") or "pool", "name": obs.get("name") or pool, "action": action,
                     "recorded": _size(r.get("previous")), "now": _size(obs.get("now")),
                     "state": obs.get("state") or UNKNOWN, "why": obs.get("why") or "",
                     # the read-back found none of the campaign's nodes: billing ended by then at the latest
                     "billing": f"ended by {read_at}" if billing == "ended" else billing, "read_at": read_at})
    return rows


def deployment_rows(p: Providers, experiment: str, read_at: str) -> list[JSON]:
    d = p.state.deployment(experiment)
    if d is None:
        return []
    items, why = _read(p.serving.observe, d.state, d.removed)
    if items is None:
        return [{"kind": "deployment", "name": experiment, "action": "deleted" if d.deleted_at else "NOT deleted",
                 "state": UNKNOWN, "why": why, "read_at": read_at}]
    return [{"kind": it.get("kind") or "object", "name": str(it.get("name")),
             "action": "stopped" if it.get("kind") == "process" else "deleted",
             "state": STILL_THERE if it.get("present") else GONE, "why": it.get("why") or "",
             "read_at": read_at, **({"pid": it["pid"]} if it.get("pid") is not None else {})} for it in items]


def load_rows(p: Providers, experiment: str, read_at: str) -> list[JSON]:
    rows = []
    for step_id, rec in p.state.loads(experiment):
        if rec.skipped:
            continue
        obs, why = _read(p.load.observe, rec.state)
        action = ("stopped" if rec.stopped else f"ended ({logtext.exit_text(rec.exit_code)})" if rec.ended
                  else "launched")
        if obs is None:
            rows.append({"kind": "load", "name": step_id, "action": action, "state": UNKNOWN, "why": why,
                         "read_at": read_at})
            continue
        rows.append({"kind": obs.get("kind") or "load", "name": str(obs.get("name") or step_id), "action": action,
                     "state": STILL_THERE if obs.get("present") else GONE, "why": obs.get("why") or "",
                     "read_at": read_at, **({"pid": obs["pid"]} if obs.get("pid") is not None else {})})
    return rows


def experiment_receipt(p: Providers, ctx: Ctx, experiment: str) -> list[JSON]:
    """Read back everything ``experiment`` created and record the receipt in the lake; its rows.
    Never raises: what cannot be read or written is said in the rows (or left out of the lake only)."""
    read_at = now_iso(p.clock)
    rows: list[JSON] = []
    for part in (pool_rows, deployment_rows, load_rows):
        got, why = _read(part, p, experiment, read_at)
        rows += got if got is not None else [{"kind": part.__name__.removesuffix("_rows"), "name": experiment,
                                              "action": "", "state": UNKNOWN, "why": why, "read_at": read_at}]
    seen: set[tuple[str, str]] = set()
    unique = []
    for r in rows:  # on EKS a load's runner Job is also one of the deployment's Jobs
        if (r["kind"], r["name"]) not in seen:
            seen.add((r["kind"], r["name"]))
            unique.append(r)
    _record(p, ctx, experiment, unique)
    return unique


def unread_rows(p: Providers, experiment: str, why: str) -> list[JSON]:
    """What ``experiment`` created, from its records only (its teardown did not finish, so nothing was read back):
    every row ``unknown``, saying why and what cleans up."""
    rows: list[JSON] = []
    rec = p.state.pools(experiment)
    for r in rec.records if rec is not None else []:
        done = r["pool"] in rec.restored_pools() if rec is not None else False
        rows.append({"kind": "pool", "name": r["pool"], "action": "restored" if done else "NOT restored",
                     "recorded": _size(r.get("previous")), "state": UNKNOWN, "why": why,
                     "billing": "unknown: possibly still billing" if not done else "unknown"})
    d = p.state.deployment(experiment)
    if d is not None:
        rows.append({"kind": "deployment", "name": experiment, "action": "deleted" if d.deleted_at else "NOT deleted",
                     "state": UNKNOWN, "why": why})
    for step_id, lr in p.state.loads(experiment):
        if not lr.skipped:
            rows.append({"kind": "load", "name": step_id, "action": "stopped" if lr.stopped else "launched",
                         "state": UNKNOWN, "why": why})
    return rows


def campaign_receipt(p: Providers, ctx: Ctx, *, why_unread: str) -> list[JSON]:
    """Every experiment's receipt rows (with ``experiment``), in campaign order, as the lake holds them; an
    experiment that created something and has no receipt is listed from its records (:func:`unread_rows`),
    and those rows recorded in the lake too."""
    events = [r for r in p.lake.read_table("timeline", ctx.campaign_id) if timeline.is_event(r, timeline.RECEIPT)]
    out: list[JSON] = []
    for exp in p.state.experiment_names() if p.state.has_plan() else []:
        rows = [timeline.detail(r) for r in sorted(events, key=lambda r: str(r.get("detail_json")))
                if (r.get("deployment") or r.get("experiment")) == exp]
        if not rows and p.state.touched(exp):
            rows = unread_rows(p, exp, why_unread)
            _record(p, ctx, exp, rows)
        out += [{"experiment": exp, **r} for r in rows]
    return out


def complete(rows: list[JSON]) -> bool:
    """Whether every resource was read back gone, restored or handed over (and no pool still bills)."""
    return all(r.get("state") in SETTLED and not str(r.get("billing") or "").startswith("still billing")
               for r in rows)
