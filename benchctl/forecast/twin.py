"""The twin: each local mocker worker timed by aiconfigurator's performance model of the pool's GPU.

The local engine's Dynamo mocker (1.6.1) takes a timing profile (``--planner-profile-data``, the NPZ of
:mod:`benchctl.forecast.twin_profile`) and a KV capacity (``--num-gpu-blocks-override``). This module builds, per
experiment and worker role, the profile of the pool's GPU, TP and engine from aiconfigurator, and the mocker
knobs that use it. Local figures stay SIMULATED; they now name the twin they came from (:func:`label`).

The contract (shared with ``benchctl calibrate``, which writes fitted profiles into the same store):

* The store is ``<workspace>/twin/<name>/`` (``perf_data.npz`` + ``provenance.json``,
  :func:`benchctl.forecast.twin_profile.profile_dir`); the workspace is ``benchctl run --out`` (``runs/``).
* The spec chooses per experiment with ``mocker.twin``: ``auto`` (the default: aiconfigurator's profile for the
  pool's GPU when it has one, else the mocker's built-in timing, with a note saying why), ``off`` (the mocker's
  built-in timing) or the NAME of a profile in the store (e.g. one ``benchctl calibrate`` wrote; missing: the
  run stops before anything starts, naming the directory). A name matches
  :data:`benchctl.forecast.twin_profile.NAME_PATTERN`.
* aiconfigurator's profiles are named ``aic-<system>-tp<N>-<role>-<hash>``, the hash over everything that
  changes the curves (:class:`TwinKey`, aiconfigurator's version included), so a repeated run reuses them.
* ``provenance.json`` holds at least ``source`` (``aiconfigurator`` or ``calibrate``), ``label`` (what the
  figures are called: "SIMULATED on the a100_sxm TP4 twin (aiconfigurator 0.12.0, vllm 0.14.0)"); for
  aiconfigurator also ``aiconfigurator_version``, ``system``, ``backend``, ``backend_version``, ``model``,
  ``tp``, ``role``, ``grid``, ``kv_capacity_tokens``, ``block_size``, ``num_gpu_blocks``. A profile with
  ``num_gpu_blocks`` sets the mocker's KV capacity.
* The mocker knobs a twin sets (per role): ``planner_profile_data`` (the NPZ), ``num_gpu_blocks`` and
  ``speedup_ratio`` 1. A knob the spec's ``mocker`` sets explicitly wins (``num_gpu_blocks``,
  ``speedup_ratio`` other than 1).

How the curves are made (aiconfigurator 0.12, vLLM backend, its static modes, expert parallelism off):

* prefill: ``static_ctx`` at batch 1 over :data:`PREFILL_ISL` (the mocker looks a prefill step up by its new
  tokens in total, batch x ISL, interpolating linearly and extrapolating past the ends);
* decode: ``static_gen`` (one decode iteration, output length 2) over :data:`AIC_BATCH` x :data:`AIC_CTX`,
  resampled onto the mocker's axes (active KV tokens :data:`NPZ_KV` x context :data:`NPZ_CTX`) with batch =
  kv / context, clamped to 1 .. min(vLLM's ``max_num_seqs``, what the KV cache holds);
* KV capacity: aiconfigurator's memory per GPU at batch 1 and 2 (linear in the tokens held, as
  :mod:`benchctl.forecast.predict` fits a batch) within vLLM's 0.9 of the pool's GPU memory, in mocker blocks;
* dispatch (aggregated workers only): aiconfigurator's aggregated TTFT at batch 1 minus its ``static_ctx``
  prefill at the same ISL (vLLM: 0.8 ms per layer of CPU dispatch, 38.4 ms for Qwen3-30B-A3B), a per-request
  latency it keeps out of the decode steps; the local engine holds each request's answers that long on their way
  from the worker to the frontend (:mod:`benchctl.local.hold`), so it delays the first token without stalling
  the engine.
  Its disaggregated model has no such term (a prefill x 1.8 instead), so prefill and decode twins hold 0.

Pure core (keys, resampling, labels, knobs); aiconfigurator and the store only in :func:`aic_curves` and
:func:`ensure`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchctl.forecast.twin_profile import (
    ProfileError,
    TimingProfile,
    interp,
    profile_dir,
    read_profile,
    write_profile,
)
from benchctl.planning.reach import VLLM_MAX_NUM_SEQS

AUTO, OFF = "auto", "off"
PREFILL_ISL = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
AIC_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256)
AIC_CTX = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
MEM_CTX = 1024  # the context aiconfigurator's memory per GPU is read at (batch 1 and 2)
NPZ_CTX = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
NPZ_KV = tuple(2**k for k in range(6, 23))  # 64 .. 4 Mi tokens
MAX_NUM_SEQS = VLLM_MAX_NUM_SEQS  # vLLM's default on A100 / L40S (benchctl.planning.reach)
GPU_MEMORY_UTILIZATION = 0.9
DISPATCH_ISL = 256  # where the dispatch term is read (it does not depend on the ISL: 38.4 ms at 256 and 1024)
MAX_DISPATCH_MS = 10_000.0


@dataclass(frozen=True)
class TwinKey:
    """Everything that changes a worker's aiconfigurator profile."""

    system: str
    tp: int
    model: str
    role: str
    gpu_memory_gb: float | None
    block_size: int
    aiconfigurator_version: str
    backend: str = "vllm"
    method: int = 2  # 2: the aggregated worker's dispatch hold (profiles of method 1 are made anew)

    def name(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
        return f"aic-{self.system}-tp{self.tp}-{self.role}-{digest}".lower()


@dataclass(frozen=True)
class Curves:
    """aiconfigurator's raw answers: prefill ms by ISL, decode ms by (batch, context), KV capacity."""

    prefill_ms: dict[int, float]
    decode_ms: dict[tuple[int, int], float]
    kv_capacity_tokens: float | None
    backend_version: str
    notes: list[str] = field(default_factory=list)
    dispatch_ms: float = 0.0  # the aggregated TTFT's per-request term beyond the prefill step (module doc)


def decode_ms(curves: Curves, batch: float, ctx: float) -> float:
    """One decode iteration at ``batch`` x ``ctx`` from aiconfigurator's table: linear in the batch, in
    log(context) between the table's contexts (clamped at the ends)."""
    ctxs = sorted({c for _, c in curves.decode_ms})
    by_ctx = []
    for c in ctxs:
        bs = sorted(b for b, cc in curves.decode_ms if cc == c)
        by_ctx.append(interp([float(b) for b in bs], [curves.decode_ms[(b, c)] for b in bs], batch))
    return interp([math.log(c) for c in ctxs], by_ctx, math.log(max(ctx, 1.0)))


def max_batch(curves: Curves, ctx: float) -> float:
    cap = MAX_NUM_SEQS if curves.kv_capacity_tokens is None else min(MAX_NUM_SEQS, curves.kv_capacity_tokens / ctx)
    return max(1.0, cap)


def build_profile(key: TwinKey, curves: Curves) -> TimingProfile:
    """The mocker's NPZ curves and provenance from aiconfigurator's answers (pure)."""
    isl = sorted(curves.prefill_ms)
    itl = tuple(tuple(decode_ms(curves, min(max(1.0, kv / ctx), max_batch(curves, ctx)), ctx) for ctx in NPZ_CTX)
                for kv in NPZ_KV)
    blocks = None if curves.kv_capacity_tokens is None else max(1, int(curves.kv_capacity_tokens // key.block_size))
    provenance: dict[str, Any] = {
        "source": "aiconfigurator", "aiconfigurator_version": key.aiconfigurator_version, "system": key.system,
        "backend": key.backend, "backend_version": curves.backend_version, "model": key.model, "tp": key.tp,
        "role": key.role, "gpu_memory_gb": key.gpu_memory_gb, "block_size": key.block_size,
        "kv_capacity_tokens": curves.kv_capacity_tokens, "num_gpu_blocks": blocks, "name": key.name(),
        "dispatch_ms": curves.dispatch_ms if key.role == "worker" else 0.0,
        "grid": {"prefill_isl": isl, "aic_batch": list(AIC_BATCH), "aic_context": list(AIC_CTX),
                 "decode_active_kv_tokens": list(NPZ_KV), "decode_context_length": list(NPZ_CTX)},
        "method": "static_ctx batch 1 (prefill); static_gen osl 2 (one decode iteration), batch = kv / context "
                  f"clamped to 1..min({MAX_NUM_SEQS}, KV capacity / context); expert parallelism off",
        "notes": list(curves.notes),
    }
    provenance["label"] = label(provenance)
    return TimingProfile(tuple(float(i) for i in isl), tuple(curves.prefill_ms[i] for i in isl),
                         tuple(float(k) for k in NPZ_KV), tuple(float(c) for c in NPZ_CTX), itl,
                         provenance).check(key.name())


def label(provenance: dict[str, Any]) -> str:
    """What figures timed by this profile are: "SIMULATED on the a100_sxm TP4 twin (aiconfigurator 0.12.0,
    vllm 0.14.0)"; a calibrated or other profile by its own label or name."""
    if provenance.get("label"):
        return str(provenance["label"])
    if provenance.get("source") == "aiconfigurator":
        return (f"SIMULATED on the {provenance['system']} TP{provenance['tp']} twin (aiconfigurator "
                f"{provenance['aiconfigurator_version']}, {provenance['backend']} {provenance['backend_version']})")
    return f"SIMULATED on the twin profile {provenance.get('name', '?')}"


# ------------------------------------------------------------------------------------------------- spec -> keys
@dataclass(frozen=True)
class RoleTwin:
    """What one role's workers run on: a profile (its NPZ, KV blocks, label) or, without one, a note."""

    role: str
    name: str | None = None
    npz: str | None = None
    num_gpu_blocks: int | None = None
    label: str = "SIMULATED on the mocker's built-in timing (no twin)"
    provenance: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    profile: TimingProfile | None = field(default=None, repr=False, compare=False)
    dispatch_ms: float = 0.0  # how long the worker's answers are held (benchctl.local.hold); 0: not held


def twin_keys(pools: dict[str, Any], model: str, exp: Any, aic_version: str) -> dict[str, TwinKey] | str:
    """Per role of ``exp`` its :class:`TwinKey` (``pools`` by name, ``model`` the weights served), or why it has
    no aiconfigurator twin (a note)."""
    from benchctl.forecast.gpus import gpu_memory_gb, gpu_system
    from benchctl.forecast.predict import _builtin_model

    if not _builtin_model(model):
        return f"no twin: aiconfigurator has no built-in config of {model} (offline only)"
    keys: dict[str, TwinKey] = {}
    for g in exp.workers:
        pool = pools[g.pool]
        system = gpu_system(pool)
        if system is None:
            return (f"no twin: aiconfigurator has no performance data for pool {pool.name} ({pool.gpu_kind}); only "
                    "A100 (a100_sxm) and L40S (l40s) are mapped")
        key = TwinKey(system, g.tensor_parallel, model, g.role, gpu_memory_gb(pool),
                      exp.mocker.block_size, aic_version)
        if keys.setdefault(g.role, key) != key:
            return f"no twin: the {g.role} groups of {exp.name} differ in pool or TP (one profile per role)"
    return keys


def mocker_knobs(knobs: dict[str, Any], twins: dict[str, RoleTwin]) -> dict[str, Any]:
    """``knobs`` (the spec's ``mocker`` table, resolved) with each role's twin: ``planner_profile_data``,
    ``num_gpu_blocks`` and ``speedup_ratio`` 1 in the role's own table. What the spec sets wins: a
    ``num_gpu_blocks``, a ``speedup_ratio`` other than 1 (the default, so an explicit 1 is the twin's too)."""
    out = dict(knobs)
    for role, t in twins.items():
        if t.npz is None:
            continue
        table = {**(out.get(role) or {}), "planner_profile_data": t.npz}
        merged = {**knobs, **table}
        if t.num_gpu_blocks is not None and merged.get("num_gpu_blocks") is None:
            table["num_gpu_blocks"] = t.num_gpu_blocks
        if merged.get("speedup_ratio", 1.0) == 1.0:
            table["speedup_ratio"] = 1.0
        out[role] = table
    return out


# ------------------------------------------------------------------------------------------------- edges
_CURVES: dict[tuple[str, int, str, float | None], Curves] = {}


def aic_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aiconfigurator")
    except PackageNotFoundError:
        return "not installed"


def aic_curves(key: TwinKey) -> Curves:
    """aiconfigurator's prefill, decode and memory answers for ``key`` (memoised per system, TP, model, memory:
    the roles share them)."""
    memo = (key.system, key.tp, key.model, key.gpu_memory_gb)
    if memo in _CURVES:
        return _CURVES[memo]
    from benchctl.forecast.aic import latest_version, quiet

    with quiet():
        from aiconfigurator.cli.api import cli_estimate

    # the backend version pinned (aic.latest_version; else after the first answer): without it each call re-reads
    # aiconfigurator's database index (YAML, about 0.5 s a call), with it a call takes milliseconds
    known = latest_version(key.system, key.backend)
    pinned: dict[str, str] = {"backend_version": known} if known is not None else {}

    def est(mode: str, isl: int, batch: int) -> Any:
        with quiet():
            r = cli_estimate(key.model, key.system, mode=mode, backend_name=key.backend, isl=isl, osl=2,
                             batch_size=batch, tp_size=key.tp, moe_tp_size=key.tp, moe_ep_size=1, **pinned)
        pinned.setdefault("backend_version", str(r.backend_version))
        return r

    prefill = {i: float(est("static_ctx", i, 1).ttft) for i in PREFILL_ISL}
    dispatch = max(0.0, float(est("agg", DISPATCH_ISL, 1).ttft) - prefill[DISPATCH_ISL])
    decode: dict[tuple[int, int], float] = {}
    version = pinned["backend_version"]
    notes: list[str] = []
    mem: dict[int, float] = {}
    for ctx in AIC_CTX:
        for b in AIC_BATCH:
            try:
                r = est("static_gen", ctx, b)
            except Exception as err:  # aiconfigurator refuses a batch it finds out of memory on its 80 GB part
                notes.append(f"static_gen batch {b} context {ctx}: {type(err).__name__}")
                break
            decode[(b, ctx)] = float(r.tpot)
            if ctx == MEM_CTX and b in (1, 2):
                mem[b] = float(r.raw["memory"])
    capacity = None
    if key.gpu_memory_gb is not None and len(mem) == 2:
        per_token = (mem[2] - mem[1]) / (MEM_CTX + 1)  # GiB per GPU per token held
        base = mem[1] - per_token * (MEM_CTX + 1)
        capacity = max(0.0, (GPU_MEMORY_UTILIZATION * key.gpu_memory_gb - base) / per_token) if per_token > 0 else None
    else:
        notes.append("KV capacity not estimated (the pool names no GPU memory): the mocker's default")
    _CURVES[memo] = Curves(prefill, decode, capacity, version, notes, dispatch)
    return _CURVES[memo]


def ensure(workspace: Path, key: TwinKey, curves: Callable[[TwinKey], Curves] | None = None,
           write: bool = True) -> RoleTwin:
    """The profile of ``key`` in the workspace's store: read when there, else made (and written, ``write``) from
    ``curves`` (default :func:`aic_curves`, looked up when called)."""
    directory = profile_dir(workspace, key.name())
    try:
        profile = read_profile(directory)
    except (ProfileError, OSError):
        profile = build_profile(key, (curves or aic_curves)(key))
        if not write:
            return _role_twin(key.role, key.name(), directory, profile, npz=False)
        write_profile(directory, profile)
    return _role_twin(key.role, key.name(), directory, profile)


def _role_twin(role: str, name: str, directory: Path, profile: TimingProfile, npz: bool = True) -> RoleTwin:
    prov = profile.provenance
    blocks = prov.get("num_gpu_blocks")
    return RoleTwin(role, name, str(directory / "perf_data.npz") if npz else None, int(blocks) if blocks else None,
                    label(prov), dict(prov), profile=profile, dispatch_ms=dispatch_ms_of(prov, role))


def dispatch_ms_of(prov: dict[str, Any], role: str) -> float:
    """The hold a profile asks for its ``role``: its ``dispatch_ms`` for aggregated workers, else 0 (a
    ``benchctl calibrate`` profile has none: its prefill fit already holds everything up to the first token)."""
    try:
        value = float(prov.get("dispatch_ms") or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return value if role == "worker" and math.isfinite(value) and 0.0 < value <= MAX_DISPATCH_MS else 0.0


def resolve(workspace: Path, pools: dict[str, Any], model: str, exp: Any, write: bool = True) -> dict[str, RoleTwin]:
    """Per role of ``exp``, what its mocker workers are timed by under ``exp.mocker.twin``. A named profile that
    is missing or unusable raises :class:`ProfileError`; ``auto`` without an aiconfigurator twin notes why."""
    roles = list(dict.fromkeys(g.role for g in exp.workers))
    choice = exp.mocker.twin
    if choice == OFF:
        return {r: RoleTwin(r, note="mocker.twin: off") for r in roles}
    if choice != AUTO:
        directory = profile_dir(workspace, choice)
        profile = read_profile(directory)  # ProfileError names the file
        return {r: _role_twin(r, choice, directory, profile) for r in roles}
    keys = twin_keys(pools, model, exp, aic_version())
    if isinstance(keys, str):
        return {r: RoleTwin(r, note=keys) for r in roles}
    out = {}
    for r in roles:
        try:
            out[r] = ensure(workspace, keys[r], write=write)
        except Exception as err:  # aiconfigurator missing or refusing: the mocker's own timing, said so
            out[r] = RoleTwin(r, note=f"no twin: aiconfigurator gave no profile: {type(err).__name__}: "
                                      f"{' '.join(str(err).split())[:200]}")
    return out


# ------------------------------------------------------------------------------------------------- durations
def request_seconds(profiles: dict[str, TimingProfile], replicas: dict[str, int], concurrency: int, isl: float,
                    osl: float) -> float:
    """One request's time in a closed loop of ``concurrency`` on the twin (seconds), as the mocker schedules it:
    a step is its prefills' time plus one decode iteration of the running batch; a request's first token comes
    at the end of the step its prefill completes in.

    Aggregated (``worker``): the batch per worker is ceil(concurrency / workers); over a request's ``osl``
    iterations every other request of its batch restarts about once, so each iteration also carries
    (batch - 1) / osl prefills. Disaggregated: prefill then ``osl`` decode iterations at the decode workers'
    batch; when the prefill workers cannot keep up (their requests/s below the loop's), the cycle stretches
    to what they complete. An aggregated profile's dispatch hold (``dispatch_ms`` in its provenance) adds to each
    request's time and to nothing else (the engine is not busy). Pure."""
    osl = max(1.0, osl)
    ctx = isl + osl / 2
    if "worker" in profiles:
        p = profiles["worker"]
        batch = math.ceil(concurrency / max(1, replicas.get("worker", 1)))
        prefill = p.ttft_ms(isl)
        itl = p.itl_ms(batch * ctx, ctx) + (batch - 1) * prefill / osl
        return (dispatch_ms_of(p.provenance, "worker") + prefill + osl * itl) / 1000.0
    pre, dec = profiles["prefill"], profiles["decode"]
    batch = math.ceil(concurrency / max(1, replicas.get("decode", 1)))
    prefill = pre.ttft_ms(isl)
    cycle = (prefill + osl * dec.itl_ms(batch * ctx, ctx)) / 1000.0
    prefill_rate = max(1, replicas.get("prefill", 1)) / (prefill / 1000.0)  # requests/s the prefill workers do
    return max(cycle, concurrency / prefill_rate)


@dataclass(frozen=True)
class StepTimer:
    """An experiment's twin as the plan uses it: seconds per request at (concurrency, isl, osl)."""

    profiles: dict[str, TimingProfile]
    replicas: dict[str, int]
    label: str

    def __call__(self, concurrency: int, isl: float, osl: float) -> float:
        return request_seconds(self.profiles, self.replicas, concurrency, isl, osl)


def step_timer(twins: dict[str, RoleTwin], exp: Any) -> StepTimer | None:
    """The plan's timer of ``exp`` from its resolved twins (None when a role has none)."""
    profiles = {r: t.profile for r, t in twins.items() if t.profile is not None}
    if len(profiles) != len(twins) or not profiles:
        return None
    replicas: dict[str, int] = {}
    for g in exp.workers:
        replicas[g.role] = replicas.get(g.role, 0) + g.replicas
    return StepTimer(profiles, replicas, next(iter(twins.values())).label)


def plan_timers(spec: Any, workspace: Path) -> dict[str, StepTimer]:
    """Each experiment's :class:`StepTimer` for ``benchctl plan``: its twin from the workspace's store, or made
    in memory (nothing written); experiments without a twin (``off``, no data for the GPU) are left out."""
    out: dict[str, StepTimer] = {}
    pools = {p.name: p for p in spec.pools}
    for exp in spec.experiments:
        try:
            timer = step_timer(resolve(workspace, pools, spec.served_weights(exp).name, exp, write=False), exp)
        except (ProfileError, OSError):
            continue
        if timer is not None:
            out[exp.name] = timer
    return out
