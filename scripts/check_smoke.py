"""Check what `make smoke` printed (CI runs it right after the README's first command):

* the campaign ended ``SUCCEEDED``;
* every comparison view it printed has rows, and rows for BOTH modes: in the side-by-side views
  (``agg_*``/``disagg_*`` columns) some row has an aggregated and a disaggregated figure; in the
  per-experiment views the experiments listed include the aggregated and the disaggregated one
  (named by the side-by-side views' ``agg_experiment``/``disagg_experiment``);
* the report it names exists.

Usage: ``python scripts/check_smoke.py SMOKE_OUTPUT_FILE``; exit 0, or 1 with one line per problem.
Standard library only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

TITLE = re.compile(r"^(v_\w+) \(SIMULATED\)$")
COUNT = re.compile(r"^\((\d+) rows?\)$")
SUCCEEDED = re.compile(r"^campaign (\S+): SUCCEEDED in \d+ s$", re.M)
REPORT = re.compile(r"^the report \([^)]*\): (\S+\.html)$", re.M)
EXPECTED = ("v_concurrency_sweep", "v_multi_turn", "v_sequence_distribution", "v_prefix_cache",
            "v_cost_efficiency", "v_pareto")


def parse_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """{view: rows as {column: cell text}} of every ``<view> (SIMULATED)`` table in the output; the
    column spans come from the dashes line under the header, so empty cells are read as empty."""
    lines = text.splitlines()
    tables: dict[str, list[dict[str, str]]] = {}
    for i, line in enumerate(lines):
        m = TITLE.match(line.strip())
        if not m or i + 2 >= len(lines):
            continue
        header, dashes = lines[i + 1], lines[i + 2]
        spans = [(d.start(), d.end()) for d in re.finditer(r"-+", dashes)]
        names = [header[a:b + 1].strip() or header[a:].split()[0] for a, b in spans]
        rows = []
        for row in lines[i + 3:]:
            if COUNT.match(row.strip()) or not row.strip():
                break
            padded = row.ljust(spans[-1][1] if spans else 0)
            cells = [padded[a:b].strip() for a, b in spans[:-1]] + [padded[spans[-1][0]:].strip()] if spans else []
            rows.append(dict(zip(names, cells, strict=False)))
        tables[m.group(1)] = rows
    return tables


def problems(text: str) -> list[str]:
    out = []
    done = SUCCEEDED.search(text)
    if not done:
        out.append("no 'campaign <id>: SUCCEEDED in N s' line: the campaign did not succeed")
    tables = parse_tables(text)
    for view in EXPECTED:
        if view not in tables:
            out.append(f"{view}: not printed")
        elif not tables[view]:
            out.append(f"{view}: no rows")
    modes: dict[str, str] = {}
    for rows in tables.values():
        for r in rows:
            for mode in ("agg", "disagg"):
                if r.get(f"{mode}_experiment"):
                    modes[r[f"{mode}_experiment"]] = mode
    for view, rows in tables.items():
        if not rows:
            continue
        cols = rows[0].keys()
        figures = {m: [c for c in cols if c.startswith(f"{m}_") and c != f"{m}_experiment"] for m in ("agg", "disagg")}
        if figures["agg"] and figures["disagg"]:
            for mode, fig_cols in figures.items():
                if not any(r.get(c) for r in rows for c in fig_cols):
                    out.append(f"{view}: no {mode} figure in any row")
        elif "experiment" in cols:
            seen = {modes.get(r["experiment"]) for r in rows}
            for mode in ("agg", "disagg"):
                if mode not in seen:
                    out.append(f"{view}: no row of the {mode} experiment ({sorted(r['experiment'] for r in rows)})")
        else:
            out.append(f"{view}: cannot tell the modes apart (no agg_/disagg_ columns, no experiment column)")
    report = REPORT.search(text)
    if not report:
        out.append("no report path printed")
    elif not Path(report.group(1)).is_file() or Path(report.group(1)).stat().st_size == 0:
        out.append(f"the report {report.group(1)} does not exist or is empty")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = problems(Path(argv[1]).read_text(encoding="utf-8", errors="replace"))
    for p in found:
        print(f"check_smoke: {p}", file=sys.stderr)
    if not found:
        print("check_smoke: SUCCEEDED; every view has rows for both modes; the report exists")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
