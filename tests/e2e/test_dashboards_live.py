"""The dashboards show data: every query of every dashboard of ``dashboards/`` evaluated on real engines against the
session's smoke campaign (benchctl/dashboards.py says how Grafana's variables and macros are substituted).

* PromQL: a real Prometheus (Debian's) scraped the campaign with the platform's own scrape jobs
  (``benchctl.monitors``: job names, labels, intervals) and the recorded expositions of what the local engine
  cannot expose (tests/data/recorded/: DCGM, KVBM, vLLM's NIXL and prefix-cache counters); each query runs through
  its HTTP API over the campaign's window and must return plausible numbers for its panel's unit.
* SQL: each panel of the results dashboard runs on the campaign's lake through the report's DuckDB engine
  (Athena's dialect) and must return rows.

The counts (live, recorded, lake) are written to ``$BENCHCTL_ARTIFACTS/dashboards-live.json`` (default
``runs/artifacts/``).
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchctl import dashboards as dq
from benchctl.local.query import QueryEngine
from benchctl.spec.model import load_spec
from tests.prometheus_harness import RECORDED_POD, Prometheus

ROOT = Path(__file__).resolve().parents[2]
PROM_DASHBOARDS = ("dynamo-platform.json", "kvbm.json", "gpu-dcgm.json")
SQL_DASHBOARDS = ("benchctl-results.json",)
ARTIFACTS = Path(os.environ.get("BENCHCTL_ARTIFACTS", ROOT / "runs" / "artifacts"))


@pytest.fixture(scope="module")
def finished(smoke_campaign, smoke_prometheus) -> tuple[Path, Prometheus, float, float]:
    res, out = smoke_campaign
    assert res.returncode == 0, res.stdout[-3000:]
    assert smoke_prometheus.window is not None
    start, end = smoke_prometheus.window
    return out, smoke_prometheus, start, end


@pytest.fixture(scope="module")
def prom_outcomes(finished) -> list[dq.Outcome]:
    _, prom, start, end = finished
    out: list[dq.Outcome] = []
    for name in PROM_DASHBOARDS:
        out += dq.check_prometheus(prom, name, dq.load(dq.DASHBOARDS / name), start, end)
    return out


@pytest.fixture(scope="module")
def sql_outcomes(finished) -> list[dq.Outcome]:
    out_dir, _, start, end = finished
    with QueryEngine(out_dir / "lake") as engine:
        return [o for name in SQL_DASHBOARDS
                for o in dq.check_sql(engine, name, dq.load(dq.DASHBOARDS / name), start, end)]


def test_the_variables_take_the_runs_own_values(finished) -> None:
    _, prom, start, end = finished
    spec = load_spec(ROOT / "examples" / "smoke.yaml")
    got = {name: dq.prom_values(prom, dq.load(dq.DASHBOARDS / name), start, end) for name in PROM_DASHBOARDS}
    assert got["dynamo-platform.json"] == {"namespace": [spec.kubernetes.namespace], "model": [spec.model.name]}
    assert got["kvbm.json"] == {"namespace": [spec.kubernetes.namespace], "pod": [RECORDED_POD]}
    # the recorded dcgm-exporter's own labels (Hostname: the node, as dcgm-exporter 4.5.x and earlier name it)
    assert got["gpu-dcgm.json"] == {"Hostname": ["i-030791dc5a37cd257"], "gpu": ["0"]}


def test_every_promql_query_returns_plausible_numbers(prom_outcomes: list[dq.Outcome]) -> None:
    failures = [o.failure for o in prom_outcomes if o.failure]
    assert not failures, f"{len(failures)} of {len(prom_outcomes)} PromQL queries failed:\n" + "\n".join(failures)
    assert len(prom_outcomes) == 70


def test_every_sql_panel_returns_rows_from_the_lake(sql_outcomes: list[dq.Outcome]) -> None:
    failures = [o.failure for o in sql_outcomes if o.failure]
    assert not failures, f"{len(failures)} of {len(sql_outcomes)} SQL queries failed:\n" + "\n".join(failures)
    assert len(sql_outcomes) == 16


def test_what_the_local_engine_exposes_is_charted_from_the_live_run(prom_outcomes: list[dq.Outcome]) -> None:
    """The Dynamo frontend's and workers' panels read the run's own processes; only DCGM, KVBM and vLLM's NIXL
    and prefix-cache counters come from recordings. The counts go to the artifacts."""
    by = {o.target.where(): o.source for o in prom_outcomes}
    recorded = sorted(w for w, s in by.items() if s == "recorded")
    assert all(w.startswith(("gpu-dcgm.json", "kvbm.json")) or "NIXL" in w for w in recorded), recorded
    frontend = [o for o in prom_outcomes if o.target.dashboard == "dynamo-platform.json" and o.target.panel_id <= 17]
    assert frontend and all(o.source == "live" for o in frontend), [(o.target.where(), o.source) for o in frontend]
    counts = {k: sum(1 for s in by.values() if s == k) for k in ("live", "recorded", "mixed", "none")}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "dashboards-live.json").write_text(json.dumps(
        {"promql": counts, "recorded": recorded,
         "queries": [{"where": o.target.where(), "source": o.source, "numbers": o.numbers, "expr": o.expr}
                     for o in prom_outcomes]}, indent=2) + "\n")


def test_the_frontend_latency_panels_agree_with_the_clients_figures_in_unit(finished) -> None:
    """A unit off by 1,000 passes a range check: the TTFT and ITL p50 panels (seconds) must lie within a factor of
    three of what AIPerf measured in the same campaign (the lake's per-step p50s, in ms)."""
    out_dir, prom, start, end = finished
    dash = dq.load(dq.DASHBOARDS / "dynamo-platform.json")
    subs = {k: dq.format_multi(v) for k, v in dq.prom_values(prom, dash, start, end).items()}
    by_panel = {(t.panel_id, t.ref): t for t in dq.targets("dynamo-platform.json", dash)}
    with QueryEngine(out_dir / "lake") as engine:
        _, rows = engine.run("SELECT median(ttft_p50_ms), median(itl_p50_ms) FROM steps WHERE status = 'succeeded'")
    client_ttft_s, client_itl_s = rows[0][0] / 1000, rows[0][1] / 1000
    for (panel, ref), client in (((9, "A"), client_ttft_s), ((10, "A"), client_itl_s)):
        t = by_panel[(panel, ref)]
        _, numbers = dq.evaluate(prom, t, dq.substitute(t.text, subs, dq.macros(start, end)), start, end)
        served = statistics.median(numbers)
        assert client / 3 <= served <= client * 3, (t.where(), served, client)


def test_a_broken_label_matcher_fails_naming_the_dashboard_panel_and_query(finished) -> None:
    _, prom, start, end = finished
    dash = copy.deepcopy(dq.load(dq.DASHBOARDS / "dynamo-platform.json"))
    panel = next(p for p in dash["panels"] if p["id"] == 1)
    good = panel["targets"][0]["expr"]
    panel["targets"][0]["expr"] = good.replace('model=~"$model"', 'model_name=~"$model"')  # vLLM's label name
    assert panel["targets"][0]["expr"] != good
    failures = [o.failure for o in dq.check_prometheus(prom, "dynamo-platform.json", dash, start, end) if o.failure]
    assert len(failures) == 1, failures
    assert failures[0].startswith("dynamo-platform.json panel 1 'Frontend request rate' query A: no data")
    assert 'model_name=~"Qwen/Qwen3-30B-A3B"}' in failures[0]


def _benchctl(*args: str) -> subprocess.CompletedProcess[str]:
    bin_ = Path(sys.executable).parent / "benchctl"
    return subprocess.run([str(bin_), *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_the_command_line_check_passes_every_query_and_names_what_an_exporter_upgrade_empties(finished,
                                                                                             tmp_path) -> None:
    """`benchctl dashboards` (what a person runs on the cluster's Prometheus before the GPU campaign) on the same
    Prometheus: every query passes; then the GPU dashboard as dcgm-exporter after 4.5.3-4.8.2 would need it (its
    host label renamed `hostname`, NVIDIA/dcgm-exporter PR #655) against this exporter fails, naming each panel."""
    _, prom, start, end = finished
    window = ("--start", f"{start:.3f}", "--end", f"{end:.3f}")
    res = _benchctl("dashboards", "--prometheus", prom.url, *window)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert "70 of 70 PromQL queries returned plausible numbers" in res.stdout
    upgraded = tmp_path / "gpu-dcgm.json"
    upgraded.write_text((dq.DASHBOARDS / "gpu-dcgm.json").read_text().replace(
        'Hostname=~\\"$Hostname\\"', 'hostname=~\\"$Hostname\\"'))
    res = _benchctl("dashboards", "--prometheus", prom.url, *window, "--dashboard", str(upgraded), "--format", "json")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr
    body = json.loads(res.stdout)
    failed = [r["where"] for r in body["results"] if r["failure"]]
    assert body["queries"] == 12 and len(failed) == 12, body  # every panel of the GPU dashboard goes empty
    assert "gpu-dcgm.json panel 4 'Total power' query A" in failed
