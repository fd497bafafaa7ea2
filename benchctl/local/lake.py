"""The local lake: the lake's layout (``benchctl.lake.paths``) in a directory, as hive-partitioned parquet files.

Writes are atomic (``benchctl.atomic``: a temporary file in the same directory, flushed, then renamed)
and idempotent: the same ``part_name`` overwrites the same file. Reads return rows with the partition
keys filled in from the path, in schema order (the same contract as the S3 lake).

Imports pyarrow: the local engine and the CLI only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from benchctl.atomic import atomic_write
from benchctl.lake import schema
from benchctl.lake.paths import check_path_value, partition_path, partition_rows, raw_prefix

CAMPAIGNS_DIR, LAKE_DIR, LOCKS_DIR, CACHE_DIR = "campaigns", "lake", "locks", "cache"  # under the workspace


class LocalLake:
    """``LakePort`` on this machine: ``<root>/<table>/<partitions>/<part>.parquet`` and the raw areas."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()  # once: paths written into the lake (raw URIs) are absolute

    # ---------------------------------------------------------------------------------------------
    def partition_dir(self, table: str, values: dict[str, str]) -> Path:
        return self.root / partition_path(table, values)

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
            written.append(atomic_write(directory / f"{part_name}.parquet", partial(pq.write_table, tbl), fsync=True))
        return written

    def raw_dir(self, campaign_id: str, experiment: str, step_id: str) -> Path:
        """Where a step's raw AIPerf artifacts go (created if missing)."""
        path = self.root / raw_prefix(campaign_id, experiment, step_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def raw_uri(self, campaign_id: str, experiment: str, step_id: str) -> str:
        """``LakePort``: the step's raw area (created if missing), as a path."""
        return str(self.raw_dir(campaign_id, experiment, step_id))

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
        return str(atomic_write(final, data))

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
