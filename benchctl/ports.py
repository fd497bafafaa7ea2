"""Ports: the few interfaces through which handlers touch the world.

Each port has a local implementation (``benchctl.local``) and an AWS one (``benchctl.aws``).
States passed between calls are plain JSON-able dicts so that the state machine (or a file in
the run directory) can carry them between Lambda invocations.
May import only the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

JSON = dict[str, Any]


@dataclass(frozen=True)
class WorkerGroupSpec:
    """One group of workers of a deployment: role ``worker`` (aggregated) or ``prefill``/``decode``."""

    role: str
    replicas: int
    tensor_parallel: int = 1
    pool: str = ""


@dataclass(frozen=True)
class DeploymentSpec:
    """What to serve: everything the serving port needs, and nothing about load."""

    deployment_id: str  # unique per campaign x experiment; names processes/objects
    model_name: str  # served model name, e.g. Qwen/Qwen3-30B-A3B
    mode: str  # aggregated | disaggregated
    router: str  # round-robin | kv
    groups: tuple[WorkerGroupSpec, ...]
    labels: dict[str, str] = field(default_factory=dict)  # campaign/experiment labels
    # Local mocker knobs (ignored on AWS): speedup_ratio, block_size, num_gpu_blocks,
    # kv_transfer_bandwidth, num_host_blocks, ...
    mocker: dict[str, Any] = field(default_factory=dict)
    # KV cache offload (KVBM) settings, e.g. {"cpu_cache_gb": 16}; None = off. Locally the mocker's
    # host block tier (``mocker["num_host_blocks"]``) stands in for it.
    kv_offload: dict[str, Any] | None = None


class ServingPort(Protocol):
    def deploy(self, spec: DeploymentSpec) -> JSON:
        """Start/apply the deployment; return its state (endpoints, ids). Idempotent per id."""

    def probe_ready(self, state: JSON) -> bool:
        """One non-blocking readiness check. Raises ServingFailed if it can never become ready."""

    def check_alive(self, state: JSON) -> None:
        """Raise ServingFailed naming what died."""

    def teardown(self, state: JSON) -> JSON:
        """Remove everything of this deployment; idempotent; return what was removed."""


class LoadPort(Protocol):
    def launch(self, argv: list[str], artifact_dir: str, job_id: str) -> JSON:
        """Start the load generator with these arguments; return its state."""

    def poll(self, state: JSON) -> int | None:
        """None while running, else its exit code."""

    def stop(self, state: JSON) -> None:
        """Stop it now (abort path); idempotent."""
