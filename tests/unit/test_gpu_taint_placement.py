"""Which pods may run on the tainted GPU nodes, read from what is rendered and installed.

GPU nodes carry the taint ``nvidia.com/gpu:NoSchedule`` (the platform's GPU node groups; every NodePool a campaign
creates, as rendered). These tests enumerate every object of every example spec on EKS (``example_specs``: each
example, its ``local`` pools as managed node groups and as Auto Mode pools) and every platform chart's values
(the chart's vendored defaults under ours, as Helm merges them), and judge each pod as kube-scheduler does:

* taints and tolerations (Kubernetes docs, "Taints and Tolerations": a toleration matches a taint when the keys
  match, or the toleration's key is empty with ``operator: Exists``; ``Exists`` ignores the value, ``Equal`` (the
  default) compares it; an empty effect matches every effect; a NoSchedule taint keeps every pod that does not
  tolerate it off the node);
* required node affinity (Kubernetes docs, "Assigning Pods to Nodes": the terms of
  ``nodeSelectorTerms`` are ORed, the expressions of a term ANDed; ``NotIn`` and ``DoesNotExist`` hold for a node
  without the label) and ``nodeSelector`` (every pair must be a label of the node).

The nodes are labelled as they are made: the platform's CPU node group ``benchctl.io/pool=cpu``, a GPU node group
``eks.amazonaws.com/nodegroup`` and ``benchctl.io/pool`` (``stacks/platform_nodes.py``), a NodePool's nodes its
template's labels plus ``karpenter.sh/nodepool`` (Karpenter's well-known label), Auto Mode's own nodes
``karpenter.sh/nodepool=general-purpose`` and, for a GPU, ``eks.amazonaws.com/instance-gpu-manufacturer=nvidia``
(EKS user guide, "Create a Node Pool for EKS Auto Mode", its supported labels).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from benchctl.aws.k8s import common as kc
from benchctl.aws.k8s import nodepool as npl
from benchctl.aws.k8s.preflight_jobs import render_preflight_job
from benchctl.aws.k8s.render import render_campaign
from benchctl.spec.model import CampaignSpec, parse_spec
from stacks import platform_placement as placement
from stacks import platform_values as pv
from tests import crd_schemas
from tests.fakes.eks_world import example_specs

JSON = dict[str, Any]
CID = "taint-20261207-000000"
GPU_TAINT: JSON = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
SPECS = {name: spec for name, spec in example_specs().items() if any(p.provider != "local" for p in spec.pools)}
# The platform's CPU node group and Auto Mode's general-purpose pool, as their nodes are labelled
CPU_NODES: dict[str, JSON] = {
    "the platform's CPU node group": {"eks.amazonaws.com/nodegroup": "benchctl-cpu", "benchctl.io/pool": "cpu"},
    "Auto Mode's general-purpose pool": {"karpenter.sh/nodepool": "general-purpose"},
}


# ------------------------------------------------------------------------------------------ the scheduler's rules


def tolerates(tolerations: list[JSON] | None, taint: JSON) -> bool:
    """Whether any toleration matches the taint (Kubernetes "Taints and Tolerations")."""
    for t in tolerations or []:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def admits(pod: JSON, node_labels: JSON) -> bool:
    """Whether the pod's nodeSelector and required node affinity let it onto a node with these labels."""
    if any(node_labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True

    def holds(e: JSON) -> bool:
        value = node_labels.get(e["key"])
        ops = {"In": lambda: value in e["values"], "NotIn": lambda: value not in e["values"],
               "Exists": lambda: value is not None, "DoesNotExist": lambda: value is None}
        if e["operator"] not in ops:
            raise AssertionError(f"operator {e['operator']} is not modelled by this test")
        return bool(ops[e["operator"]]())

    return any(all(holds(e) for e in term.get("matchExpressions", [])) for term in required["nodeSelectorTerms"])


# ------------------------------------------------------------------------------------------ the campaign's pods


def pool_nodes(spec: CampaignSpec, manifests: dict[str, JSON]) -> dict[str, tuple[JSON, list[JSON]]]:
    """pool -> (a node's labels, its taints) as the platform (node groups) or the rendered NodePool makes it."""
    out: dict[str, tuple[JSON, list[JSON]]] = {}
    for pool in spec.pools:
        if pool.provider == "managed-nodegroup":
            taints = [dict(GPU_TAINT)] if pool.gpus_per_node else []  # the platform taints its GPU groups only
            out[pool.name] = ({"eks.amazonaws.com/nodegroup": pool.nodegroup, "benchctl.io/pool": pool.name}, taints)
        elif pool.provider == "auto-mode":
            np = manifests[f"nodepools/{pool.name}.yaml"]
            tmpl = np["spec"]["template"]
            labels = {**tmpl["metadata"]["labels"], "karpenter.sh/nodepool": np["metadata"]["name"]}
            if pool.gpus_per_node:
                labels["eks.amazonaws.com/instance-gpu-manufacturer"] = "nvidia"
            out[pool.name] = (labels, list(tmpl["spec"].get("taints") or []))
    return out


def campaign_pods(spec: CampaignSpec) -> Iterator[tuple[str, str, JSON, JSON]]:
    """(where, what, pod spec, object) of every pod template a campaign renders: "frontend", "gpu-worker",
    "cpu-worker" (a mocker), "prepull" or "job" (runner, smoke, prefetch, preflight)."""
    manifests = dict(render_campaign(spec, CID, runs_uri="s3://b/runs", region="eu-west-1"))
    preflight = {f"preflight/{c}": render_preflight_job(spec, CID, c) for c in ("aiperf", "uploader")}
    for path, obj in {**manifests, **preflight}.items():
        if obj["kind"] == "DynamoGraphDeployment":
            for c in obj["spec"]["components"]:
                pod = c["podTemplate"]["spec"]
                gpus = sum(int((ct.get("resources") or {}).get("requests", {}).get(kc.GPU, 0))
                           for ct in pod["containers"])
                what = "frontend" if c["type"] == "frontend" else "gpu-worker" if gpus else "cpu-worker"
                yield f"{path} component {c['name']}", what, pod, obj
        elif obj["kind"] in ("Job", "DaemonSet"):
            what = "prepull" if obj["kind"] == "DaemonSet" else "job"
            yield path, what, obj["spec"]["template"]["spec"], obj
        else:
            assert obj["kind"] == "NodePool", (path, obj["kind"])  # every kind rendered is judged


@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_rendered_frontend_and_jobs_never_tolerate_the_gpu_taint_and_every_gpu_worker_does(name: str) -> None:
    """Every pod of the campaign, against every node it could meet: the Frontend and the Jobs (runner, smoke,
    prefetch, preflight) never tolerate the GPU taint, are refused by every node of the campaign's pools and
    admitted by the platform's CPU node group and Auto Mode's general-purpose pool; every GPU worker tolerates
    the taint and is admitted by its pool's nodes (and by no other pool's); a mocker worker on a CPU pool lands
    on its own pool's nodes, tolerating exactly what they carry."""
    spec = SPECS[name]
    manifests = dict(render_campaign(spec, CID, runs_uri="s3://b/runs", region="eu-west-1"))
    nodes = pool_nodes(spec, manifests)
    seen: set[str] = set()
    for where, what, pod, obj in campaign_pods(spec):
        seen.add(what)
        if obj["kind"] == "DynamoGraphDeployment":
            assert crd_schemas.problems(obj) == [], where  # placement fields where the DGD CRD has them
        tol = pod.get("tolerations")
        if what in ("frontend", "job"):
            assert not tolerates(tol, GPU_TAINT), where
            for pool, (labels, _) in nodes.items():
                assert not admits(pod, labels), (where, pool)
            for cpu, labels in CPU_NODES.items():
                assert admits(pod, labels), (where, cpu)
            continue
        pinned = [p for p, (labels, _) in nodes.items() if admits(pod, labels)]
        assert len(pinned) == 1, (where, pinned)  # a worker (or pre-pull) is pinned to exactly one pool
        _, taints = nodes[pinned[0]]
        assert all(tolerates(tol, t) for t in taints), (where, taints)
        if what == "gpu-worker":
            assert spec.pool(pinned[0]).gpus_per_node > 0 and tolerates(tol, GPU_TAINT), where
        else:  # a mocker worker or a pre-pull: the GPU taint tolerated only where its pool's nodes carry it
            assert tolerates(tol, GPU_TAINT) == (GPU_TAINT in taints), (where, tol, taints)
    assert {"frontend", "job"} <= seen and seen & {"gpu-worker", "cpu-worker"}


def test_every_example_on_eks_is_judged_with_gpu_workers_and_mocker_workers_on_both_providers() -> None:
    """The enumeration above covers GPU workers and mocker workers, on node groups and on Auto Mode."""
    kinds = {(p.provider, p.gpus_per_node > 0) for spec in SPECS.values() for p in spec.pools}
    assert kinds >= {("managed-nodegroup", True), ("auto-mode", True), ("managed-nodegroup", False),
                     ("auto-mode", False)}


def test_a_cpu_pool_on_a_node_group_needs_no_gpu_toleration() -> None:
    """The rehearsal's mocker workers on its (untainted) CPU node group carry no GPU toleration at all."""
    spec = SPECS["aws-rehearsal"]
    workers = [(w, pod) for w, what, pod, _ in campaign_pods(spec) if what == "cpu-worker"]
    assert workers and all("tolerations" not in pod for _, pod in workers), workers


# ------------------------------------------------------------------------------------------ NodePools


def _auto(name: str, purchase: str, node_class: str = npl.RESERVED_NODE_CLASS, **capacity: Any) -> CampaignSpec:
    spec = SPECS[name]
    data = spec.model_dump(mode="json", exclude_none=True)
    data["kubernetes"]["node_class"] = node_class
    for p in data["pools"]:
        if p["gpus_per_node"]:
            p["capacity"] = {"purchase": purchase, **capacity}
    return parse_spec(copy.deepcopy(data), f"{name}+{purchase}")


GPU_AUTO = next(n for n, s in SPECS.items() if any(p.provider == "auto-mode" and p.gpus_per_node for p in s.pools))


@pytest.mark.parametrize("purchase", ["on-demand", "reservation", "capacity-block"])
def test_every_campaign_nodepool_carries_the_gpu_taint_and_a_reserved_one_takes_reserved_capacity_only(
        purchase: str) -> None:
    """Karpenter v1 NodePool (``spec.template.spec.taints``, ``requirements``): the taint always; a pool bought as
    a reservation or a Capacity Block requires ``karpenter.sh/capacity-type: reserved`` (EKS Auto Mode labels a
    node launched into a reservation its NodeClass selects so, and never falls back to On-Demand then: EKS user
    guide, "Control deployment of workloads into Capacity Reservations with EKS Auto Mode") from the reservations'
    NodeClass, in the reservation's zone."""
    extra = {"reservation": {"reservation_id": "cr-0123456789abcdef0", "zone": "us-east-1a"},
             "capacity-block": {"reservation_id": "cr-0123456789abcdef0", "zone": "us-east-1a",
                                "block_start": "2026-12-08T11:30:00Z", "block_end": "2026-12-10T11:30:00Z"},
             "on-demand": {}}[purchase]
    spec = _auto(GPU_AUTO, purchase, npl.AUTO_MODE_DEFAULT_NODE_CLASS if purchase == "on-demand"
                 else npl.RESERVED_NODE_CLASS, **extra)
    nodepools = [o for p, o in render_campaign(spec, CID) if o["kind"] == "NodePool"]
    assert nodepools
    for np in nodepools:
        assert crd_schemas.problems(np) == [], np["metadata"]["name"]
        tmpl = np["spec"]["template"]["spec"]
        assert GPU_TAINT in tmpl["taints"]
        req = {r["key"]: (r["operator"], r["values"]) for r in tmpl["requirements"]}
        assert tmpl["nodeClassRef"]["name"] == spec.kubernetes.node_class  # the one the admission policy allows
        if purchase == "on-demand":
            assert req["karpenter.sh/capacity-type"] == ("In", ["on-demand"])
            assert npl.ZONE_LABEL not in req
        else:
            assert req["karpenter.sh/capacity-type"] == ("In", ["reserved"])
            assert req[npl.ZONE_LABEL] == ("In", [extra["zone"]])


def test_a_reserved_auto_mode_pool_on_the_built_in_node_class_is_refused_naming_the_node_class_to_use() -> None:
    """Auto Mode's built-in NodeClass selects no reservation: the NodePool could launch nothing, so render refuses
    it, naming the pool, the reservation and the NodeClass the platform makes for it."""
    spec = _auto(GPU_AUTO, "reservation", npl.AUTO_MODE_DEFAULT_NODE_CLASS, reservation_id="cr-0123456789abcdef0")
    with pytest.raises(ValueError, match=r"kubernetes\.node_class") as err:
        render_campaign(spec, CID)
    assert "cr-0123456789abcdef0" in str(err.value) and repr(npl.RESERVED_NODE_CLASS) in str(err.value)
    assert "capacity.purchase 'reservation'" in str(err.value)


# ------------------------------------------------------------------------------------------ the platform's pods

# Components of a chart whose pods the platform does not run, by the values flag that turns them off (merged
# values): their tolerations paths need no placement. nvidia-device-plugin's node-feature-discovery dependency
# is installed on the condition ``nfd.enabled,gfd.enabled`` (its Chart.yaml); unset nfd.enabled, gfd.enabled decides.
DISABLED_BY = {
    ("nvidia-device-plugin", "nfd.worker.tolerations"): "gfd.enabled",
    ("kube-prometheus-stack", "crds.upgradeJob.tolerations"): "crds.upgradeJob.enabled",
    ("kube-prometheus-stack", "alertmanager.alertmanagerSpec.tolerations"): "alertmanager.enabled",
    ("kube-prometheus-stack", "grafana.imageRenderer.tolerations"): "grafana.imageRenderer.enabled",
    ("kube-prometheus-stack", "prometheusOperator.admissionWebhooks.deployment.tolerations"):
        "prometheusOperator.admissionWebhooks.deployment.enabled",
    ("kube-prometheus-stack", "thanosRuler.thanosRulerSpec.tolerations"): "thanosRuler.enabled",
    ("dynamo-platform", "grove.tolerations"): "global.grove.install",
    ("dynamo-platform", "kai-scheduler.global.tolerations"): "global.kai-scheduler.install",
}


def _at(values: JSON, path: str) -> Any:
    for part in path.split("."):
        values = values.get(part) if isinstance(values, dict) else None  # type: ignore[assignment]
    return values


def _paths(values: Any, key: str, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    if isinstance(values, dict):
        for k, v in values.items():
            if k == key:
                yield ".".join((*prefix, k))
            else:
                yield from _paths(v, key, (*prefix, k))


def _settings(auto_mode: bool) -> pv.PlatformSettings:
    spec = SPECS["seed-plan"]
    return pv.settings_from_spec(spec, cluster_name="c", region="us-east-1", efs_file_system_id="fs-1",
                                 auto_mode=auto_mode)


GPU_NODES: dict[str, JSON] = {
    "a GPU node group": {"eks.amazonaws.com/nodegroup": "gpu-p4d", "benchctl.io/pool": "gpu-p4d"},
    "a campaign's GPU NodePool": {"karpenter.sh/nodepool": "x", "benchctl.io/campaign": CID,
                                  "eks.amazonaws.com/instance-gpu-manufacturer": "nvidia"},
    "a campaign's CPU NodePool": {"karpenter.sh/nodepool": "y", "benchctl.io/campaign": CID},
    "the rehearsal's CPU node group": {"eks.amazonaws.com/nodegroup": "benchctl-rehearsal",
                                       "benchctl.io/pool": "cpu-rehearsal"},
    "another team's GPU node": {"nvidia.com/gpu.present": "true"},
}


@pytest.mark.parametrize("auto_mode", [False, True], ids=["nodegroups", "auto-mode"])
def test_the_platforms_pods_never_tolerate_the_gpu_taint_and_its_gpu_daemonsets_do(auto_mode: bool) -> None:
    """Every chart the platform installs, its values merged over the chart's own defaults: each pod that is not a
    GPU node's DaemonSet (Prometheus, its operator and admission job, Grafana, the Dynamo operator) does not
    tolerate the GPU taint, is admitted by the CPU pool and refused by every GPU or campaign node; the device
    plugins and dcgm-exporter tolerate it. Every ``tolerations`` of a chart's defaults is judged or belongs to a
    component the values turn off, so a pod cannot be forgotten."""
    s = _settings(auto_mode)
    assert set(placement.PLACED_PODS) == set(pv.CHARTS)
    for key in pv.charts_to_install(s):
        merged = pv._merge(pv.reference_defaults(key), pv.chart_values(key, s))
        placed = {tol for _, _, tol, _ in placement.PLACED_PODS[key]}
        for path in _paths(pv.reference_defaults(key), "tolerations"):
            if path not in placed:
                flag = DISABLED_BY[(key, path)]
                assert _at(merged, flag) is False, (key, path, flag)
        for what, affinity_path, tol_path, on_gpu in placement.PLACED_PODS[key]:
            pod = {"tolerations": _at(merged, tol_path), "affinity": _at(merged, affinity_path)}
            where = f"{key} {what}"
            if on_gpu:
                assert tolerates(pod["tolerations"], GPU_TAINT), where
                continue
            assert not tolerates(pod["tolerations"], GPU_TAINT), where
            for node, labels in CPU_NODES.items():
                assert admits(pod, labels), (where, node)
            for node, labels in GPU_NODES.items():
                assert not admits(pod, labels), (where, node)
            prefer = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            assert {e["key"] for p in prefer for e in p["preference"]["matchExpressions"]} == {
                "benchctl.io/pool", "karpenter.sh/nodepool"}


def test_the_subcharts_and_add_on_the_platform_does_not_configure_place_their_pods_by_their_own_defaults() -> None:
    """kube-prometheus-stack's node exporter and the EFS CSI node plugin (DaemonSets every node needs) tolerate the
    GPU taint by their charts' defaults; kube-state-metrics and the EFS CSI controller do not, so they never land
    on a GPU node (where the IMDS hop limit of 1 would keep the controller from reading its Region)."""
    for table in (placement.UNVENDORED_PODS, placement.EFS_CSI_DEFAULT_TOLERATIONS):
        for name, (kind, tolerations, on_gpu) in table.items():
            assert tolerates(tolerations, GPU_TAINT) is on_gpu, name
            assert on_gpu is (kind == "DaemonSet"), name


def test_the_tolerance_model_is_the_schedulers() -> None:
    """The rules this file judges by, on the cases the Kubernetes page spells out."""
    assert tolerates([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], GPU_TAINT)
    assert tolerates([{"operator": "Exists"}], GPU_TAINT)  # an empty key with Exists matches every taint
    assert tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], GPU_TAINT)  # empty effect: all effects
    assert not tolerates([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], GPU_TAINT)
    assert not tolerates([{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}], GPU_TAINT)
    assert not tolerates([{"key": "CriticalAddonsOnly", "operator": "Exists"}], GPU_TAINT)
    assert not tolerates(None, GPU_TAINT)
    pod = {"affinity": kc.cpu_node_affinity(["gpu-p4d"])}
    assert admits(pod, {}) and not admits(pod, {"eks.amazonaws.com/nodegroup": "gpu-p4d"})
    assert not admits({"nodeSelector": {"a": "b"}}, {}) and admits({"nodeSelector": {"a": "b"}}, {"a": "b"})


def test_the_reserved_node_class_is_the_one_the_platform_makes() -> None:
    """The NodeClass a reserved pool's error message names is the one the platform stack creates."""
    from stacks.gpu_capacity import RESERVED_NODE_CLASS

    assert npl.RESERVED_NODE_CLASS == RESERVED_NODE_CLASS
