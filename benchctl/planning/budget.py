"""The budget guard's arithmetic: accrued spend plus the estimate of what is left, against the spec's
``budget`` (or the deployment's ceiling the plan records), the end of any Capacity Block the rest of the plan runs
on (less its teardown margin), and the slack a wait nobody polls may use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchctl.planning.capacity import block_deadline, block_pools
from benchctl.planning.costs import (
    JSON,
    _hours,
    _remaining_s,
    _ts,
    accrued_usd,
    pool_windows,
    price,
    remaining_hours,
    remaining_usd,
)
from benchctl.planning.plan import CampaignPlan
from benchctl.spec.model import CampaignSpec


def _next_step(plan: CampaignPlan, done: set[tuple[str, str]]) -> str:
    for e in plan.experiments:
        for s in e.steps:
            if (e.name, s.step_id) not in done:
                return f"before step {s.step_id} of experiment {e.name}"
    return "after the last step"


def budget_usd(spec: CampaignSpec, plan: CampaignPlan) -> tuple[float | None, str]:
    """The dollar budget the campaign is held to and what sets it: the spec's ``budget.max_usd``, else the
    deployment's ceiling the Plan state recorded in the plan (``CampaignPlan.max_usd``), else none."""
    if spec.budget.max_usd is not None:
        return spec.budget.max_usd, "budget.max_usd"
    return plan.max_usd, "ceiling max_usd_per_campaign (the spec sets no budget.max_usd)"


def _elapsed_h(timeline: list[JSON], now_iso: Any) -> float:
    ats = [_ts(r["at"]) for r in timeline if r.get("at") is not None]
    return _hours(min(ats), _ts(now_iso)) if ats else 0.0


def budget_problem(spec: CampaignSpec, plan: CampaignPlan, timeline: list[JSON],
                   done: set[tuple[str, str]], now_iso: Any,
                   ran_s: Mapping[tuple[str, str], float] | None = None) -> str | None:
    """A person-readable refusal when the spend so far plus the estimate of what is left exceeds
    ``budget.max_usd``, or the elapsed time plus the time left exceeds ``budget.max_hours``; else None.

    Elapsed time runs from the campaign's first timeline event to ``now``.
    """
    where = _next_step(plan, done)
    problems = []
    max_usd, name = budget_usd(spec, plan)
    if max_usd is not None:
        unpriced = sorted({spec.pool(p).instance_type for e in plan.experiments for p in e.nodes
                           if price(spec, p) is None})
        if unpriced:
            problems.append(f"{name}: set, but pricing.instances has no price for {unpriced}; "
                            f"the spend cannot be checked {where}")
        else:
            spent = accrued_usd(spec, plan, timeline, now_iso)
            left = remaining_usd(spec, plan, done, ran_s)
            if spent + left > max_usd:
                problems.append(f"{name}: accrued ${spent:.2f} + remaining estimate ${left:.2f} = "
                                f"${spent + left:.2f} exceeds ${max_usd:.2f} {where}")
    if spec.budget.max_hours is not None:
        elapsed = _elapsed_h(timeline, now_iso)
        left_h = remaining_hours(plan, done, ran_s)
        if elapsed + left_h > spec.budget.max_hours:
            problems.append(f"budget.max_hours: elapsed {elapsed:.2f} h + remaining estimate {left_h:.2f} h = "
                            f"{elapsed + left_h:.2f} h exceeds {spec.budget.max_hours:g} h {where}")
    problems += [text for text, _ in block_deadlines(spec, plan, done, now_iso, ran_s) if text]
    return "; ".join(problems) or None


def guarded(spec: CampaignSpec, plan: CampaignPlan) -> bool:
    """Whether the guard has anything to hold the campaign to: a dollar budget, ``budget.max_hours`` or a pool's
    Capacity Block (whose end it must be torn down before)."""
    return (budget_usd(spec, plan)[0] is not None or spec.budget.max_hours is not None
            or bool(block_pools(spec, {p for e in plan.experiments for p in e.nodes})))


def block_deadlines(spec: CampaignSpec, plan: CampaignPlan, done: set[tuple[str, str]], now_iso: Any,
                    ran_s: Mapping[tuple[str, str], float] | None = None) -> list[tuple[str, float]]:
    """Per Capacity Block the rest of the plan still uses: (a refusal, "" when none; the seconds of slack left: how
    long the campaign may run on before the experiments on the block would end past its end less the teardown
    margin, ``benchctl.planning.capacity.block_deadline``). The time left is the remaining estimate up to the
    last experiment on the block, so the guard stops the campaign (and its Catch tears it down) in time."""
    now = _ts(now_iso)
    out = []
    for pool in block_pools(spec):
        upto = [i for i, e in enumerate(plan.experiments) if pool.name in e.nodes]
        if not upto:
            continue
        left_s = sum(_remaining_s(plan, e, done, ran_s) for e in plan.experiments[: upto[-1] + 1])
        if left_s <= 0:
            continue
        deadline = block_deadline(spec, [pool.name])
        assert deadline is not None  # a block pool has a deadline
        by, why = deadline
        slack = (by - now).total_seconds() - left_s
        shown = now.isoformat(timespec="seconds").replace("+00:00", "Z")
        text = "" if slack >= 0 else (
            f"{why}; now {shown} + remaining estimate {left_s / 3600:.2f} h to the end of "
            f"{plan.experiments[upto[-1]].name} = {-slack / 60:.0f} min past it {_next_step(plan, done)}")
        out.append((text, slack))
    return out


def budget_slack_s(spec: CampaignSpec, plan: CampaignPlan, timeline: list[JSON],
                   done: set[tuple[str, str]], now_iso: Any) -> float | None:
    """Seconds until :func:`budget_problem` refuses if the pools held now bill on and no step ends (0: it does
    now); None: no budget, nothing billing. Bounds a wait nobody polls (AwaitLoadEnd's TimeoutSecondsPath)."""
    slacks = []
    max_usd, _ = budget_usd(spec, plan)
    if max_usd is not None:
        held = [w for w in pool_windows(plan, timeline) if w.end is None]
        rate = sum(w.nodes * (price(spec, w.pool) or 0.0) for w in held)
        rate += spec.pricing.eks_cluster_usd_per_hour if held else 0.0
        if rate > 0:
            left = max_usd - accrued_usd(spec, plan, timeline, now_iso) - remaining_usd(spec, plan, done)
            slacks.append(left / rate * 3600.0)
    if spec.budget.max_hours is not None:
        slacks.append((spec.budget.max_hours - _elapsed_h(timeline, now_iso) - remaining_hours(plan, done)) * 3600)
    slacks += [slack for _, slack in block_deadlines(spec, plan, done, now_iso)]
    return max(0.0, min(slacks)) if slacks else None
