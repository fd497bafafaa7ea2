"""What the GPU pool adapters share: the labels they select nodes by, a node's GPUs and driver, the pool a request
names, and the scaling error."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from benchctl.aws.k8s.client import KubeClient
from benchctl.aws.k8s.common import LABEL_CAMPAIGN
from benchctl.errors import BenchError
from benchctl.spec.deployment import PoolSpec

# GPU feature discovery's driver labels (NVIDIA/k8s-device-plugin, docs/gpu-feature-discovery "Generated
# Labels"): the current name, then the older one. A node without either cannot be judged.
DRIVER_LABELS = ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver.major")


JSON = dict[str, Any]


KubeSource = KubeClient | Callable[[], KubeClient] | None


BeforeChange = Callable[[JSON], None] | None


CAMPAIGN_LABEL = LABEL_CAMPAIGN  # the same labels every rendered object carries


POOL_LABEL = "benchctl.io/pool"


NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


NODEPOOL_LABEL = "karpenter.sh/nodepool"


GPU_RESOURCE = "nvidia.com/gpu"


SCALING_KEYS = ("minSize", "maxSize", "desiredSize")


class PoolScalingFailed(BenchError):
    """A node group cannot be scaled (update failed, in use by another update, or gone)."""


class _LazyKube:
    """One KubeClient, built on first use (a Lambda that only touches EKS never needs a token)."""

    def __init__(self, source: KubeSource, default: Callable[[], KubeClient]) -> None:
        self._client = source if isinstance(source, KubeClient) else None
        self._factory = source if callable(source) and self._client is None else default

    def __call__(self) -> KubeClient:
        if self._client is None:
            self._client = self._factory()
        return self._client


def _gpus(quantity: Any) -> int:
    try:
        return int(str(quantity))
    except (TypeError, ValueError):
        return 0


def old_drivers(nodes: list[JSON], min_driver: int | None) -> list[str]:
    """``node (driver N)`` for each node whose GPU feature discovery label reports a driver below ``min_driver``."""
    out = []
    for node in nodes:
        node_labels = (node.get("metadata") or {}).get("labels") or {}
        major = next((node_labels[k] for k in DRIVER_LABELS if k in node_labels), None)
        if min_driver and major is not None and (not major.isdigit() or int(major) < min_driver):
            out.append(f"{node['metadata']['name']} (driver {major})")
    return out


def ready_gpu_nodes(kube: KubeClient, selector: str, gpus_per_node: int, min_driver: int | None = None) -> list[str]:
    """Names of nodes matching ``selector`` that are Ready, schedulable, with enough allocatable GPUs.
    PoolScalingFailed when one of them reports an NVIDIA driver older than ``min_driver``."""
    nodes = kube.list("v1", "Node", label_selector=selector)
    old = old_drivers(nodes, min_driver)
    if old:
        raise PoolScalingFailed(f"nodes {selector}: {', '.join(old)}: the Dynamo image needs NVIDIA driver "
                                f"{min_driver} or newer (kubernetes.min_gpu_driver); nothing was deployed")
    names = []
    for node in nodes:
        status = node.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        schedulable = not (node.get("spec") or {}).get("unschedulable")
        gpus = _gpus((status.get("allocatable") or {}).get(GPU_RESOURCE))
        if ready and schedulable and gpus >= gpus_per_node:
            names.append(node["metadata"]["name"])
    return names


def _pool_spec(pool_specs: Mapping[str, PoolSpec], pool: str, provider: str) -> PoolSpec:
    spec = pool_specs.get(pool)
    if spec is None:
        raise ValueError(f"pool {pool!r} is not in the spec's pools; valid: {sorted(pool_specs)}")
    if spec.provider != provider:
        raise ValueError(f"pool {pool!r} has provider {spec.provider!r}, not {provider!r}")
    return spec


def _check_nodes(spec: PoolSpec, nodes: int) -> None:
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ValueError(f"pool {spec.name!r}: nodes must be a positive integer, got {nodes!r}")
    if nodes > spec.max_nodes:
        raise ValueError(f"pool {spec.name!r} ({spec.provider} {spec.nodegroup or spec.name}): {nodes} nodes "
                         f"requested exceed the pool's max_nodes {spec.max_nodes}; refusing to scale")


def _error_code(err: Exception) -> str:
    return str(getattr(err, "response", {}).get("Error", {}).get("Code", ""))
