"""What every handler shares: the providers of this engine, event parsing, failure recording.

Providers are built once per process: the local engine installs its own with ``use_providers``;
on AWS ``benchctl.aws.providers_from_env`` builds them from the environment (parsed once).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger

from benchctl import campaign
from benchctl.campaign import Ctx, Providers

logger = Logger(service="benchctl", level=os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"))

_providers: Callable[[Ctx], Providers] | None = None


def use_providers(factory: Callable[[Ctx], Providers] | None) -> None:
    """Install the factory that builds this engine's providers for a campaign context."""
    global _providers
    _providers = factory


def providers_for(ctx: Ctx) -> Providers:
    if _providers is None:
        from benchctl.aws import providers_from_env  # imported lazily: boto3/kubernetes adapters

        return providers_from_env(ctx)
    return _providers(ctx)


def run(event: dict[str, Any], actions: dict[str, Callable[..., dict[str, Any]]], *, cleanup: tuple[str, ...] = ()) -> dict[str, Any]:
    """Dispatch ``event['action']``; record the first failure with its state name; re-raise."""
    action = event.get("action")
    if action not in actions:
        raise ValueError(f"event field 'action': {action!r} is not one of {sorted(actions)}")
    state = event.get("state")
    raw_ctx = event.get("ctx") if "ctx" in event else (event.get("input") or {}).get("ctx")
    if raw_ctx is None and action in ("plan", "plan_failed"):  # started from the console, a schedule, `start`
        inp = event.get("input") or {}
        try:
            raw_ctx = campaign.start_ctx(inp, event.get("execution"), dict(os.environ))
        except ValueError:
            if action == "plan":
                raise
            return campaign.plan_failed_without_ctx(event)  # nothing to record it in
        event = {**event, "input": {**inp, "ctx": raw_ctx}}
    ctx = Ctx.parse(raw_ctx)
    p = providers_for(ctx)
    logger.append_keys(campaign_id=ctx.campaign_id, state=state)
    try:
        campaign.guard(p, state, ctx.fail_at, cleanup=action in cleanup)
        result = actions[action](p, ctx, event)
    except Exception as exc:
        campaign.record_failure(p, state, exc)
        if type(exc).__name__ != "NotReadyYet":
            logger.warning("task failed", extra={"error": type(exc).__name__, "detail": str(exc)})
            emit_metric("TaskFailed", state, p.engine)
        raise
    emit_metric("TaskSucceeded", state, p.engine)
    return result


def emit_metric(name: str, state: str | None, engine: str) -> None:
    """One CloudWatch metric (Powertools, embedded metric format on stdout) per task outcome, on AWS only:
    namespace ``benchctl``, dimension ``state``. Alarms on ``TaskFailed`` need no log parsing."""
    if engine != "aws":
        return
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "benchctl"), service="benchctl")
    metrics.add_dimension(name="state", value=state or "unknown")
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()
