"""Ingestion of AIPerf 0.13 artifacts, on the real samples (copied into tmp dirs, never modified)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from benchctl.errors import ArtifactError
from benchctl.lake.ingest import (
    RECORDS_JSONL,
    SERVER_METRICS_JSON,
    SUMMARY_JSON,
    StepContext,
    ingest_artifacts,
    ingest_sweep,
    is_sweep_dir,
)
from tests.fakes.ports import SAMPLES

CTX = StepContext(
    campaign_id="camp-1",
    experiment="agg",
    mode="aggregated",
    workload="sweep",
    step_id="sweep-c4-r0",
    step_index=3,
    repeat=0,
    concurrency=4,
    isl=256,
    osl=32,
    random_seed=42,
    artifact_uri="s3://bucket/raw/sweep-c4-r0",
    workload_kind="concurrency_sweep",
)

# A real server_metrics_export.json (AIPerf 0.13.0 against a /metrics endpoint), trimmed to three
# series and without timeslices.
SERVER_METRICS = {
    "schema_version": "1.1",
    "aiperf_version": "0.13.0",
    "metrics_phase": "profiling",
    "metrics": {
        "dynamo_frontend_requests": {
            "type": "counter",
            "description": "Total requests",
            "unit": "requests",
            "series": [
                {
                    "endpoint_url": "http://127.0.0.1:18731/metrics",
                    "labels": {"model": "m", "status": "success"},
                    "stats": {"total": 12.0, "rate": 5.4063032657437144},
                }
            ],
        },
        "dynamo_frontend_inflight_requests": {
            "type": "gauge",
            "description": "Inflight",
            "unit": "requests",
            "series": [
                {
                    "endpoint_url": "http://127.0.0.1:18731/metrics",
                    "labels": {"model": "m"},
                    "stats": {
                        "avg": 0.2222222222222222,
                        "min": 0.0,
                        "max": 2.0,
                        "std": 0.6666666666666666,
                        "p50": 0.0,
                        "p90": 0.40000000000000036,
                        "p99": 1.8399999999999999,
                    },
                }
            ],
        },
        "dynamo_frontend_time_to_first_token_seconds": {
            "type": "histogram",
            "description": "TTFT",
            "unit": "seconds",
            "series": [
                {
                    "endpoint_url": "http://127.0.0.1:18731/metrics",
                    "labels": {"model": "m"},
                    "stats": {
                        "count": 12,
                        "sum": 0.12806081771850586,
                        "avg": 0.010671734809875488,
                        "p50_estimate": 0.01,
                        "p99_estimate": 0.023974268881479906,
                    },
                    "buckets": {"0.005": 0, "0.01": 0, "0.05": 12, "+Inf": 12},
                }
            ],
        },
        "dynamo_component_router_kv_hit_rate": {
            "type": "gauge",
            "description": "hit",
            "series": [{"endpoint_url": "http://10.0.0.7:9090/metrics", "stats": {"avg": 0.5, "max": None}}],
        },
    },
    "warmup_metrics": {"ignored_metric": {"type": "gauge", "series": [{"stats": {"avg": 1.0}}]}},
}


def _sample_lines() -> tuple[list[str], str]:
    head = (SAMPLES / "profile_export.head.jsonl").read_text(encoding="utf-8").splitlines()
    error = (SAMPLES / "error_record.jsonl").read_text(encoding="utf-8").strip()
    return head, error


def _profiling_copy(line: str, suffix: str) -> str:
    rec = json.loads(line)
    rec["metadata"].update(benchmark_phase="profiling", phase_name="profiling", phase_kind="profiling")
    rec["metadata"]["x_request_id"] += suffix
    return json.dumps(rec)


@pytest.fixture
def records() -> list[str]:
    """warm-up x2 (as sampled), two successful profiling records, one failed profiling record."""
    head, error = _sample_lines()
    return [*head, _profiling_copy(head[0], "-p0"), _profiling_copy(head[1], "-p1"), error]


def _write_records(path: Path, lines: list[str], *, final_newline: bool = True) -> None:
    (path / RECORDS_JSONL).write_text("\n".join(lines) + ("\n" if final_newline else ""), encoding="utf-8")


@pytest.fixture
def artifact_dir(tmp_path: Path, records: list[str]) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(SAMPLES / SUMMARY_JSON, d / SUMMARY_JSON)
    shutil.copy(SAMPLES / "phase_manifest.json", d / "phase_manifest.json")
    _write_records(d, records)
    return d


def _summary() -> dict:
    return json.loads((SAMPLES / SUMMARY_JSON).read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------ steps

COPIED = [
    ("ttft_p50_ms", "time_to_first_token", "p50"),
    ("ttft_p90_ms", "time_to_first_token", "p90"),
    ("ttft_p99_ms", "time_to_first_token", "p99"),
    ("ttft_avg_ms", "time_to_first_token", "avg"),
    ("itl_p50_ms", "inter_token_latency", "p50"),
    ("itl_p90_ms", "inter_token_latency", "p90"),
    ("itl_p99_ms", "inter_token_latency", "p99"),
    ("itl_avg_ms", "inter_token_latency", "avg"),
    ("request_latency_p50_ms", "request_latency", "p50"),
    ("request_latency_p90_ms", "request_latency", "p90"),
    ("request_latency_p99_ms", "request_latency", "p99"),
    ("request_latency_avg_ms", "request_latency", "avg"),
    ("output_tokens_per_s", "output_token_throughput", "avg"),
    ("request_throughput_per_s", "request_throughput", "avg"),
    ("request_count", "request_count", "avg"),
    ("completed_count", "completed_request_count", "avg"),
    ("total_output_tokens", "total_output_tokens", "avg"),
    ("benchmark_duration_s", "benchmark_duration", "avg"),
    ("output_token_throughput_per_user_p50", "output_token_throughput_per_user", "p50"),
    ("cache_read_tokens_total", "total_usage_prompt_cache_read_tokens", "avg"),
]


def test_step_statistics_are_copied_exactly(artifact_dir: Path) -> None:
    # Given the real AIPerf summary; When ingested
    result = ingest_artifacts(artifact_dir, CTX)
    summary = _summary()
    # Then one step whose statistics equal AIPerf's, bit for bit
    assert len(result.steps) == 1
    step = result.steps[0]
    for column, metric, stat in COPIED:
        assert step[column] == summary[metric][stat], column
    assert step["error_count"] == 0
    assert step["status"] == "succeeded"
    assert step["was_cancelled"] is False
    assert step["aiperf_version"] == "0.13.0"
    assert step["benchmark_id"] == summary["benchmark_id"]
    assert json.loads(step["error_summary_json"]) == []
    assert step["ingest_warnings_json"] is None
    # context fields
    assert (step["campaign_id"], step["experiment"], step["step_id"], step["concurrency"]) == (
        "camp-1",
        "agg",
        "sweep-c4-r0",
        4,
    )
    assert (step["isl"], step["osl"], step["random_seed"], step["workload_kind"]) == (
        256,
        32,
        42,
        "concurrency_sweep",
    )
    # times from phase_manifest.json's profiling phase (epoch ns, UTC)
    assert step["started_at"].isoformat() == "2026-11-30T05:18:47.345010"
    assert step["ended_at"].isoformat() == "2026-11-30T05:18:49.713951"


def test_step_without_context_takes_seed_and_concurrency_from_aiperf(artifact_dir: Path) -> None:
    ctx = StepContext("camp-1", "agg", "aggregated", "sweep", "s", 0, 0)
    step = ingest_artifacts(artifact_dir, ctx).steps[0]
    assert step["concurrency"] == 4 and step["random_seed"] == 42


def test_latency_units_are_converted(artifact_dir: Path) -> None:
    # Given a summary that reports TTFT in seconds and the duration in ms
    summary = _summary()
    summary["time_to_first_token"] = {"unit": "s", "p50": 0.05, "p90": 0.06, "p99": 0.07, "avg": 0.055}
    summary["benchmark_duration"] = {"unit": "ms", "avg": 2366.0}
    (artifact_dir / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    step = ingest_artifacts(artifact_dir, CTX).steps[0]
    assert step["ttft_p50_ms"] == pytest.approx(50.0)
    assert step["ttft_p99_ms"] == pytest.approx(70.0)
    assert step["benchmark_duration_s"] == pytest.approx(2.366)


def test_unknown_unit_is_an_artifact_error(artifact_dir: Path) -> None:
    summary = _summary()
    summary["inter_token_latency"]["unit"] = "fortnights"
    (artifact_dir / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    with pytest.raises(
        ArtifactError,
        match=r"profile_export_aiperf\.json: inter_token_latency\.\w+: "
        r"unknown unit 'fortnights'; expected one of",
    ):
        ingest_artifacts(artifact_dir, CTX)


def test_partial_failures_take_error_count_from_aiperf(artifact_dir: Path) -> None:
    # Given a run where AIPerf counted 3 failed requests (as 0.13 reports them)
    summary = _summary()
    summary["error_request_count"] = {"unit": "requests", "avg": 3.0}
    summary["error_summary"] = [
        {"error_details": {"code": 500, "type": "Internal Server Error", "message": "boom"}, "count": 3}
    ]
    (artifact_dir / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    step = ingest_artifacts(artifact_dir, CTX).steps[0]
    assert step["error_count"] == 3
    assert json.loads(step["error_summary_json"])[0]["error_details"]["code"] == 500
    # Without error_request_count the error_summary counts are used
    del summary["error_request_count"]
    (artifact_dir / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    assert ingest_artifacts(artifact_dir, CTX).steps[0]["error_count"] == 3


# --------------------------------------------------------------------------------------------- requests


def test_requests_are_profiling_records_only(artifact_dir: Path, records: list[str]) -> None:
    result = ingest_artifacts(artifact_dir, CTX)
    warmup_ids = {json.loads(line)["metadata"]["x_request_id"] for line in records[:2]}
    # Then the warm-up records are excluded, the failed one is kept
    assert len(result.requests) == 3
    assert not warmup_ids & {r["x_request_id"] for r in result.requests}
    assert [r["request_index"] for r in result.requests] == [0, 1, 2]
    ok = result.requests[0]
    rec = json.loads(records[2])
    m = rec["metrics"]
    assert ok["ttft_ms"] == m["time_to_first_token"]["value"]
    assert ok["itl_ms"] == m["inter_token_latency"]["value"]
    assert ok["request_latency_ms"] == m["request_latency"]["value"]
    assert (ok["isl"], ok["osl"], ok["cached_tokens"]) == (256, 32, 0)
    assert (ok["requested_isl"], ok["requested_osl"]) == (256, 32)
    assert ok["start_ns"] == rec["metadata"]["request_start_ns"]
    assert ok["end_ns"] == rec["metadata"]["request_end_ns"]
    assert ok["conversation_id"] == "session_000000" and ok["turn_index"] == 0
    assert ok["error_type"] is None and ok["was_cancelled"] is False


def test_failed_request_is_kept_with_its_error(artifact_dir: Path) -> None:
    failed = ingest_artifacts(artifact_dir, CTX).requests[-1]
    assert failed["error_type"] == "ClientConnectorError"
    assert failed["error_message"].startswith("ClientConnectorError(ConnectionKey(")
    assert failed["ttft_ms"] is None and failed["request_latency_ms"] is None
    assert failed["isl"] == 32  # error_isl: what the failed request carried
    assert failed["x_request_id"] == "f46f193a-7ad4-4102-b6ba-a994b1e46071"


def test_record_with_unknown_unit_names_file_and_line(artifact_dir: Path, records: list[str]) -> None:
    rec = json.loads(records[2])
    rec["metrics"]["time_to_first_token"]["unit"] = "parsecs"
    _write_records(artifact_dir, [*records[:2], json.dumps(rec)])
    with pytest.raises(
        ArtifactError,
        match=r"profile_export\.jsonl:3: metrics\.time_to_first_token: "
        r"unknown unit 'parsecs'",
    ):
        ingest_artifacts(artifact_dir, CTX)


def test_record_latency_in_seconds_is_converted(artifact_dir: Path, records: list[str]) -> None:
    rec = json.loads(records[2])
    rec["metrics"]["request_latency"] = {"value": 0.25, "unit": "s"}
    rec["metrics"]["time_to_first_token"] = {"value": 40_000_000, "unit": "ns"}
    _write_records(artifact_dir, [json.dumps(rec)])
    row = ingest_artifacts(artifact_dir, CTX).requests[0]
    assert row["request_latency_ms"] == pytest.approx(250.0)
    assert row["ttft_ms"] == pytest.approx(40.0)


# ------------------------------------------------------------------------------------ failed / malformed


def test_no_summary_gives_a_failed_step(tmp_path: Path) -> None:
    # Given AIPerf's output when every request failed: records, no summary JSON
    _, error = _sample_lines()
    d = tmp_path / "failed"
    d.mkdir()
    _write_records(d, [error, error.replace("f46f193a", "0000aaaa")])
    result = ingest_artifacts(d, CTX)
    (step,) = result.steps
    assert step["status"] == "failed"
    assert step["error_count"] == 2 and step["request_count"] == 0 and step["completed_count"] == 2
    summary = json.loads(step["error_summary_json"])
    assert summary[0]["count"] == 2
    assert summary[0]["error_details"]["type"] == "ClientConnectorError"
    assert step["ttft_p50_ms"] is None
    assert step["started_at"] is not None and step["ended_at"] is not None
    assert len(result.requests) == 2
    assert any("missing" in w for w in result.warnings)


def test_empty_artifact_dir_gives_a_failed_step(tmp_path: Path) -> None:
    (step,) = ingest_artifacts(tmp_path, CTX).steps
    assert step["status"] == "failed"
    assert json.loads(step["error_summary_json"])[0]["error_details"]["type"] == "MissingArtifacts"


def test_missing_dir_is_an_artifact_error(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="expected an AIPerf artifact directory"):
        ingest_artifacts(tmp_path / "nope", CTX)


def test_truncated_middle_line_is_an_error(artifact_dir: Path, records: list[str]) -> None:
    lines = [*records]
    lines[2] = lines[2][:100]
    _write_records(artifact_dir, lines)
    with pytest.raises(ArtifactError, match=r"profile_export\.jsonl:3: expected one JSON object per line"):
        ingest_artifacts(artifact_dir, CTX)


def test_truncated_last_line_is_dropped_with_a_warning(artifact_dir: Path, records: list[str]) -> None:
    # Given AIPerf killed mid-write: the last line is cut and has no newline
    _write_records(artifact_dir, [*records[:-1], records[-1][:57]], final_newline=False)
    result = ingest_artifacts(artifact_dir, CTX)
    assert len(result.requests) == 2
    assert (
        len(result.warnings) == 1 and "profile_export.jsonl:5: last line is cut short" in result.warnings[0]
    )
    assert json.loads(result.steps[0]["ingest_warnings_json"]) == result.warnings


def test_bad_last_line_with_newline_is_an_error(artifact_dir: Path, records: list[str]) -> None:
    _write_records(artifact_dir, [*records[:-1], records[-1][:57]], final_newline=True)
    with pytest.raises(ArtifactError, match=r"profile_export\.jsonl:5:"):
        ingest_artifacts(artifact_dir, CTX)


def test_non_json_summary_is_an_error(artifact_dir: Path) -> None:
    (artifact_dir / SUMMARY_JSON).write_text("Traceback (most recent call last):\n", encoding="utf-8")
    with pytest.raises(ArtifactError, match=r"profile_export_aiperf\.json:1: expected a JSON object"):
        ingest_artifacts(artifact_dir, CTX)


def test_non_object_record_is_an_error(artifact_dir: Path, records: list[str]) -> None:
    _write_records(artifact_dir, [records[0], "[1, 2, 3]"])
    with pytest.raises(ArtifactError, match=r"profile_export\.jsonl:2: expected an AIPerf record"):
        ingest_artifacts(artifact_dir, CTX)


def test_non_utf8_record_is_an_error(artifact_dir: Path, records: list[str]) -> None:
    data = (
        ("\n".join(records[:3]) + "\n").encode() + b'{"metadata": "caf\xe9"}\n' + records[4].encode() + b"\n"
    )
    (artifact_dir / RECORDS_JSONL).write_bytes(data)
    with pytest.raises(ArtifactError, match=r"profile_export\.jsonl:4: expected UTF-8 text, found byte 0xe9"):
        ingest_artifacts(artifact_dir, CTX)


def test_non_utf8_summary_is_an_error(artifact_dir: Path) -> None:
    (artifact_dir / SUMMARY_JSON).write_bytes(b'{\n"aiperf_version": "0.13\xff"\n}')
    with pytest.raises(ArtifactError, match=r"profile_export_aiperf\.json:2: expected UTF-8 text"):
        ingest_artifacts(artifact_dir, CTX)


def test_metric_that_is_not_a_number_is_an_error(artifact_dir: Path) -> None:
    summary = _summary()
    summary["request_latency"]["p99"] = "fast"
    (artifact_dir / SUMMARY_JSON).write_text(json.dumps(summary), encoding="utf-8")
    with pytest.raises(ArtifactError, match=r"request_latency\.p99: expected a number, got 'fast'"):
        ingest_artifacts(artifact_dir, CTX)


# ------------------------------------------------------------------------------------------------ sweeps


def test_sweep_gives_one_step_per_concurrency(tmp_path: Path, artifact_dir: Path) -> None:
    # Given AIPerf's sweep layout: concurrency_N/ runs plus sweep_aggregate/
    sweep = tmp_path / "sweep"
    for n in (1, 4):
        shutil.copytree(artifact_dir, sweep / f"concurrency_{n}")
    (sweep / "sweep_aggregate").mkdir()
    (sweep / "sweep_aggregate" / "profile_export_aiperf_sweep.json").write_text("{}", encoding="utf-8")
    assert is_sweep_dir(sweep) and not is_sweep_dir(artifact_dir)
    results = ingest_sweep(sweep, CTX)
    assert [len(r.steps) for r in results] == [1, 1]
    steps = [r.steps[0] for r in results]
    assert [(s["step_id"], s["concurrency"]) for s in steps] == [
        ("sweep-c4-r0-c1", 1),
        ("sweep-c4-r0-c4", 4),
    ]
    assert [s["artifact_uri"] for s in steps] == [
        "s3://bucket/raw/sweep-c4-r0/concurrency_1",
        "s3://bucket/raw/sweep-c4-r0/concurrency_4",
    ]
    assert [len(r.requests) for r in results] == [3, 3]
    assert [{q["step_id"] for q in r.requests} for r in results] == [{"sweep-c4-r0-c1"}, {"sweep-c4-r0-c4"}]


def test_sweep_without_runs_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "sweep_aggregate").mkdir()
    with pytest.raises(ArtifactError, match="expected concurrency_<N>/ sub-folders"):
        ingest_sweep(tmp_path, CTX)


# ----------------------------------------------------------------------------------------- server metrics


def test_server_metrics_export_is_flattened(artifact_dir: Path) -> None:
    (artifact_dir / SERVER_METRICS_JSON).write_text(json.dumps(SERVER_METRICS), encoding="utf-8")
    sources = {"http://127.0.0.1:18731/metrics": "frontend"}
    rows = ingest_artifacts(artifact_dir, CTX, sources=sources).server_metrics

    def pick(metric: str, stat: str, **labels: str) -> list[dict]:
        return [
            r
            for r in rows
            if r["metric"] == metric
            and r["stat"] == stat
            and all(json.loads(r["labels_json"]).get(k) == v for k, v in labels.items())
        ]

    (total,) = pick("dynamo_frontend_requests", "total")
    assert total["value"] == 12.0 and total["metric_type"] == "counter" and total["source"] == "frontend"
    assert json.loads(total["labels_json"]) == {"model": "m", "status": "success"}
    (p99,) = pick("dynamo_frontend_inflight_requests", "p99")
    assert p99["value"] == 1.8399999999999999
    buckets = pick("dynamo_frontend_time_to_first_token_seconds", "bucket")
    assert {json.loads(b["labels_json"])["le"]: b["value"] for b in buckets} == {
        "0.005": 0.0,
        "0.01": 0.0,
        "0.05": 12.0,
        "+Inf": 12.0,
    }
    assert pick("dynamo_frontend_time_to_first_token_seconds", "p99_estimate")[0]["unit"] == "seconds"
    # unmapped endpoint: host:port; no labels: {}; null stats skipped; warm-up metrics not ingested
    (hit,) = [r for r in rows if r["metric"] == "dynamo_component_router_kv_hit_rate"]
    assert (hit["source"], hit["labels_json"], hit["stat"]) == ("10.0.0.7:9090", "{}", "avg")
    assert not [r for r in rows if r["metric"] == "ignored_metric"]
    assert {r["step_id"] for r in rows} == {"sweep-c4-r0"}


def test_bad_server_metrics_is_an_error(artifact_dir: Path) -> None:
    bad = json.loads(json.dumps(SERVER_METRICS))
    bad["metrics"]["dynamo_frontend_requests"]["series"][0]["stats"]["total"] = "twelve"
    (artifact_dir / SERVER_METRICS_JSON).write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(
        ArtifactError,
        match=r"server_metrics_export\.json: metrics\.dynamo_frontend_requests"
        r"\.series\[0\]\.stats\.total: expected a number",
    ):
        ingest_artifacts(artifact_dir, CTX)


# ------------------------------------------------------------------------------- generated datasets


def _with_conversation(line: str, conversation_id: str) -> str:
    rec = json.loads(line)
    rec["metadata"]["conversation_id"] = conversation_id
    return json.dumps(rec)


def test_dataset_requests_get_their_lines_requested_lengths(tmp_path: Path, records: list[str]) -> None:
    # Given a step that sent a 3-line dataset; AIPerf reports each line's session id as conversation id
    d = tmp_path / "run"
    d.mkdir()
    shutil.copy(SAMPLES / SUMMARY_JSON, d / SUMMARY_JSON)
    profiling = [_with_conversation(records[2], "line-000002"), _with_conversation(records[3], "line-000000"),
                 _with_conversation(records[4], "line-000001")]
    _write_records(d, [*records[:2], *profiling])
    ctx = replace(CTX, isl=None, osl=None, requested_lengths=((100, 10), (200, 20), (300, 30)),
                  step_fields={"distribution": "zipf", "dataset_sha256": "ab" * 32, "variant": "zipf"})
    result = ingest_artifacts(d, ctx)
    # Then each request carries its own line's lengths next to what it actually sent
    assert [(r["requested_isl"], r["requested_osl"]) for r in result.requests] == [(300, 30), (100, 10), (200, 20)]
    assert result.requests[0]["isl"] == 256  # actual, from AIPerf
    assert result.requests[0]["output_tokens_per_s_user"] == json.loads(records[2])["metrics"][
        "output_token_throughput_per_user"]["value"]
    # and the step row carries the dataset's identity
    st = result.steps[0]
    assert (st["distribution"], st["dataset_sha256"], st["variant"]) == ("zipf", "ab" * 32, "zipf")


def test_a_request_from_no_line_of_the_dataset_is_an_error(tmp_path: Path, records: list[str]) -> None:
    d = tmp_path / "run"
    d.mkdir()
    _write_records(d, [_with_conversation(records[2], "line-000007")])
    ctx = replace(CTX, requested_lengths=((100, 10),))
    with pytest.raises(ArtifactError, match=r"profile_export.jsonl:1: metadata.conversation_id 'line-000007' "
                                            r"names no line of the step's dataset \(1 lines"):
        ingest_artifacts(d, ctx)
