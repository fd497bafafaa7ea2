"""The DuckDB engine: the local lake queried with the same SQL Athena runs.

One DuckDB view per lake table (over the hive-partitioned parquet files; an empty view with the schema's
columns when the table has no file yet), then one view per ``sql/views/<name>.sql`` (the view catalog,
``benchctl.analysis.views``), transpiled from Athena's Trino dialect with sqlglot (``read="trino"``,
``write="duckdb"``) when the engine opens, and created in dependency order (the order Athena creates them in) when
a query first reads them. Implements the ``QueryPort`` (``run``).

Once the views exist the connection is closed around the lake (:meth:`QueryEngine._confine`, DuckDB's own
boundary, see https://duckdb.org/docs/stable/operations_manual/securing_duckdb/overview): the lake's table
directories are its only ``allowed_directories``, ``enable_external_access`` goes off (no other local file,
no URL, no ATTACH, COPY or extension), extension auto-loading goes off, and ``lock_configuration`` goes on,
so no query can ``SET`` any of it back. A query reading anything else is refused (:data:`OUTSIDE_LAKE`).
DuckDB spills to a private temporary directory (not ``.tmp`` under the current directory) within
:data:`MEMORY_LIMIT`; a symlink planted under a table is named (``skipped_links``, a warning) and never read: that
table's view reads its own files, listed when the engine opens.

Imports duckdb and sqlglot: the local engine and the CLI only.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from benchctl.analysis.views import IDENT, VIEWS_DIR, ordered_views, view_references
from benchctl.lake import schema

_DUCK_TYPES = {
    "string": "VARCHAR",
    "bigint": "BIGINT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMP",
}


OUTSIDE_LAKE = "a query reads only the lake's tables and views"
MEMORY_LIMIT = "4GB"  # DuckDB's own default is 80 % of the machine's memory


def _walk(base: Path) -> tuple[list[Path], list[Path]]:
    """One walk of a table's directory: (the symlinks under it, never followed; its own parquet files)."""
    links: list[Path] = []
    files: list[Path] = []
    stack = [base] if base.is_dir() else []
    while stack:
        with os.scandir(stack.pop()) as entries:
            for e in entries:
                if e.is_symlink():
                    links.append(Path(e.path))
                elif e.is_dir():
                    stack.append(Path(e.path))
                elif e.name.endswith(".parquet") and not e.name.startswith("."):
                    files.append(Path(e.path))
    return sorted(links), files


def parse_query(sql: str, *, dialect: str = "trino", what: str = "query") -> Any:
    """The single SELECT/WITH statement in ``sql`` as a sqlglot expression; ValueError otherwise."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    sqlglot_log = logging.getLogger("sqlglot")
    level = sqlglot_log.level
    sqlglot_log.setLevel(logging.ERROR)  # its "falling back to a Command" warning: the error below says it
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except ParseError as e:
        raise ValueError(f"{what}: not valid {dialect} SQL: {e}") from None
    finally:
        sqlglot_log.setLevel(level)
    if len(statements) != 1:
        raise ValueError(f"{what}: expected exactly one SQL statement, found {len(statements)}")
    stmt = statements[0]
    if not isinstance(stmt, exp.Query):
        # sqlglot reads a statement it does not know (INSTALL, LOAD, PRAGMA) as an alias or a command
        kind = stmt.key.upper() if stmt.key not in ("alias", "command", "column") else sql.split(maxsplit=1)[0].upper()
        raise ValueError(f"{what}: only a SELECT (or WITH ... SELECT) query is allowed here, got {kind}")
    return stmt


@functools.lru_cache(maxsize=256)
def to_duckdb(sql: str, *, what: str = "query") -> str:
    """Trino (Athena) SQL -> DuckDB SQL, refusing anything but one query. A pure function of its
    arguments, kept per process: the view catalog is transpiled once, however many engines are opened."""
    stmt = parse_query(sql, what=what)
    return stmt.sql(dialect="duckdb")


class QueryEngine:
    """DuckDB over the lake: a view per table (reading its parquet files at each query, so an engine sees what
    is ingested after it opened) and the SQL views over them. ``snapshot``: each table is read ONCE, into
    memory, when the engine opens, and each SQL view is computed once over those tables, into a table of its
    name (in dependency order, so a view reads the computed views it names): the report's engines, which run
    some 60 queries over a finished campaign (each would re-read and re-plan every parquet file, then re-plan
    and re-compute the nested views under it: about 50 ms a query) and must see one state of the lake."""

    def __init__(self, lake_root: Path, *, views_dir: Path = VIEWS_DIR, snapshot: bool = False) -> None:
        import duckdb

        self.lake_root = Path(lake_root).resolve()  # absolute: the paths the views read are the ones allowed
        self.views_dir = Path(views_dir)
        self.snapshot = snapshot
        # DuckDB's own spill directory (not ``.tmp`` under the current directory) and a memory limit
        self._tmp = tempfile.TemporaryDirectory(prefix="benchctl-duckdb-")
        self.con = duckdb.connect(":memory:", config={"temp_directory": self._tmp.name,
                                                      "memory_limit": MEMORY_LIMIT})
        self.skipped_links: list[Path] = []  # symlinks under the lake's tables: named, never read
        self.table_views: list[str] = []
        self.sql_views: list[str] = []
        self._pending: dict[str, tuple[Path, str, set[str]]] = {}  # view -> (file, DuckDB body, views it reads)
        for table in schema.table_names():
            self.con.execute(self._table_view_sql(table))
            self.table_views.append(table)
        self._load_sql_views()
        self._confine()

    def _confine(self) -> None:
        """Close the connection around the lake's tables, after the views exist: reads only under the
        tables' directories (whether or not they hold files yet: a run's engine outlives its first
        ingest), no other file system access, no extension, and the configuration locked."""
        dirs = [str(self.lake_root / table) + "/" for table in schema.table_names()]
        allowed = ", ".join("'" + d.replace("'", "''") + "'" for d in dirs)
        self.con.execute(f"SET allowed_directories = [{allowed}]")
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET autoinstall_known_extensions = false")
        self.con.execute("SET autoload_known_extensions = false")
        self.con.execute("SET lock_configuration = true")

    # ---------------------------------------------------------------------------------------------
    def _table_view_sql(self, table: str) -> str:
        cols = schema.columns(table)
        base = self.lake_root / table
        links, files = _walk(base)
        if not files:
            select = ", ".join(f"CAST(NULL AS {_DUCK_TYPES[t]}) AS {_q(n)}" for n, t in cols)
            return f"CREATE OR REPLACE {self._kind} {_q(table)} AS SELECT {select} WHERE false"
        if links:  # read the table's own files, listed now (a link would take every query outside the lake)
            self.skipped_links += links
            logging.getLogger(__name__).warning("lake table %s: skipped %d symlink(s): %s", table, len(links),
                                                ", ".join(str(p) for p in links[:5]))
            paths = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in sorted(files)) + "]"
        else:
            paths = "'" + str(base / "**" / "*.parquet").replace("'", "''") + "'"
        hive_types = ", ".join(f"'{k}': 'VARCHAR'" for k in schema.partition_keys(table))
        source = (
            f"read_parquet({paths}, hive_partitioning = true, union_by_name = true, "
            f"hive_types = {{{hive_types}}})"
        )
        present = {row[0] for row in self.con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}  # noqa: S608
        # Columns no file has yet (schema grew) read as NULL of the schema type.
        select = ", ".join(
            f"CAST({_q(n) if n in present else 'NULL'} AS {_DUCK_TYPES[t]}) AS {_q(n)}" for n, t in cols
        )
        # identifiers come from the schema module, quoted; the path is quote-escaped
        return f"CREATE OR REPLACE {self._kind} {_q(table)} AS SELECT {select} FROM {source}"  # noqa: S608

    @property
    def _kind(self) -> str:
        return "TABLE" if self.snapshot else "VIEW"

    def _load_sql_views(self) -> None:
        """Every view file, in the order Athena creates them (``ordered_views``: dependencies first), each
        transpiled to DuckDB now (a file that is not one query is an error here), and created in DuckDB when a
        query first reads it (:meth:`_create`): DuckDB binds a view's whole tree of views at its creation,
        10-30 ms a view, and most engines read one or two of the 14 (the report reads its views from one
        snapshot engine, which computes each once, see the class)."""
        files = ordered_views(self.views_dir)
        names = {name for name, _ in files}
        for name, text in files:
            path = self.views_dir / f"{name}.sql"
            self._pending[name] = (path, to_duckdb(text, what=str(path)), view_references(text, names - {name}))
            self.sql_views.append(name)

    def _create(self, wanted: set[str]) -> None:
        """Create the views ``wanted`` names (and the views they read), dependencies first; a view DuckDB
        cannot create is one error naming its file."""
        import duckdb

        need: set[str] = set()
        stack = [n for n in wanted if n in self._pending]
        while stack:
            name = stack.pop()
            if name in need:
                continue
            need.add(name)
            stack += [d for d in self._pending[name][2] if d in self._pending]
        for name in [n for n in self.sql_views if n in need]:  # sql_views: dependencies first
            path, body, _ = self._pending[name]
            try:
                self.con.execute(f"CREATE OR REPLACE {self._kind} {_q(name)} AS {body}")
            except duckdb.Error as e:
                raise ValueError(f"cannot create view {name!r}: {path}: {e}") from None
            del self._pending[name]

    # ---------------------------------------------------------------------------------------------
    def views(self) -> list[str]:
        return [*self.table_views, *self.sql_views]

    def run(self, name_or_sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run a view by name, or one SELECT/WITH query (Trino dialect, as on Athena), over the lake only.

        Anything else (DDL, DML, several statements) raises ValueError: the CLI only reads.
        """
        import duckdb

        text = name_or_sql.strip().rstrip(";").strip()
        if IDENT.match(text):
            if text not in self.views():
                raise ValueError(f"unknown view or table {text!r}; valid: {', '.join(self.views())}")
            sql = f"SELECT * FROM {_q(text)}"  # noqa: S608 (a known view name, quoted)
            self._create({text})
        else:
            sql = to_duckdb(text)
            self._create(view_references(text, set(self._pending)))
        try:
            cur = self.con.execute(sql)
        except duckdb.PermissionException as err:  # a file, URL or extension outside the lake
            first = str(err).strip().splitlines()[0]
            raise ValueError(
                f"query refused: {OUTSIDE_LAKE} (under {self.lake_root}); DuckDB's external access is off: "
                f"{first}") from None
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
        self._tmp.cleanup()

    def __enter__(self) -> QueryEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
