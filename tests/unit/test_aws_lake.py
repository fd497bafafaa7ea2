"""The S3 lake (awswrangler on moto) against the local lake: same keys, same rows, same parquet types."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from benchctl.aws.s3 import S3Lake, S3RunStore
from benchctl.errors import ArtifactError
from benchctl.lake import schema
from benchctl.lake.ingest import (
    PHASE_MANIFEST_JSON,
    RECORDS_JSONL,
    SERVER_METRICS_JSON,
    SUMMARY_JSON,
    ingest_artifacts,
)
from benchctl.local.lake import LocalLake
from benchctl.local.runstore import LocalRunStore
from tests.unit.test_ingest import CTX, SAMPLES, SERVER_METRICS, _profiling_copy, _sample_lines

BUCKET = "bench-lake"
PREFIX = "lake"
DATABASE = "benchctl_results"
TABLES = ["steps", "requests", "server_metrics", "timeline", "campaigns"]

@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL_GLUE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _s3_keys(client: Any, prefix: str = "") -> list[str]:
    out: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out.extend(o["Key"] for o in page.get("Contents", []))
    return sorted(out)


def _local_rel_keys(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _local_rows(lake: LocalLake, table: str) -> list[dict[str, Any]]:
    """Rows of a local table, partition values from the hive path, in relative-key order (as S3 lists)."""
    names = schema.column_names(table)
    rows: list[dict[str, Any]] = []
    for path in sorted(lake.files(table), key=lambda p: p.relative_to(lake.root).as_posix()):
        parts = dict(seg.split("=", 1) for seg in path.relative_to(lake.root).parts[:-1] if "=" in seg)
        for rec in pq.read_table(path, partitioning=None).to_pylist():
            full = {**rec, **parts}
            rows.append({n: full[n] for n in names})
    return rows


def _typed(rows: list[dict[str, Any]]) -> list[list[tuple[str, str, Any]]]:
    """Rows as (column, python type, value): equal only if the values *and* their types are equal."""
    return [[(k, type(v).__name__, v) for k, v in r.items()] for r in rows]


# ------------------------------------------------------------------------------------ rows to write


def _artifact_dir(root: Path) -> Path:
    """A real AIPerf 0.13 artifact dir: summary, manifest, warm-up + profiling + failed records, metrics."""
    root.mkdir(parents=True)
    shutil.copy(SAMPLES / SUMMARY_JSON, root / SUMMARY_JSON)
    shutil.copy(SAMPLES / PHASE_MANIFEST_JSON, root / PHASE_MANIFEST_JSON)
    head, error = _sample_lines()
    lines = [*head, _profiling_copy(head[0], "-p0"), _profiling_copy(head[1], "-p1"), error]
    (root / RECORDS_JSONL).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / SERVER_METRICS_JSON).write_text(json.dumps(SERVER_METRICS), encoding="utf-8")
    return root


def _batches(tmp_path: Path) -> list[tuple[str, list[dict[str, Any]], str]]:
    """``(table, rows, part_name)`` writes: two ingested steps (two experiments) plus timeline/campaigns."""
    batches: list[tuple[str, list[dict[str, Any]], str]] = []
    for experiment, mode, step_id in (
        ("agg", "aggregated", "sweep-c4-r0"),
        ("disagg", "disaggregated", "sweep-c1-r0"),
    ):
        ctx = replace(CTX, experiment=experiment, mode=mode, step_id=step_id)
        result = ingest_artifacts(_artifact_dir(tmp_path / "art" / step_id), ctx)
        for table, rows in result.tables().items():
            assert rows, f"the sample gives no {table} rows"
            batches.append((table, rows, step_id))
    t0 = datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC)
    timeline: list[dict[str, Any]] = [
        {"campaign_id": "camp-1", "experiment": "agg", "event": "scale_requested", "at": t0, "pool": "gpu"},
        {
            "campaign_id": "camp-1",
            "experiment": "agg",
            "event": "ready",
            "at": "2026-03-01T10:05:00+00:00",
            "pool": None,
            "detail_json": schema.json_text({"replicas": 2}),
        },
        {
            "campaign_id": "camp-1",
            "experiment": "disagg",
            "event": "ready",
            "at": datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2))),
            "detail_json": None,
        },
    ]
    batches.append(("timeline", timeline, "events-1"))
    for cid, simulated in (("camp-1", True), ("camp-2", False)):
        campaign = {
            "campaign_id": cid,
            "spec_hash": "abc",
            "spec_name": "demo",
            "model": "Qwen/Qwen3-0.6B",
            "engine": "local",
            "simulated": simulated,
            "status": "succeeded",
            "started_at": t0,
            "ended_at": None,
            "versions_json": schema.json_text({"aiperf": "0.13.0"}),
        }
        batches.append(("campaigns", [campaign], "campaign"))
    return batches


# ------------------------------------------------------------------------------ local == S3 (the key)


def test_s3_lake_matches_local_lake_keys_rows_and_types(s3: Any, tmp_path: Path) -> None:
    # Given the same rows (real AIPerf artifacts ingested, plus timeline and campaigns)
    local = LocalLake(tmp_path / "lake")
    remote = S3Lake(BUCKET, PREFIX)
    batches = _batches(tmp_path)

    # When both lakes write them with the same part names
    for table, rows, part in batches:
        paths = local.write(table, rows, part_name=part)
        uris = remote.write(table, rows, part_name=part)
        # Then each call writes the same relative objects
        assert [u.removeprefix(f"s3://{BUCKET}/{PREFIX}/") for u in uris] == [
            p.relative_to(local.root).as_posix() for p in paths
        ]

    # Then the whole key sets are equal (one object per table x partition x part)
    s3_rel = {k.removeprefix(f"{PREFIX}/") for k in _s3_keys(s3, f"{PREFIX}/")}
    assert s3_rel == _local_rel_keys(local.root)
    assert "server_metrics/campaign_id=camp-1/experiment=disagg/sweep-c1-r0.parquet" in s3_rel
    assert "campaigns/campaign_id=camp-2/campaign.parquet" in s3_rel

    # And rows read back are equal: same columns, values and Python types
    for table in TABLES:
        local_rows, s3_rows = _local_rows(local, table), remote.read_table(table)
        assert s3_rows, table
        assert list(s3_rows[0]) == schema.column_names(table)
        assert _typed(s3_rows) == _typed(local_rows), table
        # ...and equal to what was written, after normalisation
        written = [schema.normalize_row(table, r) for t, rows, _ in batches if t == table for r in rows]
        key = [*schema.partition_keys(table)]
        assert sorted(map(repr, _typed(s3_rows))) == sorted(map(repr, _typed(written))), table
        assert all(isinstance(r[k], str) for r in s3_rows for k in key)

    # And the filter by campaign reads one campaign only
    assert [r["campaign_id"] for r in remote.read_table("campaigns", campaign_id="camp-2")] == ["camp-2"]
    assert remote.read_table("steps", campaign_id="camp-9") == []
    # And the normalised types survived (nullable ints stay ints, aware datetimes became naive UTC)
    (ready,) = [r for r in remote.read_table("timeline") if r["experiment"] == "disagg"]
    assert ready["at"] == datetime(2026, 3, 1, 10, 0)
    step = remote.read_table("steps")[0]
    assert type(step["request_count"]) is int and type(step["was_cancelled"]) is bool


def test_parquet_schema_in_s3_is_the_schema(s3: Any, tmp_path: Path) -> None:
    remote = S3Lake(BUCKET, PREFIX)
    local = LocalLake(tmp_path / "lake")
    for table, rows, part in _batches(tmp_path):
        (uri, *_) = remote.write(table, rows, part_name=part)
        (path, *_) = local.write(table, rows, part_name=part)
        body = s3.get_object(Bucket=BUCKET, Key=uri.removeprefix(f"s3://{BUCKET}/"))["Body"].read()
        pfile = pq.ParquetFile(io.BytesIO(body))
        file_schema = pfile.schema_arrow.remove_metadata()
        expected = schema.arrow_schema(table, include_partitions=False)
        assert file_schema.names == expected.names, table
        assert file_schema.types == expected.types, table
        assert file_schema.equals(pq.read_schema(path).remove_metadata()), table
        # timestamps are INT64 micros, not the INT96 of awswrangler's "spark" flavour
        for i, f in enumerate(expected):
            if f.type == schema.arrow_type("timestamp"):
                assert pfile.schema.column(i).physical_type == "INT64", (table, f.name)


# ------------------------------------------------------------------------------------- write rules


def _step(step_id: str, ttft: float, experiment: str = "agg", **extra: Any) -> dict[str, Any]:
    return {
        "campaign_id": "camp-1",
        "experiment": experiment,
        "step_id": step_id,
        "ttft_p50_ms": ttft,
        "request_count": 40,
        **extra,
    }


def test_same_part_name_overwrites(s3: Any) -> None:
    lake = S3Lake(BUCKET, PREFIX)
    lake.write("steps", [_step("s1", 10.0), _step("s2", 20.0)], part_name="batch")
    before = _s3_keys(s3)
    lake.write("steps", [_step("s1", 11.0), _step("s2", 21.0)], part_name="batch")
    assert _s3_keys(s3) == before
    assert [(r["step_id"], r["ttft_p50_ms"]) for r in lake.read_table("steps")] == [
        ("s1", 11.0),
        ("s2", 21.0),
    ]
    # another part name is another object in the same partition
    lake.write("steps", [_step("s3", 30.0)], part_name="other")
    assert len(lake.read_table("steps")) == 3


def test_nullable_bigints_and_timestamps_round_trip_exactly(s3: Any) -> None:
    # A bigint column with a missing value must not go through float64 (2**53 < nanosecond clocks)
    lake = S3Lake(BUCKET, PREFIX)
    big = 1_760_000_000_123_456_789
    rows = [
        {
            "campaign_id": "c",
            "experiment": "e",
            "step_id": "s",
            "request_index": 0,
            "start_ns": big,
            "end_ns": big + 1,
            "was_cancelled": None,
        },
        {
            "campaign_id": "c",
            "experiment": "e",
            "step_id": "s",
            "request_index": 1,
            "start_ns": None,
            "end_ns": big + 3,
            "was_cancelled": False,
        },
    ]
    lake.write("requests", rows, part_name="s")
    back = lake.read_table("requests")
    assert [(r["start_ns"], r["end_ns"], r["was_cancelled"]) for r in back] == [
        (big, big + 1, None),
        (None, big + 3, False),
    ]
    # a timestamp column with only missing values is still a micros timestamp, not a null type
    lake.write("campaigns", [{"campaign_id": "c", "status": "running"}], part_name="campaign")
    (key,) = _s3_keys(s3, f"{PREFIX}/campaigns/")
    file_schema = pq.read_schema(io.BytesIO(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))
    assert file_schema.field("ended_at").type == schema.arrow_type("timestamp")
    assert lake.read_table("campaigns")[0]["ended_at"] is None


def test_rows_are_grouped_one_object_per_partition(s3: Any) -> None:
    lake = S3Lake(BUCKET, PREFIX)
    uris = lake.write("steps", [_step("a", 1.0, "disagg"), _step("b", 2.0), _step("c", 3.0)], part_name="p")
    assert uris == [
        f"s3://{BUCKET}/{PREFIX}/steps/campaign_id=camp-1/experiment=agg/p.parquet",
        f"s3://{BUCKET}/{PREFIX}/steps/campaign_id=camp-1/experiment=disagg/p.parquet",
    ]
    assert [r["step_id"] for r in lake.read_table("steps")] == ["b", "c", "a"]
    assert lake.write("steps", [], part_name="p") == []


def test_bad_rows_raise_and_write_nothing(s3: Any) -> None:
    lake = S3Lake(BUCKET, PREFIX)
    with pytest.raises(ValueError, match="bogus_column"):
        lake.write("steps", [_step("s1", 1.0), _step("s2", 2.0, bogus_column=1)], part_name="p")
    with pytest.raises(ValueError, match=r"steps\.request_count"):
        lake.write(
            "steps", [_step("s1", 1.0), _step("s2", 2.0, "disagg", request_count="many")], part_name="p"
        )
    with pytest.raises(ValueError, match="experiment"):
        lake.write("steps", [_step("s1", 1.0), _step("s2", 2.0, "../etc")], part_name="p")
    with pytest.raises(ValueError, match="part_name"):
        lake.write("steps", [_step("s1", 1.0)], part_name="a/b")
    with pytest.raises(ValueError, match="unknown lake table"):
        lake.write("nope", [_step("s1", 1.0)], part_name="p")
    assert _s3_keys(s3) == []


# -------------------------------------------------------------------------------------------- Glue


def _create_glue_tables(glue: Any) -> None:
    glue.create_database(DatabaseInput={"Name": DATABASE})
    for table in TABLES:
        cols = schema.glue_columns(table)
        glue.create_table(
            DatabaseName=DATABASE,
            TableInput={
                "Name": table,
                "TableType": "EXTERNAL_TABLE",
                "Parameters": {"classification": "parquet"},
                "PartitionKeys": [{"Name": c["name"], "Type": c["type"]} for c in cols["partition_keys"]],
                "StorageDescriptor": {
                    "Columns": [{"Name": c["name"], "Type": c["type"]} for c in cols["columns"]],
                    "Location": f"s3://{BUCKET}/{PREFIX}/{table}/",
                    "InputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat",
                    "OutputFormat": "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat",
                    "SerdeInfo": {
                        "SerializationLibrary": "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
                    },
                },
            },
        )


def _partitions(glue: Any, table: str) -> dict[tuple[str, ...], dict[str, Any]]:
    parts = glue.get_partitions(DatabaseName=DATABASE, TableName=table)["Partitions"]
    return {tuple(p["Values"]): p["StorageDescriptor"] for p in parts}


def test_partitions_are_registered_in_glue_idempotently(s3: Any) -> None:
    glue = boto3.client("glue", region_name="us-east-1")
    _create_glue_tables(glue)
    lake = S3Lake(BUCKET, PREFIX, database=DATABASE)

    lake.write("steps", [_step("a", 1.0), _step("b", 2.0, "disagg")], part_name="p1")
    lake.write("campaigns", [{"campaign_id": "camp-1", "status": "running"}], part_name="campaign")

    steps = _partitions(glue, "steps")
    assert set(steps) == {("camp-1", "agg"), ("camp-1", "disagg")}
    sd = steps[("camp-1", "disagg")]
    assert sd["Location"] == f"s3://{BUCKET}/{PREFIX}/steps/campaign_id=camp-1/experiment=disagg/"
    assert (
        sd["SerdeInfo"]["SerializationLibrary"]
        == "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
    )
    assert sd["InputFormat"].endswith("MapredParquetInputFormat")
    assert [(c["Name"], c["Type"]) for c in sd["Columns"]] == schema.data_columns("steps")
    campaigns = _partitions(glue, "campaigns")
    assert campaigns[("camp-1",)]["Location"] == f"s3://{BUCKET}/{PREFIX}/campaigns/campaign_id=camp-1/"

    # When the same partitions are written again (redelivery, or another part): no error, no duplicates
    lake.write("steps", [_step("a", 1.0), _step("b", 2.0, "disagg")], part_name="p1")
    lake.write("steps", [_step("c", 3.0)], part_name="p2")
    assert set(_partitions(glue, "steps")) == {("camp-1", "agg"), ("camp-1", "disagg")}

    # Without a database nothing is registered
    S3Lake(BUCKET, PREFIX).write("steps", [_step("d", 1.0, "third")], part_name="p1")
    assert ("camp-1", "third") not in _partitions(glue, "steps")


def test_missing_glue_table_is_an_error(s3: Any) -> None:
    glue = boto3.client("glue", region_name="us-east-1")
    glue.create_database(DatabaseInput={"Name": DATABASE})
    with pytest.raises(ClientError, match="EntityNotFound"):
        S3Lake(BUCKET, PREFIX, database=DATABASE).write("steps", [_step("a", 1.0)], part_name="p1")


# --------------------------------------------------------------------------------------------- raw


def test_raw_dir_and_write_raw(s3: Any) -> None:
    lake = S3Lake(BUCKET, PREFIX)
    raw = lake.raw_uri("camp-1", "agg", "sweep-c4-r0")
    assert raw == f"s3://{BUCKET}/{PREFIX}/raw/campaign_id=camp-1/experiment=agg/step_id=sweep-c4-r0/"
    assert _s3_keys(s3) == []  # nothing created
    with pytest.raises(ValueError, match="step_id"):
        lake.raw_uri("camp-1", "agg", "../x")

    uri = lake.write_raw("camp-1", "agg", "sweep-c4-r0", "dataset.jsonl", b'{"a": 1}\n')
    assert uri == f"{raw}inputs/dataset.jsonl"
    assert lake.write_raw("camp-1", "agg", "sweep-c4-r0", "dataset.jsonl", b'{"a": 1}\n') == uri
    with pytest.raises(FileExistsError, match="other content"):
        lake.write_raw("camp-1", "agg", "sweep-c4-r0", "dataset.jsonl", b'{"a": 2}\n')
    key = uri.removeprefix(f"s3://{BUCKET}/")
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b'{"a": 1}\n'
    assert _s3_keys(s3) == [key]
    with pytest.raises(ValueError, match="raw file name"):
        lake.write_raw("camp-1", "agg", "sweep-c4-r0", "../evil", b"x")


def test_raw_keys_match_the_local_lake(s3: Any, tmp_path: Path) -> None:
    local = LocalLake(tmp_path / "lake")
    path = local.write_raw("c", "e", "s", "in.json", b"{}")
    uri = S3Lake(BUCKET, PREFIX).write_raw("c", "e", "s", "in.json", b"{}")
    assert uri.removeprefix(f"s3://{BUCKET}/{PREFIX}/") == Path(path).relative_to(local.root).as_posix()


@pytest.mark.parametrize("hostile", ["{outside}", "../../escaped.json", "a/../../escaped.json", "a//b.json",
                                     "./profile_export.jsonl", "a\\b.json"])
def test_raw_keys_that_could_leave_the_ingest_copy_are_refused_before_anything_is_written(
        s3: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hostile: str) -> None:
    # Given a step's raw area holding a real summary and one key a load pod chose: "//" + an absolute
    # path (joined to a directory, it replaces it), or ".." / "." / empty segments, or a backslash
    scratch = tmp_path / "scratch"  # where the copy's temporary directory is made
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    outside = tmp_path / "outside" / "escaped.json"
    lake = S3Lake(BUCKET, PREFIX)
    prefix = lake.raw_uri("c1", "agg", "s1").removeprefix(f"s3://{BUCKET}/")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}{SUMMARY_JSON}", Body=b"{}")
    key = prefix + hostile.format(outside=outside)
    s3.put_object(Bucket=BUCKET, Key=key, Body=b'{"forged": true}')
    assert key in _s3_keys(s3)  # S3 keeps the key as written
    # When Ingest asks for its local copy
    # Then it is refused, naming the key, and no file was written anywhere
    with pytest.raises(ArtifactError, match="raw artifact key") as err, lake.raw_local("c1", "agg", "s1"):
        pass
    assert repr(key) in str(err.value)
    assert not outside.exists() and not list(tmp_path.rglob("*.json"))
    assert list(scratch.iterdir()) == []


def test_raw_copy_keeps_the_layout_and_skips_folder_markers(s3: Any) -> None:
    lake = S3Lake(BUCKET, PREFIX)
    prefix = lake.raw_uri("c1", "agg", "s1").removeprefix(f"s3://{BUCKET}/")
    for key in (prefix, f"{prefix}inputs/", f"{prefix}inputs/d.jsonl", f"{prefix}{SUMMARY_JSON}"):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"" if key.endswith("/") else b"x")
    with lake.raw_local("c1", "agg", "s1") as root:
        copied = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert copied == ["inputs/d.jsonl", SUMMARY_JSON]


@pytest.mark.parametrize(("key", "copied_as"), [
    ("raw/x/", None), ("raw/x/a/", None), ("raw/x/a/b.json", "a/b.json"), ("raw/x/profile.json", "profile.json"),
])
def test_raw_relative_path_of_a_safe_key(key: str, copied_as: str | None) -> None:
    from benchctl.lake.paths import raw_relative_path

    assert raw_relative_path("raw/x/", key) == copied_as


@pytest.mark.parametrize(("key", "rule"), [
    ("raw/x//etc/passwd", "absolute part"), ("raw/x//", "absolute part"), ("raw/x/a/../../b", "'..' segment"),
    ("raw/x/a/./b", "'..' segment"), ("raw/x/a//b", "'..' segment"), ("raw/x/a\\b", "backslash"),
    ("raw/x/a\nb", "control character"), ("raw/y/a", "not under"),
])
def test_raw_relative_path_refuses_a_key_naming_it_and_the_rule(key: str, rule: str) -> None:
    from benchctl.lake.paths import raw_relative_path

    with pytest.raises(ArtifactError, match=re.escape(rule)) as err:
        raw_relative_path("raw/x/", key)
    assert repr(key) in str(err.value)


# ------------------------------------------------------------------------------------------ run store


def test_s3_run_store_behaves_like_the_local_one(s3: Any, tmp_path: Path) -> None:
    remote = S3RunStore(BUCKET, "runs/camp-1")
    local = LocalRunStore(tmp_path / "runs")
    assert remote.uri == f"s3://{BUCKET}/runs/camp-1"
    for store in (remote, local):
        assert store.read_json("plan.json") is None
        assert not store.exists("plan.json")
        store.write_json("plan.json", {"steps": [1, 2], "at": datetime(2026, 1, 1)})
        store.write_json("deployments/agg.json", {"name": "agg"})
        store.write_json("deployments/disagg.json", {"name": "disagg"})
        store.write_json("deployments-old/x.json", {})
        store.write_json("list.json", [1, 2])  # type: ignore[arg-type]
    s3.put_object(Bucket=BUCKET, Key="runs/camp-1/notes.txt", Body=b"not json")
    s3.put_object(Bucket=BUCKET, Key="runs/camp-10/plan.json", Body=b"{}")  # another run, same prefix start

    assert (
        remote.read_json("plan.json")
        == local.read_json("plan.json")
        == {"steps": [1, 2], "at": "2026-01-01 00:00:00"}
    )
    assert remote.read_json("list.json") == {"value": [1, 2]}
    assert remote.exists("deployments/agg.json")
    assert (
        remote.keys("deployments")
        == local.keys("deployments")
        == ["deployments/agg.json", "deployments/disagg.json"]
    )
    assert (
        remote.keys("")
        == local.keys("")
        == sorted(
            [
                "plan.json",
                "list.json",
                "deployments/agg.json",
                "deployments/disagg.json",
                "deployments-old/x.json",
            ]
        )
    )
    assert remote.keys("nothing") == []

    remote.delete("deployments/agg.json")
    remote.delete("deployments/agg.json")  # deleting a missing key is not an error
    assert not remote.exists("deployments/agg.json")
    assert remote.keys("deployments") == ["deployments/disagg.json"]


class _Refusing:
    """An S3 client as S3 answers a role whose s3:ListBucket holds only under a prefix (``s3:prefix``): every
    GET/HEAD of a key it may not find is 403, not 404; a listing under the prefix answers."""

    def __init__(self, keys: set[str], readable: bool) -> None:
        self.keys, self.readable = keys, readable

    def _refusal(self, op: str) -> ClientError:
        return ClientError({"Error": {"Code": "AccessDenied" if op == "GetObject" else "403"}}, op)

    def get_object(self, Bucket: str, Key: str) -> Any:
        if Key in self.keys and self.readable:
            return {"Body": io.BytesIO(b'{"a": 1}')}
        raise self._refusal("GetObject")

    def head_object(self, Bucket: str, Key: str) -> Any:
        if Key in self.keys and self.readable:
            return {}
        raise self._refusal("HeadObject")

    def list_objects_v2(self, Bucket: str, Prefix: str, MaxKeys: int) -> Any:
        return {"Contents": [{"Key": k} for k in sorted(self.keys) if k.startswith(Prefix)][:MaxKeys]}


def test_s3_run_store_reads_a_403_for_a_key_no_listing_finds_as_missing_and_raises_any_other() -> None:
    """S3 answers a missing key with 404 only to a caller that may list the bucket; the functions may list
    only under their prefixes, so S3 may answer 403: the run store then lists exactly that key. Nothing
    there: missing (None / False); there but refused: the refusal, as S3 gave it."""
    store = S3RunStore(BUCKET, "runs/camp-1")
    store._s3_client = _Refusing({"runs/camp-1/runner/agg/s1/token.json.bak"}, readable=True)
    assert store.read_json("runner/agg/s1/token.json") is None  # only a longer key shares the prefix
    assert store.exists("runner/agg/s1/token.json") is False
    store._s3_client = _Refusing({"runs/camp-1/runner/agg/s1/token.json"}, readable=False)
    with pytest.raises(ClientError, match="AccessDenied"):
        store.read_json("runner/agg/s1/token.json")
    with pytest.raises(ClientError, match="403"):
        store.exists("runner/agg/s1/token.json")
    store._s3_client = _Refusing({"runs/camp-1/runner/agg/s1/token.json"}, readable=True)
    assert store.read_json("runner/agg/s1/token.json") == {"a": 1} and store.exists("runner/agg/s1/token.json")


@pytest.mark.parametrize("key", ["../x", "/plan.json", "a/../../b.json", "a/../b.json", "", "a//b.json"])
def test_s3_run_store_refuses_escaping_keys(s3: Any, key: str) -> None:
    store = S3RunStore(BUCKET, "runs/camp-1")
    with pytest.raises(ValueError, match="run store key"):
        store.write_json(key, {})
    with pytest.raises(ValueError, match="run store key"):
        store.read_json(key)
    assert _s3_keys(s3) == []


def test_import_is_cheap() -> None:
    code = "import sys, benchctl.aws.s3; print(sorted(m for m in ('awswrangler', 'boto3', 'pandas', 'pyarrow') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
