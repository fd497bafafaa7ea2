"""The SLO-edge search judged under the null, at the size of a real campaign (SIMULATED attainment curves).

Each side of a comparison leaves its SLO at a true edge E (attainment 0.9 there, falling off as a logistic of
width 10 % of E, or 30 %); a step at load c sends c x 120 s / its request time (5 s alone, twice that at the edge) requests, each within the SLO with the true
attainment (binomial). A campaign measures each side's fixed loads (the seed plan's grid), then (with the search)
its probes chosen from repeat 0's measurements by ``benchctl.analysis.search``, rerun in every later repeat; the
report's SLO-limit comparison (:class:`benchctl.analysis.verdicts.RegimeComparison`, one test at
alpha = 1 - confidence) then judges the two sides from every load, pooled over repeats.

Printed, for the grid alone and for grid + search:

* **A/A** (both sides the same edge): the share of campaigns in which the report calls one side's SLO limit higher
  or lower (a false positive; it must stay at most alpha);
* **power** (the treatment's edge 15 % higher): the share in which it says so;
* the width of the bracket the report states (past / within), and the probes run.

Run: ``.venv/bin/python bench/edge_search_null.py [campaigns]`` (default 2000; about a minute).
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchctl.analysis.search import Measured, bound_level, next_load
from benchctl.analysis.regimes import Attainment, RegimeComparison
from benchctl.analysis.verdicts import HIGHER, LOWER

TARGET, CONFIDENCE, REPEATS = 0.9, 0.95, 3
GRID = (1, 2, 4, 8, 16, 32, 64, 256, 512, 1024, 1536)  # the seed plan's ISL 1024 sweep
EDGE = 700.0  # where the seed plan's aggregated arm is predicted to leave its SLO (benchctl plan --engine aws)
STEP_S, REQUEST_S = 120.0, 5.0  # a step's load time; one request's time alone (OSL 512 at ~10 ms per token)
MAX_PROBES, RESOLUTION = 4, 0.10


WIDTHS = (0.1, 0.3)  # the attainment curve's fall-off, as a share of the edge: steep, and three times flatter
WIDTH = [0.1]


def attainment(c: float, edge: float) -> float:
    return 1.0 / (1.0 + math.exp((c - edge) / (WIDTH[0] * edge) - math.log(9.0)))


def _binomial(rng: random.Random, n: int, p: float) -> int:
    if n > 200:  # normal approximation, clipped (fast and close at these n)
        return min(n, max(0, round(rng.gauss(n * p, math.sqrt(n * p * (1 - p))))))
    return sum(rng.random() < p for _ in range(n))


def side(rng: random.Random, edge: float, search: bool) -> tuple[list[Attainment], int]:
    """One side of one campaign: every load's attainment pooled over the repeats, and the probes it ran."""
    def measure(c: int) -> Measured:
        n = max(1, round(c * STEP_S / (REQUEST_S * (1 + c / edge))))  # closed loop: requests slow with the load
        return Measured(c, _binomial(rng, n, attainment(c, edge)), n)

    first = [measure(c) for c in GRID]
    probes: list[int] = []
    if search:
        seen = list(first)
        for _ in range(MAX_PROBES):
            nxt = next_load(seen, target=TARGET, confidence=bound_level(CONFIDENCE), resolution=RESOLUTION)
            if nxt.load is None:
                break
            probes.append(nxt.load)
            seen.append(measure(nxt.load))
        first = seen
    pooled = {m.load: [m.good, m.n] for m in first}
    for _ in range(REPEATS - 1):
        for c in (*GRID, *probes):
            m = measure(c)
            pooled[c][0] += m.good
            pooled[c][1] += m.n
    return [Attainment(c, g, n, repeats=REPEATS) for c, (g, n) in sorted(pooled.items())], len(probes)


def campaign(rng: random.Random, base_edge: float, treat_edge: float, search: bool) -> tuple[str | None, float, int]:
    base, pb = side(rng, base_edge, search)
    treat, pt = side(rng, treat_edge, search)
    cmp = RegimeComparison("bench", tuple(base), tuple(treat), TARGET)
    alpha = 1.0 - CONFIDENCE
    rejected = cmp.p is not None and cmp.p <= alpha
    cmp.decide(rejected, alpha)
    reg = cmp.regimes[0]
    width = (reg.missed / reg.within) if reg and reg.within and reg.missed else float("nan")
    return (cmp.outcome if cmp.outcome in (HIGHER, LOWER) else None), width, pb + pt


def rate(n: int, run: Callable[[], tuple[str | None, float, int]]) -> tuple[float, float, float]:
    said, widths, probes = 0, [], 0
    for _ in range(n):
        outcome, width, k = run()
        said += outcome is not None
        if not math.isnan(width):
            widths.append(width)
        probes += k
    widths.sort()
    return said / n, widths[len(widths) // 2] if widths else float("nan"), probes / n / 2


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    rng = random.Random(20261205)
    print(f"SIMULATED: {n} campaigns per row, {REPEATS} repeats, grid {list(GRID)}, true edge c={EDGE:g}, "
          f"alpha {1 - CONFIDENCE:.2f}, search up to {MAX_PROBES} probes to {RESOLUTION:.0%}")
    worst = 0.0
    for width in WIDTHS:
        WIDTH[0] = width
        print(f" attainment falling off over {width:.0%} of the edge:")
        rows = []
        for label, search in (("grid only", False), ("grid + search", True)):
            fp, bw, probes = rate(n, lambda s=search: campaign(rng, EDGE, EDGE, s))
            power, _, _ = rate(n, lambda s=search: campaign(rng, EDGE, EDGE * 1.15, s))
            rows.append((label, fp, power, bw, probes))
            worst = max(worst, fp)
            print(f"  {label:<14} A/A: a limit called different in {fp:6.2%} (alpha {1 - CONFIDENCE:.0%}); edge "
                  f"15 % apart: said in {power:6.2%}; the report's bracket past/within: median {bw:.2f}x; probes "
                  f"per side {probes:.1f}")
        (_, fp0, pow0, w0, _), (_, fp1, pow1, w1, _) = rows

        def ratio(a: float, b: float) -> str:
            return f"{a / b:.2f}x" if b else ("1.00x (both 0)" if not a else f"{a:.2%} against 0")

        print(f"  search / grid: false positives {ratio(fp1, fp0)} (each must stay at most alpha), power "
              f"{ratio(pow1, pow0)}, bracket width {w1 / w0:.2f}x")
    return 0 if worst <= (1 - CONFIDENCE) + 3 * math.sqrt(0.05 * 0.95 / n) else 1


if __name__ == "__main__":
    raise SystemExit(main())
