"""How a campaign's GPU pools are bought (``pools[].capacity``: On-Demand, a targeted On-Demand Capacity
Reservation, a Capacity Block for ML), judged without calling AWS: whether the plan fits a block's window, the
deadline by which a campaign on a block must be torn down, what one node-hour of reserved or block capacity costs,
and whether what EC2 says of a zone or a reservation lets the pool have its nodes (the edge reads EC2:
``benchctl.aws.capacity_checks``).

Facts relied on (EC2 user guide): a Capacity Block's instances begin to terminate 30 minutes before its end
("Monitor Capacity Blocks using EventBridge": the expiration warning comes forty minutes before the end, the
instances terminate ten minutes later); a block is paid up front for its whole window ("Capacity Blocks for ML",
pricing and billing); instances can only launch into a reservation in its own Availability Zone ("Launch instances
using Capacity Blocks", requirements); a reservation's ``State`` is one of active, expired, cancelled, pending,
failed, scheduled, payment-pending, payment-failed, assessing, delayed, unsupported (EC2 API reference,
CapacityReservation); only ``active`` takes launches.

Pure: the standard library and the spec model only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from benchctl.spec.deployment import PoolCapacity, PoolSpec

ON_DEMAND, RESERVATION, CAPACITY_BLOCK = "on-demand", "reservation", "capacity-block"
# EC2 begins terminating a Capacity Block's instances this long before the block's end (see the module doc)
BLOCK_RECLAIM_S = 1800.0
ACTIVE = "active"


class PlannedEntry(Protocol):
    """What the window check reads of a plan entry (``benchctl.planning.plan.ExperimentPlan``)."""

    @property
    def name(self) -> str: ...
    @property
    def nodes(self) -> dict[str, int]: ...
    @property
    def est_s(self) -> float: ...


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def teardown_margin_s(spec: Any) -> float:
    """How long before a block's end a campaign on it must be done: EC2's reclaim lead (30 min) plus the longest
    the campaign's teardown waits for its pods to go (``timeouts.teardown_s``)."""
    return BLOCK_RECLAIM_S + float(spec.timeouts.teardown_s)


def block_pools(spec: Any, pools: Iterable[str] | None = None) -> list[PoolSpec]:
    """The spec's pools (of ``pools``, default all) bought as a Capacity Block."""
    wanted = None if pools is None else set(pools)
    return [p for p in spec.pools if p.capacity.purchase == CAPACITY_BLOCK and (wanted is None or p.name in wanted)]


def _margin_text(spec: Any) -> str:
    return (f"teardown margin {_minutes(teardown_margin_s(spec))}: EC2 reclaims a block's instances from "
            f"{_minutes(BLOCK_RECLAIM_S)} before its end, plus timeouts.teardown_s {spec.timeouts.teardown_s:g} s")


def window_problems(spec: Any, entries: Sequence[PlannedEntry], start: datetime | None) -> list[str]:
    """Each Capacity Block the plan does not fit, naming both times: the planned end of the last experiment on the
    block with the teardown margin, and the block's end (or the block's start, when the campaign would reach the
    pool before it). ``start``: when the campaign starts (the Plan state's clock); None (``benchctl plan``, which
    is the same for the same spec): only whether the experiments on the block fit its window's length."""
    out: list[str] = []
    margin = teardown_margin_s(spec)
    offsets, t = [], 0.0
    for e in entries:
        offsets.append((t, t + e.est_s))
        t += e.est_s
    for pool in block_pools(spec):
        c = pool.capacity
        assert c.block_start is not None and c.block_end is not None  # the spec's validator requires both
        using = [(e, off) for e, off in zip(entries, offsets, strict=True) if pool.name in e.nodes]
        if not using:
            continue
        first, last = using[0][1][0], using[-1][1][1]
        block = f"pool {pool.name}: Capacity Block {c.reservation_id}"
        if start is None:
            need_s = last - first + margin
            if need_s > c.block_hours * 3600.0:
                out.append(f"{block} lasts {c.block_hours:.2f} h ({_iso(c.block_start)} to {_iso(c.block_end)}); "
                           f"the experiments on it ({', '.join(e.name for e, _ in using)}) are planned for "
                           f"{(last - first) / 3600:.2f} h + {_margin_text(spec)} = {need_s / 3600:.2f} h: they do "
                           "not fit; plan fewer steps or buy a longer block")
            continue
        begins = start.astimezone(UTC) + timedelta(seconds=first)
        ends = start.astimezone(UTC) + timedelta(seconds=last + margin)
        if begins < c.block_start:
            out.append(f"{block} starts {_iso(c.block_start)}, but the campaign would scale the pool at "
                       f"{_iso(begins)} (campaign start {_iso(start)}): its nodes cannot launch before the block "
                       "starts; start the campaign at or after the block's start")
        if ends > c.block_end:
            out.append(f"{block} ends {_iso(c.block_end)}; the campaign's planned end on it with its "
                       f"{_margin_text(spec)} is {_iso(ends)} (campaign start {_iso(start)}, planned "
                       f"{last / 3600:.2f} h to the end of {using[-1][0].name}): it does not fit; plan fewer steps, "
                       "start earlier in the block or buy a longer one")
    return out


def block_deadline(spec: Any, pools: Iterable[str]) -> tuple[datetime, str] | None:
    """The earliest time by which the campaign must be done on ``pools`` (the blocks' ends less the teardown
    margin) and what sets it; None: no pool of ``pools`` is on a Capacity Block."""
    found = [(p.capacity.block_end - timedelta(seconds=teardown_margin_s(spec)), p) for p in block_pools(spec, pools)
             if p.capacity.block_end is not None]
    if not found:
        return None
    at, pool = min(found, key=lambda x: x[0])
    return at, (f"pool {pool.name}'s Capacity Block {pool.capacity.reservation_id} ends "
                f"{_iso(pool.capacity.block_end or at)}, less the {_margin_text(spec)}: done by {_iso(at)}")


# ------------------------------------------------------------------------------------------ prices


def capacity_price(capacity: PoolCapacity, on_demand: float | None) -> float | None:
    """$/instance-hour the user pays for one node: ``usd_per_node_hour`` for a reservation or block where given;
    else the on-demand price (an ODCR bills at the On-Demand rate whether used or not: EC2 user guide, "Capacity
    Reservation pricing and billing"); None when neither is known."""
    if capacity.purchase != ON_DEMAND and capacity.usd_per_node_hour is not None:
        return float(capacity.usd_per_node_hour)
    return on_demand


def instance_price(spec: Any, pool: PoolSpec) -> float | None:
    """What one node's instance costs per hour as bought: :func:`capacity_price` over the spec's on-demand price."""
    listed = spec.pricing.instances.get(pool.instance_type)
    return capacity_price(pool.capacity, None if listed is None else float(listed.usd_per_hour))


def block_nodes(pool: str, node_counts: Iterable[Mapping[str, int]]) -> int:
    """The nodes a Capacity Block must hold for the plan: the most any plan entry asks of ``pool`` at once (the
    block's own count is EC2's; this is the least it can be)."""
    return max((n.get(pool, 0) for n in node_counts), default=0)


def block_cost(spec: Any, pool: PoolSpec, nodes: int) -> float | None:
    """A Capacity Block's upfront price for ``nodes`` nodes over its whole window (None: unpriced)."""
    price = instance_price(spec, pool)
    return None if price is None else nodes * pool.capacity.block_hours * price


def block_idle_usd(spec: Any, entries: Sequence[Any]) -> dict[str, float]:
    """Pool -> the planned idle part of its Capacity Block: the block's whole window (paid up front) less the
    instance-hours the plan uses of it (``est_node_hours``), never below 0; 0 where unpriced."""
    out = {}
    for pool in block_pools(spec):
        nodes = block_nodes(pool.name, (e.nodes for e in entries))
        total = block_cost(spec, pool, nodes)
        price = instance_price(spec, pool)
        if not nodes or total is None or price is None:
            continue
        used = sum(float(e.est_node_hours.get(pool.name, 0.0)) for e in entries) * price
        out[pool.name] = max(0.0, total - used)
    return out


def purchase_text(pool: PoolSpec) -> str:
    """One line of how a pool's GPUs were bought, for the report and the plan."""
    c = pool.capacity
    zone = f" in {c.zone}" if c.zone else ""
    price = f", ${c.usd_per_node_hour:g}/node-h" if c.usd_per_node_hour is not None else ""
    if c.purchase == CAPACITY_BLOCK:
        return (f"{pool.name}: Capacity Block {c.reservation_id}{zone}, {_iso(c.block_start or datetime.min)} to "
                f"{_iso(c.block_end or datetime.min)} ({c.block_hours:.1f} h paid up front{price})")
    if c.purchase == RESERVATION:
        return f"{pool.name}: On-Demand Capacity Reservation {c.reservation_id} (targeted){zone}{price}"
    return f"{pool.name}: On-Demand{zone}"


# ------------------------------------------------------------------------------------------ EC2's answers judged


@dataclass(frozen=True)
class PoolZone:
    """Where a pool's nodes launch: ``zones`` (the spec's ``capacity.zone``, else its node group's subnets') and
    how that was found."""

    pool: str
    instance_type: str
    zones: tuple[str, ...]
    source: str


def offering_problem(where: PoolZone, offered: Iterable[str]) -> str | None:
    """None when EC2 offers the pool's type in each of its zones; else the zones without it and those that have it
    (``offered``: every zone of the Region where DescribeInstanceTypeOfferings lists the type)."""
    have = sorted(set(offered))
    missing = [z for z in where.zones if z not in have]
    if not missing:
        return None
    return (f"pool {where.pool}: {where.instance_type} is not offered in {', '.join(missing)} ({where.source}); "
            f"zones of this Region that offer it: {', '.join(have) if have else 'none'} "
            "(ec2:DescribeInstanceTypeOfferings); put the pool's node group in one of them (CDK context "
            "benchctl:gpu_capacity zone or subnet_id) or set pools[].capacity.zone")


def reservation_problems(pool: PoolSpec, found: Mapping[str, Any] | None, nodes: int,
                         zones: Sequence[str] = ()) -> list[str]:
    """What keeps the pool's reservation or block (a DescribeCapacityReservations item, None: not found) from giving
    it ``nodes`` nodes: its state, instance type, zone (the spec's, else ``zones``, the node group's) and free
    count."""
    c = pool.capacity
    what = f"pool {pool.name}: {'Capacity Block' if c.purchase == CAPACITY_BLOCK else 'Capacity Reservation'} " \
           f"{c.reservation_id}"
    if found is None:
        return [f"{what} not found in this account and Region (ec2:DescribeCapacityReservations); check "
                "pools[].capacity.reservation_id and the Region"]
    out = []
    state = str(found.get("State"))
    if state != ACTIVE:
        when = (f"; it starts {found.get('StartDate')}" if state == "scheduled" and found.get("StartDate") else "")
        out.append(f"{what} is {state}, not {ACTIVE}: EC2 launches no instance into it now{when}")
    if found.get("InstanceType") != pool.instance_type:
        out.append(f"{what} holds {found.get('InstanceType')}, but the pool's instance_type is {pool.instance_type}")
    zone = str(found.get("AvailabilityZone"))
    want = [c.zone] if c.zone else list(zones)
    if want and any(z != zone for z in want):
        out.append(f"{what} is in {zone}, but the pool's nodes launch in {', '.join(want)}: instances launch into "
                   "a reservation only in its own zone; set pools[].capacity.zone and the node group's zone to "
                   f"{zone}")
    free = int(found.get("AvailableInstanceCount") or 0)
    if free < nodes:
        total = found.get("TotalInstanceCount")
        out.append(f"{what} has {free} of {total} instances free; the plan needs {nodes} of it at once")
    return out
