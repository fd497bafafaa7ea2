"""Turn one AIPerf 0.13 artifact directory into lake rows (``steps``, ``requests``, ``server_metrics``).

Rules (see docs/FACTS.md, "AIPerf 0.13.0", for the file formats):

- ``steps``: one row per AIPerf invocation; every statistic is copied from
  ``profile_export_aiperf.json`` (never recomputed). Only the unit is normalised: latencies to ms
  (``ms`` copied as is; ``s``/``sec``/``us``/``ns`` converted), durations to s; any other unit of a
  copied metric is an :class:`ArtifactError`. When AIPerf wrote no summary (every request failed:
  AIPerf exits 1) the step is still recorded, ``status = "failed"``, with ``error_count`` and
  ``error_summary_json`` built from the error records.
- ``requests``: one row per record of ``profile_export.jsonl`` whose
  ``metadata.benchmark_phase == "profiling"``; warm-up records are excluded, failed requests kept.
- ``server_metrics``: ``server_metrics_export.json`` (AIPerf's "hybrid" export, schema 1.1: metrics
  keyed by name, one series per endpoint + labels, type-specific ``stats`` and, for histograms,
  ``buckets``) flattened to one row per metric x labels x stat. Warm-up metrics and per-timeslice
  stats are not ingested. Our own Prometheus scrapes go through :func:`parse_prometheus_text` and
  :func:`prometheus_scrape_rows` (stats ``before``/``after``/``delta``).

Malformed input raises :class:`ArtifactError` naming the file, the line and what was expected.
One exception, decided here: a LAST line of ``profile_export.jsonl`` that has no terminating newline
and does not parse is a write cut short (AIPerf killed mid-record); it is dropped and reported in
``IngestResult.warnings`` and in the step's ``ingest_warnings_json``. A bad line that ends with a
newline, or any bad line before the last, is an error.

Pure: standard library and benchctl only (no pyarrow, no AWS).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchctl.datasets import line_of_session
from benchctl.errors import ArtifactError
from benchctl.schema import json_text, normalize_row

SUMMARY_JSON = "profile_export_aiperf.json"
RECORDS_JSONL = "profile_export.jsonl"
SERVER_METRICS_JSON = "server_metrics_export.json"
PHASE_MANIFEST_JSON = "phase_manifest.json"

# unit -> factor to the target unit. A factor of None means "the target unit: copy unchanged".
_TO_MS: dict[str, float | None] = {"ms": None, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "µs": 1e-3, "ns": 1e-6}
_TO_S: dict[str, float | None] = {"s": None, "sec": None, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_TOKENS: dict[str, float | None] = {"tokens": None}
_REQUESTS: dict[str, float | None] = {"requests": None}
_PERCENT: dict[str, float | None] = {"%": None}
_TOKENS_PER_S: dict[str, float | None] = {"tokens/sec": None, "tokens/s": None}
_REQUESTS_PER_S: dict[str, float | None] = {"requests/sec": None, "requests/s": None}
_RATIO: dict[str, float | None] = {"ratio": None}
_TOKENS_PER_S_USER: dict[str, float | None] = {"tokens/sec/user": None, "tokens/s/user": None}

_EPOCH = datetime(1970, 1, 1)
_SWEEP_DIR = re.compile(r"^concurrency_(\d+)$")


@dataclass(frozen=True)
class StepContext:
    """What the caller knows about the step (from the plan); AIPerf's files supply the rest."""

    campaign_id: str
    experiment: str
    mode: str
    workload: str
    step_id: str
    step_index: int
    repeat: int
    concurrency: int | None = None
    isl: int | None = None
    osl: int | None = None
    random_seed: int | None = None
    artifact_uri: str | None = None
    workload_kind: str | None = None  # the workload's ``kind`` (e.g. concurrency_sweep); views filter on it
    # further ``steps`` columns known before the run: variant, distribution, prefix_ratio(_actual),
    # turns, dataset_sha256, dataset_uri, slo_ttft_ms, slo_itl_ms
    step_fields: dict[str, Any] = field(default_factory=dict)
    # requested (input, output) lengths per request, in dataset order, when the step sent a dataset
    requested_lengths: tuple[tuple[int, int], ...] | None = None


@dataclass
class IngestResult:
    steps: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    server_metrics: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def extend(self, other: IngestResult) -> None:
        self.steps.extend(other.steps)
        self.requests.extend(other.requests)
        self.server_metrics.extend(other.server_metrics)
        self.warnings.extend(other.warnings)

    def tables(self) -> dict[str, list[dict[str, Any]]]:
        """Rows by lake table name (what :meth:`benchctl.lake.LocalLake.write` takes)."""
        return {"steps": self.steps, "requests": self.requests, "server_metrics": self.server_metrics}


# --------------------------------------------------------------------------------------------------
# public entry points


def ingest_artifacts(
    artifact_dir: Path, ctx: StepContext, *, sources: dict[str, str] | None = None
) -> IngestResult:
    """Parse one AIPerf artifact directory into lake rows.

    ``sources`` maps a server-metrics endpoint URL (``http://host:port/metrics``) to the name stored
    in ``server_metrics.source`` (``frontend``, ``worker-0``...); unmapped endpoints get ``host:port``.
    """
    artifact_dir = Path(artifact_dir)
    if not artifact_dir.is_dir():
        raise ArtifactError(f"{artifact_dir}: expected an AIPerf artifact directory, found none")
    result = IngestResult()
    warnings = result.warnings

    records_path = artifact_dir / RECORDS_JSONL
    records: list[tuple[int, dict[str, Any]]] = []
    if records_path.is_file():
        records, rec_warnings = _read_records(records_path)
        warnings.extend(rec_warnings)
    profiling = [(ln, r) for ln, r in records if _phase(records_path, ln, r) == "profiling"]

    summary_path = artifact_dir / SUMMARY_JSON
    manifest = _read_manifest(artifact_dir / PHASE_MANIFEST_JSON)
    if summary_path.is_file():
        summary = _read_json_object(summary_path)
        if not records_path.is_file():
            warnings.append(f"{records_path}: missing; no per-request rows for this step")
        step = _step_from_summary(summary_path, summary, ctx, manifest, profiling)
    else:
        step = _failed_step(
            artifact_dir,
            ctx=ctx,
            manifest=manifest,
            profiling=profiling,
            have_records=records_path.is_file(),
            warnings=warnings,
        )

    result.requests = [
        _lake_row("requests", _request_row(records_path, ln, i, rec, ctx), f"{records_path}:{ln}")
        for i, (ln, rec) in enumerate(profiling)
    ]
    sm_path = artifact_dir / SERVER_METRICS_JSON
    if sm_path.is_file():
        result.server_metrics = [
            _lake_row("server_metrics", row, str(sm_path))
            for row in server_metrics_rows(sm_path, ctx, sources=sources)
        ]
    step["ingest_warnings_json"] = json_text(warnings) if warnings else None
    result.steps = [_lake_row("steps", step, str(artifact_dir))]
    return result


def _lake_row(table: str, row: dict[str, Any], where: str) -> dict[str, Any]:
    """``row`` checked against the lake schema; a value the lake cannot hold (e.g. an integer beyond
    64 bits) is an ArtifactError naming the file it came from, not a failure later at write time."""
    try:
        return normalize_row(table, row)
    except ValueError as err:
        raise ArtifactError(f"{where}: {err}") from None


def ingest_sweep(
    sweep_dir: Path, ctx: StepContext, *, sources: dict[str, str] | None = None
) -> list[IngestResult]:
    """Ingest an AIPerf concurrency sweep (``--concurrency 1,4,16``): one result per ``concurrency_N/``.

    Each sub-folder is a normal artifact directory, ingested with ``step_id = f"{ctx.step_id}-c{N}"``,
    ``concurrency = N`` and ``artifact_uri`` suffixed with ``/concurrency_N``; results come in
    increasing N, one step each (write each with ``part_name`` = its step id). ``sweep_aggregate/``
    and ``aggregate/`` (AIPerf's cross-run summaries) are not ingested: the lake keeps AIPerf's
    per-run statistics only.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ArtifactError(f"{sweep_dir}: expected an AIPerf sweep directory, found none")
    runs = sorted(
        (int(m.group(1)), p) for p in sweep_dir.iterdir() if p.is_dir() and (m := _SWEEP_DIR.match(p.name))
    )
    if not runs:
        raise ArtifactError(
            f"{sweep_dir}: expected concurrency_<N>/ sub-folders (AIPerf --concurrency a,b,c), found none"
        )
    results = []
    for n, path in runs:
        uri = f"{ctx.artifact_uri.rstrip('/')}/{path.name}" if ctx.artifact_uri else None
        sub = replace(ctx, step_id=f"{ctx.step_id}-c{n}", concurrency=n, artifact_uri=uri)
        results.append(ingest_artifacts(path, sub, sources=sources))
    return results


def is_sweep_dir(path: Path) -> bool:
    """True when ``path`` holds AIPerf sweep sub-folders (``concurrency_N/``) rather than one run."""
    path = Path(path)
    return path.is_dir() and any(p.is_dir() and _SWEEP_DIR.match(p.name) for p in path.iterdir())


# --------------------------------------------------------------------------------------------------
# reading files


def _decode_error(path: Path, data: bytes, exc: UnicodeDecodeError) -> ArtifactError:
    line = data[: exc.start].count(b"\n") + 1
    return ArtifactError(
        f"{path}:{line}: expected UTF-8 text, found byte 0x{data[exc.start]:02x} that is not UTF-8"
    )


def _read_json_object(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _decode_error(path, data, exc) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(
            f"{path}:{exc.lineno}: expected a JSON object, got invalid JSON ({exc.msg} at column {exc.colno})"
        ) from None
    if not isinstance(obj, dict):
        raise ArtifactError(f"{path}:1: expected a JSON object, got a JSON {type(obj).__name__}")
    return obj


def _read_records(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
    """Every record of a JSONL file with its 1-based line number, and warnings."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    ends_with_newline = data.endswith(b"\n")
    if ends_with_newline:
        lines.pop()  # the empty string after the final newline
    records: list[tuple[int, dict[str, Any]]] = []
    warnings: list[str] = []
    last = len(lines)
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        truncated_tail = lineno == last and not ends_with_newline
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if truncated_tail:  # a write cut short: drop the last line, say so
                warnings.append(_truncated_warning(path, lineno, len(raw)))
                continue
            if isinstance(exc, UnicodeDecodeError):
                raise ArtifactError(
                    f"{path}:{lineno}: expected UTF-8 text, found byte 0x{raw[exc.start]:02x} "
                    f"at column {exc.start + 1} that is not UTF-8"
                ) from None
            raise ArtifactError(
                f"{path}:{lineno}: expected one JSON object per line (an AIPerf record), "
                f"got invalid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise ArtifactError(
                f"{path}:{lineno}: expected an AIPerf record (a JSON object with a 'metadata' object)"
            )
        records.append((lineno, obj))
    return records, warnings


def _truncated_warning(path: Path, lineno: int, size: int) -> str:
    return (
        f"{path}:{lineno}: last line is cut short ({size} bytes, no newline, not valid JSON): "
        "dropped as an interrupted write"
    )


def _read_manifest(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    manifest = _read_json_object(path)
    phases = manifest.get("phases")
    if phases is not None and not isinstance(phases, list):
        raise ArtifactError(f"{path}: expected 'phases' to be a list of phase objects")
    return manifest


def _phase(path: Path, lineno: int, rec: dict[str, Any]) -> str:
    phase = rec["metadata"].get("benchmark_phase")
    if not isinstance(phase, str):
        raise ArtifactError(
            f"{path}:{lineno}: expected metadata.benchmark_phase ('warmup' or 'profiling') in the record"
        )
    return phase


# --------------------------------------------------------------------------------------------------
# values and units


# ``loc`` is where a value sits, "file" or "file:line"; ``what`` names the value inside it.


def _number(loc: Path | str, what: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArtifactError(f"{loc}: {what}: expected a number, got {value!r:.80}")
    return value


def _convert(loc: Path | str, what: str, value: Any, unit: Any, units: dict[str, float | None]) -> float:
    value = _number(loc, what, value)
    if not isinstance(unit, str) or unit not in units:
        raise ArtifactError(f"{loc}: {what}: unknown unit {unit!r}; expected one of {sorted(units)}")
    factor = units[unit]
    return float(value) if factor is None else float(value) * factor


def _as_int(loc: Path | str, what: str, value: float | None) -> int | None:
    if value is None:
        return None
    if not math.isfinite(value) or not float(value).is_integer():
        raise ArtifactError(f"{loc}: {what}: expected a whole number, got {value!r}")
    if not -(2**63) <= int(value) < 2**63:
        raise ArtifactError(f"{loc}: {what}: {value:.3g} does not fit a 64-bit integer")
    return int(value)


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
    return _convert(path, f"{metric}.{stat}", value, m["unit"], units)


def _ns_to_dt(ns: Any, where: str = "timestamp") -> datetime | None:
    if isinstance(ns, bool) or not isinstance(ns, int):
        return None
    try:
        return _EPOCH + timedelta(microseconds=ns // 1000)  # integer maths: no float rounding
    except OverflowError:
        raise ArtifactError(f"{where}: {ns} ns since the epoch is not a time a datetime can hold") from None


def _profiling_window(
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
            return _ns_to_dt(min(starts), PHASE_MANIFEST_JSON), _ns_to_dt(max(ends), PHASE_MANIFEST_JSON)
    starts = [r["metadata"].get("request_start_ns") for _, r in profiling]
    ends = [r["metadata"].get("request_end_ns") for _, r in profiling]
    starts = [s for s in starts if isinstance(s, int) and not isinstance(s, bool)]
    ends = [e for e in ends if isinstance(e, int) and not isinstance(e, bool)]
    return (_ns_to_dt(min(starts), RECORDS_JSONL) if starts else None,
            _ns_to_dt(max(ends), RECORDS_JSONL) if ends else None)


def _iso_utc(value: Any) -> datetime | None:
    """AIPerf's summary ``start_time``: naive ISO text written in the host's zone, taken as UTC."""
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        return None
    return dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo else dt


# --------------------------------------------------------------------------------------------------
# steps


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


def _step_from_summary(
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
            step[f"{ours}_{s}_ms"] = stat(theirs, s, _TO_MS)

    error_summary = summary.get("error_summary")
    if error_summary is None:
        error_summary = []
    if not isinstance(error_summary, list):
        raise ArtifactError(f"{path}: error_summary: expected a list of {{error_details, count}} objects")
    error_count = _as_int(path, "error_request_count.avg", stat("error_request_count", "avg", _REQUESTS))
    if error_count is None:
        error_count = 0
        for i, e in enumerate(error_summary):
            what = f"error_summary[{i}].count"
            if not isinstance(e, dict):
                raise ArtifactError(
                    f"{path}: error_summary[{i}]: expected an {{error_details, count}} object"
                )
            error_count += _as_int(path, what, float(_number(path, what, e.get("count")))) or 0
    request_count = _as_int(path, "request_count.avg", stat("request_count", "avg", _REQUESTS))

    started, ended = _profiling_window(manifest, profiling)
    step.update(
        request_count=request_count,
        error_count=error_count,
        completed_count=_as_int(
            path, "completed_request_count.avg", stat("completed_request_count", "avg", _REQUESTS)
        ),
        output_tokens_per_s=stat("output_token_throughput", "avg", _TOKENS_PER_S),
        request_throughput_per_s=stat("request_throughput", "avg", _REQUESTS_PER_S),
        total_output_tokens=_as_int(
            path, "total_output_tokens.avg", stat("total_output_tokens", "avg", _TOKENS)
        ),
        benchmark_duration_s=stat("benchmark_duration", "avg", _TO_S),
        output_token_throughput_per_user_p50=stat(
            "output_token_throughput_per_user", "p50", _TOKENS_PER_S_USER
        ),
        cache_read_tokens_total=_as_int(
            path,
            "total_usage_prompt_cache_read_tokens.avg",
            stat("total_usage_prompt_cache_read_tokens", "avg", _TOKENS),
        ),
        aiperf_good_request_fraction=stat("good_request_fraction", "avg", _RATIO),
        aiperf_version=_str_or_none(summary.get("aiperf_version")),
        benchmark_id=_str_or_none(summary.get("benchmark_id")),
        started_at=started or _iso_utc(summary.get("start_time")),
        ended_at=ended or _iso_utc(summary.get("end_time")),
        status="succeeded" if (request_count or 0) > 0 else "failed",
        was_cancelled=summary.get("was_cancelled")
        if isinstance(summary.get("was_cancelled"), bool)
        else None,
        error_summary_json=json_text(error_summary),
    )
    return step


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _failed_step(
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
    started, ended = _profiling_window(manifest, profiling)
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


# --------------------------------------------------------------------------------------------------
# requests


def _rec_metric(
    path: Path, lineno: int, metrics: dict[str, Any], name: str, units: dict[str, float | None]
) -> float | None:
    m = metrics.get(name)
    if m is None:
        return None
    if not isinstance(m, dict) or "value" not in m:
        raise ArtifactError(f"{path}:{lineno}: metrics.{name}: expected {{'value': ..., 'unit': ...}}")
    if m["value"] is None:
        return None
    return _convert(f"{path}:{lineno}", f"metrics.{name}", m["value"], m.get("unit"), units)


def _request_row(
    path: Path, lineno: int, index: int, rec: dict[str, Any], ctx: StepContext
) -> dict[str, Any]:
    md = rec["metadata"]
    metrics = rec.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise ArtifactError(f"{path}:{lineno}: expected 'metrics' to be an object of {{value, unit}}")

    def metric(name: str, units: dict[str, float | None]) -> float | None:
        return _rec_metric(path, lineno, metrics, name, units)

    def tokens(name: str) -> int | None:
        return _as_int(f"{path}:{lineno}", f"metrics.{name}", metric(name, _TOKENS))

    def int_md(key: str) -> int | None:
        v = md.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def str_md(key: str) -> str | None:
        v = md.get(key)
        return v if isinstance(v, str) else None

    err = rec.get("error")
    if err is not None and not isinstance(err, dict):
        raise ArtifactError(f"{path}:{lineno}: expected 'error' to be an object with type and message")
    err = err or {}
    code = err.get("code")
    isl = tokens("input_sequence_length")
    if isl is None:
        isl = tokens("error_isl")  # failed requests carry the ISL they were sent with here
    requested_isl, requested_osl = ctx.isl, ctx.osl
    if ctx.requested_lengths is not None:
        # a generated dataset: each line's session id comes back as the conversation id
        line = line_of_session(str_md("conversation_id"))
        if line is None or line >= len(ctx.requested_lengths):
            raise ArtifactError(
                f"{path}:{lineno}: metadata.conversation_id {md.get('conversation_id')!r} names no line of "
                f"the step's dataset ({len(ctx.requested_lengths)} lines, ids line-000000..)"
            )
        requested_isl, requested_osl = ctx.requested_lengths[line]
    return {
        "campaign_id": ctx.campaign_id,
        "experiment": ctx.experiment,
        "step_id": ctx.step_id,
        "repeat": ctx.repeat,
        "request_index": index,
        "x_request_id": str_md("x_request_id"),
        "conversation_id": str_md("conversation_id"),
        "turn_index": int_md("turn_index"),
        "worker_id": str_md("worker_id"),
        "start_ns": int_md("request_start_ns"),
        "end_ns": int_md("request_end_ns"),
        "ttft_ms": metric("time_to_first_token", _TO_MS),
        "itl_ms": metric("inter_token_latency", _TO_MS),
        "request_latency_ms": metric("request_latency", _TO_MS),
        "isl": isl,
        "osl": tokens("output_sequence_length"),
        "requested_isl": requested_isl,
        "requested_osl": requested_osl,
        "cached_tokens": tokens("usage_prompt_cache_read_tokens"),
        "output_tokens_per_s_user": metric("output_token_throughput_per_user", _TOKENS_PER_S_USER),
        "error_code": code if isinstance(code, int) and not isinstance(code, bool) else None,
        "error_type": _str_or_none(err.get("type")),
        "error_message": _str_or_none(err.get("message")),
        "was_cancelled": md.get("was_cancelled") if isinstance(md.get("was_cancelled"), bool) else None,
    }


# --------------------------------------------------------------------------------------------------
# server metrics


def default_source(endpoint_url: str | None) -> str:
    """``host:port`` of a metrics URL: the source name when the caller gave none."""
    if not endpoint_url:
        return "unknown"
    parts = urlsplit(endpoint_url)
    return parts.netloc or endpoint_url


def _server_row(
    ctx: StepContext,
    *,
    source: str,
    endpoint_url: str | None,
    metric: str,
    metric_type: str | None,
    unit: str | None,
    labels: dict[str, str],
    stat: str,
    value: float,
) -> dict[str, Any]:
    return {
        "campaign_id": ctx.campaign_id,
        "experiment": ctx.experiment,
        "step_id": ctx.step_id,
        "repeat": ctx.repeat,
        "source": source,
        "endpoint_url": endpoint_url,
        "metric": metric,
        "metric_type": metric_type,
        "unit": unit,
        "labels_json": json_text(labels),
        "stat": stat,
        "value": float(value),
    }


def server_metrics_rows(
    path: Path, ctx: StepContext, *, sources: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Flatten AIPerf's ``server_metrics_export.json`` (profiling phase) into server_metrics rows.

    Format (AIPerf 0.13, export schema 1.1, checked on a real run)::

        {"metrics": {"<name>": {"type": "gauge|counter|histogram|unknown", "unit": ..., "description": ...,
                                "series": [{"endpoint_url": ..., "labels": {...} | absent,
                                            "stats": {"avg": .., "p99": .., "total": .., ...},
                                            "buckets": {"0.1": n, "+Inf": n}   # histograms only
                                            }]}},
         "warmup_metrics": {...}, "summary": {...}, ...}

    Counters appear without their ``_total`` suffix (AIPerf strips it). Every numeric entry of
    ``stats`` becomes a row with that stat name; each histogram bucket becomes a row with
    ``stat = "bucket"`` and the bound as label ``le``. ``timeslices`` and ``warmup_metrics`` are skipped.
    """
    data = _read_json_object(path)
    metrics = data.get("metrics")
    if metrics is None:
        return []
    if not isinstance(metrics, dict):
        raise ArtifactError(f"{path}: expected 'metrics' to be an object keyed by metric name")
    sources = sources or {}
    rows: list[dict[str, Any]] = []
    for name, m in metrics.items():
        if not isinstance(m, dict) or not isinstance(m.get("series", []), list):
            raise ArtifactError(f"{path}: metrics.{name}: expected an object with a 'series' list")
        mtype = _str_or_none(m.get("type"))
        unit = _str_or_none(m.get("unit"))
        for i, series in enumerate(m.get("series", [])):
            where = f"metrics.{name}.series[{i}]"
            if not isinstance(series, dict):
                raise ArtifactError(f"{path}: {where}: expected an object with labels and stats")
            url = _str_or_none(series.get("endpoint_url"))
            source = sources.get(url, default_source(url)) if url else default_source(url)
            labels = series.get("labels") or {}
            if not isinstance(labels, dict):
                raise ArtifactError(f"{path}: {where}.labels: expected an object of label -> value")
            labels = {str(k): str(v) for k, v in labels.items()}
            stats = series.get("stats") or {}
            if not isinstance(stats, dict):
                raise ArtifactError(f"{path}: {where}.stats: expected an object of stat -> number")
            series_of = {"source": source, "endpoint_url": url, "metric": name, "metric_type": mtype, "unit": unit}
            for stat_name, value in stats.items():
                if value is not None:
                    v = _number(path, f"{where}.stats.{stat_name}", value)
                    rows.append(_server_row(ctx, **series_of, labels=labels, stat=stat_name, value=v))
            buckets = series.get("buckets") or {}
            if not isinstance(buckets, dict):
                raise ArtifactError(f"{path}: {where}.buckets: expected an object of bound -> count")
            for le, count in buckets.items():
                v = _number(path, f"{where}.buckets.{le}", count)
                rows.append(_server_row(ctx, **series_of, labels={**labels, "le": str(le)}, stat="bucket", value=v))
    return rows


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_float(token: str) -> float:
    special = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
    low = token.lower()
    if low in special:
        return special[low]
    return float(token)


def _parse_prometheus(
    text: str, source: str
) -> tuple[list[tuple[str, dict[str, str], float]], dict[str, str]]:
    samples: list[tuple[str, dict[str, str], float]] = []
    types: dict[str, str] = {}
    for lineno, line in enumerate(text.split("\n"), start=1):  # not splitlines(): \x85 may sit in a label
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            parts = s.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue

        def fail(what: str, lineno: int = lineno, line: str = line) -> ArtifactError:
            return ArtifactError(
                f'{source}:{lineno}: expected a Prometheus sample \'name{{label="v",...}} value '
                f"[timestamp]', {what}: {line.strip()[:120]!r}"
            )

        m = _METRIC_NAME.match(s)
        if not m:
            raise fail("no metric name")
        name = m.group(0)
        pos = m.end()
        labels: dict[str, str] = {}
        if pos < len(s) and s[pos] == "{":
            pos += 1
            while True:
                while pos < len(s) and s[pos] in " \t":
                    pos += 1
                if pos < len(s) and s[pos] == "}":
                    pos += 1
                    break
                lm = _LABEL_NAME.match(s, pos)
                if not lm:
                    raise fail("bad label name")
                pos = lm.end()
                while pos < len(s) and s[pos] in " \t":
                    pos += 1
                if s[pos : pos + 2] != '="':
                    raise fail(f"expected '=\"' after label {lm.group(0)!r}")
                pos += 2
                buf: list[str] = []
                while True:
                    if pos >= len(s):
                        raise fail("unterminated label value")
                    c = s[pos]
                    if c == "\\" and pos + 1 < len(s):
                        buf.append(_ESCAPES.get(s[pos + 1], "\\" + s[pos + 1]))
                        pos += 2
                        continue
                    if c == '"':
                        pos += 1
                        break
                    buf.append(c)
                    pos += 1
                labels[lm.group(0)] = "".join(buf)
                while pos < len(s) and s[pos] in " \t":
                    pos += 1
                if pos < len(s) and s[pos] == ",":
                    pos += 1
                    continue
                if pos < len(s) and s[pos] == "}":
                    pos += 1
                    break
                raise fail("expected ',' or '}' in the label set")
        rest = s[pos:]
        if "#" in rest:  # OpenMetrics exemplar
            rest = rest.split("#", 1)[0]
        fields = rest.split()
        if not fields or len(fields) > 2:
            raise fail("expected a value and at most a timestamp after the labels")
        try:
            value = _parse_float(fields[0])
        except ValueError:
            raise fail(f"value {fields[0]!r} is not a number") from None
        samples.append((name, labels, value))
    return samples, types


def parse_prometheus_text(
    text: str, *, source: str = "<prometheus text>"
) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition as ``(metric, labels, value)``, in file order.

    Comments (``# HELP``/``# TYPE``) and blank lines are skipped; histogram series keep their sample
    names (``x_bucket`` with label ``le``, ``x_sum``, ``x_count``); timestamps and OpenMetrics exemplars
    are ignored; ``NaN``/``+Inf``/``-Inf`` are floats. A malformed line raises :class:`ArtifactError`
    naming ``source`` and the line number.
    """
    return _parse_prometheus(text, source)[0]


def _family_type(name: str, types: dict[str, str]) -> str | None:
    if name in types:
        return types[name]
    for suffix in ("_bucket", "_sum", "_count", "_total", "_created"):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return types[name[: -len(suffix)]]
    return None


def prometheus_scrape_rows(
    ctx: StepContext,
    source: str,
    before: str | None,
    after: str,
    *,
    endpoint_url: str | None = None,
) -> list[dict[str, Any]]:
    """server_metrics rows from our own scrapes of one ``/metrics`` endpoint around a step.

    Each sample of ``after`` gives a row ``stat = "after"``; with ``before`` also ``"before"`` and
    ``"delta"`` (after - before, for every sample present in both: meaningful for counters and
    histogram ``_bucket``/``_sum``/``_count``, informative for gauges). Non-finite values are skipped.
    """
    where = endpoint_url or source
    after_samples, types = _parse_prometheus(after, f"{where} (after)")
    before_values: dict[tuple[str, str], float] = {}
    if before is not None:
        before_samples, before_types = _parse_prometheus(before, f"{where} (before)")
        types = {**before_types, **types}
        before_values = {(n, json_text(lbl) or "{}"): v for n, lbl, v in before_samples}
    rows: list[dict[str, Any]] = []
    for name, labels, value in after_samples:
        mtype = _family_type(name, types)
        key = (name, json_text(labels) or "{}")
        stats: list[tuple[str, float]] = [("after", value)]
        if key in before_values:
            b = before_values[key]
            stats = [("before", b), ("after", value), ("delta", value - b)]
        for stat, v in stats:
            if math.isfinite(v):
                rows.append(
                    normalize_row(
                        "server_metrics",
                        _server_row(
                            ctx,
                            source=source,
                            endpoint_url=endpoint_url,
                            metric=name,
                            metric_type=mtype,
                            unit=None,
                            labels=labels,
                            stat=stat,
                            value=v,
                        ),
                    )
                )
    return rows
