"""Pools: scale the experiment's GPU pools (recording prior sizes) and check capacity."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(
        event,
        {
            "scale": lambda p, ctx, ev: campaign.scale_pools(p, ctx, ev["experiment"]),
            "check": lambda p, ctx, ev: campaign.check_capacity(p, ctx, ev["experiment"]),
        },
    )
