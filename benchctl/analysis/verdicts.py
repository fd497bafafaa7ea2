"""Verdicts a reader can act on: the settings they are judged by, samples over repeats, least-squares fits,
and where a sweep leaves its SLO.

The procedure (docs/explanation/verdicts.md, docs/METRICS.md "Verdicts"): each answer declares its primary
figures before the data; every point of a primary figure is tested against the practical threshold
(:mod:`benchctl.analysis.effects`: log ratios, variances moderated across the points of the figure, paired by repeat
where both sides ran the same requests), and the answer's family of tests is judged by Holm's step-down at
family-wise alpha = 1 - ``confidence`` (:mod:`benchctl.analysis.inference`). Here:

* :class:`Settings`: the spec's ``comparison:``;
* :class:`Sample`, :func:`mean_interval`: one side's values over repeats;
* :func:`fit_line`, :func:`slope_difference`: Q3's hit rate over the duplication ratio;
* the SLO regimes (where a sweep leaves its SLO, and two sides' limits compared): :mod:`benchctl.analysis.regimes`.

Pure: the standard library and :mod:`benchctl.analysis.inference`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchctl.analysis.formatting import round_for_reading
from benchctl.analysis.inference import t_quantile
from benchctl.spec.comparisons import (  # the spec's `comparison:` defaults
    DEFAULT_CONFIDENCE,
    DEFAULT_DEPLOYMENT_SPREAD_PCT,
    DEFAULT_MAX_ERROR_RATE,
    DEFAULT_MIN_SAMPLES_P99,
    DEFAULT_PRACTICAL_THRESHOLD_PCT,
    DEFAULT_QUEUE_THRESHOLD,
    DEFAULT_SLO_ATTAINMENT,
    DEFAULT_TRANSFER_SHARE_PCT,
)

# A direction needs this many repeats per side. With 2, each side's spread at a point rests on one degree of
# freedom, and the far tails that a family-wise level reaches are not Student's: measured under the null
# (bench/aa_false_positive.py), 2 repeats at 20 % noise made Q1 and H1 directional in 5 % of A/A campaigns.
MIN_REPEATS = 3

LOWER, HIGHER, INCONCLUSIVE = "lower", "higher", "inconclusive"


@dataclass(frozen=True)
class Settings:
    """How a comparison is judged (the spec's ``comparison:``, recorded on each ``comparisons`` row)."""

    confidence: float = DEFAULT_CONFIDENCE
    practical_threshold_pct: float = DEFAULT_PRACTICAL_THRESHOLD_PCT
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    slo_attainment: float = DEFAULT_SLO_ATTAINMENT
    min_samples_p99: int = DEFAULT_MIN_SAMPLES_P99
    transfer_share_pct: float = DEFAULT_TRANSFER_SHARE_PCT
    queue_threshold: float = DEFAULT_QUEUE_THRESHOLD
    deployment_spread_pct: float = DEFAULT_DEPLOYMENT_SPREAD_PCT

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Settings:
        """From a ``comparisons`` row; a missing value (a lake written before the column) takes its default."""
        d = cls()

        def get(k: str, default: float) -> float:
            v = row.get(k)
            return default if v is None else float(v)

        return cls(get("confidence", d.confidence), get("practical_threshold_pct", d.practical_threshold_pct),
                   get("max_error_rate", d.max_error_rate), get("slo_attainment", d.slo_attainment),
                   int(get("min_samples_p99", d.min_samples_p99)),
                   get("transfer_share_pct", d.transfer_share_pct), get("queue_threshold", d.queue_threshold),
                   get("deployment_spread_pct", d.deployment_spread_pct))

    @property
    def alpha(self) -> float:
        return 1.0 - self.confidence

    def describe(self) -> str:
        """The rules every answer shares (each answer adds its family, figures and design)."""
        return (f"a direction only where the interval clears the practical threshold (+/-{self.practical_threshold_pct:g}"
                f" % of the baseline for latencies, throughputs and costs, on the log ratio of the two sides' "
                f"geometric means over repeats), with >= {MIN_REPEATS} repeats per side; p99 only with >= "
                f"{self.min_samples_p99} "
                f"requests per step; latency percentiles only from valid steps (succeeded, error rate <= "
                f"{self.max_error_rate:g}), goodput and SLO attainment from every attempted step (a failure is a miss)")


# ------------------------------------------------------------------------------------------ samples


@dataclass(frozen=True)
class Sample:
    """One side's values, one per repeat; ``min_requests``: the fewest requests behind any of them."""

    values: tuple[float, ...]
    min_requests: int | None = None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return math.fsum(self.values) / self.n if self.values else None

    @property
    def sd(self) -> float | None:
        if self.n < 2:
            return None
        m = math.fsum(self.values) / self.n
        if max(self.values) - min(self.values) <= 1e-12 * max(1.0, abs(m)):
            return 0.0  # equal values (up to rounding): no spread
        return math.sqrt(math.fsum((v - m) ** 2 for v in self.values) / (self.n - 1))


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    confidence: float
    df: float


def mean_interval(s: Sample, confidence: float) -> Interval | None:
    """The mean of one sample with its Student-t interval (None with fewer than 2 values)."""
    if s.n < 2 or s.mean is None or s.sd is None:
        return None
    half = t_quantile(0.5 + confidence / 2.0, s.n - 1) * s.sd / math.sqrt(s.n)
    return Interval(s.mean, s.mean - half, s.mean + half, confidence, s.n - 1)


# ------------------------------------------------------------------------------------------ verdicts


def num_text(v: float | None, unit: str = "", signed: bool = False) -> str:
    if v is None:
        return "n/a"
    v = 0.0 if abs(v) < 1e-12 else v  # rounding noise of a difference of equal figures
    text = round_for_reading(v)
    if signed and v > 0:
        text = "+" + text
    return f"{text} {unit}".rstrip() if unit and unit != "%" else f"{text}{' %' if unit == '%' else ''}"


# ------------------------------------------------------------------------------------------ fits


@dataclass(frozen=True)
class Fit:
    """Least squares y = intercept + slope x, with the slope's Student-t interval (n - 2 degrees of freedom)."""

    n: int
    slope: float
    intercept: float
    slope_se: float | None
    slope_interval: Interval | None
    r2: float | None

    def text(self, x_name: str, y_name: str) -> str:
        iv = self.slope_interval
        ci = (f", {iv.confidence:.0%} CI [{num_text(iv.low)}, {num_text(iv.high)}]" if iv is not None
              else ", no interval (fewer than 3 points)")
        r2 = f", R^2 {num_text(self.r2)}" if self.r2 is not None else ""
        return (f"{y_name} = {num_text(self.intercept)} + {num_text(self.slope)} x {x_name}{ci}; {self.n} points"
                f"{r2}")


def fit_line(points: Sequence[tuple[float, float]], confidence: float) -> Fit | None:
    """The line through every point (None with fewer than 2 distinct x)."""
    n = len(points)
    if n < 2 or len({x for x, _ in points}) < 2:
        return None
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    slope = sxy / sxx
    intercept = my - slope * mx
    ssr = sum((y - intercept - slope * x) ** 2 for x, y in points)
    r2 = 1.0 - ssr / syy if syy > 0 else None
    if n < 3:
        return Fit(n, slope, intercept, None, None, r2)
    se = math.sqrt(ssr / (n - 2) / sxx)
    half = t_quantile(0.5 + confidence / 2.0, n - 2) * se
    return Fit(n, slope, intercept, se, Interval(slope, slope - half, slope + half, confidence, n - 2), r2)


def slope_se(base: Fit, treat: Fit) -> tuple[float, float] | None:
    """The standard error of treat.slope - base.slope and its Welch-Satterthwaite degrees of freedom."""
    if base.slope_se is None or treat.slope_se is None:
        return None
    vb, vt = base.slope_se ** 2, treat.slope_se ** 2
    if vb + vt == 0.0:
        return 0.0, float(base.n + treat.n - 4)
    return math.sqrt(vb + vt), (vb + vt) ** 2 / (vb ** 2 / (base.n - 2) + vt ** 2 / (treat.n - 2))


@dataclass(frozen=True)
class Curve:
    """Least squares y = a + b x + c x^2 over at least three distinct x: the curvature ``c`` with its standard error
    and degrees of freedom (n - 3): what a straight line's slope cannot see (a response that bends between its
    ends)."""

    n: int
    curvature: float
    curvature_se: float | None
    df: int

    def text(self) -> str:
        se = f" (se {num_text(self.curvature_se)})" if self.curvature_se is not None else ""
        return f"curvature {num_text(self.curvature)} per unit^2{se} over {self.n} points"


def fit_curve(points: Sequence[tuple[float, float]]) -> Curve | None:
    """The quadratic through every point (None with fewer than 3 distinct x); the curvature's standard error needs
    a fourth point (n - 3 > 0)."""
    n = len(points)
    xs = sorted({x for x, _ in points})
    if n < 3 or len(xs) < 3:
        return None
    mx = sum(x for x, _ in points) / n
    u = [(x - mx, y) for x, y in points]  # centred: the normal equations stay well conditioned
    s = [sum(x ** k for x, _ in u) for k in range(5)]
    t = [sum(y * x ** k for x, y in u) for k in range(3)]
    m = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]]

    def det(a: list[list[float]]) -> float:
        return (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))

    d = det(m)
    if abs(d) < 1e-15:
        return None
    coef = []
    for i in range(3):
        mi = [row[:] for row in m]
        for r in range(3):
            mi[r][i] = t[r]
        coef.append(det(mi) / d)
    a, b, c = coef
    ssr = sum((y - a - b * x - c * x * x) ** 2 for x, y in u)
    if n <= 3:
        return Curve(n, c, None, 0)
    # the variance of c: sigma^2 x (M^-1)[2][2], the cofactor of the last diagonal element over the determinant
    inv22 = (m[0][0] * m[1][1] - m[0][1] * m[1][0]) / d
    return Curve(n, c, math.sqrt(max(0.0, ssr / (n - 3) * inv22)), n - 3)


def curvature_se(base: Curve, treat: Curve) -> tuple[float, float] | None:
    """The standard error of treat.curvature - base.curvature and its Welch-Satterthwaite degrees of freedom."""
    if base.curvature_se is None or treat.curvature_se is None:
        return None
    vb, vt = base.curvature_se ** 2, treat.curvature_se ** 2
    if vb + vt == 0.0:
        return 0.0, float(base.df + treat.df)
    return math.sqrt(vb + vt), (vb + vt) ** 2 / (vb ** 2 / base.df + vt ** 2 / treat.df)
