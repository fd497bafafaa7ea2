"""The report's verdicts under the null, and their power: made-up campaigns in which both sides of every comparison
are drawn from one distribution (A/A), at the seed plan's size, written through the project's lake writer
(tests/unit/synthetic_lake.py, the schema's own row checks), read through the real SQL views (DuckDB) and the
real ``answers()``. Per cell (relative noise per repeat x repeats per side) it prints, for each of the eight
answers, the share of A/A campaigns that came out "directional" with its 95 % Wilson interval; then the power
cell: a true -30 % TTFT p50 at the two highest loads (3 repeats, 10 % noise), found with the right sign.

SIMULATED: no engine runs; every figure is drawn. The campaign's shape (the seed plan): an aggregated and a
disaggregated experiment (q1, q3, q4, h1, h3), an offload rung of the disaggregated one (q2, h2) and a
heterogeneous one beside the aggregated (h4); concurrency sweeps of 9 loads at ISL 1024 and 7 at ISL 8192, 200
requests per step (attainment falling past a knee, drawn per step); 5 prefix-duplication ratios; a multi-turn
step; the prefill and decode waiting queues; every disaggregated transfer path verified.

Usage: .venv/bin/python bench/aa_false_positive.py [--draws N] [--cells 5:2,10:3,...] [--jobs 2] [--quick]
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ANSWERS = ("q1", "q2", "q3", "q4", "h1", "h2", "h3", "h4")
SHORT = (1, 4, 16, 32, 64, 256, 512, 1024, 1536)  # the seed plan's ISL 1024 sweep
LONG = (1, 4, 16, 64, 128, 192, 256)  # its ISL 8192 sweep
KNEE = {1024: 512, 8192: 128}  # the last load within the SLO (the seed plan's predicted edges)
REQUESTS = 200


def _ttft(isl: int, c: int) -> float:
    """A made-up TTFT p50 (ms) curve: flat, then queueing past the knee."""
    base = 40.0 * isl / 1024
    return base * (1.0 + (c / KNEE[isl]) ** 2)


def _attainment(isl: int, c: int) -> float:
    """The true share of requests within the SLO at a load: 0.99 up to the knee, then falling."""
    k = KNEE[isl]
    return 0.99 if c <= k else max(0.05, 0.99 - 0.6 * math.log2(c / k))


def draw_campaign(lake_root: Path, cid: str, seed: int, noise: float, repeats: int, *,
                  effect: dict[tuple[int, int], float] | None = None, overload: bool = False,
                  hetero_noise: bool = False) -> None:
    """One A/A campaign into ``lake_root`` (``effect``: a true factor on the disaggregated TTFT p50 at (ISL, c))."""
    from tests.unit.synthetic_lake import Campaign

    c = Campaign(lake_root, cid=cid, noise=noise, seed=seed)
    rng = random.Random(seed * 7919 + 13)
    c.experiment("agg", "aggregated")
    c.experiment("disagg", "disaggregated")
    c.experiment("disagg-off", "disaggregated", kv_offload=True)
    c.experiment("disagg-het", "disaggregated", gpu_kind="L40S-48GB")  # same price: an A/A in goodput per $/h
    for e in ("disagg", "disagg-off", "disagg-het"):
        _verified(c, e)
    c.compare("disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3")
    c.compare("offload", "disagg", "disagg-off", "q2,h2", differs="kv_offload")
    c.compare("hetero", "agg", "disagg-het", "h4", differs="mode,gpu_kinds,workers")
    for exp, mode in (("agg", "aggregated"), ("disagg", "disaggregated"), ("disagg-off", "disaggregated"),
                      ("disagg-het", "disaggregated")):
        for r in range(repeats):
            for isl, loads, wl in ((1024, SHORT, "concurrency-sweep"), (8192, LONG, "concurrency-sweep-long")):
                for load in loads:
                    sid = f"{wl}-c{load}-r{r}"
                    sd = noise if not hetero_noise else noise * (0.3 if load <= KNEE[isl] else 2.0)
                    f = (effect or {}).get((isl, load), 1.0) if exp == "disagg" else 1.0
                    ttft = _ttft(isl, load) * f
                    c.noise = sd
                    att = _attainment(isl, load)
                    logit = math.log(att / (1 - att)) + rng.gauss(0.0, 3 * noise)  # a repeat's own attainment
                    errors = 0
                    if overload and load == loads[-1]:
                        errors = int(REQUESTS * min(0.9, max(0.0, rng.gauss(0.25, 0.05))))
                    n_req = REQUESTS if exp != "disagg-off" else 20  # Q2 reads only its $/1M
                    ok = n_req - errors
                    good = sum(rng.random() < 1 / (1 + math.exp(-logit)) for _ in range(ok))
                    c.step(exp, mode, "concurrency_sweep", sid, r, n_requests=n_req, attainment=good / ok if ok else 0,
                           errors=errors, request_ttft_ms=100.0, concurrency=load, isl=isl, osl=512, variant=f"c{load}",
                           ttft_p50_ms=ttft, ttft_p99_ms=ttft * 2.0, itl_p50_ms=20.0 + load / 100,
                           itl_p99_ms=30.0 + load / 50, output_tokens_per_s=50.0 * min(load, KNEE[isl]),
                           request_latency_p50_ms=ttft + 512 * 20.0)
                    _rename(c, wl)
                    if mode == "disaggregated":
                        c.metric(exp, sid, r, "vllm:num_requests_waiting", "avg", c._draw(1 + load / 64),
                                 source="prefill/w-0")
                        c.metric(exp, sid, r, "vllm:num_requests_waiting", "avg", c._draw(1 + load / 64),
                                 source="decode/w-0")
            c.noise = noise
            if exp == "disagg-het":
                continue
            for ratio in (0.0, 0.25, 0.5, 0.75, 1.0):
                sid = f"prefix-cache-p{int(ratio * 100)}-r{r}"
                c.step(exp, mode, "prefix_cache", sid, r, n_requests=10, prefix_ratio=ratio,
                       variant=f"p{int(ratio * 100)}", isl=2048, osl=512, ttft_p50_ms=60.0 * (1 - 0.5 * ratio),
                       output_tokens_per_s=800.0)
                c.cache(exp, mode, sid, r, min(1.0, max(0.0, 0.05 + 0.85 * ratio + rng.gauss(0.0, noise / 2))),
                        offload_blocks=50.0)
            sid = f"multi-turn-r{r}"
            c.step(exp, mode, "multi_turn", sid, r, n_requests=10, variant="c8", isl=512, osl=256, ttft_p50_ms=50.0,
                   output_tokens_per_s=600.0)
            c.cache(exp, mode, sid, r, min(1.0, max(0.0, 0.6 + rng.gauss(0.0, noise / 2))), offload_blocks=50.0,
                    preemptions=max(0.0, round(c._draw(10.0))))
    c.write()


def _rename(c: Any, workload: str) -> None:
    """The synthetic lake names a step's workload after its kind: the two sweeps are two workloads here."""
    c.rows["steps"][-1]["workload"] = workload


def _verified(c: Any, experiment: str) -> None:
    """Each mocker worker's logged transfer model equals the spec's: the transfer path is verified."""
    if hasattr(c, "modelled"):
        c.modelled(experiment)
    else:  # an older synthetic lake (a checkout before the fabric check by use)
        c.network(experiment, engine="local", transfer_modelled={
            f"{experiment}/{r}/w-0": {"kv_transfer_bandwidth": 9.6, "kv_transfer_bytes_per_token": 98304}
            for r in ("prefill", "decode")})


TTFT_LOWER = re.compile(r"TTFT p50: lower at ([^;.]*?c=(\d+))")


def judge_lake(lake: Path, cids: list[str], power_loads: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """Each campaign's answers: whether each came out directional (and, for the power cell, whether Q1 found a
    lower TTFT p50 at one of ``power_loads`` and no higher one)."""
    from benchctl.local.query import QueryEngine
    from benchctl.report.answers import answers
    from benchctl.report.data import load_report_data

    out = []
    with QueryEngine(lake, snapshot=True) as engine:
        for cid in cids:
            data = load_report_data(engine, cid, str(lake))
            got = {a.key: a for a in answers(data)}
            row: dict[str, Any] = {k: got[k].status == "directional" for k in ANSWERS}
            if power_loads:
                v = got["q1"].verdict
                lower = {int(m) for part in re.findall(r"TTFT p50: lower at (.*?)(?:; inconclusive|\. |$)", v)
                         for m in re.findall(r"c=(\d+) \(", part)}
                row["found"] = bool(lower & set(power_loads)) and "TTFT p50: higher" not in v
            out.append(row)
    return out


def run_cell(args: tuple[float, int, int, int, str]) -> tuple[str, list[dict[str, Any]], float]:
    noise, repeats, draws, seed0, kind = args
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aa-") as tmp:
        lake = Path(tmp) / "lake"
        cids = []
        for i in range(draws):
            cid = f"aa-{i:04d}"
            effect = {(1024, 1024): 0.7, (1024, 1536): 0.7} if kind == "power" else None
            draw_campaign(lake, cid, seed0 + i, noise, repeats, effect=effect, overload=kind == "overload",
                          hetero_noise=kind == "overload")
            cids.append(cid)
        rows = judge_lake(lake, cids, (1024, 1536) if kind == "power" else ())
    return f"{kind} noise {noise:.0%} repeats {repeats}", rows, time.perf_counter() - t0


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def share(rows: list[dict[str, Any]], key: str) -> str:
    k = sum(bool(r[key]) for r in rows)
    lo, hi = wilson(k, len(rows))
    return f"{100 * k / len(rows):.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=300, help="A/A campaigns per cell (default 300)")
    ap.add_argument("--cells", default="5:2,5:3,5:5,10:2,10:3,10:5,20:2,20:3,20:5",
                    help="noise%%:repeats, comma-separated (default: the nine cells)")
    ap.add_argument("--jobs", type=int, default=2, help="processes (default 2: this machine's cores)")
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--no-extra", action="store_true", help="skip the power and the overload cells")
    a = ap.parse_args()
    cells = [(int(n) / 100, int(r), a.draws, a.seed + 100_000 * i, "A/A")
             for i, (n, r) in enumerate(x.split(":") for x in a.cells.split(","))]
    if not a.no_extra:
        cells += [(0.10, 3, a.draws, a.seed + 9_000_000, "power"), (0.10, 3, a.draws, a.seed + 9_500_000, "overload")]
    print("SIMULATED: made-up lakes (no engine ran); each row: % of campaigns whose answer came out directional, "
          "[95 % Wilson interval]")
    print(f"{a.draws} campaigns per cell; shape: 9 loads at ISL 1024 + 7 at ISL 8192, {REQUESTS} requests per sweep "
          "step, 5 prefix ratios, a multi-turn step; offload and heterogeneous rungs")
    t0 = time.perf_counter()
    print(f"{'cell':<36} " + " ".join(f"{k:>18}" for k in (*ANSWERS, "any")), flush=True)
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        for label, rows, took in pool.map(run_cell, cells):  # in order, each as soon as it and those before it end
            for r in rows:
                r["any"] = any(r[k] for k in ANSWERS)
            print(f"{label:<36} " + " ".join(f"{share(rows, k):>18}" for k in (*ANSWERS, "any")) + f"   ({took:.0f} s)",
                  flush=True)
            if label.startswith("power"):
                print(f"{'  power: Q1 TTFT p50 lower at c=1024 or 1536, never higher':<36} {share(rows, 'found')}",
                      flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
