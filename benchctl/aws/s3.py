"""The S3 lake and run store: the lake's layout (``benchctl.lake.paths``) on S3, registered in Glue.

Layout under ``s3://<bucket>/<prefix>/`` (relative keys identical to ``benchctl.local.lake.LocalLake``)::

    campaigns/campaign_id=<c>/<part>.parquet
    <table>/campaign_id=<c>/experiment=<e>/<part>.parquet      # steps, requests, server_metrics, ...
    raw/campaign_id=<c>/experiment=<e>/step_id=<s>/...         # AIPerf artifacts as written
    raw/campaign_id=<c>/experiment=<e>/step_id=<s>/inputs/     # datasets we generated for a step

Partition columns live in the key (hive style), not inside the files, as Athena/Glue expect; file
columns and types come from :mod:`benchctl.lake.schema` (parquet ``TIMESTAMP_MICROS`` for timestamps).

One object per partition, named after the caller's ``part_name`` (e.g. the step id), is written with
``awswrangler.s3.to_parquet`` on that exact key, *not* in dataset mode (which names files with random
uuids): an S3 PUT replaces a whole object atomically, so a redelivered event overwrites its own object
instead of adding a duplicate, and readers see either the old or the new rows, never a mix.

Partitions are registered explicitly in Glue after each write (``batch_create_partition`` through
``awswrangler.catalog.add_parquet_partitions``; an existing partition is not an error), so queries see
new data immediately without a crawler or ``MSCK REPAIR TABLE``. The Glue tables themselves (columns
from ``schema.glue_columns``) are created by the infrastructure, not here.

:class:`S3RunStore` is the ``RunStore`` port (``benchctl.campaign.ports``) over ``s3://<bucket>/<prefix>/<key>``.

boto3, awswrangler, pandas and pyarrow are imported lazily: importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchctl.errors import ArtifactError
from benchctl.lake import schema
from benchctl.lake.paths import (
    check_path_value,
    partition_path,
    partition_rows,
    raw_prefix,
    raw_relative_path,
)

if TYPE_CHECKING:  # pragma: no cover
    import boto3
    import pandas as pd

_PARQUET_COMPRESSION = "snappy"  # awswrangler's default, and the local lake's (pyarrow's)


def _pyarrow_kwargs() -> dict[str, Any]:
    """pyarrow writer options: awswrangler's defaults would give ms precision (``coerce_timestamps="ms"``)
    and, through ``flavor="spark"``, INT96 timestamps; the schema says INT64 ``TIMESTAMP_MICROS``."""
    # A fresh dict per call: awswrangler fills in its defaults by mutating the one it is given.
    return {"coerce_timestamps": "us", "use_deprecated_int96_timestamps": False}


def _client(session: boto3.Session | None, service: str) -> Any:
    import boto3

    return (session or boto3.Session()).client(service)


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code"))


def _is_missing(exc: Exception) -> bool:
    return _error_code(exc) in {"404", "NoSuchKey", "NotFound"}


class S3Lake:
    """The lake on S3 (``LakePort``); with ``database``, new partitions are added to its Glue tables."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "lake",
        *,
        database: str | None = None,
        session: boto3.Session | None = None,
    ) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"S3 bucket name {bucket!r} is invalid")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.database = database
        self.session = session
        self._s3_client: Any = None

    # ------------------------------------------------------------------------------------- helpers
    @property
    def uri(self) -> str:
        """``s3://<bucket>/<prefix>/`` (the lake root, with a trailing slash)."""
        return f"s3://{self.bucket}/{self._key('')}"

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _s3(self) -> Any:
        if self._s3_client is None:
            self._s3_client = _client(self.session, "s3")
        return self._s3_client

    def partition_prefix(self, table: str, values: dict[str, str]) -> str:
        """The key prefix of one partition, relative to the bucket, with a trailing slash."""
        return self._key(partition_path(table, values))

    # --------------------------------------------------------------------------------------- write
    def write(self, table: str, rows: list[dict[str, Any]], *, part_name: str) -> list[str]:
        """Write ``rows`` to ``<table>/<partitions>/<part_name>.parquet``, one object per partition.

        Rows are normalised against the schema first (unknown columns and bad types raise ValueError
        before anything is written). Returns the S3 URIs written, in partition order; with a
        ``database``, each partition is then registered in the Glue table ``<table>`` (idempotent).
        An empty ``rows`` writes nothing.
        """
        keys = schema.partition_keys(table)
        groups = partition_rows(table, rows, part_name)
        if not groups:
            return []

        import awswrangler as wr

        data_types = schema.data_columns(table)
        dtype = dict(data_types)
        # Every DataFrame is built before the first PUT, so a conversion error writes nothing.
        frames = {part: _frame(table, part_rows) for part, part_rows in groups.items()}
        written: list[str] = []
        partitions: dict[str, list[str]] = {}
        for part in sorted(frames):
            prefix = self.partition_prefix(table, dict(zip(keys, part, strict=True)))
            uri = f"s3://{self.bucket}/{prefix}{part_name}.parquet"
            wr.s3.to_parquet(
                frames[part],
                path=uri,
                index=False,
                dtype=dtype,
                compression=_PARQUET_COMPRESSION,
                pyarrow_additional_kwargs=_pyarrow_kwargs(),
                boto3_session=self.session,
                use_threads=False,
            )
            written.append(uri)
            partitions[f"s3://{self.bucket}/{prefix}"] = list(part)
        if self.database:
            # batch_create_partition; AlreadyExistsException entries are ignored by awswrangler.
            wr.catalog.add_parquet_partitions(
                database=self.database,
                table=table,
                partitions_values=partitions,
                compression=_PARQUET_COMPRESSION,
                columns_types=dtype,
                boto3_session=self.session,
            )
        return written

    # ----------------------------------------------------------------------------------------- raw
    def raw_uri(self, campaign_id: str, experiment: str, step_id: str) -> str:
        """The S3 URI prefix (trailing slash) of a step's raw artifacts; nothing is created."""
        return f"s3://{self.bucket}/{self._key(raw_prefix(campaign_id, experiment, step_id))}"

    def write_raw(self, campaign_id: str, experiment: str, step_id: str, name: str, data: bytes) -> str:
        """Keep an input file in the step's raw area (``<raw_dir>inputs/<name>``); its S3 URI.

        Identical bytes already there are a no-op; other bytes under the same name raise
        FileExistsError (a raw input is never silently replaced). The PUT is conditional
        (``If-None-Match: *``), so two concurrent writers cannot replace each other's object.
        """
        from botocore.exceptions import ClientError

        check_path_value("raw file name", name)
        uri = f"{self.raw_uri(campaign_id, experiment, step_id)}inputs/{name}"
        key = uri.removeprefix(f"s3://{self.bucket}/")
        s3 = self._s3()
        try:
            s3.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code not in {"PreconditionFailed", "412", "ConditionalRequestConflict"}:
                raise
            existing = s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            if existing != data:
                raise FileExistsError(
                    f"{uri}: exists with other content; raw inputs are never replaced"
                ) from None
        return uri

    @contextlib.contextmanager
    def raw_local(self, campaign_id: str, experiment: str, step_id: str) -> Iterator[Path]:
        """A step's raw artifacts copied into a temporary directory (same relative layout), for parsing.

        Every key is listed and checked first (:func:`benchctl.lake.paths.raw_relative_path`): one that could
        resolve outside the directory (``//``, ``..``, ...) raises ArtifactError before any file is written.
        """
        prefix = self.raw_uri(campaign_id, experiment, step_id).removeprefix(f"s3://{self.bucket}/")
        s3 = self._s3()
        wanted: list[tuple[str, str]] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                rel = raw_relative_path(prefix, obj["Key"])
                if rel is not None:
                    wanted.append((obj["Key"], rel))
        with tempfile.TemporaryDirectory(prefix="benchctl-raw-") as tmp:
            root = Path(tmp).resolve()
            for key, rel in wanted:
                dest = (root / rel).resolve()
                if not dest.is_relative_to(root):  # a symlink cannot be in a fresh directory: belt and braces
                    raise ArtifactError(f"raw artifact key {key!r} resolves outside {root}")
                dest.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(self.bucket, key, str(dest))
            yield root

    # ---------------------------------------------------------------------------------------- read
    def files(self, table: str, campaign_id: str | None = None) -> list[str]:
        """Keys (relative to the bucket) of the table's parquet objects, sorted."""
        rel = f"{table}/"
        if campaign_id is not None:
            rel += f"campaign_id={check_path_value('campaign_id', campaign_id)}/"
        prefix = self._key(rel)
        out: list[str] = []
        for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            out.extend(
                obj["Key"]
                for obj in page.get("Contents", [])
                if obj["Key"].endswith(".parquet") and not obj["Key"].rsplit("/", 1)[-1].startswith(".")
            )
        return sorted(out)

    def read_table(self, table: str, campaign_id: str | None = None) -> list[dict[str, Any]]:
        """All rows of ``table`` (optionally one campaign), partition keys included as strings.

        Columns in schema order; objects in key order, rows in file order. For tests and reports:
        queries over many rows belong to Athena.
        """
        import pyarrow.parquet as pq

        names = schema.column_names(table)
        keys = schema.partition_keys(table)
        rows: list[dict[str, Any]] = []
        for key in self.files(table, campaign_id):
            segments = dict(seg.split("=", 1) for seg in key.split("/")[:-1] if "=" in seg)
            values = {k: segments[k] for k in keys}
            body = self._s3().get_object(Bucket=self.bucket, Key=key)["Body"].read()
            for rec in pq.read_table(io.BytesIO(body)).to_pylist():
                full = {**rec, **values}
                rows.append({n: full.get(n) for n in names})
        return rows


def _frame(table: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Normalised rows as a DataFrame of the table's data columns with exact, nullable dtypes.

    Built through pyarrow with the schema (the same conversion as the local lake), then mapped to
    pandas' nullable dtypes: bigint -> Int64 (not float64 when a value is missing), boolean ->
    boolean, string -> string, timestamp -> datetime64[us]. awswrangler's ``dtype`` cast is then a
    no-op and the parquet types are exactly ``schema.arrow_schema(table, include_partitions=False)``.
    """
    import pandas as pd
    import pyarrow as pa

    file_schema = schema.arrow_schema(table, include_partitions=False)
    arrays = {f.name: [r[f.name] for r in rows] for f in file_schema}
    tbl = pa.Table.from_pydict(arrays, schema=file_schema)
    mapping = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype(), pa.string(): pd.StringDtype()}
    df = tbl.to_pandas(types_mapper=mapping.get, coerce_temporal_nanoseconds=False)
    for f in file_schema:
        if pa.types.is_timestamp(f.type):
            df[f.name] = df[f.name].astype("datetime64[us]")
    return df


class S3RunStore:
    """``RunStore`` over ``s3://<bucket>/<prefix>/<key>`` (JSON objects; PUTs replace atomically)."""

    def __init__(self, bucket: str, prefix: str, *, session: boto3.Session | None = None) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"S3 bucket name {bucket!r} is invalid")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.session = session
        self.uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._s3_client: Any = None

    def _s3(self) -> Any:
        if self._s3_client is None:
            self._s3_client = _client(self.session, "s3")
        return self._s3_client

    def _base(self) -> str:
        return f"{self.prefix}/" if self.prefix else ""

    def _key(self, key: str) -> str:
        if not isinstance(key, str) or not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"run store key {key!r} escapes {self.uri}")
        if any(seg in {"", "."} for seg in key.rstrip("/").split("/")):
            raise ValueError(f"run store key {key!r} has an empty or '.' segment")
        return self._base() + key

    def read_bytes(self, key: str) -> bytes | None:
        """The object as it was written (None: not there, see :meth:`_absent`)."""
        from botocore.exceptions import ClientError

        try:
            body: bytes = self._s3().get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except ClientError as exc:
            if self._absent(exc, self._key(key)):
                return None
            raise
        return body

    def read_json(self, key: str) -> dict[str, Any] | None:
        body = self.read_bytes(key)
        if body is None:
            return None
        data = json.loads(body.decode("utf-8"))
        return data if isinstance(data, dict) else {"value": data}

    def write_json(self, key: str, obj: dict[str, Any]) -> None:
        text = json.dumps(obj, indent=2, sort_keys=True, default=str)
        self._s3().put_object(
            Bucket=self.bucket, Key=self._key(key), Body=text.encode("utf-8"), ContentType="application/json"
        )

    def create_json(self, key: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create-only: a conditional PUT (``If-None-Match: *``; S3 answers 412 PreconditionFailed when the key
        exists, 409 ConditionalRequestConflict to the loser of two concurrent creates, who retries and then
        sees the winner's object). S3 user guide, "How to prevent object overwrites with conditional writes"."""
        from botocore.exceptions import ClientError

        text = json.dumps(obj, indent=2, sort_keys=True, default=str)
        for _ in range(5):
            try:
                self._s3().put_object(Bucket=self.bucket, Key=self._key(key), Body=text.encode("utf-8"),
                                      ContentType="application/json", IfNoneMatch="*")
                return None
            except ClientError as exc:
                if _error_code(exc) not in {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}:
                    raise
            existing = self.read_json(key)
            if existing is not None:
                return existing
        raise RuntimeError(f"{self.uri}/{key}: neither created nor readable after 5 conditional writes")

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._s3().head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if self._absent(exc, self._key(key)):
                return False
            raise
        return True

    def _absent(self, exc: Exception, full_key: str) -> bool:
        """Whether a read's error means that the object is not there: S3's 404, or its 403 when a listing of
        exactly that key finds nothing. S3 answers a missing key with 404 only to a caller that may
        s3:ListBucket the bucket, else 403 (GetObject's "Permissions"); the functions may list only under
        their prefixes (an ``s3:prefix`` condition, which a GET does not carry; whether such a grant counts
        there is not documented), so the 403 may well mean "no such key". Any other error, or a key that is
        listed, is raised as it came."""
        from botocore.exceptions import ClientError

        if _is_missing(exc):
            return True
        if _error_code(exc) not in {"403", "AccessDenied", "Forbidden"}:
            return False
        try:
            listed = self._s3().list_objects_v2(Bucket=self.bucket, Prefix=full_key, MaxKeys=1).get("Contents", [])
        except ClientError:
            return False
        return not any(obj.get("Key") == full_key for obj in listed)

    def delete(self, key: str) -> None:
        self._s3().delete_object(Bucket=self.bucket, Key=self._key(key))  # missing: no error

    def keys(self, prefix: str) -> list[str]:
        """Relative keys ending in ``.json`` under ``prefix`` (a "directory"; "" for all), sorted."""
        base = self._base()
        search = self._key(prefix.rstrip("/")) + "/" if prefix else base
        out: list[str] = []
        for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=search):
            out.extend(
                obj["Key"][len(base) :] for obj in page.get("Contents", []) if obj["Key"].endswith(".json")
            )
        return sorted(out)
