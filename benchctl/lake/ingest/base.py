"""What reading AIPerf 0.13 artifacts shares: the file names, what the caller knows about a step
(``StepContext``), the result (``IngestResult``), reading a JSON file with errors that name it, and values
in the units the lake holds. Pure: standard library and benchctl only."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchctl.errors import ArtifactError
from benchctl.lake.schema import normalize_row
from benchctl.strict_json import loads_strict

SUMMARY_JSON = "profile_export_aiperf.json"
RECORDS_JSONL = "profile_export.jsonl"
SERVER_METRICS_JSON = "server_metrics_export.json"
PHASE_MANIFEST_JSON = "phase_manifest.json"
RUNNER_RECORD = "runner-record.json"  # not AIPerf's: the load runner's record of the run (benchctl.load_runner)

# unit -> factor to the target unit. A factor of None means "the target unit: copy unchanged".
TO_MS: dict[str, float | None] = {"ms": None, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "µs": 1e-3, "ns": 1e-6}
TO_S: dict[str, float | None] = {"s": None, "sec": None, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
TOKENS: dict[str, float | None] = {"tokens": None}
REQUESTS: dict[str, float | None] = {"requests": None}
TOKENS_PER_S: dict[str, float | None] = {"tokens/sec": None, "tokens/s": None}
REQUESTS_PER_S: dict[str, float | None] = {"requests/sec": None, "requests/s": None}
RATIO: dict[str, float | None] = {"ratio": None}
TOKENS_PER_S_USER: dict[str, float | None] = {"tokens/sec/user": None, "tokens/s/user": None}

EPOCH = datetime(1970, 1, 1)


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
        """Rows by lake table name (what :meth:`benchctl.lake.paths.LocalLake.write` takes)."""
        return {"steps": self.steps, "requests": self.requests, "server_metrics": self.server_metrics}



def lake_row(table: str, row: dict[str, Any], where: str) -> dict[str, Any]:
    """``row`` checked against the lake schema; a value the lake cannot hold (e.g. an integer beyond
    64 bits) is an ArtifactError naming the file it came from, not a failure later at write time."""
    try:
        return normalize_row(table, row)
    except ValueError as err:
        raise ArtifactError(f"{where}: {err}") from None



def _decode_error(path: Path, data: bytes, exc: UnicodeDecodeError) -> ArtifactError:
    line = data[: exc.start].count(b"\n") + 1
    return ArtifactError(
        f"{path}:{line}: expected UTF-8 text, found byte 0x{data[exc.start]:02x} that is not UTF-8"
    )


def read_json_object(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _decode_error(path, data, exc) from None
    try:
        obj = loads_strict(text, str(path))
    except json.JSONDecodeError as exc:
        raise ArtifactError(
            f"{path}:{exc.lineno}: expected a JSON object, got invalid JSON ({exc.msg} at column {exc.colno})"
        ) from None
    if not isinstance(obj, dict):
        raise ArtifactError(f"{path}:1: expected a JSON object, got a JSON {type(obj).__name__}")
    return obj



def read_manifest(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    manifest = read_json_object(path)
    phases = manifest.get("phases")
    if phases is not None and not isinstance(phases, list):
        raise ArtifactError(f"{path}: expected 'phases' to be a list of phase objects")
    for i, phase in enumerate(phases or []):
        if not isinstance(phase, dict):
            raise ArtifactError(f"{path}: phases[{i}]: expected a phase object, got a JSON {type(phase).__name__}")
        for key in ("start_ns", "end_ns"):
            epoch_ns(path, f"phases[{i}].{key}", phase.get(key))
        start, end = phase.get("start_ns"), phase.get("end_ns")
        if isinstance(start, int) and isinstance(end, int) and end < start:
            raise ArtifactError(f"{path}: phases[{i}].end_ns: {end} is before its start_ns {start}")
    return manifest



# --------------------------------------------------------------------------------------------------
# values and units


# ``loc`` is where a value sits, "file" or "file:line"; ``what`` names the value inside it.


def number(loc: Path | str, what: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ArtifactError(f"{loc}: {what}: expected a number, got {value!r:.80}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ArtifactError(f"{loc}: {what}: {value!r} is not a finite number")
    return value


def epoch_ns(loc: Path | str, what: str, value: Any) -> int | None:
    """``value`` if it is absent (None) or whole nanoseconds since the epoch (an integer >= 0): a time, never a
    string, a float or a negative number silently read as none."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ArtifactError(f"{loc}: {what}: expected whole nanoseconds since the epoch (an integer >= 0), "
                            f"got {value!r:.80}")
    return value


def convert(loc: Path | str, what: str, value: Any, unit: Any, units: dict[str, float | None]) -> float:
    """``value`` in the target unit of ``units``. Every unit table here measures a latency, a duration, a count,
    a rate or a ratio: a negative value is one no AIPerf writes, refused rather than averaged."""
    value = number(loc, what, value)
    if value < 0:
        raise ArtifactError(f"{loc}: {what}: {value!r} is negative; a latency, duration, count, rate or ratio "
                            "is >= 0")
    if not isinstance(unit, str) or unit not in units:
        raise ArtifactError(f"{loc}: {what}: unknown unit {unit!r}; expected one of {sorted(units)}")
    factor = units[unit]
    return float(value) if factor is None else float(value) * factor


def as_int(loc: Path | str, what: str, value: float | None) -> int | None:
    if value is None:
        return None
    if not math.isfinite(value) or not float(value).is_integer():
        raise ArtifactError(f"{loc}: {what}: expected a whole number, got {value!r}")
    if not -(2**63) <= int(value) < 2**63:
        raise ArtifactError(f"{loc}: {what}: {value:.3g} does not fit a 64-bit integer")
    return int(value)




def ns_to_dt(ns: Any, where: str = "timestamp") -> datetime | None:
    if isinstance(ns, bool) or not isinstance(ns, int):
        return None
    try:
        return EPOCH + timedelta(microseconds=ns // 1000)  # integer maths: no float rounding
    except OverflowError:
        raise ArtifactError(f"{where}: {ns} ns since the epoch is not a time a datetime can hold") from None



def str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None

