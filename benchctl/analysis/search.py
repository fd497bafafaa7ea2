"""The SLO-edge search: the next load a sweep's probe runs, from the attainment measured so far.

A load is *within* the SLO when the one-sided Wilson lower bound of its attainment (requests that succeeded
within every SLO bound, over the requests sent) reaches the target (``comparison.slo_attainment``) at
``comparison.confidence`` (:func:`bound_level`: one-sided, as the report's regimes), *missed* when the upper bound
is below it, else *undetermined*: the verdicts judge loads the same way
(:meth:`benchctl.analysis.verdicts.Attainment.judged`).

From the measured loads: the bracket is ``[within, past)``, ``within`` the highest load shown within below the
first load shown to miss, ``past`` the lowest load above it not shown within (missed or undetermined: so the
located edge is the highest load *shown* within, and a light load with too few requests to show anything does not
stop the search). The next probe:

* nothing measured: ``start`` (the spec's, else 16);
* every load above ``within`` within: ramp up, twice the highest (up to ``max_load``);
* no load within: ramp down, half the lowest load shown to miss (down to 1); nothing shown either way: ramp up;
* else bisect the bracket at its geometric middle (loads are compared by ratio), until
  ``past <= within x (1 + resolution)`` or the two are 1 apart: located.

The caller stops at its budget line (``max_probes``) whatever the bracket. Pure: the standard library and
:mod:`benchctl.analysis.inference`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from benchctl.analysis.inference import wilson

DEFAULT_START = 16
WITHIN, MISSED, UNDETERMINED = "within", "missed", "undetermined"  # as benchctl.analysis.verdicts names them


def bound_level(confidence: float) -> float:
    """The one-sided level of each Wilson bound for a campaign's ``comparison.confidence``: the level the report's
    SLO regimes use (each bound one-sided at 1 - alpha / 2), so the search calls a load within exactly when the
    report would."""
    return 1.0 - (1.0 - confidence) / 2.0


@dataclass(frozen=True)
class Measured:
    """One measured load: its requests and those within the SLO (a failed step: ``n`` 0, ``failed`` True)."""

    load: int
    good: int
    n: int
    failed: bool = False

    def state(self, target: float, confidence: float, spread: float = 0.0) -> str:
        """within (the Wilson lower bound reaches ``target``), missed (the upper bound is below it, or the step
        failed) or undetermined: the report's rule for one run (``Attainment.judged``). ``spread``: the run-to-run
        logit sd of attainment the search allows for (its requests are not independent coin flips: they share the
        run), as a quasi-binomial dispersion ``1 + n spread^2 p (1 - p)`` on the requests' count."""
        if self.failed:
            return MISSED
        if self.n <= 0:
            return UNDETERMINED
        good, n = float(self.good), float(self.n)
        if spread > 0:
            p = (good + 0.5) / (n + 1.0)
            n = n / (1.0 + n * spread * spread * p * (1.0 - p))
            good = p * n
        low, high = wilson(good, n, confidence)
        return WITHIN if low >= target else MISSED if high < target else UNDETERMINED

    def within(self, target: float, confidence: float, spread: float = 0.0) -> bool:
        return self.state(target, confidence, spread) == WITHIN

    @property
    def logit(self) -> float:
        return math.log((self.good + 0.5) / (self.n - self.good + 0.5))


@dataclass(frozen=True)
class Next:
    """The search's answer: the next ``load`` to probe (None: stop) and why; the bracket so far."""

    load: int | None
    why: str
    within: int | None
    past: int | None
    located: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"load": self.load, "why": self.why, "within": self.within, "past": self.past,
                "located": self.located}


def min_requests(target: float, confidence: float) -> int:
    """The fewest requests with which a load, every request within, is shown within (its Wilson lower bound
    reaches ``target``): a probe that sends fewer stays undetermined whatever it measures."""
    n = 1
    while wilson(n, n, confidence)[0] < target and n < 100_000:
        n += 1
    return n


def _too_few(points: Sequence[Measured], target: float, confidence: float) -> str:
    """A note naming the loads left undetermined for lack of requests, or ''."""
    need = min_requests(target, confidence)
    few = sorted(p.load for p in points if p.state(target, confidence) == UNDETERMINED and p.n < need)
    if not few:
        return ""
    return (f"; c={', c='.join(str(c) for c in few)} sent fewer than {need} requests, too few to show "
            f"{target:.0%} attainment: lengthen search.duration_s")


def bracket(points: Sequence[Measured], target: float, confidence: float, spread: float = 0.0
            ) -> tuple[int | None, int | None]:
    """(within, past): ``within`` the highest load shown within below the first load shown to miss the SLO (a
    light load with too few requests to show anything does not hide the loads above it), ``past`` the lowest load
    above it not shown within (missed, or undetermined: the edge may lie below it)."""
    states = sorted((p.load, p.state(target, confidence, spread)) for p in points)
    missed = next((load for load, st in states if st == MISSED), None)
    within = max((load for load, st in states if st == WITHIN and (missed is None or load < missed)), default=None)
    past = next((load for load, st in states if st != WITHIN and (within is None or load > within)), None)
    return within, past


def located(within: int | None, past: int | None, resolution: float) -> bool:
    return within is not None and past is not None and (past <= within * (1 + resolution) or past - within <= 1)


def supported(points: Sequence[Measured], within: int, past: int, confidence: float, spread: float) -> float | None:
    """The finest bracket (past / within) the run-to-run ``spread`` supports, from the attainment the bracket's two
    loads measured: their logits fall by ``slope`` per unit of log load, so two loads closer than ``2 z spread /
    slope`` differ by less than two runs of one load may (None: not estimable, no spread allowed for)."""
    by = {p.load: p for p in points if p.n > 0 and not p.failed}
    if spread <= 0 or within not in by or past not in by or past <= within:
        return None
    slope = (by[within].logit - by[past].logit) / math.log(past / within)
    if slope <= 0:
        return None
    return math.exp(2.0 * NormalDist().inv_cdf(confidence) * spread / slope)


def next_load(points: Sequence[Measured], *, target: float, confidence: float, resolution: float,
              start: int | None = None, max_load: int = 4096, spread: float = 0.0) -> Next:
    """The next probe's load from ``points`` (every load measured so far in this search, fixed points too);
    ``spread``: the run-to-run logit spread of attainment it allows for (:meth:`Measured.state`, :func:`supported`)."""
    tried = {p.load for p in points}
    within, past = bracket(points, target, confidence, spread)
    if not points:
        first = min(max(1, start or DEFAULT_START), max_load)
        return Next(first, f"first probe at c={first} ({'the given start' if start else 'the default start'})",
                    None, None)
    if located(within, past, resolution):
        return Next(None, f"located: within at c={within}, not shown within at c={past} (resolution "
                          f"{resolution:.0%})",
                    within, past, located=True)
    finest = supported(points, within, past, confidence, spread) if within is not None and past is not None else None
    if finest is not None and within is not None and past is not None and past / within <= finest:
        return Next(None, f"located to the resolution the run-to-run spread supports: within at c={within}, not shown "
                          f"within at c={past} ({past / within - 1:.0%} apart; loads closer than {finest - 1:.0%} differ "
                          f"in attainment by less than two runs of one load may, logit sd {spread:g})",
                    within, past, located=True)
    if past is None:
        assert within is not None
        if within >= max_load:
            return Next(None, f"within at c={within}, the highest load the search may use: the edge is above it",
                        within, past)
        up = min(max_load, within * 2)
        return Next(up, f"within at every load up to c={within}: ramp up to c={up}", within, past)
    if within is None:
        states = {p.load: p.state(target, confidence, spread) for p in points}
        missed = sorted(c for c, st in states.items() if st == MISSED)
        if not missed:  # nothing shown either way (too few requests): more load, more requests
            up = min(max_load, max(states) * 2)
            if up in tried:
                return Next(None, f"no load shown within or past the SLO up to c={max(states)}"
                                  + _too_few(points, target, confidence), within, past)
            return Next(up, f"no load shown within or past the SLO yet: ramp up to c={up}"
                            + _too_few(points, target, confidence), within, past)
        if missed[0] <= 1:
            return Next(None, "past the SLO at c=1: the edge is below the lightest load", within, past)
        down = max(1, missed[0] // 2)
        while down in tried and down > 1:
            down //= 2
        if down in tried:
            return Next(None, f"no load shown within the SLO below c={missed[0]}"
                              + _too_few(points, target, confidence), within, past)
        return Next(down, f"past the SLO at c={missed[0]} and no load shown within below it: ramp down to "
                          f"c={down}" + _too_few(points, target, confidence), within, past)
    top = min(past, max_load + 1)  # the bracket's part the search may use (max_load: a client's reach, say)
    if top <= within + 1:
        return Next(None, f"within at c={within}, the highest load the search may use below c={past}: the edge is "
                          "between them", within, past)
    mid = round(math.sqrt(within * top))
    mid = min(max(mid, within + 1), top - 1)
    if mid in tried:  # an undetermined load inside the bracket: probe beside it
        free = [c for c in range(within + 1, top) if c not in tried]
        if not free:
            return Next(None, f"every load in [c={within}, c={top}) tried", within, past)
        mid = min(free, key=lambda c: abs(math.log(c / math.sqrt(within * top))))
    return Next(mid, f"bisect [c={within}, c={past}) at c={mid}" + (f" (loads from c={top} on out of reach)"
                                                                     if top < past else ""), within, past)


def run(measure: Callable[[int], Measured], points: Sequence[Measured], *, target: float, confidence: float,
        resolution: float, max_probes: int, start: int | None = None, max_load: int = 4096, spread: float = 0.0
        ) -> tuple[list[Measured], Next]:
    """The whole search against ``measure`` (a load -> its measurement): the probes in order and the last answer.
    What the campaign does one probe per step; the plan's prediction and the tests run it at once."""
    seen, probes = list(points), list[Measured]()
    for _ in range(max_probes):
        nxt = next_load(seen, target=target, confidence=confidence, resolution=resolution, start=start,
                        max_load=max_load, spread=spread)
        if nxt.load is None:
            return probes, nxt
        m = measure(nxt.load)
        seen.append(m)
        probes.append(m)
    last = next_load(seen, target=target, confidence=confidence, resolution=resolution, start=start,
                     max_load=max_load, spread=spread)
    if last.load is not None:
        last = Next(None, f"stopped at the budget line of {max_probes} probes before the edge was located to "
                          f"{resolution:.0%}: within at c={last.within}, not shown within at c={last.past}", last.within,
                    last.past)
    return probes, last
