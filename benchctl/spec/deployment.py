"""The deployment side of a campaign spec: the model served, the GPU pools, the worker groups and the
experiments that place them. Pure: may import only pydantic and the standard library."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from benchctl.spec.base import Name, Strict
from benchctl.spec.fields import HfRepoId, HfRevision, NodegroupName, Text, TwinChoice
from benchctl.spec.settings import (  # Kubernetes and image_tag_version: here too, where callers look
    EFA_INTERFACES,
    Checkpoint,
    PoolNetwork,
)


class ModelSpec(Strict):
    name: HfRepoId = Field(description="served model name, a Hugging Face repo id, e.g. Qwen/Qwen3-30B-A3B")
    max_context: int = Field(default=40960, gt=0, description="model context length in tokens")
    # Qwen3-30B-A3B: 48 layers x 4 KV heads x 128 head_dim x (K, V) x 2 bytes (BF16) = 98,304 B/token.
    kv_bytes_per_token: int = Field(default=98304, gt=0, description="KV cache bytes per token")
    weights_gb: float | None = Field(default=None, gt=0, description="the checkpoint's weights on the GPUs, GB (1e9 "
                                     "bytes; Qwen3-30B-A3B in BF16: 61.1): the KV-capacity arithmetic "
                                     "(benchctl.forecast.gpus.gpu_kv_capacity_tokens)")
    revision: HfRevision | None = Field(
        default=None,
        description="Hugging Face revision (a commit or a safe ref name: benchctl.spec.fields): what the model "
                    "prefetch downloads, the workers serve and AIPerf reads the tokenizer at, offline from the model volume; a full commit hash, required when a pool runs "
                    "on EKS (a hub cache's snapshot directory is named by its commit); the local engine serves its own "
                    "generated model directory")


def is_commit(revision: str | None) -> bool:
    """Whether a Hugging Face revision is a full commit hash: the only name a hub cache's snapshot directory
    (``hub/models--<org>--<name>/snapshots/<commit>``) can have."""
    return revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision) is not None


class PoolSpec(Strict):
    name: Name
    instance_type: str = Field(min_length=1)
    gpus_per_node: int = Field(ge=0, le=16, description="0: a CPU pool, for Dynamo mocker workers (engine: mocker) "
                               "or, local, for the CPU engine (engine: vllm)")
    gpu_kind: Annotated[str, Text(64)] = Field(min_length=1, description="e.g. A100-40GB, L40S-48GB; none on a CPU pool")
    pods_per_node: int | None = Field(default=None, gt=0, le=100, description="a CPU pool: how many mocker worker "
                                      "pods one node holds (each asks kubernetes.mocker_cpu/mocker_memory)")
    max_nodes: int = Field(default=4, gt=0, le=64)
    provider: Literal["managed-nodegroup", "auto-mode", "local"] = "managed-nodegroup"
    nodegroup: NodegroupName | None = Field(default=None, description="EKS managed node group name")
    network: PoolNetwork = PoolNetwork()
    root_volume_gib: int | None = Field(
        default=None, gt=0, le=16384, description="each node's root EBS volume (gp3), priced with "
        "pricing.ebs_gp3_usd_per_gb_month; default: what benchctl's platform gives the pool (200 GiB on a GPU "
        "node group, 100 on a CPU one, Auto Mode's NodeClass default 80), 0 nothing when provider is local")

    @property
    def local_cpu(self) -> bool:
        """This machine's CPU: where ``engine: vllm`` is the CPU engine (``benchctl.local.cpu_engine``)."""
        return self.provider == "local" and self.gpus_per_node == 0

    def efa_interfaces(self) -> int:
        """EFA interfaces per node (0 without EFA)."""
        if not self.network.efa:
            return 0
        return self.network.efa_interfaces or EFA_INTERFACES.get(self.instance_type, 0)


class WorkerGroup(Strict):
    role: Literal["worker", "prefill", "decode"]
    pool: Name
    replicas: int = Field(gt=0, le=64)
    tensor_parallel: int = Field(default=1, gt=0, le=16)


class LocalMocker(Strict):
    """How the local engine's Dynamo mocker imitates the hardware (simulated numbers)."""

    twin: TwinChoice = Field(default="auto", description="the timing profile (benchctl.forecast.twin): auto, off or a name")
    speedup_ratio: float = Field(default=1.0, ge=0)
    block_size: int = Field(default=64, gt=0)
    num_gpu_blocks: int | None = Field(default=None, gt=0)
    kv_transfer_bandwidth: float | None = Field(default=None, gt=0, description="GB/s, prefill -> decode")
    num_host_blocks: int | None = Field(default=None, gt=0, description="CPU KV tier size (offload)")
    host_offload_d2h_bandwidth_gbps: float | None = Field(default=None, gt=0)
    host_offload_h2d_bandwidth_gbps: float | None = Field(default=None, gt=0)


class KvOffload(Strict):
    """KV cache offload (KVBM): GPU -> CPU (-> disk). Locally the mocker's host block tier models it."""

    cpu_cache_gb: float = Field(default=16.0, gt=0, description="DYN_KVBM_CPU_CACHE_GB per worker")
    disk_cache_gb: float | None = Field(default=None, gt=0, description="DYN_KVBM_DISK_CACHE_GB per worker (the SSD "
                                        "tier, on an emptyDir of the node's disk; not modelled by the local mocker)")

    @model_validator(mode="after")
    def _tiers_grow(self) -> KvOffload:
        if self.disk_cache_gb is not None and self.disk_cache_gb < self.cpu_cache_gb:
            raise ValueError(f"disk_cache_gb {self.disk_cache_gb:g} is below cpu_cache_gb {self.cpu_cache_gb:g}: KVBM's "
                             "tiers grow outwards (disk >= CPU; FACTS 'KVBM disk tier')")
        return self


# What one rung of a feature ladder may change: exactly one of these (``workers`` only with ``mode``,
# since a mode change re-splits the workers into roles).
LADDER_FEATURES = ("mode", "router", "kv_offload")


class Experiment(Strict):
    name: Name
    mode: Literal["aggregated", "disaggregated"]
    router: Literal["round-robin", "kv"] = "round-robin"
    workers: list[WorkerGroup] = Field(min_length=1, max_length=8)
    kv_offload: KvOffload | None = None
    engine: Literal["vllm", "mocker"] = Field(
        default="vllm", description="what the workers run on EKS: vLLM on GPU pools, or Dynamo's mocker on CPU pools "
                                    "(gpus_per_node 0), which rehearses the whole AWS path without a GPU (SIMULATED "
                                    "figures). Locally, vllm runs the mocker on GPU pools (SIMULATED) and, on a local "
                                    "pool of gpus_per_node 0, Dynamo's real vLLM worker on vLLM's CPU build with a tiny "
                                    "random-weight model (the CPU engine, SIMULATED (CPU engine))")
    mocker: LocalMocker = LocalMocker()
    checkpoint: Checkpoint | None = Field(default=None, description="weights its workers load instead of model's, "
                                          "served under model.name (another precision of the same model)")
    base: Name | None = Field(default=None, description="ladder: the experiment this one changes")
    change: dict[str, Any] | None = Field(default=None, description="ladder: the one feature changed")

    @model_validator(mode="after")
    def _roles_match_mode(self) -> Experiment:
        roles = {g.role for g in self.workers}
        if self.mode == "aggregated" and roles != {"worker"}:
            raise ValueError(
                f"aggregated experiment needs only role 'worker' groups, got roles {sorted(roles)}"
            )
        if self.mode == "disaggregated" and roles != {"prefill", "decode"}:
            raise ValueError(
                f"disaggregated experiment needs role 'prefill' and role 'decode' groups, "
                f"got roles {sorted(roles)}"
            )
        return self

    def gpus(self) -> int:
        return sum(g.replicas * g.tensor_parallel for g in self.workers)

    @property
    def feature(self) -> str | None:
        """The ladder feature this experiment changes relative to ``base`` (None outside a ladder)."""
        if not self.change:
            return None
        return next(f for f in LADDER_FEATURES if f in self.change)




def transfer_path(pool: PoolSpec) -> str:
    """The KV-transfer path of a pool's workers: NIXL's LIBFABRIC over EFA, else UCX (TCP between pods)."""
    return "LIBFABRIC+EFA" if pool.network.efa and pool.network.nixl_backend == "LIBFABRIC" else "UCX"
