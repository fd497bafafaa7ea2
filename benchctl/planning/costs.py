"""What a campaign costs: ``costs`` rows, the running spend, and the budget guard.

The seeds' definition: a period's cost divided by the successful output tokens of the same period,
x 1,000,000. Two periods are recorded for every experiment x pool:

- **allocation** (``cost_usd``): the pool's nodes from the experiment's ``scale_requested`` event to
  its ``pool_restored`` event, or its ``pool_handed_over`` event when the pool was kept warm for the
  next experiment (which pays from its own scale request on; while neither, the experiment's latest
  timeline event, and "now" for the budget guard) x the
  instance's hourly price; plus, on the experiment's first pool row, the EKS cluster fee for the
  experiment's wall time (first scale request to last restore). This is what was paid: start-up,
  warm-up, idle time between steps and teardown included.
- **usage** (``fees_json.usage_based_usd``): the same nodes and price over the benchmark steps' load
  windows only (``load_start`` .. ``load_end`` of every planned step, warm-up excluded, failed steps
  included since they were paid for). Without start-up and idle time.

The allocation cost is split in two, so that the start-up one experiment pays and the next does not is
reported apart instead of loading the first experiment's $/1M (``fees_json``):

- **cold start** (``cold_start_usd``): the same nodes, price and cluster fee from the experiment's first
  scale request until its deployment answered (its ``ready`` event): node boot (nothing when the previous
  experiment handed the pool over warm), image pull, model load. Without a ``ready`` event (it never
  answered) the whole window is cold start.
- **steady state** (``steady_state_usd`` = allocation - cold start): from ``ready`` until the pool was
  restored or handed over: smoke, quality gate, warm-up, the steps, the gaps between them, teardown. Its $/1M
  (:func:`experiment_totals`, ``v_cost_efficiency.steady_state_usd_per_1m_output_tokens``) is the basis the
  comparisons use; the cold start is reported beside it.

What is included and what is not is written into every row (``fees_json.scope`` / ``.excluded`` /
``.scope_text``, and item by item, priced or excluded with why, ``.scope_items``; the node-hour price by part
in ``.node_price_parts``): the nodes (instance, root EBS volume, EKS Auto Mode's fee where the spec prices it;
:mod:`benchctl.planning.node_price`) and the EKS cluster fee share are; the model-cache volume and S3 (the
platform's), network, support and discounts are not.

Row conventions (one row per experiment x pool, ``costs`` table):

- ``cost_usd``: this pool's node cost, plus the EKS fee share on the experiment's first pool row, so
  the sum over an experiment's rows is the experiment's cost (None when the pool has no price).
- ``successful_output_tokens``: the deployment's tokens (sum of ``total_output_tokens`` over its
  succeeded steps), repeated on each of its rows: take it once per deployment, never sum it over pools.
- ``deployment``: the deployment of the experiment the row is for (``benchctl.spec.design``; one row per
  deployment x pool, each deployment paying for its own pools' windows).
- ``usd_per_1m_output_tokens``: this row's ``cost_usd`` / the experiment's tokens x 1e6: the pool's
  share, so the sum over the experiment's rows is the experiment's $/1M (see
  :func:`experiment_totals`).

Pure: the standard library and benchctl only. Timestamps may be ISO text (as ``campaign.timeline``
writes them), datetimes (naive = UTC, as read back from the lake) or epoch seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from benchctl.planning.capacity import block_cost, block_nodes, block_pools, instance_price, purchase_text
from benchctl.planning.node_price import node_price, node_price_parts, scope_items, scope_text
from benchctl.planning.plan import OVERHEADS, CampaignPlan, ExperimentPlan
from benchctl.planning.windows import (
    _hours,
    _latest,
    _plan_nodes,
    _ts,
    _unit,
    load_windows,
    pool_windows,
    ready_at,
)
from benchctl.spec.model import CampaignSpec

JSON = dict[str, Any]

SCOPE_INCLUDED = (
    "GPU nodes allocated to the experiment (scale request to the restore request), at the price they were bought "
    "at (on-demand, or the spec's reservation or Capacity Block price: pools[].capacity)",
    "their root EBS volumes (gp3, pricing.ebs_gp3_usd_per_gb_month)",
    "EKS Auto Mode's management fee where the spec prices it (pricing.auto_mode_fee_usd_per_hour)",
    "EKS cluster fee share (the experiment's wall time)",
)
SCOPE_EXCLUDED = (
    "the model-cache volume (EFS) and S3 results: the platform's, kept between campaigns",
    "nodes draining after the restore request (they bill until terminated; not recorded)",
    "network (cross-AZ transfer: KV transfer stays in one AZ; the NAT gateway's hours; its per-GB processing of "
    "each node boot's image pull, attributable but not measured; no load balancer is made)",
    "support plan, taxes, discounts (savings plans, spot capacity)",
    "a Capacity Block's idle hours: the campaign's (capacity_block_idle_usd on the block pool's first row), not "
    "an experiment's",
)

# ------------------------------------------------------------------------------------------ prices


def price(spec: CampaignSpec, pool: str) -> float | None:
    """The all-in $/node-hour of ``pool`` (on-demand instance, root volume, Auto Mode fee where priced:
    :func:`benchctl.planning.node_price.node_price`), or None when the instance is unpriced."""
    return node_price(spec, pool)


def price_source(spec: CampaignSpec) -> str:
    src = spec.pricing.source
    return f"{src} (as of {spec.pricing.as_of})" if spec.pricing.as_of else src


def experiment_usd_per_hour(spec: CampaignSpec, exp: ExperimentPlan) -> float | None:
    """GPU-node $/hr of an experiment: sum over its pools of nodes x price (None if any pool is unpriced)."""
    total = 0.0
    for pool, nodes in exp.nodes.items():
        p = price(spec, pool)
        if p is None:
            return None
        total += nodes * p
    return total


# ------------------------------------------------------------------------------------------ costs rows


def _tokens(steps: Iterable[JSON], campaign_id: str | None, experiment: str) -> int:
    return sum(
        int(s.get("total_output_tokens") or 0)
        for s in steps
        if _unit(s) == experiment and s.get("status") == "succeeded"
        and (campaign_id is None or s.get("campaign_id") in (None, campaign_id))
    )


def _per_1m(cost: float | None, tokens: int) -> float | None:
    return None if cost is None or tokens <= 0 else cost / tokens * 1e6


def usage_cost(spec: CampaignSpec, plan: CampaignPlan, timeline: list[JSON], experiment: str) -> float | None:
    """GPU-node cost of the experiment's load windows only (see :func:`load_windows`); None if unpriced.

    Nodes per pool are those the experiment scaled (timeline), else the plan's. No cluster fee.
    """
    nodes = _plan_nodes(plan, experiment)
    nodes.update({w.pool: w.nodes for w in pool_windows(plan, timeline) if w.experiment == experiment})
    hours = sum(load_windows(plan, timeline, experiment).values())
    total = 0.0
    for pool, n in nodes.items():
        p = price(spec, pool)
        if p is None:
            return None
        total += n * hours * p
    return total


def cost_rows(campaign_id: str, spec: CampaignSpec, plan: CampaignPlan, timeline: list[JSON],
              steps: list[JSON], *, simulated: bool) -> list[JSON]:
    """One ``costs`` row per experiment x pool the experiment scaled (see the module doc for conventions).

    ``timeline``: the campaign's timeline rows (``experiment``, ``event``, ``at``, ``pool``,
    ``detail_json``); ``steps``: its ``steps`` rows (``experiment``, ``status``,
    ``total_output_tokens``). Rows of other campaigns (by ``campaign_id``) are ignored.
    """
    timeline = [r for r in timeline if r.get("campaign_id") in (None, campaign_id)]
    windows = pool_windows(plan, timeline)
    blocks = block_usage(spec, plan, timeline)
    rows: list[JSON] = []
    for exp_name in dict.fromkeys(w.experiment for w in windows):
        mine = [w for w in windows if w.experiment == exp_name]
        latest = _latest(timeline, exp_name)
        ends = [w.end or latest or w.start for w in mine]
        wall_h = _hours(min(w.start for w in mine), max(ends))
        eks_usd = spec.pricing.eks_cluster_usd_per_hour * wall_h
        load_h = sum(load_windows(plan, timeline, exp_name).values())
        tokens = _tokens(steps, campaign_id, exp_name)
        first, ready = min(w.start for w in mine), ready_at(timeline, exp_name)
        cold_end = max(ends) if ready is None else min(max(ready, first), max(ends))
        cold_fee = spec.pricing.eks_cluster_usd_per_hour * _hours(first, cold_end)
        for i, (w, end) in enumerate(zip(mine, ends, strict=True)):
            pool = spec.pool(w.pool)
            p = price(spec, w.pool)
            node_hours = w.nodes * _hours(w.start, end)
            node_usd = None if p is None else node_hours * p
            fee = eks_usd if i == 0 else 0.0
            parts = node_price_parts(spec, w.pool)  # $/node-hour: instance, root_volume, auto_mode_fee (None: unpriced)
            items = scope_items(spec, [x.pool for x in mine])
            cost = None if node_usd is None else node_usd + fee
            cold_h = _hours(w.start, min(cold_end, end))
            cold = None if p is None else w.nodes * cold_h * p + (cold_fee if i == 0 else 0.0)
            fees = {
                "node_usd": node_usd,
                "eks_cluster_usd": fee,
                "eks_cluster_usd_per_hour": spec.pricing.eks_cluster_usd_per_hour if i == 0 else 0.0,
                "experiment_wall_hours": wall_h,
                "usage_based_usd": None if p is None else w.nodes * load_h * p,
                "usage_load_hours": load_h,
                "cold_start_usd": cold,
                "cold_start_node_hours": w.nodes * cold_h,
                "cold_start_end": cold_end.isoformat(),
                "cold_start_end_event": "ready" if ready is not None else "none: never ready (all cold start)",
                "steady_state_usd": None if cost is None or cold is None else cost - cold,
                "gpus_per_node": pool.gpus_per_node,
                "period_start": w.start.isoformat(),
                "period_end": end.isoformat(),
                "period_end_event": w.end_event if w.end is not None else "latest_event",
                "scope": list(SCOPE_INCLUDED),
                "excluded": list(SCOPE_EXCLUDED),
                "scope_text": scope_text(items),
                "node_price_parts": parts,
                "root_volume_usd": node_hours * float(parts["root_volume"] or 0.0),
                "auto_mode_fee_usd": None if parts["auto_mode_fee"] is None else node_hours * parts["auto_mode_fee"],
                "scope_items": items,
                "purchase": pool.capacity.purchase,
                "reservation_id": pool.capacity.reservation_id,
                "purchase_text": purchase_text(pool),
            }
            if w.pool in blocks and not any(r["pool"] == w.pool for r in rows):  # once per block: the campaign's
                fees.update(blocks[w.pool])
            rows.append({
                "campaign_id": campaign_id,
                "experiment": _lake_name(plan, exp_name),
                "deployment": exp_name,
                "pool": w.pool,
                "gpu_kind": pool.gpu_kind,
                "instance_type": pool.instance_type,
                "nodes": w.nodes,
                "node_hours": node_hours,
                "gpu_hours": node_hours * pool.gpus_per_node,
                "price_per_node_hour_usd": p,
                "price_source": "unpriced" if p is None else price_source(spec),
                "fees_json": json.dumps(fees, sort_keys=True, separators=(",", ":")),
                "cost_usd": cost,
                "successful_output_tokens": tokens,
                "usd_per_1m_output_tokens": _per_1m(cost, tokens),
                "simulated": simulated or w.simulated,
            })
    return rows


def block_usage(spec: CampaignSpec, plan: CampaignPlan, timeline: list[JSON]) -> dict[str, JSON]:
    """Per pool on a Capacity Block: what the block cost (paid up front for its whole window: ``nodes`` x its hours x
    the price as bought), the instance cost of the windows the campaign held it (``pool_windows``; a window still
    open counts to the latest event), and the rest, its idle hours, a cost of the campaign (never below 0)."""
    windows = pool_windows(plan, timeline)
    latest = max((_ts(r["at"]) for r in timeline if r.get("at") is not None), default=None)
    out: dict[str, JSON] = {}
    for pool in block_pools(spec):
        mine = [w for w in windows if w.pool == pool.name]
        nodes = max([block_nodes(pool.name, (e.nodes for e in plan.experiments)), *(w.nodes for w in mine)])
        total, price = block_cost(spec, pool, nodes), instance_price(spec, pool)
        used_h = sum(w.nodes * _hours(w.start, w.end or latest or w.start) for w in mine)
        used = None if price is None else used_h * price
        out[pool.name] = {"capacity_block_nodes": nodes, "capacity_block_hours": pool.capacity.block_hours,
                          "capacity_block_usd": total, "capacity_block_used_usd": used,
                          "capacity_block_idle_usd": None if total is None or used is None else max(0.0, total - used)}
    return out


def campaign_block_idle_usd(rows: list[JSON]) -> float:
    """The campaign's cost beyond its experiments' rows: the idle hours of its Capacity Blocks (from
    :func:`cost_rows`)."""
    return sum(float(json.loads(r["fees_json"]).get("capacity_block_idle_usd") or 0.0) for r in rows)


def _lake_name(plan: CampaignPlan, unit: str) -> str:
    """The lake's experiment of a plan entry (one of its deployments, or itself)."""
    try:
        return plan.experiment(unit).lake_name
    except KeyError:
        return unit


def experiment_totals(rows: list[JSON]) -> dict[str, JSON]:
    """Per experiment, from its :func:`cost_rows`: cost (allocation, its cold start and steady state, usage),
    tokens, $/1M tokens (allocation, steady state, usage).

    A figure is None when any of the experiment's pools is unpriced.
    """
    out: dict[str, JSON] = {}
    rates: dict[str, dict[str, float | None]] = {}  # experiment -> deployment -> its nodes' $/h
    tokens: dict[str, dict[str, int]] = {}  # experiment -> deployment -> its tokens (on each of its rows)
    for r in rows:
        t = out.setdefault(r["experiment"], {"cost_usd": 0.0, "usage_cost_usd": 0.0, "cold_start_usd": 0.0,
                                             "steady_state_usd": 0.0, "node_hours": 0.0,
                                             "gpu_hours": 0.0})
        fees = json.loads(r["fees_json"])
        p = r["price_per_node_hour_usd"]
        unit = str(r.get("deployment") or r["experiment"])
        t["node_hours"] += r["node_hours"]
        t["gpu_hours"] += r["gpu_hours"]
        for k, v in (("cost_usd", r["cost_usd"]), ("usage_cost_usd", fees.get("usage_based_usd")),
                     ("cold_start_usd", fees.get("cold_start_usd")), ("steady_state_usd", fees.get("steady_state_usd"))):
            t[k] = None if v is None or t[k] is None else t[k] + v
        held = rates.setdefault(r["experiment"], {})
        before = held.get(unit, 0.0)
        held[unit] = None if p is None or before is None else before + r["nodes"] * p
        tokens.setdefault(r["experiment"], {})[unit] = int(r["successful_output_tokens"] or 0)
    for name, t in out.items():
        # the experiment's $/h: what one of its deployments holds (they run one at a time); tokens: all of them
        per = list(rates[name].values())
        t["gpu_usd_per_hour"] = None if any(v is None for v in per) else max(v for v in per if v is not None)
        t["successful_output_tokens"] = sum(tokens[name].values())
        t["usd_per_1m_output_tokens"] = _per_1m(t["cost_usd"], t["successful_output_tokens"])
        t["usage_usd_per_1m_output_tokens"] = _per_1m(t["usage_cost_usd"], t["successful_output_tokens"])
        t["steady_state_usd_per_1m_output_tokens"] = _per_1m(t["steady_state_usd"], t["successful_output_tokens"])
    return out


def step_costs(spec: CampaignSpec, plan: CampaignPlan, steps: list[JSON]) -> list[JSON]:
    """Per step: the experiment's GPU-node $/hr x the step's ``benchmark_duration_s`` (load time only,
    no start-up, idle time or cluster fee) and that over the step's ``total_output_tokens`` x 1e6.

    The same figure in SQL: ``gpu_usd_per_hour * benchmark_duration_s / 3600 / total_output_tokens
    * 1e6`` with ``gpu_usd_per_hour`` from v_cost_efficiency. Only succeeded steps get a $/1M figure.
    """
    out = []
    for s in steps:
        try:
            exp = plan.experiment(_unit(s))
        except KeyError:
            continue
        rate = experiment_usd_per_hour(spec, exp)
        dur = s.get("benchmark_duration_s")
        cost = None if rate is None or dur is None else rate * float(dur) / 3600.0
        tokens = int(s.get("total_output_tokens") or 0) if s.get("status") == "succeeded" else 0
        out.append({"campaign_id": s.get("campaign_id"), "experiment": exp.lake_name, "step_id": s.get("step_id"),
                    "usd_per_hour": rate, "cost_usd": cost, "total_output_tokens": tokens,
                    "usd_per_1m_output_tokens": _per_1m(cost, tokens)})
    return out


# ------------------------------------------------------------------------------------------ budget


def accrued_usd(spec: CampaignSpec, plan: CampaignPlan, timeline: list[JSON], now_iso: Any) -> float:
    """What the campaign has cost up to ``now``: every pool window (restored ones in full, held ones up
    to ``now``) x nodes x price, plus the EKS fee over each experiment's wall time so far.

    Restored pools are counted too (money already spent must count against the budget). Unpriced
    pools count 0 (a spec with ``budget.max_usd`` and an unpriced pool is refused at Plan).
    """
    now = _ts(now_iso)
    total = 0.0
    spans: dict[str, tuple[datetime, datetime]] = {}
    for w in pool_windows(plan, timeline):
        end = min(w.end, now) if w.end is not None else now
        p = price(spec, w.pool)
        if p is not None:
            total += w.nodes * _hours(w.start, end) * p
        lo, hi = spans.get(w.experiment, (w.start, end))
        spans[w.experiment] = (min(lo, w.start), max(hi, end))
    total += spec.pricing.eks_cluster_usd_per_hour * sum(_hours(a, b) for a, b in spans.values())
    return total


def _remaining_s(plan: CampaignPlan, exp: ExperimentPlan, done: set[tuple[str, str]],
                 ran_s: Mapping[tuple[str, str], float] | None = None) -> float:
    """Seconds left of one experiment: its steps not done (a running one: its estimate less ``ran_s``), plus
    its overheads (capacity, ready, smoke, warm-up, teardown) before its first step, else the teardown only."""
    todo = [s for s in exp.steps if (exp.name, s.step_id) not in done]
    if not todo:
        return 0.0
    overhead = max(0.0, exp.est_s - sum(s.est_s for s in exp.steps))
    if len(todo) < len(exp.steps):
        overhead = min(overhead, OVERHEADS.get(plan.engine, {}).get("teardown", 0.0))
    ran = ran_s or {}
    return overhead + sum(max(0.0, s.est_s - ran.get((exp.name, s.step_id), 0.0)) for s in todo)


def remaining_hours(plan: CampaignPlan, done: set[tuple[str, str]],
                    ran_s: Mapping[tuple[str, str], float] | None = None) -> float:
    """Estimated hours left: the plan's ``est_s`` of every (experiment, step_id) not in ``done``."""
    return sum(_remaining_s(plan, e, done, ran_s) for e in plan.experiments) / 3600.0


def remaining_usd(spec: CampaignSpec, plan: CampaignPlan, done: set[tuple[str, str]],
                  ran_s: Mapping[tuple[str, str], float] | None = None) -> float:
    """Estimated cost left: each experiment's remaining time x (its nodes x prices + the EKS fee).

    ``done``: (experiment, step_id) of every step that will not run again: finished (any status) or
    given up with its failed experiment. With nothing done this equals the plan's ``est_usd``. ``ran_s``: the
    seconds a running step has run (its spend so far is accrued, not estimated twice)."""
    total = 0.0
    for e in plan.experiments:
        hours = _remaining_s(plan, e, done, ran_s) / 3600.0
        rate = sum(n * (price(spec, pool) or 0.0) for pool, n in e.nodes.items())
        total += hours * (rate + spec.pricing.eks_cluster_usd_per_hour)
    return total
