"""The lake schema module: one definition per table, cheap to import, strict rows."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest

from benchctl.lake import schema

MINIMUM_COLUMNS = {
    "campaigns": """campaign_id spec_hash spec_name model engine simulated status started_at ended_at
        failed_state error cause versions_json pricing_json lake_uri""",
    "steps": """campaign_id experiment mode workload step_id step_index repeat concurrency isl osl
        request_count error_count completed_count ttft_p50_ms ttft_p90_ms ttft_p99_ms ttft_avg_ms
        itl_p50_ms itl_p90_ms itl_p99_ms itl_avg_ms request_latency_p50_ms request_latency_p90_ms
        request_latency_p99_ms request_latency_avg_ms output_tokens_per_s request_throughput_per_s
        total_output_tokens benchmark_duration_s output_token_throughput_per_user_p50
        cache_read_tokens_total aiperf_version started_at ended_at status error_summary_json
        artifact_uri random_seed""",
    "requests": """campaign_id experiment step_id repeat request_index x_request_id conversation_id
        turn_index worker_id start_ns end_ns ttft_ms itl_ms request_latency_ms isl osl requested_isl
        requested_osl cached_tokens error_type error_message was_cancelled""",
    "server_metrics": "campaign_id experiment step_id repeat source metric labels_json stat value",
    "timeline": "campaign_id experiment event at pool detail_json",
}


@pytest.mark.parametrize("table", sorted(MINIMUM_COLUMNS))
def test_tables_have_the_minimum_columns(table: str) -> None:
    # Given the columns the ingestion, views and Glue tables rely on
    wanted = MINIMUM_COLUMNS[table].split()
    # Then the schema defines each of them
    assert set(wanted) <= set(schema.column_names(table))


@pytest.mark.parametrize("table", schema.table_names())
def test_tables_are_well_formed(table: str) -> None:
    names = schema.column_names(table)
    assert len(names) == len(set(names)), "duplicate column"
    assert all(t in schema.TYPES for _, t in schema.columns(table))
    assert all(n == n.lower() and n.isidentifier() for n in names)
    keys = schema.partition_keys(table)
    assert keys and set(keys) <= set(names)
    assert all(dict(schema.columns(table))[k] == "string" for k in keys)
    assert not set(keys) & {n for n, _ in schema.data_columns(table)}


def test_partition_keys() -> None:
    assert schema.partition_keys("campaigns") == ["campaign_id"]
    for t in ("steps", "requests", "server_metrics", "timeline"):
        assert schema.partition_keys(t) == ["campaign_id", "experiment"]


def test_unknown_table_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown lake table 'stepz'"):
        schema.columns("stepz")


def test_normalize_row_fills_missing_and_orders() -> None:
    row = schema.normalize_row("timeline", {"event": "ready", "campaign_id": "c", "experiment": "e"})
    assert list(row) == schema.column_names("timeline")
    assert row["pool"] is None and row["at"] is None and row["event"] == "ready"


def test_normalize_row_rejects_unknown_columns() -> None:
    with pytest.raises(ValueError, match=r"timeline: unknown column\(s\) \['colour'\]"):
        schema.normalize_row("timeline", {"campaign_id": "c", "colour": "red"})


def test_normalize_row_types() -> None:
    # AIPerf reports counts as floats (request_count.avg = 40.0): integral floats become ints
    row = schema.normalize_row("steps", {"request_count": 40.0, "ttft_p50_ms": 5, "status": "succeeded"})
    assert row["request_count"] == 40 and isinstance(row["request_count"], int)
    assert row["ttft_p50_ms"] == 5.0 and isinstance(row["ttft_p50_ms"], float)
    with pytest.raises(ValueError, match=r"steps\.request_count: expected an integer"):
        schema.normalize_row("steps", {"request_count": 40.5})
    with pytest.raises(ValueError, match=r"steps\.request_count: expected an integer, got a boolean"):
        schema.normalize_row("steps", {"request_count": True})
    with pytest.raises(ValueError, match=r"steps\.status: expected a string"):
        schema.normalize_row("steps", {"status": {"a": 1}})
    with pytest.raises(ValueError, match=r"campaigns\.simulated: expected a boolean"):
        schema.normalize_row("campaigns", {"simulated": 1})


def test_normalize_row_timestamps_are_naive_utc() -> None:
    cet = timezone(timedelta(hours=1))
    row = schema.normalize_row("timeline", {"at": datetime(2026, 1, 1, 12, 0, tzinfo=cet)})
    assert row["at"] == datetime(2026, 1, 1, 11, 0)
    row = schema.normalize_row("timeline", {"at": "2026-01-01T11:00:00+00:00"})
    assert row["at"] == datetime(2026, 1, 1, 11, 0)
    row = schema.normalize_row("timeline", {"at": datetime(2026, 1, 1, 11, 0, tzinfo=UTC)})
    assert row["at"].tzinfo is None
    with pytest.raises(ValueError, match=r"timeline\.at: expected an ISO-8601 timestamp"):
        schema.normalize_row("timeline", {"at": "yesterday"})


def test_arrow_schema() -> None:
    import pyarrow as pa

    full = schema.arrow_schema("steps")
    assert full.names == schema.column_names("steps")
    assert full.field("request_count").type == pa.int64()
    assert full.field("started_at").type == pa.timestamp("us")
    assert full.field("campaign_id").type == pa.string()
    file_schema = schema.arrow_schema("steps", include_partitions=False)
    assert "campaign_id" not in file_schema.names and "experiment" not in file_schema.names
    assert schema.arrow_schema("campaigns", include_partitions=False).names[0] == "spec_hash"


def test_glue_columns() -> None:
    glue = schema.glue_columns("requests")
    assert glue["partition_keys"] == [
        {"name": "campaign_id", "type": "string"},
        {"name": "experiment", "type": "string"},
    ]
    assert {"name": "start_ns", "type": "bigint"} in glue["columns"]
    assert len(glue["columns"]) + 2 == len(schema.columns("requests"))


def test_import_does_not_load_pyarrow() -> None:
    # Lambdas and CDK import the schema; pyarrow must stay a lazy import
    code = "import sys, benchctl.lake.schema; sys.exit(1 if 'pyarrow' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_json_text_is_canonical() -> None:
    assert schema.json_text({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'
    assert schema.json_text(None) is None
