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
* :func:`slo_regime`: the SLO regime of one side of a sweep from every attempted step (failures are misses),
  judged by one-sided Wilson bounds on the requests pooled over repeats; :class:`RegimeComparison`: the two
  sides' limits compared by their brackets.

Pure: the standard library and :mod:`benchctl.analysis.inference`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchctl.analysis.formatting import round_for_reading
from benchctl.analysis.inference import t_quantile, wilson, wilson_p_above, wilson_p_below
from benchctl.spec.comparisons import (  # the spec's `comparison:` defaults
    DEFAULT_CONFIDENCE,
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
                   get("transfer_share_pct", d.transfer_share_pct), get("queue_threshold", d.queue_threshold))

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


# ------------------------------------------------------------------------------------------ SLO regimes

WITHIN, MISSED, UNDETERMINED = "within", "missed", "undetermined"


@dataclass(frozen=True)
class Attainment:
    """One load of one side: the requests attempted over its repeats' steps (every attempted step: errors,
    cancellations and timeouts are misses), those that met the SLO, and steps that ended with no request
    completed (AIPerf exits 1 when every request fails: a certain miss)."""

    load: float
    good: float
    total: float
    errors: float = 0.0
    failed_steps: int = 0
    repeats: int = MIN_REPEATS  # repeats behind it: the limits are compared only with MIN_REPEATS per side

    @property
    def share(self) -> float | None:
        return self.good / self.total if self.total > 0 else (0.0 if self.failed_steps else None)

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.total if self.total > 0 else (1.0 if self.failed_steps else None)

    def judged(self, target: float, confidence: float) -> tuple[str, float, float]:
        """(state, low, high) with one-sided Wilson bounds at ``confidence``: within when the lower bound reaches
        ``target``, missed when the upper bound is below it (or a step failed outright), else undetermined."""
        if self.failed_steps or self.total <= 0:
            return (MISSED, 0.0, 0.0) if self.failed_steps else (UNDETERMINED, 0.0, 1.0)
        low, high = wilson(self.good, self.total, confidence)
        return (WITHIN if low >= target else MISSED if high < target else UNDETERMINED), low, high

    def p_within(self, target: float) -> float:
        return 1.0 if self.failed_steps or self.total <= 0 else wilson_p_above(self.good, self.total, target)

    def p_missed(self, target: float) -> float:
        if self.failed_steps:
            return 0.0
        return 1.0 if self.total <= 0 else wilson_p_below(self.good, self.total, target)

    def text(self) -> str:
        er = self.error_rate
        parts = [f"attainment {_pct(self.share)}"]
        if er:
            parts.append(f"error rate {_pct(er)}")
        if self.failed_steps:
            parts.append(f"{self.failed_steps} step(s) failed with no request completed")
        return ", ".join(parts)


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    v = 100.0 * x
    return f"{v:.0f} %" if abs(v - round(v)) < 0.05 or v >= 10 else f"{v:.1f} %"


@dataclass(frozen=True)
class Regime:
    """Where one side of a sweep leaves its SLO. ``within``: the highest load up to which every load is shown
    within the SLO (Wilson lower bound >= target); ``missed``: the first load shown to miss it (upper bound below
    the target, or a step with no request completed). The limit lies in [within, missed)."""

    target: float
    confidence: float  # of each one-sided bound
    loads: tuple[Attainment, ...]
    states: tuple[tuple[str, float, float], ...]
    within: float | None
    missed: float | None

    def text(self, label: str = "c=") -> str:
        lo, hi = self.loads[0].load, self.loads[-1].load
        by = {a.load: (a, s) for a, s in zip(self.loads, self.states, strict=True)}
        out = []
        if self.within is not None:
            out.append(f"within the SLO up to {label}{self.within:g}")
        if self.missed is not None:
            a, _ = by[self.missed]
            out.append(f"missed the SLO at {label}{self.missed:g} ({a.text()})")
        between = [(a, s) for a, s in zip(self.loads, self.states, strict=True) if s[0] == UNDETERMINED
                   and a.load > (self.within if self.within is not None else -math.inf)
                   and (self.missed is None or a.load < self.missed)]
        if between:
            out.append("undetermined at " + ", ".join(
                f"{label}{a.load:g} ({a.text()}; bounds {_pct(s[1])}-{_pct(s[2])})" for a, s in between))
        if self.within is not None and self.missed is not None:
            where = f"the limit lies in [{label}{self.within:g}, {label}{self.missed:g})"
        elif self.missed is not None:
            where = (f"the limit is below {label}{lo:g}, the lowest load" if self.missed == lo else
                     f"the limit is below {label}{self.missed:g}")
        elif self.within is not None and self.within == hi:
            where = f"within at every load tried: the limit is above {label}{hi:g}"
        elif self.within is not None:
            where = f"the limit is above {label}{self.within:g}, not located (no load shown to miss it)"
        else:
            where = "not located: no load was shown within the SLO or missing it"
        again = [a.load for a, s in zip(self.loads, self.states, strict=True)
                 if self.missed is not None and a.load > self.missed and s[0] == WITHIN]
        if again:
            where += (f" (non-monotone: {', '.join(f'{label}{x:g}' for x in again)} within again above the first "
                      "miss; the limit is the load before the first miss)")
        return "; ".join([*out, where])

    def bracket(self, label: str = "c=") -> str:
        lo = f"{label}{self.within:g}" if self.within is not None else "below the lowest load"
        hi = f"{label}{self.missed:g}" if self.missed is not None else "above the highest load"
        return f"[{lo}, {hi})"


def slo_regime(loads: Sequence[Attainment], target: float, confidence: float) -> Regime | None:
    """The regime of one side's sweep; None without a load that has requests or a failed step."""
    pts = sorted((a for a in loads if a.total > 0 or a.failed_steps), key=lambda a: a.load)
    if not pts:
        return None
    states = tuple(a.judged(target, confidence) for a in pts)
    within = None
    for a, s in zip(pts, states, strict=True):
        if s[0] != WITHIN:
            break
        within = a.load
    missed = next((a.load for a, s in zip(pts, states, strict=True) if s[0] == MISSED), None)
    return Regime(target, confidence, tuple(pts), states, within, missed)


@dataclass
class RegimeComparison:
    """The two sides' SLO limits compared by their brackets: the treatment's limit is higher when the baseline is
    shown to miss the SLO at a load where the treatment is shown within it (and at every load below), lower in
    the opposite case; inconclusive when the brackets overlap. ``p``: the smallest family level g at which the
    brackets (each side's bounds one-sided at g / 2) separate, so that Holm's step-down can judge it beside the
    answer's other tests."""

    where: str
    base: tuple[Attainment, ...]
    treat: tuple[Attainment, ...]
    target: float
    p: float | None = None
    outcome: str = INCONCLUSIVE
    confidence: float | None = None
    regimes: tuple[Regime | None, Regime | None] = (None, None)
    reason: str = field(default="")

    def __post_init__(self) -> None:
        if slo_regime(self.base, self.target, 0.5) is None or slo_regime(self.treat, self.target, 0.5) is None:
            self.reason = "no SLO attainment on one side"
            return
        if min(a.repeats for a in (*self.base, *self.treat) if a.total > 0 or a.failed_steps) < MIN_REPEATS:
            self.reason = f"fewer than {MIN_REPEATS} repeats per side: the brackets are shown, not compared"
            return
        self.p = self._p()

    def _separation(self, level: float) -> str:
        rb = slo_regime(self.base, self.target, 1.0 - level / 2.0)
        rt = slo_regime(self.treat, self.target, 1.0 - level / 2.0)
        if rb is None or rt is None:
            return INCONCLUSIVE
        if rb.missed is not None and rt.within is not None and rt.within >= rb.missed:
            return HIGHER
        if rt.missed is not None and rb.within is not None and rb.within >= rt.missed:
            return LOWER
        return INCONCLUSIVE

    def _p(self) -> float:
        if self._separation(1.0 - 1e-12) == INCONCLUSIVE:
            return 1.0
        lo, hi = -35.0, math.log(1.0 - 1e-12)  # bisect log(level): separated at hi, maybe not at lo
        if self._separation(math.exp(lo)) != INCONCLUSIVE:
            return math.exp(lo)
        for _ in range(80):
            mid = (lo + hi) / 2
            if self._separation(math.exp(mid)) != INCONCLUSIVE:
                hi = mid
            else:
                lo = mid
        return math.exp(hi)

    def decide(self, rejected: bool, alpha: float) -> None:
        self.confidence = 1.0 - alpha
        one_sided = 1.0 - alpha / 2.0
        self.regimes = (slo_regime(self.base, self.target, one_sided), slo_regime(self.treat, self.target, one_sided))
        self.outcome = self._separation(alpha) if rejected else INCONCLUSIVE
        if self.outcome == INCONCLUSIVE:
            self.reason = "the brackets overlap"

    @property
    def directional(self) -> bool:
        return self.outcome in (LOWER, HIGHER)

    def regime(self, side: int, default_confidence: float) -> Regime | None:
        """A side's regime at the level the comparison was judged (else one-sided at ``default_confidence``)."""
        if self.regimes[side] is not None:
            return self.regimes[side]
        return slo_regime(self.base if side == 0 else self.treat, self.target, default_confidence)
