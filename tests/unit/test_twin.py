"""The twin: aiconfigurator's answers made into the mocker's profile, the knobs that use it, and the plan's
request times. Synthetic curves only (aiconfigurator is exercised by the integration and e2e tiers)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from benchctl.forecast import twin
from benchctl.forecast.twin_profile import (
    NAME_PATTERN,
    ProfileError,
    TimingProfile,
    profile_dir,
    write_profile,
)
from benchctl.planning.mocker import mocker_flags
from benchctl.planning.plan import GUESS, plan_campaign
from benchctl.spec.model import parse_spec

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8"))


def spec_with(**mocker):
    data = copy.deepcopy(SMOKE)
    for e in data["experiments"]:
        e["mocker"] = dict(mocker)
    return parse_spec(data, "smoke.yaml")


def key(**over) -> twin.TwinKey:
    fields = {"system": "a100_sxm", "tp": 4, "model": "Qwen/Qwen3-30B-A3B", "role": "worker", "gpu_memory_gb": 40.0,
              "block_size": 64, "aiconfigurator_version": "0.12.0"}
    return twin.TwinKey(**{**fields, **over})


def curves(capacity: float | None = 50_000.0) -> twin.Curves:
    """Prefill 10 ms + 0.01 ms per token; a decode iteration 3 ms + 0.5 ms per request (context-free)."""
    return twin.Curves({i: 10.0 + 0.01 * i for i in twin.PREFILL_ISL},
                       {(b, c): 3.0 + 0.5 * b for b in twin.AIC_BATCH for c in twin.AIC_CTX}, capacity, "0.14.0")


def test_the_profile_holds_aiconfigurators_prefill_and_decode_at_the_batch_the_kv_tokens_imply():
    p = twin.build_profile(key(), curves())
    assert p.prefill_isl == tuple(float(i) for i in twin.PREFILL_ISL)
    assert p.ttft_ms(1024) == pytest.approx(20.24)
    for batch, ctx in ((1, 256), (4, 1024), (16, 512), (64, 256)):
        assert p.itl_ms(batch * ctx, ctx) == pytest.approx(3.0 + 0.5 * batch)
    # fewer KV tokens than one request's context: still a batch of one
    assert p.itl_ms(64, 4096) == pytest.approx(3.5)
    # more than the KV cache holds (50,000 tokens = 48 requests of 1024): clamped to what it holds
    assert p.itl_ms(2**20, 1024) == pytest.approx(3.0 + 0.5 * 50_000 / 1024)


def test_the_kv_capacity_becomes_mocker_blocks_and_the_label_names_system_tp_and_versions():
    p = twin.build_profile(key(block_size=64), curves(capacity=100_000.0))
    assert p.provenance["num_gpu_blocks"] == 100_000 // 64
    assert p.provenance["label"] == "SIMULATED on the a100_sxm TP4 twin (aiconfigurator 0.12.0, vllm 0.14.0)"
    for field in ("aiconfigurator_version", "system", "backend", "backend_version", "model", "tp", "role", "grid"):
        assert p.provenance[field] is not None, field
    assert twin.build_profile(key(), curves(capacity=None)).provenance["num_gpu_blocks"] is None


def test_a_profile_name_is_the_store_s_kind_and_changes_with_what_changes_the_curves():
    names = {key().name(), key(tp=8).name(), key(aiconfigurator_version="0.13.0").name(), key(role="decode").name(),
             key(gpu_memory_gb=80.0).name(), key(system="l40s").name()}
    assert len(names) == 6
    assert all(NAME_PATTERN.match(n) for n in names)
    assert key().name() == key().name() and key().name().startswith("aic-a100_sxm-tp4-worker-")


def test_the_twin_sets_profile_blocks_and_speedup_1_per_role_and_what_the_spec_sets_wins():
    t = {"prefill": twin.RoleTwin("prefill", "p", "/s/p.npz", 100), "decode": twin.RoleTwin("decode", "d", "/s/d.npz", 200)}
    knobs = twin.mocker_knobs({"speedup_ratio": 1.0, "block_size": 64}, t)
    assert mocker_flags(knobs, "prefill") == ["--block-size", "64", "--num-gpu-blocks-override", "100",
                                              "--planner-profile-data", "/s/p.npz", "--speedup-ratio", "1.0"]
    assert "/s/d.npz" in mocker_flags(knobs, "decode")
    mine = twin.mocker_knobs({"speedup_ratio": 4.0, "num_gpu_blocks": 7}, t)
    flags = mocker_flags(mine, "decode")
    assert flags[flags.index("--num-gpu-blocks-override") + 1] == "7"
    assert flags[flags.index("--speedup-ratio") + 1] == "4.0"
    # a role without a twin keeps the mocker's built-in timing
    plain = twin.mocker_knobs({"block_size": 64}, {"worker": twin.RoleTwin("worker", note="off")})
    assert "--planner-profile-data" not in mocker_flags(plain, "worker")


def test_a_profile_is_made_once_then_read_from_the_store(tmp_path):
    calls = []

    def fake(k):
        calls.append(k)
        return curves()

    first = twin.ensure(tmp_path, key(), fake)
    second = twin.ensure(tmp_path, key(), fake)
    assert len(calls) == 1
    assert first.npz == second.npz == str(profile_dir(tmp_path, key().name()) / "perf_data.npz")
    assert second.num_gpu_blocks == 50_000 // 64 and second.label.startswith("SIMULATED on the a100_sxm TP4 twin")
    assert not twin.ensure(tmp_path / "other", key(), fake, write=False).npz  # made in memory, nothing written
    assert not (tmp_path / "other").exists()


def test_off_a_named_profile_and_a_gpu_without_data(tmp_path):
    spec = spec_with(twin="off")
    pools = {p.name: p for p in spec.pools}
    assert all(t.npz is None and t.note for t in twin.resolve(tmp_path, pools, spec.model.name,
                                                              spec.experiments[1]).values())
    named = spec_with(twin="fitted-a100")
    with pytest.raises(ProfileError, match="fitted-a100"):
        twin.resolve(tmp_path, pools, spec.model.name, named.experiments[0])
    write_profile(profile_dir(tmp_path, "fitted-a100"), twin.build_profile(key(), curves()))
    got = twin.resolve(tmp_path, pools, spec.model.name, named.experiments[1])
    assert set(got) == {"prefill", "decode"} and all(t.name == "fitted-a100" for t in got.values())
    other = {n: p.model_copy(update={"gpu_kind": "H100-80GB", "instance_type": "p5.48xlarge"}) for n, p in pools.items()}
    assert "no twin" in (twin.twin_keys(other, spec.model.name, spec.experiments[0], "0.12.0") or "")


def flat(prefill_ms: float, itl_ms: float) -> TimingProfile:
    return TimingProfile((1.0, 1e6), (prefill_ms, prefill_ms), (1.0, 1e7), (1.0, 1e6),
                         ((itl_ms, itl_ms), (itl_ms, itl_ms)), {"label": "SIMULATED on the test twin"})


def test_a_request_takes_its_prefill_and_osl_iterations_with_the_batch_s_prefills_mixed_in():
    agg = {"worker": flat(20.0, 5.0)}
    assert twin.request_seconds(agg, {"worker": 2}, 1, 256, 10) == pytest.approx((20 + 10 * 5) / 1000)
    # 4 in flight on 2 workers: a batch of 2, each iteration carries 1/10 of the other's prefill
    assert twin.request_seconds(agg, {"worker": 2}, 4, 256, 10) == pytest.approx((20 + 10 * (5 + 20 / 10)) / 1000)
    disagg = {"prefill": flat(100.0, 1.0), "decode": flat(1.0, 2.0)}
    # 1 prefill worker doing 10 requests/s cannot feed 8 in flight cycling every 0.12 s: the cycle stretches
    assert twin.request_seconds(disagg, {"prefill": 1, "decode": 1}, 1, 256, 10) == pytest.approx(0.12)
    assert twin.request_seconds(disagg, {"prefill": 1, "decode": 1}, 8, 256, 10) == pytest.approx(0.8)


def test_only_an_aggregated_worker_holds_aiconfigurators_dispatch_and_its_requests_take_that_much_longer():
    with_dispatch = twin.Curves(curves().prefill_ms, curves().decode_ms, 50_000.0, "0.14.0", dispatch_ms=38.4)
    worker, prefill = (twin.build_profile(key(role=r), with_dispatch) for r in ("worker", "prefill"))
    assert worker.provenance["dispatch_ms"] == 38.4 and prefill.provenance["dispatch_ms"] == 0.0
    assert twin.dispatch_ms_of(worker.provenance, "worker") == 38.4
    # a calibrated profile (no dispatch_ms), a role other than worker, or a value that is not a sane hold: none
    for prov, role in (({}, "worker"), (worker.provenance, "decode"), ({"dispatch_ms": "x"}, "worker"),
                       ({"dispatch_ms": -5}, "worker"), ({"dispatch_ms": float("nan")}, "worker"),
                       ({"dispatch_ms": 1e9}, "worker")):
        assert twin.dispatch_ms_of(prov, role) == 0.0, (prov, role)
    # the hold adds to each request's time, not to the engine's iterations (4 in flight on 2 workers)
    plain = twin.build_profile(key(), curves())
    for c in (1, 4):
        assert twin.request_seconds({"worker": worker}, {"worker": 2}, c, 256, 10) == pytest.approx(
            twin.request_seconds({"worker": plain}, {"worker": 2}, c, 256, 10) + 0.0384)
    # the method is part of the name: a profile made before the hold existed is made anew
    assert key().name() != key(method=1).name()


def test_the_twin_s_dispatch_reaches_the_deployment_only_for_aggregated_workers(tmp_path, monkeypatch):
    from benchctl.campaign.ports import DeploymentRequest, DeploymentTarget
    from benchctl.local.serving import LocalServing

    monkeypatch.setattr(twin, "aic_curves", lambda k: twin.Curves(curves().prefill_ms, curves().decode_ms, 50_000.0,
                                                                  "0.14.0", dispatch_ms=38.4))
    spec = spec_with()
    for exp, want in ((spec.experiments[0], {"worker": 38.4}), (spec.experiments[1], {"prefill": 0.0, "decode": 0.0})):
        req = DeploymentRequest(deployment_id="d", model_name=spec.model.name, mode=exp.mode, router="kv", groups=(),
                                target=DeploymentTarget(experiment=exp, model=spec.model, pools=tuple(spec.pools),
                                                        kubernetes=spec.kubernetes))
        _knobs, twins = LocalServing(tmp_path / exp.name, twin_store=tmp_path / "ws")._twin_knobs(req)
        assert {r: t["dispatch_ms"] for r, t in twins.items()} == want


def test_the_plan_times_request_count_steps_on_the_twin_and_leaves_duration_steps_alone():
    spec = spec_with()
    timer = twin.StepTimer({"worker": flat(20.0, 5.0)}, {"worker": 2}, "SIMULATED on the test twin")
    guessed = plan_campaign(spec, "local")
    timed = plan_campaign(spec, "local", {"agg": timer})
    agg, disagg = timed.experiment("agg"), timed.experiment("disagg")
    assert agg.step_timing == "SIMULATED on the test twin" and disagg.step_timing == GUESS
    assert disagg.steps == guessed.experiment("disagg").steps
    steps = {s.workload: s for s in agg.steps}
    setup = 8.0  # the local engine's per-step setup
    # prefix-cache: 24 requests at concurrency 4 (2 per worker), ISL 512, OSL 16
    per_request = (20 + 16 * (5 + 20 / 16)) / 1000
    assert steps["prefix-cache"].est_s == pytest.approx(round(24 * per_request / 4 + setup, 1))
    sweep = steps["concurrency-sweep"]
    assert sweep.est_s == guessed.step("agg", sweep.step_id).est_s  # 10 s of load either way
    assert agg.est_s < guessed.experiment("agg").est_s


def test_a_run_naming_a_profile_the_store_lacks_exits_2_before_anything_is_made(tmp_path, capsys):
    from benchctl.cli.main import main

    data = copy.deepcopy(SMOKE)
    data["experiments"][1]["mocker"] = {"twin": "fitted-a100"}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["run", str(spec), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "experiments[1].mocker.twin: 'fitted-a100'" in err and "valid: auto, off or a profile name" in err
    assert not (tmp_path / "runs" / "campaigns").exists()


def test_the_run_says_the_twin_of_each_role_and_which_spec_knob_wins(tmp_path):
    from benchctl.local.lake import LocalLake
    from benchctl.local.twins import write_twins

    data = copy.deepcopy(SMOKE)
    data["experiments"][0]["mocker"] = {"twin": "fitted-a100", "speedup_ratio": 2.0}
    data["experiments"][1]["mocker"] = {"twin": "off"}
    spec = parse_spec(data, "smoke.yaml")
    held = twin.Curves(curves().prefill_ms, curves().decode_ms, 50_000.0, "0.14.0", dispatch_ms=38.4)
    write_profile(profile_dir(tmp_path, "fitted-a100"), twin.build_profile(key(), held))
    notes: list[str] = []

    class Progress:
        def note(self, text: str) -> None:
            notes.append(text)

    rows = write_twins(spec, tmp_path, "c1", Progress())
    assert [n for n in notes if n.startswith("agg worker: ")] == [
        f"agg worker: {rows[0]['label']} (profile fitted-a100, {50_000 // 64} KV blocks, answers held 38.4 ms "
        "(aiconfigurator's per-request dispatch); the spec's mocker.speedup_ratio 2 wins)"]
    assert "disagg prefill: SIMULATED on the mocker's built-in timing (no twin) (mocker.twin: off)" in notes
    lake = LocalLake(tmp_path / "lake").read_table("twins", "c1")
    assert sorted((r["experiment"], r["role"], r["profile"]) for r in lake) == [
        ("agg", "worker", "fitted-a100"), ("disagg", "decode", None), ("disagg", "prefill", None)]
