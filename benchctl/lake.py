"""The local result store: the same hive-partitioned parquet layout as the S3 lake, in a directory.

Layout (partition columns live in the path, not inside the files, as Athena/Glue expect)::

    <root>/campaigns/campaign_id=<c>/<part>.parquet
    <root>/<table>/campaign_id=<c>/experiment=<e>/<part>.parquet     # steps, requests, server_metrics,
                                                                     # timeline, costs
    <root>/raw/campaign_id=<c>/experiment=<e>/step_id=<s>/...        # AIPerf artifacts as written
    <root>/raw/campaign_id=<c>/experiment=<e>/step_id=<s>/inputs/    # datasets we generated for it

Writes are atomic (a temporary file in the same directory, then ``os.replace``) and idempotent: the
same ``part_name`` overwrites the same file, so a redelivered event never duplicates rows. Callers pick
part names that identify the event (e.g. the step id), not a timestamp.

Imports pyarrow (an adapter: not for Lambdas without the pandas layer).
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchctl import schema

_SAFE = re.compile(r"^[a-z0-9_.-]+$")
RAW_DIR = "raw"


def check_path_value(kind: str, value: Any) -> str:
    """``value`` if it is safe as a path segment (lowercase letters, digits, ``-``, ``_``, ``.``)."""
    if not isinstance(value, str) or not _SAFE.match(value) or value in {".", ".."}:
        raise ValueError(
            f"{kind} {value!r} cannot be a lake path segment: use lowercase letters, digits, '-', '_', '.'"
        )
    return value


def partition_rows(
    table: str, rows: list[dict[str, Any]], part_name: str
) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Rows normalised against the schema, grouped by their partition values (path-safe, checked).

    Every lake writes through this first, so a bad row or name fails before anything is written.
    """
    check_path_value("part_name", part_name)
    keys = schema.partition_keys(table)
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        norm = schema.normalize_row(table, row)
        groups[tuple(check_path_value(k, norm[k]) for k in keys)].append(norm)
    return dict(groups)


class LocalLake:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()  # once: paths written into the lake (raw URIs) are absolute

    # ---------------------------------------------------------------------------------------------
    def partition_dir(self, table: str, values: dict[str, str]) -> Path:
        path = self.root / table
        for key in schema.partition_keys(table):
            path = path / f"{key}={check_path_value(key, values.get(key))}"
        return path

    def write(self, table: str, rows: list[dict[str, Any]], *, part_name: str) -> list[Path]:
        """Write ``rows`` to ``<table>/<partitions>/<part_name>.parquet``, one file per partition.

        Rows are normalised against the schema first (unknown columns and bad types raise
        ValueError before anything is written). Returns the files written, in partition order.
        An empty ``rows`` writes nothing.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        keys = schema.partition_keys(table)
        groups = partition_rows(table, rows, part_name)

        file_schema = schema.arrow_schema(table, include_partitions=False)
        data_cols = [n for n, _ in schema.data_columns(table)]
        written: list[Path] = []
        for part, part_rows in sorted(groups.items()):
            directory = self.partition_dir(table, dict(zip(keys, part, strict=True)))
            directory.mkdir(parents=True, exist_ok=True)
            arrays = {c: [r[c] for r in part_rows] for c in data_cols}
            tbl = pa.Table.from_pydict(arrays, schema=file_schema)
            final = directory / f"{part_name}.parquet"
            tmp = directory / f".{part_name}.{uuid.uuid4().hex}.tmp"
            try:
                pq.write_table(tbl, tmp)
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
                tmp.replace(final)  # os.replace: atomic within one directory
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
                raise
            written.append(final)
        return written

    def raw_dir(self, campaign_id: str, experiment: str, step_id: str) -> Path:
        """Where a step's raw AIPerf artifacts go (created if missing)."""
        path = (
            self.root
            / RAW_DIR
            / f"campaign_id={check_path_value('campaign_id', campaign_id)}"
            / f"experiment={check_path_value('experiment', experiment)}"
            / f"step_id={check_path_value('step_id', step_id)}"
        )
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextlib.contextmanager
    def raw_local(self, campaign_id: str, experiment: str, step_id: str) -> Iterator[Path]:
        """The step's raw artifact directory itself (the S3 lake yields a downloaded copy)."""
        yield self.raw_dir(campaign_id, experiment, step_id)

    def write_raw(self, campaign_id: str, experiment: str, step_id: str, name: str, data: bytes) -> str:
        """Keep an input file (e.g. a generated dataset) in the step's raw area, atomically; its path.

        Written under ``inputs/`` next to what AIPerf writes; rewriting identical bytes is a no-op,
        different bytes under the same name are refused (a raw input is never silently replaced).
        """
        check_path_value("raw file name", name)
        directory = self.raw_dir(campaign_id, experiment, step_id) / "inputs"
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / name
        if final.exists():
            if final.read_bytes() != data:
                raise FileExistsError(f"{final}: exists with other content; raw inputs are never replaced")
            return str(final)
        tmp = directory / f".{name}.{uuid.uuid4().hex}.tmp"
        try:
            tmp.write_bytes(data)
            tmp.replace(final)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        return str(final)

    def read_table(self, table: str, campaign_id: str | None = None) -> list[dict[str, Any]]:
        """All rows of ``table`` (optionally one campaign), partition keys included, schema order.

        Same contract as ``S3Lake.read_table``: for the few rows a report needs, not for analysis.
        """
        import pyarrow.parquet as pq

        names = schema.column_names(table)
        keys = schema.partition_keys(table)
        base = self.root / table
        if campaign_id is not None:
            base = base / f"campaign_id={check_path_value('campaign_id', campaign_id)}"
        if not base.is_dir():
            return []
        rows: list[dict[str, Any]] = []
        for f in sorted(p for p in base.rglob("*.parquet") if not p.name.startswith(".")):
            segments = dict(seg.split("=", 1) for seg in f.relative_to(self.root / table).parts[:-1] if "=" in seg)
            values = {k: segments.get(k) for k in keys}
            for rec in pq.read_table(f).to_pylist():
                full = {**rec, **values}
                rows.append({n: full.get(n) for n in names})
        return rows

    def tables(self) -> list[str]:
        """Schema tables that have at least one parquet file, in schema order."""
        return [t for t in schema.table_names() if self.files(t)]

    def files(self, table: str) -> list[Path]:
        base = self.root / table
        if not base.is_dir():
            return []
        return sorted(p for p in base.rglob("*.parquet") if not p.name.startswith("."))
