"""The deployment side of a campaign spec: the model served, the GPU pools, the worker groups and the
experiments that place them. Pure: may import only pydantic and the standard library."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from benchctl.spec.base import Name, Strict
from benchctl.spec.bounds import (
    MAX_BANDWIDTH_GBPS,
    MAX_BLOCK_SIZE,
    MAX_CONTEXT,
    MAX_KV_BLOCKS,
    MAX_KV_BYTES_PER_TOKEN,
    MAX_SPEEDUP_RATIO,
    MAX_WEIGHTS_GB,
)
from benchctl.spec.fields import HfRepoId, HfRevision, NodegroupName, Text, TwinChoice
from benchctl.spec.settings import (  # Kubernetes and image_tag_version: here too, where callers look
    EFA_INTERFACES,
    Checkpoint,
    PoolNetwork,
)


class ModelSpec(Strict):
    name: HfRepoId = Field(description="served model name, a Hugging Face repo id, e.g. Qwen/Qwen3-30B-A3B")
    max_context: int = Field(default=40960, gt=0, le=MAX_CONTEXT, description="model context length in tokens (at "
                             "most 1,048,576: the longest any served model has; a local pool serves at most its "
                             "generated model's, benchctl.spec.bounds)")
    # Qwen3-30B-A3B: 48 layers x 4 KV heads x 128 head_dim x (K, V) x 2 bytes (BF16) = 98,304 B/token.
    kv_bytes_per_token: int = Field(default=98304, gt=0, le=MAX_KV_BYTES_PER_TOKEN,
                                    description="KV cache bytes per token")
    weights_gb: float | None = Field(default=None, gt=0, le=MAX_WEIGHTS_GB,
                                     description="the checkpoint's weights on the GPUs, GB (1e9 "
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


# EC2's ids and zone names (EC2 API reference, CapacityReservation.CapacityReservationId "cr-" + 17 hex digits;
# an Availability Zone is its Region's name and a letter, a Local Zone's name is longer: both allowed)
RESERVATION_ID_RE = r"^cr-[0-9a-f]{8}([0-9a-f]{9})?$"
ZONE_RE = r"^[a-z]{2}(-[a-z]+)+-\d+[a-z]?(-[a-z0-9]+)*[a-z]$"
PURCHASES = ("on-demand", "reservation", "capacity-block")


class PoolCapacity(Strict):
    """How a pool's GPUs are bought: On-Demand (default), a targeted On-Demand Capacity Reservation (ODCR), or a
    Capacity Block for ML with its window (EC2 user guide, "Capacity Reservations" and "Capacity Blocks for ML")."""

    purchase: Literal["on-demand", "reservation", "capacity-block"] = Field(
        default="on-demand", description="on-demand; reservation: a targeted On-Demand Capacity Reservation (ODCR) the "
        "pool's launches name; capacity-block: a Capacity Block for ML (paid up front for its whole window)")
    reservation_id: str | None = Field(default=None, pattern=RESERVATION_ID_RE, description="the reservation or "
                                       "block, cr-<hex>: required unless purchase is on-demand")
    zone: str | None = Field(default=None, pattern=ZONE_RE, description="the Availability Zone the pool's nodes must "
                             "be in (the reservation's), e.g. us-east-1a; default: its node group's subnets' zone")
    block_start: datetime | None = Field(default=None, description="capacity-block: the block's start, ISO-8601 with "
                                         "a UTC offset (e.g. 2026-12-08T11:30:00Z)")
    block_end: datetime | None = Field(default=None, description="capacity-block: the block's end (EC2 reclaims its "
                                       "instances from 30 min before it); the campaign must end before it")
    usd_per_node_hour: float | None = Field(default=None, gt=0, le=10000, description="what the reservation or block "
                                            "costs per node-hour (a block: its upfront price / (its hours x nodes)); "
                                            "default: the on-demand price of pricing.instances")

    @field_validator("block_start", "block_end")
    @classmethod
    def _utc(cls, v: datetime | None, info: Any) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise ValueError(f"{info.field_name} {v.isoformat()} has no UTC offset: give one, e.g. "
                             f"{v.isoformat()}Z (a block's times are UTC)")
        return None if v is None else v.astimezone(UTC)

    @model_validator(mode="after")
    def _purchase_fields(self) -> PoolCapacity:
        if self.purchase != "on-demand" and self.reservation_id is None:
            raise ValueError(f"purchase {self.purchase!r} needs reservation_id (the cr-... id EC2 gave the "
                             "reservation or block)")
        if self.purchase == "on-demand" and self.reservation_id is not None:
            raise ValueError(f"reservation_id {self.reservation_id!r} is given but purchase is 'on-demand': set "
                             "purchase to 'reservation' or 'capacity-block'")
        if self.purchase != "capacity-block":
            given = [f for f in ("block_start", "block_end") if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{' and '.join(given)} only apply to purchase 'capacity-block' (purchase is "
                                 f"{self.purchase!r}): remove them or set purchase to 'capacity-block'")
            return self
        if self.block_start is None or self.block_end is None:
            missing = [f for f in ("block_start", "block_end") if getattr(self, f) is None]
            raise ValueError(f"purchase 'capacity-block' needs {' and '.join(missing)} (the block's window, as "
                             "EC2 lists it: aws ec2 describe-capacity-reservations, StartDate and EndDate)")
        if self.block_end <= self.block_start:
            raise ValueError(f"block_end {self.block_end.isoformat()} is not after block_start "
                             f"{self.block_start.isoformat()}")
        return self

    @property
    def block_hours(self) -> float:
        """A Capacity Block's whole window in hours (0 for other purchases)."""
        if self.block_start is None or self.block_end is None:
            return 0.0
        return (self.block_end - self.block_start).total_seconds() / 3600.0


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
    capacity: PoolCapacity = Field(default=PoolCapacity(), description="how the pool's GPUs are bought: on-demand "
                                   "(default), an ODCR or a Capacity Block, and the zone they are in")

    @model_validator(mode="after")
    def _reserved_gpu_pool(self) -> PoolSpec:
        c = self.capacity
        if c.purchase == "on-demand":
            return self
        if self.gpus_per_node == 0:
            raise ValueError(f"capacity.purchase {c.purchase!r} needs a GPU pool: only a GPU pool (gpus_per_node > 0) takes a "
                             "reservation or a Capacity Block; this pool has gpus_per_node 0")
        if self.provider == "local":
            raise ValueError(f"capacity.purchase {c.purchase!r} needs an EKS pool: provider 'local' buys nothing; valid providers "
                             "for a reservation or a Capacity Block: managed-nodegroup, auto-mode")
        return self

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
    speedup_ratio: float = Field(default=1.0, gt=0, le=MAX_SPEEDUP_RATIO, description="simulated time runs this "
                                 "many times faster (0, the mocker's no-delay mode, is refused: its figures would "
                                 "measure no time)")
    block_size: int = Field(default=64, gt=0, le=MAX_BLOCK_SIZE)
    num_gpu_blocks: int | None = Field(default=None, gt=0, le=MAX_KV_BLOCKS)
    kv_transfer_bandwidth: float | None = Field(default=None, gt=0, le=MAX_BANDWIDTH_GBPS, description="GB/s, prefill -> decode")
    num_host_blocks: int | None = Field(default=None, gt=0, le=MAX_KV_BLOCKS, description="CPU KV tier size (offload)")
    host_offload_d2h_bandwidth_gbps: float | None = Field(default=None, gt=0, le=MAX_BANDWIDTH_GBPS)
    host_offload_h2d_bandwidth_gbps: float | None = Field(default=None, gt=0, le=MAX_BANDWIDTH_GBPS)


class KvOffload(Strict):
    """KV cache offload (KVBM): GPU -> CPU (-> disk). Locally the mocker's host block tier models it."""

    # per worker: a p5.48xlarge host has 2,048 GiB of memory, its local NVMe 30.4 TB
    cpu_cache_gb: float = Field(default=16.0, gt=0, le=4096, description="DYN_KVBM_CPU_CACHE_GB per worker")
    disk_cache_gb: float | None = Field(default=None, gt=0, le=65536, description="DYN_KVBM_DISK_CACHE_GB per worker (the SSD "
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
