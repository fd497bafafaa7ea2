"""``benchctl:gpu_capacity``: how each GPU node group (or, on EKS Auto Mode, the platform's reserved NodeClass) gets its
instances and where: a zone or subnet, On-Demand, a targeted On-Demand Capacity Reservation or a Capacity Block.
Pure: the entries are checked here and raise ValueError naming the key, the group, what is wrong and what is valid
(``stacks.config`` turns it into its ConfigError). Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PREFIX = "benchctl:"
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}\Z")
# an Availability Zone name (us-east-1a, eu-central-1b, us-gov-west-1a); a Capacity Reservation id (EC2 API reference,
# CapacityReservation.CapacityReservationId: cr- and 17 hex digits)
_ZONE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]\Z")
_RESERVATION = re.compile(r"^cr-[0-9a-f]{17}\Z")
PURCHASES = ("on-demand", "reservation", "capacity-block")
# the NodeClass the platform makes on Auto Mode for a reservation (the key of benchctl:gpu_capacity there): a
# campaign's NodePools draw from the reservation when the spec's kubernetes.node_class names it
RESERVED_NODE_CLASS = "benchctl-reserved"

GPU_CAPACITY = ("an object (platform=new) keyed by a GPU node group of benchctl:nodegroups (platform_capacity "
                    f"nodegroups) or by {RESERVED_NODE_CLASS!r} (auto-mode: the NodeClass the platform makes), each "
                    '{"zone": "us-east-1a" | null, "subnet_id": "subnet-..." | null, "purchase": "on-demand" | '
                    '"reservation" | "capacity-block", "reservation_id": "cr-<17 hex>"}: zone (a VPC the stack '
                    "creates) or subnet_id (one of benchctl:subnet_ids), not both; reservation_id for a reservation "
                    "or Capacity Block only (default {}: the first subnet, On-Demand)")


@dataclass(frozen=True)
class GpuCapacity:
    """How one GPU node group (or, on Auto Mode, the reserved NodeClass) gets its instances and where."""

    purchase: str = "on-demand"  # PURCHASES
    zone: str | None = None  # the Availability Zone its nodes must be in (a VPC the stack creates)
    subnet_id: str | None = None  # its one subnet (a given VPC: one of benchctl:subnet_ids)
    reservation_id: str | None = None  # the targeted ODCR or the Capacity Block (cr-...), unless on-demand


def parse(raw: Any, *, platform: str, capacity: str, nodegroups: tuple[str, ...], vpc_id: str | None,
          subnets: tuple[str, ...]) -> dict[str, GpuCapacity]:
    """``benchctl:gpu_capacity``, each entry checked against the platform it shapes: only a new platform makes
    node groups (or a NodeClass); a zone can be chosen only in a VPC the stack creates (a given VPC's subnets are
    known by id, not zone: name the subnet); a reservation names its ``cr-`` id, On-Demand names none."""
    key = f"CDK context '{PREFIX}gpu_capacity'"
    if raw in (None, {}):
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{key}: {raw!r} is not an object; valid: {GPU_CAPACITY}")
    if platform != "new":
        raise ValueError(f"{key} is for platform=new only (platform={platform} makes no node group or NodeClass; "
                          "an existing cluster's capacity is its own)")
    names = nodegroups if capacity == "nodegroups" else (RESERVED_NODE_CLASS,)
    out: dict[str, GpuCapacity] = {}
    for name, entry in raw.items():
        def where(part: str = "", name: str = name) -> str:
            return f"CDK context '{PREFIX}gpu_capacity.{name}{'.' + part if part else ''}'"

        if name not in names:
            raise ValueError(f"{where()}: {name!r} is not one of {list(names)} (platform_capacity={capacity}); valid: "
                              f"{GPU_CAPACITY}")
        if not isinstance(entry, dict):
            raise ValueError(f"{where()}: {entry!r} is not an object; valid: {GPU_CAPACITY}")
        unknown = sorted(set(entry) - {"zone", "subnet_id", "purchase", "reservation_id"})
        if unknown:
            raise ValueError(f"{where()}: unknown field(s) {unknown}; valid: zone, subnet_id, purchase, reservation_id")
        purchase = entry.get("purchase") or "on-demand"
        if purchase not in PURCHASES:
            raise ValueError(f"{where('purchase')}: {purchase!r} is not valid; valid: {', '.join(PURCHASES)}")
        zone, subnet, rid = entry.get("zone"), entry.get("subnet_id"), entry.get("reservation_id")
        if zone is not None and not (isinstance(zone, str) and _ZONE.match(zone)):
            raise ValueError(f"{where('zone')}: {zone!r} is not an Availability Zone name (e.g. us-east-1a)")
        if subnet is not None and not (isinstance(subnet, str) and _SUBNET.match(subnet)):
            raise ValueError(f"{where('subnet_id')}: {subnet!r} is not a subnet id (subnet-<8 or 17 hex>)")
        if zone and subnet:
            raise ValueError(f"{where()}: give zone or subnet_id, not both (the subnet decides the zone)")
        if zone and vpc_id:
            raise ValueError(f"{where('zone')}: with '{PREFIX}vpc_id' the stack knows its subnets by id, not by zone: "
                              f"give subnet_id, the one of {list(subnets)} in {zone}")
        if subnet and subnet not in subnets:
            raise ValueError(f"{where('subnet_id')}: {subnet!r} is not one of '{PREFIX}subnet_ids' {list(subnets)} (a "
                              "VPC the stack creates has subnets no one can name before deploy: give zone there)")
        if purchase == "on-demand" and rid is not None:
            raise ValueError(f"{where('reservation_id')}: {rid!r} given with purchase on-demand; set purchase "
                              "reservation (a targeted ODCR) or capacity-block, or drop reservation_id")
        if purchase != "on-demand" and not (isinstance(rid, str) and _RESERVATION.match(rid)):
            raise ValueError(f"{where('reservation_id')}: {rid!r} is not a Capacity Reservation id (cr- and 17 hex "
                              f"digits, e.g. cr-0123456789abcdef0); purchase {purchase} needs one")
        out[name] = GpuCapacity(purchase=purchase, zone=zone, subnet_id=subnet, reservation_id=rid)
    return out
