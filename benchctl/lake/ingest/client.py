"""The ``client_*`` columns of a ``steps`` row: is AIPerf keeping up (``benchctl.lake.client_load``)? From the
profiling records (issue lag), AIPerf's summary (credit-to-start latency, effective concurrency) and the load
runner's ``runner-record.json`` beside them (AIPerf's CPU; absent: not measured). Pure: standard library and
benchctl only."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from benchctl.errors import ArtifactError
from benchctl.lake import client_load
from benchctl.lake.ingest.base import EPOCH, REQUESTS, RUNNER_RECORD, TO_MS, convert
from benchctl.strict_json import loads_strict


def _epoch_s(dt: Any) -> float | None:
    return (dt - EPOCH).total_seconds() if isinstance(dt, datetime) else None


def _summary_stat(path: Path, summary: dict[str, Any] | None, metric: str, stat: str,
                  units: dict[str, float | None]) -> float | None:
    m = (summary or {}).get(metric)
    if not isinstance(m, dict) or m.get(stat) is None:
        return None
    return convert(path, f"{metric}.{stat}", m[stat], m.get("unit"), units)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _spans(profiling: list[tuple[int, dict[str, Any]]]) -> tuple[list[tuple[int | None, int, int]], bool]:
    """(credit_issued_ns or None, start_ns, end_ns) of every profiling record with a start and an end, and
    whether any is a later turn of a conversation."""
    spans: list[tuple[int | None, int, int]] = []
    later_turn = False
    for _, rec in profiling:
        md = rec["metadata"]
        start, end, turn = _int(md.get("request_start_ns")), _int(md.get("request_end_ns")), _int(md.get("turn_index"))
        later_turn |= turn is not None and turn > 0
        if start is not None and end is not None:
            spans.append((_int(md.get("credit_issued_ns")), start, end))
    return spans, later_turn


def read_cpu(artifact_dir: Path) -> tuple[list[client_load.Sample], float | None] | None:
    """The load runner's CPU samples of AIPerf's process tree, or None when it recorded none."""
    path = artifact_dir / RUNNER_RECORD
    if not path.is_file():
        return None
    try:
        record = loads_strict(path.read_text(encoding="utf-8"), str(path))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ArtifactError(f"{path}: expected the load runner's JSON record ({exc})") from None
    if not isinstance(record, dict):
        raise ArtifactError(f"{path}: expected a JSON object (the load runner's record)")
    if record.get("cpu") is None:
        return None
    try:
        return client_load.check_cpu_record(record["cpu"], str(path))
    except ValueError as exc:
        raise ArtifactError(str(exc)) from None


def client_columns(artifact_dir: Path, summary_path: Path, summary: dict[str, Any] | None,
                   profiling: list[tuple[int, dict[str, Any]]], step: dict[str, Any]) -> dict[str, Any]:
    """The ``client_*`` columns of ``step`` (a ``steps`` row with its statistics and profiling window)."""
    spans, later_turn = _spans(profiling)
    multi_turn = later_turn or step.get("workload_kind") == "multi_turn"
    out: dict[str, Any] = client_load.lag_figures(spans, step.get("concurrency"), step.get("request_latency_p50_ms"),
                                                  multi_turn=multi_turn)
    out["client_credit_to_start_p95_ms"] = _summary_stat(summary_path, summary, "credit_to_start_latency", "p95", TO_MS)
    out["client_effective_concurrency"] = _summary_stat(summary_path, summary, "effective_concurrency", "avg", REQUESTS)
    out["client_cpu_cores"] = out["client_cpu_cores_available"] = out["client_cpu_wait_fraction"] = None
    cpu = read_cpu(artifact_dir)
    start, end = _epoch_s(step.get("started_at")), _epoch_s(step.get("ended_at"))
    if cpu is not None and start is not None and end is not None:
        samples, cores = cpu
        out["client_cpu_cores"] = client_load.cpu_cores_used(samples, start, end)
        out["client_cpu_cores_available"] = cores
        out["client_cpu_wait_fraction"] = client_load.cpu_wait_fraction(samples, start, end)
    return out
