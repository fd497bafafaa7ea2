"""The campaign's timeline read as money needs it: each pool held by each plan entry (an experiment's
deployment, or a pilot) from its scale request to its restore or hand-over, its load windows and when its
deployment answered (:mod:`benchctl.planning.costs` prices them). Timestamps may be ISO text (as
``campaign.timeline`` writes them), datetimes (naive = UTC, as read back from the lake) or epoch seconds.
Pure: the standard library and benchctl only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from benchctl.lake import timeline as tl
from benchctl.planning.plan import CampaignPlan

JSON = dict[str, Any]

_END_OF_LOAD = tuple(e.name for e in tl.LOAD_ENDS)
_SCALED, _RESTORED, _HANDED = tl.SCALE_REQUESTED.name, tl.POOL_RESTORED.name, tl.POOL_HANDED_OVER.name
_LOAD_START = tl.LOAD_START.name
_READY = tl.READY.name


# ------------------------------------------------------------------------------------ timeline reading


def _ts(value: Any) -> datetime:
    """An aware UTC datetime from ISO text, a datetime (naive = UTC) or epoch seconds."""
    if isinstance(value, datetime):
        out = value
    elif isinstance(value, str):
        try:
            out = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"timeline: {value!r} is not an ISO-8601 timestamp") from None
    elif isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC)
    else:
        raise ValueError(f"timeline: expected a timestamp, got {type(value).__name__} {value!r:.60}")
    return out.replace(tzinfo=UTC) if out.tzinfo is None else out.astimezone(UTC)


def _unit(row: JSON) -> str:
    """The plan entry a timeline or steps row belongs to: its ``deployment`` (one deployment of an experiment,
    ``benchctl.spec.design``), else its ``experiment`` (a lake from before deployments, or one deployment each)."""
    return str(row.get("deployment") or row.get("experiment"))


def _hours(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds() / 3600.0)


@dataclass(frozen=True)
class PoolWindow:
    """One pool held for one experiment: from its scale request until restored or handed over to the next
    experiment (``end`` None: still held; ``end_event`` names the event that ended it)."""

    experiment: str
    pool: str
    nodes: int
    start: datetime
    end: datetime | None
    simulated: bool = False
    end_event: str | None = None


def pool_windows(plan: CampaignPlan, timeline: Iterable[JSON]) -> list[PoolWindow]:
    """Every pool an experiment scaled, in plan order (experiments, then their pools).

    Nodes are the ``scale_requested`` event's ``nodes`` (what the experiment asked the pool to hold),
    else the plan's. A pool scaled twice for one experiment counts from its first request to its last
    restore. A pool kept warm for the next experiment (``pool_handed_over``) ends its window there: the
    next experiment's own ``scale_requested`` starts its window, so the pool is paid for once at a time.
    """
    starts: dict[tuple[str, str], tuple[datetime, JSON]] = {}
    ends: dict[tuple[str, str], tuple[datetime, str]] = {}
    for row in timeline:
        event, pool = row.get("event"), row.get("pool")
        if not pool or event not in (_SCALED, _RESTORED, _HANDED):
            continue
        key = (_unit(row), str(pool))
        at = _ts(row["at"])
        if event == _SCALED:
            if key not in starts or at < starts[key][0]:
                starts[key] = (at, tl.detail(row))
        elif key not in ends or at > ends[key][0]:
            ends[key] = (at, str(event))
    order = {(e.name, p): (e.index, i) for e in plan.experiments for i, p in enumerate(e.nodes)}
    out = []
    for key in sorted(starts, key=lambda k: (*order.get(k, (len(order), 0)), *k)):
        at, detail = starts[key]
        experiment, pool = key
        planned = _plan_nodes(plan, experiment).get(pool, 0)
        nodes = detail.get("nodes", planned)
        end, end_event = ends.get(key, (None, None))
        ended = end is not None and end >= at
        out.append(PoolWindow(experiment, pool, int(nodes), at, end if ended else None,
                              bool(detail.get("simulated", False)), end_event if ended else None))
    return out


def _plan_nodes(plan: CampaignPlan, experiment: str) -> dict[str, int]:
    try:
        return dict(plan.experiment(experiment).nodes)
    except KeyError:
        return {}


def _latest(timeline: Iterable[JSON], experiment: str) -> datetime | None:
    ats = [_ts(r["at"]) for r in timeline if _unit(r) == experiment and r.get("at") is not None]
    return max(ats) if ats else None


def ready_at(timeline: Iterable[JSON], experiment: str) -> datetime | None:
    """When the experiment's deployment first answered (its ``ready`` event), or None."""
    ats = [_ts(r["at"]) for r in timeline if _unit(r) == experiment and r.get("event") == _READY]
    return min(ats) if ats else None


def load_windows(plan: CampaignPlan, timeline: list[JSON], experiment: str) -> dict[str, float]:
    """``{step_id: hours of load}`` of the experiment's planned steps that started (warm-up excluded).

    A window runs from ``load_start`` to ``load_end`` (or ``load_stopped``); a load with no end yet
    runs to the experiment's latest timeline event.
    """
    try:
        planned = {s.step_id for s in plan.experiment(experiment).steps}
    except KeyError:
        planned = set()
    starts: dict[str, datetime] = {}
    ends: dict[str, datetime] = {}
    for row in timeline:
        if _unit(row) != experiment or row.get("event") not in (_LOAD_START, *_END_OF_LOAD):
            continue
        step_id = tl.detail(row).get("step_id")
        if not isinstance(step_id, str) or (planned and step_id not in planned) or step_id == "warmup":
            continue
        at = _ts(row["at"])
        if row["event"] == _LOAD_START:
            starts[step_id] = min(at, starts.get(step_id, at))
        else:
            ends[step_id] = max(at, ends.get(step_id, at))
    latest = _latest(timeline, experiment)
    out = {}
    for step_id, start in starts.items():
        end = ends.get(step_id, latest)
        out[step_id] = _hours(start, end) if end is not None else 0.0
    return out
