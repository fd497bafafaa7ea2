"""Local campaign efficiency: wall time of the smoke campaign over the sum of its load phases, and where
the overhead per step goes.

The load phases (AIPerf's own benchmark_duration per step) are the physical floor: a campaign can
never take less. The ratio shows what planning, deploys, readiness, warm-up, AIPerf start-up,
ingestion and teardown add around them. Both numbers come from the same run, so machine noise
affects them alike.

The overhead per step ((wall - load) / steps) is split three ways:

* AIPerf's own start-up and shutdown: each step's AIPerf process wall time (fork or spawn to exit)
  minus its benchmark_duration, averaged over the steps;
* ours between steps: from one step's launch to the next step's launch of the same experiment, minus
  the AIPerf process wall time between them (state transitions, the wait for the end, ingest, the
  budget guard, the dataset write), averaged over those step-to-step cycles;
* fixed costs spread over the steps: the rest (plan and predictions, per experiment scale, deploy,
  readiness, smoke and warm-up, teardown, the last step of each experiment, the runner's one start-up).

The AIPerf process's end is the load runner's exit record of it when there is one, else the mtime of
its log (its last line is written just before it exits). Finally the lake's step statistics are checked
against AIPerf's own summaries, step for step, and AIPerf's last server-metrics scrape of every step
(``AIPERF_SERVER_METRICS_COLLECTION_FLUSH_PERIOD``, 0.5 s locally) against the requests the step sent.
Usage:
.venv/bin/python bench/local_campaign.py [SPEC] [--out DIR]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CID = "bench"


def _aiperf_span(rec: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) epoch seconds of a load's AIPerf process, or None when unknown."""
    state = rec.get("state") or {}
    exit_record = state.get("exit_record")
    if exit_record and Path(exit_record).is_file():
        done = json.loads(Path(exit_record).read_text())
        return float(done["started_at"]), float(done["ended_at"])
    log = state.get("log")
    if log and Path(log).is_file() and rec.get("launched_at"):
        return float(rec["launched_at"]), Path(log).stat().st_mtime
    return None


def overhead_split(out: Path) -> dict[str, Any]:
    """Per step: AIPerf's own overhead and ours, from the run store's load records and the raw summaries."""
    run_dir = out / "campaigns" / CID
    raw = out / "lake" / "raw" / f"campaign_id={CID}"
    own: list[float] = []
    ours: list[float] = []
    for exp_dir in sorted((run_dir / "loads").iterdir()):
        recs = []
        for f in exp_dir.glob("*.json"):
            if f.stem == "warmup":
                continue
            rec = json.loads(f.read_text())
            summary = raw / f"experiment={exp_dir.name}" / f"step_id={f.stem}" / "profile_export_aiperf.json"
            span = _aiperf_span(rec)
            if span is None or not summary.is_file():
                continue
            duration = json.loads(summary.read_text())["benchmark_duration"]["avg"]
            recs.append((float(rec["launched_at"]), span))
            own.append(span[1] - span[0] - duration)
        recs.sort()
        for (launched, span), (next_launched, _) in itertools.pairwise(recs):
            ours.append(next_launched - launched - (span[1] - span[0]))
    return {"aiperf": own, "ours": ours}


def lake_matches_aiperf(out: Path) -> tuple[int, list[str]]:
    """Every step row of the lake against its raw ``profile_export_aiperf.json``: (steps, mismatches)."""
    import pyarrow.parquet as pq

    lake = out / "lake"
    fields = {"ttft_p50_ms": ("time_to_first_token", "p50"), "ttft_p99_ms": ("time_to_first_token", "p99"),
              "itl_p50_ms": ("inter_token_latency", "p50"), "itl_p99_ms": ("inter_token_latency", "p99"),
              "request_latency_p50_ms": ("request_latency", "p50"),
              "output_tokens_per_s": ("output_token_throughput", "avg"),
              "request_throughput_per_s": ("request_throughput", "avg")}
    n, bad = 0, []
    for f in sorted((lake / "steps").rglob("*.parquet")):
        if f.name.startswith("."):
            continue
        parts = dict(p.split("=", 1) for p in f.relative_to(lake / "steps").parts[:-1])
        for data in pq.read_table(f).to_pylist():
            row = {**data, **parts}
            if row.get("campaign_id") != CID:
                continue
            n += 1
            summary = json.loads((lake / "raw" / f"campaign_id={CID}" / f"experiment={row['experiment']}"
                                  / f"step_id={row['step_id']}" / "profile_export_aiperf.json").read_text())
            for col, (metric, stat) in fields.items():
                if row[col] != summary[metric][stat]:
                    bad.append(f"{row['experiment']}/{row['step_id']} {col}: {row[col]} != {summary[metric][stat]}")
    return n, bad


def server_metrics_complete(out: Path) -> tuple[int, list[str]]:
    """AIPerf's last server-metrics scrape of every step (after its flush period) against the requests the
    step sent: the frontend's successful requests and each role's workers' ``generate`` requests (summed over
    the role's workers) must each count all of them, else the scrape came before the server had counted the last responses."""
    n, bad = 0, []
    raw = out / "lake" / "raw" / f"campaign_id={CID}"
    for export in sorted(raw.glob("experiment=*/step_id=*/server_metrics_export.json")):
        if export.parent.name == "step_id=warmup":
            continue
        sent = json.loads((export.parent / "profile_export_aiperf.json").read_text())["request_count"]["avg"]
        metrics = json.loads(export.read_text())["metrics"]
        n += 1
        front = sum(s["stats"]["total"] for s in (metrics.get("dynamo_frontend_requests") or {}).get("series", [])
                    if s["labels"].get("status") == "success")
        workers: dict[str, float] = {}  # per role (component), summed over its workers
        for s in (metrics.get("dynamo_component_requests") or {}).get("series", []):
            if s["labels"].get("dynamo_endpoint") == "generate":
                role = str(s["labels"].get("dynamo_component"))
                workers[role] = workers.get(role, 0.0) + s["stats"]["total"]
        where = f"{export.parent.parent.name.split('=')[1]}/{export.parent.name.split('=')[1]}"
        if front != sent:
            bad.append(f"{where} frontend counted {front:g} of {sent:g} requests")
        bad += [f"{where} {c} workers counted {t:g} of {sent:g} requests" for c, t in workers.items() if t != sent]
        if not workers:
            bad.append(f"{where} no worker request counter")
    return n, bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="?", default=str(ROOT / "examples" / "smoke.yaml"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from benchctl.local.runner import run_campaign

    out = Path(args.out or tempfile.mkdtemp(prefix="bench-local-"))
    t0 = time.monotonic()
    result = run_campaign(Path(args.spec), out, campaign_id=CID)
    wall = time.monotonic() - t0
    if result.status != "SUCCEEDED":
        print(f"campaign {result.status}: {result.error} {result.cause}", file=sys.stderr)
        return 1
    load = 0.0
    steps = 0
    for summary in (out / "lake" / "raw" / f"campaign_id={CID}").glob("experiment=*/step_id=*/profile_export_aiperf.json"):
        if summary.parent.name == "step_id=warmup":
            continue
        load += json.loads(summary.read_text())["benchmark_duration"]["avg"]
        steps += 1
    total = (wall - load) / steps
    split = overhead_split(out)
    own = statistics.fmean(split["aiperf"]) if split["aiperf"] else float("nan")
    ours = statistics.fmean(split["ours"]) if split["ours"] else float("nan")
    print(f"results in:              {out}")
    print(f"steps measured:          {steps}")
    print(f"sum of load phases:      {load:8.1f} s  (AIPerf benchmark_duration, the floor)")
    print(f"campaign wall time:      {wall:8.1f} s")
    print(f"wall / load ratio:       {wall / load:8.2f}x")
    print(f"overhead per step:       {total:8.1f} s  (total)")
    print(f"  AIPerf's own:          {own:8.2f} s  (process wall - benchmark_duration, mean of "
          f"{len(split['aiperf'])} steps; range {min(split['aiperf'], default=0):.2f}-"
          f"{max(split['aiperf'], default=0):.2f})")
    print(f"  ours between steps:    {ours:8.2f} s  (launch to next launch - AIPerf wall, mean of "
          f"{len(split['ours'])} cycles; range {min(split['ours'], default=0):.2f}-{max(split['ours'], default=0):.2f})")
    print(f"  fixed costs per step:  {total - own - ours:8.2f} s  (plan, deploys, warm-ups, teardowns, ... / {steps})")
    n, bad = lake_matches_aiperf(out)
    print(f"lake step statistics = AIPerf summaries: {n - len({b.split()[0] for b in bad})}/{n} steps")
    for b in bad:
        print(f"  MISMATCH {b}")
    m, late = server_metrics_complete(out)
    print(f"server metrics' last scrape counted every request (frontend and each worker): "
          f"{m - len({b.split()[0] for b in late})}/{m} steps")
    for b in late:
        print(f"  INCOMPLETE {b}")
    return 1 if bad or late or n != steps or m != steps else 0


if __name__ == "__main__":
    sys.exit(main())
