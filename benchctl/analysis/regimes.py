"""SLO regimes: where one side of a sweep leaves its SLO, and the two sides' limits compared.

Attainment (the share of a load's attempted requests that met every SLO bound; a failure is a miss) varies from
run to run more than its requests' count says: a run's requests share the run's conditions (its batch mix, its
node's clocks, the deployment it ran on), so pooling every run's requests as independent coin flips (one Wilson
bound over thousands of requests) makes a razor-thin interval that the next run misses. So a load is judged at
the level that varies (:meth:`Attainment.judged`):

* with two or more runs: each run's empirical logit ``log((good + 0.5) / (bad + 0.5))``; the runs of one deployment
  averaged first when the load ran on two or more deployments (``design.deployments``: the deployment is the unit);
  their mean with a Student-t interval whose variance is the runs' (or deployments') own spread, moderated across
  the side's loads (Smyth, :mod:`benchctl.analysis.inference`) and never below what their requests' binomial
  noise alone would give (a quasi-binomial dispersion of at least 1);
* with one run: the one-sided Wilson bounds of its requests (nothing else is known of it).

A load is *within* when the lower bound reaches the target, *missed* when the upper bound is below it (or a step
completed no request), else *undetermined*. :class:`RegimeComparison` then compares two sides' limits by their
brackets; with one deployment per side the between-deployment spread (``comparison.deployment_spread_pct``)
is not in any run's spread, so the limits must differ by more than it moves an edge: the treatment within at a
load at least ``exp(z x sqrt(2) x spread)`` times the one the baseline missed (the two deployments' speed offsets
at the comparison's level).

Pure: the standard library and :mod:`benchctl.analysis.inference`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from benchctl.analysis import inference
from benchctl.analysis.inference import wilson, wilson_p_above, wilson_p_below
from benchctl.analysis.verdicts import HIGHER, INCONCLUSIVE, LOWER, MIN_REPEATS

WITHIN, MISSED, UNDETERMINED = "within", "missed", "undetermined"
Run = tuple[float, float, str]  # one attempted step with requests at a load: (good, total, its deployment)


def empirical_logit(good: float, total: float) -> float:
    return math.log((good + 0.5) / (total - good + 0.5))


def _binomial_var(good: float, total: float) -> float:
    """The variance of a run's empirical logit from its requests' binomial noise alone."""
    p = (good + 0.5) / (total + 1.0)
    return 1.0 / ((total + 1.0) * p * (1.0 - p))


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


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
    runs: tuple[Run, ...] = ()  # each attempted step with requests (run-level judgement with two or more)
    prior: inference.Prior = field(default=inference.NO_PRIOR, compare=False)  # the side's moderation (slo_regime)

    @property
    def deployments(self) -> int:
        return len({u for _, _, u in self.runs}) or 1

    def blocks(self) -> list[tuple[float, float]]:
        """(mean empirical logit, its binomial variance) per unit: each run, or each deployment's runs averaged."""
        by: dict[str, list[Run]] = {}
        for r in self.runs:
            by.setdefault(r[2] if self.deployments >= 2 else f"{len(by)}", []).append(r)
        out = []
        for runs in by.values():
            ls = [empirical_logit(g, n) for g, n, _ in runs]
            out.append((math.fsum(ls) / len(ls), math.fsum(_binomial_var(g, n) for g, n, _ in runs) / len(ls) ** 2))
        return out

    def spread(self) -> tuple[float, float] | None:
        """(sample variance of the blocks' logits, its df) with two or more blocks, else None."""
        b = self.blocks()
        if len(b) < 2:
            return None
        m = math.fsum(x for x, _ in b) / len(b)
        return math.fsum((x - m) ** 2 for x, _ in b) / (len(b) - 1), float(len(b) - 1)

    @property
    def share(self) -> float | None:
        return self.good / self.total if self.total > 0 else (0.0 if self.failed_steps else None)

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.total if self.total > 0 else (1.0 if self.failed_steps else None)

    def judged(self, target: float, confidence: float) -> tuple[str, float, float]:
        """(state, low, high), each bound one-sided at ``confidence`` (module doc): within when the lower bound
        reaches ``target``, missed when the upper bound is below it (or a step failed outright), else undetermined."""
        if self.failed_steps or self.total <= 0:
            return (MISSED, 0.0, 0.0) if self.failed_steps else (UNDETERMINED, 0.0, 1.0)
        got = self.spread()
        if got is None:
            low, high = wilson(self.good, self.total, confidence)
        else:
            blocks = self.blocks()
            var, df = inference.moderate(*got, self.prior)
            binomial = math.fsum(v for _, v in blocks) / len(blocks)
            se = math.sqrt(max(var, binomial) / len(blocks))
            mean = math.fsum(x for x, _ in blocks) / len(blocks)
            t = inference.quantile(confidence, df if var > binomial else max(df, inference.NORMAL_DF))
            low, high = _expit(mean - t * se), _expit(mean + t * se)
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


def moderated(loads: Sequence[Attainment]) -> list[Attainment]:
    """The side's loads, each with the prior of the run-to-run variance fitted over all of them (Smyth)."""
    from dataclasses import replace

    prior = inference.variance_prior([s for a in loads if (s := a.spread()) is not None])
    return [replace(a, prior=prior) for a in loads]


def slo_regime(loads: Sequence[Attainment], target: float, confidence: float, *, moderate: bool = True
               ) -> Regime | None:
    """The regime of one side's sweep; None without a load that has requests or a failed step (``moderate``:
    fit the side's run-to-run prior here; False when ``loads`` carry it already)."""
    kept = [a for a in loads if a.total > 0 or a.failed_steps]
    pts = sorted(moderated(kept) if moderate else kept, key=lambda a: a.load)
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
    spread_pct: float = 0.0  # comparison.deployment_spread_pct: the margin with one deployment per side (module doc)

    def __post_init__(self) -> None:
        self.base, self.treat = tuple(moderated(self.base)), tuple(moderated(self.treat))
        if slo_regime(self.base, self.target, 0.5) is None or slo_regime(self.treat, self.target, 0.5) is None:
            self.reason = "no SLO attainment on one side"
            return
        if min(a.repeats for a in (*self.base, *self.treat) if a.total > 0 or a.failed_steps) < MIN_REPEATS:
            self.reason = f"fewer than {MIN_REPEATS} repeats per side: the brackets are shown, not compared"
            return
        self.p = self._p()

    @property
    def one_deployment(self) -> bool:
        """A side ran on one deployment: the between-deployment spread is in none of its runs' spread."""
        return min(a.deployments for a in (*self.base, *self.treat)) < 2

    def margin(self, level: float) -> float:
        """How many times higher one side's shown-within load must be than the other's shown miss at family level
        ``level``: 1 when both sides ran on several deployments (their spread is measured), else the ratio two
        deployments' speed offsets reach (module doc)."""
        if not self.one_deployment or self.spread_pct <= 0:
            return 1.0
        z = inference.quantile(1.0 - level / 2.0, inference.NORMAL_DF)
        return math.exp(max(0.0, z) * math.sqrt(2.0) * math.log1p(self.spread_pct / 100.0))

    def _separation(self, level: float) -> str:
        rb = slo_regime(self.base, self.target, 1.0 - level / 2.0, moderate=False)
        rt = slo_regime(self.treat, self.target, 1.0 - level / 2.0, moderate=False)
        if rb is None or rt is None:
            return INCONCLUSIVE
        m = self.margin(level)
        if rb.missed is not None and rt.within is not None and rt.within >= rb.missed * m:
            return HIGHER
        if rt.missed is not None and rb.within is not None and rb.within >= rt.missed * m:
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
        self.regimes = (slo_regime(self.base, self.target, one_sided, moderate=False),
                        slo_regime(self.treat, self.target, one_sided, moderate=False))
        self.outcome = self._separation(alpha) if rejected else INCONCLUSIVE
        if self.outcome == INCONCLUSIVE:
            m = self.margin(alpha)
            self.reason = ("the brackets overlap" if m <= 1.0 else
                           f"the brackets do not separate by the {m:.2f}x in load that two deployments' speed offsets "
                           f"reach at this level (comparison.deployment_spread_pct {self.spread_pct:g} %, one deployment "
                           "per side)")

    @property
    def directional(self) -> bool:
        return self.outcome in (LOWER, HIGHER)

    def regime(self, side: int, default_confidence: float) -> Regime | None:
        """A side's regime at the level the comparison was judged (else one-sided at ``default_confidence``)."""
        if self.regimes[side] is not None:
            return self.regimes[side]
        return slo_regime(self.base if side == 0 else self.treat, self.target, default_confidence, moderate=False)
