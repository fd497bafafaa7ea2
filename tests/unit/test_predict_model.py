"""``benchctl predict``'s closed-loop model over aiconfigurator's figures, with aiconfigurator replaced by a
stated linear stand-in (so the arithmetic is checked exactly, fast): the batch a worker is rated at (vLLM's
max_num_seqs, the KV cache), the wait a saturated stage or a full batch adds to TTFT, and ``within_slo``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.forecast import predict, predict_table
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import CampaignSpec, parse_spec
from benchctl.spec.settings import Slo

ROOT = Path(__file__).resolve().parents[2]

OSL = 101
PREFILL_RATE = 10.0  # requests/s one prefill worker completes (batch 1)
AIC_OOM_GIB = 72.0  # the stand-in refuses, as aiconfigurator does, a batch beyond its own (80 GB) part


def _tpot(b: int) -> float:
    return 10.0 + 0.1 * b  # ms


def _mem(b: int) -> float:
    return 18.0 + 0.2 * b  # GiB per GPU: weights, then 0.2 GiB of KV per request


def fake_estimate(cfg: Any) -> dict[str, Any]:
    """aiconfigurator's raw result, as a linear model of the batch (same keys, same meanings)."""
    b, tpot = cfg.batch, _tpot(cfg.batch)
    if cfg.mode == "agg":
        r0 = (100.0 + (cfg.osl - 1) * tpot) / 1000
        seq = b / r0
        return {"ttft": 100.0, "tpot": tpot, "memory": _mem(b), "seq/s": seq, "tokens/s": seq * (cfg.osl - 1),
                "concurrency": b, "_backend_version": "fake"}
    d_rate = b / ((cfg.osl - 1) * tpot / 1000)
    seq = min(cfg.prefill_workers * PREFILL_RATE, cfg.decode_workers * d_rate)
    return {"ttft": 50.0, "tpot": tpot, "(p)memory": 18.0, "(d)memory": _mem(b), "(p)seq/s/worker": PREFILL_RATE,
            "(d)seq/s/worker": d_rate, "seq/s": seq, "tokens/s": seq * cfg.osl, "concurrency": b * cfg.decode_workers,
            "_backend_version": "fake"}


@pytest.fixture(autouse=True)
def fake_aiconfigurator(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """aiconfigurator replaced by :func:`fake_estimate`; the batches it was asked for, in order."""
    calls: list[int] = []

    def estimate(cfg: Any) -> dict[str, Any] | str:
        calls.append(cfg.batch)
        if _mem(cfg.batch) > AIC_OOM_GIB:  # what predict._estimate returns when aiconfigurator raises its OOM
            return ("aiconfigurator gave no estimate: RuntimeError: OOM: the model 'Qwen/Qwen3-30B-A3B' does not "
                    "fit in GPU memory on system 'a100_sxm' with the given parallelism.")
        return fake_estimate(cfg)

    monkeypatch.setattr(predict, "_estimate", estimate)
    monkeypatch.setattr(predict, "_builtin_model", lambda model: True)
    return calls


def _spec(mode: str, concurrency: list[int], *, slo: dict[str, float] | None = None,
          gpu_kind: str = "A100-40GB") -> CampaignSpec:
    workers = ([{"role": "worker", "pool": "a100", "replicas": 1, "tensor_parallel": 4}] if mode == "aggregated" else
               [{"role": "prefill", "pool": "a100", "replicas": 1, "tensor_parallel": 4},
                {"role": "decode", "pool": "a100", "replicas": 1, "tensor_parallel": 4}])
    return parse_spec({
        "name": "model", "model": {"name": "Qwen/Qwen3-30B-A3B"},
        "pools": [{"name": "a100", "instance_type": "p4d.24xlarge", "gpus_per_node": 8, "gpu_kind": gpu_kind,
                   "max_nodes": 2, "provider": "local"}],
        "experiments": [{"name": "e", "mode": mode, "workers": workers}],
        "workloads": [{"kind": "concurrency_sweep", "concurrency": concurrency, "isl": 1024, "osl": OSL,
                       "duration_s": 60}],
        "slo": slo or {},
    })


def _rows(spec: CampaignSpec) -> dict[int, dict[str, Any]]:
    return {r["concurrency"]: r for r in predict.predict_plan(spec, plan_campaign(spec, "aws"), "c")}


def test_a_load_the_batch_holds_waits_for_nothing_and_keeps_aiconfigurators_figures() -> None:
    (row,) = _rows(_spec("aggregated", [64])).values()
    assert row["predicted_queue_ms"] == 0.0
    assert row["predicted_ttft_ms"] == 100.0 and row["predicted_itl_ms"] == _tpot(64)
    raw = fake_estimate(predict._Config("m", "agg", "a100_sxm", None, 1024, OSL, 4, 64))
    assert row["predicted_output_tokens_per_s"] == pytest.approx(raw["tokens/s"])
    assert row["fits_memory"] is True and "wait" not in row["note"]


def test_a_saturated_prefill_stage_makes_the_rest_wait_before_their_first_token() -> None:
    # one prefill worker completes 10 requests/s; one decode worker at batch 64 would complete ~39/s
    (row,) = _rows(_spec("disaggregated", [64])).values()
    decode_s = (OSL - 1) * _tpot(64) / 1000
    cycle = 64 / PREFILL_RATE  # closed loop: 64 requests in flight, 10 complete per second
    assert cycle > 0.050 + decode_s
    assert row["predicted_ttft_ms"] == pytest.approx((cycle - decode_s) * 1000)
    assert row["predicted_queue_ms"] == pytest.approx((cycle - 0.050 - decode_s) * 1000)
    assert row["predicted_output_tokens_per_s"] == pytest.approx(PREFILL_RATE * OSL)
    assert "the prefill stage limits" in row["note"] and "wait" in row["note"]


def test_no_worker_runs_more_than_vllms_max_num_seqs_the_rest_wait() -> None:
    # 300 requests on one replica: vLLM runs 256 (its default max_num_seqs on A100/L40S), 44 wait a turn;
    # 80 GB: 256 requests' KV fits (69.2 GiB within 72), so the batch limit is max_num_seqs alone
    (row,) = _rows(_spec("aggregated", [300], gpu_kind="A100-80GB")).values()
    assert row["predicted_itl_ms"] == _tpot(predict.VLLM_MAX_NUM_SEQS)
    r0 = (100.0 + (OSL - 1) * _tpot(256)) / 1000
    assert row["predicted_queue_ms"] == pytest.approx((300 / (256 / r0) - r0) * 1000)
    assert "rated at batch 256" in row["note"] and "max_num_seqs" in row["note"]


def test_a_batch_beyond_the_kv_cache_is_rated_at_what_it_holds(fake_aiconfigurator: list[int]) -> None:
    # 0.9 x 40 GiB = 36 GiB; 18 GiB + 0.2 GiB per request: 90 requests fit, 120 do not
    (row,) = _rows(_spec("aggregated", [120])).values()
    fit = max(b for b in range(1, 121) if _mem(b) <= 36.0)
    assert fit == 90
    assert row["memory_gb_per_gpu"] == pytest.approx(_mem(fit)) and row["fits_memory"] is True
    assert row["predicted_itl_ms"] == _tpot(fit) and row["predicted_queue_ms"] > 0
    assert f"holds about {fit} requests per worker" in row["note"]
    assert sorted(set(fake_aiconfigurator)) == [1, fit, 120]  # the slope from batch 1 and 120, then the fit


@pytest.mark.parametrize(("slo", "want"), [
    ({}, None),
    ({"ttft_ms": 500, "itl_ms": 30}, {16: True, 256: False}),  # ITL 35.6 ms at 256
    # 256 on one 40 GB replica: its KV cache holds 90, the rest wait ~3.7 s before their first token
    ({"ttft_ms": 500}, {16: True, 256: False}),
    ({"itl_ms": 11}, {16: False, 256: False}),
])
def test_within_slo_holds_both_bounds_that_are_set(slo: dict[str, float], want: dict[int, bool] | None) -> None:
    rows = _rows(_spec("aggregated", [16, 256], slo=slo))
    assert {c: r["within_slo"] for c, r in rows.items()} == (want or {16: None, 256: None})
    assert predict.within_slo(Slo(ttft_ms=500), None, 3.0) is None  # no figure: not judged


def test_the_table_names_the_highest_load_within_the_slo_and_the_loads_past_it() -> None:
    spec = _spec("aggregated", [16, 64, 128, 256], slo={"ttft_ms": 500, "itl_ms": 20})
    rows = predict.predict_plan(spec, plan_campaign(spec, "aws"), "c")
    (g,) = predict_table.slo_regimes(rows)
    assert (g["within"], g["past"], g["highest_within"]) == ([16, 64], [128, 256], 64)
    out = predict_table.format_predictions(rows, spec.slo)
    assert "SLO: TTFT <= 500 ms, ITL <= 20 ms" in out
    assert "e (aggregated) concurrency-sweep ISL 1024/OSL 101: highest load predicted within the SLO c=64; " \
           "past it at c = 128, 256" in out


def test_a_batch_aiconfigurator_refuses_as_out_of_memory_is_rated_at_what_the_kv_cache_holds(
        fake_aiconfigurator: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    # 300 requests on one 40 GB replica: 256 (max_num_seqs) would need 69.2 GiB, which the stand-in (here with a
    # 60 GiB part) refuses as OOM; the slope then comes from batches 1 and 2, and the replica is rated at the 90
    # its KV cache holds
    monkeypatch.setattr(sys.modules[__name__], "AIC_OOM_GIB", 60.0)
    (row,) = _rows(_spec("aggregated", [300])).values()
    assert row["predicted_itl_ms"] == _tpot(90) and row["fits_memory"] is True
    assert "holds about 90 requests per worker" in row["note"] and "no estimate" not in row["note"]
    assert fake_aiconfigurator[:3] == [256, 1, 2]


def test_the_frontend_floor_applies_up_to_the_dynamo_checked_to_stall():
    from benchctl.forecast.predict import FRONTEND_FIRST_TOKEN_FLOOR_MS, frontend_floor_ms
    from benchctl.spec.model import parse_spec

    def spec(**k8s):
        data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
        data["kubernetes"] = k8s
        data["pools"][0].pop("network")  # the EFA image derivation wants a tag; not what this test is about
        return parse_spec(data)

    for k8s in ({}, {"dynamo_image": "r/vllm-runtime:1.5.0"},
                {"dynamo_image": "r/vllm-runtime@sha256:" + "a" * 64, "dynamo_runtime_version": "1.6.1"}):
        assert frontend_floor_ms(spec(**k8s)) == (FRONTEND_FIRST_TOKEN_FLOOR_MS, ""), k8s
    floor, why = frontend_floor_ms(spec(dynamo_image="r/vllm-runtime:1.6.2"))
    assert floor is None and "1.6.2" in why
