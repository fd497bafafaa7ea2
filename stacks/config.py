"""Deployment configuration from CDK context (``cdk.json``, or ``-c key=value``), checked before synth.

Every key is ``benchctl:<name>``. A missing required key or a malformed value raises
:class:`ConfigError` naming the key, what is wrong and how to pass it, so ``cdk synth`` stops with
that message instead of producing a template that fails at deploy time or, worse, at 3 a.m. when
the schedule fires.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from constructs import Node

PREFIX = "benchctl:"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}$")
_CLUSTER = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
_LAYER = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$")
# EventBridge Scheduler: cron(min hour day-of-month month day-of-week year) | rate(N unit) | at(yyyy-mm-ddThh:mm:ss)
_CRON = re.compile(r"^cron\((\S+ ){5}\S+\)$")
_RATE = re.compile(r"^rate\([1-9]\d* (minute|minutes|hour|hours|day|days)\)$")
_AT = re.compile(r"^at\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\)$")
_SPEC_KEY = re.compile(r"^specs/[A-Za-z0-9._/-]+\.(yaml|yml|json)$")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Schedule:
    expression: str
    spec_key: str  # object key in the results bucket, under specs/
    timezone: str = "UTC"
    poll_seconds: int = 30


@dataclass(frozen=True)
class Config:
    env_name: str
    cluster_name: str
    powertools_layer_arn: str
    sdk_pandas_layer_arn: str
    nodegroups: tuple[str, ...] = ()
    schedule: Schedule | None = None
    notify_email: str | None = None
    athena_bytes_scanned_cutoff: int = 10 * 1024**3
    raw_archive_days: int = 90
    namespace: str = "dynamo-bench"
    sweep_schedule: str = "rate(1 hour)"
    load_service_account: str = "benchctl-load"
    extra: dict[str, Any] = field(default_factory=dict)


def _how(key: str, example: str) -> str:
    return f"set it in cdk.json under \"context\" or pass -c {PREFIX}{key}={example}"


def _required(node: Node, key: str, pattern: re.Pattern[str], what: str, example: str) -> str:
    value = node.try_get_context(PREFIX + key)
    if value in (None, ""):
        raise ConfigError(f"missing CDK context '{PREFIX}{key}' ({what}): {_how(key, example)}")
    if not isinstance(value, str) or not pattern.match(value):
        raise ConfigError(f"CDK context '{PREFIX}{key}': {value!r} is not {what} (e.g. {example})")
    return value


def _json_context(node: Node, key: str) -> Any:
    value = node.try_get_context(PREFIX + key)
    if isinstance(value, str) and value[:1] in "[{":  # -c passes strings; accept JSON there
        try:
            return json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"CDK context '{PREFIX}{key}': not valid JSON ({e.msg})") from None
    return value


def _schedule(node: Node) -> Schedule | None:
    raw = _json_context(node, "schedule")
    if raw in (None, "", False):
        return None
    key = PREFIX + "schedule"
    if not isinstance(raw, dict):
        raise ConfigError(f"CDK context '{key}': expected an object "
                          '{"expression": "cron(0 3 ? * SUN *)", "spec_key": "specs/seed-plan.yaml"}')
    unknown = sorted(set(raw) - {"expression", "spec_key", "timezone", "poll_seconds"})
    if unknown:
        raise ConfigError(f"CDK context '{key}': unknown field(s) {unknown}; valid: expression, spec_key, "
                          "timezone, poll_seconds")
    expr = raw.get("expression")
    if not isinstance(expr, str) or not (_CRON.match(expr) or _RATE.match(expr) or _AT.match(expr)):
        raise ConfigError(
            f"CDK context '{key}.expression': {expr!r} is not an EventBridge Scheduler expression; "
            "valid: cron(min hour day-of-month month day-of-week year), rate(N minutes|hours|days), "
            "at(yyyy-mm-ddThh:mm:ss)"
        )
    spec_key = raw.get("spec_key")
    if not isinstance(spec_key, str) or not _SPEC_KEY.match(spec_key):
        raise ConfigError(f"CDK context '{key}.spec_key': {spec_key!r} is not the key of a campaign spec in the "
                          "results bucket (specs/<name>.yaml|.json; upload it with `benchctl start --upload-only`)")
    poll = raw.get("poll_seconds", 30)
    if not isinstance(poll, int) or isinstance(poll, bool) or not 1 <= poll <= 3600:
        raise ConfigError(f"CDK context '{key}.poll_seconds': {poll!r} must be an integer 1..3600")
    tz = raw.get("timezone", "UTC")
    if not isinstance(tz, str) or not re.match(r"^[A-Za-z_]+(/[A-Za-z0-9_+-]+)*$", tz):
        raise ConfigError(f"CDK context '{key}.timezone': {tz!r} is not an IANA time zone name (e.g. UTC)")
    return Schedule(expression=expr, spec_key=spec_key, timezone=tz, poll_seconds=poll)


def load(node: Node) -> Config:
    env_name = node.try_get_context(PREFIX + "env_name") or "dev"
    if not isinstance(env_name, str) or not _NAME.match(env_name):
        raise ConfigError(f"CDK context '{PREFIX}env_name': {env_name!r} must be lowercase letters, digits, '-'")
    nodegroups = _json_context(node, "nodegroups") or []
    if not isinstance(nodegroups, list) or not all(isinstance(n, str) and _CLUSTER.match(n) for n in nodegroups):
        raise ConfigError(f"CDK context '{PREFIX}nodegroups': expected a list of EKS node group names, "
                          f"got {nodegroups!r}")
    cutoff = node.try_get_context(PREFIX + "athena_bytes_scanned_cutoff") or 10 * 1024**3
    if not isinstance(cutoff, int) or cutoff < 10 * 1024**2:
        raise ConfigError(f"CDK context '{PREFIX}athena_bytes_scanned_cutoff': {cutoff!r} must be an integer "
                          ">= 10485760 (Athena's minimum, 10 MB)")
    archive = node.try_get_context(PREFIX + "raw_archive_days") or 90
    if not isinstance(archive, int) or archive < 1:
        raise ConfigError(f"CDK context '{PREFIX}raw_archive_days': {archive!r} must be a positive integer")
    email = node.try_get_context(PREFIX + "notify_email") or None
    if email is not None and (not isinstance(email, str) or "@" not in email):
        raise ConfigError(f"CDK context '{PREFIX}notify_email': {email!r} is not an e-mail address")
    namespace = node.try_get_context(PREFIX + "namespace") or "dynamo-bench"
    account = node.try_get_context(PREFIX + "load_service_account") or "benchctl-load"
    for key, value in (("namespace", namespace), ("load_service_account", account)):
        if not isinstance(value, str) or not re.match(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", value):
            raise ConfigError(f"CDK context '{PREFIX}{key}': {value!r} is not a Kubernetes name (DNS-1123 label)")
    sweep = node.try_get_context(PREFIX + "sweep_schedule") or "rate(1 hour)"
    if not isinstance(sweep, str) or not (_CRON.match(sweep) or _RATE.match(sweep)):
        raise ConfigError(f"CDK context '{PREFIX}sweep_schedule': {sweep!r} is not cron(...) or rate(N unit)")
    return Config(
        sweep_schedule=sweep,
        namespace=namespace,
        load_service_account=account,
        env_name=env_name,
        cluster_name=_required(node, "cluster_name", _CLUSTER, "an EKS cluster name", "dynamo-bench"),
        powertools_layer_arn=_required(
            node, "powertools_layer_arn", _LAYER, "a Lambda layer version ARN",
            "arn:aws:lambda:us-east-1:017000801446:layer:AWSLambdaPowertoolsPythonV3-python311-x86_64:7"),
        sdk_pandas_layer_arn=_required(
            node, "sdk_pandas_layer_arn", _LAYER, "a Lambda layer version ARN (AWS SDK for pandas)",
            "arn:aws:lambda:us-east-1:336392948345:layer:AWSSDKPandas-Python311:20"),
        nodegroups=tuple(nodegroups),
        schedule=_schedule(node),
        notify_email=email,
        athena_bytes_scanned_cutoff=cutoff,
        raw_archive_days=archive,
    )
