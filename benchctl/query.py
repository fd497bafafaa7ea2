"""Query the local lake with DuckDB using the same SQL that Athena runs.

One DuckDB view per lake table (over the hive-partitioned parquet files; an empty view with the
schema's columns when the table has no file yet), then one view per ``sql/views/<name>.sql``.

A view file holds ONE query in Athena's (Trino) dialect: a ``SELECT``/``WITH`` statement, the body
of the view; the file name is the view name. Athena gets ``CREATE OR REPLACE VIEW <name> AS <body>``
from whoever deploys it; locally the body is transpiled with sqlglot (``read="trino"``,
``write="duckdb"``). Views may use other views; they are created in dependency order.

Imports duckdb and sqlglot (local engine only); what the Report function uses on AWS (``REPORT_VIEWS``,
``athena_view_ddl``, ``round_for_reading``) needs neither.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from benchctl import schema

VIEWS_DIR = Path(__file__).resolve().parent.parent / "sql" / "views"

_DUCK_TYPES = {
    "string": "VARCHAR",
    "bigint": "BIGINT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP",
}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The comparison views a campaign reports (all columns go to report/<view>.csv|json) and the columns
# `benchctl run` prints for a person (the views hold more: spreads, sample counts, experiments).
REPORT_VIEWS: dict[str, tuple[str, ...]] = {
    "v_concurrency_sweep": (
        "workload", "concurrency", "agg_ttft_p50_ms", "disagg_ttft_p50_ms", "agg_itl_p50_ms", "disagg_itl_p50_ms",
        "agg_output_tokens_per_s", "disagg_output_tokens_per_s", "agg_goodput_ratio", "disagg_goodput_ratio",
        "n_repeats", "agg_experiment", "disagg_experiment",
    ),
    "v_multi_turn": (
        "workload", "turn", "agg_ttft_p50_ms", "disagg_ttft_p50_ms", "agg_ttft_p99_ms", "disagg_ttft_p99_ms",
        "agg_n_requests", "disagg_n_requests", "agg_conversation_p50_s", "disagg_conversation_p50_s",
        "agg_cache_hit_rate", "disagg_cache_hit_rate", "agg_experiment", "disagg_experiment",
    ),
    "v_sequence_distribution": (
        "distribution", "experiment", "isl_bucket", "n_requests", "ttft_p50_ms", "ttft_p99_ms", "ttft_cv",
        "tps_user_p50", "tps_user_cv", "requested_isl_mean", "actual_isl_mean", "output_tokens_per_s",
    ),
    "v_prefix_cache": (
        "workload", "prefix_ratio", "agg_ttft_p50_ms", "disagg_ttft_p50_ms", "agg_ttft_improvement_pct",
        "disagg_ttft_improvement_pct", "agg_cache_hit_rate", "disagg_cache_hit_rate", "agg_kv_usage_max",
        "n_repeats", "agg_experiment", "disagg_experiment",
    ),
    "v_cost_efficiency": (
        "category", "experiment", "gpus", "gpu_kinds", "gpu_usd_per_hour", "cost_usd", "output_tokens_per_s",
        "usd_per_1m_output_tokens", "usage_usd_per_1m_output_tokens", "tokens_per_usd", "goodput_per_usd_hour",
        "simulated", "scope",
    ),
    "v_pareto": (
        "workload", "experiment", "variant", "gpus", "output_tokens_per_s_per_gpu", "ttft_p50_ms", "on_frontier",
    ),
    "v_feature_ladder": (
        "experiment", "base_experiment", "changed_feature", "workload", "variant", "ttft_p50_change_pct",
        "output_tokens_per_s_change_pct", "base_cache_hit_rate", "cache_hit_rate",
    ),
}



def view_sql_files(views_dir: Path = VIEWS_DIR) -> dict[str, Path]:
    """``{view name: file}`` for every ``*.sql`` in ``views_dir``."""
    if not views_dir.is_dir():
        return {}
    return {p.stem: p for p in sorted(views_dir.glob("*.sql"))}


def parse_query(sql: str, *, dialect: str = "trino", what: str = "query") -> Any:
    """The single SELECT/WITH statement in ``sql`` as a sqlglot expression; ValueError otherwise."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except ParseError as e:
        raise ValueError(f"{what}: not valid {dialect} SQL: {e}") from None
    if len(statements) != 1:
        raise ValueError(f"{what}: expected exactly one SQL statement, found {len(statements)}")
    stmt = statements[0]
    if not isinstance(stmt, exp.Query):
        raise ValueError(
            f"{what}: only a SELECT (or WITH ... SELECT) query is allowed here, got {stmt.key.upper()}"
        )
    return stmt


_COMMENT_OR_STRING = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'", re.DOTALL)
_WORD = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_CTE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s+AS\s*\(", re.IGNORECASE)


def view_references(body: str, views: set[str]) -> set[str]:
    """The other views of ``views`` that a view's query reads, from its words alone (comments and string
    literals stripped, names it defines itself as CTEs ignored). Standard library only: the Report
    function runs this on AWS, where sqlglot is not shipped; tests/unit/test_lake_query.py holds it to
    sqlglot's table references for every view file."""
    text = _COMMENT_OR_STRING.sub(" ", body)
    ctes = {m.group(1) for m in _CTE.finditer(text)}
    return {w for w in _WORD.findall(text) if w in views} - ctes


def athena_view_ddl(views_dir: Path = VIEWS_DIR) -> list[tuple[str, str]]:
    """``(view, "CREATE OR REPLACE VIEW view AS <file body>")`` for every view file, dependencies first.

    The body is the file's own text (Athena runs the Trino dialect the files are written in); the
    order follows the views each query reads (``view_references``), so running the list in order
    creates every view. No sqlglot: the Report function on AWS calls this.
    """
    files = view_sql_files(views_dir)
    deps: dict[str, set[str]] = {}
    bodies: dict[str, str] = {}
    for name, path in files.items():
        if not _IDENT.match(name):
            raise ValueError(f"{path}: the file name must be a valid view name (letters, digits, _)")
        body = path.read_text(encoding="utf-8")
        deps[name] = view_references(body, set(files) - {name})
        bodies[name] = body.strip().rstrip(";")
    ordered: list[str] = []
    while len(ordered) < len(files):
        ready = sorted(n for n in files if n not in ordered and deps[n] <= set(ordered))
        if not ready:
            raise ValueError(f"views depend on each other in a cycle: {sorted(set(files) - set(ordered))}")
        ordered += ready
    return [(n, f"CREATE OR REPLACE VIEW {n} AS\n{bodies[n]}") for n in ordered]


def to_duckdb(sql: str, *, what: str = "query") -> str:
    """Trino (Athena) SQL -> DuckDB SQL, refusing anything but one query."""
    stmt = parse_query(sql, what=what)
    return stmt.sql(dialect="duckdb")


class QueryEngine:
    def __init__(self, lake_root: Path, *, views_dir: Path = VIEWS_DIR) -> None:
        import duckdb

        self.lake_root = Path(lake_root)
        self.views_dir = Path(views_dir)
        self.con = duckdb.connect(":memory:")
        self.table_views: list[str] = []
        self.sql_views: list[str] = []
        for table in schema.table_names():
            self.con.execute(self._table_view_sql(table))
            self.table_views.append(table)
        self._load_sql_views()

    # ---------------------------------------------------------------------------------------------
    def _table_view_sql(self, table: str) -> str:
        cols = schema.columns(table)
        base = self.lake_root / table
        has_files = base.is_dir() and any(not p.name.startswith(".") for p in base.rglob("*.parquet"))
        if not has_files:
            select = ", ".join(f"CAST(NULL AS {_DUCK_TYPES[t]}) AS {_q(n)}" for n, t in cols)
            return f"CREATE OR REPLACE VIEW {_q(table)} AS SELECT {select} WHERE false"
        glob = str(base / "**" / "*.parquet").replace("'", "''")
        hive_types = ", ".join(f"'{k}': 'VARCHAR'" for k in schema.partition_keys(table))
        source = (
            f"read_parquet('{glob}', hive_partitioning = true, union_by_name = true, "
            f"hive_types = {{{hive_types}}})"
        )
        present = {row[0] for row in self.con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}  # noqa: S608
        # Columns no file has yet (schema grew) read as NULL of the schema type.
        select = ", ".join(
            f"CAST({_q(n) if n in present else 'NULL'} AS {_DUCK_TYPES[t]}) AS {_q(n)}" for n, t in cols
        )
        # identifiers come from the schema module, quoted; the path is quote-escaped
        return f"CREATE OR REPLACE VIEW {_q(table)} AS SELECT {select} FROM {source}"  # noqa: S608

    def _load_sql_views(self) -> None:
        import duckdb

        pending: dict[str, str] = {}
        for name, path in view_sql_files(self.views_dir).items():
            if not _IDENT.match(name):
                raise ValueError(f"{path}: the file name must be a valid view name (letters, digits, _)")
            body = to_duckdb(path.read_text(encoding="utf-8"), what=str(path))
            pending[name] = f"CREATE OR REPLACE VIEW {_q(name)} AS {body}"
        # Views may reference each other: create what can be created until nothing changes.
        errors: dict[str, str] = {}
        while pending:
            progressed = False
            for name in list(pending):
                try:
                    self.con.execute(pending[name])
                except duckdb.Error as e:
                    errors[name] = str(e)
                    continue
                del pending[name]
                errors.pop(name, None)
                self.sql_views.append(name)
                progressed = True
            if not progressed:
                detail = "; ".join(f"{self.views_dir / (n + '.sql')}: {errors[n]}" for n in pending)
                raise ValueError(f"cannot create view(s) {sorted(pending)}: {detail}")

    # ---------------------------------------------------------------------------------------------
    def views(self) -> list[str]:
        return [*self.table_views, *self.sql_views]

    def run(self, name_or_sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run a view by name, or one SELECT/WITH query (Trino dialect, as on Athena).

        Anything else (DDL, DML, several statements) raises ValueError: the CLI only reads.
        """
        import duckdb

        text = name_or_sql.strip().rstrip(";").strip()
        if _IDENT.match(text):
            if text not in self.views():
                raise ValueError(f"unknown view or table {text!r}; valid: {', '.join(self.views())}")
            sql = f"SELECT * FROM {_q(text)}"  # noqa: S608 (a known view name, quoted)
        else:
            sql = to_duckdb(text)
        try:
            cur = self.con.execute(sql)
        except duckdb.Error as err:  # an unknown table or column, a type error: the person's query
            raise ValueError(self._explain(err, text)) from None
        columns = [d[0] for d in cur.description or []]
        return columns, cur.fetchall()

    def _explain(self, err: Exception, query: str) -> str:
        """One line: DuckDB's own complaint, then the columns of the tables the query reads (or the
        tables and views there are, when it reads an unknown one)."""
        from sqlglot import exp

        first = str(err).strip().splitlines()[0]
        try:
            tables = sorted({t.name for t in parse_query(query).find_all(exp.Table)} & set(self.views()))
        except ValueError:
            tables = []
        known = [t for t in tables if t in self.views()]
        if not known or "Catalog Error" in first:
            return f"query: {first}; tables and views: {', '.join(self.views())}"
        cols = "; ".join(
            f"{t}: {', '.join(r[0] for r in self.con.execute(f'DESCRIBE {_q(t)}').fetchall())}" for t in known)
        return f"query: {first}; columns of {cols}"

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> QueryEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# --------------------------------------------------------------------------------------------------
# formatting


def round_for_reading(v: float) -> str:
    """A number as people read it in a table: thousands separated, 2 decimals, 4 digits below 1."""
    if math.isnan(v) or math.isinf(v):
        return str(v)
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1000:
        return f"{v:,.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.4g}"


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float | Decimal):
        return round_for_reading(float(v))
    if isinstance(v, datetime | date):
        return v.isoformat(sep=" ") if isinstance(v, datetime) else v.isoformat()
    return str(v)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, datetime | date):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    return v


def format_result(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table") -> str:
    """``table`` (aligned text, numbers rounded for reading), ``csv`` or ``json`` (full precision)."""
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if v is None else _jsonable(v) for v in r])
        return buf.getvalue()
    if fmt == "json":
        return json.dumps(
            [dict(zip(columns, (_jsonable(v) for v in r), strict=True)) for r in rows], indent=2, default=str
        )
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; valid: table, csv, json")
    cells = [[_text(v) for v in r] for r in rows]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float | Decimal) or r[i] is None for r in rows)
        for i in range(len(columns))
    ]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(list(columns)), "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)
