"""Local campaign efficiency: wall time of the smoke campaign over the sum of its load phases.

The load phases (AIPerf's own benchmark_duration per step) are the physical floor: a campaign can
never take less. The ratio shows what planning, deploys, readiness, warm-up, AIPerf start-up,
ingestion and teardown add around them. Both numbers come from the same run, so machine noise
affects them alike. Usage: .venv/bin/python bench/local_campaign.py [SPEC] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="?", default=str(ROOT / "examples" / "smoke.yaml"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from benchctl.local.runner import run_campaign

    out = Path(args.out or tempfile.mkdtemp(prefix="bench-local-"))
    t0 = time.monotonic()
    result = run_campaign(Path(args.spec), out, campaign_id="bench")
    wall = time.monotonic() - t0
    if result.status != "SUCCEEDED":
        print(f"campaign {result.status}: {result.error} {result.cause}", file=sys.stderr)
        return 1
    load = 0.0
    steps = 0
    for summary in (out / "lake" / "raw" / "campaign_id=bench").glob("experiment=*/step_id=*/profile_export_aiperf.json"):
        if summary.parent.name == "step_id=warmup":
            continue
        load += json.loads(summary.read_text())["benchmark_duration"]["avg"]
        steps += 1
    print(f"steps measured:          {steps}")
    print(f"sum of load phases:      {load:8.1f} s  (AIPerf benchmark_duration, the floor)")
    print(f"campaign wall time:      {wall:8.1f} s")
    print(f"wall / load ratio:       {wall / load:8.2f}x")
    print(f"overhead per step:       {(wall - load) / steps:8.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
