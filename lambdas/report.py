"""Report: compute this campaign's comparison views and write them, and its report, next to the results; on
every other ending (ReportFailure) the same report of what completed, with how it ended and its teardown receipt."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"report": campaign.REPORT, "report_failure": campaign.REPORT_FAILURE})
