"""Worker and KVBM metrics on AWS reach the lake as they do locally.

On EKS the frontend's ``/metrics`` (AIPerf's ``--url``) carries the router's cache figures; KV usage and
preemptions live on each worker's system port and offload counters on KVBM's exporter. The load adapter
names every Running worker pod of the experiment (found by our labels) to AIPerf with ``--server-metrics``;
AIPerf writes what it scraped, per endpoint, to ``server_metrics_export.json``; ingestion keeps each series
under the source name the campaign recorded. Here AIPerf's export for a disaggregated KVBM step of the
Auto Mode example is written with the endpoints the Job was given (AIPerf's 0.13 export format, as in
test_ingest.py), ingested through ``campaign.ingest_step`` and read back through ``v_step_cache`` and
``v_kv_offload``.
"""

from __future__ import annotations

import json
from typing import Any

from benchctl import campaign
from benchctl.local.query import QueryEngine
from tests.fakes.eks_world import CID, World

EXP, STEP = "disagg-offload", "prefix-cache-p50-r0"


def _series(url: str, stats: dict[str, float], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"endpoint_url": url, "labels": labels or {}, "stats": stats}


def _summary(requests: int) -> dict[str, Any]:
    ms = {"unit": "ms", "avg": 40.0, "p50": 38.0, "p90": 55.0, "p99": 70.0}
    return {"request_count": {"unit": "requests", "avg": requests},
            "completed_request_count": {"unit": "requests", "avg": requests},
            "error_request_count": {"unit": "requests", "avg": 0},
            "time_to_first_token": ms, "inter_token_latency": {**ms, "avg": 9.0}, "request_latency": ms}


def test_disaggregated_cache_hits_kv_usage_and_kvbm_offload_reach_the_lake(aws_worlds: dict[str, World]) -> None:
    world = aws_worlds["auto-mode"]
    rec = world.providers.state.load(EXP, STEP)
    assert rec is not None and rec.argv is not None and rec.metrics_sources is not None
    argv, sources = rec.argv, rec.metrics_sources
    scraped = argv[argv.index("--server-metrics") + 1:]
    scraped = scraped[:next((i for i, a in enumerate(scraped) if a.startswith("--")), len(scraped))]
    by_role = {name.split("/")[0]: url for url, name in sources.items()}  # recorded as {url: source name}
    assert set(by_role) == {"frontend", "prefill", "decode", "kvbm", "nixl"} and set(scraped) == set(sources) - {
        by_role["frontend"]}
    # Given AIPerf's export of the step (the frontend scraped as --url, the workers as --server-metrics)
    export = {"schema_version": "1.1", "aiperf_version": "0.13.0", "metrics_phase": "profiling", "metrics": {
        "dynamo_frontend_input_sequence_tokens": {"type": "histogram", "unit": "tokens", "series": [
            _series(by_role["frontend"], {"count": 100, "sum": 204800.0})]},
        "dynamo_component_router_kv_selected_cached_prefix_tokens": {"type": "counter", "series": [
            _series(by_role["frontend"], {"total": 102400.0}, {"phase": "prefill"})]},
        "vllm:kv_cache_usage_perc": {"type": "gauge", "series": [
            _series(by_role["prefill"], {"avg": 0.5, "max": 0.8}), _series(by_role["decode"], {"avg": 0.25, "max": 0.4})]},
        "vllm:num_preemptions": {"type": "counter", "series": [_series(by_role["decode"], {"total": 3.0})]},
        # vLLM's prefix-cache counters (vllm/v1/metrics/loggers.py; AIPerf strips "_total"): the meter on vLLM
        "vllm:prefix_cache_hits": {"type": "counter", "series": [
            _series(by_role["prefill"], {"total": 61440.0}), _series(by_role["decode"], {"total": 200000.0})]},
        "vllm:prefix_cache_queries": {"type": "counter", "series": [
            _series(by_role["prefill"], {"total": 204800.0}), _series(by_role["decode"], {"total": 204800.0})]},
        "kvbm_offload_blocks_d2h": {"type": "counter", "series": [_series(by_role["kvbm"], {"total": 42.0})]},
        "kvbm_onboard_blocks_h2d": {"type": "counter", "series": [_series(by_role["kvbm"], {"total": 7.0})]},
        "kvbm_host_cache_hit_rate": {"type": "gauge", "series": [_series(by_role["kvbm"], {"avg": 0.25, "max": 0.5})]},
    }}
    raw = world.lake.local_raw(CID, EXP, STEP)
    (raw / "server_metrics_export.json").write_text(json.dumps(export))
    (raw / "profile_export_aiperf.json").write_text(json.dumps(_summary(100)))
    # When the step is ingested on the AWS code path
    assert campaign.ingest_step(world.providers, world.ctx, EXP, STEP)["status"] == "succeeded"
    # Then each series is in the lake under the source the campaign named, and the step's cache view has
    # the disaggregated hit rate (vLLM's own prefix-cache counters, prefill side; the router's selection kept
    # beside it), KV usage over the workers and KVBM's offloads, per tier in v_kv_offload
    with QueryEngine(world.lake.root) as q:
        _, rows = q.run(f"SELECT DISTINCT source FROM server_metrics WHERE step_id = '{STEP}' ORDER BY source")
        assert {r[0].split("/")[0] for r in rows} == {"frontend", "prefill", "decode", "kvbm"}
        cols, rows = q.run(f"SELECT * FROM v_step_cache WHERE experiment = '{EXP}' AND step_id = '{STEP}'")
        ocols, orows = q.run(f"SELECT * FROM v_kv_offload WHERE experiment = '{EXP}' AND step_id = '{STEP}'")
    (row,) = [dict(zip(cols, r, strict=True)) for r in rows]
    assert row["mode"] == "disaggregated" and row["simulated"] is False
    assert row["cache_meter"] == "vllm:prefix_cache_hits/queries" and row["cache_hit_rate"] == 0.3
    assert row["router_cache_hit_rate"] == 0.5
    assert row["kv_usage_avg"] == 0.375 and row["kv_usage_max"] == 0.8
    assert row["preemptions"] == 3.0 and row["offload_blocks"] == 42.0
    (off,) = [dict(zip(ocols, r, strict=True)) for r in orows]
    assert (off["offload_blocks_d2h"], off["onboard_blocks_h2d"], off["host_cache_hit_rate_avg"]) == (42.0, 7.0, 0.25)
    assert off["offload_used"] is True and off["offload_source"] == "kvbm"
