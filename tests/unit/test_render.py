"""Kubernetes manifests rendered from campaign specs: valid objects, the right Dynamo/vLLM flags, labels
and names that keep campaigns apart, and load Jobs whose shell wrapping runs AIPerf exactly as planned.

Core kinds (Job, PodTemplate) are checked against the Kubernetes OpenAPI schemas that
``kubernetes-validate`` bundles (offline); the CRDs against the vendored upstream CRD schemas
(tests/data/crds/, strictly: an unknown field is an error). What the AWS code path actually sends is
checked the same way in test_manifests_upstream.py.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from benchctl.analysis import quality
from benchctl.aws.eks_load import verified_end
from benchctl.aws.k8s import common as kc
from benchctl.aws.k8s import jobs as j
from benchctl.aws.k8s import nodepool as npl
from benchctl.aws.k8s import prefetch as pf
from benchctl.aws.k8s import render as r
from benchctl.aws.k8s.preflight_jobs import render_preflight_job
from benchctl.campaign import step_dataset
from benchctl.cli import main as cli
from benchctl.errors import EndRecordForged, SpecError
from benchctl.planning import aiperf_args
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import CampaignSpec, parse_spec
from tests import crd_schemas, yaml_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
K8S_VERSION = "1.33"
CID = "seed-plan-20261130-070000"
CID2 = "seed-plan-20261201-080000"
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def load(name: str, mutate: Any = None) -> CampaignSpec:
    data = yaml_files.load(EXAMPLES / name)
    if mutate is not None:
        mutate(data)
    return parse_spec(data, name)


def provider(kind: str) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        for pool in data["pools"]:
            pool["provider"] = kind
            if kind == "managed-nodegroup":
                pool["nodegroup"] = "gpu-a100"
    return mutate


SPECS = {
    "seed-plan": load("seed-plan.yaml"),
    "smoke-nodegroup": load("smoke.yaml", provider("managed-nodegroup")),
    "smoke-auto": load("smoke.yaml", provider("auto-mode")),
    "feature-ladder": load("feature-ladder.yaml"),
}


def k8s_valid(obj: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:  # the schema dump is huge: name the place only
        pytest.fail(f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}: {err.message} at "
                    f"{'/'.join(map(str, err.absolute_path))}")


def components(dgd: dict[str, Any], kind: str | None = None) -> list[dict[str, Any]]:
    return [c for c in dgd["spec"]["components"] if kind is None or c["type"] == kind]


def main(c: dict[str, Any]) -> dict[str, Any]:
    (m,) = [x for x in c["podTemplate"]["spec"]["containers"] if x["name"] == "main"]
    return m


def cmdline(c: dict[str, Any]) -> list[str]:
    m = main(c)
    return [*m.get("command", []), *m.get("args", [])]


def opt(args: list[str], name: str) -> str:
    assert args.count(name) == 1, f"{name} must appear once in {args}"
    return args[args.index(name) + 1]


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in main(c).get("env", [])}


# ------------------------------------------------------------------------------------ DGD


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_dgd_matches_schema_and_its_pod_templates_are_valid_kubernetes(name: str) -> None:
    spec = SPECS[name]
    for exp in spec.experiments:
        dgd = r.render_dgd(spec, CID, exp.name)
        errors = crd_schemas.problems(dgd)
        assert not errors, errors
        assert dgd["metadata"]["namespace"] == spec.kubernetes.namespace
        for comp in components(dgd):
            k8s_valid({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                       "template": comp["podTemplate"]})


def test_the_strict_upstream_schema_rejects_what_the_api_server_would() -> None:
    dgd = r.render_dgd(SPECS["seed-plan"], CID, "agg-tp4x4")
    for breaks in (
        lambda d: components(d, "worker")[0].update(sharedMemory="16Gi"),  # a v1alpha1 field: pruned, so refused
        lambda d: main(components(d, "worker")[0]).update(resourcez={}),
        lambda d: components(d, "worker")[0].update(type="engine"),
        lambda d: components(d, "worker")[0].update(replicas="4"),
        lambda d: components(d, "worker")[0].update(runtimeVersionOverride="1.6"),
        lambda d: d["metadata"]["labels"].update({kc.LABEL_EXPERIMENT: "-bad-"}),
    ):
        broken = copy.deepcopy(dgd)
        breaks(broken)
        assert crd_schemas.problems(broken)


def test_aggregated_has_one_worker_component_disaggregated_prefill_and_decode_over_nixl() -> None:
    spec = SPECS["seed-plan"]
    agg = r.render_dgd(spec, CID, "agg-tp4x4")
    assert [c["type"] for c in components(agg)] == ["frontend", "worker"]
    (worker,) = components(agg, "worker")
    assert worker["replicas"] == 4
    assert "--disaggregation-mode" not in cmdline(worker) and "--kv-transfer-config" not in cmdline(worker)
    disagg = r.render_dgd(spec, CID, "disagg-2p2d-tp4")
    assert sorted(c["type"] for c in components(disagg)) == ["decode", "frontend", "prefill"]
    for role in ("prefill", "decode"):
        (comp,) = components(disagg, role)
        args = cmdline(comp)
        assert args[:3] == ["python3", "-m", "dynamo.vllm"]
        assert opt(args, "--model") == kc.model_snapshot_dir(spec.model)  # the pinned snapshot on the volume
        assert opt(args, "--served-model-name") == spec.model.name and "--revision" not in args
        assert opt(args, "--disaggregation-mode") == role
        assert json.loads(opt(args, "--kv-transfer-config")) == {  # the seed plan moves KV over EFA
            "kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_connector_extra_config": {"backends": ["LIBFABRIC"]}}
        assert "--connector" not in args and "--is-prefill-worker" not in args  # gone in 1.6 (FACTS)
        assert comp["sharedMemorySize"] == spec.kubernetes.shared_memory


def test_disaggregated_on_p4d_moves_kv_over_efa_with_libfabric_and_validates_upstream() -> None:
    """Issue 15: the seed plan's disaggregated DGD on p4d.24xlarge (4 EFA interfaces per node, 8 GPUs) gives each
    TP=4 worker 2 EFA interfaces, IPC_LOCK, the -efa runtime image, LIBFABRIC named to NIXL, and keeps prefill and
    decode on different nodes; it validates against the vendored upstream CRD; the aggregated one gets none of it."""
    spec = SPECS["seed-plan"]
    dgd = r.render_dgd(spec, CID, "disagg-2p2d-tp4")
    assert crd_schemas.problems(dgd) == []
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        (comp,) = components(dgd, role)
        c, pod = main(comp), comp["podTemplate"]["spec"]
        assert c["resources"]["limits"][r.EFA_RESOURCE] == c["resources"]["requests"][r.EFA_RESOURCE] == "2"
        assert c["resources"]["limits"][kc.GPU] == "4"
        assert c["image"] == "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1-efa"
        assert "IPC_LOCK" in c["securityContext"]["capabilities"]["add"]
        assert {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}.items() <= {
            e["name"]: e.get("value") for e in c["env"]}.items()
        assert json.loads(opt(cmdline(comp), "--kv-transfer-config"))["kv_connector_extra_config"] == {
            "backends": ["LIBFABRIC"]}
        (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"][kc.LABEL_ROLE] == other
        assert term["labelSelector"]["matchLabels"][kc.LABEL_EXPERIMENT] == "disagg-2p2d-tp4"
    (worker,) = components(r.render_dgd(spec, CID, "agg-tp4x4"), "worker")
    assert r.EFA_RESOURCE not in main(worker)["resources"]["limits"] and "affinity" not in worker["podTemplate"]["spec"]
    assert main(worker)["image"] == spec.kubernetes.dynamo_image


def test_without_efa_nixl_stays_on_ucx_and_pools_must_agree_on_the_path() -> None:
    ucx = load("seed-plan.yaml", lambda d: d["pools"][0].pop("network"))
    (comp,) = components(r.render_dgd(ucx, CID, "disagg-2p2d-tp4"), "prefill")
    assert json.loads(opt(cmdline(comp), "--kv-transfer-config")) == {"kv_connector": "NixlConnector",
                                                                      "kv_role": "kv_both"}
    assert r.EFA_RESOURCE not in main(comp)["resources"]["limits"]
    with pytest.raises(SpecError) as err:
        load("seed-plan.yaml", lambda d: d["pools"][0]["network"].update(efa=False))
    assert "pools[0].network: nixl_backend LIBFABRIC runs over EFA" in str(err.value)
    with pytest.raises(SpecError) as err:
        load("seed-plan.yaml", lambda d: d["pools"][0].update(instance_type="g6e.12xlarge"))
    assert "pools[0].network.efa_interfaces: required for instance type 'g6e.12xlarge'" in str(err.value)


def test_efa_workers_run_as_root_with_the_environment_of_dynamos_aws_recipes() -> None:
    """The -efa image ends with `USER dynamo`, and capabilities added to a non-root process never reach its
    effective set (kubernetes/kubernetes#56374): Dynamo's AWS recipes run EFA workers as root. Its EFA guide
    turns libfabric's shared memory off with both switches, and KVBM's NIXL agent is told LIBFABRIC (else UCX)."""
    spec = SPECS["seed-plan"]
    dgd = r.render_dgd(spec, CID, "disagg-2p2d-tp4")
    assert crd_schemas.problems(dgd) == []
    for role in ("prefill", "decode"):
        (comp,) = components(dgd, role)
        ctx = main(comp)["securityContext"]
        assert ctx["runAsUser"] == 0 and ctx["privileged"] is True
        assert {"IPC_LOCK", "SYS_PTRACE"} <= set(ctx["capabilities"]["add"])
        assert {"FI_EFA_ENABLE_SHM": "0", "FI_EFA_ENABLE_SHM_TRANSFER": "0", "DYN_KVBM_NIXL_BACKEND_LIBFABRIC": "true",
                "DYN_KVBM_NIXL_BACKEND_UCX": "false"}.items() <= env(comp).items()
    ucx = load("seed-plan.yaml", lambda d: d["pools"][0].pop("network"))  # no EFA: none of it
    (comp,) = components(r.render_dgd(ucx, CID, "disagg-2p2d-tp4"), "prefill")
    assert "securityContext" not in main(comp)
    assert not [k for k in env(comp) if k.startswith(("FI_", "DYN_KVBM_NIXL_BACKEND_"))]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_workers_serve_the_pinned_snapshot_directory_offline_under_the_model_name(name: str) -> None:
    """Dynamo 1.6.1's worker fetches `--model` from the Hub (no revision) unless it is a path that exists
    (dynamo/vllm/main.py, should_prefetch_model): the workers get the snapshot directory of model.revision, laid
    out as huggingface_hub itself names it, and serve it as model.name, offline."""
    from huggingface_hub.file_download import repo_folder_name

    spec = SPECS[name]
    for exp in spec.experiments:
        for comp in components(r.render_dgd(spec, CID, exp.name)):
            if comp["type"] == "frontend":
                continue
            args, e = cmdline(comp), env(comp)
            folder = repo_folder_name(repo_id=spec.model.name, repo_type="model")
            assert opt(args, "--model") == f"{e['HF_HOME']}/hub/{folder}/snapshots/{spec.model.revision}"
            assert opt(args, "--model").startswith(kc.MODELS_DIR + "/")  # on the model volume's mount
            assert opt(args, "--served-model-name") == spec.model.name and "--revision" not in args
            assert e["HF_HUB_OFFLINE"] == "1" and "HF_TOKEN" not in e


def test_the_frontend_reads_the_model_card_files_from_the_volume_offline() -> None:
    """The workers publish their model card's files (tokenizer, config, chat template) by their path under
    --model; the frontend resolves a path it can read before any fallback to the Hub: it mounts the volume at
    the same place and runs offline, as Dynamo's AWS recipes give it the volume and HF_HOME."""
    spec = SPECS["seed-plan"]
    for exp in spec.experiments:
        dgd = r.render_dgd(spec, CID, exp.name)
        (fe,) = components(dgd, "frontend")
        worker = next(c for c in components(dgd) if c["type"] != "frontend")
        assert fe["podTemplate"]["spec"]["volumes"] == [kc.model_volume(spec.kubernetes)]
        (mount,) = main(fe)["volumeMounts"]
        assert mount == {"name": "model-cache", "mountPath": kc.MODELS_DIR, "readOnly": True}
        assert mount["mountPath"] == main(worker)["volumeMounts"][0]["mountPath"]
        assert opt(cmdline(worker), "--model").startswith(mount["mountPath"] + "/")
        assert env(fe)["HF_HOME"] == env(worker)["HF_HOME"] and env(fe)["HF_HUB_OFFLINE"] == "1"
        assert "HF_TOKEN" not in env(fe)


def test_serving_pods_and_nodepools_keep_auto_mode_from_disrupting_them_mid_campaign() -> None:
    spec = SPECS["smoke-auto"]
    for exp in spec.experiments:
        dgd = r.render_dgd(spec, CID, exp.name)
        assert crd_schemas.problems(dgd) == []
        for comp in components(dgd):
            assert comp["podTemplate"]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    pool = npl.render_nodepool(spec, CID, "gpu-a100", 1)
    assert crd_schemas.problems(pool) == []
    assert pool["spec"]["disruption"]["budgets"] == [{"nodes": "0", "reasons": ["Drifted"]}]
    bad = copy.deepcopy(pool)  # the schema check holds: a budget Karpenter refuses is refused here
    bad["spec"]["disruption"]["budgets"] = [{"nodes": "none", "reasons": ["Drift"]}]
    assert crd_schemas.problems(bad)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_gpu_limits_and_requests_equal_tensor_parallel(name: str) -> None:
    spec = SPECS[name]
    for exp in spec.experiments:
        dgd = r.render_dgd(spec, CID, exp.name)
        workers = [c for c in components(dgd) if c["type"] != "frontend"]
        assert len(workers) == len(exp.workers)
        for comp, group in zip(workers, exp.workers, strict=True):
            res = main(comp)["resources"]
            assert res["limits"]["nvidia.com/gpu"] == res["requests"]["nvidia.com/gpu"] == str(group.tensor_parallel)
            assert opt(cmdline(comp), "--tensor-parallel-size") == str(group.tensor_parallel)
            assert comp["replicas"] == group.replicas
        assert "resources" not in main(components(dgd, "frontend")[0])


def test_kv_router_sets_frontend_mode_and_workers_publish_kv_events() -> None:
    spec = SPECS["feature-ladder"]
    rr, kv = r.render_dgd(spec, CID, "agg"), r.render_dgd(spec, CID, "agg-kv")
    (front,) = components(rr, "frontend")
    assert cmdline(front)[:3] == ["python3", "-m", "dynamo.frontend"]
    assert opt(cmdline(front), "--http-port") == "8000"
    assert opt(cmdline(front), "--router-mode") == "round-robin"
    assert opt(cmdline(components(kv, "frontend")[0]), "--router-mode") == "kv"
    assert "--kv-events-config" not in cmdline(components(rr, "worker")[0])
    events = json.loads(opt(cmdline(components(kv, "worker")[0]), "--kv-events-config"))
    assert events["enable_kv_cache_events"] is True
    # prefix caching is on in both (explicitly), so the rung changes routing only
    assert all("--enable-prefix-caching" in cmdline(components(d, "worker")[0]) for d in (rr, kv))
    disagg = r.render_dgd(spec, CID, "disagg-kv")
    assert "--kv-events-config" in cmdline(components(disagg, "prefill")[0])
    assert "--kv-events-config" not in cmdline(components(disagg, "decode")[0])


def test_kv_offload_sets_kvbm_env_and_connectors() -> None:
    spec = SPECS["feature-ladder"]
    off = r.render_dgd(spec, CID, "disagg-kv-off")
    (prefill,) = components(off, "prefill")
    (decode,) = components(off, "decode")
    assert env(prefill)["DYN_KVBM_CPU_CACHE_GB"] == "4"
    assert "DYN_KVBM_DISK_CACHE_GB" not in env(prefill)
    cfg = json.loads(opt(cmdline(prefill), "--kv-transfer-config"))
    assert cfg["kv_connector"] == "PdConnector"
    assert [c["kv_connector"] for c in cfg["kv_connector_extra_config"]["connectors"]] == [
        "DynamoConnector", "NixlConnector"]
    assert json.loads(opt(cmdline(decode), "--kv-transfer-config"))["kv_connector"] == "NixlConnector"
    without = r.render_dgd(spec, CID, "disagg-kv")
    assert not any(k.startswith("DYN_KVBM") for c in components(without) for k in env(c))

    def agg_offload(data: dict[str, Any]) -> None:
        data["experiments"][0]["kv_offload"] = {"cpu_cache_gb": 16, "disk_cache_gb": 100}

    spec2 = load("smoke.yaml", agg_offload)
    (worker,) = components(r.render_dgd(spec2, CID, "agg"), "worker")
    assert (env(worker)["DYN_KVBM_CPU_CACHE_GB"], env(worker)["DYN_KVBM_DISK_CACHE_GB"]) == ("16", "100")
    assert json.loads(opt(cmdline(worker), "--kv-transfer-config")) == r.KVBM_CONNECTOR


def test_kvbm_workers_request_the_host_memory_of_their_cpu_cache() -> None:
    # 16 GB (decimal, as KVBM reads DYN_KVBM_CPU_CACHE_GB) = 14.9 GiB -> 15 GiB + the stated base
    spec = load("smoke.yaml", lambda d: d["experiments"][0].update(kv_offload={"cpu_cache_gb": 16}))
    (worker,) = components(r.render_dgd(spec, CID, "agg"), "worker")
    assert main(worker)["resources"]["requests"] == {"nvidia.com/gpu": "4",
                                                     "memory": f"{r.KVBM_BASE_MEMORY_GIB + 15}Gi"}
    assert "memory" not in main(worker)["resources"]["limits"]  # a request, never an OOM-kill limit
    off = r.render_dgd(SPECS["feature-ladder"], CID, "disagg-kv-off")  # cpu_cache_gb 4 -> 4 GiB, prefill only
    assert main(components(off, "prefill")[0])["resources"]["requests"]["memory"] == f"{r.KVBM_BASE_MEMORY_GIB + 4}Gi"
    assert "memory" not in main(components(off, "decode")[0])["resources"]["requests"]
    plain = r.render_dgd(SPECS["feature-ladder"], CID, "disagg-kv")
    assert not any("memory" in main(c).get("resources", {}).get("requests", {}) for c in components(plain))


def test_a_digest_pinned_image_gets_runtime_version_override_on_every_component() -> None:
    digest = "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "a" * 64
    # tagged with a version: the webhook parses the tag, nothing to add
    assert all("runtimeVersionOverride" not in c for c in components(r.render_dgd(SPECS["seed-plan"], CID, "agg-tp4x4")))
    efa_digest = "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "e" * 64

    def pin(d: dict[str, Any]) -> None:
        d.setdefault("kubernetes", {}).update(dynamo_image=digest, dynamo_runtime_version="1.6.1")
        d["pools"][0]["network"]["efa_image"] = efa_digest  # a digest names no EFA variant: given apart

    pinned = load("seed-plan.yaml", pin)
    dgd = r.render_dgd(pinned, CID, "disagg-2p2d-tp4")
    assert [c["runtimeVersionOverride"] for c in components(dgd)] == ["1.6.1"] * 3
    assert [main(c)["image"] for c in components(dgd)] == [digest, efa_digest, efa_digest]
    with pytest.raises(SpecError, match=r"pools\[0\]\.network\.efa_image: required: .* pinned by digest"):
        load("seed-plan.yaml", lambda d: d.setdefault("kubernetes", {}).update(dynamo_image=digest,
                                                                             dynamo_runtime_version="1.6.1"))
    assert crd_schemas.problems(dgd) == []
    # without the version the spec is refused, naming the field and why
    with pytest.raises(SpecError, match=r"kubernetes\.dynamo_runtime_version: required .*no MAJOR\.MINOR\.PATCH tag"):
        load("seed-plan.yaml", lambda d: d.setdefault("kubernetes", {}).update(dynamo_image=digest))


def test_workers_get_model_volume_offline_hub_and_pool_scheduling() -> None:
    spec = SPECS["seed-plan"]
    (worker,) = components(r.render_dgd(spec, CID, "agg-tp4x4"), "worker")
    pod = worker["podTemplate"]["spec"]
    assert "HF_TOKEN" not in env(worker)  # it serves the snapshot on the volume: no token, no Hub
    assert env(worker)["HF_HOME"] == "/models/hf" and env(worker)["HF_HUB_OFFLINE"] == "1"
    assert pod["volumes"] == [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
    # read-only: only the prefetch Job writes the shared model cache
    assert main(worker)["volumeMounts"] == [{"name": "model-cache", "mountPath": "/models", "readOnly": True}]
    assert main(worker)["image"] == spec.kubernetes.dynamo_image
    assert pod["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "gpu-p4d"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]

    auto = SPECS["smoke-auto"]
    (worker,) = components(r.render_dgd(auto, CID, "agg"), "worker")
    assert worker["podTemplate"]["spec"]["nodeSelector"] == {
        "karpenter.sh/nodepool": kc.nodepool_name(CID, "gpu-a100")}

    def no_nodegroup(data: dict[str, Any]) -> None:
        data["pools"][0]["nodegroup"] = None

    with pytest.raises(ValueError, match=r"pools\.p4d\.nodegroup"):
        r.render_dgd(load("seed-plan.yaml", no_nodegroup), CID, "agg-tp4x4")


# ------------------------------------------------------------------------------- NodePool


def test_nodepool_for_auto_mode_pools_matches_schema() -> None:
    spec = SPECS["smoke-auto"]
    manifests = dict(r.render_campaign(spec, CID))
    pool = manifests["nodepools/gpu-a100.yaml"]
    errors = crd_schemas.problems(pool)
    assert not errors, errors
    assert pool["metadata"]["name"] == kc.nodepool_name(CID, "gpu-a100")
    # the most nodes an experiment needs: disaggregated over EFA, prefill and decode (TP4 each) may not share
    # a node, so two 8-GPU p4d; Karpenter counts whole nodes against the limit
    assert pool["spec"]["limits"] == {"cpu": "192", "memory": "2304Gi", "nvidia.com/gpu": "16"}
    tmpl = pool["spec"]["template"]
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In",
            "values": ["p4d.24xlarge"]} in tmpl["spec"]["requirements"]
    assert {"key": "karpenter.sh/capacity-type", "operator": "In",
            "values": ["on-demand"]} in tmpl["spec"]["requirements"]
    assert tmpl["spec"]["nodeClassRef"] == {"group": "eks.amazonaws.com", "kind": "NodeClass", "name": "default"}
    # the pool is handed from agg to disagg: kept warm over the gap between them (teardown allowance +
    # capacity_s 120 + ready_s 120 of the smoke spec = 420 s)
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "7m",
                                          "budgets": [{"nodes": "0", "reasons": ["Drifted"]}]}
    assert tmpl["metadata"]["labels"][kc.LABEL_CAMPAIGN] == CID
    assert not any(p.startswith("nodepools/") for p, _ in r.render_campaign(SPECS["smoke-nodegroup"], CID))
    broken = copy.deepcopy(pool)
    broken["spec"]["disruption"]["consolidateAfter"] = "1 hour"
    assert crd_schemas.problems(broken)


def test_nodepool_limits_are_nodes_times_a_nodes_gpus_cpu_and_memory() -> None:
    spec = SPECS["smoke-auto"]  # p4d: 8 GPUs, 96 vCPUs, 1152 GiB per node
    assert npl.render_nodepool(spec, CID, "gpu-a100", 1)["spec"]["limits"] == {
        "cpu": "96", "memory": "1152Gi", "nvidia.com/gpu": "8"}
    assert npl.render_nodepool(spec, CID, "gpu-a100", 2)["spec"]["limits"] == {
        "cpu": "192", "memory": "2304Gi", "nvidia.com/gpu": "16"}
    with pytest.raises(ValueError, match="nodes must be positive"):
        npl.render_nodepool(spec, CID, "gpu-a100", 0)
    unknown = spec.model_copy(update={"pools": [p.model_copy(update={"instance_type": "x9.huge"}) for p in spec.pools]})
    with pytest.raises(ValueError, match=r"instance type 'x9.huge': its vCPUs and memory are not known"):
        npl.render_nodepool(unknown, CID, "gpu-a100", 1)


def test_consolidation_delay_keeps_handed_over_pools_warm_for_the_whole_campaign() -> None:
    # derived from the plan: a pool handed over between experiments outlasts the longest empty gap the
    # campaign's own bounds allow; a pool nobody hands over is released a minute after it empties
    spec = SPECS["smoke-auto"]
    assert any("gpu-a100" in e.handover for e in plan_campaign(spec, "aws").experiments)
    gap = 180 + spec.timeouts.capacity_s + spec.timeouts.ready_s
    assert npl.consolidate_after(spec, "gpu-a100") == f"{-(-int(gap) // 60)}m"
    longer = load("smoke.yaml", lambda d: (provider("auto-mode")(d), d["timeouts"].update(ready_s=3600)))
    assert npl.consolidate_after(longer, "gpu-a100") == f"{-(-(180 + 120 + 3600) // 60)}m"
    single = load("smoke.yaml", lambda d: (provider("auto-mode")(d), d.update(experiments=d["experiments"][:1])))
    assert not any(e.handover for e in plan_campaign(single, "aws").experiments)
    assert npl.consolidate_after(single, "gpu-a100") == "60s"


# ----------------------------------------------------------------------- labels and names


def test_labels_and_selector() -> None:
    assert kc.labels(CID, "agg", "warmup") == {kc.LABEL_MANAGED: "benchctl", kc.LABEL_CAMPAIGN: CID,
                                              kc.LABEL_EXPERIMENT: "agg", kc.LABEL_STEP: "warmup"}
    # selection is by our own labels only: Grove overwrites managed-by on the pods it creates
    assert kc.selection(CID, "agg", "warmup") == {kc.LABEL_CAMPAIGN: CID, kc.LABEL_EXPERIMENT: "agg",
                                                 kc.LABEL_STEP: "warmup"}
    assert kc.selector(kc.selection(CID)) == f"benchctl.io/campaign={CID}"
    for bad in ("x" * 64, "has space", "-leading", "trailing.", ""):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            kc.labels(CID, bad)
    with pytest.raises(ValueError, match="x" * 64):
        kc.selector({"k": "x" * 64})


@pytest.mark.parametrize("name", ["seed-plan", "smoke-auto"])
def test_every_object_and_pod_template_carries_our_labels(name: str) -> None:
    def prefetch(data: dict[str, Any]) -> None:
        data.setdefault("kubernetes", {})["prefetch_model"] = True

    spec = load("seed-plan.yaml", prefetch) if name == "seed-plan" else SPECS[name]
    manifests = r.render_campaign(spec, CID)
    assert any(p == "prefetch-job.yaml" for p, _ in manifests) == (name == "seed-plan")
    for path, obj in manifests:
        lbl = obj["metadata"]["labels"]
        assert lbl[kc.LABEL_MANAGED] == "benchctl" and lbl[kc.LABEL_CAMPAIGN] == CID, path
        if path.startswith("experiments/"):
            assert lbl[kc.LABEL_EXPERIMENT] == path.split("/")[1], path
        else:
            assert kc.LABEL_EXPERIMENT not in lbl, path
        if "/jobs/" in path:
            assert lbl[kc.LABEL_STEP] == Path(path).stem, path
        templates = ([c["podTemplate"] for c in components(obj)] if obj["kind"] == "DynamoGraphDeployment"
                     else [obj["spec"]["template"]])
        for t in templates:
            assert t["metadata"]["labels"].items() >= lbl.items(), path
        if obj["kind"] == "DynamoGraphDeployment":  # each component's pods say which role they play
            assert [t["metadata"]["labels"][kc.LABEL_ROLE] for t in templates] == [c["type"] for c in components(obj)]


def test_names_are_dns1123_deterministic_and_differ_between_campaigns() -> None:
    spec = SPECS["seed-plan"]
    first = r.render_campaign(spec, CID)
    assert first == r.render_campaign(spec, CID)
    names = [o["metadata"]["name"] for _, o in first]
    other = {o["metadata"]["name"] for _, o in r.render_campaign(spec, CID2)}
    assert len(set(names)) == len(names)
    for n in [*names, *other]:
        assert DNS1123.match(n) and len(n) <= 63, n
    assert not set(names) & other
    # the operator's <dgd>-frontend Service (and other child names) must stay within 63
    for exp in spec.experiments:
        assert len(kc.dgd_name(CID, exp.name)) + len("-frontend") <= 63
    # cut names stay unique
    long_exp = "e" * 40
    a, b = kc.job_name(CID, long_exp, "sequence-distribution-lognormal-r1"), kc.job_name(
        CID, long_exp, "sequence-distribution-lognormal-r2")
    assert a != b and len(a) <= 63 and DNS1123.match(a)
    assert kc.dgd_name(CID, "x" * 35 + "-a") != kc.dgd_name(CID, "x" * 35 + "-b")


def test_every_dgd_name_fits_dynamos_webhook_with_each_of_its_components() -> None:
    """Dynamo's webhook refuses a DGD whose name plus a lowercased component name is over 45 characters (Grove's
    pod names): every DGD of the examples, and that of a 30-character experiment, fits with each component; a
    name that fits is derived as before."""
    def long_name(data: dict[str, Any]) -> None:
        provider("managed-nodegroup")(data)
        data["experiments"][0]["name"] = "a" * 30

    for spec in (*SPECS.values(), load("smoke.yaml", long_name)):
        for exp in spec.experiments:
            dgd = r.render_dgd(spec, CID, exp.name)
            name = dgd["metadata"]["name"]
            for comp in components(dgd):
                assert len(name) + len(comp["name"].lower()) <= 45, (name, comp["name"])
    assert kc.dgd_name(CID, "disagg-2p2d-tp4") == f"bc-disagg-2p2d-tp4-{hashlib.sha1(CID.encode()).hexdigest()[:8]}"


def test_frontend_service_url() -> None:
    spec = SPECS["seed-plan"]
    assert kc.frontend_service_url(spec.kubernetes.namespace, CID, "agg-tp4x4") == (
        f"http://{kc.dgd_name(CID, 'agg-tp4x4')}-frontend.dynamo-bench.svc.cluster.local:8000")


# ------------------------------------------------------------------------------------- Jobs


def test_every_job_of_a_campaign_is_a_valid_kubernetes_job() -> None:
    def prefetch(data: dict[str, Any]) -> None:
        data.setdefault("kubernetes", {})["prefetch_model"] = True

    for path, obj in r.render_campaign(load("seed-plan.yaml", prefetch), CID):
        if obj["kind"] == "Job":
            k8s_valid(obj)
            s = obj["spec"]
            assert (s["backoffLimit"], s["ttlSecondsAfterFinished"], s["template"]["spec"]["restartPolicy"]) == (
                0, 86400, "Never"), path
            assert obj["metadata"]["namespace"] == "dynamo-bench"


def test_one_runner_job_per_workload_with_its_steps_in_order_and_the_load_image() -> None:
    spec = SPECS["seed-plan"]
    manifests = dict(r.render_campaign(spec, CID, runs_uri="s3://b/runs", region="eu-west-1"))
    exp = plan_campaign(spec, "aws").experiments[1]
    for workload in dict.fromkeys(s.workload for s in exp.steps):
        steps = [s for s in exp.steps if s.workload == workload]
        job = manifests[f"experiments/{exp.name}/jobs/{workload}.yaml"]
        pod = job["spec"]["template"]["spec"]
        runner, ctl = pod["containers"]
        assert runner["command"][3:] == ["--steps-dir", "/artifacts", *(s.step_id for s in steps)]
        assert runner["command"][2] == j.runner_source()
        assert runner["image"] == kc.LOAD_IMAGE_PLACEHOLDER  # unset in the spec: the deployment's load image
        assert runner["resources"]["limits"] == runner["resources"]["requests"] == {"cpu": "8", "memory": "16Gi"}
        # the tokenizer comes offline from the prefetched model volume (a hub cache), mounted read-only,
        # and is loaded once per Job at the pinned revision
        assert {"name": "model-cache", "mountPath": "/models", "readOnly": True} in runner["volumeMounts"]
        assert {e["name"]: e["value"] for e in runner["env"]} == {
            "HF_HOME": "/models/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
            "BENCHCTL_RUNNER_TOKENIZER": spec.model.name, "BENCHCTL_RUNNER_TOKENIZER_REVISION": spec.model.revision,
            "HOME": "/tmp"}  # a home its user may write, whatever the image's passwd says
        env = {e["name"]: e["value"] for e in ctl["env"]}
        assert env["BENCHCTL_CONTROL"] == f"s3://b/runner/{CID}/{exp.name}/" and env["AWS_REGION"] == "eu-west-1"
        assert env["BENCHCTL_RAW_PREFIX"] == f"s3://<results-bucket>/lake/raw/campaign_id={CID}/experiment={exp.name}/step_id="
        assert ctl["image"] == spec.kubernetes.uploader_image and ctl["command"] == ["sh", "-c", j.RUNNER_CONTROL_SCRIPT]
        # one user for both containers (they share each step's directory), the load image's own
        assert pod["securityContext"] == {"runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": True,
                                          "fsGroup": 10001, "fsGroupChangePolicy": "OnRootMismatch",
                                          "seccompProfile": {"type": "RuntimeDefault"}}
        # and Pod Security "restricted" for each container: no escalation, no capability
        for c in (runner, ctl):
            assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        assert env["HOME"] == "/tmp"  # the AWS CLI image's home is root's
        assert ctl["resources"]["limits"] == ctl["resources"]["requests"] == {"cpu": "250m", "memory": "512Mi"}
        assert pod["serviceAccountName"] == CID  # the campaign's own (benchctl.aws.runner_identity)
        assert pod["automountServiceAccountToken"] is False  # no API token: AIPerf's pod discovery finds nothing
        assert pod["volumes"] == [{"name": "artifacts", "emptyDir": {"sizeLimit": j.ARTIFACTS_SIZE_LIMIT}},
                                  {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
        assert not any(e["name"] == "HF_TOKEN" for c in pod["containers"] for e in c.get("env", []))
        assert job["spec"]["activeDeadlineSeconds"] == int(
            sum(s.est_s for s in steps) + len(steps) * spec.timeouts.load_grace_s + spec.timeouts.capacity_s + 1800)
    assert load("seed-plan.yaml", lambda d: d.setdefault("kubernetes", {}).update(aiperf_image="reg/aiperf:0.13.0")) \
        and dict(r.render_campaign(load("seed-plan.yaml", lambda d: d.setdefault("kubernetes", {}).update(
            aiperf_image="reg/aiperf:0.13.0")), CID))[f"experiments/{exp.name}/jobs/warmup.yaml"]["spec"]["template"][
            "spec"]["containers"][0]["image"] == "reg/aiperf:0.13.0"


def test_the_runner_pods_user_is_the_load_images_own() -> None:
    """The pod's user is the one the load image is built for (its home, AIPerf's cache): the Dockerfile's USER."""
    dockerfile = (ROOT / "stacks" / "images" / "load" / "Dockerfile").read_text()
    assert re.findall(r"^USER\s+(\S+)", dockerfile, re.M)[-1] == str(j.LOAD_UID)
    assert f"--uid {j.LOAD_UID}" in dockerfile


def _admits(affinity: dict[str, Any] | None, node_labels: dict[str, str]) -> bool:
    """Whether a node with these labels satisfies a required node affinity (kube-scheduler's NodeAffinity:
    any term; every expression of a term; NotIn/DoesNotExist hold for a node without the label)."""
    if not affinity:
        return True
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    def holds(e: dict[str, Any]) -> bool:
        value = node_labels.get(e["key"])
        return {"In": value in e.get("values", []), "NotIn": value not in e.get("values", []),
                "Exists": value is not None, "DoesNotExist": value is None}[e["operator"]]

    return any(all(holds(e) for e in t.get("matchExpressions", [])) for t in terms)


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_load_smoke_and_preflight_pods_never_land_on_the_campaigns_gpu_nodes(name: str) -> None:
    """Every CPU pod of a campaign (runner, smoke, model prefetch and preflight Jobs) is kept off every node
    of the campaign's pools by a required node affinity, judged against the labels those nodes carry as the
    workers are pinned to them (``scheduling``: node group or NodePool), while a node of no pool of ours
    (a CPU node, whoever runs it) stays eligible; and Auto Mode's consolidation may not evict it mid-run
    (``karpenter.sh/do-not-disrupt``: a runner Job holds a whole workload)."""
    spec = load(name)
    manifests = dict(r.render_campaign(spec, CID, runs_uri="s3://b/runs", region="eu-west-1"))
    jobs = {p: o for p, o in manifests.items() if o["kind"] == "Job"}
    jobs.update({f"preflight-{c}": render_preflight_job(spec, CID, c) for c in ("aiperf", "uploader")})
    assert not spec.kubernetes.prefetch_model or "prefetch-job.yaml" in jobs
    for path, job in jobs.items():
        assert job["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true", path
    pods = {p: o["spec"]["template"]["spec"] for p, o in jobs.items()}
    gpu_nodes = [kc.scheduling(CID, pool).get("nodeSelector", {}) for pool in spec.pools]
    for path, pod in pods.items():
        assert not any(t.get("key") == kc.GPU for t in pod.get("tolerations", [])), path
        for labels in gpu_nodes:
            if labels:  # a pool pinned to its nodes (not a spec written for the local engine)
                assert not _admits(pod.get("affinity"), labels), (path, labels)
        assert _admits(pod.get("affinity"), {"eks.amazonaws.com/nodegroup": "cpu-general",
                                             "karpenter.sh/nodepool": "general-purpose"}), path
    if any(p.provider != "local" for p in spec.pools):
        assert all("affinity" in pod for pod in pods.values())


def test_each_step_asks_its_runner_for_exactly_the_planned_aiperf_arguments() -> None:
    spec = SPECS["seed-plan"]
    requests = dict(r.render_requests(spec, CID))
    plan = plan_campaign(spec, "aws")
    exp = plan.experiments[1]
    url = kc.frontend_service_url(spec.kubernetes.namespace, CID, exp.name)
    for step in exp.steps:
        req = requests[f"experiments/{exp.name}/requests/{step.step_id}.json"]
        ds = step_dataset(step)
        want = aiperf_args.step_args(step, model=spec.model.name, tokenizer=spec.model.name, url=url,
                                     artifact_dir=f"/artifacts/{step.step_id}/out",
                                     input_file=f"/artifacts/{step.step_id}/inputs/{ds.name}" if ds else None,
                                     slo=spec.slo.model_dump(), tokenizer_revision=spec.model.revision,
                                     sampling=spec.sampling_fields(), thinking=spec.thinking)
        assert req["argv"] == want, step.step_id
        assert opt(req["argv"], "--tokenizer-revision") == spec.model.revision  # pinned in the example
        assert req["deadline_s"] == step.est_s + spec.timeouts.load_grace_s
    warm = requests[f"experiments/{exp.name}/requests/warmup.json"]["argv"]
    # the warm-up runs at the campaign's highest concurrency (the seed plan's: 1536, past its SLO)
    assert opt(warm, "--request-count") == "64" and opt(warm, "--concurrency") == "1536"


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport json, os, sys\n{body}\n")
    path.chmod(0o755)


def _run_sh(script: str, tmp: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    script = script.replace("/artifacts", str(tmp / "artifacts"))
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})


@pytest.mark.parametrize("failure", [None, "upload", "runner", "sigterm"])
def test_runner_control_script_hands_each_step_over_uploads_it_and_answers_its_token(
        tmp_path: Path, failure: str | None) -> None:
    """The control container's script under sh, with a fake ``aws`` over a local "bucket" and a fake runner
    (the exit code file): each step's request and inputs are handed over in order, its artifacts uploaded to
    its raw prefix, its end record written with AIPerf's exit code, its task token answered. Any other way out
    is told at once, everywhere it is waited for: a failed upload (97), the runner's last words (95), SIGTERM
    (143, the Job deleted: no wait for the kubelet's grace) each give the step in flight an end record naming
    the error, answer its token with SendTaskFailure (that error, the cause) and tell the runner
    (``control.ended``). The same script runs with the real AWS CLI in tests/infra/test_runner_rehearsal.py."""
    bin_dir, bucket = tmp_path / "bin", tmp_path / "bucket"
    bin_dir.mkdir()
    _fake(bin_dir, "aws", f"""
import pathlib, shutil
root, log = pathlib.Path({str(bucket)!r}), pathlib.Path({str(tmp_path / 'aws.log')!r})
args = [a for a in sys.argv[1:] if a not in ("--quiet", "--only-show-errors")]
with log.open("a") as f:
    f.write(json.dumps(args) + "\\n")
def local(uri):
    return root / uri.removeprefix("s3://")
if args[0] == "stepfunctions":
    sys.exit(0)
recursive = "--recursive" in args
src, dst = [a for a in args[2:] if a != "--recursive"]
if src == "-":
    local(dst).parent.mkdir(parents=True, exist_ok=True)
    local(dst).write_bytes(sys.stdin.buffer.read())
elif dst == "-":
    if not local(src).is_file():
        sys.exit(1)
    sys.stdout.write(local(src).read_text())
elif src.startswith("s3://") and recursive:
    if local(src).is_dir():
        shutil.copytree(local(src), dst, dirs_exist_ok=True)
elif src.startswith("s3://"):
    if not local(src).is_file():
        sys.exit(1)
    pathlib.Path(dst).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(local(src), dst)
else:
    if {failure == "upload"!r}:
        print("upload failed: An error occurred (AccessDenied) when calling the PutObject operation", file=sys.stderr)
        sys.exit(1)
    shutil.copytree(src, local(dst), dirs_exist_ok=True)
""")
    steps = ["s1", "s2"]
    work = tmp_path / "artifacts"
    control, raw = "s3://b/runner/c/agg/", "s3://b/lake/raw/campaign_id=c/experiment=agg/step_id="
    keys = {step: secrets.token_hex(32) for step in steps}  # each step's own, as LaunchLoad makes them
    for k, step in enumerate(steps):  # LaunchLoad's request and the kept input; AwaitLoadEnd's token
        (bucket / f"b/runner/c/agg/{step}").mkdir(parents=True)
        (bucket / f"b/runner/c/agg/{step}/key.json").write_text(  # as the run store writes them
            json.dumps({"end_key": keys[step]}, indent=2, sort_keys=True))
        (bucket / f"b/runner/c/agg/{step}/request.json").write_text(
            json.dumps({"argv": ["profile"], "deadline_s": 9.0}, indent=2, sort_keys=True))
        (bucket / f"b/runner/c/agg/{step}/token.json").write_text(  # as the run store writes it
            json.dumps({"token": f"tok-{step}", "state": "AwaitLoadEnd"}, indent=2, sort_keys=True))
        (bucket / f"b/lake/raw/campaign_id=c/experiment=agg/step_id={step}/inputs").mkdir(parents=True)
        (bucket / f"b/lake/raw/campaign_id=c/experiment=agg/step_id={step}/inputs/d.jsonl").write_text(f"{k}\n")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "BENCHCTL_STEPS": " ".join(steps),
           "BENCHCTL_DIR": str(work), "BENCHCTL_CONTROL": control, "BENCHCTL_RAW_PREFIX": raw,
           "BENCHCTL_POLL_S": "0.05"}  # its hand-over polls every 50 ms here, not every second
    work.mkdir()
    proc = subprocess.Popen(["sh", "-c", j.RUNNER_CONTROL_SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        for k, step in enumerate(steps):  # the runner's side: the request and inputs appear, then its exit
            d = work / step
            deadline = time.monotonic() + 20
            while not (d / "request.json").is_file():
                assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.05)
            assert json.loads((d / "request.json").read_text()) == {"argv": ["profile"], "deadline_s": 9.0}
            # the step's key is nowhere on the volume the AIPerf container shares (it stays in the shell)
            assert not [f for f in work.rglob("*") if f.is_file() and keys[step] in f.read_text()]
            assert (d / "inputs" / "d.jsonl").read_text() == f"{k}\n"
            if failure == "runner":  # it dies, with its last words (load_runner.RUNNER_ENDED)
                (work / "runner.ended").write_text("PermissionError: [Errno 13] Permission denied: 'out'")
                break
            if failure == "sigterm":  # the Job is deleted while AIPerf runs (the script polls for its exit)
                time.sleep(0.5)
                proc.terminate()
                break
            (d / "out").mkdir()
            (d / "out" / "profile_export_aiperf.json").write_text(step)
            (d / "exit_code").write_text("3" if step == "s1" else "0")
            if failure == "upload":
                break
        started = time.monotonic()
        code = proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    out = proc.stdout.read() if proc.stdout else ""
    ends = {s: bucket / f"b/runner/c/agg/{s}/end.json" for s in steps}
    calls = [json.loads(line) for line in (tmp_path / "aws.log").read_text().splitlines()]
    answers = [(c[1], c[c.index("--task-token") + 1]) for c in calls if c[0] == "stepfunctions"]
    if failure is None:
        assert code == 0, out
        for step, exit_code in (("s1", 3), ("s2", 0)):  # each signed with its own step's key, as CheckLoad checks
            assert verified_end(ends[step].read_bytes(), keys[step], step, "end")["exit_code"] == exit_code
            with pytest.raises(EndRecordForged):
                verified_end(ends[step].read_bytes(), keys["s2" if step == "s1" else "s1"], step, "end")
            assert (bucket / f"b/lake/raw/campaign_id=c/experiment=agg/step_id={step}/profile_export_aiperf.json"
                    ).read_text() == step
            assert not (work / step).exists()  # the step's space is freed once it is uploaded
        assert ("send-task-success", "tok-s1") in answers and ("send-task-success", "tok-s2") in answers
        assert not any(a == "send-task-failure" for a, _ in answers) and not (work / "control.ended").exists()
        return
    code_, error = {"upload": (97, "LoadUploadFailed"), "runner": (95, "LoadRunnerDied"),
                    "sigterm": (143, "LoadRunnerStopped")}[failure]
    assert code == code_, out
    assert took < 5, took  # at once: neither the runner's 60 s beat nor the kubelet's 30 s grace
    end = verified_end(ends["s1"].read_bytes(), keys["s1"], "s1", "end")  # the step in flight ends, naming why
    assert (end["exit_code"], end["error"]) == (code_, error) and not ends["s2"].exists()
    (failed,) = [c for c in calls if c[:2] == ["stepfunctions", "send-task-failure"]]
    assert failed[failed.index("--task-token") + 1] == "tok-s1" and failed[failed.index("--error") + 1] == error
    cause = failed[failed.index("--cause") + 1]
    assert cause.startswith("step s1: ") and cause.removeprefix("step s1: ") == end["cause"]
    assert {"upload": "AccessDenied", "runner": "Permission denied", "sigterm": "SIGTERM"}[failure] in cause
    assert ("send-task-success", "tok-s1") not in answers
    assert (work / "control.ended").read_text().split() == [str(code_), error]  # the runner stops too


class _Frontend(BaseHTTPRequestHandler):
    chats: list[dict[str, Any]] = []
    status = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).chats.append({"path": self.path, **body})
        self._send(self.status, json.dumps({"choices": [{"message": {"content": "hi"}}],
                                            "usage": {"completion_tokens": body["max_tokens"]}}))

    def do_GET(self) -> None:
        self._send(200 if self.path == "/metrics" else 404, "dynamo_frontend_requests_total 3\n")

    def _send(self, status: int, text: str) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("status", [200, 500])
def test_smoke_job_script_sends_requests_and_reads_metrics(status: int) -> None:
    spec = SPECS["seed-plan"]
    _Frontend.chats, _Frontend.status = [], status
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Frontend)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()  # shutdown waits a poll
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        job = j.render_smoke_job(spec, CID, "agg-tp4x4", url)
        k8s_valid(job)
        (c,) = job["spec"]["template"]["spec"]["containers"]
        assert c["image"] == kc.aiperf_image(spec.kubernetes)
        job_env = {e["name"]: e["value"] for e in c["env"]}
        res = subprocess.run([sys.executable, *c["command"][1:]], capture_output=True, text=True, timeout=30,
                             env={**os.environ, **job_env})
    finally:
        server.shutdown()
    if status == 200:
        assert res.returncode == 0, res.stderr
        smoke, asked = _Frontend.chats[:5], _Frontend.chats[5:]
        assert len(smoke) == spec.smoke.requests == 5
        assert {(x["path"], x["max_tokens"], x["model"]) for x in smoke} == {
            ("/v1/chat/completions", 16, spec.model.name)}
        # then the quality questions, as rendered, each answer logged for benchctl to score
        assert [{k: v for k, v in x.items() if k != "path"} for x in asked] == [
            q["body"] for q in quality.spec_requests(spec)]
        assert all(x["temperature"] == 0.7 and x["chat_template_kwargs"] == {"enable_thinking": False} for x in asked)
        answers = quality.answers_from_log(res.stdout)
        assert len(answers) == spec.quality.questions == 20
        assert {a["content"] for a in answers.values()} == {"hi"}
        assert quality.score(quality.questions(20, 15), answers, simulated=False, min_score=0.9)["gate"] == "failed"
    else:
        assert res.returncode != 0 and len(_Frontend.chats) == 1


def test_prefetch_job_downloads_the_model_into_the_volume_from_a_slim_pinned_image() -> None:
    spec = SPECS["seed-plan"]
    job = pf.render_prefetch_job(spec.model, spec.kubernetes, CID)
    k8s_valid(job)
    assert kc.LABEL_EXPERIMENT not in job["metadata"]["labels"]
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    # a slim Python with a pinned huggingface_hub (Dynamo's model-caching guide), not the >12 GB runtime image
    assert c["image"] == spec.kubernetes.prefetch_image == "python:3.11-slim-bookworm"
    assert c["image"] != spec.kubernetes.dynamo_image and f'"{pf.PREFETCH_HF_HUB}"' in c["command"][2]
    assert re.fullmatch(r"huggingface_hub==\d+\.\d+\.\d+", pf.PREFETCH_HF_HUB)
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    assert "securityContext" not in c and "securityContext" not in pod  # the image's own user
    assert "tolerations" not in pod  # never on a (tainted) GPU node
    assert job["spec"]["template"]["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    job_env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert job_env["MODEL"] == spec.model.name and job_env["HF_HOME"] == "/models/hf"
    assert job_env["REVISION"] == spec.model.revision  # the pinned snapshot workers and AIPerf read
    assert job_env["SNAPSHOT"] == kc.model_snapshot_dir(spec.model)  # checked by the Job after the download
    assert job_env["PREFETCH_SCRIPT"] == pf.PREFETCH_SCRIPT and job_env["PYTHONPATH"] == pf.PREFETCH_LIB
    # the token: a file from the secret's one key, read-only, in this Job only; no token in its environment
    assert "HF_TOKEN" not in job_env and job_env["HF_TOKEN_PATH"] == "/var/run/secrets/huggingface/token"
    assert {"name": "hf-token", "secret": {"secretName": "hf-token", "items": [{"key": "HF_TOKEN", "path": "token"}]}
            } in pod["volumes"]
    # the one pod that writes the model volume
    assert c["volumeMounts"] == [{"name": "model-cache", "mountPath": "/models"},
                                 {"name": "hf-token", "mountPath": "/var/run/secrets/huggingface", "readOnly": True}]
    assert any(p == "prefetch-job.yaml" for p, _ in r.render_campaign(spec, CID))  # the example asks for it
    off = load("seed-plan.yaml", lambda d: d["kubernetes"].update(prefetch_model=False))
    assert not any(p == "prefetch-job.yaml" for p, _ in r.render_campaign(off, CID))


# -------------------------------------------------------------------------------------- CLI


def test_cli_render_writes_the_campaign_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "manifests"
    assert cli.main(["render", str(EXAMPLES / "seed-plan.yaml"), "--out", str(out), "--campaign-id", CID]) == 0
    spec = SPECS["seed-plan"]
    plan = plan_campaign(spec, "aws")
    expected = {"prefetch-job.yaml"}  # the example fills the model volume once, before the GPU pools
    for e in plan.experiments:
        expected |= {f"experiments/{e.name}/prepull-{pool}.yaml" for pool in e.nodes}
        expected |= {f"experiments/{e.name}/dynamographdeployment.yaml", f"experiments/{e.name}/smoke-job.yaml",
                     f"experiments/{e.name}/jobs/warmup.yaml"}
        expected |= {f"experiments/{e.name}/jobs/{s.workload}.yaml" for s in e.steps}
        expected |= {f"experiments/{e.name}/requests/{s}.json" for s in ["warmup", *(s.step_id for s in e.steps)]}
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert written == expected
    workloads = len({s.workload for s in plan.experiments[0].steps})
    steps = len(plan.experiments[0].steps)
    assert len(written) == 1 + len(plan.experiments) * (1 + 3 + workloads + 1 + steps)
    objs = dict(r.render_campaign(spec, CID))
    first = plan.experiments[0].name  # each deployment of an experiment is its own DGD (agg-tp4x4--d1, ...)
    assert yaml.safe_load((out / f"experiments/{first}/dynamographdeployment.yaml").read_text()) == objs[
        f"experiments/{first}/dynamographdeployment.yaml"]
    reqs = dict(r.render_requests(spec, CID))
    step = plan.experiments[0].steps[0].step_id
    assert json.loads((out / f"experiments/{first}/requests/{step}.json").read_text()) == reqs[
        f"experiments/{first}/requests/{step}.json"]
    lines = capsys.readouterr().out.splitlines()
    manifests = 1 + len(plan.experiments) * (1 + 3 + workloads)
    assert len(lines) == manifests + 1 and lines[-1].startswith(
        f"{manifests} manifests and {len(plan.experiments) * (steps + 1)} step requests")


def test_cli_render_exits_2_on_bad_spec_and_non_empty_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES / "seed-plan.yaml").read_text().replace("mode: aggregated", "mode: sideways"))
    assert cli.main(["render", str(bad), "--out", str(tmp_path / "o1")]) == 2
    assert "invalid spec" in capsys.readouterr().err
    assert not (tmp_path / "o1").exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    assert cli.main(["render", str(EXAMPLES / "seed-plan.yaml"), "--out", str(full)]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    assert [p.name for p in full.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("name", ["seed-plan", "smoke-auto"])
def test_prepull_daemonset_holds_each_pools_worker_images_on_its_nodes_only(name: str) -> None:
    """Issue 16: the runtime image arrives with each GPU node (pulled as the node joins, not after Deploy):
    a DaemonSet per experiment and pool, pinned to that pool's node group or NodePool, the image its
    workers run there (the -efa image where they use EFA), no GPU, almost no CPU or memory, no API token."""
    spec = SPECS[name]
    manifests = dict(r.render_campaign(spec, CID))
    for exp in plan_campaign(spec, "aws").experiments:
        dgd = manifests[f"experiments/{exp.name}/dynamographdeployment.yaml"]
        for pool in exp.nodes:
            ds = manifests[f"experiments/{exp.name}/prepull-{pool}.yaml"]
            k8s_valid(ds)
            pod = ds["spec"]["template"]["spec"]
            workers = [c for c in components(dgd) if c["type"] != "frontend"
                       and c["podTemplate"]["spec"].get("nodeSelector") == pod["nodeSelector"]]
            assert workers, (exp.name, pool)
            assert sorted({c["image"] for c in pod["containers"]}) == sorted(
                {main(w)["image"] for w in workers})  # exactly the images its workers run on these nodes
            assert pod["tolerations"] == [{"key": kc.GPU, "operator": "Exists", "effect": "NoSchedule"}]
            assert pod["automountServiceAccountToken"] is False
            for c in pod["containers"]:
                assert kc.GPU not in c["resources"]["limits"] and c["resources"]["requests"]["cpu"] == "10m"
            assert ds["spec"]["selector"]["matchLabels"] == ds["spec"]["template"]["metadata"]["labels"]
            assert ds["metadata"]["labels"][kc.LABEL_EXPERIMENT] == exp.name
    if name == "seed-plan":  # disaggregated over EFA: the -efa image; aggregated: the plain one
        images = {p: {c["image"] for c in o["spec"]["template"]["spec"]["containers"]}
                  for p, o in manifests.items() if "/prepull-" in p}
        image = {"agg-tp4x4": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1",
                 "disagg-2p2d-tp4": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1-efa"}
        assert images == {f"experiments/{e.name}/prepull-p4d.yaml": {image[e.lake_name]}  # each deployment's own
                          for e in plan_campaign(spec, "aws").experiments}


def test_cli_render_of_an_auto_mode_pool_of_unknown_size_exits_2_naming_the_type(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "x9.yaml"
    spec.write_text((EXAMPLES / "auto-mode.yaml").read_text().replace("p4d.24xlarge", "x9.huge"))
    out = tmp_path / "manifests"
    # a deployment whose ceilings allow the type (the default ones refuse it before render looks)
    from benchctl.planning import ceilings
    c = ceilings.resolve(None, {}).to_json()
    c["instance_types"]["x9.huge"] = 1.0
    context = tmp_path / "cdk.json"
    context.write_text(json.dumps({"context": {ceilings.CONTEXT_KEY: c}}))
    assert cli.main(["render", str(spec), "--out", str(out), "--campaign-id", CID, "--context-file", str(context)]) == 2
    err = capsys.readouterr().err
    assert "instance type 'x9.huge': its vCPUs and memory are not known" in err and "p4d.24xlarge" in err
    assert not out.exists()  # nothing half-written
