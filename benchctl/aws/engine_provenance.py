"""What an EKS experiment really ran on, read from the cluster once its deployment is ready (the run record's
provenance, ``benchctl.campaign.provenance``):

* the engine's own package versions in each runtime image (Dynamo, vLLM, torch, NIXL) and the image's CUDA,
  as the experiment's pre-pull containers printed them on each node (``benchctl.aws.k8s.nodepool``:
  :data:`ENGINE_PACKAGES_SCRIPT`, the installed distributions' metadata, in the very image the workers run);
* the Kubernetes version the API server reports (``/version``);
* the NVIDIA driver of each node the workers run on (GPU feature discovery's node labels).

Each part that cannot be read is said so (a record, never a check that fails the experiment)."""

from __future__ import annotations

import json
from typing import Any

from benchctl.aws.k8s.client import ApiError, KubeClient
from benchctl.aws.k8s.common import LABEL_STEP
from benchctl.aws.k8s.nodepool import ENGINE_PACKAGES_MARKER
from benchctl.aws.pool_nodes import DRIVER_LABELS

JSON = dict[str, Any]
DRIVER_FULL_LABELS = ("nvidia.com/cuda.driver-version.full", *DRIVER_LABELS)  # the full version where labelled


def engine_packages(kube: KubeClient, pods: list[JSON], namespace: str) -> JSON:
    """image -> the packages its pre-pull container printed (the first node's answer per image), from the
    pre-pull pods among the experiment's ``pods``."""
    out: JSON = {}
    prepull = [p for p in pods
               if str(((p.get("metadata") or {}).get("labels") or {}).get(LABEL_STEP, "")).startswith("prepull-")]
    for pod in sorted(prepull, key=lambda o: o["metadata"]["name"]):
        for c in (pod.get("spec") or {}).get("containers") or []:
            if c.get("image") in out:
                continue
            try:
                text = kube.logs(pod["metadata"]["name"], namespace, c["name"], 50)
            except ApiError as err:
                out[c["image"]] = {"error": f"not read: {err}"}
                continue
            lines = [line for line in text.splitlines() if line.startswith(ENGINE_PACKAGES_MARKER)]
            if lines:
                try:
                    out[c["image"]] = json.loads(lines[-1][len(ENGINE_PACKAGES_MARKER):])
                except ValueError:
                    out[c["image"]] = {"error": f"unreadable line: {lines[-1][:200]}"}
    return out


def node_drivers(kube: KubeClient, node_names: set[str]) -> dict[str, str]:
    """node -> the NVIDIA driver its GPU feature discovery labels report (full version where labelled)."""
    out: dict[str, str] = {}
    for node in kube.list("v1", "Node"):
        name = node["metadata"]["name"]
        if name not in node_names:
            continue
        node_labels = (node.get("metadata") or {}).get("labels") or {}
        out[name] = next((node_labels[k] for k in DRIVER_FULL_LABELS if k in node_labels), "no driver label")
    return out


def cluster_provenance(kube: KubeClient, namespace: str, pods: list[JSON], worker_pods: list[JSON]) -> JSON:
    """``engine_packages``, ``kubernetes`` and ``gpu_drivers`` of the experiment whose ``pods`` (found by our
    labels) and ``worker_pods`` among them are given (see the module doc)."""
    out: JSON = {}
    try:
        out["engine_packages"] = engine_packages(kube, pods, namespace)
    except ApiError as err:
        out["engine_packages"] = {"error": f"not read: {err}"}
    try:
        out["kubernetes"] = str(kube.version().get("gitVersion") or "not reported")
    except ApiError as err:
        out["kubernetes"] = f"not read: {err}"
    nodes = {str((p.get("spec") or {}).get("nodeName")) for p in worker_pods if (p.get("spec") or {}).get("nodeName")}
    try:
        out["gpu_drivers"] = node_drivers(kube, nodes)
    except ApiError as err:
        out["gpu_drivers"] = {"error": f"not read: {err}"}
    return out
