"""EFA on a disaggregated worker, as Dynamo's own AWS recipes run it: the interfaces it gets, the EFA-enabled
runtime image, libfabric's and KVBM's settings, the security context that lets NIXL register GPU memory, and
NIXL's telemetry exporter. Pure: standard library and benchctl only."""

from __future__ import annotations

from typing import Any

from benchctl.planning.placement import efa_share
from benchctl.spec.deployment import PoolSpec, WorkerGroup
from benchctl.spec.model import Kubernetes

JSON = dict[str, Any]

# EFA on a worker (Dynamo's AWS recipes, recipes/qwen3-32b/vllm/cloud-providers/deploy-aws-p5.48xlarge.yaml and
# disagg-1p1d-aws-efa/deploy.yaml; docs/kubernetes/cloud-providers/eks/efa.md; FACTS "Disaggregation over EFA"):
# libfabric's EFA provider with GPUDirect RDMA, no shared memory (the guide's required pair, FI_EFA_ENABLE_SHM
# and FI_EFA_ENABLE_SHM_TRANSFER).
EFA_RESOURCE = "vpc.amazonaws.com/efa"
EFA_ENV: tuple[JSON, ...] = ({"name": "FI_PROVIDER", "value": "efa"}, {"name": "FI_EFA_USE_DEVICE_RDMA", "value": "1"},
                             {"name": "FI_EFA_ENABLE_SHM_TRANSFER", "value": "0"}, {"name": "FI_EFA_ENABLE_SHM", "value": "0"})
# KVBM's own NIXL agent picks its backend from DYN_KVBM_NIXL_BACKEND_<NAME> (efa.md: UCX, i.e. TCP, unless
# told); the recipes set both on every EFA worker
KVBM_NIXL_BACKENDS = ("LIBFABRIC", "UCX")
# registering GPU memory for RDMA needs locked pages; the recipe adds SYS_PTRACE and runs privileged (the
# disaggregation guide: IPC_LOCK alone is not enough) and as root: the -efa image ends with `USER dynamo`, and
# added capabilities never reach a non-root process's effective set (kubernetes/kubernetes#56374)
EFA_SECURITY_CONTEXT: JSON = {"capabilities": {"add": ["IPC_LOCK", "SYS_PTRACE"]}, "privileged": True, "runAsUser": 0}


def efa_env(backend: str) -> list[JSON]:
    """A worker's EFA settings: libfabric's (:data:`EFA_ENV`) and KVBM's NIXL backend, the pool's."""
    return [*(dict(e) for e in EFA_ENV),
            *({"name": f"DYN_KVBM_NIXL_BACKEND_{b}", "value": str(b == backend).lower()} for b in KVBM_NIXL_BACKENDS)]
# NIXL's own Prometheus exporter: bytes moved and failed transfers per backend (port 19090 in the recipe, since
# 9090 is the worker's system port)
NIXL_TELEMETRY_PORT = 19090
NIXL_TELEMETRY_ENV: tuple[JSON, ...] = (
    {"name": "NIXL_TELEMETRY_ENABLE", "value": "y"}, {"name": "NIXL_TELEMETRY_EXPORTER", "value": "prometheus"},
    {"name": "NIXL_TELEMETRY_PROMETHEUS_PORT", "value": str(NIXL_TELEMETRY_PORT)})


def efa_per_worker(pool: PoolSpec, group: WorkerGroup) -> int:
    """EFA interfaces one worker pod gets: its share of the node's by GPUs (p4d, 4 interfaces for 8 GPUs:
    2 for a TP=4 worker; Dynamo's p5 recipe: 16 of 32 for TP=4), at least 1; 0 without EFA."""
    return efa_share(pool, group.tensor_parallel)


def efa_image(pool: PoolSpec, k: Kubernetes) -> str:
    """The EFA-enabled runtime image of a pool's workers: its own, else the Dynamo image's tag + ``-efa``."""
    if pool.network.efa_image:
        return pool.network.efa_image
    ref, _, digest = k.dynamo_image.partition("@")
    return f"{ref}-efa" if not digest else k.dynamo_image  # a digest names one image: spec refuses (efa_image)
