"""What one node of a pool costs per hour, all in: the instance's on-demand price, its root EBS volume and, on
EKS Auto Mode, the management fee per instance; and the cost scope every ``costs`` row carries, each item
priced or named excluded with why. The plan's estimate, the running spend and the ``costs`` rows all price
a node-hour here.

Pure: the spec model only.
"""

from __future__ import annotations

from typing import Any

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
    listed = spec.pricing.instances.get(pool.instance_type)
    fee: float | None = 0.0
    if pool.provider == "auto-mode":
        fee = spec.pricing.auto_mode_fee_usd_per_hour.get(pool.instance_type)
    return {"instance": None if listed is None else listed.usd_per_hour,
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
    out = [{"item": "GPU and CPU nodes of the experiment's pools", "status": "priced",
            "how": "on-demand instance price of the spec x node-hours (scale request to pool restore)"},
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
        {"item": "NAT gateway, load balancers, support, taxes, discounts", "status": "excluded",
         "why": "not attributable to an experiment (NAT and its traffic are the platform's; no load balancer is "
                "created); list prices only"},
    ]
    return out


def scope_text(items: list[dict[str, str]]) -> str:
    """The scope in one line: what is priced, then each exclusion with why."""
    priced = "; ".join(i["item"] for i in items if i["status"] == "priced")
    excluded = "; ".join(f"{i['item']} ({i['why']})" for i in items if i["status"] != "priced")
    return f"priced: {priced}. not included: {excluded}."
