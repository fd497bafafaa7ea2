"""The edge of :mod:`benchctl.planning.capacity`: whether EC2 can give each GPU pool its nodes where they will launch,
read with boto3 (the Plan function's role in the preflight, the user's credentials in ``benchctl doctor``), each
call read-only:

* the zone a pool's nodes launch in: the spec's ``pools[].capacity.zone``, else its node group's subnets
  (``eks:DescribeNodegroup`` ``nodegroup.subnets``, then ``ec2:DescribeSubnets`` ``AvailabilityZone``);
* whether the pool's instance type is offered there: ``ec2:DescribeInstanceTypeOfferings`` with ``LocationType``
  ``availability-zone`` and the ``instance-type`` filter, which lists every zone of the Region that offers it (EC2
  API reference, DescribeInstanceTypeOfferings: filters ``instance-type`` and ``location``);
* a pool's reservation or Capacity Block: ``ec2:DescribeCapacityReservations`` by ``CapacityReservationIds`` (EC2
  API reference, DescribeCapacityReservations; the item's ``State``, ``InstanceType``, ``AvailabilityZone`` and
  ``AvailableInstanceCount``).

An EKS Auto Mode pool without ``capacity.zone`` launches in its NodeClass's subnets, which the campaign does not
read: said, not judged.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchctl.planning.capacity import PoolZone, block_nodes, offering_problem, reservation_problems
from benchctl.planning.plan import nodes_needed
from benchctl.spec.model import CampaignSpec


@dataclass(frozen=True)
class CapacityLine:
    """One result, as :class:`benchctl.aws.quotas.Line`: ``ok`` False is a problem; ``blocking`` False: the answer
    could not be read (the preflight does not refuse on it, the doctor fails it)."""

    name: str
    ok: bool
    detail: str
    blocking: bool = True


def _why(err: Exception) -> str:
    e = getattr(err, "response", {}).get("Error", {})
    return f"{e.get('Code', type(err).__name__)}: {e.get('Message', str(err))}"


def _eks_pools(spec: CampaignSpec) -> list[Any]:
    return [p for p in spec.pools if p.provider != "local"]


def nodegroup_zone_problem(pool: Any, eks: Any, ec2: Any, cluster: str) -> str | None:
    """A node-group pool whose ``capacity.zone`` is not where its node group launches (its subnets' zones)."""
    if not pool.capacity.zone or pool.provider != "managed-nodegroup" or not pool.nodegroup:
        return None
    where = pool_zone(pool.model_copy(update={"capacity": pool.capacity.model_copy(update={"zone": None})}),
                      eks, ec2, cluster)
    if isinstance(where, str) or set(where.zones) == {pool.capacity.zone}:
        return None
    return (f"pool {pool.name}: capacity.zone is {pool.capacity.zone}, but node group {pool.nodegroup}'s subnets "
            f"are in {', '.join(where.zones)}: its nodes would launch there; give the node group only subnets of "
            f"{pool.capacity.zone} (CDK context benchctl:gpu_capacity) or correct capacity.zone")


def pool_zone(pool: Any, eks: Any, ec2: Any, cluster: str) -> PoolZone | str:
    """Where the pool's nodes launch, or why that is not known (a sentence)."""
    if pool.capacity.zone:
        return PoolZone(pool.name, pool.instance_type, (pool.capacity.zone,), "pools[].capacity.zone")
    if pool.provider != "managed-nodegroup" or not pool.nodegroup:
        return (f"pool {pool.name}: no capacity.zone, and its nodes launch in the NodeClass's subnets (EKS Auto "
                "Mode), which are not read here: the offering is not judged")
    try:
        subnets = eks.describe_nodegroup(clusterName=cluster, nodegroupName=pool.nodegroup)["nodegroup"]["subnets"]
        found = ec2.describe_subnets(SubnetIds=list(subnets))["Subnets"]
    except Exception as err:
        return f"pool {pool.name}: the zone of node group {pool.nodegroup!r} not read ({_why(err)})"
    zones = tuple(sorted({str(s["AvailabilityZone"]) for s in found}))
    return PoolZone(pool.name, pool.instance_type, zones, f"the zone of node group {pool.nodegroup}'s subnets")


def offered_zones(ec2: Any, instance_type: str) -> list[str]:
    """Every Availability Zone of the client's Region that offers ``instance_type``."""
    out: list[str] = []
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [instance_type]}])
    for page in pages:
        out += [str(o["Location"]) for o in page["InstanceTypeOfferings"] if o.get("InstanceType") == instance_type]
    return sorted(set(out))


def find_reservation(ec2: Any, reservation_id: str) -> dict[str, Any] | None:
    """The DescribeCapacityReservations item of ``reservation_id``; None when EC2 has none (an empty answer, or a
    NotFound error code); any other error is raised."""
    try:
        items = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except Exception as err:
        if "NotFound" in _why(err).split(":")[0]:
            return None
        raise
    return next((r for r in items if r.get("CapacityReservationId") == reservation_id), None)


def check(spec: CampaignSpec, session: Any, cluster: str) -> Iterator[CapacityLine]:
    """For each pool on EKS (GPU or CPU): its zone offers its type (the zones that do, when not); for a pool on a reservation
    or a Capacity Block, the reservation is active, of its type, in its zone, with as many instances free as the
    plan asks of the pool at once."""
    pools = _eks_pools(spec)
    if not pools:
        return
    eks, ec2 = session.client("eks"), session.client("ec2")
    wanted = [nodes_needed(spec, e) for e in spec.experiments]
    for pool in pools:
        where = pool_zone(pool, eks, ec2, cluster)
        mismatch = nodegroup_zone_problem(pool, eks, ec2, cluster)
        if mismatch:
            yield CapacityLine(f"zone of pool {pool.name}", False, mismatch)
        name = f"offering of pool {pool.name}"
        if isinstance(where, str):
            yield CapacityLine(name, pool.provider == "auto-mode", where, blocking=False)
        else:
            try:
                offered = offered_zones(ec2, pool.instance_type)
            except Exception as err:
                yield CapacityLine(name, False, f"pool {pool.name}: ec2:DescribeInstanceTypeOfferings not read "
                                                f"({_why(err)})", blocking=False)
            else:
                problem = offering_problem(where, offered)
                yield CapacityLine(name, problem is None, problem or (
                    f"{pool.instance_type} is offered in {', '.join(where.zones)} ({where.source})"))
        name = f"reservation of pool {pool.name}"
        if pool.capacity.purchase == "on-demand" or pool.capacity.reservation_id is None:
            yield CapacityLine(name, True, f"pool {pool.name}: On-Demand (pools[].capacity names no reservation or "
                                           "Capacity Block): none to check")
            continue
        try:
            found = find_reservation(ec2, pool.capacity.reservation_id)
        except Exception as err:
            yield CapacityLine(name, False, f"pool {pool.name}: ec2:DescribeCapacityReservations "
                                            f"{pool.capacity.reservation_id} not read ({_why(err)})", blocking=False)
            continue
        need = block_nodes(pool.name, wanted)
        problems = reservation_problems(pool, found, need, () if isinstance(where, str) else where.zones)
        if problems:
            yield from (CapacityLine(name, False, p) for p in problems)
        else:
            assert found is not None
            yield CapacityLine(name, True, f"{pool.capacity.reservation_id}: {found.get('State')}, "
                                           f"{found.get('InstanceType')} in {found.get('AvailabilityZone')}, "
                                           f"{found.get('AvailableInstanceCount')} free, the plan needs {need}")


def preflight_problems(spec: CampaignSpec, session: Any, cluster: str) -> list[str]:
    """The blocking capacity problems: a zone without the pool's type, a reservation that cannot give its nodes."""
    return [ln.detail for ln in check(spec, session, cluster) if not ln.ok and ln.blocking]
