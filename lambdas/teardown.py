"""Teardown: an experiment's normal end, its failure path, the campaign abort, a failed Plan's record, and the
first state of the stopped-campaign state machine (``stopped``: which campaign a stopped execution's event names,
and whether anything is left to tear down, the event verified against Step Functions first) and its second abort pass (``stopped_again``), both
``benchctl.campaign.stopped``.

Each returns ``done``: False while a deleted deployment is still going away; the state machine waits and
calls again, so no handler ever sleeps."""

import os
from typing import Any

from benchctl import campaign
from lambdas._runtime import current_engine, logger, run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    if (event or {}).get("action") == "stopped":  # no campaign context yet: the event names the execution
        from benchctl.aws.executions import stop_verifier_from_env
        from benchctl.campaign.stopped import resolve_stopped

        out = resolve_stopped(current_engine(), event.get("event"), str(event.get("claimant") or ""),
                              verifier=stop_verifier_from_env(os.environ))
        logger.warning("a stop event was refused: nothing torn down" if out.get("refused") else
                       "a campaign's execution was stopped from outside", extra={"stopped": out})
        return out
    from benchctl.campaign.stopped import ABORT_AGAIN

    return run(event, {"experiment": campaign.TEARDOWN_EXPERIMENT, "experiment_failed": campaign.TEARDOWN_AFTER_FAILURE,
                       "campaign": campaign.ABORT_CAMPAIGN, "plan_failed": campaign.RECORD_PLAN_FAILURE,
                       "stopped_again": ABORT_AGAIN})
