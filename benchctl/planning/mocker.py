"""The Dynamo mocker's command line: the spec's ``mocker`` knobs as ``python -m dynamo.mocker`` 1.6.1 flags.

One table for both engines: the local engine starts mocker processes with these flags
(``benchctl.local.serving``), and on EKS a mocker experiment (``engine: mocker``, CPU pools) renders its
workers with them (``benchctl.aws.k8s.render``). Pure: standard library only.
"""

from __future__ import annotations

from typing import Any

# What the mocker's workers "run" in place of a precision: the engines record it with the ready event (the
# precision a vLLM worker logged running, on EKS: benchctl.aws.eks.engine_precision)
MOCKER_PRECISION = "not applicable, SIMULATED: Dynamo mocker workers load no weights and compute nothing"

# spec.mocker knob -> dynamo.mocker 1.6.1 flag (value flags). Checked with `python -m dynamo.mocker --help`.
MOCKER_VALUE_FLAGS: dict[str, str] = {
    "speedup_ratio": "--speedup-ratio",
    "decode_speedup_ratio": "--decode-speedup-ratio",
    "block_size": "--block-size",
    "num_gpu_blocks": "--num-gpu-blocks-override",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
    "preemption_mode": "--preemption-mode",
    "data_parallel_size": "--data-parallel-size",
    "startup_time": "--startup-time",
    "planner_profile_data": "--planner-profile-data",
    "engine_type": "--engine-type",
    "kv_transfer_bandwidth": "--kv-transfer-bandwidth",
    "kv_transfer_timing_mode": "--kv-transfer-timing-mode",
    "kv_cache_dtype": "--kv-cache-dtype",
    "kv_bytes_per_token": "--kv-bytes-per-token",
    "num_host_blocks": "--num-host-blocks",
    "host_offload_d2h_bandwidth_gbps": "--host-offload-d2h-bandwidth-gbps",
    "host_offload_h2d_bandwidth_gbps": "--host-offload-h2d-bandwidth-gbps",
}
# spec.mocker knob -> (flag when true, flag when false).
MOCKER_BOOL_FLAGS: dict[str, tuple[str, str]] = {
    "enable_prefix_caching": ("--enable-prefix-caching", "--no-enable-prefix-caching"),
    "enable_chunked_prefill": ("--enable-chunked-prefill", "--no-enable-chunked-prefill"),
}
ROLES = ("worker", "prefill", "decode")


def valid_mocker_knobs() -> list[str]:
    return sorted([*MOCKER_VALUE_FLAGS, *MOCKER_BOOL_FLAGS])


def _knob_flags(knobs: dict[str, Any], where: str) -> list[str]:
    argv: list[str] = []
    unknown = sorted(k for k in knobs if k not in MOCKER_VALUE_FLAGS and k not in MOCKER_BOOL_FLAGS)
    if unknown:
        raise ValueError(
            f"unknown mocker knob(s) {unknown} in {where}; valid: {', '.join(valid_mocker_knobs())}"
            f" (or a per-role table named one of {list(ROLES)})"
        )
    for key in sorted(knobs):
        value = knobs[key]
        if value is None:
            continue
        if key in MOCKER_BOOL_FLAGS:
            if not isinstance(value, bool):
                raise ValueError(f"mocker knob {key} in {where} must be true/false, got {value!r}")
            argv.append(MOCKER_BOOL_FLAGS[key][0 if value else 1])
        else:
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ValueError(f"mocker knob {key} in {where} must be a number or string, got {value!r}")
            argv += [MOCKER_VALUE_FLAGS[key], str(value)]
    return argv


def mocker_flags(mocker: dict[str, Any], role: str) -> list[str]:
    """Mocker flags for one role: top-level knobs, overridden by an optional per-role table.

    ``spec.mocker`` may hold ``{"speedup_ratio": 5, "prefill": {"speedup_ratio": 2}}``.
    """
    common = {k: v for k, v in mocker.items() if k not in ROLES}
    for r in ROLES:
        if r in mocker and not isinstance(mocker[r], dict):
            raise ValueError(f"spec.mocker.{r} must be a table of knobs, got {mocker[r]!r}")
        _knob_flags(mocker.get(r) or {}, f"spec.mocker.{r}")  # validate every role's table
    _knob_flags(common, "spec.mocker")
    merged = {**common, **(mocker.get(role) or {})}
    return _knob_flags(merged, "spec.mocker")


