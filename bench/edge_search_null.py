"""The SLO-edge search and the report's SLO-limit comparison judged under the null, at the size of a real campaign and
in a world that varies like a GPU campaign's (SIMULATED attainment curves).

Each side of a comparison leaves its SLO at a true edge E (attainment 0.9 there, falling off as a logistic of width
10 % of E, or 30 %). The world varies at two more levels than requests: each **deployment** of a side serves as if
its edge were E x exp(N(0, sd)) (other nodes, clocks, placement, KV cache: a speed offset shared by all its runs
and loads), and each **run** (step) has its own attainment, its logit moved by N(0, overdispersion) (its requests
share the run: they are no independent coin flips). A step at load c sends c x 120 s / its request time (5 s
alone, twice that at the edge) requests, each within the SLO with the run's attainment (binomial). A campaign runs
the design (``--design D:R``: D deployments per side, R repeats on each; the seed plan's 5:1 by default); the first
repeat measures the fixed loads (the seed plan's grid), then (with the search) its probes chosen from what it measured
by ``benchctl.analysis.search`` (allowing for a run spread of ``search.run_spread``, 0.3), which every later repeat
runs again. The report's SLO-limit comparison (:class:`benchctl.analysis.regimes.RegimeComparison`, one test at
alpha = 1 - confidence, each load judged on its runs or deployments) then judges the two sides.

Printed per cell (overdispersion x deployment spread) for the grid alone and grid + search:

* **A/A** (both sides the same E): the share of campaigns in which the report calls one side's SLO limit higher or
  lower (a false positive: at most alpha);
* **power** (the treatment's E 30 % higher): the share in which it says so;
* **coverage**: of the brackets the report states ([within, missed), both bounds found), the share holding E;
* the bracket's width (missed / within), and the probes run.

Then ``concurrency: auto`` from the seed plan's settings (no grid; the search from ``search.start`` = the plan's
predicted edge, which aiconfigurator puts 35 % above E, 6 probes to 10 %): the share of campaigns whose search
locates the edge with a bracket holding it.

Run: ``.venv/bin/python bench/edge_search_null.py [campaigns] [--design D:R] [--before]`` (default 200 per row;
about 10 minutes); ``--before --design 1:3`` measures the rules and the design of the checkout before deployments.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchctl.analysis.regimes import Attainment, RegimeComparison
from benchctl.analysis.search import Measured, bound_level, next_load
from benchctl.analysis.verdicts import HIGHER, LOWER

TARGET, CONFIDENCE = 0.9, 0.95
GRID = (1, 2, 4, 8, 16, 32, 64, 256, 512, 1024, 1536)  # the seed plan's ISL 1024 sweep
EDGE = 700.0  # where a p4d pair's aggregated arm leaves its SLO in this made-up world
PREDICTED = 950  # what the plan's prediction says (aiconfigurator's A100-80GB data: optimistic for 40 GB)
STEP_S, REQUEST_S = 120.0, 5.0  # a step's load time; one request's time alone (OSL 512 at ~10 ms per token)
MAX_PROBES, RESOLUTION, RUN_SPREAD = 4, 0.10, 0.3  # the seed plan's search (run_spread: the search's default)
AUTO_PROBES = 6  # concurrency: auto with a start: 2 + 3 bisections fit (benchctl.planning.reach)
FLOOR_PCT = 5.0  # comparison.deployment_spread_pct
BEFORE = [False]  # --before: the rules of the checkout before deployments (requests pooled over runs, no run spread)


@dataclass(frozen=True)
class World:
    width: float = 0.1  # the attainment curve's fall-off, as a share of the edge
    overdisp: float = 0.0  # a run's logit sd
    deploy_sd: float = 0.0  # a deployment's edge offset (log sd)

    def label(self) -> str:
        return f"width {self.width:.0%}, overdisp {self.overdisp:g}, deploy sd {self.deploy_sd:.0%}"


def attainment(c: float, edge: float, width: float) -> float:
    return 1.0 / (1.0 + math.exp((c - edge) / (width * edge) - math.log(9.0)))


def _binomial(rng: random.Random, n: int, p: float) -> int:
    if n > 200:  # normal approximation, clipped (fast and close at these n)
        return min(n, max(0, round(rng.gauss(n * p, math.sqrt(n * p * (1 - p))))))
    return sum(rng.random() < p for _ in range(n))


@dataclass
class Side:
    loads: list[Attainment]
    probes: int
    search_bracket: tuple[int | None, int | None]
    located: bool


def side(rng: random.Random, edge: float, world: World, design: tuple[int, int], *, search: bool,
         grid: tuple[int, ...] = GRID, start: int | None = None, max_probes: int = MAX_PROBES) -> Side:
    """One side of one campaign: every load's runs, the probes its search ran and where it left the bracket."""
    deployments, repeats = design
    edges = {k: edge * math.exp(rng.gauss(0.0, world.deploy_sd)) for k in range(1, deployments + 1)}

    def measure(c: int, k: int) -> Measured:
        e = edges[k]
        n = max(1, round(c * STEP_S / (REQUEST_S * (1 + c / e))))  # closed loop: requests slow with the load
        p = attainment(c, e, world.width)
        if world.overdisp:
            p = 1.0 / (1.0 + math.exp(-(math.log(p / (1 - p)) + rng.gauss(0.0, world.overdisp))))
        return Measured(c, _binomial(rng, n, p), n)

    runs: dict[int, list[tuple[float, float, str]]] = {}
    first = [measure(c, 1) for c in grid]
    probes: list[int] = []
    last = None
    if search:
        seen = list(first)
        for _ in range(max_probes):
            last = next_load(seen, target=TARGET, confidence=bound_level(CONFIDENCE), resolution=RESOLUTION,
                             start=start, spread=0.0 if BEFORE[0] else RUN_SPREAD)
            if last.load is None:
                break
            probes.append(last.load)
            seen.append(measure(last.load, 1))
        else:
            last = next_load(seen, target=TARGET, confidence=bound_level(CONFIDENCE), resolution=RESOLUTION,
                             start=start, spread=0.0 if BEFORE[0] else RUN_SPREAD)
        first = seen
    for m in first:
        runs.setdefault(m.load, []).append((m.good, m.n, "d1"))
    for r in range(1, deployments * repeats):
        k = r // repeats + 1
        for c in (*grid, *probes):
            m = measure(c, k)
            runs.setdefault(c, []).append((m.good, m.n, f"d{k}"))
    loads = [Attainment(c, sum(g for g, _, _ in rs), sum(n for _, n, _ in rs), repeats=len(rs),
                        runs=() if BEFORE[0] else tuple(rs))  # before: one Wilson bound over the pooled requests
             for c, rs in sorted(runs.items())]
    return Side(loads, len(probes), (last.within, last.past) if last else (None, None),
                bool(last and last.located))


def campaign(rng: random.Random, world: World, design: tuple[int, int], treat_factor: float, search: bool
             ) -> tuple[str | None, list[tuple[float, float, float]], int]:
    """(the report's verdict on the limits, [(within, missed, the side's true edge)] of each side's bracket, probes)."""
    base = side(rng, EDGE, world, design, search=search)
    treat = side(rng, EDGE * treat_factor, world, design, search=search)
    cmp = RegimeComparison("bench", tuple(base.loads), tuple(treat.loads), TARGET,
                           spread_pct=0.0 if BEFORE[0] else FLOOR_PCT)
    alpha = 1.0 - CONFIDENCE
    cmp.decide(cmp.p is not None and cmp.p <= alpha, alpha)
    brackets = []
    for reg, e in zip(cmp.regimes, (EDGE, EDGE * treat_factor), strict=True):
        if reg is not None and reg.within is not None and reg.missed is not None:
            brackets.append((reg.within, reg.missed, e))
    return (cmp.outcome if cmp.outcome in (HIGHER, LOWER) else None), brackets, base.probes + treat.probes


@dataclass
class Tally:
    said: int = 0
    n: int = 0
    covered: int = 0
    claimed: int = 0
    widths: list[float] | None = None
    probes: int = 0

    def add(self, outcome: str | None, brackets: list[tuple[float, float, float]], probes: int) -> None:
        self.n += 1
        self.said += outcome is not None
        self.widths = self.widths or []
        for lo, hi, e in brackets:
            self.claimed += 1
            self.covered += lo <= e < hi
            self.widths.append(hi / lo)
        self.probes += probes

    @property
    def rate(self) -> float:
        return self.said / self.n if self.n else 0.0

    @property
    def coverage(self) -> float:
        return self.covered / self.claimed if self.claimed else float("nan")

    @property
    def width(self) -> float:
        w = sorted(self.widths or [])
        return w[len(w) // 2] if w else float("nan")


def wilson_hi(k: int, n: int, z: float = 1.959964) -> float:
    if n == 0:
        return 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    return min(1.0, centre + z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n))


def tally(n: int, run: Callable[[], tuple[str | None, list[tuple[float, float, float]], int]]) -> Tally:
    t = Tally()
    for _ in range(n):
        t.add(*run())
    return t


def auto_cell(rng: random.Random, n: int, world: World, design: tuple[int, int]) -> tuple[float, float]:
    """concurrency: auto from the seed plan's settings: (share located with a bracket holding the true edge, mean
    probes)."""
    ok = probes = 0
    for _ in range(n):
        s = side(rng, EDGE, world, design, search=True, grid=(), start=None if BEFORE[0] else PREDICTED,
                 max_probes=AUTO_PROBES)
        within, past = s.search_bracket
        ok += bool(s.located and within is not None and past is not None and within <= EDGE * 1.1
                   and past >= EDGE / 1.1)
        probes += s.probes
    return ok / n, probes / n


CELLS = (World(), World(overdisp=0.3), World(overdisp=0.6), World(deploy_sd=0.02), World(deploy_sd=0.05),
         World(overdisp=0.3, deploy_sd=0.02), World(width=0.3), World(width=0.3, overdisp=0.6, deploy_sd=0.05))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("campaigns", nargs="?", type=int, default=200, help="campaigns per row (default 200)")
    ap.add_argument("--design", default="5:1", help="deployments:repeats per side (default 5:1, the seed plan's)")
    ap.add_argument("--before", action="store_true", help="the rules before deployments (one Wilson bound over the "
                    "requests pooled over runs, a search trusting one run's requests, no deployments' margin); "
                    "use with --design 1:3 for the seed plan's design then")
    a = ap.parse_args()
    BEFORE[0] = a.before
    design = tuple(int(x) for x in a.design.split(":"))
    assert len(design) == 2
    n = a.campaigns
    rng = random.Random(20261205)
    t0 = time.perf_counter()
    alpha = 1 - CONFIDENCE
    print(f"SIMULATED: {n} campaigns per row, design {design[0]} deployment(s) x {design[1]} repeat(s) per side, grid "
          f"{list(GRID)}, true edge c={EDGE:g}, alpha {alpha:.2f}, search up to {MAX_PROBES} probes to "
          f"{RESOLUTION:.0%} (run spread {RUN_SPREAD:g}), one deployment's margin from deployment_spread_pct "
          f"{FLOOR_PCT:g} %")
    worst_fp, worst_cov = 0.0, 1.0
    for world in CELLS:
        print(f" {world.label()}:")
        for label, search in (("grid only", False), ("grid + search", True)):
            null = tally(n, lambda s=search, w=world: campaign(rng, w, design, 1.0, s))  # type: ignore[misc]
            power = tally(n, lambda s=search, w=world: campaign(rng, w, design, 1.3, s))  # type: ignore[misc]
            worst_fp = max(worst_fp, null.rate)
            worst_cov = min(worst_cov, null.coverage) if null.claimed else worst_cov
            print(f"  {label:<14} A/A: limits called different {null.rate:6.2%} (Wilson upper "
                  f"{wilson_hi(null.said, null.n):.1%}; alpha {alpha:.0%}); edges 30 % apart: said {power.rate:6.2%}; "
                  f"the bracket holds the true edge in {null.coverage:6.1%} of {null.claimed} stated; width median "
                  f"{null.width:.2f}x; probes per side {null.probes / n / 2:.1f}", flush=True)
    print(" concurrency: auto from the seed plan's settings (start = the predicted edge c=950 (before: the default, "
          "c=16), 6 probes, 10 %):")
    for world in (World(), World(overdisp=0.3), World(overdisp=0.6, deploy_sd=0.05)):
        share, probes = auto_cell(rng, n, world, design)
        print(f"  {world.label():<44} located with a bracket holding c={EDGE:g} (to 10 %): {share:6.1%}; probes "
              f"{probes:.1f}", flush=True)
    print(f"worst A/A rate {worst_fp:.2%}, worst coverage {worst_cov:.1%}; {time.perf_counter() - t0:.0f} s")
    return 0 if worst_fp <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / n) else 1


if __name__ == "__main__":
    raise SystemExit(main())
