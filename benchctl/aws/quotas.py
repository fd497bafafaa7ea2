"""The edge of :mod:`benchctl.planning.quotas`: what the account gives, read with boto3 (the Plan function's role in the
preflight, the user's credentials in ``benchctl doctor``), each call read-only:

* the spec's pools' capacity types and launch templates: ``eks:DescribeNodegroup`` (already the preflight's);
* vCPUs per instance type: ``ec2:DescribeInstanceTypes`` (``VCpuInfo.DefaultVCpus``; EC2 counts a quota in
  the type's vCPUs);
* each quota: ``servicequotas:GetServiceQuota`` (the applied value), and where Service Quotas has none for the
  account (``NoSuchResourceException``) ``servicequotas:GetAWSDefaultServiceQuota`` (the default, said so);
* what other instances hold of each quota now: ``ec2:DescribeInstances`` (pending and running P, G and VT
  instances of the Region that are not in the spec's own node groups, counted at their types' vCPUs);
* for P pools on On-Demand capacity: ``ec2:DescribeCapacityReservations`` (active reservations of their types)
  and ``ec2:DescribeLaunchTemplateVersions`` (whether the node group's launch template targets one).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from benchctl.planning.quotas import (
    CAPACITY_BLOCK,
    NODEGROUP_CAPACITY,
    ON_DEMAND,
    SERVICE_CODE,
    SPOT,
    Reading,
    Usage,
    capacity_options,
    family,
    judge,
    needs,
    quota_for,
    skipped,
)
from benchctl.spec.model import CampaignSpec

NO_SUCH_QUOTA = "NoSuchResourceException"


def _code(err: Exception) -> str:
    return str(getattr(err, "response", {}).get("Error", {}).get("Code", type(err).__name__))


def _why(err: Exception) -> str:
    msg = getattr(err, "response", {}).get("Error", {}).get("Message", str(err))
    return f"{_code(err)}: {msg}"


def read_quota(sq: Any, code: str) -> Reading:
    """A quota's applied value, else (no applied value for this account) its AWS default, said so."""
    try:
        return Reading(float(sq.get_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=code)["Quota"]["Value"]))
    except Exception as err:
        if _code(err) != NO_SUCH_QUOTA:
            return Reading(None, error=f"servicequotas:GetServiceQuota {code}: {_why(err)}")
    try:
        value = sq.get_aws_default_service_quota(ServiceCode=SERVICE_CODE, QuotaCode=code)["Quota"]["Value"]
    except Exception as err:
        return Reading(None, error=f"no applied value, and servicequotas:GetAWSDefaultServiceQuota {code}: {_why(err)}")
    return Reading(float(value), source="AWS default: Service Quotas has no applied value for this account")


def instance_vcpus(ec2: Any, types: set[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    wanted = sorted(types)
    for i in range(0, len(wanted), 100):  # DescribeInstanceTypes takes at most 100 names
        for page in ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=wanted[i:i + 100]):
            out.update({t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in page["InstanceTypes"]})
    return out


@dataclass
class Pools:
    """What the node groups say of the spec's pools: capacity type and launch template (id, version)."""

    capacity: dict[str, str] = field(default_factory=dict)
    templates: dict[str, tuple[str, str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def pool_facts(spec: CampaignSpec, eks: Any, cluster: str) -> Pools:
    out = Pools()
    for pool in spec.pools:
        if pool.provider != "managed-nodegroup" or not pool.nodegroup:
            # Auto Mode: our NodePools ask for on-demand, or reserved capacity where the spec names a block
            out.capacity[pool.name] = CAPACITY_BLOCK if pool.capacity.purchase == CAPACITY_BLOCK else ON_DEMAND
            continue
        try:
            ng = eks.describe_nodegroup(clusterName=cluster, nodegroupName=pool.nodegroup)["nodegroup"]
        except Exception as err:  # the preflight names a missing node group itself
            out.problems.append(f"pool {pool.name}: node group {pool.nodegroup!r} not read ({_why(err)}); its "
                                "capacity type taken as On-Demand")
            out.capacity[pool.name] = ON_DEMAND
            continue
        out.capacity[pool.name] = NODEGROUP_CAPACITY.get(str(ng.get("capacityType") or "ON_DEMAND"), ON_DEMAND)
        lt = ng.get("launchTemplate") or {}
        if lt.get("id") and lt.get("version"):
            out.templates[pool.name] = (str(lt["id"]), str(lt["version"]))
    return out


def _instances(ec2: Any) -> Iterator[dict[str, Any]]:
    # the GPU families are picked here, not by an instance-type filter with wildcards (EC2 takes them; a
    # stricter reading of the filter is not relied on)
    filters = [{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    for page in ec2.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            yield from reservation["Instances"]


def usage(ec2: Any, cluster: str, own_nodegroups: set[str], vcpus: dict[str, int]) -> dict[str, Usage]:
    """Quota code -> vCPUs held now by pending and running instances outside the spec's own node groups (an
    instance in one carries the tags ``eks:cluster-name`` and ``eks:nodegroup-name``). ``vcpus`` is filled in
    for the types found."""
    held: dict[str, list[tuple[str, str]]] = {}
    for inst in _instances(ec2):
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
        if tags.get("eks:cluster-name") == cluster and tags.get("eks:nodegroup-name") in own_nodegroups:
            continue
        lifecycle = inst.get("InstanceLifecycle")
        if lifecycle not in (None, "spot"):  # e.g. capacity-block, scheduled: neither quota here
            continue
        q = quota_for(inst["InstanceType"], SPOT if lifecycle == "spot" else ON_DEMAND)
        if q is not None:
            held.setdefault(q.code, []).append((inst["InstanceId"], inst["InstanceType"]))
    missing = {t for items in held.values() for _, t in items} - set(vcpus)
    if missing:
        vcpus.update(instance_vcpus(ec2, missing))
    return {code: Usage(sum(vcpus[t] for _, t in items), tuple(f"{i} ({t})" for i, t in items))
            for code, items in held.items()}


def reservations(ec2: Any, types: set[str]) -> list[dict[str, Any]]:
    filters = [{"Name": "instance-type", "Values": sorted(types)}, {"Name": "state", "Values": ["active"]}]
    out: list[dict[str, Any]] = []
    for page in ec2.get_paginator("describe_capacity_reservations").paginate(Filters=filters):
        out += page["CapacityReservations"]
    return out


def template_targets(ec2: Any, templates: dict[str, tuple[str, str]]) -> dict[str, str | None]:
    """Pool -> the Capacity Reservation its launch template targets (None: none)."""
    out: dict[str, str | None] = {}
    for pool, (tid, version) in templates.items():
        data = ec2.describe_launch_template_versions(LaunchTemplateId=tid, Versions=[version])[
            "LaunchTemplateVersions"][0]["LaunchTemplateData"]
        spec = (data.get("CapacityReservationSpecification") or {}).get("CapacityReservationTarget") or {}
        out[pool] = spec.get("CapacityReservationId")
    return out


@dataclass(frozen=True)
class Line:
    """One result: ``ok`` False is a problem; ``blocking`` False: the preflight does not refuse on it (the
    answer could not be read), the doctor still fails it."""

    name: str
    ok: bool
    detail: str
    blocking: bool = True


def check(spec: CampaignSpec, session: Any, cluster: str) -> list[Line]:
    """Every quota line of the spec's P and G pools (and why a pool is not judged), then the capacity options
    of its P pools on On-Demand capacity."""
    region = session.region_name or ""
    eks, ec2, sq = session.client("eks"), session.client("ec2"), session.client("service-quotas")
    facts = pool_facts(spec, eks, cluster)
    lines = [Line("quota", False, p, blocking=False) for p in facts.problems]
    gpu_types = {p.instance_type for p in spec.pools if p.provider != "local" and family(p.instance_type)}
    if not gpu_types:  # no GPU pool on EKS (the rehearsal's CPU pool): each pool said not judged
        return [*lines, *(Line("quota", True, why) for why in skipped(spec, facts.capacity))]
    try:
        vcpus = instance_vcpus(ec2, gpu_types)
    except Exception as err:
        return [*lines, Line("quota", False, f"the vCPUs of {sorted(gpu_types)} not read (ec2:DescribeInstanceTypes: "
                                             f"{_why(err)}): the quotas are not judged", blocking=False)]
    own = {p.nodegroup for p in spec.pools if p.provider == "managed-nodegroup" and p.nodegroup}
    try:
        held: dict[str, Usage] | None = usage(ec2, cluster, own, vcpus)
    except Exception as err:
        held = None
        lines.append(Line("quota usage", False, f"current usage not read (ec2:DescribeInstances: {_why(err)}); "
                                                "the quotas are judged on their value alone", blocking=False))
    for need in needs(spec, vcpus, facts.capacity):
        reading = read_quota(sq, need.quota.code)
        ok, detail = judge(need, reading, None if held is None else held.get(need.quota.code, Usage(0)), region)
        lines.append(Line(f"quota {need.quota.code}", ok, detail, blocking=reading.value is not None))
    lines += [Line("quota", True, why) for why in skipped(spec, facts.capacity)]
    p_on_demand = {p.instance_type for p in spec.pools
                   if family(p.instance_type) == "P" and facts.capacity.get(p.name) == ON_DEMAND}
    if p_on_demand:
        try:
            found = reservations(ec2, p_on_demand)
            targets = template_targets(ec2, {k: v for k, v in facts.templates.items()
                                             if spec.pool(k).instance_type in p_on_demand})
        except Exception as err:
            found, targets = [], {}
            lines.append(Line("capacity", False, f"Capacity Reservations not read ({_why(err)})", blocking=False))
        lines += [Line(f"capacity of pool {pool}", True, text)
                  for pool, text in capacity_options(spec, facts.capacity, found, targets, region)]
    return lines


def preflight_problems(spec: CampaignSpec, session: Any, cluster: str) -> list[str]:
    """The blocking quota problems (a campaign past a quota it can read), each with the capacity options of
    its pools of P instances where it is a P quota."""
    lines = check(spec, session, cluster)
    options = {ln.name: ln.detail for ln in lines if ln.name.startswith("capacity of pool ")}
    out = []
    for ln in lines:
        if ln.ok or not ln.blocking:
            continue
        extra = [f"{name.removeprefix('capacity of ')}: {text}" for name, text in options.items()
                 if ln.name == "quota L-417A185B" and f"pool {name.removeprefix('capacity of pool ')} " in ln.detail]
        out.append(ln.detail + ("; capacity options: " + " | ".join(extra) if extra else ""))
    return out
