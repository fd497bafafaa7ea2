"""The lake's tables (:mod:`benchctl.lake.tables`) as the others need them: ingestion, the local DuckDB views and
the Glue tables follow this. Partition keys are listed among the columns (rows carry them) but are not stored inside
the parquet files: they live in the path (``campaign_id=<c>/experiment=<e>/``), as Athena expects.

Timestamps are UTC, stored without a zone (Glue ``timestamp``, parquet ``TIMESTAMP_MICROS``).

May import only the standard library (pyarrow is imported lazily by :func:`arrow_schema`), so that
Lambdas and CDK can import it cheaply.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
from benchctl.lake.tables import TABLES, TYPES, Table


def _get(table: str) -> Table:
    try:
        return TABLES[table]
    except KeyError:
        raise ValueError(f"unknown lake table {table!r}; valid: {sorted(TABLES)}") from None


def table_names() -> list[str]:
    return list(TABLES)


def columns(table: str) -> list[tuple[str, str]]:
    """All columns of ``table`` as ``(name, type)``, partition keys included (rows carry them)."""
    return list(_get(table).columns)


def column_names(table: str) -> list[str]:
    return [n for n, _ in _get(table).columns]


def partition_keys(table: str) -> list[str]:
    return list(_get(table).partition_keys)


def data_columns(table: str) -> list[tuple[str, str]]:
    """The columns stored inside the parquet files (Glue's StorageDescriptor columns)."""
    t = _get(table)
    return [(n, ty) for n, ty in t.columns if n not in t.partition_keys]


def arrow_type(type_name: str) -> pa.DataType:
    import pyarrow as pa

    mapping = {
        "string": pa.string(),
        "bigint": pa.int64(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "timestamp": pa.timestamp("us"),
    }
    try:
        return mapping[type_name]
    except KeyError:
        raise ValueError(f"unknown column type {type_name!r}; valid: {sorted(TYPES)}") from None


def arrow_schema(table: str, *, include_partitions: bool = True) -> pa.Schema:
    """The pyarrow schema of ``table`` (partition keys excluded with ``include_partitions=False``)."""
    import pyarrow as pa

    cols = columns(table) if include_partitions else data_columns(table)
    return pa.schema([pa.field(n, arrow_type(t), nullable=True) for n, t in cols])


def glue_columns(table: str) -> dict[str, list[dict[str, str]]]:
    """``{"columns": [...], "partition_keys": [...]}`` as ``{"name", "type"}`` dicts, for Glue tables."""
    t = _get(table)
    return {
        "columns": [{"name": n, "type": ty} for n, ty in data_columns(table)],
        "partition_keys": [{"name": k, "type": dict(t.columns)[k]} for k in t.partition_keys],
    }


def _coerce(table: str, name: str, type_name: str, value: Any) -> Any:
    where = f"{table}.{name}"
    if value is None:
        return None
    if type_name == "string":
        if isinstance(value, str):
            return value
        raise ValueError(f"{where}: expected a string, got {type(value).__name__} {value!r:.80}")
    if type_name == "bigint":
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected an integer, got a boolean")
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                raise ValueError(f"{where}: {value:.3g} does not fit a 64-bit integer (bigint)")
            return value
        raise ValueError(f"{where}: expected an integer, got {type(value).__name__} {value!r:.80}")
    if type_name == "double":
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected a number, got a boolean")
        if isinstance(value, int | float):
            return float(value)
        raise ValueError(f"{where}: expected a number, got {type(value).__name__} {value!r:.80}")
    if type_name == "boolean":
        if isinstance(value, bool):
            return value
        raise ValueError(f"{where}: expected a boolean, got {type(value).__name__} {value!r:.80}")
    if type_name == "timestamp":
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(f"{where}: expected an ISO-8601 timestamp, got {value!r:.80}") from None
        if isinstance(value, datetime):
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            return value
        raise ValueError(f"{where}: expected a datetime, got {type(value).__name__} {value!r:.80}")
    raise ValueError(f"{where}: unknown column type {type_name!r}")  # pragma: no cover


def normalize_row(table: str, row: dict[str, Any]) -> dict[str, Any]:
    """Return ``row`` with every column of ``table`` in schema order.

    Missing columns become None; unknown columns raise ValueError naming them; values are checked
    against the column type (integral floats such as AIPerf's ``40.0`` become ints, aware datetimes
    become naive UTC, ISO strings become datetimes).
    """
    t = _get(table)
    names = [n for n, _ in t.columns]
    unknown = sorted(set(row) - set(names))
    if unknown:
        raise ValueError(f"{table}: unknown column(s) {unknown}; valid columns: {names}")
    return {n: _coerce(table, n, ty, row.get(n)) for n, ty in t.columns}


def json_text(value: Any) -> str | None:
    """Compact, key-sorted JSON text for the ``*_json`` columns (None stays None)."""
    if value is None:
        return None
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
