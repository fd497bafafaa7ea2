"""What one node of a pool costs per hour, all in: the instance's price as bought (on-demand, or the spec's price of
its reservation or Capacity Block: ``benchctl.planning.capacity``), its root EBS volume and, on
EKS Auto Mode, the management fee per instance; and the cost scope every ``costs`` row carries, each item
priced or named excluded with why. The plan's estimate, the running spend and the ``costs`` rows all price
a node-hour here.

Pure: the spec model only.
"""

from __future__ import annotations

from typing import Any

from benchctl.planning.capacity import CAPACITY_BLOCK, ON_DEMAND, instance_price, purchase_text

HOURS_PER_MONTH = 730.0  # AWS prices storage per GB-month; its calculators take a month as 730 hours
# the root volume a pool's nodes have when the spec does not say (pools[].root_volume_gib): what benchctl's platform
# stack gives them (stacks/platform_nodes.py: GPU 200 GiB, CPU 100 GiB), and EKS Auto Mode's default NodeClass
# (ephemeralStorage 80Gi, EKS user guide "Create a Node Class")
DEFAULT_ROOT_GIB = {"gpu": 200, "cpu": 100, "auto-mode": 80}


def root_volume_gib(pool: Any) -> int:
    if pool.root_volume_gib is not None:
        return int(pool.root_volume_gib)
    if pool.provider == "local":
        return 0
    if pool.provider == "auto-mode":
        return DEFAULT_ROOT_GIB["auto-mode"]
    return DEFAULT_ROOT_GIB["gpu" if pool.gpus_per_node > 0 else "cpu"]


def node_price_parts(spec: Any, pool_name: str) -> dict[str, float | None]:
    """$/node-hour of ``pool_name`` by part: ``instance`` (None: unpriced), ``root_volume``, ``auto_mode_fee``
    (None: an Auto Mode pool whose type has no fee in the spec; 0 elsewhere)."""
    pool = spec.pool(pool_name)
    fee: float | None = 0.0
    if pool.provider == "auto-mode":
        fee = spec.pricing.auto_mode_fee_usd_per_hour.get(pool.instance_type)
    return {"instance": instance_price(spec, pool),  # as bought: a reservation's or block's price where the spec gives it
            "root_volume": root_volume_gib(pool) * spec.pricing.ebs_gp3_usd_per_gb_month / HOURS_PER_MONTH,
            "auto_mode_fee": fee}


def node_price(spec: Any, pool_name: str) -> float | None:
    """All-in $/node-hour (instance + root volume + Auto Mode fee where priced), None when the instance is unpriced.
    An unpriced Auto Mode fee is left out here and named in :func:`scope_items`."""
    parts = node_price_parts(spec, pool_name)
    if parts["instance"] is None:
        return None
    return float(parts["instance"]) + float(parts["root_volume"] or 0.0) + float(parts["auto_mode_fee"] or 0.0)


def scope_items(spec: Any, pools: list[str]) -> list[dict[str, str]]:
    """Each item of the cost scope for these pools: ``priced`` (in ``cost_usd``) or ``excluded``, with how or why."""
    bought = [spec.pool(p) for p in pools if spec.pool(p).capacity.purchase != ON_DEMAND]
    how = "instance price as bought x node-hours (scale request to the pool's restore request)"
    if bought:
        how += "; " + "; ".join(purchase_text(p) for p in bought) + (
            " (a reservation without usd_per_node_hour: the on-demand price, which an ODCR bills at)")
        if any(p.capacity.purchase == CAPACITY_BLOCK for p in bought):
            how += ("; a Capacity Block is paid for its whole window: its idle hours are in the campaign's "
                    "capacity_block_idle_usd, not in an experiment's cost")
    out = [{"item": "GPU and CPU nodes of the experiment's pools", "status": "priced", "how": how},
           {"item": "EKS cluster fee", "status": "priced", "how": "its hourly fee x the experiment's wall time"},
           {"item": "root EBS volumes", "status": "priced",
            "how": f"gp3 at ${spec.pricing.ebs_gp3_usd_per_gb_month:g}/GB-month x each pool's root_volume_gib "
                   f"({', '.join(f'{p} {root_volume_gib(spec.pool(p))} GiB' for p in pools)}) x node-hours"}
           if any(spec.pool(p).provider != "local" for p in pools) else
           {"item": "root EBS volumes", "status": "excluded", "why": "not applicable: local pools (no EBS)"}]
    auto = [p for p in pools if spec.pool(p).provider == "auto-mode"]
    unpriced = [p for p in auto if spec.pricing.auto_mode_fee_usd_per_hour.get(spec.pool(p).instance_type) is None]
    if auto and not unpriced:
        out.append({"item": "EKS Auto Mode management fee", "status": "priced",
                    "how": "pricing.auto_mode_fee_usd_per_hour x node-hours"})
    elif auto:
        out.append({"item": "EKS Auto Mode management fee", "status": "excluded",
                    "why": f"no fee for {sorted({spec.pool(p).instance_type for p in unpriced})} in "
                           "pricing.auto_mode_fee_usd_per_hour (the EKS pricing page lists it per instance type)"})
    else:
        out.append({"item": "EKS Auto Mode management fee", "status": "excluded", "why": "not applicable: no Auto "
                    "Mode pool"})
    out += [
        {"item": "model-cache file system (EFS) and S3 results", "status": "excluded",
         "why": "the platform's, kept between campaigns (docs/howto/aws-empty-account.md prices it per hour); not "
                "a cost of one experiment"},
        {"item": "cross-AZ data transfer", "status": "excluded",
         "why": "prefill -> decode KV transfer stays in one AZ (benchctl's GPU node groups are in one placement "
                "group's AZ); the load Job's requests to the frontend may cross AZs and are not metered here"},
        {"item": "nodes draining after the restore request", "status": "excluded",
         "why": "instances bill until they are terminated, minutes after the scale-in request the allocation ends "
                "at; no event records when the last one went (a Capacity Block's are in its whole-window price)"},
        {"item": "NAT gateway data processing of image pulls", "status": "excluded",
         "why": "attributable (each node boot pulls the Dynamo image, tens of GB, through the platform's NAT "
                "gateway, billed per GB processed) but not measured: the image size per boot is not recorded"},
        {"item": "NAT gateway hours, load balancers, support, taxes, discounts", "status": "excluded",
         "why": "the NAT gateway's hours are the platform's, kept between campaigns; no load balancer is created; "
                "list prices (or the spec's reservation or block price) only"},
    ]
    return out


def scope_text(items: list[dict[str, str]]) -> str:
    """The scope in one line: what is priced, then each exclusion with why."""
    priced = "; ".join(i["item"] for i in items if i["status"] == "priced")
    excluded = "; ".join(f"{i['item']} ({i['why']})" for i in items if i["status"] != "priced")
    return f"priced: {priced}. not included: {excluded}."
