"""Serving: deploy Dynamo for the experiment, check readiness, start and check its smoke test."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"deploy": campaign.DEPLOY, "check": campaign.CHECK_READY, "smoke": campaign.SMOKE_TEST,
                       "check_smoke": campaign.CHECK_SMOKE})
