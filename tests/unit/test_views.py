"""The comparison views over a hand-made lake: each figure checked against what it must be."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine
from tests.unit.synthetic_lake import comparison_row

C = "camp-v"


@pytest.fixture
def lake(tmp_path: Path) -> LocalLake:
    return LocalLake(tmp_path / "lake")


def step(experiment: str, step_id: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"campaign_id": C, "experiment": experiment, "mode": "disaggregated" if experiment.startswith("dis")
            else "aggregated", "workload": kind.replace("_", "-"), "workload_kind": kind, "step_id": step_id,
            "step_index": 0, "repeat": 0, "status": "succeeded", **extra}


def req(s: dict[str, Any], i: int, **extra: Any) -> dict[str, Any]:
    return {"campaign_id": C, "experiment": s["experiment"], "step_id": s["step_id"], "repeat": s["repeat"],
            "request_index": i, **extra}


def write(lake: LocalLake, table: str, rows: list[dict[str, Any]]) -> None:
    for i, r in enumerate(rows):
        lake.write(table, [r], part_name=f"{table}-{i}")


def query(lake: LocalLake, sql: str) -> list[dict[str, Any]]:
    cols, rows = QueryEngine(lake.root).run(sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def compare(lake: LocalLake, baseline: str = "agg", treatment: str = "disagg") -> None:
    """The comparison the Plan state records for an aggregated and a disaggregated experiment."""
    write(lake, "comparisons", [comparison_row(C, f"{treatment}-vs-{baseline}", baseline, treatment, "q1,q3,q4,h1,h3")])


def experiments(lake: LocalLake, *rows: tuple[str, str, int, str | None, str | None]) -> None:
    write(lake, "experiments", [
        {"campaign_id": C, "experiment": name, "mode": mode, "gpus": gpus, "experiment_index": i,
         "base_experiment": base, "changed_feature": feature, "router": "kv", "kv_offload": False}
        for i, (name, mode, gpus, base, feature) in enumerate(rows)
    ])


# ------------------------------------------------------------------------------------------ multi-turn


def test_multi_turn_groups_by_conversation_and_turn(lake: LocalLake) -> None:
    # Given two repeats of a 3-turn workload in one aggregated experiment. Conversation ids repeat
    # across repeats (AIPerf names them session_000000...), so a conversation is step + id.
    r0 = step("agg", "mt-r0", "multi_turn", turns=3)
    r1 = step("agg", "mt-r1", "multi_turn", turns=3, **{"repeat": 1})
    write(lake, "steps", [r0, r1])
    s = 1_000_000_000
    write(lake, "requests", [
        # r0: session A complete (3 turns, 0 s .. 3 s), session B cut after 2 turns
        req(r0, 0, conversation_id="session_000000", turn_index=0, ttft_ms=10.0, start_ns=0, end_ns=1 * s),
        req(r0, 1, conversation_id="session_000000", turn_index=1, ttft_ms=20.0, start_ns=1 * s, end_ns=2 * s),
        req(r0, 2, conversation_id="session_000000", turn_index=2, ttft_ms=30.0, start_ns=2 * s, end_ns=3 * s),
        req(r0, 3, conversation_id="session_000001", turn_index=0, ttft_ms=12.0, start_ns=0, end_ns=s),
        req(r0, 4, conversation_id="session_000001", turn_index=1, ttft_ms=22.0, start_ns=s, end_ns=2 * s),
        # r1: the same id again, complete in 5 s; plus a failed request that must not count
        req(r1, 0, conversation_id="session_000000", turn_index=0, ttft_ms=14.0, start_ns=0, end_ns=s),
        req(r1, 1, conversation_id="session_000000", turn_index=1, ttft_ms=24.0, start_ns=s, end_ns=3 * s),
        req(r1, 2, conversation_id="session_000000", turn_index=2, ttft_ms=34.0, start_ns=3 * s, end_ns=5 * s),
        req(r1, 3, conversation_id="session_000002", turn_index=0, ttft_ms=999.0, error_type="HTTPError"),
    ])
    # compared with a disaggregated experiment, allowing r1's error rate (1 request in 4 failed)
    write(lake, "comparisons", [{**comparison_row(C, "disagg-vs-agg", "agg", "disagg", "q1"), "max_error_rate": 0.5}])
    rows = query(lake, "SELECT * FROM v_multi_turn ORDER BY turn")
    # Then one row per turn, over both repeats, errors left out
    assert [(r["turn"], r["agg_n_requests"]) for r in rows] == [(1, 3), (2, 3), (3, 2)]
    assert rows[0]["agg_ttft_p50_ms"] == pytest.approx(12.0, abs=1.0)
    assert rows[2]["agg_ttft_p50_ms"] == pytest.approx(32.0, abs=2.5)
    # whole-conversation time: only complete conversations, one per (step, id): 3 s and 5 s
    assert {r["agg_n_conversations"] for r in rows} == {2}
    assert rows[0]["agg_conversation_p50_s"] == pytest.approx(4.0, abs=1.01)
    assert all(r["disagg_ttft_p50_ms"] is None for r in rows)


# ------------------------------------------------------------------------------ sequence distribution


def test_sequence_distribution_spread_and_length_buckets(lake: LocalLake) -> None:
    s = step("agg", "sd-zipf-r0", "sequence_distribution", distribution="zipf", output_tokens_per_s=500.0)
    write(lake, "steps", [s])
    lengths = [(100, 10.0, 50.0), (120, 14.0, 40.0), (300, 20.0, 30.0), (2000, 60.0, 20.0)]
    write(lake, "requests", [
        req(s, i, isl=isl, requested_isl=isl, osl=8, requested_osl=8, ttft_ms=t, output_tokens_per_s_user=v)
        for i, (isl, t, v) in enumerate(lengths)
    ])
    rows = {r["isl_bucket"]: r for r in query(lake, "SELECT * FROM v_sequence_distribution")}
    assert list(rows) == ["all", "64-127", "256-511", "1024-2047"]
    ttfts = [t for _, t, _ in lengths]
    assert rows["all"]["n_requests"] == 4
    assert rows["all"]["ttft_cv"] == pytest.approx(statistics.stdev(ttfts) / statistics.mean(ttfts))
    assert rows["all"]["tps_user_cv"] == pytest.approx(statistics.stdev([50, 40, 30, 20]) / 35)
    assert rows["all"]["output_tokens_per_s"] == 500.0 and rows["64-127"]["output_tokens_per_s"] is None
    assert rows["64-127"]["n_requests"] == 2 and rows["64-127"]["actual_isl_mean"] == 110.0
    assert rows["1024-2047"]["ttft_p50_ms"] == pytest.approx(60.0)


# -------------------------------------------------------------------------------------- prefix cache


def _metric(s: dict[str, Any], metric: str, stat: str, value: float, **labels: str) -> dict[str, Any]:
    import json

    return {"campaign_id": C, "experiment": s["experiment"], "step_id": s["step_id"], "repeat": 0,
            "source": "x", "metric": metric, "stat": stat, "value": value,
            "labels_json": json.dumps(labels, sort_keys=True) if labels else None}


def test_prefix_cache_reports_measured_hit_rate_per_mode_and_ttft_improvement(lake: LocalLake) -> None:
    # a simulated campaign: both modes read the KV router's selected prefix (docs/METRICS.md)
    lake.write("campaigns", [{"campaign_id": C, "simulated": True, "engine": "local"}], part_name="campaign")
    steps, metrics = [], []
    for exp in ("agg", "disagg"):
        for ratio, ttft, cached in ((0.0, 100.0, 0.0), (0.5, 80.0, 400.0), (1.0, 50.0, 900.0)):
            s = step(exp, f"pc-p{int(ratio * 100)}-r0", "prefix_cache", prefix_ratio=ratio,
                     prefix_ratio_actual=ratio, ttft_p50_ms=ttft if exp == "agg" else ttft * 2)
            steps.append(s)
            metrics.append(_metric(s, "dynamo_frontend_input_sequence_tokens", "sum", 1000.0))
            if exp == "agg":  # aggregated: the workers also report cached tokens to the frontend (not the meter)
                metrics.append(_metric(s, "dynamo_frontend_cached_tokens", "sum", cached + 50))
                metrics.append(_metric(s, "dynamo_component_router_kv_selected_cached_prefix_tokens", "total",
                                       cached, phase="aggregated"))
            else:  # disaggregated: the KV router's prefill-side selection; its decode series is left out
                metrics.append(_metric(s, "dynamo_frontend_cached_tokens", "sum", 0.0))
                metrics.append(_metric(s, "dynamo_component_router_kv_selected_cached_prefix_tokens", "total",
                                       cached / 2, phase="prefill"))
                metrics.append(_metric(s, "dynamo_component_router_kv_selected_cached_prefix_tokens", "total",
                                       777.0, phase="decode"))
            metrics.append(_metric(s, "vllm:kv_cache_usage_perc", "max", ratio / 10))
    write(lake, "steps", steps)
    write(lake, "server_metrics", metrics)
    compare(lake)
    rows = query(lake, "SELECT * FROM v_prefix_cache")
    assert [r["prefix_ratio"] for r in rows] == [0.0, 0.5, 1.0]
    assert [r["agg_cache_hit_rate"] for r in rows] == [0.0, 0.4, 0.9]
    assert [r["disagg_cache_hit_rate"] for r in rows] == [0.0, 0.2, 0.45]  # decode series left out
    assert [r["agg_ttft_improvement_pct"] for r in rows] == [0.0, 20.0, 50.0]
    assert [r["disagg_ttft_p50_ms"] for r in rows] == [200.0, 160.0, 100.0]
    assert rows[2]["agg_kv_usage_max"] == pytest.approx(0.1)


def test_prefix_cache_puts_achievable_between_duplication_and_measured_and_the_first_requests_rate(
        lake: LocalLake) -> None:
    steps, requests = [], []
    for exp in ("agg", "disagg"):
        for ratio, achievable in ((0.0, 0.0), (1.0, 0.9)):
            s = step(exp, f"pc-p{int(ratio * 100)}-r0", "prefix_cache", prefix_ratio=ratio, prefix_ratio_actual=ratio,
                     achievable_hit_rate=achievable, concurrency=2, cache_state="namespaced: ids of this step only")
            steps.append(s)
            # 4 requests of 100 tokens, started in the order 3, 1, 0, 2: the first two by start time are 3 and 1
            for i, start, cached in ((0, 30, 50), (1, 20, 10), (2, 40, 100), (3, 10, 30)):
                requests.append(req(s, i, start_ns=start, isl=100, cached_tokens=cached * ratio))
    write(lake, "steps", steps)
    write(lake, "requests", requests)
    compare(lake)
    rows = query(lake, "SELECT * FROM v_prefix_cache")
    assert [r["achievable_hit_rate"] for r in rows] == [0.0, 0.9]
    assert [r["agg_first_requests_hit_rate"] for r in rows] == [0.0, (30 + 10) / 200]
    assert [r["cache_state"] for r in rows] == ["namespaced", "namespaced"]
    cache = {(r["experiment"], r["step_id"]): r for r in query(lake, "SELECT * FROM v_step_cache")}
    assert cache[("agg", "pc-p100-r0")]["first_requests"] == 2
    assert cache[("disagg", "pc-p100-r0")]["first_requests_hit_rate"] is None  # the client is told 0 there
    assert cache[("agg", "pc-p100-r0")]["cache_state"] == "namespaced: ids of this step only"


# -------------------------------------------------------------------------------------------- pareto


def test_pareto_flags_dominated_load_levels(lake: LocalLake) -> None:
    experiments(lake, ("agg", "aggregated", 8, None, None))
    pts = [(1, 80.0, 50.0), (4, 400.0, 60.0), (8, 300.0, 90.0), (16, 800.0, 120.0)]  # c8 is dominated by c4
    write(lake, "steps", [step("agg", f"sw-c{c}-r0", "concurrency_sweep", concurrency=c, output_tokens_per_s=tps,
                               ttft_p50_ms=ttft) for c, tps, ttft in pts])
    rows = query(lake, "SELECT concurrency, output_tokens_per_s_per_gpu, on_frontier FROM v_pareto")
    assert rows == [
        {"concurrency": 1, "output_tokens_per_s_per_gpu": 10.0, "on_frontier": True},
        {"concurrency": 4, "output_tokens_per_s_per_gpu": 50.0, "on_frontier": True},
        {"concurrency": 8, "output_tokens_per_s_per_gpu": 37.5, "on_frontier": False},
        {"concurrency": 16, "output_tokens_per_s_per_gpu": 100.0, "on_frontier": True},
    ]


# ------------------------------------------------------------------------------------ feature ladder


def test_feature_ladder_compares_each_rung_with_its_base(lake: LocalLake) -> None:
    experiments(lake, ("agg", "aggregated", 8, None, None), ("agg-kv", "aggregated", 8, "agg", "router"),
                ("disagg-kv", "disaggregated", 8, "agg-kv", "mode"))
    write(lake, "steps", [
        step("agg", "sw-c4-r0", "concurrency_sweep", variant="c4", ttft_p50_ms=100.0, output_tokens_per_s=200.0),
        step("agg-kv", "sw-c4-r0", "concurrency_sweep", variant="c4", ttft_p50_ms=80.0, output_tokens_per_s=220.0),
        step("disagg-kv", "sw-c4-r0", "concurrency_sweep", variant="c4", ttft_p50_ms=120.0,
             output_tokens_per_s=165.0),
    ])
    rows = query(lake, "SELECT experiment, base_experiment, changed_feature, ttft_p50_change_pct, "
                       "output_tokens_per_s_change_pct FROM v_feature_ladder")
    assert rows == [
        {"experiment": "agg-kv", "base_experiment": "agg", "changed_feature": "router",
         "ttft_p50_change_pct": -20.0, "output_tokens_per_s_change_pct": pytest.approx(10.0)},
        {"experiment": "disagg-kv", "base_experiment": "agg-kv", "changed_feature": "mode",
         "ttft_p50_change_pct": 50.0, "output_tokens_per_s_change_pct": -25.0},
    ]
