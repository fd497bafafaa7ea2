"""The report's verdicts under the null, and their power: made-up campaigns in which both sides of every comparison
are drawn from one distribution (A/A), at the seed plan's size, written through the project's lake writer
(tests/unit/synthetic_lake.py, the schema's own row checks), read through the real SQL views (DuckDB) and the
real ``answers()``. Per cell (a world: the idealised one, or one level of the world's variance at a time, or
them together; at the design's deployments x repeats per side) it prints, for each of the eight answers, the share
of A/A campaigns that came out "directional" with its 95 % Wilson interval; then the power cell: a true -30 % TTFT
p50 at the two highest loads (the same design, 10 % noise, a 5 % deployment spread), found with the right sign.

SIMULATED: no engine runs; every figure is drawn. The campaign's shape (the seed plan): an aggregated and a
disaggregated experiment (q1, q3, q4, h1, h3), an offload rung of the disaggregated one (q2, h2) and a
heterogeneous one beside the aggregated (h4); concurrency sweeps of 9 loads at ISL 1024 and 7 at ISL 8192, 200
requests per step (attainment falling past a knee, drawn per step); 5 prefix-duplication ratios; a multi-turn
step; the prefill and decode waiting queues; every disaggregated transfer path verified.

Usage: .venv/bin/python bench/aa_false_positive.py [--draws N] [--design 5:1] [--worlds deploy-5,...] [--jobs 2]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ANSWERS = ("q1", "q2", "q3", "q4", "h1", "h2", "h3", "h4")
SHORT = (1, 4, 16, 32, 64, 256, 512, 1024, 1536)  # the seed plan's ISL 1024 sweep
LONG = (1, 4, 16, 64, 128, 192, 256)  # its ISL 8192 sweep
KNEE = {1024: 512, 8192: 128}  # the last load within the SLO (the seed plan's predicted edges)
REQUESTS = 200


def _ttft(isl: int, c: float) -> float:
    """A made-up TTFT p50 (ms) curve: flat, then queueing past the knee."""
    base = 40.0 * isl / 1024
    return base * (1.0 + (c / KNEE[isl]) ** 2)


def _attainment(isl: int, c: float) -> float:
    """The true share of requests within the SLO at a load: 0.99 up to the knee, then falling."""
    k = KNEE[isl]
    return 0.99 if c <= k else max(0.05, 0.99 - 0.6 * math.log2(c / k))


@dataclass(frozen=True)
class World:
    """What varies in the made-up world besides each step's own noise: ``deploy_sd``, each deployment's speed
    offset (a multiplicative factor exp(N(0, sd)) on its latencies and throughput, shared by all its repeats and
    loads; its SLO attainment that of the load scaled by it: a slower deployment leaves the SLO earlier); ``overdisp``, the per-step logit spread of SLO attainment (None: the
    bench's historic 3 x noise); ``client_bound``, steps on one side (drawn per campaign) where the load generator
    fell behind: at the sweeps' three highest loads, half the steps sent only half their load (their figures are
    those of the lighter load) and say so in their client columns."""

    deploy_sd: float = 0.0
    overdisp: float | None = None
    client_bound: bool = False

    def label(self) -> str:
        parts = [f"deploy sd {self.deploy_sd:.0%}" if self.deploy_sd else "",
                 f"overdisp {self.overdisp:g}" if self.overdisp is not None else "",
                 "client-bound steps" if self.client_bound else ""]
        return ", ".join(p for p in parts if p) or "idealised"


def _unit(exp: str, k: int, deployments: int) -> str:
    return exp if deployments <= 1 else f"{exp}--d{k}"


def _has_deployment_column() -> bool:
    """The checkout's lake has a ``deployment`` column (a checkout before deployments: none)."""
    from benchctl.lake.tables import TABLES

    return any(name == "deployment" for name, _ in TABLES["steps"].columns)


def draw_campaign(lake_root: Path, cid: str, seed: int, noise: float, repeats: int, *, deployments: int = 1,
                  effect: dict[tuple[int, int], float] | None = None, overload: bool = False,
                  hetero_noise: bool = False, world: World = World()) -> None:
    """One A/A campaign into ``lake_root`` (``effect``: a true factor on the disaggregated TTFT p50 at (ISL, c));
    each experiment deployed ``deployments`` times, ``repeats`` on each."""
    from tests.unit.synthetic_lake import Campaign

    c = Campaign(lake_root, cid=cid, noise=noise, seed=seed)
    rng = random.Random(seed * 7919 + 13)
    with_column = _has_deployment_column()
    c.experiment("agg", "aggregated")
    c.experiment("disagg", "disaggregated")
    c.experiment("disagg-off", "disaggregated", kv_offload=True)
    c.experiment("disagg-het", "disaggregated", gpu_kind="L40S-48GB")  # same price: an A/A in goodput per $/h
    for e in ("disagg", "disagg-off", "disagg-het"):
        _verified(c, e)
    c.compare("disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3")
    c.compare("offload", "disagg", "disagg-off", "q2,h2", differs="kv_offload")
    c.compare("hetero", "agg", "disagg-het", "h4", differs="mode,gpu_kinds,workers")
    bound_side = rng.choice(("agg", "disagg")) if world.client_bound else None
    total = repeats * deployments
    for exp, mode in (("agg", "aggregated"), ("disagg", "disaggregated"), ("disagg-off", "disaggregated"),
                      ("disagg-het", "disaggregated")):
        speed = {k: math.exp(rng.gauss(0.0, world.deploy_sd)) if world.deploy_sd else 1.0
                 for k in range(1, deployments + 1)}
        for r in range(total):
            k = r // repeats + 1
            slow = speed[k]  # > 1: a slower deployment (latencies up, the load it serves effectively higher)
            extra = {"deployment": _unit(exp, k, deployments)} if with_column else {}
            for isl, loads, wl in ((1024, SHORT, "concurrency-sweep"), (8192, LONG, "concurrency-sweep-long")):
                for load in loads:
                    sid = f"{wl}-c{load}-r{r}"
                    sd = noise if not hetero_noise else noise * (0.3 if load <= KNEE[isl] else 2.0)
                    f = (effect or {}).get((isl, load), 1.0) if exp == "disagg" else 1.0
                    behind = exp == bound_side and load in loads[-3:] and rng.random() < 0.5
                    served = load / 2 if behind else load  # the load the server saw
                    client = ({"client_on_time_fraction": 0.55, "client_issue_lag_p95_ms": 80.0,
                               "client_lag_budget_ms": 5.0} if behind else
                              {"client_on_time_fraction": 0.99, "client_issue_lag_p95_ms": 1.0,
                               "client_lag_budget_ms": 5.0})
                    ttft = _ttft(isl, served) * f * slow  # the deployment's offset multiplies its latencies
                    c.noise = sd
                    att = _attainment(isl, served * slow)
                    spread = world.overdisp if world.overdisp is not None else 3 * noise
                    logit = math.log(att / (1 - att)) + rng.gauss(0.0, spread)  # a step's own attainment
                    errors = 0
                    if overload and load == loads[-1]:
                        errors = int(REQUESTS * min(0.9, max(0.0, rng.gauss(0.25, 0.05))))
                    n_req = REQUESTS if exp != "disagg-off" else 20  # Q2 reads only its $/1M
                    ok = n_req - errors
                    good = sum(rng.random() < 1 / (1 + math.exp(-logit)) for _ in range(ok))
                    c.step(exp, mode, "concurrency_sweep", sid, r, n_requests=n_req, attainment=good / ok if ok else 0,
                           errors=errors, request_ttft_ms=100.0, concurrency=load, isl=isl, osl=512, variant=f"c{load}",
                           ttft_p50_ms=ttft, ttft_p99_ms=ttft * 2.0, itl_p50_ms=(20.0 + served / 100) * slow,
                           itl_p99_ms=(30.0 + served / 50) * slow,
                           output_tokens_per_s=50.0 * min(served, KNEE[isl]) / slow,
                           request_latency_p50_ms=ttft + 512 * 20.0 * slow, **client, **extra)
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
                       variant=f"p{int(ratio * 100)}", isl=2048, osl=512, ttft_p50_ms=60.0 * (1 - 0.5 * ratio) * slow,
                       output_tokens_per_s=800.0 / slow, **extra)
                c.cache(exp, mode, sid, r, min(1.0, max(0.0, 0.05 + 0.85 * ratio + rng.gauss(0.0, noise / 2))),
                        offload_blocks=50.0)
            sid = f"multi-turn-r{r}"
            c.step(exp, mode, "multi_turn", sid, r, n_requests=10, variant="c8", isl=512, osl=256,
                   ttft_p50_ms=50.0 * slow, output_tokens_per_s=600.0 / slow, **extra)
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


@dataclass(frozen=True)
class Cell:
    kind: str  # "A/A" | "power" | "overload"
    noise: float
    deployments: int
    repeats: int
    draws: int
    seed: int
    world: World = World()

    def label(self) -> str:
        return (f"{self.kind} noise {self.noise:.0%} {self.deployments}x{self.repeats}"
                + (f" [{self.world.label()}]" if self.world != World() else ""))


def run_cell(cell: Cell) -> tuple[str, list[dict[str, Any]], float]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aa-") as tmp:
        lake = Path(tmp) / "lake"
        cids = []
        for i in range(cell.draws):
            cid = f"aa-{i:04d}"
            effect = {(1024, 1024): 0.7, (1024, 1536): 0.7} if cell.kind == "power" else None
            draw_campaign(lake, cid, cell.seed + i, cell.noise, cell.repeats, deployments=cell.deployments,
                          effect=effect, overload=cell.kind == "overload", hetero_noise=cell.kind == "overload",
                          world=cell.world)
            cids.append(cid)
        rows = judge_lake(lake, cids, (1024, 1536) if cell.kind == "power" else ())
    return cell.label(), rows, time.perf_counter() - t0


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


WORLD_CELLS = {  # the world's levels (issue: each axis alone at each level, the three together at the middle)
    "deploy-2": World(deploy_sd=0.02),
    "deploy-5": World(deploy_sd=0.05),
    "overdisp-0.3": World(overdisp=0.3),
    "overdisp-0.6": World(overdisp=0.6),
    "client-bound": World(client_bound=True),
    "together": World(deploy_sd=0.02, overdisp=0.3, client_bound=True),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=300, help="A/A campaigns per cell (default 300)")
    ap.add_argument("--design", default="5:1", help="deployments:repeats per experiment (default 5:1, the seed "
                    "plan's)")
    ap.add_argument("--noise", type=float, default=10.0, help="each step's relative noise, %% (default 10)")
    ap.add_argument("--worlds", default=",".join(["idealised", *WORLD_CELLS]),
                    help="the A/A cells: idealised and the world's levels (default all: " + ", ".join(WORLD_CELLS) + ")")
    ap.add_argument("--cells", default="", help="also the idealised world at noise%%:deployments:repeats, "
                    "comma-separated (e.g. 5:1:3,20:1:5)")
    ap.add_argument("--jobs", type=int, default=2, help="processes (default 2: this machine's cores)")
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--no-extra", action="store_true", help="skip the power and the overload cells")
    a = ap.parse_args()
    d, r = (int(x) for x in a.design.split(":"))
    noise = a.noise / 100
    cells = []
    for i, name in enumerate(w for w in a.worlds.split(",") if w):
        world = World() if name == "idealised" else WORLD_CELLS[name]
        cells.append(Cell("A/A", noise, d, r, a.draws, a.seed + 100_000 * i, world))
    for i, spec in enumerate(x for x in a.cells.split(",") if x):
        n, dd, rr = (int(v) for v in spec.split(":"))
        cells.append(Cell("A/A", n / 100, dd, rr, a.draws, a.seed + 5_000_000 + 100_000 * i))
    if not a.no_extra:
        cells += [Cell("power", noise, d, r, a.draws, a.seed + 9_000_000, World(deploy_sd=0.05)),
                  Cell("overload", noise, d, r, a.draws, a.seed + 9_500_000)]
    print("SIMULATED: made-up lakes (no engine ran); each row: % of campaigns whose answer came out directional, "
          "[95 % Wilson interval]")
    print(f"{a.draws} campaigns per cell; design {d} deployment(s) x {r} repeat(s) per experiment; shape: 9 loads at "
          f"ISL 1024 + 7 at ISL 8192, {REQUESTS} requests per sweep step, 5 prefix ratios, a multi-turn step; offload "
          "and heterogeneous rungs")
    t0 = time.perf_counter()
    print(f"{'cell':<64} " + " ".join(f"{k:>18}" for k in (*ANSWERS, "any")), flush=True)
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        for label, rows, took in pool.map(run_cell, cells):  # in order, each as soon as it and those before it end
            for row in rows:
                row["any"] = any(row[k] for k in ANSWERS)
            print(f"{label:<64} " + " ".join(f"{share(rows, k):>18}" for k in (*ANSWERS, "any")) + f"   ({took:.0f} s)",
                  flush=True)
            if label.startswith("power"):
                print(f"{'  power: Q1 TTFT p50 lower at c=1024 or 1536, never higher':<64} {share(rows, 'found')}",
                      flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
