"""`benchctl compare` under the null, and its power: pairs of made-up campaigns of one spec in which nothing
differs (A/A), at the size of the seed plan and of the smoke spec, judged by the real comparison core
(benchctl.analysis.history.compare_campaigns, the function `benchctl compare` and the report call on the rows of
v_history). Per cell it prints the share of A/A pairs in which any primary figure (TTFT p50, ITL p50, output
tokens/s) was called a change, with its 95 % Wilson interval, and the share of figures that read "no change";
then the power: the second campaign 30 % slower (latencies x 1.3, throughputs / 1.3), all three primary figures
named with the right sign.

The noise model: each step's figure = truth x exp(step noise) x exp(campaign noise), the campaign noise one draw
per campaign and figure (the machine that day: what one deployment per campaign cannot average out). With a
campaign noise, an A/A pair is not identical campaigns: a "change" there is a true change of the campaigns that no
software caused, which is why `benchctl compare` lists the provenance differences first.

SIMULATED: no engine runs; every figure is drawn.

Usage: .venv/bin/python bench/compare_aa.py [--draws N] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchctl.analysis.history import DAY_SD_PCT, NO_DAY, PRIMARY, compare_campaigns, day_spread  # noqa: E402
from benchctl.analysis.inference import wilson  # noqa: E402

# the seed plan: 4 experiments x (9 + 7 sweep loads, 5 prefix ratios, 3 distributions, 1 multi-turn) = 100 points
SEED_POINTS = [(e, "concurrency_sweep", c, isl) for e in ("agg", "disagg", "disagg-off", "disagg-het")
               for isl, loads in ((1024, (1, 4, 16, 32, 64, 256, 512, 1024, 1536)),
                                  (8192, (1, 4, 16, 64, 128, 192, 256))) for c in loads] + \
              [(e, kind, v, 1024) for e in ("agg", "disagg", "disagg-off", "disagg-het")
               for kind, vs in (("prefix_cache", ("p0", "p25", "p50", "p75", "p100")),
                                ("sequence_distribution", ("uniform", "zipf", "lognormal")),
                                ("multi_turn", ("c4",))) for v in vs]
# the smoke spec: 2 experiments x (3 sweep loads, 3 prefix ratios, 3 distributions, 1 multi-turn) = 20 points
SMOKE_POINTS = [(e, "concurrency_sweep", c, 256) for e in ("agg", "disagg") for c in (1, 4, 16)] + \
               [(e, kind, v, 256) for e in ("agg", "disagg")
                for kind, vs in (("prefix_cache", ("p0", "p50", "p100")),
                                 ("sequence_distribution", ("uniform", "zipf", "lognormal")),
                                 ("multi_turn", ("c4",))) for v in vs]


def _truth(i: int) -> dict[str, float]:
    return {"ttft_p50_ms": 50.0 + 7.0 * i, "ttft_p99_ms": 90.0 + 9.0 * i, "itl_p50_ms": 8.0 + 0.1 * i,
            "itl_p99_ms": 12.0 + 0.2 * i, "request_latency_p50_ms": 400.0 + 3.0 * i, "output_tokens_per_s": 900.0 + 20 * i,
            "goodput_per_s": 5.0 + 0.1 * i}


def draw(cid: str, points: list[tuple[Any, ...]], repeats: int, step_noise: float, campaign_noise: float,
         rng: random.Random, slower: float = 1.0) -> list[dict[str, Any]]:
    day = {f: rng.gauss(0.0, campaign_noise) for f in _truth(0)}
    rows = []
    for i, (exp, kind, variant, isl) in enumerate(points):
        for r in range(repeats):
            row: dict[str, Any] = {"campaign_id": cid, "experiment": exp, "workload_kind": kind, "workload": kind,
                                   "variant": f"c{variant}" if kind == "concurrency_sweep" else variant, "isl": isl,
                                   "osl": 128, "concurrency": variant if kind == "concurrency_sweep" else 4,
                                   "search_probe": None, "repeat": r, "valid": True}
            for f, v in _truth(i).items():
                factor = slower if f not in {"output_tokens_per_s", "goodput_per_s"} else 1.0 / slower
                row[f] = v * factor * math.exp(rng.gauss(0.0, step_noise) + day[f])
            rows.append(row)
    return rows


def cell(points: list[tuple[Any, ...]], repeats: int, step_noise: float, campaign_noise: float, draws: int,
         seed: int, slower: float = 1.0, history: int = 0) -> tuple[int, int, int]:
    """(pairs with any primary figure called a change [A/A] or all three right [power], figures reading "no
    change", figures judged). ``history``: earlier campaigns of the spec (nothing differing) the day spread is
    measured from, as `benchctl compare` does from the lake; 0: the assumed spread."""
    rng = random.Random(seed)
    hits = no_change = judged = 0
    for k in range(draws):
        day = None
        if history:
            earlier = [draw(f"h{k}-{i}", points, repeats, step_noise, campaign_noise, rng) for i in range(history)]
            day = day_spread([compare_campaigns({"campaign_id": "x"}, {"campaign_id": "y"}, x, y, day=NO_DAY,
                                                point_intervals=False) for x, y in itertools.pairwise(earlier)])
        a = draw(f"a{k}", points, repeats, step_noise, campaign_noise, rng)
        b = draw(f"b{k}", points, repeats, step_noise, campaign_noise, rng, slower)
        c = compare_campaigns({"campaign_id": "a"}, {"campaign_id": "b"}, a, b, point_intervals=False, day=day)
        primary = [s for s in c.shifts if s.primary]
        if slower == 1.0:
            hits += any(s.directional for s in primary)
        else:
            hits += all(s.verdict().endswith("(worse)") for s in primary)
        no_change += sum(s.verdict() == "no change" for s in primary)
        judged += len(primary)
    return hits, no_change, judged


def _share(k: int, n: int) -> str:
    lo, hi = wilson(k, n, 0.975)  # one-sided bounds at 97.5 %: a 95 % interval
    return f"{k / n:.1%} [{lo:.1%}, {hi:.1%}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--quick", action="store_true", help="100 draws per cell")
    args = ap.parse_args()
    draws = 100 if args.quick else args.draws
    print(f"benchctl compare under the null (A/A) and its power; {draws} campaign pairs per cell ({draws // 4} with "
          f"a history); primary figures: {', '.join(f.label for f in PRIMARY)}; 95 % confidence, practical threshold "
          f"+/-5 %; day spread assumed {DAY_SD_PCT:g} % unless measured (SIMULATED)")
    print(f"{'campaign size':<24} {'reps':>4} {'step':>5} {'day':>4} | {'A/A any change, assumed':>24} | "
          f"{'A/A, 3 earlier pairs':>22} | {'no change':>9} | {'30 % slower: all 3 worse':>24}")
    for name, points, repeats in (("seed plan (100 points)", SEED_POINTS, 3), ("smoke (20 points)", SMOKE_POINTS, 1)):
        for step_noise in (0.05, 0.10, 0.20):
            for day_noise in (0.0, 0.02, 0.05):
                seed = int(step_noise * 1000 + day_noise * 100)
                h, nc, j = cell(points, repeats, step_noise, day_noise, draws, seed=seed)
                hh, _, _ = cell(points, repeats, step_noise, day_noise, draws // 4, seed=seed + 1, history=4)
                p, _, _ = cell(points, repeats, step_noise, day_noise, draws // 2, seed=seed + 2, slower=1.3)
                print(f"{name:<24} {repeats:>4} {step_noise:>5.0%} {day_noise:>4.0%} | {_share(h, draws):>24} | "
                      f"{_share(hh, draws // 4):>22} | {nc / j:>9.0%} | {_share(p, draws // 2):>24}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
