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

    report = aws_sweep(dry_run=bool((event or {}).get("dry_run")))
    swept = [r for r in report if r.get("action") == "swept"]
    for r in swept:
        logger.warning("swept a campaign its execution left behind", extra={"sweep": r})
    if swept:
        emit_metric("CampaignsSwept", "Sweeper", "aws")
    return {"campaigns": len(report), "swept": [r["campaign_id"] for r in swept]}
