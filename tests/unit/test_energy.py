"""Energy beside dollars (v_energy, v_cost_efficiency.j_per_output_token): a made-up DCGM energy series per GPU, as
AIPerf's server-metrics export records dcgm-exporter's default counters (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION in mJ,
its "total" the increase over the step; DCGM_FI_DEV_POWER_USAGE in W), read through the real views on DuckDB."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine

C = "camp-e"
STEP = "concurrency-sweep-c8-r0"


def query(lake: LocalLake, sql: str) -> list[dict[str, Any]]:
    with QueryEngine(lake.root) as q:
        cols, rows = q.run(sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _lake(tmp_path: Path, *, simulated: bool) -> LocalLake:
    lake = LocalLake(tmp_path / "lake")
    lake.write("campaigns", [{"campaign_id": C, "simulated": simulated, "engine": "local" if simulated else "aws"}],
               part_name="campaign")
    lake.write("experiments", [
        {"campaign_id": C, "experiment": "disagg", "experiment_index": 0, "mode": "disaggregated", "gpus": 2},
        {"campaign_id": C, "experiment": "agg", "experiment_index": 1, "mode": "aggregated", "gpus": 2}],
        part_name="experiments")
    lake.write("steps", [{"campaign_id": C, "experiment": e, "mode": m, "workload": "concurrency-sweep",
                          "workload_kind": "concurrency_sweep", "step_id": STEP, "step_index": 0, "repeat": 0,
                          "concurrency": 8, "status": "succeeded", "total_output_tokens": 20000,
                          "benchmark_duration_s": 50.0, "output_tokens_per_s": 400.0}
                         for e, m in (("disagg", "disaggregated"), ("agg", "aggregated"))], part_name="steps")
    return lake


def _dcgm(exp: str, node: str, gpu: str, pod: str | None, *, energy_mj: float | None, power_w: float,
          idle_w: float) -> list[dict[str, Any]]:
    labels = {"gpu": gpu, "UUID": f"GPU-{node}-{gpu}", "Hostname": node, **({"pod": pod} if pod else {})}
    base = {"campaign_id": C, "experiment": exp, "step_id": STEP, "repeat": 0, "source": f"dcgm/{node}",
            "labels_json": json.dumps(labels)}
    rows = [{**base, "metric": "DCGM_FI_DEV_POWER_USAGE", "metric_type": "gauge", "stat": s, "value": v}
            for s, v in (("avg", power_w), ("min", idle_w))]
    if energy_mj is not None:
        rows.append({**base, "metric": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "metric_type": "counter",
                     "stat": "total", "value": energy_mj})
    return rows


def _worker_pods(exp: str, pods: dict[str, str]) -> list[dict[str, Any]]:
    """The workers' own series, under the source names the campaign records (<role>/<pod>)."""
    return [{"campaign_id": C, "experiment": exp, "step_id": STEP, "repeat": 0, "source": f"{role}/{pod}",
             "metric": "vllm:num_requests_running", "metric_type": "gauge", "stat": "avg", "value": 1.0,
             "labels_json": "{}"} for pod, role in pods.items()]


def test_energy_per_output_token_from_the_dcgm_counter_with_prefill_and_decode_apart(tmp_path: Path) -> None:
    lake = _lake(tmp_path, simulated=False)
    lake.write("server_metrics", [
        # disaggregated: a prefill GPU, a decode GPU and an idle GPU of the same node (no pod): 12 + 8 + 3 kJ
        *_dcgm("disagg", "n1", "0", "dis-prefill-0", energy_mj=12_000_000, power_w=240.0, idle_w=60.0),
        *_dcgm("disagg", "n1", "1", "dis-decode-0", energy_mj=8_000_000, power_w=160.0, idle_w=61.0),
        *_dcgm("disagg", "n1", "2", None, energy_mj=3_000_000, power_w=60.0, idle_w=60.0),
        *_worker_pods("disagg", {"dis-prefill-0": "prefill", "dis-decode-0": "decode"}),
        # aggregated: no energy counter scraped, only power: 2 GPUs x 200 W x 50 s = 20 kJ
        *_dcgm("agg", "n2", "0", "agg-worker-0", energy_mj=None, power_w=200.0, idle_w=55.0),
        *_dcgm("agg", "n2", "1", "agg-worker-1", energy_mj=None, power_w=200.0, idle_w=58.0),
        *_worker_pods("agg", {"agg-worker-0": "worker", "agg-worker-1": "worker"}),
    ], part_name="sm")
    rows = {r["experiment"]: r for r in query(lake, "SELECT * FROM v_energy")}
    d, a = rows["disagg"], rows["agg"]
    assert d["energy_j"] == pytest.approx(23_000) and d["gpus_metered"] == 3
    assert d["j_per_output_token"] == pytest.approx(23_000 / 20_000)
    assert d["output_tokens_per_kwh"] == pytest.approx(20_000 / (23_000 / 3.6e6))
    assert (d["prefill_j_per_output_token"], d["decode_j_per_output_token"]) == (
        pytest.approx(12_000 / 20_000), pytest.approx(8_000 / 20_000))
    assert d["worker_j_per_output_token"] is None
    # the idle GPU is named, not hidden: 60 W floor x 3 GPUs x 50 s of the 23 kJ
    assert d["idle_power_w"] == 60.0 and d["idle_energy_share"] == pytest.approx(60 * 3 * 50 / 23_000)
    assert d["energy_source"].startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    assert a["energy_j"] == pytest.approx(2 * 200.0 * 50.0) and a["gpus_metered"] == 2
    assert a["energy_source"].startswith("DCGM_FI_DEV_POWER_USAGE mean x benchmark_duration_s")
    assert a["worker_j_per_output_token"] is None  # power x time is not split by stage
    cost = {r["experiment"]: r for r in query(lake, "SELECT experiment, j_per_output_token, energy_source "
                                                     "FROM v_cost_efficiency")}
    assert cost["disagg"]["j_per_output_token"] == pytest.approx(23_000 / 20_000)
    assert cost["agg"]["j_per_output_token"] == pytest.approx(20_000 / 20_000)


def test_without_a_gpu_energy_is_not_measured_never_zero(tmp_path: Path) -> None:
    lake = _lake(tmp_path, simulated=True)
    rows = query(lake, "SELECT * FROM v_energy")
    assert len(rows) == 2 and all(r["energy_j"] is None and r["j_per_output_token"] is None
                                  and r["energy_source"] == "not measured (no GPU): SIMULATED" for r in rows)
    cost = query(lake, "SELECT j_per_output_token, energy_source FROM v_cost_efficiency")
    assert cost and all(c["j_per_output_token"] is None and c["energy_source"].startswith("not measured (no GPU)")
                        for c in cost)
    aws = _lake(tmp_path / "aws", simulated=False)
    assert {r["energy_source"] for r in query(aws, "SELECT energy_source FROM v_energy")} == {
        "not measured: no DCGM exporter scraped (kubernetes.dcgm_exporter_urls)"}
