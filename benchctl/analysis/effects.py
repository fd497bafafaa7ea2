"""Effects: one figure compared between two experiments at one point (a load, a workload variant), as the
report's answers judge it. A figure is declared before the data, with its scale and whether it is a primary
endpoint of its answer (tested) or descriptive (shown with an unadjusted interval, never a verdict):

* ``log``: a positive continuous figure (latency, throughput, $): the effect is the log ratio of the two sides'
  geometric means over repeats, shown in % of the baseline; relative noise is then one spread at every load;
* ``count``: a rate whose numerator is a count (goodput: SLO-meeting requests per second): ``log((count + 1) /
  exposure)``, where exposure turns the rate into its count (the step's duration, x its price for goodput per
  $/h); a tie of small counts keeps the variance of a value known to one count (1/12 count^2);
* ``share``: a share in [0, 1] (a hit rate): the difference in percentage points, thresholds absolute;
* ``abs``: a figure whose baseline can be 0 (a queue depth): the difference in its unit, its own threshold.

:func:`effects` computes every point of one figure of one comparison together: paired by repeat when both sides
ran the same repeats with the same seed and dataset (the same requests), else Welch; each cell's variance
moderated across the figure's points (:mod:`benchctl.analysis.inference`), except a count's, whose variance moves with its
level (each point keeps its own). :func:`adjust` then applies Holm's step-down
over an answer's family of primary effects and gives each its outcome and its interval at the level its step
used. Pure: the standard library and the core.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from benchctl.analysis import inference
from benchctl.analysis.inference import Prior
from benchctl.analysis.verdicts import HIGHER, INCONCLUSIVE, LOWER, MIN_REPEATS, Sample, Settings, num_text

LOG, COUNT, SHARE, ABS = "log", "count", "share", "abs"
DESCRIPTIVE = "descriptive"


@dataclass(frozen=True)
class Figure:
    column: str
    label: str
    unit: str
    lower_is_better: bool
    scale: str = LOG
    tail: bool = False  # a tail percentile: needs min_samples_p99 requests in every step
    threshold: float | None = None  # ABS: the practical threshold in the figure's unit

    def edges(self, settings: Settings) -> tuple[float, float]:
        """The practical threshold's two edges on the analysis scale."""
        thr = settings.practical_threshold_pct
        if self.scale in (LOG, COUNT):
            return math.log(max(1e-9, 1.0 - thr / 100.0)), math.log(1.0 + thr / 100.0)
        if self.scale == SHARE:
            return -thr / 100.0, thr / 100.0
        a = float(self.threshold if self.threshold is not None else thr)
        return -a, a

    def threshold_text(self, settings: Settings) -> str:
        thr = settings.practical_threshold_pct
        if self.scale in (LOG, COUNT):
            return f"+/-{thr:g} % of the baseline"
        if self.scale == SHARE:
            return f"+/-{thr:g} percentage points"
        return f"+/-{num_text(self.edges(settings)[1])} {self.unit}".rstrip()


@dataclass(frozen=True)
class Obs:
    """One repeat's value on one side: ``key`` pairs it with the other side's (repeat, seed, dataset);
    ``exposure`` turns a COUNT figure's rate into its count; ``requests``: behind its percentiles."""

    value: float
    key: tuple[Any, ...] = ()
    exposure: float | None = None
    requests: int | None = None


@dataclass(frozen=True)
class Point:
    where: str
    load: float | None
    base: tuple[Obs, ...]
    treat: tuple[Obs, ...]
    group: Any = None  # what the point belongs to besides its load (a sweep's input length)


def _g(fig: Figure, o: Obs) -> float | None:
    """The value on the analysis scale (None where it has none: a non-positive value on the log scale)."""
    v = o.value
    if fig.scale == LOG:
        return math.log(v) if v > 0 else None
    if fig.scale == COUNT:
        k = o.exposure if o.exposure and o.exposure > 0 else 1.0
        return math.log((max(v, 0.0) * k + 1.0) / k)
    return v


def _floor(fig: Figure, obs: Sequence[Obs]) -> float:
    """The variance of a value known to within one count, on the log scale (COUNT figures; else 0)."""
    if fig.scale != COUNT or not obs:
        return 0.0
    counts = [max(o.value, 0.0) * (o.exposure if o.exposure and o.exposure > 0 else 1.0) for o in obs]
    return 1.0 / (12.0 * (sum(counts) / len(counts) + 1.0) ** 2)


def _var(xs: Sequence[float]) -> float:
    m = math.fsum(xs) / len(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


class Judged(Protocol):
    """What Holm's step-down decides: anything with a p-value that takes its decision."""

    p: float | None

    def decide(self, rejected: bool, alpha: float) -> None: ...


@dataclass
class Compared:
    """One figure at one point: the raw values per side (for reading), the effect on the analysis scale with its
    standard error and degrees of freedom, and, once :func:`adjust` or :func:`describe` ran, the interval, its
    confidence and the outcome (LOWER / HIGHER: the treatment's figure relative to the baseline's; INCONCLUSIVE;
    DESCRIPTIVE for a figure shown without a verdict)."""

    figure: Figure
    where: str
    base: Sample
    treat: Sample
    load: float | None = None
    group: Any = None
    paired: bool = False
    estimate: float | None = None
    se: float | None = None
    df: float | None = None
    p: float | None = None
    edges: tuple[float, float] = (0.0, 0.0)
    primary: bool = True
    outcome: str = INCONCLUSIVE
    reason: str = ""
    confidence: float | None = None
    low: float | None = None
    high: float | None = None
    threshold_text: str = ""

    @property
    def unit(self) -> str:
        return self.figure.unit

    @property
    def lower_is_better(self) -> bool:
        return self.figure.lower_is_better

    @property
    def diff(self) -> float | None:
        if self.base.mean is None or self.treat.mean is None:
            return None
        return self.treat.mean - self.base.mean

    @property
    def directional(self) -> bool:
        return self.outcome in (LOWER, HIGHER)

    @property
    def better(self) -> str | None:
        """'treatment' or 'baseline' when directional, else None."""
        if not self.directional:
            return None
        return "treatment" if (self.outcome == LOWER) == self.lower_is_better else "baseline"

    def decide(self, rejected: bool, alpha: float) -> None:
        if self.estimate is None or self.se is None or self.df is None:
            return
        self.confidence = 1.0 - alpha
        self.low, self.high = inference.interval(self.estimate, self.se, self.df, self.confidence)
        if rejected:
            self.outcome = HIGHER if self.low > self.edges[1] else LOWER
            self.reason = ""
        else:
            self.outcome = INCONCLUSIVE
            self.reason = ("the interval includes 0" if self.low <= 0.0 <= self.high else
                           f"the interval does not clear the practical threshold of {self.threshold_text}")

    # ---------------------------------------------------------------------------------- reading

    def _shown(self, x: float) -> float:
        """An analysis-scale value as read: % of the baseline (log/count), percentage points (share), unit."""
        if self.figure.scale in (LOG, COUNT):
            return 100.0 * math.expm1(x)
        return 100.0 * x if self.figure.scale == SHARE else x

    @property
    def shown_unit(self) -> str:
        return {LOG: "%", COUNT: "%", SHARE: "pp"}.get(self.figure.scale, self.unit)

    @property
    def change(self) -> float | None:
        """The effect as read (``shown_unit``)."""
        return None if self.estimate is None else self._shown(self.estimate)

    @property
    def change_interval(self) -> tuple[float, float] | None:
        if self.low is None or self.high is None:
            return None
        return self._shown(self.low), self._shown(self.high)

    def delta_text(self) -> str:
        """'-46.3 ms (-45.4 %), 99.84 % CI [-50.1, -42.5] %': the difference of the means in the unit, the effect
        and its interval at the level it was judged (descriptive: unadjusted)."""
        d = self.diff
        if d is None:
            return "n/a"
        out = num_text(d, self.unit, signed=True)
        ch = self.change
        if ch is not None and self.figure.scale != ABS:
            out += f" ({num_text(ch, self.shown_unit, signed=True)})"
        iv = self.change_interval
        if iv is None or self.confidence is None:
            return out + ", no interval"
        unit = self.shown_unit
        tail = f" {unit}" if unit else ""
        level = confidence_text(self.confidence) + (" unadjusted" if self.outcome == DESCRIPTIVE else "")
        return out + f", {level} CI [{num_text(iv[0], signed=True)}, {num_text(iv[1], signed=True)}]{tail}"

    def text(self) -> str:
        """'lower: ...', 'inconclusive (why): ...' or 'descriptive: ...'."""
        if self.outcome == DESCRIPTIVE:  # with why it could not have been judged anyway, where it could not
            return f"{DESCRIPTIVE}: {self.delta_text()}" + (f" ({self.reason})" if self.reason else "")
        head = self.outcome if self.directional else f"{INCONCLUSIVE} ({self.reason})"
        return f"{head}: {self.delta_text()}"


def confidence_text(c: float) -> str:
    """95 %, 99.84 %, 99.997 %: two decimals, more while they would round up to 100 %."""
    pct = 100.0 * c
    if abs(pct - round(pct)) < 1e-9:
        return f"{round(pct)} %"
    for d in range(2, 9):
        text = f"{pct:.{d}f}"
        if float(text) < 100.0:
            return f"{text.rstrip('0').rstrip('.')} %"
    return f"{pct:.9g} %"


def _sample(obs: Sequence[Obs]) -> Sample:
    reqs = [o.requests for o in obs if o.requests is not None]
    return Sample(tuple(o.value for o in obs), min(reqs) if reqs else None)


def _pairable(points: Sequence[Point]) -> bool:
    """Every point's two sides ran the same repeats with the same seed and dataset (keys unique per side)."""
    seen = False
    for p in points:
        kb, kt = [o.key for o in p.base], [o.key for o in p.treat]
        if not kb and not kt:
            continue
        if not kb or not kt or any(not k for k in kb + kt) or len(set(kb)) != len(kb) or set(kb) != set(kt) \
                or len(set(kt)) != len(kt):
            return False
        seen = True
    return seen


@dataclass
class Block:
    """What :func:`effects` found for one figure of one comparison: its effects, the prior and the design."""

    figure: Figure
    effects: list[Compared] = field(default_factory=list)
    prior: Prior = inference.NO_PRIOR
    paired: bool = False


def effects(figure: Figure, points: Sequence[Point], settings: Settings, *, primary: bool = True) -> Block:
    """Every point of one figure of one comparison: the effect, its standard error (cell variances moderated
    across the points' cells) and its threshold p-value; a point that cannot be judged says why."""
    paired = _pairable(points)
    cells: list[tuple[float, float]] = []
    prepared: list[tuple[Point, dict[str, list[float]], dict[str, list[Obs]]]] = []
    for pt in points:
        obs = {"base": [o for o in pt.base if _g(figure, o) is not None],
               "treat": [o for o in pt.treat if _g(figure, o) is not None]}
        xs = {side: [_g(figure, o) or 0.0 for o in got] for side, got in obs.items()}
        prepared.append((pt, xs, obs))
        if paired:
            d = _diffs(figure, obs)
            if len(d) >= 2:
                cells.append((max(_var(d), _floor(figure, obs["base"]) + _floor(figure, obs["treat"])), len(d) - 1))
        else:
            for side in ("base", "treat"):
                if len(xs[side]) >= 2:
                    cells.append((max(_var(xs[side]), _floor(figure, obs[side])), len(xs[side]) - 1))
    # a count's variance moves with its level (binomial, Poisson): borrowing across points would understate it
    # where the count is mid-range (past an SLO's knee); each point keeps its own, with the count floor
    prior = inference.variance_prior(cells) if figure.scale != COUNT else inference.NO_PRIOR
    block = Block(figure, [], prior, paired)
    for pt, xs, obs in prepared:
        c = Compared(figure, pt.where, _sample(obs["base"]), _sample(obs["treat"]), load=pt.load, group=pt.group,
                     paired=paired,
                     edges=figure.edges(settings), primary=primary, threshold_text=figure.threshold_text(settings))
        block.effects.append(c)
        if xs["base"] and xs["treat"]:  # the effect as read, even where it cannot be judged
            c.estimate = math.fsum(xs["treat"]) / len(xs["treat"]) - math.fsum(xs["base"]) / len(xs["base"])
        why = _unjudged(figure, c.base, c.treat, settings)
        if why:
            c.reason = why
            continue
        if paired:
            d = _diffs(figure, obs)
            v, df = inference.moderate(max(_var(d), _floor(figure, obs["base"]) + _floor(figure, obs["treat"])),
                                       len(d) - 1, prior)
            est, se = math.fsum(d) / len(d), math.sqrt(v / len(d))
        else:
            nb, nt = len(xs["base"]), len(xs["treat"])
            vb, dfb = inference.moderate(max(_var(xs["base"]), _floor(figure, obs["base"])), nb - 1, prior)
            vt, dft = inference.moderate(max(_var(xs["treat"]), _floor(figure, obs["treat"])), nt - 1, prior)
            est = math.fsum(xs["treat"]) / nt - math.fsum(xs["base"]) / nb
            se = math.sqrt(vb / nb + vt / nt)
            df = _welch_df(vb / nb, dfb, vt / nt, dft)
        c.estimate, c.se, c.df = est, se, df
        if not se > 0:
            c.reason = "no spread: every repeat ties on both sides, so a difference has no measure of its noise"
            c.se = None
            continue
        c.p = inference.threshold_p(est, se, df, *c.edges)
    return block


def from_estimate(figure: Figure, where: str, base: Sample, treat: Sample, estimate: float, se: float | None,
                  df: float, settings: Settings, *, primary: bool = True) -> Compared:
    """An effect estimated elsewhere (a slope difference): judged by the same threshold test."""
    c = Compared(figure, where, base, treat, edges=figure.edges(settings), primary=primary,
                 threshold_text=figure.threshold_text(settings), estimate=estimate, se=se, df=df)
    if se is None or not se > 0:
        c.reason, c.se = "no interval", None
    else:
        c.p = inference.threshold_p(estimate, se, df, *c.edges)
    return c


def _diffs(figure: Figure, obs: dict[str, list[Obs]]) -> list[float]:
    base = {o.key: _g(figure, o) for o in obs["base"]}
    return [(_g(figure, o) or 0.0) - (base[o.key] or 0.0) for o in obs["treat"] if o.key in base]


def _welch_df(vb: float, dfb: float, vt: float, dft: float) -> float:
    den = (vb * vb / dfb if dfb and math.isfinite(dfb) else 0.0) + (vt * vt / dft if dft and math.isfinite(dft) else 0.0)
    return (vb + vt) ** 2 / den if den > 0 else inference.NORMAL_DF


def _unjudged(figure: Figure, base: Sample, treat: Sample, settings: Settings) -> str:
    """Why a point cannot be judged ("" when it can)."""
    if not base.n or not treat.n:
        return "no valid step on the " + ("baseline" if not base.n else "treatment") + " side"
    if base.n < MIN_REPEATS or treat.n < MIN_REPEATS:
        if base.n == treat.n == 1:
            return "one repeat per side: no interval"
        return (f"{base.n} repeat(s) on the baseline side, {treat.n} on the treatment side: at least {MIN_REPEATS} per "
                "side are needed")
    if figure.tail:
        few = [s.min_requests for s in (base, treat) if s.min_requests is not None]
        if not few or min(few) < settings.min_samples_p99:
            got = f"{min(few)} requests in the smallest step" if few else "the requests per step are not known"
            return (f"too few samples for a tail percentile: {got}, at least {settings.min_samples_p99} needed "
                    "(comparison.min_samples_p99)")
    return ""


@dataclass(frozen=True)
class Family:
    """What :func:`adjust` did: the number of tests and the family-wise alpha."""

    size: int
    alpha: float

    def text(self) -> str:
        if not self.size:
            return (f"a family of 0 tests: no test could be made (see the reasons); its tests would be judged together "
                    f"by Holm's step-down at family-wise alpha {self.alpha:g}")
        lo = 1.0 - self.alpha / self.size
        return (f"a family of {self.size} test(s) judged by Holm's step-down at family-wise alpha {self.alpha:g}: the "
                f"probability that any direction this answer states is false is at most {self.alpha:g}; each interval "
                f"is at the level its step used ({confidence_text(lo)} for the first"
                + (f", {confidence_text(1.0 - self.alpha)} at most)" if self.size > 1 else ")"))


def adjust(family: Sequence[Judged], settings: Settings) -> Family:
    """Holm's step-down over the family's tests (those with a p-value) at alpha = 1 - ``settings.confidence``."""
    alpha = 1.0 - settings.confidence
    tested = [c for c in family if c.p is not None]
    for c, step in zip(tested, inference.holm([float(c.p or 1.0) for c in tested], alpha), strict=True):
        c.decide(step.rejected, step.alpha)
    return Family(len(tested), alpha)


def describe(shown: Sequence[Compared], settings: Settings) -> None:
    """Descriptive figures: each interval at the nominal confidence, unadjusted, and no verdict."""
    for c in shown:
        c.primary = False
        if c.estimate is not None and c.se is not None and c.df is not None:
            c.confidence = settings.confidence
            c.low, c.high = inference.interval(c.estimate, c.se, c.df, settings.confidence)
        c.outcome = DESCRIPTIVE


def summarize(per_point: Sequence[tuple[str, Compared]]) -> str:
    """'lower at c=16 (-45 %, CI [...]), c=32 (...); higher at c=1 (...); inconclusive at c=4, c=8 (the interval
    includes 0)' over the points of one figure."""
    parts: list[str] = []
    for outcome in (LOWER, HIGHER):
        hits = [f"{where} ({c.delta_text()})" for where, c in per_point if c.outcome == outcome]
        if hits:
            parts.append(f"{outcome} at {', '.join(hits)}")
    shown = [f"{where} ({c.delta_text()}" + (f"; {c.reason})" if c.reason else ")") for where, c in per_point
             if c.outcome == DESCRIPTIVE]
    if shown:
        parts.append(f"shown, not judged, at {', '.join(shown)}")
    reasons: dict[str, list[str]] = {}
    for where, c in per_point:
        if not c.directional and c.outcome != DESCRIPTIVE:
            reasons.setdefault(c.reason, []).append(where)
    for why, wheres in reasons.items():
        parts.append(f"{INCONCLUSIVE} at {', '.join(wheres)} ({why})")
    return "; ".join(parts) or "no point"


def crossovers(per_load: Sequence[tuple[float, Compared]]) -> list[tuple[float, float, str, str]]:
    """``(from load, to load, winner below, winner above)`` wherever the directional winner changes between two
    loads (inconclusive loads in between widen the range)."""
    decided = [(load, c.better) for load, c in sorted(per_load, key=lambda p: p[0]) if c.better is not None]
    return [(a, b, wa, wb) for (a, wa), (b, wb) in itertools.pairwise(decided) if wa != wb]
