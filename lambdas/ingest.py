"""Ingest: turn one step's kept raw AIPerf artifacts into lake rows (atomic, idempotent)."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(event, {"ingest": campaign.INGEST_STEP})
