"""A campaign with ``concurrency: auto`` on the twin: the search locates each mode's SLO edge by itself, from
the attainment its own probes measured, within its resolution and its budget line; the lake and the report say
which loads it chose."""

from __future__ import annotations

import json
from pathlib import Path

from benchctl.analysis.search import Measured, bound_level, bracket, located
from tests.e2e.conftest import leftovers, read_table, start_run, write_spec

MAX_PROBES = 5


def _auto_spec(tmp_path: Path) -> Path:
    def mutate(d: dict) -> None:
        d["name"] = "edge-search"
        d["workloads"] = [{"kind": "concurrency_sweep", "name": "sweep", "concurrency": "auto", "isl": 256,
                           "osl": 32, "duration_s": 4,
                           "search": {"start": 4, "max_probes": MAX_PROBES, "resolution": 0.1}}]
        d["warmup"] = {"request_count": 4}

    return write_spec(tmp_path, "edge-search", mutate)


def test_concurrency_auto_brackets_each_modes_edge_within_its_resolution(tmp_path: Path, reaper: list) -> None:
    out = tmp_path / "out"
    reaper.append(out / "campaigns" / "e2e")
    proc = start_run(_auto_spec(tmp_path), out)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    assert not leftovers(out / "campaigns" / "e2e")
    steps = read_table(out / "lake", "steps")
    comparisons = {c["confidence"] for c in read_table(out / "lake", "comparisons")}
    level = bound_level(comparisons.pop())
    requests = read_table(out / "lake", "requests")
    for exp in ("agg", "disagg"):
        probes = sorted((r for r in steps if r["experiment"] == exp), key=lambda r: r["step_index"])
        # every step is a probe; its load is in the lake (variant c<load>), its decision beside it
        assert probes and all(r["search_probe"] is not None for r in probes)
        assert len(probes) <= MAX_PROBES
        assert [r["variant"] for r in probes] == [f"c{r['concurrency']}" for r in probes]
        assert probes[0]["concurrency"] == 4 and len({r["concurrency"] for r in probes}) == len(probes)
        decisions = [json.loads(r["search_json"]) for r in probes]
        assert [d["load"] for d in decisions] == [r["concurrency"] for r in probes]
        # the bracket, recomputed here from the requests the lake holds (the views' goodput rule)
        points = []
        for r in probes:
            rows = [q for q in requests if q["experiment"] == exp and q["step_id"] == r["step_id"]]
            good = sum(1 for q in rows if q["error_type"] is None and q["ttft_ms"] is not None
                       and q["ttft_ms"] <= r["slo_ttft_ms"] and q["itl_ms"] is not None
                       and q["itl_ms"] <= r["slo_itl_ms"])
            points.append(Measured(int(r["concurrency"]), good, len(rows)))
        within, past = bracket(points, 0.9, level)
        assert located(within, past, 0.1), (exp, within, past, [(p.load, p.good, p.n) for p in points])
        # and the probe after the last one that ran said so, or the budget line was reached at the edge
        run_dir = out / "campaigns" / "e2e" / "loads" / exp
        skipped = [json.loads(f.read_text()) for f in sorted(run_dir.glob("sweep-s*-r0.json"))]
        whys = [s["search"]["why"] for s in skipped if s.get("state", {}).get("skipped")]
        assert len(probes) == MAX_PROBES or any(w.startswith("located") for w in whys), whys
    report = (out / "campaigns" / "e2e" / "report" / "report.html").read_text()
    assert "Loads the SLO-edge search chose" in report
