"""`benchctl predict`: aiconfigurator's offline predictions for every concurrency-sweep step.

The real aiconfigurator runs in-process (about a second per unique configuration; the seed plan has
about 35, computed once for the module and cached), so the whole file takes ~40 s: the integration tier.
"""

import copy
import itertools
import math
from pathlib import Path

import pytest
import yaml

from benchctl.cli.main import main
from benchctl.forecast import predict, predict_table
from benchctl.lake import schema
from benchctl.local.lake import LocalLake
from benchctl.planning.plan import plan_campaign
from benchctl.spec.deployment import PoolSpec
from benchctl.spec.model import load_spec, parse_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "seed-plan.yaml"
FIGURES = ("predicted_ttft_ms", "predicted_itl_ms", "predicted_output_tokens_per_s",
           "predicted_tokens_per_s_per_gpu", "memory_gb_per_gpu")


@pytest.fixture(scope="module")
def seed():
    spec = load_spec(SEED)
    plan = plan_campaign(spec, "aws")
    return spec, plan, predict.predict_plan(spec, plan, "c1")


def _by_concurrency(rows, experiment, workload="concurrency-sweep"):
    """{concurrency: row} of one experiment's repeat-0 steps of one sweep workload."""
    return {r["concurrency"]: r for r in rows
            if r["experiment"] == experiment and r["workload"] == workload and r["step_id"].endswith("-r0")}


def _small_spec(pool: dict, workers: list[dict], concurrency: list[int], repeats: int = 1):
    data = yaml.safe_load(SEED.read_text())
    data["pools"] = [{**data["pools"][0], **pool}]
    data["experiments"] = [{"name": "e", "mode": "aggregated", "workers": workers}]
    data["workloads"] = [copy.deepcopy(data["workloads"][0]) | {"concurrency": concurrency}]
    data["repeats"] = repeats
    data["design"] = {"deployments": 1}  # one deployment: its repeats are the rows
    data.pop("budget")
    data.pop("pricing")
    spec = parse_spec(data)
    return spec, plan_campaign(spec, "aws")


# ------------------------------------------------------------------------------------------------ pure
def test_gpu_system_and_memory_from_the_pool():
    def pool(kind, instance="x.large"):
        return PoolSpec(name="p", instance_type=instance, gpus_per_node=8, gpu_kind=kind)

    assert predict.gpu_system(pool("A100-40GB", "p4d.24xlarge")) == "a100_sxm"
    assert predict.gpu_system(pool("L40S-48GB", "g6e.12xlarge")) == "l40s"
    assert predict.gpu_system(pool("gpu", "p4d.24xlarge")) == "a100_sxm"  # by instance family
    assert predict.gpu_system(pool("H100-80GB", "p5.48xlarge")) is None
    assert predict.gpu_system(pool("A10G-24GB", "g5.12xlarge")) is None  # A10G is not an A100
    assert predict.gpu_system(pool("L40-48GB")) is None  # L40 is not an L40S
    assert predict.gpu_memory_gb(pool("A100-40GB")) == 40.0
    assert predict.gpu_memory_gb(pool("L40S-48GB")) == 48.0
    assert predict.gpu_memory_gb(pool("A100")) is None


# ------------------------------------------------------------------------------------ the seed plan
def test_a_prediction_for_every_concurrency_sweep_step(seed):
    spec, plan, rows = seed
    # every fixed load of a sweep (a search probe's load is chosen at run time: predicted apart, forecast.edge)
    want = [(e.lake_name, s.step_id) for e in plan.experiments for s in e.steps
            if s.kind == "concurrency_sweep" and s.probe is None]  # every deployment's (its repeats): the lake's names
    assert [(r["experiment"], r["step_id"]) for r in rows] == want
    assert len(want) == 2 * (11 + 7) * spec.total_repeats
    for r in rows:
        assert r["source"] == "aiconfigurator 0.12.0 estimate"
        assert r["system"] == "a100_sxm" and r["tp"] == 4
        assert (r["isl"], r["osl"]) in ((1024, 512), (8192, 512))
        for f in FIGURES:
            assert isinstance(r[f], float) and math.isfinite(r[f]) and r[f] > 0, (r["step_id"], f, r[f])


def test_repeats_of_a_step_get_the_same_prediction(seed):
    _, _, rows = seed
    by_variant: dict = {}
    for r in rows:
        key = (r["experiment"], r["workload"], r["concurrency"])
        figures = tuple(r[f] for f in FIGURES)
        assert by_variant.setdefault(key, figures) == figures


def test_modes_and_systems(seed):
    _, _, rows = seed
    agg, disagg = _by_concurrency(rows, "agg-tp4x4"), _by_concurrency(rows, "disagg-2p2d-tp4")
    assert agg[1]["mode"] == "aggregated" and agg[1]["decode_system"] is None
    assert disagg[1]["mode"] == "disaggregated" and disagg[1]["decode_system"] == "a100_sxm"
    assert "per-replica batch 4 = ceil(16/4)" in agg[16]["note"]
    assert "per-worker batch 8 = ceil(16/2)" in disagg[16]["note"]


def test_latency_and_throughput_grow_with_concurrency(seed):
    # A bigger load never lowers TTFT, ITL or throughput. Where a worker's batch is full (vLLM's max_num_seqs,
    # or its KV cache) or the prefill stage saturates, throughput stops growing and the extra requests wait:
    # TTFT rises by the wait, ITL stays at the full batch's.
    _, _, rows = seed
    for exp in ("agg-tp4x4", "disagg-2p2d-tp4"):
        for workload, loads in (("concurrency-sweep", [1, 2, 4, 8, 16, 32, 64, 256, 512, 1024, 1536]),
                                ("concurrency-sweep-long", [1, 4, 16, 64, 128, 192, 256])):
            by_c = _by_concurrency(rows, exp, workload)
            assert sorted(by_c) == loads
            for lo, hi in itertools.pairwise(loads):
                a, b = by_c[lo], by_c[hi]
                assert b["predicted_ttft_ms"] >= a["predicted_ttft_ms"], (exp, workload, lo, hi)
                assert b["predicted_itl_ms"] >= a["predicted_itl_ms"] - 1e-9, (exp, workload, lo, hi)
                assert b["predicted_output_tokens_per_s"] >= a["predicted_output_tokens_per_s"] - 1e-6, (exp, lo, hi)
                if b["predicted_queue_ms"] > a["predicted_queue_ms"]:
                    assert "wait" in b["note"], b["note"]
            assert by_c[loads[-1]]["predicted_itl_ms"] > by_c[1]["predicted_itl_ms"]
    agg = _by_concurrency(rows, "agg-tp4x4")
    assert agg[64]["predicted_ttft_ms"] > agg[1]["predicted_ttft_ms"]


def test_the_seed_plans_sweeps_reach_past_the_slo_in_both_modes_at_both_input_lengths(seed, capsys):
    spec, _, rows = seed
    assert (spec.slo.ttft_ms, spec.slo.itl_ms) == (500, 30)
    regimes = {(g["mode"], g["isl"]): g for g in predict_table.slo_regimes(rows)}
    assert set(regimes) == {(m, isl) for m in ("aggregated", "disaggregated") for isl in (1024, 8192)}
    for key, g in regimes.items():
        assert len(g["within"]) >= 1 and len(g["past"]) >= 2, (key, g)
        assert not g["unknown"], key
        # the sweep crosses once: every load within the SLO is below every load past it
        assert max(g["within"]) < min(g["past"]), (key, g)
        assert g["highest_within"] == max(g["within"])
    for r in rows:  # within_slo is exactly "both predicted figures within the bounds"
        assert r["within_slo"] == (r["predicted_ttft_ms"] <= 500 and r["predicted_itl_ms"] <= 30), r["step_id"]
    assert main(["predict", str(SEED)]) == 0
    out = capsys.readouterr().out
    assert "SLO: TTFT <= 500 ms, ITL <= 30 ms" in out
    for exp, workload in (("agg-tp4x4", "concurrency-sweep"), ("disagg-2p2d-tp4", "concurrency-sweep-long")):
        g = next(x for x in predict_table.slo_regimes(rows) if (x["experiment"], x["workload"]) == (exp, workload))
        assert (f"{exp} ({g['mode']}) {workload} ISL {g['isl']}/OSL 512: highest load predicted within the SLO "
                f"c={g['highest_within']}; past it at c = {', '.join(map(str, g['past']))}") in out


def test_memory_is_reported_and_fits_a100_40gb(seed):
    _, _, rows = seed
    for r in rows:  # every rated batch fits (a larger one is rated at what the KV cache holds, the rest wait)
        assert r["fits_memory"] is True
        assert 15 < r["memory_gb_per_gpu"] <= 0.9 * 40  # ~15 GiB of BF16 weights per GPU at TP4
        assert "0.9 x 40" in r["note"] and "fits" in r["note"]


def test_rows_normalise_against_the_schema(seed):
    _, _, rows = seed
    names = schema.column_names("predictions")
    assert schema.partition_keys("predictions") == ["campaign_id", "experiment"]
    for r in rows:
        assert set(r) == set(names)
        assert schema.normalize_row("predictions", r) == {n: r[n] for n in names}


# ----------------------------------------------------------------------------------- small variants
def test_unknown_gpu_yields_a_note_and_null_figures():
    spec, plan = _small_spec({"instance_type": "p5.48xlarge", "gpu_kind": "H100-80GB"},
                             [{"role": "worker", "pool": "p4d", "replicas": 2, "tensor_parallel": 4}], [1, 8])
    rows = predict.predict_plan(spec, plan, "c1")
    assert [r["concurrency"] for r in rows] == [1, 8]
    for r in rows:
        assert r["system"] is None
        assert all(r[f] is None for f in FIGURES) and r["fits_memory"] is None
        assert "no aiconfigurator performance data" in r["note"] and "H100-80GB" in r["note"]
        schema.normalize_row("predictions", r)


def test_tp1_does_not_fit_a_40gb_a100_but_fits_an_80gb_one():
    workers = [{"role": "worker", "pool": "p4d", "replicas": 1, "tensor_parallel": 1}]
    (small,) = predict.predict_plan(*_small_spec({}, workers, [1]), "c1")
    (big,) = predict.predict_plan(*_small_spec({"instance_type": "p4de.24xlarge", "gpu_kind": "A100-80GB"},
                                               workers, [1]), "c1")
    assert small["memory_gb_per_gpu"] == big["memory_gb_per_gpu"] > 36  # ~57 GiB of weights on one GPU
    assert small["fits_memory"] is False and "DOES NOT FIT" in small["note"]
    assert big["fits_memory"] is True


def test_unsupported_shape_is_a_note_not_a_crash():
    # no a100_sxm vLLM MoE data at TP8 (etp8)
    spec, plan = _small_spec({}, [{"role": "worker", "pool": "p4d", "replicas": 1, "tensor_parallel": 8}], [1])
    (row,) = predict.predict_plan(spec, plan, "c1")
    assert row["predicted_ttft_ms"] is None and "aiconfigurator gave no estimate" in row["note"]


def test_each_configuration_is_estimated_once(monkeypatch):
    import aiconfigurator.cli.api as api

    calls = []
    real = api.cli_estimate

    def counting(*args, **kwargs):
        calls.append(kwargs["batch_size"])
        return real(*args, **kwargs)

    monkeypatch.setattr(predict, "_CACHE", {})
    monkeypatch.setattr(api, "cli_estimate", counting)
    # 4 replicas: concurrency 1, 2 and 4 all mean batch 1 per replica; 3 repeats of each
    spec, plan = _small_spec({}, [{"role": "worker", "pool": "p4d", "replicas": 4, "tensor_parallel": 4}],
                             [1, 2, 4], repeats=3)
    first = predict.predict_plan(spec, plan, "c1")
    assert len(first) == 9 and calls == [1]
    assert predict.predict_plan(spec, plan, "c1") == first and calls == [1]
    by_c = {r["concurrency"]: r for r in first}
    assert by_c[4]["predicted_output_tokens_per_s"] == pytest.approx(4 * by_c[1]["predicted_output_tokens_per_s"])


# ------------------------------------------------------------------------------------------------- CLI
def test_cli_prints_and_writes_the_lake(seed, tmp_path, capsys):
    lake = tmp_path / "lake"
    assert main(["predict", str(SEED), "--lake", str(lake), "--campaign-id", "c1"]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED by aiconfigurator, not measured" in out
    assert "agg-tp4x4" in out and "disagg-2p2d-tp4" in out
    stored = LocalLake(lake).read_table("predictions", "c1")
    _, _, rows = seed
    key = lambda r: (r["experiment"], r["step_id"])  # noqa: E731
    assert sorted(stored, key=key) == sorted((schema.normalize_row("predictions", r) for r in rows), key=key)
    # rewriting is idempotent (same part name)
    assert main(["predict", str(SEED), "--lake", str(lake), "--campaign-id", "c1"]) == 0
    assert len(LocalLake(lake).read_table("predictions", "c1")) == len(rows)


def test_cli_without_lake_only_prints(tmp_path, capsys):
    spec = tmp_path / "h100.yaml"
    data = yaml.safe_load(SEED.read_text())
    data["pools"][0] |= {"instance_type": "p5.48xlarge", "gpu_kind": "H100-80GB"}
    data.pop("pricing")
    data.pop("budget")
    spec.write_text(yaml.safe_dump(data))
    assert main(["predict", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "no aiconfigurator performance data for pool p4d" in out
    assert not (tmp_path / "lake").exists()


def test_aiconfigurators_memory_model_gives_the_l40s_workers_a_kv_cache_below_the_bound_the_example_states():
    # examples/kv-offload-l40s.yaml sizes its working set against vLLM's arithmetic (an upper bound on the GPU
    # KV cache); aiconfigurator's memory model (activations, NCCL, its slack) must give less, never more
    from benchctl.forecast.gpus import VLLM_GPU_MEMORY_UTILIZATION, gpu_kv_capacity_tokens
    from benchctl.forecast.predict import _Config, _estimate

    spec = load_spec(ROOT / "examples" / "kv-offload-l40s.yaml")
    (w,) = spec.workloads
    mem = {}
    for b in (1, 9):
        raw = _estimate(_Config(spec.model.name, "agg", "l40s", None, w.isl, w.osl, 2, b))
        assert isinstance(raw, dict), raw
        mem[b] = float(raw["memory"])
    per_request = (mem[9] - mem[1]) / 8  # GiB of KV per request of isl + osl tokens, on each GPU
    assert per_request > 0
    budget = VLLM_GPU_MEMORY_UTILIZATION * 48
    aic_tokens = (budget - (mem[1] - per_request)) / per_request * (w.isl + w.osl)
    bound = gpu_kv_capacity_tokens(spec.model, spec.pool("g6e"), 2)
    assert bound is not None and 0 < aic_tokens <= bound
    assert w.working_set_tokens() > 2 * aic_tokens  # two workers: still past what their GPUs hold


def test_a_first_token_sooner_than_the_delayed_ack_is_predicted_as_aiperf_measures_it_through_dynamo_161():
    # Given the smoke spec (Dynamo 1.6.1), whose disaggregated first token aiconfigurator puts under 40 ms
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    spec = parse_spec(data)
    rows = predict.predict_plan(spec, plan_campaign(spec, "local"), "c1")
    disagg = _by_concurrency(rows, "disagg")
    agg = _by_concurrency(rows, "agg")
    # Then those steps read the frontend's floor, the engine's figure kept in the note; steps above it are as
    # aiconfigurator rates them (aggregated: its dispatch overhead puts them past the floor)
    floor = predict.FRONTEND_FIRST_TOKEN_FLOOR_MS
    assert disagg[1]["predicted_ttft_ms"] == floor and "ms at the engine" in disagg[1]["note"]
    engine = float(disagg[1]["note"].split("TTFT ")[1].split(" ms at the engine")[0])
    assert 20 < engine < floor
    assert all(r["predicted_ttft_ms"] > floor and "at the engine" not in r["note"] for r in agg.values())
    # When the spec runs a Dynamo not checked for the stall, no floor, said so
    data["kubernetes"] = {"dynamo_image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.7.0"}
    later = parse_spec(data)
    (row,) = [r for r in predict.predict_plan(later, plan_campaign(later, "local"), "c1")
              if r["experiment"] == "disagg" and r["concurrency"] == 1]
    assert row["predicted_ttft_ms"] == pytest.approx(engine, abs=0.06) and "Dynamo 1.7.0: not checked" in row["note"]


def test_the_seed_plan_locates_each_predicted_edge_to_10_percent_and_prices_the_search_beside_the_grid(
        capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from benchctl.forecast.edge import predicted_edges

    spec = load_spec(SEED)
    rows = predicted_edges(spec, plan_campaign(spec, "aws"))
    assert {(r["experiment"], r["isl"]) for r in rows} == {(e.name, isl) for e in spec.experiments
                                                          for isl in (1024, 8192)}
    for r in rows:
        assert r["note"] is None and r["searched"]
        # the grid alone brackets the edge within 1.5-2x; the search within 10 % (or two adjacent loads), and
        # inside the grid's bracket, in at most its max_probes probes
        assert r["grid_past"] / r["grid_within"] >= 1.5
        assert r["edge_past"] <= r["edge_within"] * 1.10 or r["edge_past"] - r["edge_within"] <= 1
        assert r["grid_within"] <= r["edge_within"] < r["edge_past"] <= r["grid_past"]
        assert r["located_within_budget"] and 1 <= r["expected_probes"] <= r["max_probes"]
        assert 0 < r["search_gpu_hours_expected"] <= r["search_gpu_hours_max"] < r["grid_gpu_hours"]
    # the CLI prints the same, the search's GPU-hours next to the grid's (the predictions are cached in-process)
    assert main(["plan", str(SEED), "--engine", "aws"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if " GPU-h; search [c=" in ln]
    assert len(lines) == len(rows)
    for ln in lines:
        grid = re.search(r"grid \[c=(\d+), c=(\d+)\), ([\d.]+)x for ([\d.]+) GPU-h", ln)
        search = re.search(r"search \[c=(\d+), c=(\d+)\), ([\d.]+)x expected in (\d) of at most 4 probes per "
                           r"repeat, ([\d.]+) GPU-h \(at most ([\d.]+)\)", ln)
        assert grid and search, ln
        assert float(search[3]) <= 1.10 < 1.5 <= float(grid[3])
