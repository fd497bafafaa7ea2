"""The twin made by the real aiconfigurator 0.12 for the smoke spec's A100 TP4 workers: its curves are
aiconfigurator's own answers, the mocker's loader accepts the file, and it is made in seconds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benchctl.forecast import twin
from benchctl.forecast.aic import quiet
from benchctl.spec.model import load_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def estimate(mode: str, isl: int, batch: int) -> float:
    with quiet():
        from aiconfigurator.cli.api import cli_estimate

        r = cli_estimate("Qwen/Qwen3-30B-A3B", "a100_sxm", mode=mode, backend_name="vllm", isl=isl, osl=2,
                         batch_size=batch, tp_size=4, moe_tp_size=4, moe_ep_size=1)
    return float(r.ttft if mode == "static_ctx" else r.tpot)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    spec = load_spec(ROOT / "examples" / "smoke.yaml")
    store = tmp_path_factory.mktemp("ws")
    twin._CURVES.clear()
    started = time.monotonic()
    roles = {e.name: twin.resolve(store, {p.name: p for p in spec.pools}, spec.model.name, e) for e in spec.experiments}
    return roles, time.monotonic() - started


def test_every_role_of_the_smoke_has_an_a100_tp4_twin_made_in_seconds(made):
    roles, seconds = made
    assert {(e, r) for e, rs in roles.items() for r in rs} == {("agg", "worker"), ("disagg", "prefill"),
                                                                 ("disagg", "decode")}
    for rs in roles.values():
        for t in rs.values():
            assert t.label.startswith("SIMULATED on the a100_sxm TP4 twin (aiconfigurator 0.12.0, vllm ")
            assert t.num_gpu_blocks and t.provenance["kv_capacity_tokens"] > 100_000
    assert seconds < 30, f"making the smoke's twins took {seconds:.1f} s"


def test_the_curves_are_aiconfigurators_static_answers_and_the_mocker_reads_the_file(made):
    from dynamo.mocker.utils.planner_profiler_perf_data_converter import is_mocker_format_npz

    t = made[0]["agg"]["worker"]
    assert is_mocker_format_npz(Path(t.npz))
    profile = twin.read_profile(Path(t.npz).parent)
    assert profile.ttft_ms(256) == pytest.approx(estimate("static_ctx", 256, 1))
    # one decode iteration of 8 requests at context 1024: aiconfigurator's batch-8 step
    assert profile.itl_ms(8 * 1024, 1024) == pytest.approx(estimate("static_gen", 1024, 8), rel=1e-6)


def test_the_aggregated_worker_holds_aiconfigurators_dispatch_and_the_disaggregated_roles_none(made):
    # aiconfigurator's aggregated TTFT at batch 1 beyond its prefill step, read here at another ISL than the twin's
    with quiet():
        from aiconfigurator.cli.api import cli_estimate

        agg = cli_estimate("Qwen/Qwen3-30B-A3B", "a100_sxm", mode="agg", backend_name="vllm", isl=1024, osl=32,
                           batch_size=1, tp_size=4, moe_tp_size=4, moe_ep_size=1)
    expected = float(agg.ttft) - estimate("static_ctx", 1024, 1)
    roles = made[0]
    assert roles["agg"]["worker"].dispatch_ms == pytest.approx(expected, rel=1e-6)
    assert 30.0 < expected < 50.0  # vLLM's 0.8 ms per layer x 48 layers, as aiconfigurator 0.12 has it
    assert roles["disagg"]["prefill"].dispatch_ms == 0.0 == roles["disagg"]["decode"].dispatch_ms
