"""``profile_export_aiperf.json`` (and ``phase_manifest.json``): the ``steps`` row of one AIPerf run, every
statistic copied from AIPerf's summary (never recomputed), only units normalised; a run without a summary
(every request failed) is a failed step built from the records. Pure: standard library and benchctl only."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchctl.errors import ArtifactError
from benchctl.lake.ingest.base import (
    PHASE_MANIFEST_JSON,
    RATIO,
    RECORDS_JSONL,
    REQUESTS,
    REQUESTS_PER_S,
    SUMMARY_JSON,
    TO_MS,
    TO_S,
    TOKENS,
    TOKENS_PER_S,
    TOKENS_PER_S_USER,
    StepContext,
    as_int,
    convert,
    ns_to_dt,
    number,
    str_or_none,
)
from benchctl.lake.schema import json_text


def _stat(
    path: Path, summary: dict[str, Any], metric: str, stat: str, units: dict[str, float | None]
) -> float | None:
    """``summary[metric][stat]`` in the target unit, None when AIPerf did not report it."""
    m = summary.get(metric)
    if m is None:
        return None
    if not isinstance(m, dict) or "unit" not in m:
        raise ArtifactError(f"{path}: {metric}: expected an object with 'unit' and statistics")
    value = m.get(stat)
    if value is None:
        return None
    return convert(path, f"{metric}.{stat}", value, m["unit"], units)




def profiling_window(
    manifest: dict[str, Any] | None, profiling: list[tuple[int, dict[str, Any]]]
) -> tuple[datetime | None, datetime | None]:
    """Start/end of the profiling phase: phase_manifest.json first, else the records."""
    if manifest:
        spans = [
            (p.get("start_ns"), p.get("end_ns"))
            for p in manifest.get("phases") or []
            if isinstance(p, dict) and p.get("phase_kind") == "profiling"
        ]
        starts = [s for s, _ in spans if isinstance(s, int)]
        ends = [e for _, e in spans if isinstance(e, int)]
        if starts and ends:
            return ns_to_dt(min(starts), PHASE_MANIFEST_JSON), ns_to_dt(max(ends), PHASE_MANIFEST_JSON)
    starts = [r["metadata"].get("request_start_ns") for _, r in profiling]
    ends = [r["metadata"].get("request_end_ns") for _, r in profiling]
    starts = [s for s in starts if isinstance(s, int) and not isinstance(s, bool)]
    ends = [e for e in ends if isinstance(e, int) and not isinstance(e, bool)]
    return (ns_to_dt(min(starts), RECORDS_JSONL) if starts else None,
            ns_to_dt(max(ends), RECORDS_JSONL) if ends else None)


def _iso_utc(value: Any) -> datetime | None:
    """AIPerf's summary ``start_time``: naive ISO text written in the host's zone, taken as UTC."""
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    return dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo else dt



def _base_step(ctx: StepContext) -> dict[str, Any]:
    return {
        "campaign_id": ctx.campaign_id,
        "experiment": ctx.experiment,
        "mode": ctx.mode,
        "workload": ctx.workload,
        "workload_kind": ctx.workload_kind,
        "step_id": ctx.step_id,
        "step_index": ctx.step_index,
        "repeat": ctx.repeat,
        "concurrency": ctx.concurrency,
        "isl": ctx.isl,
        "osl": ctx.osl,
        "artifact_uri": ctx.artifact_uri,
        "random_seed": ctx.random_seed,
        **ctx.step_fields,
    }


def _summary_concurrency(summary: dict[str, Any]) -> int | None:
    phases = (summary.get("input_config") or {}).get("phases") or []
    for p in phases:
        if isinstance(p, dict) and p.get("kind") == "profiling":
            c = p.get("concurrency")
            if isinstance(c, int) and not isinstance(c, bool):
                return c
    return None


def sampling_sent(summary: dict[str, Any]) -> dict[str, Any]:
    """The sampling and thinking settings AIPerf sent with every request, from its own record of the run
    (``input_config.endpoint.extra``, the ``--extra-inputs`` it merged into each request body): temperature,
    top_p, sampling_seed, thinking (``chat_template_kwargs.enable_thinking``). None where it sent none."""
    extra = ((summary.get("input_config") or {}).get("endpoint") or {}).get("extra") or {}
    if not isinstance(extra, dict):
        return {"temperature": None, "top_p": None, "sampling_seed": None, "thinking": None}

    def real(v: Any) -> float | None:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    seed = extra.get("seed")
    kwargs = extra.get("chat_template_kwargs")
    thinking = kwargs.get("enable_thinking") if isinstance(kwargs, dict) else None
    return {"temperature": real(extra.get("temperature")), "top_p": real(extra.get("top_p")),
            "sampling_seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
            "thinking": thinking if isinstance(thinking, bool) else None}


def step_from_summary(
    path: Path,
    summary: dict[str, Any],
    ctx: StepContext,
    manifest: dict[str, Any] | None,
    profiling: list[tuple[int, dict[str, Any]]],
) -> dict[str, Any]:
    def stat(metric: str, s: str, units: dict[str, float | None]) -> float | None:
        return _stat(path, summary, metric, s, units)

    step = _base_step(ctx)
    if step["concurrency"] is None:
        step["concurrency"] = _summary_concurrency(summary)
    if step["random_seed"] is None:
        seed = (summary.get("run_info") or {}).get("random_seed")
        step["random_seed"] = seed if isinstance(seed, int) and not isinstance(seed, bool) else None

    for ours, theirs in (
        ("ttft", "time_to_first_token"),
        ("itl", "inter_token_latency"),
        ("request_latency", "request_latency"),
    ):
        for s in ("p50", "p90", "p99", "avg"):
            step[f"{ours}_{s}_ms"] = stat(theirs, s, TO_MS)

    error_summary = summary.get("error_summary")
    if error_summary is None:
        error_summary = []
    if not isinstance(error_summary, list):
        raise ArtifactError(f"{path}: error_summary: expected a list of {{error_details, count}} objects")
    error_count = as_int(path, "error_request_count.avg", stat("error_request_count", "avg", REQUESTS))
    if error_count is None:
        error_count = 0
        for i, e in enumerate(error_summary):
            what = f"error_summary[{i}].count"
            if not isinstance(e, dict):
                raise ArtifactError(
                    f"{path}: error_summary[{i}]: expected an {{error_details, count}} object"
                )
            count = number(path, what, e.get("count"))
            if count < 0:
                raise ArtifactError(f"{path}: {what}: {count!r} is negative; a count of errors is >= 0")
            error_count += as_int(path, what, float(count)) or 0
    request_count = as_int(path, "request_count.avg", stat("request_count", "avg", REQUESTS))

    started, ended = profiling_window(manifest, profiling)
    step.update(
        request_count=request_count,
        error_count=error_count,
        completed_count=as_int(
            path, "completed_request_count.avg", stat("completed_request_count", "avg", REQUESTS)
        ),
        output_tokens_per_s=stat("output_token_throughput", "avg", TOKENS_PER_S),
        request_throughput_per_s=stat("request_throughput", "avg", REQUESTS_PER_S),
        total_output_tokens=as_int(
            path, "total_output_tokens.avg", stat("total_output_tokens", "avg", TOKENS)
        ),
        benchmark_duration_s=stat("benchmark_duration", "avg", TO_S),
        output_token_throughput_per_user_p50=stat(
            "output_token_throughput_per_user", "p50", TOKENS_PER_S_USER
        ),
        cache_read_tokens_total=as_int(
            path,
            "total_usage_prompt_cache_read_tokens.avg",
            stat("total_usage_prompt_cache_read_tokens", "avg", TOKENS),
        ),
        aiperf_good_request_fraction=stat("good_request_fraction", "avg", RATIO),
        aiperf_version=str_or_none(summary.get("aiperf_version")),
        benchmark_id=str_or_none(summary.get("benchmark_id")),
        started_at=started or _iso_utc(summary.get("start_time")),
        ended_at=ended or _iso_utc(summary.get("end_time")),
        status="succeeded" if (request_count or 0) > 0 else "failed",
        was_cancelled=summary.get("was_cancelled")
        if isinstance(summary.get("was_cancelled"), bool)
        else None,
        error_summary_json=json_text(error_summary),
        **sampling_sent(summary),
    )
    return step



def failed_step(
    artifact_dir: Path,
    *,
    ctx: StepContext,
    manifest: dict[str, Any] | None,
    profiling: list[tuple[int, dict[str, Any]]],
    have_records: bool,
    warnings: list[str],
) -> dict[str, Any]:
    """AIPerf wrote no summary (it exits 1 when every request failed): a failed step from the records."""
    step = _base_step(ctx)
    started, ended = profiling_window(manifest, profiling)
    step.update(status="failed", started_at=started, ended_at=ended)
    if not have_records:
        msg = f"no {SUMMARY_JSON} and no {RECORDS_JSONL} in {artifact_dir}"
        warnings.append(msg)
        step["error_summary_json"] = json_text(
            [{"count": 0, "error_details": {"type": "MissingArtifacts", "message": msg}}]
        )
        return step
    warnings.append(
        f"{artifact_dir / SUMMARY_JSON}: missing (AIPerf exits 1 when every request fails); "
        f"step recorded as failed from {RECORDS_JSONL}"
    )
    groups: Counter[tuple[Any, Any, Any]] = Counter()
    for _, rec in profiling:
        err = rec.get("error")
        if isinstance(err, dict):
            groups[(err.get("code"), err.get("type"), err.get("message"))] += 1
    summary = []
    for (code, etype, message), n in sorted(groups.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        details = {k: v for k, v in (("code", code), ("type", etype), ("message", message)) if v is not None}
        summary.append({"error_details": details, "count": n})
    n_errors = sum(groups.values())
    step.update(
        error_count=n_errors,
        request_count=len(profiling) - n_errors,
        completed_count=len(profiling),
        error_summary_json=json_text(summary),
    )
    return step

