"""What every handler shares: the engine of this process, the task's campaign context, the guard before
each operation, failure recording and the task metrics.

The engine is set once per process: the local engine installs its own with ``use_engine``; on AWS
``benchctl.aws.providers.engine_from_env`` builds it from the function's environment (``LambdaEnv``).
The campaign context is the event's ``ctx``, or, for the entry states, built from the execution input
(``benchctl.campaign.context``): the runtime knows no action, each handler maps its actions to operations.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger

from benchctl import campaign
from benchctl.aws.selftest import SELF_TEST
from benchctl.campaign import Operation, Task
from benchctl.campaign.context import context_of
from benchctl.campaign.ports import CallbackPort, Engine
from benchctl.constants import SERVICE
from benchctl.errors import CampaignIdInUse, NotReadyYet

logger = Logger(service=SERVICE)  # level: POWERTOOLS_LOG_LEVEL (the stack sets it; Powertools reads it)

_engine: Engine | None = None
_callbacks: CallbackPort | None = None


def use_engine(engine: Engine | None) -> None:
    """Install this process's engine (None: the AWS engine, from the environment)."""
    global _engine
    _engine = engine


def use_callbacks(callbacks: CallbackPort | None) -> None:
    """Install who answers this process's task tokens (the local engine's relay; None: nobody, the ASL polls)."""
    global _callbacks
    _callbacks = callbacks


def current_engine() -> Engine:
    if _engine is None:
        from benchctl.aws.providers import engine_from_env  # imported lazily: boto3/Kubernetes adapters

        return engine_from_env(os.environ)
    return _engine


def run(event: dict[str, Any], operations: dict[str, Operation]) -> dict[str, Any]:
    """Dispatch ``event['action']`` to its operation; record the first failure with its state name; re-raise.
    Every function also answers ``benchctl doctor``'s self-test (``benchctl.aws.selftest``)."""
    if event.get("action") == SELF_TEST:  # the deployed function's own imports, layers and identity
        from benchctl.aws.selftest import self_test

        return self_test(event, os.environ)
    task = Task.parse(event)
    op = operations.get(task.action)
    if op is None:
        raise ValueError(f"event field 'action': {task.action!r} is not one of {sorted(operations)}")
    engine = current_engine()
    try:
        ctx = context_of(event, runs_uri=engine.runs_uri, lake_uri=engine.lake_uri)
    except ValueError:
        if op.without_context is None:
            raise
        return op.without_context(task)  # an entry state of an input too broken to record anything in
    p = engine.providers(ctx)
    if _callbacks is not None:
        p.callbacks = _callbacks
    logger.append_keys(campaign_id=ctx.campaign_id, state=task.state)
    try:
        if op.claims:  # an entry state: the campaign id must be this execution's before anything is read
            campaign.claim(p, ctx, task)
        campaign.guard(p, task.state, ctx.fail_at, cleanup=op.cleanup)
        result = op.run(p, ctx, task)
    except Exception as exc:
        if not isinstance(exc, CampaignIdInUse):  # another execution's campaign: not even its failure record
            campaign.record_failure(p, task.state, exc)
        if not isinstance(exc, NotReadyYet):
            logger.warning("task failed", extra={"error": type(exc).__name__, "detail": str(exc)})
            emit_metric("TaskFailed", task.state, p.engine)
        raise
    emit_metric("TaskSucceeded", task.state, p.engine)
    return result


def emit_metric(name: str, state: str | None, engine: str) -> None:
    """One CloudWatch metric (Powertools, embedded metric format on stdout) per task outcome, on AWS only:
    namespace ``benchctl``, dimension ``state``. Alarms on ``TaskFailed``
    need no log parsing."""
    if engine != "aws":
        return
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    metrics = Metrics(namespace=SERVICE, service=SERVICE)
    metrics.add_dimension(name="state", value=state or "unknown")
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()
