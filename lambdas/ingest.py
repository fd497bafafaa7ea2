"""Ingest: turn one step's kept raw AIPerf artifacts into lake rows (atomic, idempotent): the previous step
while the next one loads, an experiment's last step, or, on a failed step's path, the completed steps not yet
ingested."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"ingest_previous": campaign.INGEST_PREVIOUS_STEP, "ingest_last": campaign.INGEST_LAST_STEP,
                       "ingest_after_failure": campaign.INGEST_AFTER_FAILURE})
