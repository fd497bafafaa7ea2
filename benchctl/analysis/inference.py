"""The statistics under the report's verdicts: many small comparisons judged as one procedure.

A campaign compares two experiments at many points (loads, workloads) with two to five repeats per side. Judged
one by one, each interval keeps its level, but an answer built from a hundred of them does not: most campaigns in
which nothing differs would get a direction somewhere. What this module gives the verdicts:

* **variance moderation** (:func:`variance_prior`, :func:`moderate`): each point's spread over its few repeats is
  shrunk towards a prior fitted across the points of the same figure, Smyth's empirical Bayes (Smyth 2004,
  "Linear models and empirical Bayes methods for assessing differential expression in microarray experiments",
  Stat. Appl. Genet. Mol. Biol. 3(1); limma's ``fitFDist`` and ``squeezeVar``). Where the points' variances
  agree the prior's degrees of freedom grow without bound (the points' variances pooled); where they disagree
  they fall towards 0 (each point's own variance): the degrees of freedom say which;
* **threshold tests** (:func:`threshold_p`): the p-value of "the effect lies beyond the practical threshold on
  one side", so that a decision and an interval at the same level always agree;
* **Holm's step-down** over an answer's family (:func:`holm`), each test's interval at the level its step used;
* **Wilson bounds** for shares of requests (:func:`wilson`) and **Fieller's interval** for a ratio of two
  estimates (:func:`fieller`).

Pure: the standard library only (the Report function on AWS has no scipy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

_NORMAL = NormalDist()
NORMAL_DF = 1e7  # degrees of freedom from which Student's t is taken as the normal


# ------------------------------------------------------------------------------------------ Student t


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` (> 0, not necessarily whole) degrees of freedom."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile: p must be in (0, 1) and df > 0, got p={p}, df={df}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    upper = 1.0 - p
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > upper:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_sf(mid, df) > upper:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2.0


# ------------------------------------------------------------------------------------------ polygamma


def _shift(x: float, limit: float = 10.0) -> tuple[float, list[float]]:
    """``x`` raised by whole steps to at least ``limit`` (the asymptotic series' range), with the values passed."""
    passed = []
    while x < limit:
        passed.append(x)
        x += 1.0
    return x, passed


def digamma(x: float) -> float:
    """psi(x) = d/dx ln Gamma(x), for x > 0."""
    if not x > 0:
        raise ValueError(f"digamma: x must be > 0, got {x}")
    y, passed = _shift(x)
    r = 1.0 / (y * y)
    series = math.log(y) - 0.5 / y - r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (1 / 240 - r * (1 / 132)))))
    return series - sum(1.0 / v for v in passed)


def trigamma(x: float) -> float:
    """psi'(x), for x > 0."""
    if not x > 0:
        raise ValueError(f"trigamma: x must be > 0, got {x}")
    y, passed = _shift(x)
    r = 1.0 / (y * y)
    series = 1.0 / y + r / 2 + (r / y) * (1 / 6 - r * (1 / 30 - r * (1 / 42 - r * (1 / 30 - r * 5 / 66))))
    return series + sum(1.0 / (v * v) for v in passed)


def tetragamma(x: float) -> float:
    """psi''(x), for x > 0."""
    if not x > 0:
        raise ValueError(f"tetragamma: x must be > 0, got {x}")
    y, passed = _shift(x)
    # -1/y^2 - 1/y^3 - sum_k B_2k (2k + 1) / y^(2k + 2)
    series = -(1.0 / y ** 2) - 1.0 / y ** 3 - 1.0 / (2 * y ** 4) + 1.0 / (6 * y ** 6) - 1.0 / (6 * y ** 8) \
        + 3.0 / (10 * y ** 10) - 5.0 / (6 * y ** 12)
    return series - sum(2.0 / v ** 3 for v in passed)


def trigamma_inverse(y: float) -> float:
    """The x > 0 with trigamma(x) = y (limma's ``trigammaInverse``: Newton's method from 0.5 + 1/y)."""
    if not y > 0:
        raise ValueError(f"trigamma_inverse: y must be > 0, got {y}")
    if y > 1e7:
        return 1.0 / math.sqrt(y)
    if y < 1e-6:
        return 1.0 / y
    x = 0.5 + 1.0 / y
    for _ in range(100):
        tri = trigamma(x)
        step = tri * (1.0 - tri / y) / tetragamma(x)
        x += step
        if -step / x < 1e-8:
            break
    return x


# ------------------------------------------------------------------------------------------ variance moderation


@dataclass(frozen=True)
class Prior:
    """The prior of the cells' variances: scale ``s2`` with ``df`` degrees of freedom (``math.inf``: the cells'
    variances agree and are pooled; 0: no prior, each cell keeps its own). ``cells``: variances fitted;
    ``total_df``: their degrees of freedom together (a moderated variance never has more)."""

    s2: float
    df: float
    cells: int
    total_df: float

    def text(self) -> str:
        if self.cells < 2 or self.df == 0:
            return "each point's own variance (too few points to moderate)" if self.cells < 2 else \
                "each point's own variance (the points' variances disagree: prior df 0)"
        if math.isinf(self.df):
            return f"variances pooled over {self.cells} cells (they differ no more than chance: prior df infinite)"
        return f"variances moderated over {self.cells} cells (prior df {self.df:.3g})"


NO_PRIOR = Prior(0.0, 0.0, 0, 0.0)


def variance_prior(cells: Sequence[tuple[float, float]]) -> Prior:
    """Smyth's prior from ``(sample variance, degrees of freedom)`` per cell (limma ``fitFDist`` without
    covariates). Cells with no degrees of freedom are skipped; so are exact zeros (ties of a discrete figure:
    limma offsets them to 1e-5 x the median, which lets a single tie collapse the prior's degrees of freedom;
    here they take the posterior like any cell, without weighing on the fit). (Pooling outright where Bartlett's
    test finds the variances equal was tried and measured worse under the null: at 2-3 repeats the pooled
    variance's Student reference is too light in the far tails a family-wise level reaches.)"""
    ok = [(s2, d) for s2, d in cells if d > 0 and math.isfinite(s2) and s2 > 0]
    total = float(sum(d for s2, d in cells if d > 0 and math.isfinite(s2) and s2 >= 0))
    if len(ok) < 2:
        return Prior(ok[0][0], 0.0, 1, total) if ok else Prior(0.0, 0.0, 0, total)
    e = [math.log(s2) - digamma(d / 2) + math.log(d / 2) for s2, d in ok]
    mean = math.fsum(e) / len(e)
    var = math.fsum((v - mean) ** 2 for v in e) / (len(e) - 1) - math.fsum(trigamma(d / 2) for _, d in ok) / len(ok)
    if var > 0:
        df0 = 2.0 * trigamma_inverse(var)
        return Prior(math.exp(mean + digamma(df0 / 2) - math.log(df0 / 2)), df0, len(ok), total)
    return Prior(math.exp(mean), math.inf, len(ok), total)


def moderate(s2: float, df: float, prior: Prior) -> tuple[float, float]:
    """A cell's posterior variance and degrees of freedom under ``prior`` (limma ``squeezeVar``), the degrees of
    freedom capped at the prior's total."""
    if prior.df == 0 or prior.cells < 2:
        return s2, df
    if math.isinf(prior.df):
        return prior.s2, prior.total_df
    post = (prior.df * prior.s2 + df * s2) / (prior.df + df)
    return post, min(prior.df + df, prior.total_df)


# ------------------------------------------------------------------------------------------ tests


def sf(t: float, df: float) -> float:
    """P(T > t) for Student's t (the normal beyond :data:`NORMAL_DF` degrees of freedom)."""
    if df >= NORMAL_DF:
        return 1.0 - _NORMAL.cdf(t)
    return t_sf(t, df)


def quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (the normal beyond :data:`NORMAL_DF` degrees of freedom)."""
    if df >= NORMAL_DF:
        return _NORMAL.inv_cdf(p)
    return t_quantile(p, df)


def threshold_p(estimate: float, se: float, df: float, low: float, high: float) -> float:
    """The p-value of a direction: 2 x the smaller of P(effect <= ``high``) and P(effect >= ``low``) given the
    estimate (one-sided t tests against the practical threshold's two edges, ``low`` < 0 < ``high``). The interval
    at confidence 1 - g clears an edge exactly when this is below g."""
    if not se > 0:
        raise ValueError(f"threshold_p: se must be > 0, got {se}")
    up = sf((estimate - high) / se, df)
    down = sf(-(estimate - low) / se, df)
    return min(1.0, 2.0 * min(up, down))


def interval(estimate: float, se: float, df: float, confidence: float) -> tuple[float, float]:
    half = quantile(0.5 + confidence / 2.0, df) * se
    return estimate - half, estimate + half


@dataclass(frozen=True)
class Step:
    """Holm's decision on one test: rejected or not, and the significance level its step was judged at."""

    rejected: bool
    alpha: float


def holm(ps: Sequence[float], alpha: float) -> list[Step]:
    """Holm's step-down over ``ps`` at family-wise ``alpha``: the k-th smallest p (k from 1) is rejected at
    alpha / (m - k + 1) while every smaller one was. A test not rejected gets the level the first unrejected
    step used, so its interval at 1 - that level does not clear the threshold either."""
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    out: list[Step | None] = [None] * m
    stopped: float | None = None
    for rank, i in enumerate(order):
        level = alpha / (m - rank)
        if stopped is None and ps[i] <= level:
            out[i] = Step(True, level)
        else:
            stopped = level if stopped is None else stopped
            out[i] = Step(False, stopped)
    return [s for s in out if s is not None]


# ------------------------------------------------------------------------------------------ shares, ratios


def wilson(successes: float, n: float, confidence: float) -> tuple[float, float]:
    """The one-sided Wilson bounds (low, high) of a share, each at ``confidence``: the share is above ``low``
    with that confidence, and below ``high``."""
    if n <= 0:
        return 0.0, 1.0
    z = _NORMAL.inv_cdf(min(max(confidence, 0.5), 1.0 - 1e-16))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_p_above(successes: float, n: float, target: float) -> float:
    """The smallest one-sided level g at which the Wilson lower bound (confidence 1 - g) reaches ``target``: the
    p-value of the score test of "the share is below ``target``" (Wilson's bounds invert that test)."""
    if n <= 0 or not 0.0 < target < 1.0:
        return 1.0
    z = (successes / n - target) / math.sqrt(target * (1.0 - target) / n)
    return 1.0 - _NORMAL.cdf(z)


def wilson_p_below(successes: float, n: float, target: float) -> float:
    """As :func:`wilson_p_above`, for the upper bound falling below ``target`` (the share shown to miss it)."""
    if n <= 0 or not 0.0 < target < 1.0:
        return 1.0
    z = (target - successes / n) / math.sqrt(target * (1.0 - target) / n)
    return 1.0 - _NORMAL.cdf(z)


def fieller(num: float, num_se: float, den: float, den_se: float, df: float, confidence: float,
            den_df: float | None = None) -> tuple[float, float] | None:
    """Fieller's interval of num / den for two independent estimates with standard errors (t with ``df``; the
    denominator's own ``den_df`` where it has other degrees of freedom, so that it is clear of zero here exactly
    when its own interval at ``confidence`` is); None when the denominator is not clear of zero at that confidence
    (the interval is then unbounded)."""
    t = quantile(0.5 + confidence / 2.0, df)
    t_den = t if den_df is None else quantile(0.5 + confidence / 2.0, den_df)
    a = den * den - t_den * t_den * den_se * den_se
    if a <= 0:
        return None
    b = -2.0 * num * den
    c = num * num - t * t * num_se * num_se
    disc = b * b - 4 * a * c
    if disc < 0:
        return None
    root = math.sqrt(disc)
    return (-b - root) / (2 * a), (-b + root) / (2 * a)
