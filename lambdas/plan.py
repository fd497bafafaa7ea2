"""Plan state: take the spec the execution was started with, expand steps, check the budget, write the run
manifest."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"plan": campaign.PLAN})
