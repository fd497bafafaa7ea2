"""Variance components: how much of a figure's spread comes from the deployment and how much from the repeats on
it, so that a mode effect is judged on the level that varies most (Kalibera & Jones, "Rigorous Benchmarking in
Reasonable Time", ISMM 2013: random effects at each level of the experiment; replicate at the highest level that
varies).

A campaign deploys each experiment ``D`` times (``design.deployments``) and runs ``R`` repeats on each. A fresh
deployment lands on other nodes, clocks, placement, KV-cache size: every repeat on it (and every load of it) shares
that offset. For one *stream* (one side of an unpaired comparison, or the paired differences of a paired one) and
one figure on its analysis scale, with the deployments as *blocks*:

* each block's mean at each point (load, variant) over its repeats, ``m[k, p]``; centred per point,
  ``c[k, p] = m[k, p] - mean_j m[j, p]``;
* the block's **shared offset** over the figure's points, ``o_k = mean_p c[k, p]``: its spread ``S_o = sum_k o_k^2 /
  (K - 1)`` estimates the between-deployment variance plus a ``1/P`` share of the rest, so ``sigma_d^2 = max(0, S_o
  - mean residual / P)``, with ``K - 1`` degrees of freedom however many points there are (the offset is one number
  per deployment: the points do not multiply its evidence);
* the **residual** at each point, ``c[k, p] - o_k``: what varies between deployments at that point beyond the
  shared offset (the repeats' noise over ``R``, and any deployment x load interaction), with ``(K_p - 1)(1 - 1/P)``
  degrees of freedom, moderated across the points (Smyth, :mod:`benchctl.analysis.inference`).

A block mean then varies by ``sigma_B^2 + residual_p``, where ``sigma_B^2 = max(floor^2, sigma_d^2)``: the spec's
``comparison.deployment_spread_pct`` is the least between-deployment spread a verdict allows for (treated as known
where it binds). With one deployment (``K = 1``) nothing between deployments is measured: the block's variance is
the floor plus the repeats' (moderated as before) over ``R``; the method line says the floor was assumed. Pure: the
standard library and :mod:`benchctl.analysis.inference`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchctl.analysis import inference

BETWEEN, WITHIN = "between deployments", "between repeats on a deployment"


@dataclass(frozen=True)
class Components:
    """One stream's variance components on the analysis scale. ``blocks``: deployments; ``between``: the
    between-deployment variance used (``between_df`` ``inf`` where the floor binds or is assumed);
    ``measured``: the campaign's own estimate (None with one deployment); ``residual``: per point index, the
    variance of one block's mean beyond the shared offset and its degrees of freedom."""

    blocks: int
    between: float
    between_df: float
    measured: float | None
    floor: float
    residual: dict[int, tuple[float, float]] = field(default_factory=dict)

    def block_variance(self, point: int) -> tuple[float, float, float, float] | None:
        """(between, its df, residual, its df) of one block's mean at point ``point`` (None: not estimable)."""
        got = self.residual.get(point)
        if got is None:
            return None
        return self.between, self.between_df, got[0], got[1]

    @property
    def dominant(self) -> str:
        res = [v for v, _ in self.residual.values()]
        typical = sorted(res)[len(res) // 2] if res else 0.0
        return BETWEEN if self.between >= typical else WITHIN

    @property
    def floor_binds(self) -> bool:
        return math.isinf(self.between_df) and self.between > 0


def _var(xs: Sequence[float]) -> float:
    m = math.fsum(xs) / len(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def within_components(cells: Sequence[dict[str, list[float]]], floor2: float, repeats_prior: inference.Prior
                      ) -> Components:
    """One deployment (``cells``: per point, the single block's repeat values): the floor as the between-deployment
    variance (assumed), the repeats' variance over their count (each moderated under ``repeats_prior``) as the
    residual."""
    residual: dict[int, tuple[float, float]] = {}
    for i, cell in enumerate(cells):
        values = next(iter(cell.values()), []) if cell else []
        if len(values) >= 2:
            v, df = inference.moderate(_var(values), len(values) - 1, repeats_prior)
            residual[i] = (v / len(values), df)
    return Components(1, floor2, math.inf, None, floor2, residual)


def block_components(cells: Sequence[dict[str, list[float]]], floor2: float, *, moderate: bool = True) -> Components:
    """Two or more deployments (``cells``: per point, each block's repeat values): the shared offset and the
    per-point residual of the blocks' means (module doc; ``moderate``: borrow the residuals' strength across the
    points, not for a count, whose variance moves with its level)."""
    means = [{k: math.fsum(v) / len(v) for k, v in cell.items() if v} for cell in cells]
    usable = [i for i, m in enumerate(means) if len(m) >= 2]
    blocks = sorted({k for i in usable for k in means[i]})
    n_points = len(usable)
    centred: dict[int, dict[str, float]] = {}
    for i in usable:
        mu = math.fsum(means[i].values()) / len(means[i])
        centred[i] = {k: v - mu for k, v in means[i].items()}
    offsets = {k: math.fsum(c[k] for c in centred.values() if k in c) / max(1, sum(k in c for c in centred.values()))
               for k in blocks}
    if n_points >= 2:
        raw: list[tuple[int, float, float]] = []
        for i in usable:
            res = [centred[i][k] - offsets[k] for k in centred[i]]
            df = (len(res) - 1) * (1.0 - 1.0 / n_points)
            raw.append((i, math.fsum(r * r for r in res) / df if df > 0 else 0.0, df))
        prior = inference.variance_prior([(v, df) for _, v, df in raw]) if moderate else inference.NO_PRIOR
        residual = {i: inference.moderate(v, df, prior) for i, v, df in raw}
        typical = math.fsum(v for v, _ in residual.values()) / len(residual)
        s_o = math.fsum(o * o for o in offsets.values()) / (len(blocks) - 1)
        measured = max(0.0, s_o - typical / n_points)
    else:  # one point: its block means' variance is all there is (the offset cannot be told from the rest)
        residual = dict.fromkeys(usable, (0.0, math.inf))
        measured = _var(list(means[usable[0]].values())) if usable else 0.0
    between, between_df = (floor2, math.inf) if floor2 >= measured else (measured, float(len(blocks) - 1))
    return Components(len(blocks), between, between_df, measured, floor2, residual)


def satterthwaite(terms: Sequence[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance terms ``(value, df)`` (``inf`` df: known)."""
    total = math.fsum(v for v, _ in terms)
    den = math.fsum(v * v / df for v, df in terms if v > 0 and df > 0 and math.isfinite(df))
    return total * total / den if den > 0 else inference.NORMAL_DF


def spread_pct(variance: float) -> float:
    """A log-scale variance as the relative spread it stands for (%)."""
    return 100.0 * math.expm1(math.sqrt(max(variance, 0.0)))
