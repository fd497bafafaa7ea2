"""A pool's GPUs as aiconfigurator and vLLM see them: its aiconfigurator system, its memory, and the KV tokens one
worker's GPUs hold by vLLM's arithmetic."""

from __future__ import annotations

import re

from benchctl.spec.deployment import ModelSpec, PoolSpec

VLLM_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of GPU memory it may use

# aiconfigurator system <- GPU named in the pool's gpu_kind, else its EC2 instance family
_GPU_SYSTEMS = ((re.compile(r"\bA100\b"), "a100_sxm"), (re.compile(r"\bL40S\b"), "l40s"))


_INSTANCE_SYSTEMS = (("p4d.", "a100_sxm"), ("p4de.", "a100_sxm"), ("g6e.", "l40s"))


_GB = re.compile(r"(\d+(?:\.\d+)?)\s*Gi?B\b", re.IGNORECASE)


def gpu_system(pool: PoolSpec) -> str | None:
    """The aiconfigurator system for a pool's GPUs (A100 -> ``a100_sxm``, L40S -> ``l40s``), else None."""
    kind = pool.gpu_kind.upper()
    for pattern, system in _GPU_SYSTEMS:
        if pattern.search(kind):
            return system
    instance = pool.instance_type.lower()
    for prefix, system in _INSTANCE_SYSTEMS:
        if instance.startswith(prefix):
            return system
    return None


def gpu_memory_gb(pool: PoolSpec) -> float | None:
    """GPU memory named in ``gpu_kind`` ("A100-40GB" -> 40.0), None when it names none."""
    m = _GB.search(pool.gpu_kind)
    return float(m.group(1)) if m else None


def gpu_kv_capacity_tokens(model: ModelSpec, pool: PoolSpec, tensor_parallel: int) -> float | None:
    """An upper bound on the tokens one worker's GPU KV cache holds, by vLLM's arithmetic: each of its
    ``tensor_parallel`` GPUs gives :data:`VLLM_GPU_MEMORY_UTILIZATION` of its memory (``gpu_kind``'s GB, read as
    GiB as aiconfigurator reports), minus its share of the weights (``model.weights_gb``), to the KV cache, and
    holds ``1 / tensor_parallel`` of each token's KV (``model.kv_bytes_per_token``; the KV heads are split).
    Activations, CUDA graphs and NCCL buffers take a part of that budget too, so the real capacity is lower.
    None when the pool names no memory size or the model no weight size."""
    cap = gpu_memory_gb(pool)
    if cap is None or model.weights_gb is None:
        return None
    per_gpu = VLLM_GPU_MEMORY_UTILIZATION * cap * 2**30 - model.weights_gb * 1e9 / tensor_parallel
    return max(0.0, per_gpu) / (model.kv_bytes_per_token / tensor_parallel)
