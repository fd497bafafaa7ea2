"""EC2 vCPU quotas, capacity options and registry egress of a campaign on EKS: what it needs, judged against what
the account gives. Pure: the standard library and benchctl only; the AWS calls are at the edge
(``benchctl.aws.quotas``), the egress probe runs in the cluster (``benchctl.aws.k8s.preflight_jobs``).

**Quotas.** EC2 limits running On-Demand instances per Region by the vCPUs of each quota family; GPU pools
fall in two (EC2 user guide, "Amazon EC2 instance type quotas" and "Spot Instance quotas"; the codes as the
Service Quotas console and API name them):

* P instances (p4d, p5, ...): On-Demand ``L-417A185B`` "Running On-Demand P instances"; Spot P2 to P4
  ``L-7212CCBC`` "All P4, P3 and P2 Spot Instance Requests" (P5 Spot has a quota of its own: not checked);
* G and VT instances (g6e, vt1, ...): On-Demand ``L-DB2E81BA`` "Running On-Demand G and VT instances",
  Spot ``L-3819A6DF`` "All G and VT Spot Instance Requests".

A campaign runs its experiments one after another, so what it needs of a quota is the most vCPUs one
experiment's pools of that family hold at once: ``nodes x vCPUs per node`` summed over its pools
(:func:`benchctl.planning.plan.nodes_needed`), the most over experiments. A pool's capacity type is its node group's
(``ON_DEMAND``, ``SPOT``, ``CAPACITY_BLOCK``; EKS Auto Mode pools: On-Demand, the NodePools we render ask for
``karpenter.sh/capacity-type: on-demand``). The vCPUs of an instance type are not a table here: the edge asks
EC2 (DescribeInstanceTypes, ``VCpuInfo.DefaultVCpus``).

**Capacity options.** A quota only lets the account ask for P instances; EC2 may still have none to give in
an Availability Zone (``InsufficientInstanceCapacity``). For pools of P instances on On-Demand capacity the
check names the two ways to hold capacity (EC2 user guide, "Capacity Reservations"): an On-Demand Capacity
Reservation (ODCR) the account already has for the type (an ``open`` one is used by any matching launch in its
zone, a ``targeted`` one only by launches that name it, e.g. the node group's launch template), and EC2
Capacity Blocks for ML (reserved for a future window; an EKS managed node group uses one with capacity type
``CAPACITY_BLOCK``). A pool that names its reservation or block (``pools[].capacity``) is judged apart
(``benchctl.planning.capacity``: its state, type, zone and free count); the options here are for pools that name
none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchctl.spec.model import CampaignSpec

SERVICE_CODE = "ec2"
ON_DEMAND, SPOT, CAPACITY_BLOCK = "on-demand", "spot", "capacity-block"
# an EKS managed node group's capacityType -> ours (EKS API reference, Nodegroup.capacityType)
NODEGROUP_CAPACITY = {"ON_DEMAND": ON_DEMAND, "SPOT": SPOT, "CAPACITY_BLOCK": CAPACITY_BLOCK}


@dataclass(frozen=True)
class Quota:
    code: str
    name: str
    family: str  # "P" or "G"
    capacity: str  # ON_DEMAND or SPOT


QUOTAS: dict[tuple[str, str], Quota] = {(q.family, q.capacity): q for q in (
    Quota("L-417A185B", "Running On-Demand P instances", "P", ON_DEMAND),
    Quota("L-DB2E81BA", "Running On-Demand G and VT instances", "G", ON_DEMAND),
    Quota("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests", "P", SPOT),  # P5 Spot has its own quota
    Quota("L-3819A6DF", "All G and VT Spot Instance Requests", "G", SPOT),
)}
# the instance family prefixes (the letters before the generation digit) of each quota family
_FAMILY_PREFIXES = {"p": "P", "g": "G", "gr": "G", "vt": "G"}
DOCS = {
    "quotas": "https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html",
    "odcr": "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-reservations.html",
    "capacity_blocks": "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html",
    "eks_capacity_blocks": "https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html",
}


def family(instance_type: str) -> str | None:
    """The GPU quota family of an instance type ("P", "G"), None for any other (not checked here)."""
    m = re.match(r"([a-z]+)\d", instance_type)
    return _FAMILY_PREFIXES.get(m.group(1)) if m else None


def quota_for(instance_type: str, capacity: str) -> Quota | None:
    """The quota a pool of ``instance_type`` on ``capacity`` draws from; None: not one checked here (not a P
    or G type, a Capacity Block, or Spot P5 and later, whose own quota's code is not verified here)."""
    f = family(instance_type)
    if f is None or (f == "P" and capacity == SPOT and _generation(instance_type) >= 5):
        return None
    return QUOTAS.get((f, capacity))


def _generation(instance_type: str) -> int:
    m = re.match(r"[a-z]+(\d+)", instance_type)
    return int(m.group(1)) if m else 0


@dataclass(frozen=True)
class Need:
    """The most vCPUs of one quota the campaign holds at once: in ``experiment``, ``pools`` (name -> nodes,
    instance type, vCPUs per node)."""

    quota: Quota
    vcpus: int
    experiment: str
    pools: dict[str, tuple[int, str, int]] = field(default_factory=dict)

    def how(self) -> str:
        return ", ".join(f"pool {p} {n} x {t} ({v} vCPUs each)" for p, (n, t, v) in self.pools.items())


def needs(spec: CampaignSpec, vcpus: Mapping[str, int], capacity: Mapping[str, str]) -> list[Need]:
    """Per GPU quota, the experiment whose pools hold the most of it at once (none: no P or G pool on EKS).
    ``vcpus``: instance type -> vCPUs per instance (every type of a P or G pool); ``capacity``: pool name ->
    ON_DEMAND / SPOT / CAPACITY_BLOCK (absent: ON_DEMAND). Capacity Block pools are not counted (the block
    bounds them: :func:`skipped`)."""
    from benchctl.planning.plan import nodes_needed

    best: dict[str, Need] = {}
    for exp in spec.experiments:
        per: dict[str, Need] = {}
        for name, n in nodes_needed(spec, exp).items():
            pool = spec.pool(name)
            if pool.provider == "local":
                continue
            q = quota_for(pool.instance_type, capacity.get(name, ON_DEMAND))
            if q is None:
                continue
            if pool.instance_type not in vcpus:
                raise KeyError(f"no vCPU count for instance type {pool.instance_type!r} (pool {name})")
            each = int(vcpus[pool.instance_type])
            held = per.get(q.code) or Need(q, 0, exp.name)
            per[q.code] = Need(q, held.vcpus + n * each, exp.name, {**held.pools, name: (n, pool.instance_type, each)})
        for code, need in per.items():
            if code not in best or need.vcpus > best[code].vcpus:
                best[code] = need
    return sorted(best.values(), key=lambda n: n.quota.code)


def skipped(spec: CampaignSpec, capacity: Mapping[str, str]) -> list[str]:
    """Pools whose quota is not judged here, each with why."""
    out = []
    for pool in spec.pools:
        if pool.provider == "local":
            continue
        cap = capacity.get(pool.name, ON_DEMAND)
        if cap == CAPACITY_BLOCK:
            out.append(f"pool {pool.name}: a Capacity Block node group; the block's reservation bounds its nodes "
                       "(its quota not judged here)")
        elif family(pool.instance_type) is None:
            out.append(f"pool {pool.name}: {pool.instance_type} is not a P, G or VT instance (its quota family is "
                       "not checked here)")
        elif quota_for(pool.instance_type, cap) is None:
            out.append(f"pool {pool.name}: Spot {pool.instance_type} draws from a quota not checked here")
    return out


@dataclass(frozen=True)
class Reading:
    """A quota's value as Service Quotas gave it: ``source`` "applied" (GetServiceQuota) or "AWS default"
    (GetAWSDefaultServiceQuota: the account has no applied value for it); ``error``: why there is none."""

    value: float | None
    source: str = "applied value"
    error: str | None = None


@dataclass(frozen=True)
class Usage:
    """vCPUs of the quota's family held now by instances that are not the spec's pools' (pending or running)."""

    vcpus: int
    instances: tuple[str, ...] = ()


def increase_hint(quota: Quota, desired: int, region: str) -> str:
    return (f"request an increase to at least {desired}: aws service-quotas request-service-quota-increase "
            f"--service-code {SERVICE_CODE} --quota-code {quota.code} --desired-value {desired} --region {region} "
            f"(or the Service Quotas console, Amazon EC2, {quota.name!r}; {DOCS['quotas']})")


def judge(need: Need, reading: Reading, usage: Usage | None, region: str) -> tuple[bool, str]:
    """(within the quota, the line naming the quota code, its value, the need and, past it, how to raise it).
    An unreadable quota is not within it (False) and says why."""
    q = need.quota
    head = f"EC2 quota {q.code} ({q.name}) in {region}"
    what = f"experiment {need.experiment!r} needs {need.vcpus} vCPUs at once ({need.how()})"
    if reading.value is None:
        return False, f"{head}: cannot be read ({reading.error}); {what}"
    value = int(reading.value)
    shown = f"{head} is {value} vCPUs ({reading.source})"
    if need.vcpus > value:
        return False, f"{shown}; {what}; {increase_hint(q, need.vcpus + (usage.vcpus if usage else 0), region)}"
    if usage is not None and need.vcpus + usage.vcpus > value:
        some = ", ".join(usage.instances[:5]) + (" ..." if len(usage.instances) > 5 else "")
        return False, (f"{shown}; {what}, but other instances hold {usage.vcpus} of it now ({some}): "
                       f"{value - usage.vcpus} free; wait for them to end or "
                       f"{increase_hint(q, need.vcpus + usage.vcpus, region)}")
    used = f"; {usage.vcpus} held now by other instances" if usage is not None else "; current usage not read"
    return True, f"{shown}; {what}{used}"


# ------------------------------------------------------------------------------------------ capacity options


def capacity_options(spec: CampaignSpec, capacity: Mapping[str, str], reservations: list[dict[str, Any]],
                     targets: Mapping[str, str | None], region: str) -> list[tuple[str, str]]:
    """(pool, guidance) for each pool of P instances on On-Demand capacity: the account's active Capacity
    Reservations of its type (DescribeCapacityReservations' items) and whether the pool's node group targets
    one (``targets``: pool -> the reservation id its launch template names, None: none; absent: not known),
    and EC2 Capacity Blocks for ML."""
    from benchctl.planning.plan import nodes_needed

    out = []
    for pool in spec.pools:
        if pool.provider == "local" or family(pool.instance_type) != "P" or capacity.get(pool.name, ON_DEMAND) != ON_DEMAND:
            continue
        n = max((nodes_needed(spec, e).get(pool.name, 0) for e in spec.experiments), default=0)
        mine = [r for r in reservations if r.get("InstanceType") == pool.instance_type and r.get("State") == "active"]
        target = targets.get(pool.name)
        lines = []
        for r in mine:
            rid, zone = r.get("CapacityReservationId"), r.get("AvailabilityZone")
            free, total = r.get("AvailableInstanceCount"), r.get("TotalInstanceCount")
            kind = r.get("ReservationType") or "default"
            criteria = r.get("InstanceMatchCriteria")
            if criteria == "open":
                use = "used by any matching On-Demand launch in that zone, the node group's included"
            elif target == rid:
                use = "targeted; the node group's launch template names it: its nodes launch into it"
            else:
                use = ("targeted; the node group's launch template does not name it, so its nodes do not use it "
                       "(add CapacityReservationSpecification.CapacityReservationTarget to the launch template)")
            lines.append(f"Capacity Reservation {rid} ({kind}) of {pool.instance_type} in {zone}: {free} of {total} "
                         f"instances free; {use}")
        if target and not any(r.get("CapacityReservationId") == target for r in mine):
            lines.append(f"the node group's launch template targets {target}, which is not an active reservation of "
                         f"{pool.instance_type} here")
        if not mine:
            lines.append(f"no active Capacity Reservation of {pool.instance_type} in {region}: On-Demand launches "
                         "take what EC2 has (InsufficientInstanceCapacity when a zone has none)")
        lines.append(f"to hold capacity: an On-Demand Capacity Reservation (aws ec2 create-capacity-reservation "
                     f"--instance-type {pool.instance_type} --instance-platform Linux/UNIX --instance-count {n} "
                     f"--availability-zone <the node group's zone>; {DOCS['odcr']}) or EC2 Capacity Blocks for ML "
                     f"(aws ec2 describe-capacity-block-offerings --instance-type {pool.instance_type} "
                     f"--instance-count {n} --capacity-duration-hours 24 --region {region}; {DOCS['capacity_blocks']}; "
                     f"a managed node group with capacity type CAPACITY_BLOCK: {DOCS['eks_capacity_blocks']})")
        out.append((pool.name, "; ".join(lines)))
    return out


# ------------------------------------------------------------------------------------------ registry egress

HUB_URL = "https://huggingface.co/api/models"  # what the prefetch Job's snapshot_download reaches first


def registry_url(image: str) -> str:
    """The registry API root (``https://<registry>/v2/``) a node pulls ``image`` from (Docker Hub's names
    normalised as the container runtime does: ``registry-1.docker.io``)."""
    from benchctl.planning.ceilings import normalise_repository

    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:  # a tag, not a registry port
        name = name[: len(name) - len(last[-1]) + last[-1].index(":")]
    host = normalise_repository(name).split("/", 1)[0]
    return f"https://{'registry-1.docker.io' if host == 'docker.io' else host}/v2/"


def egress_targets(spec: CampaignSpec, images: list[str]) -> dict[str, str]:
    """URL -> what needs it: every registry of ``images`` (what the campaign's pods run), and the Hugging Face
    Hub when the campaign prefetches the model (everything else reads it offline from the volume)."""
    out: dict[str, str] = {}
    for image in images:
        url = registry_url(image)
        out[url] = (out[url] + ", " if url in out else "pulls ") + image
    if spec.kubernetes.prefetch_model:
        out[HUB_URL] = f"the model prefetch downloads {spec.model.name}"
    return out
