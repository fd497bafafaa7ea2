"""Verdicts a reader can act on: confidence intervals over repeats, a direction only where the evidence
carries one, SLO regimes, crossovers and the fabric check.

The rules (README "Comparisons and verdicts"):

* every compared figure gets a Welch (Student-t) interval of *treatment - baseline* over the repeats of each
  side (one value per repeat: the step's own statistic), in the figure's unit and in % of the baseline mean;
* a verdict is directional ("lower", "higher") only with at least 2 repeats per side AND an interval that
  clears the practical threshold (``practical_threshold_pct``) on one side of zero; otherwise it is
  "inconclusive" with the reason: too few repeats, too few requests per step for a tail percentile
  (``min_samples_p99``), an interval that includes zero, or one that stays within the threshold;
* the SLO regime of a sweep is the highest load whose SLO attainment (goodput ratio) reaches
  ``slo_attainment``, with the next load tried above it (the limit lies between the two);
* a crossover is where the directional winner of a figure changes between two loads (inconclusive loads in
  between widen the range);
* a disaggregated experiment whose observed KV-transfer backend differs from its spec is invalid
  (:mod:`benchctl.fabric`).

Pure: the standard library only. The Report function on AWS has numpy but no scipy: the Student-t quantile
is computed here from the regularized incomplete beta function.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from benchctl.formatting import round_for_reading

# The spec's `comparison:` defaults (benchctl.comparisons.ComparisonSettings uses them).
DEFAULT_CONFIDENCE = 0.95
DEFAULT_PRACTICAL_THRESHOLD_PCT = 5.0
DEFAULT_MAX_ERROR_RATE = 0.01
DEFAULT_SLO_ATTAINMENT = 0.9
DEFAULT_MIN_SAMPLES_P99 = 100

LOWER, HIGHER, INCONCLUSIVE = "lower", "higher", "inconclusive"


@dataclass(frozen=True)
class Settings:
    """How a comparison is judged (the spec's ``comparison:``, recorded on each ``comparisons`` row)."""

    confidence: float = DEFAULT_CONFIDENCE
    practical_threshold_pct: float = DEFAULT_PRACTICAL_THRESHOLD_PCT
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    slo_attainment: float = DEFAULT_SLO_ATTAINMENT
    min_samples_p99: int = DEFAULT_MIN_SAMPLES_P99

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Settings:
        """From a ``comparisons`` row; a missing value takes its default."""
        d = cls()

        def get(k: str, default: float) -> float:
            v = row.get(k)
            return default if v is None else float(v)

        return cls(get("confidence", d.confidence), get("practical_threshold_pct", d.practical_threshold_pct),
                   get("max_error_rate", d.max_error_rate), get("slo_attainment", d.slo_attainment),
                   int(get("min_samples_p99", d.min_samples_p99)))

    def describe(self) -> str:
        return (f"Welch t intervals at {self.confidence:.0%} over repeats (treatment - baseline); a direction only "
                f"with >= 2 repeats per side and an interval beyond +/-{self.practical_threshold_pct:g} % of the "
                f"baseline; p99 only with >= {self.min_samples_p99} requests per step; steps with an error rate "
                f"above {self.max_error_rate:g} are invalid")


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


def sample(values: Iterable[float | None], min_requests: int | None = None) -> Sample:
    return Sample(tuple(float(v) for v in values if v is not None and math.isfinite(float(v))), min_requests)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    confidence: float
    df: float

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


def mean_interval(s: Sample, confidence: float) -> Interval | None:
    """The mean of one sample with its Student-t interval (None with fewer than 2 values)."""
    if s.n < 2 or s.mean is None or s.sd is None:
        return None
    half = t_quantile(0.5 + confidence / 2.0, s.n - 1) * s.sd / math.sqrt(s.n)
    return Interval(s.mean, s.mean - half, s.mean + half, confidence, s.n - 1)


def welch(base: Sample, treat: Sample, confidence: float) -> Interval | None:
    """Welch's interval of mean(treat) - mean(base) (Welch-Satterthwaite degrees of freedom); None with fewer
    than 2 values on a side."""
    if base.n < 2 or treat.n < 2 or base.sd is None or treat.sd is None:
        return None
    vb, vt = base.sd ** 2 / base.n, treat.sd ** 2 / treat.n
    diff = float(treat.mean or 0.0) - float(base.mean or 0.0)
    if vb + vt == 0.0:  # no spread on either side: the difference is what it is
        return Interval(diff, diff, diff, confidence, base.n + treat.n - 2)
    df = (vb + vt) ** 2 / (vb ** 2 / (base.n - 1) + vt ** 2 / (treat.n - 1))
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(vb + vt)
    return Interval(diff, diff - half, diff + half, confidence, df)


# ------------------------------------------------------------------------------------------ verdicts


def num_text(v: float | None, unit: str = "", signed: bool = False) -> str:
    if v is None:
        return "n/a"
    v = 0.0 if abs(v) < 1e-12 else v  # rounding noise of a difference of equal figures
    text = round_for_reading(v)
    if signed and v > 0:
        text = "+" + text
    return f"{text} {unit}".rstrip() if unit and unit != "%" else f"{text}{' %' if unit == '%' else ''}"


@dataclass(frozen=True)
class Compared:
    """One figure compared between two sides: the interval, the outcome and why."""

    figure: str
    unit: str
    lower_is_better: bool
    base: Sample
    treat: Sample
    interval: Interval | None
    outcome: str  # LOWER | HIGHER (the treatment's figure relative to the baseline's) | INCONCLUSIVE
    reason: str = ""  # why inconclusive

    @property
    def diff(self) -> float | None:
        if self.base.mean is None or self.treat.mean is None:
            return None
        return self.treat.mean - self.base.mean

    def pct(self, x: float | None) -> float | None:
        b = self.base.mean
        return None if x is None or not b else 100.0 * x / abs(b)

    @property
    def directional(self) -> bool:
        return self.outcome in (LOWER, HIGHER)

    @property
    def better(self) -> str | None:
        """'treatment' or 'baseline' when directional, else None."""
        if not self.directional:
            return None
        return "treatment" if (self.outcome == LOWER) == self.lower_is_better else "baseline"

    def delta_text(self) -> str:
        """'-46.3 ms (-45.4 %), 95 % CI [-50.1, -42.5] %' (the interval in % of the baseline when it has one)."""
        d = self.diff
        if d is None:
            return "n/a"
        pct = self.pct(d)
        out = num_text(d, self.unit, signed=True) + (f" ({num_text(pct, '%', signed=True)})" if pct is not None
                                                      else "")
        iv = self.interval
        if iv is None:
            return out + ", no interval"
        lo, hi = self.pct(iv.low), self.pct(iv.high)
        if lo is not None and hi is not None:
            return out + f", {iv.confidence:.0%} CI [{num_text(lo, signed=True)}, {num_text(hi, signed=True)}] %"
        return out + f", {iv.confidence:.0%} CI [{num_text(iv.low, signed=True)}, {num_text(iv.high, signed=True)}]" \
                     f" {self.unit}".rstrip()

    def text(self) -> str:
        """'lower: -46.3 ms (...)' or 'inconclusive (the interval includes 0): +0.01 ms (...)'."""
        head = self.outcome if self.directional else f"{INCONCLUSIVE} ({self.reason})"
        return f"{head}: {self.delta_text()}"


def judge(figure: str, unit: str, base: Sample, treat: Sample, interval: Interval | None, settings: Settings, *,
          lower_is_better: bool, tail: bool = False) -> Compared:
    """The verdict on an interval of treatment - baseline under ``settings``."""
    def inconclusive(why: str) -> Compared:
        return Compared(figure, unit, lower_is_better, base, treat, interval, INCONCLUSIVE, why)

    if not base.n or not treat.n:
        return inconclusive("no valid step on the " + ("baseline" if not base.n else "treatment") + " side")
    if base.n < 2 or treat.n < 2:
        if base.n == treat.n == 1:
            return inconclusive("one repeat per side" + ("" if interval is not None else ": no interval"))
        return inconclusive(f"{base.n} repeat(s) on the baseline side, {treat.n} on the treatment side: at least 2 "
                            "per side are needed")
    if tail:
        few = [s.min_requests for s in (base, treat) if s.min_requests is not None]
        if not few or min(few) < settings.min_samples_p99:
            got = f"{min(few)} requests in the smallest step" if few else "the requests per step are not known"
            return inconclusive(f"too few samples for a tail percentile: {got}, at least {settings.min_samples_p99} "
                                "needed (comparison.min_samples_p99)")
    if interval is None:
        return inconclusive("no interval")
    thr = settings.practical_threshold_pct
    b = base.mean or 0.0
    lo, hi = (100.0 * interval.low / abs(b), 100.0 * interval.high / abs(b)) if b else (interval.low, interval.high)
    limit = thr if b else 0.0
    if lo > limit:
        return Compared(figure, unit, lower_is_better, base, treat, interval, HIGHER)
    if hi < -limit:
        return Compared(figure, unit, lower_is_better, base, treat, interval, LOWER)
    if lo <= 0.0 <= hi:
        return inconclusive("the interval includes 0")
    return inconclusive(f"the interval does not clear the practical threshold of +/-{thr:g} %")


def compare(figure: str, unit: str, base: Sample, treat: Sample, settings: Settings, *, lower_is_better: bool,
            tail: bool = False) -> Compared:
    """Welch's interval of treatment - baseline, judged by :func:`judge`."""
    return judge(figure, unit, base, treat, welch(base, treat, settings.confidence), settings,
                 lower_is_better=lower_is_better, tail=tail)


def summarize(per_point: Sequence[tuple[str, Compared]]) -> str:
    """'lower at c=16 (-45 %, CI [...]), c=32 (...); higher at c=1 (...); inconclusive at c=4, c=8 (the interval
    includes 0)' over the points of one figure."""
    parts: list[str] = []
    for outcome in (LOWER, HIGHER):
        hits = [f"{where} ({c.delta_text()})" for where, c in per_point if c.outcome == outcome]
        if hits:
            parts.append(f"{outcome} at {', '.join(hits)}")
    reasons: dict[str, list[str]] = {}
    for where, c in per_point:
        if not c.directional:
            reasons.setdefault(c.reason, []).append(where)
    for why, wheres in reasons.items():
        parts.append(f"{INCONCLUSIVE} at {', '.join(wheres)} ({why})")
    return "; ".join(parts) or "no point"


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


def slope_difference(base: Fit, treat: Fit, confidence: float) -> Interval | None:
    """The interval of treat.slope - base.slope (Welch-Satterthwaite degrees of freedom)."""
    if base.slope_se is None or treat.slope_se is None:
        return None
    vb, vt = base.slope_se ** 2, treat.slope_se ** 2
    diff = treat.slope - base.slope
    if vb + vt == 0.0:
        return Interval(diff, diff, diff, confidence, base.n + treat.n - 4)
    df = (vb + vt) ** 2 / (vb ** 2 / (base.n - 2) + vt ** 2 / (treat.n - 2))
    half = t_quantile(0.5 + confidence / 2.0, df) * math.sqrt(vb + vt)
    return Interval(diff, diff - half, diff + half, confidence, df)


# ------------------------------------------------------------------------------------------ SLO regimes


@dataclass(frozen=True)
class Regime:
    """Where a sweep leaves its SLO: the highest load whose mean attainment reaches the target, and the next
    load tried above it (the limit lies between the two)."""

    target: float
    highest_within: float | None
    next_missed: float | None
    lowest: float
    highest: float

    def text(self, label: str = "c=") -> str:
        if self.highest_within is None:
            return f"none: even {label}{self.lowest:g} misses it (the limit is below {label}{self.lowest:g})"
        if self.next_missed is None:
            return (f"{label}{self.highest_within:g}, the highest load tried: the sweep never left the SLO (the limit "
                    f"is above {label}{self.highest:g})")
        return (f"{label}{self.highest_within:g} ({label}{self.next_missed:g} misses it: the limit lies between "
                f"{label}{self.highest_within:g} and {label}{self.next_missed:g})")


def slo_regime(points: dict[float, Sample], target: float) -> Regime | None:
    """The regime of one side's sweep from its attainment (goodput ratio) per load; None without one."""
    loads = sorted(load for load, s in points.items() if s.mean is not None)
    if not loads:
        return None
    within = [load for load in loads if (points[load].mean or 0.0) >= target]
    best = max(within) if within else None
    above = [load for load in loads if best is not None and load > best]
    return Regime(target, best, min(above) if above else None, loads[0], loads[-1])


def crossovers(per_load: Sequence[tuple[float, Compared]]) -> list[tuple[float, float, str, str]]:
    """``(from load, to load, winner below, winner above)`` wherever the directional winner changes between two
    loads (inconclusive loads in between widen the range)."""
    decided = [(load, c.better) for load, c in sorted(per_load, key=lambda p: p[0]) if c.better is not None]
    return [(a, b, wa, wb) for (a, wa), (b, wb) in itertools.pairwise(decided) if wa != wb]
