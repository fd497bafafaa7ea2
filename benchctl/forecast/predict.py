"""Predicting before spending: what aiconfigurator expects each concurrency-sweep step to measure.

aiconfigurator (``aiconfigurator==0.12.0``, with ``aiconfigurator-core`` and its measured performance
tables for ``a100_sxm`` and ``l40s`` with vLLM) rates one serving configuration in about a second,
offline: its model configs are built in (we never let it reach Hugging Face). We call its Python API
in-process (:func:`aiconfigurator.cli.api.cli_estimate`, what ``aiconfigurator cli estimate`` runs),
once per unique configuration (a module-level cache: repeats and equal steps cost nothing).

How a step becomes an aiconfigurator configuration (stated, so the figures can be judged):

* aggregated: aiconfigurator's ``agg`` estimate rates ONE replica (``tp`` GPUs) at a batch size. The
  step's ``concurrency`` requests spread over the experiment's replicas, so the batch is
  ``ceil(concurrency / replicas)`` (the most-loaded replica: TTFT/ITL are its figures).
* disaggregated: the ``disagg`` estimate with the prefill and decode groups' TP and replica counts,
  prefill batch 1, decode batch ``ceil(concurrency / decode replicas)``.
* The batch a worker can hold: at most :data:`VLLM_MAX_NUM_SEQS` (vLLM's default ``max_num_seqs`` on A100
  and L40S) and at most what its KV cache holds (the largest batch whose memory estimate fits, found from
  aiconfigurator's memory at batch 1 and at the requested batch: linear in the batch). A step asking more
  is rated at that batch and the rest wait (below).
* Closed loop (AIPerf keeps ``concurrency`` requests in flight, no think time): the serving side completes
  at most ``X`` requests/s, aggregated ``replicas x batch / R0`` (``R0`` = TTFT + (OSL - 1) x ITL, one
  request's time at the rated batch), disaggregated ``min(prefill workers x prefill rate, decode workers x
  decode rate)`` (aiconfigurator's per-worker rates, without its rate-matching degradation factors). A
  request's cycle is ``R = max(R0, concurrency / X)``; what exceeds ``R0`` is time spent waiting before its
  first token, so the predicted TTFT is ``R - (OSL - 1) x ITL``. This is where a saturated prefill stage
  (long inputs, few prefill workers) or a full batch shows up; aiconfigurator's own TTFT models no queue.
  When the prefill stage is the bottleneck the decode batch is smaller than rated, so the ITL used is high
  and the queueing it leaves to TTFT low: a TTFT past the SLO is not overstated.
* Expert parallelism off (``etp = tp``, ``ep = 1``): vLLM's default, and what our workers run.
* Throughput is aiconfigurator's ``tokens/s`` scaled from its in-flight count to the step's
  ``concurrency`` (with a queue: ``X`` x its tokens per request); per GPU means over ALL the experiment's
  GPUs (idle replicas included), as measured.
* Memory: aiconfigurator's GiB per GPU (weights, activations, the batch's KV cache, NCCL, 3.5 GiB
  slack); it fits when within vLLM's default ``gpu_memory_utilization`` (0.9) of the pool's GPU
  memory, parsed from ``gpu_kind`` (``A100-40GB`` -> 40). aiconfigurator's ``a100_sxm`` is the 80 GB
  part; p4d has 40 GB A100s with less HBM bandwidth (1.56 vs 2.04 TB/s), so memory is checked here
  and decode-bound figures there are likely optimistic.
* The SLO (``spec.slo``): a step is within it when its predicted TTFT and ITL are both within the bounds
  that are set (``within_slo``; None without an SLO or without figures). The prediction is one figure per
  step, not a distribution: measured goodput (the share of requests within the SLO) decides, this only
  designs the sweep so that it reaches past the SLO.

* The frontend's first-token floor: Dynamo's HTTP frontend up to 1.6.1 leaves Nagle's algorithm on the
  client's connection, so on a kept-alive connection (AIPerf reuses pooled connections) a first token ready
  sooner than the client's delayed ACK of the response headers (Linux: at least 40 ms) reaches the client with
  that ACK (docs/FACTS.md, "The frontend's first token on a kept-alive connection"). The predicted TTFT is what
  AIPerf will measure: at least :data:`FRONTEND_FIRST_TOKEN_FLOOR_MS` for a Dynamo version up to 1.6.1 (the
  spec's ``kubernetes.dynamo_runtime_version`` or ``dynamo_image`` tag; what the local engine runs), the
  engine's own figure in the note. A later version is not known either way: no floor, said so.

Not modelled: routing (KV router), KV-cache offload, prefix-cache hits, the KV transfer's time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchctl.forecast.aic import latest_version, quiet
from benchctl.forecast.gpus import (
    VLLM_GPU_MEMORY_UTILIZATION,
    gpu_memory_gb,
    gpu_system,
)
from benchctl.planning.plan import CampaignPlan
from benchctl.planning.reach import VLLM_MAX_NUM_SEQS
from benchctl.spec.deployment import Experiment, PoolSpec, WorkerGroup
from benchctl.spec.model import CampaignSpec
from benchctl.spec.settings import Slo

BACKEND = "vllm"
AIC_VERSION = "0.12.0"  # the pin in requirements-dev.txt; the installed version is what `source` reports
LABEL = "PREDICTED by aiconfigurator, not measured"
# What a first token ready sooner than the client's delayed ACK reaches AIPerf at, through Dynamo <= 1.6.1's
# frontend (no TCP_NODELAY on the client's socket: ai-dynamo/dynamo lib/llm/src/http/service/service_v2.rs; PR
# #14643, open, adds it): Linux's TCP_DELACK_MIN (40 ms, on a jiffy timer) after the response headers, which
# leave a few ms after the request; AIPerf 0.13 measures 47-49 ms on the local engine (a keep-alive http.client
# 43.5 ms: AIPerf counts from before its send), docs/FACTS.md.
FRONTEND_FIRST_TOKEN_FLOOR_MS = 48.0
FRONTEND_FLOOR_UP_TO = (1, 6, 1)  # the newest Dynamo checked to have the stall (the pinned one)


def source() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("aiconfigurator")
    except PackageNotFoundError:  # pragma: no cover - it is a dev requirement
        v = f"{AIC_VERSION} (not installed)"
    return f"aiconfigurator {v} estimate"


# -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Config:
    """One aiconfigurator estimate: the cache key (everything that changes its answer)."""

    model: str
    mode: str  # "agg" | "disagg"
    system: str
    decode_system: str | None
    isl: int
    osl: int
    tp: int  # agg: the replica's TP; disagg: prefill TP
    batch: int  # agg: per-replica batch; disagg: per-decode-worker batch
    prefill_workers: int = 0
    decode_tp: int = 0
    decode_workers: int = 0


# cache of estimates: config -> raw result dict, or the error text when aiconfigurator refused it
_CACHE: dict[_Config, dict[str, Any] | str] = {}


def _builtin_model(model: str) -> bool:
    """True when aiconfigurator ships the model's config (no Hugging Face download needed)."""
    if Path(model).is_dir():  # a local model directory with its config.json
        return True
    with quiet():
        from aiconfigurator.sdk.common import DefaultHFModels
    return model in DefaultHFModels


def _estimate(cfg: _Config) -> dict[str, Any] | str:
    """aiconfigurator's raw result for ``cfg`` (cached), or why it gave none."""
    if cfg in _CACHE:
        return _CACHE[cfg]
    try:
        with quiet():
            from aiconfigurator.cli.api import cli_estimate

            kwargs: dict[str, Any] = {
                "mode": cfg.mode, "backend_name": BACKEND, "isl": cfg.isl, "osl": cfg.osl,
                "batch_size": cfg.batch, "tp_size": cfg.tp, "moe_tp_size": cfg.tp, "moe_ep_size": 1,
            }
            # the version it would resolve itself, resolved once (one version for both roles' systems: when
            # they differ, cli_estimate resolves each, as before)
            versions = {latest_version(cfg.system, BACKEND), latest_version(cfg.decode_system or cfg.system, BACKEND)}
            if len(versions) == 1 and None not in versions:
                kwargs["backend_version"] = versions.pop()
            if cfg.mode == "disagg":
                kwargs.update(
                    decode_system_name=cfg.decode_system,
                    prefill_tp_size=cfg.tp, prefill_moe_tp_size=cfg.tp, prefill_moe_ep_size=1,
                    prefill_batch_size=1, prefill_num_workers=cfg.prefill_workers,
                    decode_tp_size=cfg.decode_tp, decode_moe_tp_size=cfg.decode_tp, decode_moe_ep_size=1,
                    decode_batch_size=cfg.batch, decode_num_workers=cfg.decode_workers,
                )
            res = cli_estimate(cfg.model, cfg.system, **kwargs)
        raw = dict(res.raw)
        raw["ttft"], raw["tpot"] = float(res.ttft), float(res.tpot)
        raw["_backend_version"] = res.backend_version
        if res.kv_cache_warning:
            raw["_kv_cache_warning"] = str(res.kv_cache_warning)
        out: dict[str, Any] | str = raw
    except Exception as err:  # aiconfigurator refuses unsupported shapes (AssertionError, data missing, ...)
        out = f"aiconfigurator gave no estimate: {type(err).__name__}: {' '.join(str(err).split())[:240]}"
    _CACHE[cfg] = out
    return out


# -------------------------------------------------------------------------------------------------
def _one_shape(groups: list[WorkerGroup]) -> tuple[str, int, int] | None:
    """(pool, tp, replicas) when all groups share pool and TP, else None (not predicted)."""
    shapes = {(g.pool, g.tensor_parallel) for g in groups}
    if len(shapes) != 1:
        return None
    (pool, tp), = shapes
    return pool, tp, sum(g.replicas for g in groups)


@dataclass(frozen=True)
class _Layout:
    """How an experiment maps onto aiconfigurator, or why it does not (``problem``)."""

    mode: str
    system: str | None = None
    decode_system: str | None = None
    tp: int | None = None  # the row's tp: every group's TP when they agree, else None
    p_pool: PoolSpec | None = None
    p_tp: int = 0
    p_replicas: int = 0
    d_pool: PoolSpec | None = None
    d_tp: int = 0
    d_replicas: int = 0
    problem: str | None = None


def _layout(spec: CampaignSpec, exp: Experiment) -> _Layout:
    if exp.mode == "aggregated":
        shape = _one_shape(list(exp.workers))
        if shape is None:
            return _Layout("agg", problem="worker groups differ in pool or TP: aiconfigurator rates one shape")
        pool_name, tp, replicas = shape
        pool = spec.pool(pool_name)
        system = gpu_system(pool)
        lay = _Layout("agg", system=system, tp=tp, p_pool=pool, p_tp=tp, p_replicas=replicas)
        if system is None:
            return _no_system(lay, pool)
        return lay
    pre = _one_shape([g for g in exp.workers if g.role == "prefill"])
    dec = _one_shape([g for g in exp.workers if g.role == "decode"])
    if pre is None or dec is None:
        return _Layout("disagg", problem="prefill or decode groups differ in pool or TP: not predicted")
    p_pool, d_pool = spec.pool(pre[0]), spec.pool(dec[0])
    lay = _Layout(
        "disagg", system=gpu_system(p_pool), decode_system=gpu_system(d_pool),
        tp=pre[1] if pre[1] == dec[1] else None,
        p_pool=p_pool, p_tp=pre[1], p_replicas=pre[2], d_pool=d_pool, d_tp=dec[1], d_replicas=dec[2],
    )
    if lay.system is None:
        return _no_system(lay, p_pool)
    if lay.decode_system is None:
        return _no_system(lay, d_pool)
    return lay


def _no_system(lay: _Layout, pool: PoolSpec) -> _Layout:
    return _Layout(
        lay.mode, system=lay.system, decode_system=lay.decode_system, tp=lay.tp,
        problem=(f"no aiconfigurator performance data for pool {pool.name} ({pool.gpu_kind}, "
                 f"{pool.instance_type}): only A100 (a100_sxm) and L40S (l40s) are mapped"),
    )


def _fits(mem_gib: float | None, pool: PoolSpec | None) -> tuple[bool | None, str]:
    if mem_gib is None or pool is None:
        return None, "memory not estimated"
    cap = gpu_memory_gb(pool)
    if cap is None:
        return None, f"{mem_gib:.1f} GiB/GPU; {pool.gpu_kind} names no memory size, fit unchecked"
    budget = VLLM_GPU_MEMORY_UTILIZATION * cap
    ok = mem_gib <= budget
    return ok, (f"{mem_gib:.1f} GiB/GPU vs {budget:.1f} ({VLLM_GPU_MEMORY_UTILIZATION:g} x {cap:g}) on "
                f"{pool.name}: {'fits' if ok else 'DOES NOT FIT'}")


def _fitting_batch(make: Callable[[int], _Config], mem_of: Callable[[dict[str, Any]], float],
                   pool: PoolSpec | None, want: int) -> tuple[int, str | None]:
    """The batch one worker is rated at, and why it is less than ``want`` (None when it is not).

    At most :data:`VLLM_MAX_NUM_SEQS`; then, when that batch's memory estimate does not fit the pool's GPU
    (:func:`_fits`), the largest batch whose KV cache does: aiconfigurator's memory is linear in the batch (each
    request's KV), so batch 1 and the too-large batch give the slope; at most two more estimates confirm it."""
    batch = min(want, VLLM_MAX_NUM_SEQS)
    why = (f"vLLM runs at most {VLLM_MAX_NUM_SEQS} requests per worker (max_num_seqs): {want} asked, the rest wait"
           if want > VLLM_MAX_NUM_SEQS else None)
    cap = None if pool is None else gpu_memory_gb(pool)
    raw = _estimate(make(batch))
    # aiconfigurator refuses a batch whose KV exceeds even its 80 GB part ("OOM: the model ... does not fit")
    oom = isinstance(raw, str) and "OOM" in raw
    if cap is None or batch == 1 or (isinstance(raw, str) and not oom):
        return batch, why
    budget = VLLM_GPU_MEMORY_UTILIZATION * cap
    if isinstance(raw, dict) and mem_of(raw) <= budget:
        return batch, why
    one = _estimate(make(1))
    if isinstance(one, str) or mem_of(one) > budget:
        return batch, why  # not even one request fits: rated as asked, reported as not fitting
    # the slope per request: from the batch asked, or (refused as OOM) from batch 2
    other, at = (raw, batch) if isinstance(raw, dict) else (_estimate(make(2)), 2)
    if isinstance(other, str):
        return batch, why
    per_request = (mem_of(other) - mem_of(one)) / (at - 1)
    # 1e-9: a slope of 0.2 GiB must not lose a whole request to floating point ((36 - 18) / 0.2 = 89.999...)
    fit = batch if per_request <= 0 else max(1, min(batch - 1, int(1 + (budget - mem_of(one)) / per_request + 1e-9)))
    for _ in range(2):
        got = _estimate(make(fit))
        if fit == 1 or isinstance(got, str) or mem_of(got) <= budget:
            break
        fit -= 1
    return fit, (f"the KV cache holds about {fit} requests per worker within {budget:.1f} GiB/GPU, not {want}: "
                 "the rest wait")


def frontend_floor_ms(spec: CampaignSpec) -> tuple[float | None, str]:
    """The first-token floor of the spec's Dynamo frontend (module doc) and, when there is none, why."""
    version = spec.kubernetes.dynamo_version
    if tuple(int(x) for x in version.split(".")) <= FRONTEND_FLOOR_UP_TO:
        return FRONTEND_FIRST_TOKEN_FLOOR_MS, ""
    return None, (f"Dynamo {version}: not checked for the first-token stall of 1.6.1's frontend (no floor "
                  "applied)")


def _predict_step(model: str, exp: Experiment, lay: _Layout, concurrency: int, isl: int,
                  osl: int, slo: Slo, floor: tuple[float | None, str] = (None, "")) -> dict[str, Any]:
    """The predicted figures and note of one (experiment, concurrency, isl, osl); ``floor``: the frontend's
    first-token floor (:func:`frontend_floor_ms`)."""
    empty: dict[str, Any] = {
        "predicted_ttft_ms": None, "predicted_itl_ms": None, "predicted_output_tokens_per_s": None,
        "predicted_tokens_per_s_per_gpu": None, "memory_gb_per_gpu": None, "fits_memory": None,
        "predicted_queue_ms": None, "within_slo": None,
    }
    if lay.problem is not None:
        return {**empty, "note": lay.problem}
    if not _builtin_model(model):
        return {**empty, "note": f"model {model} has no built-in aiconfigurator config (offline only)"}
    assert lay.system is not None
    system = lay.system
    if lay.mode == "agg":
        want = math.ceil(concurrency / lay.p_replicas)

        def make(b: int) -> _Config:
            return _Config(model, "agg", system, None, isl, osl, lay.p_tp, b)

        batch, cap_note = _fitting_batch(make, lambda raw: float(raw["memory"]), lay.p_pool, want)
        shape = (f"agg: {lay.p_replicas} x tp{lay.p_tp} (etp{lay.p_tp} ep1) on {lay.system}, "
                 f"per-replica batch {want} = ceil({concurrency}/{lay.p_replicas})")
    else:
        want = math.ceil(concurrency / lay.d_replicas)

        def make(b: int) -> _Config:
            return _Config(model, "disagg", system, lay.decode_system, isl, osl, lay.p_tp, b,
                           prefill_workers=lay.p_replicas, decode_tp=lay.d_tp, decode_workers=lay.d_replicas)

        batch, cap_note = _fitting_batch(make, lambda raw: float(raw["(d)memory"]), lay.d_pool, want)
        shape = (f"disagg: prefill {lay.p_replicas} x tp{lay.p_tp} on {lay.system} (batch 1), decode "
                 f"{lay.d_replicas} x tp{lay.d_tp} on {lay.decode_system}, per-worker batch {want} = "
                 f"ceil({concurrency}/{lay.d_replicas}); etp=tp ep1")
    if batch != want:
        shape += f"; rated at batch {batch}"
    raw = _estimate(make(batch))
    if isinstance(raw, str):
        return {**empty, "note": f"{shape}; {raw}"}
    ttft0, itl = float(raw["ttft"]), float(raw["tpot"])
    decode_s = (osl - 1) * itl / 1000.0
    r0 = ttft0 / 1000.0 + decode_s  # one request's time at the rated batch, no waiting
    if lay.mode == "agg":
        capacity = lay.p_replicas * batch / r0
        limit = f"{lay.p_replicas} replicas x batch {batch} / {r0:.2f} s"
    else:
        prefill = lay.p_replicas * float(raw["(p)seq/s/worker"])
        decode = lay.d_replicas * float(raw["(d)seq/s/worker"])
        capacity = min(prefill, decode)
        limit = (f"prefill {prefill:.2f} vs decode {decode:.2f} requests/s: the "
                 f"{'prefill' if prefill < decode else 'decode'} stage limits")
    cycle = max(r0, concurrency / capacity)
    queue_s = cycle - r0 if cycle - r0 > 1e-6 * r0 else 0.0
    per_request = float(raw["tokens/s"]) / float(raw["seq/s"])
    if queue_s:
        tokens_s = capacity * per_request
    else:
        in_flight = float(raw.get("concurrency") or 0) or float(batch)
        tokens_s = float(raw["tokens/s"]) * concurrency / in_flight
    ttft = ttft0 + queue_s * 1000.0
    if lay.mode == "agg":
        mem = float(raw["memory"])
        fits, mem_note = _fits(mem, lay.p_pool)
    else:
        p_mem, d_mem = float(raw["(p)memory"]), float(raw["(d)memory"])
        p_fits, p_note = _fits(p_mem, lay.p_pool)
        d_fits, d_note = _fits(d_mem, lay.d_pool)
        mem = max(p_mem, d_mem)
        fits = None if p_fits is None or d_fits is None else (p_fits and d_fits)
        mem_note = f"prefill {p_note}; decode {d_note}"
    notes = [shape, f"vllm {raw.get('_backend_version')} perf data", mem_note]
    if cap_note:
        notes.append(cap_note)
    if queue_s:
        notes.append(f"closed loop: at most {capacity:.2f} requests/s ({limit}); {concurrency} in flight wait "
                     f"{queue_s * 1000:.0f} ms before their first token")
    if "a100_sxm" in (lay.system, lay.decode_system):
        notes.append("a100_sxm data is the 80 GB part (more HBM bandwidth than A100-40GB): likely optimistic")
    if raw.get("_kv_cache_warning"):
        notes.append(str(raw["_kv_cache_warning"]))
    floor_ms, why_none = floor
    if floor_ms is not None and ttft < floor_ms:
        notes.append(f"TTFT {ttft:.1f} ms at the engine; {floor_ms:.0f} ms as AIPerf measures it through Dynamo "
                     "1.6.1's frontend (a first token ready sooner waits for the client's delayed ACK)")
        ttft = floor_ms
    elif why_none:
        notes.append(why_none)
    return {
        "predicted_ttft_ms": ttft,
        "predicted_itl_ms": itl,
        "predicted_output_tokens_per_s": tokens_s,
        "predicted_tokens_per_s_per_gpu": tokens_s / exp.gpus(),
        "memory_gb_per_gpu": mem,
        "fits_memory": fits,
        "predicted_queue_ms": queue_s * 1000.0,
        "within_slo": within_slo(slo, ttft, itl),
        "note": "; ".join(notes),
    }


def within_slo(slo: Slo, ttft_ms: float | None, itl_ms: float | None) -> bool | None:
    """Whether a predicted TTFT and ITL are both within the SLO's bounds that are set (None without an SLO or
    without figures)."""
    bounds = [(v, b) for v, b in ((ttft_ms, slo.ttft_ms), (itl_ms, slo.itl_ms)) if b is not None]
    if not bounds or any(v is None for v, _ in bounds):
        return None
    return all(v is not None and v <= b for v, b in bounds)


def predict_plan(spec: CampaignSpec, plan: CampaignPlan, campaign_id: str) -> list[dict[str, Any]]:
    """One ``predictions`` row per concurrency-sweep step of each experiment of ``plan``, in plan order.

    Deterministic; never raises for what aiconfigurator cannot rate (unknown GPU, unsupported TP, a
    model without a built-in config): such rows carry null figures and a note saying why.
    """
    rows: list[dict[str, Any]] = []
    src = source()
    floor = frontend_floor_ms(spec)
    for ep in (e for e in plan.experiments if "arm" not in e.tune):  # tune pilots: benchctl.forecast.tune
        exp = spec.experiment(ep.lake_name)
        lay = _layout(spec, exp)
        for step in ep.steps:
            if step.kind != "concurrency_sweep" or step.concurrency is None or step.isl is None or step.osl is None:
                continue
            figures = _predict_step(spec.served_weights(exp).name, exp, lay, step.concurrency, step.isl, step.osl,
                                    spec.slo, floor)
            rows.append({
                "campaign_id": campaign_id,
                "experiment": ep.lake_name,
                "step_id": step.step_id,
                "workload": step.workload,
                "concurrency": step.concurrency,
                "isl": step.isl,
                "osl": step.osl,
                "system": lay.system,
                "decode_system": lay.decode_system,
                "mode": exp.mode,
                "tp": lay.tp,
                **figures,
                "source": src,
            })
    return rows
