"""Serving: deploy Dynamo for the experiment, check readiness, start and check its smoke test."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(
        event,
        {
            "deploy": lambda p, ctx, ev: campaign.deploy(p, ctx, ev["experiment"]),
            "check": lambda p, ctx, ev: campaign.check_ready(p, ctx, ev["experiment"]),
            "smoke": lambda p, ctx, ev: campaign.smoke(p, ctx, ev["experiment"]),
            "check_smoke": lambda p, ctx, ev: campaign.check_smoke(p, ctx, ev["experiment"]),
        },
    )
