"""Kubernetes manifests rendered from campaign specs: valid objects, the right Dynamo/vLLM flags, labels
and names that keep campaigns apart, and load Jobs whose shell wrapping runs AIPerf exactly as planned.

Core kinds (Job, PodTemplate) are checked against the Kubernetes OpenAPI schemas that
``kubernetes-validate`` bundles (offline); the CRDs against the vendored upstream CRD schemas
(tests/data/crds/, strictly: an unknown field is an error). What the AWS code path actually sends is
checked the same way in test_manifests_upstream.py.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from benchctl import aiperf_args, cli, quality
from benchctl.aws.k8s import common as kc
from benchctl.aws.k8s import jobs as j
from benchctl.aws.k8s import render as r
from benchctl.campaign import step_dataset
from benchctl.errors import SpecError
from benchctl.plan import plan_campaign
from benchctl.spec import CampaignSpec, parse_spec
from tests import crd_schemas

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
K8S_VERSION = "1.33"
CID = "seed-plan-20261130-070000"
CID2 = "seed-plan-20261201-080000"
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def load(name: str, mutate: Any = None) -> CampaignSpec:
    data = yaml.safe_load((EXAMPLES / name).read_text())
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


def aiperf_argv(job: dict[str, Any]) -> list[str]:
    """The argv AIPerf gets from the aiperf container's ``sh -c`` script (shell tokenisation)."""
    (c,) = [x for x in job["spec"]["template"]["spec"]["initContainers"] if x["name"] == "aiperf"]
    assert c["command"][:2] == ["sh", "-c"]
    lex = shlex.shlex(c["command"][2], posix=True, punctuation_chars=";")
    lex.whitespace_split = True
    commands: list[list[str]] = [[]]
    for tok in lex:
        if tok == ";":
            commands.append([])
        else:
            commands[-1].append(tok)
    (run,) = [cmd for cmd in commands if cmd and cmd[0] == "aiperf"]
    return run[1:]


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
        assert opt(args, "--model") == spec.model.name
        assert opt(args, "--revision") == spec.model.revision  # the pinned snapshot on the model volume
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


def test_workers_get_model_volume_hf_token_and_pool_scheduling() -> None:
    spec = SPECS["seed-plan"]
    (worker,) = components(r.render_dgd(spec, CID, "agg-tp4x4"), "worker")
    pod = worker["podTemplate"]["spec"]
    assert env(worker)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
    assert env(worker)["HF_HOME"] == "/models/hf"
    assert pod["volumes"] == [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
    assert main(worker)["volumeMounts"] == [{"name": "model-cache", "mountPath": "/models"}]
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
    # both experiments need one 8-GPU p4d (2 x TP4): Karpenter counts whole nodes against the limit
    assert pool["spec"]["limits"] == {"nvidia.com/gpu": "8"}
    tmpl = pool["spec"]["template"]
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In",
            "values": ["p4d.24xlarge"]} in tmpl["spec"]["requirements"]
    assert {"key": "karpenter.sh/capacity-type", "operator": "In",
            "values": ["on-demand"]} in tmpl["spec"]["requirements"]
    assert tmpl["spec"]["nodeClassRef"] == {"group": "eks.amazonaws.com", "kind": "NodeClass", "name": "default"}
    # the pool is handed from agg to disagg: kept warm over the gap between them (teardown allowance +
    # capacity_s 120 + ready_s 120 of the smoke spec = 420 s)
    assert pool["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "7m"}
    assert tmpl["metadata"]["labels"][kc.LABEL_CAMPAIGN] == CID
    assert not any(p.startswith("nodepools/") for p, _ in r.render_campaign(SPECS["smoke-nodegroup"], CID))
    broken = copy.deepcopy(pool)
    broken["spec"]["disruption"]["consolidateAfter"] = "1 hour"
    assert crd_schemas.problems(broken)


def test_nodepool_limit_is_nodes_times_gpus_per_node() -> None:
    spec = SPECS["smoke-auto"]  # p4d: 8 GPUs per node
    assert r.render_nodepool(spec, CID, "gpu-a100", 1)["spec"]["limits"] == {"nvidia.com/gpu": "8"}
    assert r.render_nodepool(spec, CID, "gpu-a100", 2)["spec"]["limits"] == {"nvidia.com/gpu": "16"}
    with pytest.raises(ValueError, match="nodes must be positive"):
        r.render_nodepool(spec, CID, "gpu-a100", 0)


def test_consolidation_delay_keeps_handed_over_pools_warm_for_the_whole_campaign() -> None:
    # derived from the plan: a pool handed over between experiments outlasts the longest empty gap the
    # campaign's own bounds allow; a pool nobody hands over is released a minute after it empties
    spec = SPECS["smoke-auto"]
    assert any("gpu-a100" in e.handover for e in plan_campaign(spec, "aws").experiments)
    gap = 180 + spec.timeouts.capacity_s + spec.timeouts.ready_s
    assert r.consolidate_after(spec, "gpu-a100") == f"{-(-int(gap) // 60)}m"
    longer = load("smoke.yaml", lambda d: (provider("auto-mode")(d), d["timeouts"].update(ready_s=3600)))
    assert r.consolidate_after(longer, "gpu-a100") == f"{-(-(180 + 120 + 3600) // 60)}m"
    single = load("smoke.yaml", lambda d: (provider("auto-mode")(d), d.update(experiments=d["experiments"][:1])))
    assert not any(e.handover for e in plan_campaign(single, "aws").experiments)
    assert r.consolidate_after(single, "gpu-a100") == "60s"


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
        assert len(kc.dgd_name(CID, exp.name)) <= 42
    # cut names stay unique
    long_exp = "e" * 40
    a, b = kc.job_name(CID, long_exp, "sequence-distribution-lognormal-r1"), kc.job_name(
        CID, long_exp, "sequence-distribution-lognormal-r2")
    assert a != b and len(a) <= 63 and DNS1123.match(a)
    assert kc.dgd_name(CID, "x" * 35 + "-a") != kc.dgd_name(CID, "x" * 35 + "-b")


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


def test_load_job_runs_the_given_argv_with_local_dataset_and_artifact_dir() -> None:
    spec = SPECS["seed-plan"]
    s3 = "s3://bucket/lake/raw/campaign_id=c/experiment=agg/step_id=s/inputs/data set.jsonl"
    argv = ["profile", "--url", "http://x:8000", "--artifact-dir", "/somewhere/else", "--input-file", s3,
            "--goodput", "time_to_first_token:2000 inter_token_latency:50", "--extra-inputs", "a'b;c"]
    raw = "s3://bucket/lake/raw/campaign_id=c/experiment=agg/step_id=s/"
    job = j.render_load_job(spec, CID, "agg-tp4x4", "s", argv, raw, input_s3_uri=s3, active_deadline_s=900)
    local = "/artifacts/inputs/data set.jsonl"
    expected = [*argv]
    expected[4], expected[6] = "/artifacts/out", local
    assert aiperf_argv(job) == expected
    pod = job["spec"]["template"]["spec"]
    fetch, aiperf = pod["initContainers"]
    assert s3 not in json.dumps(aiperf) and "s3://" not in json.dumps(aiperf)
    assert shlex.split(fetch["command"][2].split("&&", 1)[1]) == ["aws", "s3", "cp", s3, local]
    assert aiperf["image"] == kc.LOAD_IMAGE_PLACEHOLDER  # unset in the spec: the deployment's load image
    assert j.render_load_job(load("seed-plan.yaml", lambda d: d.setdefault("kubernetes", {}).update(
        aiperf_image="reg/aiperf:0.13.0")), CID, "agg-tp4x4", "s", argv, raw)["spec"]["template"]["spec"][
        "initContainers"][0]["image"] == "reg/aiperf:0.13.0"
    assert aiperf["resources"]["limits"] == aiperf["resources"]["requests"] == {"cpu": "8", "memory": "16Gi"}
    assert pod["serviceAccountName"] == "benchctl-load"
    assert pod["automountServiceAccountToken"] is False  # no API token: AIPerf's pod discovery finds nothing
    assert job["spec"]["activeDeadlineSeconds"] == 900
    assert pod["volumes"] == [{"name": "artifacts", "emptyDir": {}},
                              {"name": "model-cache", "persistentVolumeClaim": {"claimName": "model-cache"}}]
    # the tokenizer comes offline from the prefetched model volume (a hub cache), mounted read-only
    assert {"name": "model-cache", "mountPath": "/models", "readOnly": True} in aiperf["volumeMounts"]
    assert {e["name"]: e["value"] for e in aiperf["env"]} == {"HF_HOME": "/models/hf", "HF_HUB_OFFLINE": "1",
                                                              "TRANSFORMERS_OFFLINE": "1"}
    assert not any(e["name"] == "HF_TOKEN" for c in pod["initContainers"] for e in c.get("env", []))
    no_input = j.render_load_job(spec, CID, "agg-tp4x4", "s", ["profile"], raw)
    assert [c["name"] for c in no_input["spec"]["template"]["spec"]["initContainers"]] == ["aiperf"]
    assert aiperf_argv(no_input) == ["profile", "--artifact-dir", "/artifacts/out"]
    assert no_input["spec"]["activeDeadlineSeconds"] == 7200


def test_campaign_step_jobs_run_exactly_the_planned_aiperf_arguments() -> None:
    spec = SPECS["seed-plan"]
    manifests = dict(r.render_campaign(spec, CID))
    plan = plan_campaign(spec, "aws")
    exp = plan.experiments[1]
    url = kc.frontend_service_url(spec.kubernetes.namespace, CID, exp.name)
    for step in exp.steps:
        job = manifests[f"experiments/{exp.name}/jobs/{step.step_id}.yaml"]
        ds = step_dataset(step)
        want = aiperf_args.step_args(step, model=spec.model.name, tokenizer=spec.model.name, url=url,
                                     artifact_dir="/artifacts/out",
                                     input_file=f"/artifacts/inputs/{ds.name}" if ds else None,
                                     slo=spec.slo.model_dump(), tokenizer_revision=spec.model.revision,
                                     sampling=spec.sampling_fields(), thinking=spec.thinking)
        assert aiperf_argv(job) == want, step.step_id
        assert opt(aiperf_argv(job), "--tokenizer-revision") == spec.model.revision  # pinned in the example
        init = job["spec"]["template"]["spec"]["initContainers"]
        assert [c["name"] for c in init] == (["fetch-input", "aiperf"] if ds else ["aiperf"])
        raw = f"s3://<results-bucket>/lake/raw/campaign_id={CID}/experiment={exp.name}/step_id={step.step_id}/"
        upload = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
        assert shlex.split(upload.split("||")[0]) == ["aws", "s3", "cp", "--recursive", "/artifacts/out", raw]
    warm = aiperf_argv(manifests[f"experiments/{exp.name}/jobs/warmup.yaml"])
    assert opt(warm, "--request-count") == "64" and opt(warm, "--concurrency") == "64"


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport json, os, sys\n{body}\n")
    path.chmod(0o755)


def _run_sh(script: str, tmp: Path, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    script = script.replace("/artifacts", str(tmp / "artifacts"))
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})


@pytest.mark.parametrize("upload_fails", [False, True])
def test_load_job_shell_keeps_aiperf_exit_code_through_the_upload(tmp_path: Path, upload_fails: bool) -> None:
    """Run the containers' scripts under sh with fake ``aiperf``/``aws``: AIPerf gets the exact argv,
    its failure still lets the upload run, and the Job ends with AIPerf's exit code."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake(bin_dir, "aiperf", f"json.dump(sys.argv[1:], open({str(tmp_path / 'aiperf.json')!r}, 'w'))\nsys.exit(3)")
    _fake(bin_dir, "aws", f"json.dump(sys.argv[1:], open({str(tmp_path / 'aws.json')!r}, 'w'))\n"
                          f"sys.exit({1 if upload_fails else 0})")
    argv = ["profile", "--goodput", "time_to_first_token:2000 inter_token_latency:50", "--x", "$HOME `id` 'q'"]
    raw = "s3://b/lake/raw/campaign_id=c/experiment=e/step_id=s/"
    job = j.render_load_job(SPECS["seed-plan"], CID, "agg-tp4x4", "s", argv, raw)
    pod = job["spec"]["template"]["spec"]
    init = _run_sh(pod["initContainers"][0]["command"][2], tmp_path, bin_dir)
    assert init.returncode == 0, init.stderr
    out_dir = str(tmp_path / "artifacts" / "out")  # /artifacts relocated under tmp_path by _run_sh
    assert json.loads((tmp_path / "aiperf.json").read_text()) == [*argv, "--artifact-dir", out_dir]
    assert (tmp_path / "artifacts" / "out" / "exit_code").read_text().strip() == "3"
    up = _run_sh(pod["containers"][0]["command"][2], tmp_path, bin_dir)
    assert json.loads((tmp_path / "aws.json").read_text()) == [
        "s3", "cp", "--recursive", out_dir, raw]
    assert up.returncode == (97 if upload_fails else 3)


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
    threading.Thread(target=server.serve_forever, daemon=True).start()
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


def test_prefetch_job_downloads_the_model_into_the_volume() -> None:
    spec = SPECS["seed-plan"]
    job = j.render_prefetch_job(spec.model, spec.kubernetes, CID)
    k8s_valid(job)
    assert kc.LABEL_EXPERIMENT not in job["metadata"]["labels"]
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == spec.kubernetes.dynamo_image and "download" in c["command"][2]
    assert '--revision "$REVISION"' in c["command"][2]
    job_env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert job_env["MODEL"] == spec.model.name and job_env["HF_HOME"] == "/models/hf"
    assert job_env["REVISION"] == spec.model.revision  # the pinned snapshot workers and AIPerf read
    assert job_env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
    assert c["volumeMounts"] == [{"name": "model-cache", "mountPath": "/models"}]
    assert not any(p == "prefetch-job.yaml" for p, _ in r.render_campaign(spec, CID))


# -------------------------------------------------------------------------------------- CLI


def test_cli_render_writes_the_campaign_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "manifests"
    assert cli.main(["render", str(EXAMPLES / "seed-plan.yaml"), "--out", str(out), "--campaign-id", CID]) == 0
    spec = SPECS["seed-plan"]
    plan = plan_campaign(spec, "aws")
    expected = set()
    for e in plan.experiments:
        expected |= {f"experiments/{e.name}/dynamographdeployment.yaml", f"experiments/{e.name}/smoke-job.yaml",
                     f"experiments/{e.name}/jobs/warmup.yaml"}
        expected |= {f"experiments/{e.name}/jobs/{s.step_id}.yaml" for s in e.steps}
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert written == expected
    assert len(written) == len(plan.experiments) * (3 + len(plan.experiments[0].steps)) == 102
    objs = dict(r.render_campaign(spec, CID))
    assert yaml.safe_load((out / "experiments/agg-tp4x4/dynamographdeployment.yaml").read_text()) == objs[
        "experiments/agg-tp4x4/dynamographdeployment.yaml"]
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 103 and lines[-1].startswith("102 manifests")


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
