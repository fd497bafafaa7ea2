"""What the GPU pool adapters share: the labels they select nodes by, a node's GPUs and driver, the pool a request
names, the scaling error, and how a capacity or launch failure is read from what EKS and Karpenter report (a node
group's health issues, a NodeClaim's ``Launched`` condition). Pure functions; no boto3 here."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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


# ---------------------------------------------------------------- capacity and launch failures

ZONE_LABEL = "topology.kubernetes.io/zone"

# A node group's health issues (DescribeNodegroup: nodegroup.health.issues[], each {code, message, resourceIds}), as
# the EKS API reference's "Issue" data type lists their codes
# (https://docs.aws.amazon.com/eks/latest/APIReference/API_Issue.html; botocore's enum NodegroupIssueCode). Which end
# the wait for capacity:
# * CAPACITY_ISSUES: the instances cannot be had. EC2's own launch error (InsufficientInstanceCapacity, VcpuLimitExceeded,
#   ReservationCapacityExceeded, ...) is not an issue code of its own: EKS reports it as AsgInstanceLaunchFailures with
#   EC2's message ("Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have
#   sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a)...", as quoted in
#   aws/containers-roadmap#2204). The Auto Scaling group keeps retrying, but a scarce GPU type in one zone rarely
#   comes within the capacity deadline, and what did launch bills meanwhile: the campaign ends (CapacityUnavailable).
# * BROKEN_LAUNCH_ISSUES: the node group cannot launch or join any node until a person fixes it (a launch template,
#   subnet, role, AMI or Auto Scaling group missing or misconfigured; nodes that never register): PoolScalingFailed.
# * Every other code does not end the wait: transient (ClusterUnreachable, InternalFailure, IamThrottling,
#   AutoScalingGroupRateLimitExceeded, AccessDenied while access entries propagate, Unknown), about scale-in and
#   clean-up (NodeTerminationFailure, PodEvictionFailure, Ec2SecurityGroupDeletionFailure,
#   Ec2LaunchTemplateDeletionFailure), another update in progress (AutoScalingGroupInstanceRefreshActive) or limits
#   of creating/updating the group itself (IamLimitExceeded, LimitExceeded, Ec2LaunchTemplateMaxLimitExceeded,
#   Ec2LaunchTemplateVersionMaxLimitExceeded, Ec2SubnetListTooLong, KubernetesLabelInvalid); timeouts.capacity_s
#   still bounds them.
CAPACITY_ISSUES = frozenset({"AsgInstanceLaunchFailures", "InstanceLimitExceeded", "InsufficientFreeAddresses",
                             "Ec2InstanceTypeDoesNotExist"})
BROKEN_LAUNCH_ISSUES = frozenset({
    "AmiIdNotFound", "AutoScalingGroupInvalidConfiguration", "AutoScalingGroupNotFound", "AutoScalingGroupOptInRequired",
    "Ec2LaunchTemplateInvalidConfiguration", "Ec2LaunchTemplateNotFound", "Ec2LaunchTemplateVersionMismatch",
    "Ec2SecurityGroupNotFound", "Ec2SubnetInvalidConfiguration", "Ec2SubnetMissingIpv6Assignment", "Ec2SubnetNotFound",
    "IamInstanceProfileNotFound", "IamNodeRoleNotFound", "NodeCreationFailure", "SourceEc2LaunchTemplateNotFound"})

# EC2 launch error codes that mean "this capacity cannot be had now" (EC2 API reference, "Error codes": capacity and
# limit errors). Karpenter's AWS provider turns the capacity ones into an InsufficientCapacityError and deletes the
# NodeClaim (kubernetes-sigs/karpenter pkg/controllers/nodeclaim/lifecycle/launch.go); any other launch error leaves
# the NodeClaim with Launched=False, reason LaunchFailed and the error as its message, and is retried.
EC2_CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity", "InsufficientCapacityError", "ReservationCapacityExceeded",
    "InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "UnfulfillableCapacity",
    "InsufficientFreeAddressesInSubnet", "Unsupported"})

_AZ = re.compile(r"\b([a-z]{2}(?:-gov)?-[a-z]+-\d[a-z])\b")  # us-east-1a, eu-west-2c, us-gov-west-1a
_EC2_CODE = re.compile(r"\b([A-Z][A-Za-z0-9]+(?:\.[A-Za-z0-9]+)?)\s+-\s")  # "InsufficientInstanceCapacity - We ..."
STALE_ISSUE_GRACE_S = 600.0  # an issue already there before our request: judged only after this (a p4d boots and joins)


@dataclass(frozen=True)
class LaunchProblem:
    """One capacity or launch failure, read from what EKS or Karpenter reported."""

    code: str  # the most specific code known: EC2's (from the message) or EKS's / Karpenter's
    source: str  # "EKS AsgInstanceLaunchFailures", "NodeClaim gpu-abc12 Launched=False (LaunchFailed)"
    message: str
    zone: str | None  # the zone the message names, if any
    capacity: bool  # True: the capacity cannot be had (CapacityUnavailable); False: a broken node group


def ec2_code(message: str) -> str | None:
    """EC2's error code in an ASG/EKS/Karpenter launch message ("... InsufficientInstanceCapacity - We currently ...",
    or any known capacity code it names)."""
    m = _EC2_CODE.search(message or "")
    if m:
        return m.group(1)
    return next((c for c in sorted(EC2_CAPACITY_CODES, key=len, reverse=True) if c in (message or "")), None)


def zone_in(message: str) -> str | None:
    m = _AZ.search(message or "")
    return m.group(1) if m else None


def issue_key(issue: JSON) -> str:
    return f"{issue.get('code')}: {issue.get('message')}"


def nodegroup_problem(nodegroup: JSON, *, known_before: Iterable[str] = (), stale_ok: bool = True) -> LaunchProblem | None:
    """The node group's health issue that ends the wait for capacity, or None. ``known_before``: the issues (
    :func:`issue_key`) the group already reported when we asked for nodes; those count only once ``stale_ok`` is
    False (a degraded group stays DEGRADED with its old issue until a scale-out succeeds: aws/containers-roadmap#2326)."""
    before = set(known_before)
    for issue in ((nodegroup.get("health") or {}).get("issues") or []):
        code = str(issue.get("code") or "")
        if code not in CAPACITY_ISSUES | BROKEN_LAUNCH_ISSUES or (stale_ok and issue_key(issue) in before):
            continue
        message = str(issue.get("message") or "")
        detailed = ec2_code(message) if code == "AsgInstanceLaunchFailures" else None
        resources = ", ".join(str(r) for r in issue.get("resourceIds") or [])
        return LaunchProblem(code=detailed or code, source=f"EKS health issue {code}" + (f" on {resources}" if resources else ""),
                             message=message, zone=zone_in(message), capacity=code in CAPACITY_ISSUES)
    return None


def nodeclaim_problem(claims: Iterable[JSON]) -> LaunchProblem | None:
    """The first NodeClaim whose ``Launched`` condition is False for a capacity reason, or None. Karpenter's v1
    NodeClaim status: conditions[] with type, status, reason, message (kubernetes-sigs/karpenter
    pkg/apis/v1/nodeclaim_status.go, ConditionTypeLaunched). A LaunchFailed for another reason (throttling, a
    NodeClass not ready) is retried by Karpenter and does not end the wait here."""
    for claim in claims:
        for c in ((claim.get("status") or {}).get("conditions") or []):
            if c.get("type") != "Launched" or c.get("status") != "False":
                continue
            reason, message = str(c.get("reason") or ""), str(c.get("message") or "")
            code = ec2_code(message)
            capacity_reason = "InsufficientCapacity" in reason
            if not capacity_reason and code not in EC2_CAPACITY_CODES:
                continue
            name = (claim.get("metadata") or {}).get("name")
            return LaunchProblem(code=code or reason, source=f"NodeClaim {name} Launched=False ({reason})",
                                 message=message, zone=zone_in(message) or _claim_zone(claim), capacity=True)
    return None


def _claim_zone(claim: JSON) -> str | None:
    labels = (claim.get("metadata") or {}).get("labels") or {}
    if labels.get(ZONE_LABEL):
        return str(labels[ZONE_LABEL])
    for req in ((claim.get("spec") or {}).get("requirements") or []):
        if req.get("key") == ZONE_LABEL and req.get("operator") == "In" and len(req.get("values") or []) == 1:
            return str(req["values"][0])
    return None


def node_zones(nodes: Iterable[JSON]) -> list[str]:
    """The zones (``topology.kubernetes.io/zone``) of ``nodes``, sorted, without repeats."""
    return sorted({str(z) for n in nodes if (z := ((n.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL))})


def launch_zone(problem: LaunchProblem, spec: PoolSpec | None, nodes: list[JSON], otherwise: str) -> str:
    """The zone to name: the one EC2's message names, else the pool's capacity zone, else the launched nodes'."""
    if problem.zone:
        return problem.zone
    capacity = getattr(spec, "capacity", None)
    if capacity is not None and getattr(capacity, "zone", None):
        return str(capacity.zone)
    zones = node_zones(nodes)
    return ", ".join(zones) if zones else otherwise
