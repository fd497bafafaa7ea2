"""Deployment configuration from CDK context (``cdk.json``, or ``-c benchctl:<key>=<value>``), checked before synth.

Every key is ``benchctl:<name>`` and must be one of :data:`KEYS`. A missing required key, an unknown
``benchctl:`` key (a typo would otherwise be ignored without a word) or a value out of its range raises
:class:`ConfigError` naming the key, what is wrong and what is valid, so ``cdk synth`` stops with that
message instead of producing a template that fails at deploy time or, worse, at 3 a.m. when the
schedule fires.

Values given with ``-c`` on the CDK command line arrive as strings: numbers, booleans (``true``/
``false``), lists (JSON, or comma-separated names) and objects (JSON) are read from that text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchctl.planning import ceilings as ceiling_rules
from benchctl.planning.ceilings import Ceilings
from stacks import gpu_capacity, layers
from stacks.gpu_capacity import GPU_CAPACITY, GpuCapacity

if TYPE_CHECKING:  # a type only: importing constructs starts its jsii (Node.js) kernel
    from constructs import Node

PREFIX = "benchctl:"
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}\Z")
_CLUSTER = re.compile(r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}\Z")
_LAYER = re.compile(r"^arn:aws[a-z-]*:lambda:([a-z0-9-]+):\d{12}:layer:([A-Za-z0-9_-]+):\d+\Z")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_VPC = re.compile(r"^vpc-[0-9a-f]{8,17}\Z")
_SUBNET = re.compile(r"^subnet-[0-9a-f]{8,17}\Z")
# EventBridge Scheduler: cron(min hour day-of-month month day-of-week year) | rate(N unit) | at(yyyy-mm-ddThh:mm:ss)
_CRON = re.compile(r"^cron\((\S+ ){5}\S+\)\Z")
_RATE = re.compile(r"^rate\([1-9]\d* (minute|minutes|hour|hours|day|days)\)\Z")
_AT = re.compile(r"^at\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\)\Z")
_SPEC_KEY = re.compile(r"^specs/[A-Za-z0-9._/-]+\.(yaml|yml|json)\Z")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+\Z")
# a container image reference with an explicit tag or digest: [registry/]repository(:tag|@sha256:...)
_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9][a-z0-9._/-]*)+(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
                    r"|@sha256:[0-9a-f]{64})\Z")
# a Docker Hub or registry image, tag and/or digest (the load image's base; stacks/images/load/check_base.sh)
_BASE_IMAGE = re.compile(r"^[a-z0-9][a-z0-9._-]*(:[0-9]+)?(/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?"
                         r"(@sha256:[0-9a-f]{64})?\Z")
DEFAULT_LOAD_BASE = "python:3.11-slim-bookworm"  # no digest recorded (docs/FACTS.md): the build refuses it alone

PLATFORMS = ("none", "new", "existing")
CAPACITIES = ("nodegroups", "auto-mode")
# vCPUs and GiB of the CPU node group's instance types (EC2 instance type pages): a load Job asks 8 vCPU and
# 16 GiB (spec kubernetes.load_cpu/load_memory defaults), so 8-vCPU types cannot hold one beside the system pods
CPU_INSTANCE_TYPES: dict[str, tuple[int, int]] = {
    "m7i.4xlarge": (16, 64), "m7i.8xlarge": (32, 128), "m6i.4xlarge": (16, 64), "m6i.8xlarge": (32, 128),
    "c7i.4xlarge": (16, 32), "r7i.4xlarge": (16, 128)}
# what the platform installs, by piece (platform_skip names the ones an existing cluster has)
# (the EKS add-ons and charts of stacks/platform_values.py by their own names, and two of ours)
PLATFORM_PIECES = ("eks-pod-identity-agent", "aws-efs-csi-driver", "nvidia-device-plugin", "aws-efa-k8s-device-plugin",
                   "kube-prometheus-stack", "dcgm-exporter", "dynamo-platform", "model-storage", "rbac")
DEFAULT_PLATFORM_SPEC = "examples/seed-plan.yaml"
_SPEC_PATH = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*\.(yaml|yml|json)\Z")
DEFAULT_GPU_INSTANCE_TYPES = {"gpu-p4d": "p4d.24xlarge", "gpu-g6e": "g6e.12xlarge"}
_INSTANCE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+\Z")
_SG = re.compile(r"^sg-[0-9a-f]{8,17}\Z")
# every key benchctl reads, with what it takes (the text of an error names it)
KEYS: dict[str, str] = {
    "env_name": "lowercase letters, digits and '-', 1..31 characters (default dev)",
    "cluster_name": "the EKS cluster's name (required)",
    "nodegroups": "a list of EKS managed node group names the functions may scale (default none)",
    "namespace": "a Kubernetes namespace name (default dynamo-bench)",
    "sweep_schedule": "cron(...) or rate(N minutes|hours|days) (default rate(1 hour))",
    "powertools_layer_arn": "a Powertools v3 python3.13 x86_64 layer version ARN of the deploy Region "
                            "(default: resolved per Region, stacks/layers.py)",
    "sdk_pandas_layer_arn": "an AWS SDK for pandas Python313 layer version ARN of the deploy Region "
                            "(default: resolved per Region, stacks/layers.py)",
    "athena_bytes_scanned_cutoff": "an integer 10485760..1099511627776 bytes (10 MB .. 1 TB; default 10 GB)",
    "raw_archive_days": "an integer 1..36500 (days before raw artifacts move to Glacier IR; default 90)",
    "schedule": 'null, or {"expression": "cron(...)", "spec_key": "specs/x.yaml", "timezone": "UTC", '
                '"poll_seconds": 30}',
    "notify_email": "null, or an e-mail address to subscribe to the status topic",
    "create_access_entries": "true or false: the stack creates the EKS access entries of the functions "
                             "that call Kubernetes (default true; the cluster's authentication mode must "
                             "be API or API_AND_CONFIG_MAP)",
    "vpc_id": "null, or the VPC (vpc-...) to run the functions that call Kubernetes in (with subnet_ids)",
    "subnet_ids": "a list of private subnets (subnet-...) of vpc_id, for those functions (with vpc_id)",
    "ceilings": "an object of the deployment's ceilings on every spec (benchctl.planning.ceilings.KEYS: image_repositories, "
                "require_image_digest, instance_types with list prices, max_nodes_per_pool, max_usd_per_campaign, "
                "max_timeouts_s, max_history_events, history_poll_seconds); absent keys take the defaults",
    "load_image": "null (default: the stack builds stacks/images/load with Docker at deploy), or a prebuilt "
                  "image holding aiperf 0.13.0, with a tag or digest "
                  "(e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/benchctl-load:0.13.0): no Docker needed",
    "load_base_image": "the base image the stack builds stacks/images/load on, pinned by digest "
                       "(e.g. python:3.11-slim-bookworm@sha256:<64 hex>; default python:3.11-slim-bookworm, "
                       "which the build refuses unless load_base_image_tag_ok is true)",
    "load_base_image_tag_ok": "true or false: build the load image on a base named by tag alone (default false)",
    # the optional platform stack (stacks/platform.py; docs/howto/aws-empty-account.md)
    "platform": "none (default: no platform stack; the cluster exists and is set up by hand), new (a new VPC or the "
                "given vpc_id/subnet_ids, an EKS cluster named cluster_name and everything the campaign needs), or "
                "existing (the cluster cluster_name exists: install only what platform_skip does not name)",
    "platform_capacity": "nodegroups (default: managed node groups named by nodegroups, sized 0, plus a CPU node group) "
                         "or auto-mode (EKS Auto Mode: nodes come from NodePools; platform=new only)",
    "gpu_instance_types": "an object naming each of nodegroups' instance type, every one listed in "
                          "ceilings.instance_types (default {\"gpu-p4d\": \"p4d.24xlarge\", \"gpu-g6e\": \"g6e.12xlarge\"})",
    "cpu_instance_type": "the CPU node group's instance type, big enough for a load Job (kubernetes.load_cpu 8, "
                         "load_memory 16Gi) beside the platform's pods: one of " + ", ".join(CPU_INSTANCE_TYPES)
                         + " (default m7i.4xlarge)",
    "model_fs_removal": "retain (default: cdk destroy keeps the model file system and its weights; it keeps billing) "
                        "or destroy (cdk destroy deletes it with its data)",
    "platform_skip": "a list of what an existing cluster already has, not to install: " + ", ".join(PLATFORM_PIECES)
                     + " (platform=existing only; default none)",
    "platform_spec": "the campaign spec the platform is installed for, a path in this repository (default "
                     "examples/seed-plan.yaml): its model is downloaded at its revision, its namespace, token secret "
                     "and model claim are created, its node-group pools must be the platform's",
    "cluster_security_group_id": "null, or the existing cluster's security group (sg-...), admitted to the model "
                                 "file system's NFS port (platform=existing with model-storage)",
    "gpu_capacity": GPU_CAPACITY,
}


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
    powertools_layer_arn: str | None = None  # None: resolved per Region (stacks/layers.py)
    sdk_pandas_layer_arn: str | None = None
    nodegroups: tuple[str, ...] = ()
    schedule: Schedule | None = None
    notify_email: str | None = None
    athena_bytes_scanned_cutoff: int = 10 * 1024**3
    raw_archive_days: int = 90
    namespace: str = "dynamo-bench"
    sweep_schedule: str = "rate(1 hour)"
    create_access_entries: bool = True
    vpc_id: str | None = None
    subnet_ids: tuple[str, ...] = ()
    load_image: str | None = None
    ceilings: Ceilings = field(default_factory=ceiling_rules.default)
    load_base_image: str = DEFAULT_LOAD_BASE
    load_base_image_tag_ok: bool = False
    platform: str = "none"
    platform_capacity: str = "nodegroups"
    gpu_instance_types: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_GPU_INSTANCE_TYPES))
    cpu_instance_type: str = "m7i.4xlarge"
    model_fs_removal: str = "retain"
    platform_skip: tuple[str, ...] = ()
    cluster_security_group_id: str | None = None
    platform_spec: str = DEFAULT_PLATFORM_SPEC
    gpu_capacity: dict[str, GpuCapacity] = field(default_factory=dict)  # benchctl:gpu_capacity
    platform_provenance: str = ""  # the platform stack's monitoring (scrape interval, dashboards' hash): JSON
    extra: dict[str, Any] = field(default_factory=dict)


def _how(key: str, example: str) -> str:
    return f"set it in cdk.json under \"context\" or pass -c {PREFIX}{key}={example}"


def _bad(key: str, value: Any) -> ConfigError:
    return ConfigError(f"CDK context '{PREFIX}{key}': {value!r} is not valid; valid: {KEYS[key]}")


class _Context:
    """The ``benchctl:`` keys of the app's context, read once, typed from the text ``-c`` gives."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = {k.removeprefix(PREFIX): v for k, v in values.items() if k.startswith(PREFIX)}
        unknown = sorted(set(self.values) - set(KEYS))
        if unknown:
            raise ConfigError(f"unknown CDK context key(s) {[PREFIX + k for k in unknown]}; valid keys: "
                              f"{', '.join(PREFIX + k for k in KEYS)}")

    def get(self, key: str) -> Any:
        value = self.values.get(key)
        return None if value in (None, "", "null") else value

    def text(self, key: str, default: str | None, pattern: re.Pattern[str]) -> str | None:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or not pattern.match(value):
            raise _bad(key, value)
        return value

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _bad(key, value)
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise _bad(key, value)
        return value

    def json(self, key: str) -> Any:
        value = self.get(key)
        if isinstance(value, str) and value[:1] in "[{":  # -c passes strings; accept JSON there
            try:
                return json.loads(value)
            except json.JSONDecodeError as e:
                raise ConfigError(f"CDK context '{PREFIX}{key}': not valid JSON ({e.msg}); valid: {KEYS[key]}") from None
        return value

    def choice(self, key: str, valid: tuple[str, ...] | dict[str, Any], default: str) -> str:
        value = self.get(key)
        if value is None:
            return default
        if value not in valid:
            raise _bad(key, value)
        return str(value)

    def names(self, key: str, pattern: re.Pattern[str]) -> tuple[str, ...]:
        value = self.json(key)
        if value is None:
            return ()
        if isinstance(value, str):  # -c benchctl:nodegroups=a,b
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(n, str) and pattern.match(n) for n in value):
            raise _bad(key, value)
        if len(set(value)) != len(value):
            raise ConfigError(f"CDK context '{PREFIX}{key}': {value!r} names one twice; valid: {KEYS[key]}")
        return tuple(value)


def _schedule(ctx: _Context) -> Schedule | None:
    raw = ctx.json("schedule")
    if raw in (None, False, "false"):
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
    if not isinstance(tz, str) or not re.match(r"^[A-Za-z_]+(/[A-Za-z0-9_+-]+)*\Z", tz):
        raise ConfigError(f"CDK context '{key}.timezone': {tz!r} is not an IANA time zone name (e.g. UTC)")
    return Schedule(expression=expr, spec_key=spec_key, timezone=tz, poll_seconds=poll)


def _layer(ctx: _Context, key: str, name_part: str) -> str | None:
    arn = ctx.text(key, None, _LAYER)
    if arn is not None:
        name = _LAYER.match(arn).group(2)  # type: ignore[union-attr]
        if name_part.lower() not in name.lower():
            raise ConfigError(f"CDK context '{PREFIX}{key}': {arn!r} is not a layer for the functions' runtime "
                              f"python3.13 x86_64 (its name should contain {name_part!r}); valid: {KEYS[key]}")
        bad = layers.known_bad_sdk_pandas(arn)
        if bad is not None:
            raise ConfigError(f"CDK context '{PREFIX}{key}': {arn!r} is a known-bad layer: {bad}; valid: {KEYS[key]}, "
                              f"e.g. the pinned {layers.SDK_PANDAS_VERSION} (stacks/layers.py)")
    return arn


def _ceilings(ctx: _Context) -> Ceilings:
    """The deployment's ceilings (``benchctl.planning.ceilings``), recorded in the template on the Plan and Pools functions."""
    try:
        return ceiling_rules.parse(ctx.json("ceilings"), f"CDK context '{PREFIX}ceilings'")
    except ceiling_rules.CeilingsError as err:
        raise ConfigError(str(err)) from None


def _gpu_capacity(ctx: _Context, platform: str, capacity: str, nodegroups: tuple[str, ...], vpc_id: str | None,
                  subnets: tuple[str, ...]) -> dict[str, GpuCapacity]:
    """``benchctl:gpu_capacity`` (``stacks.gpu_capacity``), each entry checked against the platform it shapes."""
    try:
        return gpu_capacity.parse(ctx.json("gpu_capacity"), platform=platform, capacity=capacity, nodegroups=nodegroups,
                                  vpc_id=vpc_id, subnets=subnets)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _platform(ctx: _Context, cluster: str, vpc_id: str | None, subnets: tuple[str, ...]) -> dict[str, Any]:
    """The platform stack's keys, checked together: they only mean something with platform new or existing."""
    platform = ctx.choice("platform", PLATFORMS, "none")
    capacity = ctx.choice("platform_capacity", CAPACITIES, "nodegroups")
    raw = ctx.json("gpu_instance_types")
    gpu = dict(DEFAULT_GPU_INSTANCE_TYPES) if raw is None else raw
    if not isinstance(gpu, dict) or not all(isinstance(k, str) and _CLUSTER.match(k) and isinstance(v, str)
                                            and _INSTANCE.match(v) for k, v in gpu.items()):
        raise _bad("gpu_instance_types", raw)
    skip = ctx.names("platform_skip", re.compile(r"^[a-z-]+\Z"))
    unknown = sorted(set(skip) - set(PLATFORM_PIECES))
    if unknown:
        raise ConfigError(f"CDK context '{PREFIX}platform_skip': {unknown} not a piece of the platform; valid: "
                          f"{KEYS['platform_skip']}")
    sg = ctx.text("cluster_security_group_id", None, _SG)
    spec_path = ctx.text("platform_spec", DEFAULT_PLATFORM_SPEC, _SPEC_PATH) or DEFAULT_PLATFORM_SPEC
    if ".." in spec_path.split("/"):
        raise _bad("platform_spec", spec_path)
    out = {"platform": platform, "platform_capacity": capacity, "gpu_instance_types": gpu,
           "cpu_instance_type": ctx.choice("cpu_instance_type", CPU_INSTANCE_TYPES, "m7i.4xlarge"),
           "model_fs_removal": ctx.choice("model_fs_removal", ("retain", "destroy"), "retain"),
           "platform_skip": skip, "cluster_security_group_id": sg, "platform_spec": spec_path}
    out["gpu_capacity"] = _gpu_capacity(ctx, platform, capacity, ctx.names("nodegroups", _CLUSTER), vpc_id, subnets)
    if platform == "none":
        return out
    if skip and platform != "existing":
        raise ConfigError(f"CDK context '{PREFIX}platform_skip' is for platform=existing only (platform={platform} "
                          "installs everything on the cluster it creates)")
    if capacity == "auto-mode" and platform != "new":
        raise ConfigError(f"CDK context '{PREFIX}platform_capacity': auto-mode is for platform=new only (an "
                          "existing cluster's capacity is its own)")
    nodegroups = ctx.names("nodegroups", _CLUSTER)
    if platform == "new" and capacity == "nodegroups":
        missing = [n for n in nodegroups if n not in gpu]
        if missing or not nodegroups:
            raise ConfigError(f"CDK context '{PREFIX}gpu_instance_types': no instance type for node group(s) "
                              f"{missing or '(none: benchctl:nodegroups is empty)'} of '{PREFIX}nodegroups'; "
                              f"valid: {KEYS['gpu_instance_types']}")
        priced = ceiling_rules.parse(ctx.json("ceilings"), f"CDK context '{PREFIX}ceilings'").instance_types
        unpriced = sorted({gpu[n] for n in nodegroups} - set(priced))
        if unpriced:
            raise ConfigError(f"CDK context '{PREFIX}gpu_instance_types': {unpriced} not in '{PREFIX}ceilings' "
                              f"instance_types ({sorted(priced)}): Plan would refuse every pool of them")
    if platform == "existing" and "model-storage" not in skip and not (vpc_id and subnets and sg):
        raise ConfigError(f"CDK context platform=existing installs the model storage (an EFS file system) in the "
                          f"cluster's VPC: give '{PREFIX}vpc_id', '{PREFIX}subnet_ids' (the nodes' private subnets) "
                          f"and '{PREFIX}cluster_security_group_id', or name model-storage in '{PREFIX}platform_skip'")
    return out


def load(node: Node, context: Mapping[str, Any] | None = None) -> Config:
    """The configuration from ``context`` (every context value of the app; default: the node's)."""
    ctx = _Context(node.get_all_context() if context is None else context)
    cluster = ctx.text("cluster_name", None, _CLUSTER)
    if cluster is None:
        raise ConfigError(f"missing CDK context '{PREFIX}cluster_name' (an EKS cluster name): "
                          f"{_how('cluster_name', 'dynamo-bench')}")
    email = ctx.text("notify_email", None, _EMAIL)
    sweep = ctx.text("sweep_schedule", "rate(1 hour)", re.compile(f"{_CRON.pattern}|{_RATE.pattern}"))
    vpc_id = ctx.text("vpc_id", None, _VPC)
    subnets = ctx.names("subnet_ids", _SUBNET)
    if bool(vpc_id) != bool(subnets):
        raise ConfigError(f"CDK context '{PREFIX}vpc_id' and '{PREFIX}subnet_ids' go together: give both (the "
                          "VPC and its private subnets that reach the cluster's endpoint) or neither")
    platform = _platform(ctx, cluster, vpc_id, subnets)
    return Config(
        **platform,
        env_name=ctx.text("env_name", "dev", _NAME) or "dev",
        cluster_name=cluster,
        powertools_layer_arn=_layer(ctx, "powertools_layer_arn", "python313-x86_64"),
        sdk_pandas_layer_arn=_layer(ctx, "sdk_pandas_layer_arn", "Python313"),
        nodegroups=ctx.names("nodegroups", _CLUSTER),
        schedule=_schedule(ctx),
        notify_email=email,
        athena_bytes_scanned_cutoff=ctx.integer("athena_bytes_scanned_cutoff", 10 * 1024**3, 10 * 1024**2, 1024**4),
        raw_archive_days=ctx.integer("raw_archive_days", 90, 1, 36500),
        namespace=ctx.text("namespace", "dynamo-bench", _K8S_NAME) or "dynamo-bench",
        sweep_schedule=sweep or "rate(1 hour)",
        create_access_entries=ctx.boolean("create_access_entries", True),
        vpc_id=vpc_id,
        subnet_ids=subnets,
        load_image=ctx.text("load_image", None, _IMAGE),
        ceilings=_ceilings(ctx),
        load_base_image=ctx.text("load_base_image", DEFAULT_LOAD_BASE, _BASE_IMAGE) or DEFAULT_LOAD_BASE,
        load_base_image_tag_ok=ctx.boolean("load_base_image_tag_ok", False),
    )
