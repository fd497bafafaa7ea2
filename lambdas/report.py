"""Report: compute this campaign's comparison views and write them, and its report, next to the results."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"report": campaign.REPORT})
