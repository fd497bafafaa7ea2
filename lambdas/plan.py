"""Plan state: validate the stored spec, expand steps, check the budget, write the run manifest."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"plan": lambda p, ctx, ev: campaign.plan(p, ev)})
