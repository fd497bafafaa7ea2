"""How a campaign spends its runs between deployments and repeats: ``benchctl plan``'s allocation table.

A deployment costs its start-up (model load, smoke test, warm-up, teardown: the plan's overheads), a repeat its
workloads' load. What each buys depends on where the variance is (Kalibera & Jones, ISMM 2013: replicate at the
level that varies, choose the repetitions per level by their cost): a fresh deployment moves every figure of it by
its offset (spread ``s_d``, ``comparison.deployment_spread_pct`` unless measured), a repeat by the run's own noise
(``s_r``). For a few designs (deployments x repeats per experiment, the plan's own among them) the table gives:

* the price: hours, GPU-hours and dollars, scaled from the plan's own entries (each experiment's first deployment
  with its capacity wait, every later one warm; each repeat its workloads' load);
* the **false-directional rate** of Q1's family (its TTFT p50 tests at every sweep load and the SLO limits, judged
  by Holm's step-down at alpha) when nothing differs: with the deployments spreading as the spec assumes, and twice
  that (a world noisier than assumed: one deployment per side cannot see it, two or more measure it);
* the **power** for a true -30 % TTFT p50 at two loads, and the **smallest effect** one load's test finds with 80 %
  power.

The rates are computed, not simulated: the deployments' shared offset integrated over its normal distribution (and,
with two or more deployments, the measured spread over its chi-square distribution, never below the floor), each
point's test a normal tail at Holm's first level; ``bench/aa_false_positive.py`` measures the real procedure.
Pure: the standard library and the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from benchctl.analysis import inference
from benchctl.planning.node_price import node_price
from benchctl.planning.plan import OVERHEADS, CampaignPlan
from benchctl.spec.model import CampaignSpec
from benchctl.spec.workloads import ConcurrencySweep

N = NormalDist()
REPEAT_SPREAD_PCT = 10.0  # a step's own relative noise assumed (bench/aa_false_positive.py's)
EFFECT = math.log(0.7)  # the power's true effect: -30 % TTFT p50
DESIGNS = ((1, 3), (2, 2), (3, 1), (3, 2), (4, 1), (5, 1), (6, 1))
_HERMITE = 48  # quadrature nodes over the shared offset


@dataclass(frozen=True)
class Allocation:
    deployments: int
    repeats: int
    hours: float
    gpu_hours: float
    usd: float | None
    false_directional: float  # the family's, the deployments spreading as assumed
    false_directional_2x: float  # spreading twice as much
    power: float  # -30 % at two loads
    detectable_pct: float  # one load, 80 % power
    chosen: bool = False


def family_size(spec: CampaignSpec) -> int:
    """Q1's primary tests: TTFT p50 at every fixed load (and each probe a repeat runs) of every sweep, and one SLO-limit
    comparison per sweep."""
    n = 0
    for w in spec.workloads:
        if isinstance(w, ConcurrencySweep):
            search = w.search_settings()
            n += len(w.fixed_loads()) + (search.max_probes if search else 0) + 1
    return max(1, n)


def _nodes(k: int) -> list[tuple[float, float]]:
    """(z, weight) of a normal's quantile midpoints: an even quadrature over N(0, 1)."""
    return [(N.inv_cdf((i + 0.5) / k), 1.0 / k) for i in range(k)]


def _chi2(nu: int, k: int = 24) -> list[tuple[float, float]]:
    """(chi^2 / nu, weight) at ``k`` quantile midpoints (Wilson-Hilferty)."""
    out = []
    for i in range(k):
        z = N.inv_cdf((i + 0.5) / k)
        c = 1.0 - 2.0 / (9.0 * nu) + z * math.sqrt(2.0 / (9.0 * nu))
        out.append((max(1e-6, c ** 3), 1.0 / k))
    return out


def _df(d: int, r: int, between: float, between_df: float, w: float, m: int) -> float:
    """The test's degrees of freedom (Welch-Satterthwaite): the between-deployment term's, and the points' own
    noise estimated over the family's points (one deployment: the repeats on it; more: the deployments' residuals)."""
    own_df = 2.0 * max(1, m) * ((r - 1) if d == 1 else (d - 1) * (1.0 - 1.0 / max(2, m)))
    terms = [(between, between_df), (w, max(1.0, own_df))]
    total = sum(v for v, _ in terms)
    den = sum(v * v / df for v, df in terms if v > 0 and math.isfinite(df))
    return total * total / den if den > 0 else inference.NORMAL_DF


def _rates(d: int, r: int, floor: float, s_d: float, s_r: float, thr: tuple[float, float], m: int, alpha: float
           ) -> tuple[float, float]:
    """(false-directional rate of a family of ``m`` tests, power at two loads of -30 %) for ``d`` x ``r``; ``thr``:
    the practical threshold's edges (lower, upper) on the log scale."""
    w = s_r * s_r / r  # a deployment mean's own noise, per side, per point
    level = alpha / m
    measured = [(1.0, 1.0)] if d == 1 else _chi2(2 * (d - 1))
    fp = power = 0.0
    for ratio, pw in measured:
        floor_binds = d == 1 or floor * floor >= s_d * s_d * ratio
        between = floor * floor if floor_binds else s_d * s_d * ratio
        df = _df(d, r, between, math.inf if floor_binds else 2.0 * (d - 1), w, m)
        se = math.sqrt(2.0 * (between + w) / d)
        q = inference.quantile(1.0 - level / 2.0, df) * se
        low, high = thr[0] - q, thr[1] + q  # an estimate beyond either is directional
        eps = math.sqrt(2.0 * w / d)  # the point's own part of the effect's noise
        for z, zw in _nodes(_HERMITE):
            delta = z * math.sqrt(2.0) * s_d / math.sqrt(d)  # the two sides' mean deployment offsets' difference
            p_dir = N.cdf((low - delta) / eps) + 1.0 - N.cdf((high - delta) / eps)
            fp += pw * zw * (1.0 - (1.0 - p_dir) ** m)
            hit = N.cdf((low - (EFFECT + delta)) / eps)
            power += pw * zw * (1.0 - (1.0 - hit) ** 2)
    return min(1.0, fp), min(1.0, power)


def _detectable(d: int, r: int, floor: float, s_d: float, s_r: float, thr: tuple[float, float], m: int,
                alpha: float) -> float:
    """The true effect (%, lower) one load's test finds with 80 % power (the spread at its expected value)."""
    w = s_r * s_r / r
    between = max(floor * floor, s_d * s_d)
    se = math.sqrt(2.0 * (between + w) / d)
    q = inference.quantile(1.0 - alpha / m / 2.0, _df(d, r, between, math.inf, w, m))
    return 100.0 * -math.expm1(thr[0] - (q + 0.8416212335729143) * se)


def _price(spec: CampaignSpec, plan: CampaignPlan, d: int, r: int) -> tuple[float, float, float | None]:
    """(hours, GPU-hours, $) of the campaign at ``d`` x ``r``, scaled from the plan's entries."""
    over = OVERHEADS[plan.engine]
    seconds = gpu_s = usd = 0.0
    priced = True
    rate_fee = spec.pricing.eks_cluster_usd_per_hour
    for name in dict.fromkeys(e.lake_name for e in plan.experiments if "arm" not in e.tune):
        entries = plan.deployments_of(name)
        first = entries[0]
        per_repeat = sum(s.est_s for e in entries for s in e.steps) / max(1, sum(len(e.repeats) for e in entries))
        start = first.est_s - sum(s.est_s for s in first.steps)  # its capacity wait (if any) and start-up
        before = plan.experiments[first.index - 1] if first.index > 0 else None
        waited = not (before is not None and first.nodes and all(p in before.handover for p in first.nodes))
        warm = max(0.0, start - over["capacity"]) if waited else start  # a later deployment's: kept warm
        s = start + (d - 1) * warm + d * r * per_repeat
        seconds += s
        gpus = sum(n * spec.pool(p).gpus_per_node for p, n in first.nodes.items())
        gpu_s += s * gpus
        node_usd = 0.0
        for p, n in first.nodes.items():
            price = node_price(spec, p)
            if price is None:
                priced = False
            else:
                node_usd += n * price
        usd += s / 3600.0 * (node_usd + rate_fee)
    for e in plan.experiments:  # tune pilots: as planned
        if "arm" in e.tune:
            seconds += e.est_s
    return seconds / 3600.0, gpu_s / 3600.0, round(usd, 2) if priced else None


def allocations(spec: CampaignSpec, plan: CampaignPlan, repeat_spread_pct: float = REPEAT_SPREAD_PCT
                ) -> list[Allocation]:
    """The table's rows: :data:`DESIGNS` and the spec's own design."""
    floor = math.log1p(spec.comparison.deployment_spread_pct / 100.0)
    s_r = math.log1p(repeat_spread_pct / 100.0)
    pct = spec.comparison.practical_threshold_pct / 100.0
    thr = (math.log(max(1e-9, 1.0 - pct)), math.log1p(pct))  # benchctl.analysis.compared.Figure.edges
    m, alpha = family_size(spec), 1.0 - spec.comparison.confidence
    own = (spec.design.deployments, spec.repeats)
    out = []
    for d, r in sorted({*DESIGNS, own}):
        hours, gpu_h, usd = _price(spec, plan, d, r)
        fp, power = _rates(d, r, floor, floor, s_r, thr, m, alpha)
        fp2, _ = _rates(d, r, floor, 2 * floor, s_r, thr, m, alpha)
        out.append(Allocation(d, r, hours, gpu_h, usd, fp, fp2, power,
                              _detectable(d, r, floor, floor, s_r, thr, m, alpha), (d, r) == own))
    return out


def format_allocations(spec: CampaignSpec, rows: list[Allocation], repeat_spread_pct: float = REPEAT_SPREAD_PCT) -> str:
    m = family_size(spec)
    lines = [f"allocation (deployments x repeats per experiment): each deployment's offset spread assumed "
             f"{spec.comparison.deployment_spread_pct:g} % (comparison.deployment_spread_pct), a run's own noise "
             f"{repeat_spread_pct:g} % (assumed); Q1's family of {m} tests at alpha "
             f"{1 - spec.comparison.confidence:.2g} (computed; bench/aa_false_positive.py measures the procedure)",
             f"  {'design':<14} {'hours':>7} {'GPU-h':>8} {'$':>9}  {'false directional':>18} {'(spread x2)':>12} "
             f"{'power -30 %':>12} {'smallest effect':>16}"]
    for a in rows:
        usd = f"{a.usd:,.0f}" if a.usd is not None else "unpriced"
        lines.append(f"  {f'{a.deployments} x {a.repeats}':<14} {a.hours:7.1f} {a.gpu_hours:8.1f} {usd:>9}  "
                     f"{a.false_directional:17.1%} {a.false_directional_2x:12.1%} {a.power:12.1%} "
                     f"{a.detectable_pct:15.0f} %" + ("   <- this plan" if a.chosen else ""))
    return "\n".join(lines)
