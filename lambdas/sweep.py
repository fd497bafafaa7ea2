"""Sweeper (scheduled, outside the campaign state machine): tear down what ended campaigns left behind."""

from typing import Any

from benchctl.aws.selftest import SELF_TEST
from lambdas._runtime import emit_metric, logger


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    if (event or {}).get("action") == SELF_TEST:  # benchctl doctor: this function's own layers and identity
        import os

        from benchctl.aws.selftest import self_test

        return self_test(event, os.environ)
    from benchctl.aws.sweep import aws_sweep
    from benchctl.campaign.sweep import failed

    report = aws_sweep(dry_run=bool((event or {}).get("dry_run")), watchdog=bool((event or {}).get("watchdog")))
    swept = [r for r in report if r.get("action") == "swept"]
    for r in swept:
        logger.warning("swept a campaign its execution left behind", extra={"sweep": r})
    if swept:
        emit_metric("CampaignsSwept", "Sweeper", "aws")
    broken = failed(report)
    for r in broken:  # every other campaign was swept all the same (benchctl.campaign.sweep.sweep)
        logger.error("could not sweep a campaign", extra={"sweep": r})
    if broken:  # the function's Errors metric: the stack's SweepFailedAlarm
        emit_metric("SweepFailed", "Sweeper", "aws")
        raise SweepIncomplete(f"{len(broken)} of {len(report)} campaigns not swept (the others were): " + "; ".join(
            f"{r['campaign_id']}: {r['error']}: {r['cause']}" for r in broken))
    return {"campaigns": len(report), "swept": [r["campaign_id"] for r in swept]}


class SweepIncomplete(Exception):
    """At least one campaign's sweep raised; the rest were swept. Raised last, so the invocation fails."""
