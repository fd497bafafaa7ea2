"""Issue 15's example specs: the heterogeneous (A100 prefill, L40S decode), FP8 and SSD-tier ones validate, plan
and render like every example (tests/integration/test_manifests_upstream.py runs them through the AWS code path
against the vendored CRDs); the heterogeneous one's cost row lands in the plan's "disaggregated heterogeneous"
category of v_cost_efficiency, its baseline in "aggregated same-GPU baseline"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchctl.aws.k8s import render as r
from benchctl.campaign import experiment_row
from benchctl.cli.main import main
from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine
from benchctl.planning import costs
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import load_spec
from tests import crd_schemas

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CID = "hetero-20261201-000000"


@pytest.mark.parametrize("name", ["hetero-l40s", "fp8", "feature-ladder"])
def test_example_validates_plans_and_renders(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_file = str(EXAMPLES / f"{name}.yaml")
    assert main(["validate", spec_file]) == 0
    assert main(["plan", spec_file]) == 0
    assert main(["render", spec_file, "--out", str(tmp_path / "out"), "--campaign-id", CID]) == 0
    spec = load_spec(spec_file)
    for exp in spec.experiments:
        dgd = r.render_dgd(spec, CID, exp.name)
        assert crd_schemas.problems(dgd) == [], exp.name
        assert (tmp_path / "out" / "experiments" / exp.name / "dynamographdeployment.yaml").is_file()


def test_hetero_decode_runs_on_l40s_over_ucx_and_fp8_serves_the_fp8_checkpoint() -> None:
    spec = load_spec(EXAMPLES / "hetero-l40s.yaml")
    dgd = r.render_dgd(spec, CID, "disagg-a100p-l40sd")
    by_type = {c["type"]: c for c in dgd["spec"]["components"]}
    assert by_type["prefill"]["podTemplate"]["spec"]["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "gpu-p4d"}
    assert by_type["decode"]["podTemplate"]["spec"]["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "gpu-g6e"}
    decode = by_type["decode"]["podTemplate"]["spec"]["containers"][0]
    assert decode["resources"]["limits"] == {"nvidia.com/gpu": "4"}  # no EFA: G6e has no GPUDirect RDMA
    assert spec.transfer(spec.experiment("disagg-a100p-l40sd"))["path"] == "UCX"
    fp8 = load_spec(EXAMPLES / "fp8.yaml")
    (worker,) = [c for c in r.render_dgd(fp8, CID, "agg-fp8-tp2x2")["spec"]["components"] if c["type"] == "worker"]
    args = worker["podTemplate"]["spec"]["containers"][0]["args"]
    assert args[args.index("--served-model-name") + 1] == "Qwen/Qwen3-30B-A3B-FP8"  # the FP8 checkpoint's snapshot
    assert args[args.index("--model") + 1] == f"/models/hf/hub/models--Qwen--Qwen3-30B-A3B-FP8/snapshots/{fp8.model.revision}"
    ladder = load_spec(EXAMPLES / "feature-ladder.yaml")
    ssd = ladder.experiment("disagg-kv-ssd")
    assert ssd.feature == "kv_offload" and ssd.kv_offload is not None and ssd.kv_offload.disk_cache_gb == 16
    (prefill,) = [c for c in r.render_dgd(ladder, CID, "disagg-kv-ssd")["spec"]["components"] if c["type"] == "prefill"]
    env = {e["name"]: e.get("value") for e in prefill["podTemplate"]["spec"]["containers"][0]["env"]}
    assert (env["DYN_KVBM_DISK_CACHE_GB"], env["DYN_KVBM_DISK_CACHE_DIR"]) == ("16", r.KVBM_DISK_DIR)
    assert {"name": "kvbm-disk", "emptyDir": {"sizeLimit": "16G"}} in prefill["podTemplate"]["spec"]["volumes"]


def _events(spec: Any, plan: Any) -> list[dict[str, Any]]:
    """Each experiment holds its planned nodes for an hour, one after the other, with one step's load."""
    rows: list[dict[str, Any]] = []
    for i, e in enumerate(plan.experiments):
        start, end = f"2026-12-01T{10 + 2 * i:02d}:00:00+00:00", f"2026-12-01T{11 + 2 * i:02d}:00:00+00:00"

        def ev(event: str, at: str, pool: str | None = None, exp: str = e.name, **detail: Any) -> dict[str, Any]:
            return {"campaign_id": CID, "experiment": exp, "event": event, "at": at, "pool": pool,
                    "detail_json": json.dumps(detail) if detail else None}
        for pool, nodes in e.nodes.items():
            rows += [ev("scale_requested", start, pool, nodes=nodes, previous=0), ev("pool_restored", end, pool)]
        sid = e.steps[0].step_id
        rows += [ev("load_start", start, step_id=sid), ev("load_end", end, step_id=sid)]
    return rows


def test_hetero_cost_row_is_in_the_disaggregated_heterogeneous_category_and_pays_for_no_idle_gpu(
        tmp_path: Path) -> None:
    spec = load_spec(EXAMPLES / "hetero-l40s.yaml")
    plan = plan_campaign(spec, "aws")
    lake = LocalLake(tmp_path / "lake")
    events = _events(spec, plan)
    steps = [{"campaign_id": CID, "experiment": e.name, "mode": spec.experiment(e.name).mode,
              "step_id": e.steps[0].step_id, "workload_kind": "concurrency_sweep", "concurrency": 1, "repeat": 0,
              "status": "succeeded", "total_output_tokens": 100_000, "benchmark_duration_s": 120.0,
              "output_tokens_per_s": 800.0} for e in plan.experiments]
    lake.write("experiments", [experiment_row(CID, i, e, spec) for i, e in enumerate(spec.experiments)],
               part_name="experiment")
    lake.write("timeline", events, part_name="timeline")
    lake.write("steps", steps, part_name="steps")
    lake.write("costs", costs.cost_rows(CID, spec, plan, events, steps, simulated=False), part_name="costs")
    cols, result = QueryEngine(lake.root).run("v_cost_efficiency")
    rows = {x["experiment"]: x for x in (dict(zip(cols, v, strict=True)) for v in result)}
    h = rows["disagg-a100p-l40sd"]
    assert h["category"] == "disaggregated heterogeneous"
    assert (h["gpus"], h["gpu_kinds"]) == (16, "A100-40GB+L40S-48GB")
    # one p4d node and two g6e nodes for an hour: equal money is judged per dollar, not per GPU
    assert h["gpu_usd_per_hour"] == pytest.approx(21.96 + 2 * 10.49 + 3 * 200 * 0.08 / 730)  # and 3 root volumes
    assert h["tokens_per_usd"] == pytest.approx(100_000 / h["cost_usd"])
    # H4 without idle GPUs: each side pays for exactly the GPUs its workers use, at nearly the same money
    (a,) = [r for r in rows.values() if r["category"] == "aggregated same-GPU baseline"]
    assert (h["gpus"], a["gpus"]) == (h["gpus_allocated"], a["gpus_allocated"]) == (16, 16)
    assert h["gpu_usd_per_hour"] == pytest.approx(a["gpu_usd_per_hour"], rel=0.05)
    # the experiments row records how its KV moves: UCX between the A100 and L40S pods (no GPUDirect RDMA)
    (e,) = [x for x in lake.read_table("experiments", CID) if x["experiment"] == "disagg-a100p-l40sd"]
    assert (e["kv_transfer_path"], e["nixl_backend"], e["kv_transfer_bandwidth_gbps"]) == ("UCX", "UCX", 1.0)
