"""Teardown: an experiment's normal end, its failure path, and the campaign abort.

Each returns ``done``: False while a deleted deployment is still going away; the state machine waits and
calls again (``wait_gone``), so no handler ever sleeps."""

from typing import Any

from benchctl import campaign
from lambdas._runtime import run


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    return run(
        event,
        {
            "experiment": lambda p, ctx, ev: campaign.teardown_experiment(p, ctx, ev["experiment"], handover=True,
                                                                          wait_gone=True),
            "experiment_failed": lambda p, ctx, ev: campaign.experiment_failed(p, ctx, ev["experiment"], ev.get("error"),
                                                                               wait_gone=True),
            "campaign": lambda p, ctx, ev: campaign.abort_campaign(p, ctx, ev.get("error"), wait_gone=True),
            "plan_failed": lambda p, ctx, ev: campaign.plan_failed(p, ev),
        },
        cleanup=("experiment", "experiment_failed", "campaign", "plan_failed"),
    )
