"""Ingestion refuses what no AIPerf writes: non-finite numbers, negative latencies/durations/rates/counts,
duplicate keys, nesting beyond a bound, impossible server metrics, a manifest time that is not a time. Each
refusal is an ArtifactError naming the file and the field, and ``benchctl ingest`` exits 2 with it, no
traceback, the raw artifacts as they were and nothing written to the lake.

Every case mutates a copy of the real AIPerf 0.13.0 samples (tests/data/aiperf-0.13.0) in one place.
``CASES`` is also what the issue's before/after figure is measured with (run against the old tree)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchctl.cli.main import main
from benchctl.errors import ArtifactError
from benchctl.lake.ingest import (
    PHASE_MANIFEST_JSON,
    RECORDS_JSONL,
    SERVER_METRICS_JSON,
    SUMMARY_JSON,
    ingest_artifacts,
    server_metrics_rows,
)
from benchctl.strict_json import MAX_DEPTH, loads_strict
from tests.fakes.ports import SAMPLES
from tests.unit.test_ingest import CTX, SERVER_METRICS, artifact_dir, records  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]
PROFILING_LINE = 3  # the records fixture: warm-up, warm-up, then the first profiling record
DEEP = 100_000  # far past the C scanner's recursion limit: a RecursionError before the bound existed


def _literal(path: Path, edit: Callable[[Any], None], literal: str | None = None) -> None:
    """Rewrite a JSON file through ``edit``; a value set to "@@" is then written as ``literal`` (raw JSON)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    text = json.dumps(data)  # allow_nan: float('nan') is written NaN, as Python's json does
    path.write_text(text.replace('"@@"', literal) if literal is not None else text, encoding="utf-8")


def summary(edit: Callable[[dict[str, Any]], None], literal: str | None = None) -> Callable[[Path], None]:
    return lambda d: _literal(d / SUMMARY_JSON, edit, literal)


def record(edit: Callable[[dict[str, Any]], None], literal: str | None = None,
           text: Callable[[str], str] = lambda s: s) -> Callable[[Path], None]:
    """Edit the first profiling record (line PROFILING_LINE of profile_export.jsonl)."""

    def mutate(d: Path) -> None:
        lines = (d / RECORDS_JSONL).read_text(encoding="utf-8").splitlines()
        rec = json.loads(lines[PROFILING_LINE - 1])
        edit(rec)
        line = json.dumps(rec)
        lines[PROFILING_LINE - 1] = text(line.replace('"@@"', literal) if literal is not None else line)
        (d / RECORDS_JSONL).write_text("\n".join(lines) + "\n", encoding="utf-8")

    return mutate


def server(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def mutate(d: Path) -> None:
        data: dict[str, Any] = copy.deepcopy(SERVER_METRICS)
        edit(data["metrics"])
        (d / SERVER_METRICS_JSON).write_text(json.dumps(data), encoding="utf-8")

    return mutate


def manifest(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    return lambda d: _literal(d / PHASE_MANIFEST_JSON, edit)


def _set(*keys: str | int, to: Any) -> Callable[[Any], None]:
    def edit(obj: Any) -> None:
        for k in keys[:-1]:
            obj = obj[k]
        obj[keys[-1]] = to

    return edit


def _dup_metric(line: str) -> str:
    assert '"metrics": {' in line
    return line.replace('"metrics": {', '"metrics": {"request_latency": {"value": 1.0, "unit": "ms"}, ', 1)


NAN, INF = float("nan"), float("inf")
GAUGE, COUNTER, HIST = ("dynamo_frontend_inflight_requests", "dynamo_frontend_requests",
                        "dynamo_frontend_time_to_first_token_seconds")
REC = f"{RECORDS_JSONL}:{PROFILING_LINE}"

# (case, mutation, the file named, the field named, what the refusal says)
CASES: list[tuple[str, Callable[[Path], None], str, str, str]] = [
    ("summary NaN", summary(_set("time_to_first_token", "p50", to=NAN)), SUMMARY_JSON,
     "time_to_first_token.p50", "NaN is not a finite number"),
    ("summary Infinity", summary(_set("output_token_throughput", "avg", to=INF)), SUMMARY_JSON,
     "output_token_throughput.avg", "Infinity is not a finite number"),
    ("summary -Infinity", summary(_set("request_latency", "p99", to=-INF)), SUMMARY_JSON,
     "request_latency.p99", "-Infinity is not a finite number"),
    ("summary 1e400", summary(_set("benchmark_duration", "avg", to="@@"), "1e400"), SUMMARY_JSON,
     "benchmark_duration.avg", "1e400 is not a finite number"),
    ("record NaN", record(_set("metrics", "inter_token_latency", "value", to=NAN)), REC,
     "metrics.inter_token_latency.value", "NaN is not a finite number"),
    ("record 1e400", record(_set("metrics", "time_to_first_token", "value", to="@@"), "1e400"), REC,
     "metrics.time_to_first_token.value", "1e400 is not a finite number"),
    ("record -1e400", record(_set("metrics", "request_latency", "value", to="@@"), "-1e400"), REC,
     "metrics.request_latency.value", "-1e400 is not a finite number"),
    ("record 5000-digit integer", record(_set("metrics", "output_sequence_length", "value", to="@@"), "9" * 5000),
     REC, "metrics.output_sequence_length.value", "digits"),
    ("summary negative TTFT", summary(_set("time_to_first_token", "p50", to=-1.0)), SUMMARY_JSON,
     "time_to_first_token.p50", "is negative"),
    ("summary negative throughput", summary(_set("output_token_throughput", "avg", to=-558.0)), SUMMARY_JSON,
     "output_token_throughput.avg", "is negative"),
    ("summary negative duration", summary(_set("benchmark_duration", "avg", to=-3.0)), SUMMARY_JSON,
     "benchmark_duration.avg", "is negative"),
    ("summary negative count", summary(_set("request_count", "avg", to=-40.0)), SUMMARY_JSON,
     "request_count.avg", "is negative"),
    ("record negative latency", record(_set("metrics", "request_latency", "value", to=-5.0)), REC,
     "metrics.request_latency", "is negative"),
    ("record negative ITL", record(_set("metrics", "inter_token_latency", "value", to=-0.5)), REC,
     "metrics.inter_token_latency", "is negative"),
    ("record negative tokens", record(_set("metrics", "output_sequence_length", "value", to=-32)), REC,
     "metrics.output_sequence_length", "is negative"),
    ("record duplicate key", record(lambda r: None, text=_dup_metric), REC, "metrics: key 'request_latency'",
     "appears more than once"),
    ("summary duplicate key", summary(_set("request_count", to="@@"), '{"unit": "requests", "avg": 40.0}, '
                                      '"request_count": {"unit": "requests", "avg": 4000.0}'),
     SUMMARY_JSON, "key 'request_count'", "appears more than once"),
    ("summary deep nesting", summary(_set("input_config", "x", to="@@"), "[" * DEEP + "]" * DEEP), SUMMARY_JSON,
     "input_config.x[0][0]", f"nested deeper than {MAX_DEPTH}"),
    ("record deep nesting", record(_set("metadata", "x", to="@@"), '{"a": ' * DEEP + "1" + "}" * DEEP), REC,
     "metadata.x.a.a", f"nested deeper than {MAX_DEPTH}"),
    ("server NaN gauge", server(_set(GAUGE, "series", 0, "stats", "avg", to=NAN)), SERVER_METRICS_JSON,
     f"metrics.{GAUGE}.series[0].stats.avg", "NaN is not a finite number"),
    ("server NaN counter rate", server(_set(COUNTER, "series", 0, "stats", "rate", to=NAN)), SERVER_METRICS_JSON,
     f"metrics.{COUNTER}.series[0].stats.rate", "NaN is not a finite number"),
    ("server negative counter", server(_set(COUNTER, "series", 0, "stats", "total", to=-1e308)),
     SERVER_METRICS_JSON, f"metrics.{COUNTER}.series[0].stats.total", "beyond"),
    ("server slightly negative counter", server(_set(COUNTER, "series", 0, "stats", "total", to=-1.0)),
     SERVER_METRICS_JSON, f"metrics.{COUNTER}.series[0].stats.total", "is negative"),
    ("server gauge -1e308", server(_set(GAUGE, "series", 0, "stats", "min", to=-1e308)), SERVER_METRICS_JSON,
     f"metrics.{GAUGE}.series[0].stats.min", "beyond"),
    ("server negative histogram bucket", server(_set(HIST, "series", 0, "buckets", "0.05", to=-12)),
     SERVER_METRICS_JSON, f"metrics.{HIST}.series[0].buckets.0.05", "is negative"),
    ("server negative histogram count", server(_set(HIST, "series", 0, "stats", "count", to=-12)),
     SERVER_METRICS_JSON, f"metrics.{HIST}.series[0].stats.count", "is negative"),
    ("manifest start_ns yesterday", manifest(_set("phases", 1, "start_ns", to="yesterday")), PHASE_MANIFEST_JSON,
     "phases[1].start_ns", "'yesterday'"),
    ("manifest start_ns float", manifest(_set("phases", 1, "start_ns", to=1.7e18)), PHASE_MANIFEST_JSON,
     "phases[1].start_ns", "integer"),
    ("manifest end before start", manifest(_set("phases", 1, "end_ns", to=5)), PHASE_MANIFEST_JSON,
     "phases[1].end_ns", "before its start_ns"),
    ("record start_ns yesterday", record(_set("metadata", "request_start_ns", to="yesterday")), REC,
     "metadata.request_start_ns", "'yesterday'"),
]


@pytest.mark.parametrize(("mutate", "where", "field", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ingest_refuses_what_no_aiperf_writes_naming_file_and_field(
        artifact_dir: Path, mutate: Callable[[Path], None], where: str, field: str, says: str) -> None:  # noqa: F811
    mutate(artifact_dir)
    with pytest.raises(ArtifactError) as err:
        ingest_artifacts(artifact_dir, CTX)
    msg = str(err.value)
    assert f"{artifact_dir / where}:" in msg or f"{artifact_dir / where} " in msg
    assert field in msg and says in msg, msg


@pytest.mark.parametrize(("mutate", "where", "field", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_benchctl_ingest_exits_2_naming_file_and_field_and_writes_nothing(
        tmp_path: Path, artifact_dir: Path, mutate: Callable[[Path], None], where: str, field: str,  # noqa: F811
        says: str, capsys: pytest.CaptureFixture[str]) -> None:
    mutate(artifact_dir)
    before = {p.name: p.read_bytes() for p in artifact_dir.iterdir()}
    lake = tmp_path / "lake"
    code = main(["ingest", str(artifact_dir), "--lake", str(lake), "--campaign", "c", "--experiment", "e",
                 "--step", "s", "--mode", "aggregated"])
    err = capsys.readouterr().err
    assert code == 2
    assert where.split(":", maxsplit=1)[0] in err and field in err and says in err, err
    assert {p.name: p.read_bytes() for p in artifact_dir.iterdir()} == before  # the raw artifacts kept as they were
    assert not list(lake.rglob("*.parquet"))


def test_deep_nesting_exits_2_from_the_command_line_without_a_traceback(tmp_path: Path,
                                                                       artifact_dir: Path) -> None:  # noqa: F811
    summary(_set("input_config", "x", to="@@"), "[" * DEEP + "]" * DEEP)(artifact_dir)
    kept = (artifact_dir / SUMMARY_JSON).read_bytes()
    lake = tmp_path / "lake"
    res = subprocess.run([sys.executable, "-m", "benchctl.cli.main", "ingest", str(artifact_dir), "--lake", str(lake),
                          "--campaign", "c", "--experiment", "e", "--step", "s", "--mode", "aggregated"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "RecursionError" not in res.stderr
    assert f"{artifact_dir / SUMMARY_JSON}: input_config.x[0][0]" in res.stderr
    assert (artifact_dir / SUMMARY_JSON).read_bytes() == kept
    assert not list(lake.rglob("*.parquet"))


# ------------------------------------------------------------------------------------- what stays accepted


def test_a_negative_gauge_is_kept_as_prometheus_allows(tmp_path: Path) -> None:
    """Decided: a gauge may go below 0 (Prometheus: it "can arbitrarily go up and down"), within +-1e30."""
    data: dict[str, Any] = copy.deepcopy(SERVER_METRICS)
    data["metrics"][GAUGE]["series"][0]["stats"]["min"] = -2.5
    path = tmp_path / SERVER_METRICS_JSON
    path.write_text(json.dumps(data), encoding="utf-8")
    rows = [r for r in server_metrics_rows(path, CTX) if r["metric"] == GAUGE and r["stat"] == "min"]
    assert [r["value"] for r in rows] == [-2.5]


def test_the_real_disaggregated_server_metrics_export_ingests_whole() -> None:
    path = SAMPLES / "disagg" / SERVER_METRICS_JSON
    data = json.loads(path.read_text(encoding="utf-8"))
    expected = sum(len(s.get("stats") or {}) - sum(v is None for v in (s.get("stats") or {}).values())
                   + len(s.get("buckets") or {}) for m in data["metrics"].values() for s in m["series"])
    assert len(server_metrics_rows(path, CTX)) == expected > 0


def test_brackets_inside_strings_are_text_not_nesting() -> None:
    text = json.dumps({"error": {"message": "[" * (MAX_DEPTH * 4) + "{" * MAX_DEPTH}})
    assert loads_strict(text, "f.json")["error"]["message"].count("[") == MAX_DEPTH * 4


def test_nesting_at_the_bound_parses_and_one_more_level_is_refused() -> None:
    at_bound = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads_strict(at_bound, "f.json") is not None
    with pytest.raises(ArtifactError, match=rf"f\.json: \[0\]\[0\]\[0\]\[0\]\.\.\.\(\d+ more levels\): JSON nested "
                                            rf"deeper than {MAX_DEPTH}"):
        loads_strict("[" + at_bound + "]", "f.json")


def test_a_record_cut_short_is_still_a_warning_not_a_refusal(artifact_dir: Path) -> None:  # noqa: F811
    path = artifact_dir / RECORDS_JSONL
    path.write_text(path.read_text(encoding="utf-8") + '{"metadata": {"benchmark_phase": "prof', encoding="utf-8")
    result = ingest_artifacts(artifact_dir, CTX)
    assert any("cut short" in w for w in result.warnings)
