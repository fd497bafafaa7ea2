"""One meter per quantity, the same in both modes: the cache hit rate (v_step_cache), KV offload
(v_kv_offload) and the stage queues' matched gauges (v_stage_queues).

Lakes are written through the lake writer with server_metrics rows as ingestion writes them (metric, stat,
labels, the source name the campaign recorded: ``worker/<pod>`` on AWS, ``worker-0`` locally) and read
through the real views on DuckDB. docs/METRICS.md is the table these tests hold the views to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine

C = "camp-m"
DATA = Path(__file__).resolve().parents[1] / "data" / "dynamo-1.6.1"
ROUTER_PREFIX = "dynamo_component_router_kv_selected_cached_prefix_tokens"


def query(lake: LocalLake, sql: str) -> list[dict[str, Any]]:
    with QueryEngine(lake.root) as q:
        cols, rows = q.run(sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def campaign(lake: LocalLake, *, simulated: bool, cid: str = C) -> None:
    lake.write("campaigns", [{"campaign_id": cid, "simulated": simulated, "engine": "local" if simulated else "aws",
                              "model": "Qwen/Qwen3-30B-A3B"}], part_name="campaign")


def experiments(lake: LocalLake, *, router: str = "kv", kv_offload: bool = False, cid: str = C) -> None:
    """The two experiments, and the comparison Plan records for them (the pairing views join through it)."""
    from tests.unit.synthetic_lake import comparison_row

    lake.write("experiments", [
        {"campaign_id": cid, "experiment": "agg", "experiment_index": 0, "mode": "aggregated", "router": router,
         "kv_offload": kv_offload, "gpus": 8},
        {"campaign_id": cid, "experiment": "disagg", "experiment_index": 1, "mode": "disaggregated",
         "router": router, "kv_offload": kv_offload, "gpus": 8}], part_name="experiment")
    lake.write("comparisons", [comparison_row(cid, "disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3")],
               part_name="comparisons")


def steps(lake: LocalLake, step_id: str = "prefix-cache-p100-r0", cid: str = C) -> None:
    for exp, mode in (("agg", "aggregated"), ("disagg", "disaggregated")):
        lake.write("steps", [{"campaign_id": cid, "experiment": exp, "mode": mode, "workload": "prefix-cache",
                              "workload_kind": "prefix_cache", "step_id": step_id, "step_index": 0, "repeat": 0,
                              "concurrency": 4, "isl": 512, "prefix_ratio": 1.0, "status": "succeeded",
                              "ttft_p50_ms": 50.0}], part_name=f"steps-{step_id}")


def metric(exp: str, source: str, name: str, stat: str, value: float, step_id: str = "prefix-cache-p100-r0",
           cid: str = C, **labels: str) -> dict[str, Any]:
    return {"campaign_id": cid, "experiment": exp, "step_id": step_id, "repeat": 0, "source": source,
            "metric": name, "stat": stat, "value": float(value), "labels_json": json.dumps(labels, sort_keys=True)}


def metrics(lake: LocalLake, rows: list[dict[str, Any]], part: str = "sm") -> None:
    lake.write("server_metrics", rows, part_name=part)


def cache_rows(lake: LocalLake) -> dict[str, dict[str, Any]]:
    return {r["experiment"]: r for r in query(lake, "SELECT * FROM v_step_cache")}


# ------------------------------------------------------------------------------------- the cache meter


def _smoke_step_metrics() -> list[dict[str, Any]]:
    """The prefix-cache-p100 step of a real smoke lake (the local engine, both modes, KV router): 12,480
    input tokens; aggregated, the workers reported 11,264 cached tokens (0.9026) and the router selected a
    10,240-token prefix (0.8205); disaggregated, the router's prefill-side selection 10,240, its decode
    selection 0, and no worker reports cached tokens."""
    return [
        metric("agg", "frontend", "dynamo_frontend_input_sequence_tokens", "sum", 12480),
        metric("agg", "frontend", "dynamo_frontend_cached_tokens", "sum", 11264),
        metric("agg", "frontend", ROUTER_PREFIX, "total", 10240, phase="aggregated"),
        metric("disagg", "frontend", "dynamo_frontend_input_sequence_tokens", "sum", 12480),
        metric("disagg", "frontend", "dynamo_frontend_cached_tokens", "sum", 0),
        metric("disagg", "frontend", ROUTER_PREFIX, "total", 10240, phase="prefill"),
        metric("disagg", "frontend", ROUTER_PREFIX, "total", 0, phase="decode"),
    ]


def test_a_simulated_campaign_reads_the_routers_selected_prefix_in_both_modes(tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, simulated=True)
    experiments(lake)
    steps(lake)
    metrics(lake, _smoke_step_metrics())
    rows = cache_rows(lake)
    a, d = rows["agg"], rows["disagg"]
    # one meter in both modes: the same cache reuse reads the same, not 0.9026 against 0.8205
    assert a["cache_hit_rate"] == d["cache_hit_rate"] == pytest.approx(10240 / 12480)
    assert a["cache_meter"] == d["cache_meter"] == "SIMULATED: router selected prefix"
    # the other meter stays beside it, for reference only
    assert a["frontend_cache_hit_rate"] == pytest.approx(11264 / 12480) and d["frontend_cache_hit_rate"] == 0
    assert a["router_cache_hit_rate"] == d["router_cache_hit_rate"] == pytest.approx(10240 / 12480)
    assert a["vllm_cache_hit_rate"] is None and a["simulated"] is True


def test_vllm_workers_are_metered_by_their_prefix_cache_counters_on_the_prefill_side(tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, simulated=False)
    experiments(lake)
    steps(lake)
    counters = [
        # aggregated: both workers' own counters (tokens), summed
        metric("agg", "worker/bc-agg-worker-0", "vllm:prefix_cache_hits", "total", 4000),
        metric("agg", "worker/bc-agg-worker-0", "vllm:prefix_cache_queries", "total", 6000),
        metric("agg", "worker/bc-agg-worker-1", "vllm:prefix_cache_hits", "total", 2000),
        metric("agg", "worker/bc-agg-worker-1", "vllm:prefix_cache_queries", "total", 6000),
        # disaggregated: the prefill workers; the decode worker looks the prompt up again (left out)
        metric("disagg", "prefill/bc-dis-prefill-0", "vllm:prefix_cache_hits", "total", 3000),
        metric("disagg", "prefill/bc-dis-prefill-0", "vllm:prefix_cache_queries", "total", 12000),
        metric("disagg", "decode/bc-dis-decode-0", "vllm:prefix_cache_hits", "total", 11000),
        metric("disagg", "decode/bc-dis-decode-0", "vllm:prefix_cache_queries", "total", 12000),
    ]
    metrics(lake, _smoke_step_metrics() + counters)
    rows = cache_rows(lake)
    a, d = rows["agg"], rows["disagg"]
    assert a["cache_meter"] == d["cache_meter"] == "vllm:prefix_cache_hits/queries"
    assert a["cache_hit_rate"] == pytest.approx(6000 / 12000) and d["cache_hit_rate"] == pytest.approx(3000 / 12000)
    assert (a["vllm_prefix_hits"], a["vllm_prefix_queries"]) == (6000, 12000)
    assert (d["vllm_prefix_hits"], d["vllm_prefix_queries"]) == (3000, 12000)
    assert a["router_cache_hit_rate"] == pytest.approx(10240 / 12480)  # kept, never the figure


def test_a_simulated_campaign_without_the_kv_router_has_no_hit_rate_rather_than_another_meter(
        tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, simulated=True)
    experiments(lake, router="round-robin")
    steps(lake)
    metrics(lake, [metric("agg", "frontend", "dynamo_frontend_input_sequence_tokens", "sum", 12480),
                   metric("agg", "frontend", "dynamo_frontend_cached_tokens", "sum", 11264)])
    a = cache_rows(lake)["agg"]
    assert a["cache_hit_rate"] is None and a["cache_meter"] == "none: SIMULATED without the KV router"
    assert a["frontend_cache_hit_rate"] == pytest.approx(11264 / 12480)


def test_the_local_mocker_has_no_prefix_or_offload_counter_and_the_router_meter_exists_aggregated() -> None:
    # A Dynamo 1.6.1 mocker with a host tier (--num-host-blocks 512) and 64 GPU blocks, driven past its GPU
    # cache, and its frontend (--router-mode kv), scraped after the load (tests/data/README.md)
    def names(path: Path) -> set[str]:
        return {line.split("{")[0].split(" ")[0] for line in path.read_text().splitlines()
                if line and not line.startswith("#")}

    worker = names(DATA / "mocker-host-tier-metrics.txt")
    assert {"vllm:kv_cache_usage_perc", "vllm:num_requests_waiting", "vllm:num_preemptions_total"} <= worker
    assert not {n for n in worker if n.startswith(("vllm:prefix_cache", "vllm:external_prefix", "kvbm_"))}
    assert not {n for n in worker if "offload" in n or "onboard" in n or "host" in n}
    frontend = (DATA / "frontend-host-tier-cache-metrics.txt").read_text()
    selected = [line for line in frontend.splitlines() if line.startswith(ROUTER_PREFIX + "_total{")]
    assert len(selected) == 1 and 'phase="aggregated"' in selected[0]  # the router's meter, aggregated mode
    cached = next(line for line in frontend.splitlines() if line.startswith("dynamo_frontend_cached_tokens_sum"))
    assert float(selected[0].split()[-1]) == float(cached.split()[-1]) > 0  # host-tier hits included in both


# -------------------------------------------------------------------------------------------- KV offload


def test_kv_offload_counts_kvbm_tiers_per_step_and_says_when_offload_was_not_measured(tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, simulated=False)
    experiments(lake, kv_offload=True)
    steps(lake)
    steps(lake, "prefix-cache-p0-r0")
    kvbm = "kvbm/bc-dis-prefill-0"
    metrics(lake, [
        metric("disagg", kvbm, "kvbm_offload_blocks_d2h", "total", 120),
        metric("disagg", kvbm, "kvbm_offload_blocks_h2d", "total", 30),
        metric("disagg", kvbm, "kvbm_offload_blocks_d2d", "total", 0),
        metric("disagg", kvbm, "kvbm_onboard_blocks_h2d", "total", 45),
        metric("disagg", kvbm, "kvbm_onboard_blocks_d2d", "total", 5),
        metric("disagg", kvbm, "kvbm_matched_tokens", "total", 3200),
        metric("disagg", kvbm, "kvbm_host_cache_hit_rate", "avg", 0.4),
        metric("disagg", kvbm, "kvbm_disk_cache_hit_rate", "avg", 0.1),
        metric("disagg", "decode/bc-dis-decode-0", "vllm:num_preemptions", "total", 2),
        metric("disagg", "prefill/bc-dis-prefill-0", "vllm:kv_cache_usage_perc", "max", 0.97),
        # KVBM ran on the other step but moved nothing
        metric("disagg", kvbm, "kvbm_offload_blocks_d2h", "total", 0, step_id="prefix-cache-p0-r0"),
        metric("disagg", kvbm, "kvbm_onboard_blocks_h2d", "total", 0, step_id="prefix-cache-p0-r0"),
    ])
    rows = {(r["experiment"], r["step_id"]): r for r in query(lake, "SELECT * FROM v_kv_offload")}
    d = rows[("disagg", "prefix-cache-p100-r0")]
    assert (d["offload_blocks_d2h"], d["offload_blocks_h2d"], d["offload_blocks_d2d"]) == (120, 30, 0)
    assert (d["onboard_blocks_h2d"], d["onboard_blocks_d2d"]) == (45, 5)
    assert (d["offload_blocks"], d["onboard_blocks"], d["kvbm_matched_tokens"]) == (150, 50, 3200)
    assert (d["host_cache_hit_rate_avg"], d["disk_cache_hit_rate_avg"]) == (0.4, 0.1)
    assert d["offload_used"] is True and d["onboard_used"] is True and d["offload_source"] == "kvbm"
    assert (d["preemptions"], d["kv_usage_max"], d["kv_offload"]) == (2, 0.97, True)
    idle = rows[("disagg", "prefix-cache-p0-r0")]
    assert idle["offload_used"] is False and idle["onboard_used"] is False and idle["offload_source"] == "kvbm"
    # offload configured, KVBM's exporter not scraped: not measured, never "not used"
    a = rows[("agg", "prefix-cache-p100-r0")]
    assert a["offload_used"] is None and a["offload_source"].startswith("not measured: no kvbm_* series")


@pytest.mark.parametrize(("simulated", "kv_offload", "source"), [
    (True, True, "none: SIMULATED (the mocker host tier exports no offload counter)"),
    (True, False, "none: no kv_offload in this experiment"),
    (False, False, "none: no kv_offload in this experiment"),
])
def test_kv_offload_without_kvbm_series_says_why(tmp_path: Path, simulated: bool, kv_offload: bool,
                                                  source: str) -> None:
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, simulated=simulated)
    experiments(lake, kv_offload=kv_offload)
    steps(lake)
    (row,) = query(lake, "SELECT * FROM v_kv_offload WHERE experiment = 'agg'")
    assert row["offload_source"] == source and row["offload_used"] is None and row["simulated"] is simulated


# ---------------------------------------------------------------------------------------- stage queues


def test_stage_queues_read_the_same_waiting_gauge_at_each_stage_with_aggregated_beside(tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, simulated=False)
    experiments(lake)
    steps(lake)
    w = "vllm:num_requests_waiting"
    metrics(lake, [
        metric("disagg", "prefill/bc-dis-prefill-0", w, "avg", 3.0), metric("disagg", "prefill/bc-dis-prefill-0", w, "max", 9),
        metric("disagg", "prefill/bc-dis-prefill-1", w, "avg", 1.0), metric("disagg", "prefill/bc-dis-prefill-1", w, "max", 4),
        metric("disagg", "decode/bc-dis-decode-0", w, "avg", 0.5), metric("disagg", "decode/bc-dis-decode-0", w, "max", 2),
        metric("disagg", "decode/bc-dis-decode-0", "vllm:num_requests_running", "max", 30),
        metric("disagg", "frontend", "dynamo_frontend_router_queue_pending_requests", "max", 6, worker_type="prefill"),
        metric("disagg", "frontend", "dynamo_frontend_router_queue_pending_requests", "max", 1, worker_type="decode"),
        metric("agg", "worker/bc-agg-worker-0", w, "avg", 2.0), metric("agg", "worker/bc-agg-worker-0", w, "max", 5),
        metric("agg", "worker/bc-agg-worker-1", w, "avg", 2.5), metric("agg", "worker/bc-agg-worker-1", w, "max", 7),
        metric("agg", "frontend", "dynamo_frontend_router_queue_pending_requests", "max", 3, worker_type="decode"),
    ])
    rows = {r["experiment"]: r for r in query(lake, "SELECT * FROM v_stage_queues")}
    d, a = rows["disagg"], rows["agg"]
    # the prefill waiting queue is counted (summed means, the deepest worker), beside decode's
    assert (d["prefill_waiting_avg"], d["prefill_waiting_max"]) == (4.0, 9)
    assert (d["decode_waiting_avg"], d["decode_waiting_max"], d["decode_running_max"]) == (0.5, 2, 30)
    assert (d["router_queue_prefill_max"], d["router_queue_decode_max"], d["router_queue_max"]) == (6, 1, 6)
    assert d["worker_waiting_max"] is None
    # aggregated beside it: one engine does both stages
    assert (a["worker_waiting_avg"], a["worker_waiting_max"]) == (4.5, 7)
    assert a["prefill_waiting_max"] is None and a["decode_waiting_max"] is None
    assert a["router_queue_decode_max"] == 3


def test_gpu_use_per_stage_follows_the_dcgm_pod_label_to_the_worker_pods(tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, simulated=False)
    experiments(lake)
    steps(lake)

    def gpu(pod: str | None, util: float, fb: float, gpu_index: str) -> list[dict[str, Any]]:
        labels = {"gpu": gpu_index, **({"pod": pod, "namespace": "dynamo-bench"} if pod else {})}
        return [metric("disagg", "dcgm/0", "DCGM_FI_DEV_GPU_UTIL", "avg", util, **labels),
                metric("disagg", "dcgm/0", "DCGM_FI_DEV_FB_USED", "max", fb, **labels)]

    metrics(lake, [
        metric("disagg", "prefill/bc-dis-prefill-0", "vllm:num_requests_waiting", "max", 1),
        metric("disagg", "decode/bc-dis-decode-0", "vllm:num_requests_waiting", "max", 1),
        *gpu("bc-dis-prefill-0", 90.0, 30000, "0"), *gpu("bc-dis-prefill-0", 80.0, 31000, "1"),
        *gpu("bc-dis-decode-0", 40.0, 35000, "2"), *gpu(None, 0.0, 10, "3"),  # an idle GPU, no pod
    ])
    (d,) = query(lake, "SELECT * FROM v_stage_queues WHERE experiment = 'disagg'")
    assert (d["gpu_util_prefill_avg_pct"], d["gpu_util_decode_avg_pct"]) == (85.0, 40.0)
    assert (d["gpu_fb_used_prefill_max_mib"], d["gpu_fb_used_decode_max_mib"]) == (31000, 35000)
    assert d["gpu_util_worker_avg_pct"] is None
    assert d["gpu_util_avg_pct"] == pytest.approx((90 + 80 + 40 + 0) / 4) and d["gpu_source"] == "dcgm-exporter"


def test_a_simulated_campaign_whose_workers_export_vllm_counters_reads_them_not_the_router(tmp_path: Path) -> None:
    """The CPU engine (vLLM's CPU build, locally): SIMULATED, yet its workers export vLLM's own prefix-cache counters;
    they are the meter, named with the label, the same one the AWS path reads. The mocker's lake (no vllm counter)
    keeps the router's selected prefix (the test above)."""
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, simulated=True)
    experiments(lake)
    steps(lake)
    counters = [metric("agg", "worker-0", "vllm:prefix_cache_hits", "total", 896),
                metric("agg", "worker-0", "vllm:prefix_cache_queries", "total", 4224)]
    metrics(lake, _smoke_step_metrics() + counters)
    rows = cache_rows(lake)
    a, d = rows["agg"], rows["disagg"]
    assert a["cache_meter"] == "SIMULATED (CPU engine): vllm:prefix_cache_hits/queries"
    assert a["cache_hit_rate"] == pytest.approx(896 / 4224) and a["simulated"] is True
    assert d["cache_meter"] == "SIMULATED: router selected prefix"  # no counter there: the mocker's meter
