"""Teardown: an experiment's normal end, its failure path, the campaign abort, and a failed Plan's record.

Each returns ``done``: False while a deleted deployment is still going away; the state machine waits and
calls again, so no handler ever sleeps."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"experiment": campaign.TEARDOWN_EXPERIMENT, "experiment_failed": campaign.TEARDOWN_AFTER_FAILURE,
                       "campaign": campaign.ABORT_CAMPAIGN, "plan_failed": campaign.RECORD_PLAN_FAILURE})
