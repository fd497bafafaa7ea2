"""examples/kv-offload-l40s.yaml can answer Q2 ("whether KV offload saves real money, L40S decode workers"):
the multi-turn working set computed from the spec exceeds the GPU KV cache computed from its pool, the CPU tier
holds it, and the offload rung changes nothing else. The example's comments state the same arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchctl.cli.main import main
from benchctl.forecast.gpus import gpu_kv_capacity_tokens
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import CampaignSpec, load_spec
from benchctl.spec.workloads import MultiTurn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kv-offload-l40s.yaml"


def _gpu_kv_tokens(spec: CampaignSpec, experiment: str) -> float:
    """Tokens the experiment's workers' GPU KV caches hold together (an upper bound, vLLM's arithmetic)."""
    total = 0.0
    for g in spec.experiment(experiment).workers:
        per_worker = gpu_kv_capacity_tokens(spec.model, spec.pool(g.pool), g.tensor_parallel)
        assert per_worker is not None, g
        total += g.replicas * per_worker
    return total


def test_the_multi_turn_working_set_exceeds_the_l40s_workers_gpu_kv_cache_and_fits_their_cpu_tier() -> None:
    spec = load_spec(EXAMPLE)
    (w,) = spec.workloads
    assert isinstance(w, MultiTurn)
    base, offload = spec.experiment("agg-l40s"), spec.experiment("agg-l40s-offload")
    assert {spec.pool(g.pool).gpu_kind for g in base.workers} == {"L40S-48GB"}
    working_set = w.working_set_tokens()
    gpu = _gpu_kv_tokens(spec, "agg-l40s")
    # the GPU figure is an upper bound (activations and CUDA graphs take part of the budget): the working set
    # exceeds it by a margin, so offload has something to keep
    assert working_set > 1.5 * gpu, (working_set, gpu)
    assert offload.kv_offload is not None
    workers = sum(g.replicas for g in offload.workers)
    cpu = workers * offload.kv_offload.cpu_cache_gb * 1e9 / spec.model.kv_bytes_per_token
    assert cpu >= working_set, (cpu, working_set)
    # the history of a conversation's last turn fits the model's context
    assert w.max_lengths()[0] + w.osl <= spec.model.max_context


def test_the_offload_rung_changes_only_kv_offload_on_the_same_node_and_price() -> None:
    spec = load_spec(EXAMPLE)
    base, offload = spec.experiment("agg-l40s"), spec.experiment("agg-l40s-offload")
    assert offload.base == "agg-l40s" and offload.feature == "kv_offload" and base.kv_offload is None
    assert (offload.mode, offload.router, offload.workers) == (base.mode, base.router, base.workers)
    plan = plan_campaign(spec, "aws")
    assert plan.experiment("agg-l40s").nodes == plan.experiment("agg-l40s-offload").nodes == {"g6e": 1}
    assert plan.experiment("agg-l40s").handover == {"g6e": 1}  # the same node, kept warm for the rung


def test_the_comments_state_the_arithmetic_the_spec_gives() -> None:
    spec = load_spec(EXAMPLE)
    text = EXAMPLE.read_text()
    (w,) = spec.workloads
    assert isinstance(w, MultiTurn)
    per_worker = gpu_kv_capacity_tokens(spec.model, spec.pool("g6e"), 2)
    assert per_worker is not None
    assert f"{round(per_worker, -3):,.0f} tokens per worker" in text
    assert f"{round(2 * per_worker, -3):,.0f} for the two workers" in text
    assert f"{w.working_set_tokens():,.0f} tokens" in text
    # the local mocker's GPU blocks model the same capacity (SIMULATED runs show the eviction too)
    mocker = spec.experiment("agg-l40s").mocker
    assert mocker.num_gpu_blocks is not None
    assert mocker.num_gpu_blocks * mocker.block_size == pytest.approx(per_worker, rel=0.02)


def test_it_validates_and_plans_within_its_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert main(["plan", str(EXAMPLE), "--engine", "aws"]) == 0
    assert "kv-offload-l40s" in capsys.readouterr().out
