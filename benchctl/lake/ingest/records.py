"""``profile_export.jsonl``: one ``requests`` row per record of the profiling phase (warm-up records are
excluded, failed requests kept); a last line cut short by a killed AIPerf is dropped with a warning.
Pure: standard library and benchctl only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchctl.errors import ArtifactError
from benchctl.lake.ingest.base import (
    TO_MS,
    TOKENS,
    TOKENS_PER_S_USER,
    StepContext,
    as_int,
    convert,
    epoch_ns,
    str_or_none,
)
from benchctl.strict_json import loads_strict

# A generated dataset's lines are sessions named by their line (benchctl.planning.datasets writes them):
# the records read them back.
SESSION_PREFIX = "line-"


def session_id(line: int) -> str:
    return f"{SESSION_PREFIX}{line:06d}"


def line_of_session(conversation_id: str | None) -> int | None:
    """The dataset line a request came from (its ``conversation_id``), or None for other requests."""
    if not conversation_id or not conversation_id.startswith(SESSION_PREFIX):
        return None
    digits = conversation_id[len(SESSION_PREFIX):]
    return int(digits) if digits.isdigit() else None


def read_records(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
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
            obj = loads_strict(raw.decode("utf-8"), f"{path}:{lineno}")
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


def phase_of(path: Path, lineno: int, rec: dict[str, Any]) -> str:
    phase = rec["metadata"].get("benchmark_phase")
    if not isinstance(phase, str):
        raise ArtifactError(
            f"{path}:{lineno}: expected metadata.benchmark_phase ('warmup' or 'profiling') in the record"
        )
    return phase



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
    return convert(f"{path}:{lineno}", f"metrics.{name}", m["value"], m.get("unit"), units)


def request_row(
    path: Path, lineno: int, index: int, rec: dict[str, Any], ctx: StepContext
) -> dict[str, Any]:
    md = rec["metadata"]
    metrics = rec.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise ArtifactError(f"{path}:{lineno}: expected 'metrics' to be an object of {{value, unit}}")

    def metric(name: str, units: dict[str, float | None]) -> float | None:
        return _rec_metric(path, lineno, metrics, name, units)

    def tokens(name: str) -> int | None:
        return as_int(f"{path}:{lineno}", f"metrics.{name}", metric(name, TOKENS))

    def int_md(key: str) -> int | None:
        v = md.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    for key in ("request_start_ns", "request_end_ns"):  # present: a time, never a silent NULL
        epoch_ns(f"{path}:{lineno}", f"metadata.{key}", md.get(key))

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
        "ttft_ms": metric("time_to_first_token", TO_MS),
        "itl_ms": metric("inter_token_latency", TO_MS),
        "request_latency_ms": metric("request_latency", TO_MS),
        "isl": isl,
        "osl": tokens("output_sequence_length"),
        "requested_isl": requested_isl,
        "requested_osl": requested_osl,
        "cached_tokens": tokens("usage_prompt_cache_read_tokens"),
        "output_tokens_per_s_user": metric("output_token_throughput_per_user", TOKENS_PER_S_USER),
        "error_code": code if isinstance(code, int) and not isinstance(code, bool) else None,
        "error_type": str_or_none(err.get("type")),
        "error_message": str_or_none(err.get("message")),
        "was_cancelled": md.get("was_cancelled") if isinstance(md.get("was_cancelled"), bool) else None,
    }


