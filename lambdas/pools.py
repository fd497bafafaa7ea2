"""Pools: scale the experiment's GPU pools (recording prior sizes) and check capacity."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"scale": campaign.SCALE_POOLS, "check": campaign.CHECK_CAPACITY})
