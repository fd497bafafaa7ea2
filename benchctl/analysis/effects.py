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
level (each point keeps its own). The deployment is a level of its own (:mod:`benchctl.analysis.components`): with
one deployment per side the spec's between-deployment floor (``comparison.deployment_spread_pct``) is added to each
side's variance, assumed; with two or more the effect is judged on the deployments' means, the between-deployment
variance measured (never below the floor) with the deployments' degrees of freedom. :func:`adjust` then applies Holm's step-down
over an answer's family of primary effects and gives each its outcome and its interval at the level its step
used. Pure: the standard library and the core.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchctl.analysis import inference
from benchctl.analysis.compared import (  # the figure and its comparison at a point (re-exported: callers import them here)
    ABS,
    COUNT,
    DESCRIPTIVE,
    LOG,
    SHARE,
    Compared,
    Figure,
    Judged,
    confidence_text,
)
from benchctl.analysis.components import (
    Components,
    block_components,
    satterthwaite,
    spread_pct,
    within_components,
)
from benchctl.analysis.inference import Prior
from benchctl.analysis.verdicts import HIGHER, INCONCLUSIVE, LOWER, MIN_REPEATS, Sample, Settings, num_text

__all__ = ["ABS", "COUNT", "DESCRIPTIVE", "LOG", "SHARE", "Block", "Compared", "Family", "Figure", "Judged", "Obs",
           "Point", "adjust", "confidence_text", "crossovers", "describe", "effects", "from_estimate", "summarize"]


@dataclass(frozen=True)
class Obs:
    """One repeat's value on one side: ``key`` pairs it with the other side's (repeat, seed, dataset);
    ``exposure`` turns a COUNT figure's rate into its count; ``requests``: behind its percentiles."""

    value: float
    key: tuple[Any, ...] = ()
    exposure: float | None = None
    requests: int | None = None
    unit: str | None = None  # the deployment it ran on (benchctl.spec.design; None: not recorded)


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
    """What :func:`effects` found for one figure of one comparison: its effects, the prior of the repeats' variances,
    the design and the variance components of each stream (``base``/``treat``, or ``paired``:
    :mod:`benchctl.analysis.components`)."""

    figure: Figure
    effects: list[Compared] = field(default_factory=list)
    prior: Prior = inference.NO_PRIOR
    paired: bool = False
    components: dict[str, Components] = field(default_factory=dict)

    @property
    def deployments(self) -> int:
        """Deployments behind each side (the fewer of the two; 1 when the lake does not say)."""
        return min((c.blocks for c in self.components.values()), default=1)

    def components_text(self) -> str:
        """'between deployments 3.1 % (measured over 2 deployments, 1 df), within a deployment 1.2 %: the
        deployments dominate' (or the floor assumed): what each level contributes, as relative spreads."""
        if not self.components or self.figure.scale not in (LOG, COUNT):
            return ""
        parts = []
        for name, c in self.components.items():
            res = sorted(v for v, _ in c.residual.values())
            typical = res[len(res) // 2] if res else None
            between = (f"between deployments {num_text(spread_pct(c.between), '%')} "
                       + ("(assumed: comparison.deployment_spread_pct, one deployment)" if c.measured is None else
                          f"(the floor comparison.deployment_spread_pct; measured {num_text(spread_pct(c.measured), '%')}"
                          f" over {c.blocks} deployments)" if c.floor_binds else
                          f"(measured over {c.blocks} deployments, {c.between_df:g} df)"))
            within = ("" if typical is None else f", a deployment's mean beyond it {num_text(spread_pct(typical), '%')}")
            parts.append(f"{name}: {between}{within}; {c.dominant} dominate")
        return "; ".join(parts)


def _floor2(figure: Figure, settings: Settings) -> float:
    """The least between-deployment variance a verdict allows for, on the figure's scale: the spec's
    ``comparison.deployment_spread_pct`` as a log-scale variance for performance figures (latency, throughput, $,
    goodput: a deployment's speed moves them); none for shares and absolute figures (a cache hit rate or a queue
    depth is no speed)."""
    if figure.scale not in (LOG, COUNT):
        return 0.0
    return math.log1p(settings.deployment_spread_pct / 100.0) ** 2


def _units(points: Sequence[Point], side: str) -> set[str]:
    return {o.unit for pt in points for o in getattr(pt, side) if o.unit}


def effects(figure: Figure, points: Sequence[Point], settings: Settings, *, primary: bool = True) -> Block:
    """Every point of one figure of one comparison: the effect, its standard error and its threshold p-value; a
    point that cannot be judged says why. With one deployment per side the repeats' variances are moderated across
    the points' cells and the between-deployment floor is added (assumed); with two or more the effect is judged
    on the deployments' means, its variance from the measured components (:mod:`benchctl.analysis.components`)."""
    floor2 = _floor2(figure, settings)
    if len(_units(points, "base")) >= 2 and len(_units(points, "treat")) >= 2:
        return _deployment_effects(figure, points, settings, floor2, primary=primary)
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
    streams = ("paired",) if paired else ("base", "treat")
    for stream in streams:  # what the report says of each level: the floor assumed, the repeats' spread
        got = [{"d": _diffs(figure, obs)} if paired else {"d": xs[stream]} for _, xs, obs in prepared]
        block.components[stream] = within_components(got, floor2 * (2 if paired else 1), prior)
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
            est, var = math.fsum(d) / len(d), v / len(d)
        else:
            nb, nt = len(xs["base"]), len(xs["treat"])
            vb, dfb = inference.moderate(max(_var(xs["base"]), _floor(figure, obs["base"])), nb - 1, prior)
            vt, dft = inference.moderate(max(_var(xs["treat"]), _floor(figure, obs["treat"])), nt - 1, prior)
            est = math.fsum(xs["treat"]) / nt - math.fsum(xs["base"]) / nb
            var = vb / nb + vt / nt
            df = _welch_df(vb / nb, dfb, vt / nt, dft)
        # one deployment per side: the repeats share it, so its offset is in neither side's spread: the floor,
        # once per side, assumed known
        between = 2.0 * floor2
        se = math.sqrt(var + between)
        df = satterthwaite([(var, df), (between, math.inf)]) if var > 0 else df
        c.estimate, c.se, c.df = est, se, df
        if not se > 0:
            c.reason = "no spread: every repeat ties on both sides, so a difference has no measure of its noise"
            c.se = None
            continue
        c.p = inference.threshold_p(est, se, df, *c.edges)
    return block


def _deployment_effects(figure: Figure, points: Sequence[Point], settings: Settings, floor2: float, *,
                        primary: bool) -> Block:
    """Two or more deployments per side: each side's (or, paired, the differences') deployment means, the effect
    their mean's difference, its variance from the between-deployment component (shared by every point of the
    figure: its degrees of freedom are the deployments') and the residual at the point (moderated across the
    points; a count's kept per point)."""
    paired = _pairable(points)
    vals = [{side: [o for o in getattr(pt, side) if _g(figure, o) is not None] for side in ("base", "treat")}
            for pt in points]
    cells: dict[str, list[dict[str, list[float]]]] = {}
    if paired:
        stream: list[dict[str, list[float]]] = []
        for obs in vals:
            base = {o.key: o for o in obs["base"]}
            blocks: dict[str, list[float]] = {}
            for o in obs["treat"]:
                b = base.get(o.key)
                if b is not None:
                    blocks.setdefault(f"{b.unit}|{o.unit}", []).append((_g(figure, o) or 0.0) - (_g(figure, b) or 0.0))
            stream.append(blocks)
        cells["paired"] = stream
    else:
        for side in ("base", "treat"):
            cells[side] = [_by_unit(figure, obs[side]) for obs in vals]
    block = Block(figure, [], inference.NO_PRIOR, paired)
    for name, got in cells.items():
        block.components[name] = block_components(got, floor2 * (2 if paired else 1), moderate=figure.scale != COUNT)
    for i, (pt, obs) in enumerate(zip(points, vals, strict=True)):
        c = Compared(figure, pt.where, _sample(obs["base"]), _sample(obs["treat"]), load=pt.load, group=pt.group,
                     paired=paired, edges=figure.edges(settings), primary=primary,
                     threshold_text=figure.threshold_text(settings))
        block.effects.append(c)
        means = {name: [math.fsum(v) / len(v) for v in got[i].values() if v] for name, got in cells.items()}
        if all(means.values()):
            c.estimate = (_mean(means["paired"]) if paired else _mean(means["treat"]) - _mean(means["base"]))
        why = _unjudged(figure, c.base, c.treat, settings)
        if why:
            c.reason = why
            continue
        terms: list[tuple[float, float]] = []
        for name in cells:
            k = len(means[name])
            got_v = block.components[name].block_variance(i)
            if k < 2 or got_v is None:
                c.reason = (f"fewer than 2 deployments measured this point on the {name} side: the between-deployment "
                            "variance has no estimate here")
                break
            between, between_df, residual, residual_df = got_v
            terms += [(between / k, between_df), (residual / k, residual_df)]
        if c.reason:
            continue
        var = math.fsum(v for v, _ in terms)
        c.se, c.df = math.sqrt(var), satterthwaite(terms)
        if not c.se > 0:
            c.reason = "no spread: every deployment ties on both sides, so a difference has no measure of its noise"
            c.se = None
            continue
        c.p = inference.threshold_p(c.estimate or 0.0, c.se, c.df, *c.edges)
    return block


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def _by_unit(figure: Figure, obs: Sequence[Obs]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for o in obs:
        out.setdefault(o.unit or "", []).append(_g(figure, o) or 0.0)
    return out


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
