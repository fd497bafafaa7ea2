"""The AWS rehearsal (``examples/aws-rehearsal.yaml``): a campaign whose experiments run Dynamo's mocker on CPU
node groups (``engine: mocker``), so the whole AWS path is proven before any GPU is scaled. Its workers'
arguments are held to the mocker's own parser (the installed Dynamo 1.6.1), its plan to the dollar it is
meant to cost, its figures labelled SIMULATED."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.aws.k8s.common import GPU, model_snapshot_dir
from benchctl.aws.k8s.prefetch import MOCKER_FILES, render_prefetch_job
from benchctl.aws.k8s.render import render_dgd
from benchctl.cli.main import main
from benchctl.errors import SpecError
from benchctl.planning.history import aws_limits
from benchctl.planning.plan import format_plan, plan_campaign
from benchctl.spec.model import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
REHEARSAL = ROOT / "examples" / "aws-rehearsal.yaml"
CID = "aws-rehearsal-20261201-000000"


def _data() -> dict[str, Any]:
    return yaml.safe_load(REHEARSAL.read_text())


def _workers(dgd: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in dgd["spec"]["components"] if c["type"] != "frontend"]


@pytest.mark.parametrize("experiment", ["agg", "disagg"])
def test_mocker_workers_run_on_the_cpu_pool_with_arguments_the_mockers_own_parser_accepts(experiment):
    from dynamo.mocker.args import parse_args  # Dynamo 1.6.1's own command line

    spec = load_spec(REHEARSAL)
    dgd = render_dgd(spec, CID, experiment)
    assert "backendFramework" not in dgd["spec"]  # the operator's vllm defaults are not for the mocker
    exp = spec.experiment(experiment)
    for comp, group in zip(_workers(dgd), exp.workers, strict=True):
        pod = comp["podTemplate"]["spec"]
        (c,) = pod["containers"]
        assert c["command"] == ["python3", "-m", "dynamo.mocker"] and c["image"] == spec.kubernetes.dynamo_image
        args = parse_args(c["args"])
        assert args.model_path == model_snapshot_dir(spec.model) and args.model_name == spec.model.name
        if exp.mode == "disaggregated":
            assert args.disaggregation_mode == group.role
            assert bool(args.bootstrap_ports_list) == (group.role == "prefill")  # decode connects, prefill listens
        assert args.kv_bytes_per_token == spec.model.kv_bytes_per_token
        assert GPU not in c["resources"]["limits"] and GPU not in c["resources"]["requests"]
        assert c["resources"]["requests"] == {"cpu": spec.kubernetes.mocker_cpu, "memory": spec.kubernetes.mocker_memory}
        assert pod["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "benchctl-rehearsal"}
        assert {m["mountPath"]: m.get("readOnly") for m in c["volumeMounts"]} == {"/models": True}
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env.get("HF_HUB_OFFLINE") == "1" and "HF_TOKEN" not in env


def test_the_rehearsal_plans_on_aws_under_a_dollar_without_a_gpu_and_says_it_is_simulated():
    spec = load_spec(REHEARSAL)
    plan = plan_campaign(spec, "aws")
    assert plan.est_usd is not None and plan.est_usd < 1.0 and plan.est_gpu_hours == 0
    assert plan.budget_problems == [] and aws_limits(spec, plan, 30)[1] == []
    assert {e.serving_engine for e in plan.experiments} == {"mocker"}
    assert plan.experiments[0].nodes == {"cpu-rehearsal": 1}  # two 2-vCPU workers on one 3-slot node
    text = format_plan(plan)
    assert "Dynamo mocker workers" in text and "SIMULATED" in text
    # every workload of the plan, briefly
    assert {s.kind for s in plan.experiments[0].steps} == {"concurrency_sweep", "multi_turn", "sequence_distribution",
                                                           "prefix_cache"}


def test_a_mocker_campaign_prefetches_the_config_and_tokenizer_only():
    spec = load_spec(REHEARSAL)
    (c,) = render_prefetch_job(spec.model, spec.kubernetes, CID, weights=False)["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["PATTERNS"].split(",") == list(MOCKER_FILES)
    (c,) = render_prefetch_job(spec.model, spec.kubernetes, CID)["spec"]["template"]["spec"]["containers"]
    assert "PATTERNS" not in {e["name"] for e in c["env"]}  # vLLM loads the weights


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["pools"][0].pop("pods_per_node"), "needs pods_per_node"),
    (lambda d: d["pools"][0].update(network={"efa": True, "efa_interfaces": 1}), "no network.efa"),
    (lambda d: d["experiments"][0].update(engine="vllm"), "experiments[0].engine: 'vllm' with pool 'cpu-rehearsal'"),
    (lambda d: d["pools"][0].update(gpus_per_node=8, gpu_kind="A100-40GB"), "the mocker runs on CPU pools"),
    (lambda d: d["experiments"][1].update(engine="vllm"), "engine: mocker and vllm in one campaign"),
])
def test_a_mocker_experiment_needs_a_cpu_pool_and_a_campaign_of_its_own(change, message, tmp_path, capsys):
    data = copy.deepcopy(_data())
    change(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert any(message in p for p in err.value.problems), err.value.problems
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_the_capacity_check_of_a_cpu_pool_counts_ready_nodes_that_have_no_gpu():
    from benchctl.aws.k8s.client import KubeClient
    from benchctl.aws.pool_nodes import ready_gpu_nodes
    from tests.fakes.k8s_api import FakeKubeApi

    with FakeKubeApi() as api:
        api.add_node("cpu-1", {"eks.amazonaws.com/nodegroup": "benchctl-rehearsal"})
        api.add_node("cpu-2", {"eks.amazonaws.com/nodegroup": "benchctl-rehearsal"}, ready=False)
        api.add_node("gpu-1", {"eks.amazonaws.com/nodegroup": "gpu-p4d"}, allocatable_gpus=8)
        kube = KubeClient(api.url, token=lambda: "test-token")
        assert ready_gpu_nodes(kube, "eks.amazonaws.com/nodegroup=benchctl-rehearsal", 0) == ["cpu-1"]
        assert ready_gpu_nodes(kube, "eks.amazonaws.com/nodegroup=benchctl-rehearsal", 8) == []


def test_a_mocker_campaign_on_aws_is_labelled_simulated(tmp_path):
    from benchctl.campaign.base import simulated
    from benchctl.local.lake import LocalLake
    from tests.fakes.ports import providers_for_test

    spec = load_spec(REHEARSAL)
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, engine="aws")
    assert simulated(p) and simulated(p, "agg")
    seed = providers_for_test(tmp_path / "run2", LocalLake(tmp_path / "lake2"),
                              spec=load_spec(ROOT / "examples" / "seed-plan.yaml"), engine="aws")
    assert not simulated(seed)
