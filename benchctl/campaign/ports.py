"""Ports: every interface through which the campaign's operations touch the world, and what crosses them.

Each port has a local adapter (``benchctl.local``) and an AWS one (``benchctl.aws``); ``Providers`` is
the set one engine wires in for one campaign, and an ``Engine`` builds it. States a port returns are
plain JSON-able dicts (the port's own: the core only stores them in the run state and hands them back),
so the state machine, or a file in the run directory, carries them between invocations. Requests going
into a port are typed (``DeploymentRequest``, ``LoadRequest``) and hold everything the adapter needs.
Two ports live below their users, so that what only reads or stores need not import this module: the run
store (``benchctl.campaign.store.RunStore``) and the lake's query port (``benchctl.lake.query.QueryPort``).

To add a port: a Protocol here, a field on ``Providers``, an adapter in each engine (a test fake in
``tests/fakes/ports.py``). May import only the standard library (the spec's types for checking only).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from benchctl.campaign.context import Ctx
    from benchctl.campaign.runstate import RunState
    from benchctl.planning.ceilings import Ceilings
    from benchctl.planning.tune import Ranker
    from benchctl.spec.deployment import Experiment, ModelSpec, PoolSpec
    from benchctl.spec.model import CampaignSpec, Kubernetes

JSON = dict[str, Any]


# ------------------------------------------------------------------------------------------ requests


@dataclass(frozen=True)
class WorkerGroupSpec:
    """One group of workers of a deployment: role ``worker`` (aggregated) or ``prefill``/``decode``."""

    role: str
    replicas: int
    tensor_parallel: int = 1
    pool: str = ""


@dataclass(frozen=True)
class DeploymentTarget:
    """What a cluster deployment is rendered from (the AWS engine renders a DynamoGraphDeployment from it,
    as given; the local engine ignores it): the experiment as resolved from the spec, the model (and the weights
    its workers load, when an experiment's checkpoint replaces the model's), the pools its workers run on, and
    the spec's Kubernetes settings."""

    experiment: Experiment
    model: ModelSpec
    pools: tuple[PoolSpec, ...]
    kubernetes: Kubernetes
    # the weights the workers load when not the model's (the experiment's checkpoint; served under model.name)
    weights: ModelSpec | None = None
    # every other weights of the campaign: the model prefetch downloads them too
    checkpoints: tuple[ModelSpec, ...] = ()

    def pool(self, name: str) -> PoolSpec:
        return next(p for p in self.pools if p.name == name)


@dataclass(frozen=True)
class DeploymentRequest:
    """What to serve: everything the serving port needs, and nothing about load."""

    deployment_id: str  # unique per campaign x experiment; names processes/objects
    model_name: str  # served model name, e.g. Qwen/Qwen3-30B-A3B
    mode: str  # aggregated | disaggregated
    router: str  # round-robin | kv
    groups: tuple[WorkerGroupSpec, ...]
    campaign_id: str = ""
    labels: dict[str, str] = field(default_factory=dict)  # campaign/experiment labels
    # Local mocker knobs (ignored on AWS): speedup_ratio, block_size, num_gpu_blocks,
    # kv_transfer_bandwidth, num_host_blocks, ...
    mocker: dict[str, Any] = field(default_factory=dict)
    # KV cache offload (KVBM) settings, e.g. {"cpu_cache_gb": 16}; None = off. Locally the mocker's
    # host block tier (``mocker["num_host_blocks"]``) stands in for it.
    kv_offload: dict[str, Any] | None = None
    target: DeploymentTarget | None = None  # the cluster deployment's source (built by the core; AWS)


@dataclass(frozen=True)
class LoadRequest:
    """One load generator run (a step, or the warm-up): who it belongs to, its arguments, where its
    artifacts go (a directory locally, an S3 prefix on AWS) and the input file it sends, if any."""

    campaign_id: str
    experiment: str
    step_id: str
    argv: tuple[str, ...]
    artifact_uri: str
    input_uri: str | None = None
    est_s: float = 0.0
    # the steps one load runner runs back to back (a workload of the experiment; the warm-up alone), in
    # order, this one among them, and their estimated load seconds together; empty: this step alone
    group: str = ""
    group_steps: tuple[str, ...] = ()
    group_est_s: float = 0.0

    @property
    def job_id(self) -> str:
        return f"{self.experiment}-{self.step_id}"


# -------------------------------------------------------------------------------------------- ports


class IdentityPort(Protocol):
    """The campaign's own identity for its load runners (AWS: a service account and its Pod Identity
    association, ``benchctl.aws.runner_identity``): made before its first runner pod, removed at its end."""

    def ensure(self) -> float:
        """Make it unless there; its age in seconds (a new one may need a few seconds to be effective)."""
    def release(self, service_account: bool = True) -> list[str]:
        """Remove it (idempotent); what was removed. ``service_account`` False: its association only (the
        caller calls no Kubernetes; the inert service account is the sweeper's)."""


class PoolPort(Protocol):
    """GPU pools: scale one to hold ``nodes`` (recording its prior size first), check, restore exactly."""

    provider: str

    def scale(self, pool: str, nodes: int, owner: str, *,
              before_change: Callable[[JSON], None] | None = None) -> JSON:
        """Scale ``pool`` to hold ``nodes``; call ``before_change(record)`` before changing anything."""
    def ready(self, record: JSON) -> bool: ...
    def launches(self, record: JSON) -> None:
        """While the deployment waits for the pool's nodes (CheckReady): raise ``CapacityUnavailable`` when they
        cannot be had (EKS Auto Mode: a NodeClaim that could not launch); nothing when the pool says nothing."""
    def restore(self, record: JSON) -> JSON: ...
    def observe(self, record: JSON) -> JSON:
        """Read the pool back after teardown (the receipt; never changes anything): ``kind``, ``name``,
        ``state`` (restored | gone | still there), ``now``, ``nodes``, ``billing`` (ended | none added |
        "still billing: ..."), ``why``."""


class ServingPort(Protocol):
    def prepare(self, request: DeploymentRequest) -> None:
        """Start what the deployment needs that no GPU node does, before its pools are scaled (on EKS: the
        campaign's model prefetch). Idempotent; nothing to do for an engine without such a thing."""

    def deploy(self, request: DeploymentRequest) -> JSON:
        """Start/apply the deployment; return its state (endpoints, ids). Idempotent per id."""

    def probe_ready(self, state: JSON) -> bool:
        """One non-blocking readiness check. Raises ServingFailed if it can never become ready."""

    def check_alive(self, state: JSON) -> None:
        """Raise ServingFailed naming what died."""

    def versions(self, state: JSON) -> JSON:
        """What the deployment really runs (image digests, ...); {} when there is nothing to say."""

    def metrics_urls(self, state: JSON) -> dict[str, str]:
        """Every metrics endpoint of the deployment now, by source name (frontend, each worker)."""

    def network(self, state: JSON) -> JSON:
        """How the deployment's workers are placed and move KV, as observed (not as configured): CNI,
        zones, MTU, which worker runs where, the KV-transfer backend the workers report using."""

    def teardown(self, state: JSON) -> JSON:
        """Remove everything of this deployment; idempotent; return what was removed."""

    def remaining(self, state: JSON) -> list[str]:
        """What of a torn-down deployment is still going away (never waits); [] when gone."""

    def observe(self, state: JSON, removed: JSON | None) -> list[JSON]:
        """Read back everything the deployment created (the receipt; never changes anything), given what
        ``teardown`` returned: one ``{"kind", "name", "present", "why"}`` per object or process."""


class LoadPort(Protocol):
    def launch(self, request: LoadRequest) -> JSON:
        """Start the load generator for this request; return its state."""

    def poll(self, state: JSON) -> int | None:
        """None while running, else its exit code."""

    def stop(self, state: JSON) -> None:
        """Stop it now (abort path); idempotent."""

    def failure_logs(self, state: JSON) -> JSON:
        """The last log lines of a failed run (kept with its record); {} when there are none."""

    def observe(self, state: JSON) -> JSON:
        """Read the load back (the receipt; never changes anything): ``{"kind", "name", "present", "why"}``."""

    def pending(self, state: JSON) -> str | None:
        """Why the load does not run yet (on EKS: its runner pod waits for a node or its images), which nobody
        reports or heartbeats meanwhile; None once it runs (or ended)."""


class CallbackPort(Protocol):
    """Answers the task tokens of ``.waitForTaskToken`` states (events, not polls): once ``wake()`` names a
    reason (it returns None while there is nothing to look at), the state machine is resumed at once.
    Locally the engine's ``CallbackRelay``; on AWS ``RunnerCallbacks`` (the load runner Job answers); None on
    an engine whose load reports no ends (the ASL polls)."""

    def watch(self, token: str, state: str, key: tuple[str, str], wake: Callable[[], str | None]) -> bool:
        """Watch ``key`` (experiment, step) for the state ``state``; False when ``token`` is already watched."""


class SmokePort(Protocol):
    """A few short requests against a deployment before any load: started by SmokeTest, polled by
    CheckSmoke (locally they run at once and ``poll`` answers at its first call)."""

    def start(self, deployment: JSON, requests: int, max_tokens: int, *, quality: list[JSON] | None = None) -> JSON:
        """Start the smoke requests, then the quality questions (``[{"id", "body"}]``, sent as given)."""
    def poll(self, started: JSON) -> int | None: ...
    def result(self, started: JSON) -> JSON:
        """What the timeline records once it succeeded; with quality questions, their answers under
        ``quality_answers``: ``{id: {"content", "finish_reason"} | {"error"}}``."""
    def failure_logs(self, started: JSON) -> JSON: ...


class LakePort(Protocol):
    def write(self, table: str, rows: list[JSON], *, part_name: str) -> object: ...
    def raw_uri(self, campaign_id: str, experiment: str, step_id: str) -> str:
        """Where a step's raw artifacts go (a directory locally, an S3 prefix on AWS)."""
    def write_raw(self, campaign_id: str, experiment: str, step_id: str, name: str, data: bytes) -> str: ...
    def raw_local(self, campaign_id: str, experiment: str, step_id: str) -> AbstractContextManager[Path]: ...
    def read_table(self, table: str, campaign_id: str | None = None) -> list[JSON]: ...


class ReportPort(Protocol):
    """The campaign's report at its end: the comparison views and the HTML report, where people read them."""

    def write(self, campaign_id: str) -> dict[str, str]:
        """{view or "report": where it was written}."""


class PreflightPort(Protocol):
    def check(self, spec: CampaignSpec) -> list[str]:
        """Every missing prerequisite, by name (may raise NotReadyYet while a check still runs)."""


class Locks(Protocol):
    """One campaign per pool (``benchctl.campaign.locks``)."""

    def acquire(self, keys: list[str], campaign_id: str, ttl_s: float) -> None: ...
    def release(self, keys: list[str], campaign_id: str) -> list[str]: ...


# -------------------------------------------------------------------------------------------- wiring


@dataclass
class Providers:
    """The adapters one engine wires in for one campaign (local processes, or EKS/S3 on AWS)."""

    engine: str  # local | aws
    state: RunState  # the campaign's run state (its spec and plan parsed once per invocation)
    pools: PoolPort
    serving: ServingPort
    load: LoadPort
    smoke: SmokePort
    lake: LakePort
    read_uri: Callable[[str], bytes]  # a spec given by URI at start (file:// locally, s3:// on AWS)
    tokenizer: str = ""  # AIPerf's --tokenizer; "" = the model's own at model.revision (AWS: the model volume)
    report: ReportPort | None = None
    preflight: PreflightPort | None = None  # before any scaling
    locks: Locks | None = None  # one campaign per pool
    clock: Callable[[], float] = time.time
    versions: dict[str, object] = field(default_factory=dict)
    callbacks: CallbackPort | None = None  # who answers task tokens; None: the ASL polls (CheckLoad loop)
    # the deployment's ceilings Plan and ScalePools hold a spec to (benchctl.planning.ceilings); None: none apply
    ceilings: Ceilings | None = None
    identity: IdentityPort | None = None  # the load runners' own identity (AWS); removed on every end path
    # ranks the tune phase's candidates by prediction (benchctl.forecast.tune.rank, where aiconfigurator is
    # installed: the local engine); None: Plan keeps the enumeration's order and says they were not predicted
    ranker: Ranker | None = None


class Engine(Protocol):
    """An engine: where its campaigns keep their run state and results, and the providers of one campaign."""

    name: str
    runs_uri: str
    lake_uri: str

    def providers(self, ctx: Ctx) -> Providers: ...
