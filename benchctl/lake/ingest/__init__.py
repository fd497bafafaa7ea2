"""Turn one AIPerf 0.13 artifact directory into lake rows (``steps``, ``requests``, ``server_metrics``).

Rules (see docs/FACTS.md, "AIPerf 0.13.0", for the file formats):

- ``steps``: one row per AIPerf invocation; every statistic is copied from
  ``profile_export_aiperf.json`` (never recomputed). Only the unit is normalised: latencies to ms
  (``ms`` copied as is; ``s``/``sec``/``us``/``ns`` converted), durations to s; any other unit of a
  copied metric is an :class:`ArtifactError`. When AIPerf wrote no summary (every request failed:
  AIPerf exits 1) the step is still recorded, ``status = "failed"``, with ``error_count`` and
  ``error_summary_json`` built from the error records.
- ``steps.client_*``: whether AIPerf kept up (``benchctl.lake.client_load``): the issue lag computed from the
  records, AIPerf's CPU from the load runner's ``runner-record.json`` when it is there (else not measured).
- ``requests``: one row per record of ``profile_export.jsonl`` whose
  ``metadata.benchmark_phase == "profiling"``; warm-up records are excluded, failed requests kept.
- ``server_metrics``: ``server_metrics_export.json`` (AIPerf's "hybrid" export, schema 1.1: metrics
  keyed by name, one series per endpoint + labels, type-specific ``stats`` and, for histograms,
  ``buckets``) flattened to one row per metric x labels x stat. Warm-up metrics and per-timeslice
  stats are not ingested.

Malformed input raises :class:`ArtifactError` naming the file, the line and what was expected; so does input no
AIPerf writes, naming the field: non-finite numbers, duplicate keys and nesting beyond 64 (every file is parsed
by :func:`benchctl.strict_json.loads_strict`), negative latencies, durations, counts and rates (``base.convert``),
impossible server metrics (``server_metrics``: negative counters, values beyond +-1e30) and manifest or record
times that are not whole nanoseconds.
One exception, decided here: a LAST line of ``profile_export.jsonl`` that has no terminating newline
and does not parse is a write cut short (AIPerf killed mid-record); it is dropped and reported in
``IngestResult.warnings`` and in the step's ``ingest_warnings_json``. A bad line that ends with a
newline, or any bad line before the last, is an error.

One module per file it reads: ``summary`` (``steps``), ``records`` (``requests``), ``server_metrics``;
``base`` holds what they share. Pure: standard library and benchctl only (no pyarrow, no AWS).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchctl.errors import ArtifactError
from benchctl.lake.ingest.base import (
    PHASE_MANIFEST_JSON,
    RECORDS_JSONL,
    SERVER_METRICS_JSON,
    SUMMARY_JSON,
    IngestResult,
    StepContext,
    lake_row,
    read_json_object,
    read_manifest,
)
from benchctl.lake.ingest.client import client_columns
from benchctl.lake.ingest.records import phase_of, read_records, request_row
from benchctl.lake.ingest.server_metrics import default_source, server_metrics_rows
from benchctl.lake.ingest.summary import failed_step, step_from_summary
from benchctl.lake.schema import json_text

_SWEEP_DIR = re.compile(r"^concurrency_(\d+)\Z")

__all__ = ["PHASE_MANIFEST_JSON", "RECORDS_JSONL", "SERVER_METRICS_JSON", "SUMMARY_JSON", "IngestResult",
           "StepContext", "default_source", "ingest_artifacts", "ingest_sweep", "is_sweep_dir",
           "server_metrics_rows"]


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
        records, rec_warnings = read_records(records_path)
        warnings.extend(rec_warnings)
    profiling = [(ln, r) for ln, r in records if phase_of(records_path, ln, r) == "profiling"]

    summary_path = artifact_dir / SUMMARY_JSON
    manifest = read_manifest(artifact_dir / PHASE_MANIFEST_JSON)
    summary: dict[str, Any] | None = None
    if summary_path.is_file():
        summary = read_json_object(summary_path)
        if not records_path.is_file():
            warnings.append(f"{records_path}: missing; no per-request rows for this step")
        step = step_from_summary(summary_path, summary, ctx, manifest, profiling)
    else:
        step = failed_step(
            artifact_dir,
            ctx=ctx,
            manifest=manifest,
            profiling=profiling,
            have_records=records_path.is_file(),
            warnings=warnings,
        )

    result.requests = [
        lake_row("requests", request_row(records_path, ln, i, rec, ctx), f"{records_path}:{ln}")
        for i, (ln, rec) in enumerate(profiling)
    ]
    sm_path = artifact_dir / SERVER_METRICS_JSON
    if sm_path.is_file():
        result.server_metrics = [
            lake_row("server_metrics", row, str(sm_path))
            for row in server_metrics_rows(sm_path, ctx, sources=sources)
        ]
    step.update(client_columns(artifact_dir, summary_path, summary, profiling, step))
    step["ingest_warnings_json"] = json_text(warnings) if warnings else None
    result.steps = [lake_row("steps", step, str(artifact_dir))]
    return result



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

