"""What refusing impossible JSON costs ingestion: ``benchctl.strict_json.loads_strict`` (non-finite numbers,
duplicate keys, depth, field paths named) against Python's ``json.loads`` on the same text, the baseline measured in
the same run: real AIPerf 0.13.0 artifacts (tests/data/aiperf-0.13.0: a per-request record line, the run summary and
a disaggregated server-metrics export).

Printed per artifact: its bytes, microseconds per parse for each (best of 5 rounds), and the ratio strict/plain.
Last line: the per-record ratio and what it adds per 100,000 requests (a long sweep's order of magnitude).

Usage:
.venv/bin/python bench/strict_ingest.py
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchctl.strict_json import loads_strict  # noqa: E402

DATA = ROOT / "tests" / "data" / "aiperf-0.13.0"


def _best_us(parse: Callable[[str], Any], texts: list[str], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for t in texts:
            parse(t)
        best = min(best, (time.perf_counter() - t0) / len(texts))
    return best * 1e6


def main() -> None:
    records = [line for line in (DATA / "profile_export.head.jsonl").read_text().splitlines() if line.strip()]
    cases = {"a record line (profile_export.jsonl)": records * max(1, 2000 // len(records)),
             "the run summary (profile_export_aiperf.json)": [(DATA / "profile_export_aiperf.json").read_text()] * 50}
    server = sorted((DATA / "disagg").glob("**/server_metrics_export.json"))
    if server:
        cases["server metrics (server_metrics_export.json)"] = [server[0].read_text()] * 5
    ratio_record = 0.0
    print(f"{'artifact':48} {'bytes':>9} {'json µs':>10} {'strict µs':>10} {'ratio':>6}")
    for name, texts in cases.items():
        plain = _best_us(json.loads, texts)
        strict = _best_us(lambda t, where=name: loads_strict(t, where), texts)
        ratio = strict / plain
        ratio_record = ratio_record or ratio
        print(f"{name:48} {len(texts[0]):>9,} {plain:>10.1f} {strict:>10.1f} {ratio:>5.2f}x")
    per_record = _best_us(lambda t: loads_strict(t, "r"), cases["a record line (profile_export.jsonl)"]) - _best_us(
        json.loads, cases["a record line (profile_export.jsonl)"])
    print(f"per record: {ratio_record:.2f}x plain json; +{per_record * 1e5 / 1e6:.1f} s per 100,000 requests")


if __name__ == "__main__":
    main()
