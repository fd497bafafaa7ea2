"""Where the platform's pods run (``stacks.platform_values`` sets it in each chart's values): the DaemonSets that serve
GPU nodes tolerate the GPU taint (``nvidia.com/gpu``, NoSchedule) and are held to GPU nodes; every other pod of the
platform runs on the CPU pool and never tolerates it, so a GPU pool's scale-in never evicts it. The tables say where
each chart's pods are placed, and what the charts and add-on the platform leaves at their defaults do; the tests hold
every chart's merged values to them. No aws_cdk import.
"""

from __future__ import annotations

from typing import Any

from benchctl.aws.k8s import common as k8s_common

JSON = dict[str, Any]


def gpu_node_affinity(gpu_nodegroups: tuple[str, ...] | list[str]) -> JSON:
    """Nodes with NVIDIA GPUs, whoever labels them: our managed GPU node groups, GPU feature discovery's
    ``nvidia.com/gpu.present``, Auto Mode's ``eks.amazonaws.com/instance-gpu-manufacturer`` (terms are ORed)."""
    terms: list[JSON] = []
    if gpu_nodegroups:
        terms.append({"matchExpressions": [{"key": "eks.amazonaws.com/nodegroup", "operator": "In",
                                            "values": list(gpu_nodegroups)}]})
    terms.append({"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]})
    terms.append({"matchExpressions": [{"key": "eks.amazonaws.com/instance-gpu-manufacturer", "operator": "In",
                                        "values": ["nvidia"]}]})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


GPU_TOLERATION: JSON = dict(k8s_common.GPU_TOLERATION)
EFA_TOLERATION: JSON = {"key": "vpc.amazonaws.com/efa", "operator": "Exists", "effect": "NoSchedule"}


def cpu_node_affinity(gpu_nodegroups: tuple[str, ...] | list[str]) -> JSON:
    """The platform's own pods (Prometheus, Grafana, the operators) on the CPU pool, off every GPU node and every
    campaign's nodes (:func:`benchctl.aws.k8s.common.cpu_node_affinity`): a GPU pool's scale-in never evicts them
    (Prometheus keeps its series on an emptyDir). They do not tolerate the GPU taint (no chart default does)."""
    return k8s_common.cpu_node_affinity(tuple(gpu_nodegroups))


# Where each chart's pods are placed, as (kind, values path of its affinity, values path of its tolerations,
# must run on GPU nodes). A DaemonSet that serves GPU nodes tolerates the GPU taint; every other pod runs on the
# CPU pool (:func:`cpu_node_affinity`) and never tolerates it. Paths are into the merged values (the chart's
# defaults under ours); a subchart whose defaults are not vendored (kube-prometheus-stack's kube-state-metrics and
# prometheus-node-exporter) is listed in :data:`UNVENDORED_PODS` with what its chart's defaults are.
PLACED_PODS: dict[str, tuple[tuple[str, str, str, bool], ...]] = {
    "nvidia-device-plugin": (("DaemonSet", "affinity", "tolerations", True),),
    "aws-efa-k8s-device-plugin": (("DaemonSet", "affinity", "tolerations", True),),
    "kube-prometheus-stack": (
        ("Deployment prometheus-operator", "prometheusOperator.affinity", "prometheusOperator.tolerations", False),
        ("Job admission-webhook patch", "prometheusOperator.admissionWebhooks.patch.affinity",
         "prometheusOperator.admissionWebhooks.patch.tolerations", False),
        ("StatefulSet prometheus", "prometheus.prometheusSpec.affinity", "prometheus.prometheusSpec.tolerations",
         False),
        ("Deployment grafana", "grafana.affinity", "grafana.tolerations", False),
    ),
    "dcgm-exporter": (("DaemonSet", "affinity", "tolerations", True),),
    "dynamo-platform": (("Deployment dynamo-operator controller manager", "dynamo-operator.controllerManager.affinity",
                         "dynamo-operator.controllerManager.tolerations", False),),
}
# kube-prometheus-stack's subcharts whose values are not vendored here: their charts' default tolerations
# (prometheus-community/helm-charts charts/prometheus-node-exporter/values.yaml: ``- effect: NoSchedule, operator:
# Exists``, so the node exporter runs on the tainted GPU nodes as well; charts/kube-state-metrics/values.yaml:
# ``tolerations: []``, so kube-state-metrics never lands on a GPU node). Not overridden by the platform.
UNVENDORED_PODS: dict[str, tuple[str, list[JSON], bool]] = {
    "kube-prometheus-stack/prometheus-node-exporter": ("DaemonSet", [{"effect": "NoSchedule", "operator": "Exists"}],
                                                       True),
    "kube-prometheus-stack/kube-state-metrics": ("Deployment", [], False),
}
# The EFS CSI driver is an EKS add-on, installed with its defaults (aws-efs-csi-driver chart values.yaml, which
# the add-on follows): the node DaemonSet tolerates every taint (``- operator: Exists``: it mounts the model volume
# on GPU nodes), the controller only CriticalAddonsOnly and efs.csi.aws.com/agent-not-ready: never on a GPU node
# (there the IMDS hop limit of 1 would keep it from reading its Region).
EFS_CSI_DEFAULT_TOLERATIONS: dict[str, tuple[str, list[JSON], bool]] = {
    "efs-csi-node": ("DaemonSet", [{"operator": "Exists"}], True),
    "efs-csi-controller": ("Deployment", [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                          {"key": "efs.csi.aws.com/agent-not-ready", "operator": "Exists"}], False),
}
