"""How close is the local twin to the GPU prediction? The smoke spec's concurrency sweep, every load, run on the
twin (``mocker.twin: auto``: the mocker timed by aiconfigurator's profile of the pool's GPU) through the whole
local engine, each step's measured TTFT p50 and ITL p50 beside ``benchctl predict``'s for the same step (the
``predictions`` table the local runner writes), with the error and the count within 25 %.

The prediction and the twin come from the same aiconfigurator, so the error is the twin's fidelity on this
machine (the mocker's scheduler against aiconfigurator's closed-loop model, the local client and frontend on
2 cores): what the rehearsal can say about a GPU, not a GPU measurement. The machine's load average before and
after says how shared the cores were.

Usage:
.venv/bin/python bench/twin_vs_predict.py [SPEC] [--out DIR] [--twin auto|off]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CID = "twin-bench"
BAND = 0.25


def sweep_spec(spec: dict[str, Any], twin: str) -> dict[str, Any]:
    """The spec cut to its concurrency sweep (every load), its experiments on ``mocker.twin: twin``."""
    sweeps = [w for w in spec["workloads"] if w.get("kind") == "concurrency_sweep"]
    if not sweeps:
        raise SystemExit("the spec has no concurrency_sweep workload")
    out = {**spec, "name": f"{spec.get('name', 'spec')}-twin", "workloads": [sweeps[0]]}
    out.pop("comparisons", None)  # they may name workloads that are gone
    out["experiments"] = [{**e, "mocker": {**(e.get("mocker") or {}), "twin": twin}} for e in spec["experiments"]]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="?", default=str(ROOT / "examples" / "smoke.yaml"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--twin", default="auto", help="the experiments' mocker.twin (off: the mocker's default timing)")
    args = ap.parse_args()

    from benchctl.local.lake import LocalLake
    from benchctl.local.runner import run_campaign

    out = Path(args.out or tempfile.mkdtemp(prefix="bench-twin-"))
    out.mkdir(parents=True, exist_ok=True)
    spec_path = out / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(sweep_spec(yaml.safe_load(Path(args.spec).read_text()), args.twin),
                                        sort_keys=False))
    load_before, t0 = os.getloadavg(), time.monotonic()
    result = run_campaign(spec_path, out, campaign_id=CID)
    wall, load_after = time.monotonic() - t0, os.getloadavg()
    if result.status != "SUCCEEDED":
        print(f"campaign {result.status}: {result.error} {result.cause}", file=sys.stderr)
        return 1
    lake = LocalLake(out / "lake")
    steps = {(s["experiment"], s["step_id"]): s for s in lake.read_table("steps", CID)}
    print(f"results in: {out}   mocker.twin: {args.twin}   campaign wall {wall:.0f} s   load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after ({os.cpu_count()} cores)")
    print(f"{'mode':15s} {'c':>4s} {'TTFT p50 twin / predict':>26s} {'err':>8s} {'ITL p50 twin / predict':>25s} "
          f"{'err':>8s}")
    within = total = 0
    for p in sorted(lake.read_table("predictions", CID), key=lambda r: (r["mode"], int(r["concurrency"]))):
        s = steps.get((p["experiment"], p["step_id"]))
        if s is None:
            continue
        cells = []
        for metric in ("ttft", "itl"):
            twin, pred = s[f"{metric}_p50_ms"], p[f"predicted_{metric}_ms"]
            err = None if twin is None or not pred else (twin - pred) / pred
            total += 1
            within += err is not None and abs(err) <= BAND
            cells.append((twin, pred, err))
        print(f"{p['mode']:15s} {int(p['concurrency']):>4d} " + " ".join(
            f"{'n/a' if t is None else f'{t:.2f}':>12s} / {pred:>8.2f} "
            f"{'n/a' if e is None else f'{e * 100:+.0f} %':>8s}" for t, pred, e in cells))
    print(f"within {BAND:.0%} of benchctl predict: {within} of {total} figures")
    return 0 if within == total else 1


if __name__ == "__main__":
    sys.exit(main())
