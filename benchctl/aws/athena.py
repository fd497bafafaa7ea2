"""Athena behind the ``QueryPort``, and the Report state on AWS.

:class:`AthenaQuery` runs one SELECT in the stack's workgroup and returns its rows typed from Athena's
column metadata (numbers, booleans, timestamps as naive UTC datetimes: what DuckDB returns locally), so
the report's data assembly (``benchctl.report.data``) runs on either engine and renders the same report.
:class:`AthenaReport` (the ``ReportPort``): every view is (re)created with ``CREATE OR REPLACE VIEW`` from
``sql/views`` in dependency order (cheap DDL, so a fresh deployment or an edited view file is live after
one campaign), each comparison view is queried for the campaign (Athena writes each result as CSV into
the workgroup's enforced output location, ``athena-results/``, where the report's view links point; each
with a ``simulated`` column, ``benchctl.analysis.views.export_sql``),
and the HTML report goes to ``s3://<bucket>/reports/<campaign id>/report.html``. The Report function
waits for these short queries itself (bounded by its timeout); everything else waits in the state machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from benchctl.analysis.views import REPORT_VIEWS, athena_view_ddl, campaign_rows_sql, export_sql
from benchctl.constants import report_key
from benchctl.lake.paths import check_path_value

_DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


def run_query(athena: Any, sql: str, *, database: str, workgroup: str, timeout_s: float = 300.0,
              sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    qid = athena.start_query_execution(
        QueryString=sql, QueryExecutionContext={"Database": database}, WorkGroup=workgroup)["QueryExecutionId"]
    waited = 0.0
    while True:
        ex = athena.get_query_execution(QueryExecutionId=qid)["QueryExecution"]
        state = ex["Status"]["State"]
        if state in _DONE:
            break
        if waited > timeout_s:
            athena.stop_query_execution(QueryExecutionId=qid)
            raise TimeoutError(f"Athena query {qid} still {state} after {timeout_s:.0f} s: {sql[:80]}")
        sleep(0.5)
        waited += 0.5
    if state != "SUCCEEDED":
        reason = ex["Status"].get("StateChangeReason", "")
        raise RuntimeError(f"Athena query {qid} {state}: {reason} ({sql[:80]}...)")
    return dict(ex)


_TYPES: dict[str, Callable[[str], Any]] = {"bigint": int, "integer": int, "smallint": int, "tinyint": int,
                                           "double": float, "float": float, "real": float, "decimal": float}


def _cell(value: Any, type_name: str) -> Any:
    """One result cell (Athena sends text) as the type its column metadata names."""
    if value is None:
        return None
    if type_name == "boolean":
        return value == "true"
    if type_name.startswith("timestamp"):  # "2026-11-30 06:00:00.000": naive UTC, as DuckDB returns it
        try:
            return datetime.fromisoformat(value.replace(" UTC", ""))
        except ValueError:
            return value
    conv = _TYPES.get(type_name.split("(", maxsplit=1)[0])
    if conv is None:
        return value
    try:
        return conv(value)
    except ValueError:
        return value


class AthenaQuery:
    """``QueryPort`` over Athena: one query per distinct SQL text (a report asks some twice), rows typed."""

    def __init__(self, athena: Any, *, database: str, workgroup: str,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.athena, self.database, self.workgroup, self.sleep = athena, database, workgroup, sleep
        self._results: dict[str, tuple[str, list[str], list[tuple[Any, ...]]]] = {}

    def execute(self, sql: str) -> dict[str, Any]:
        """Run a statement (DDL too) and wait for it; its execution record."""
        return run_query(self.athena, sql, database=self.database, workgroup=self.workgroup, sleep=self.sleep)

    def run(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        if sql not in self._results:
            ex = self.execute(sql)
            columns: list[str] = []
            types: list[str] = []
            rows: list[tuple[Any, ...]] = []
            first = True
            pages = self.athena.get_paginator("get_query_results").paginate(QueryExecutionId=ex["QueryExecutionId"])
            for page in pages:
                rs = page.get("ResultSet") or {}
                if not columns:
                    info = (rs.get("ResultSetMetadata") or {}).get("ColumnInfo") or []
                    columns = [c["Name"] for c in info]
                    types = [str(c.get("Type", "varchar")).lower() for c in info]
                for raw in rs.get("Rows") or []:
                    values = [d.get("VarCharValue") for d in raw.get("Data") or []]
                    if first and values == columns:  # Athena repeats the header as the first row of a SELECT
                        first = False
                        continue
                    first = False
                    rows.append(tuple(_cell(v, t) for v, t in zip(values, types, strict=False)))
            location = str(ex.get("ResultConfiguration", {}).get("OutputLocation", ""))
            self._results[sql] = (location, columns, rows)
        _, columns, rows = self._results[sql]
        return list(columns), list(rows)

    def location(self, sql: str) -> str:
        """Where Athena wrote the result of ``sql`` (a CSV in the workgroup's output location)."""
        self.run(sql)
        return self._results[sql][0]


class AthenaReport:
    """``ReportPort`` on AWS (see the module docstring)."""

    def __init__(self, session: Any, *, database: str, workgroup: str, bucket: str | None, lake_uri: str,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.session, self.database, self.workgroup, self.bucket = session, database, workgroup, bucket
        self.lake_uri, self.sleep = lake_uri, sleep

    def write(self, campaign_id: str) -> dict[str, str]:
        """``{view: result CSV URI, "report": report URI}``."""
        return athena_report(campaign_id, database=self.database, workgroup=self.workgroup, bucket=self.bucket,
                             session=self.session, sleep=self.sleep, source=self.lake_uri)


def athena_report(campaign_id: str, *, database: str, workgroup: str, bucket: str | None = None,
                  session: Any = None, sleep: Callable[[float], None] = time.sleep, query: Any = None,
                  source: str = "") -> dict[str, str]:
    """Create the views, query each comparison view for ``campaign_id``, and (with ``bucket``) write the HTML
    report to ``s3://<bucket>/reports/<campaign_id>/report.html`` (what the status notification links).
    ``query``: the query port to read through (default: Athena in ``workgroup``)."""
    import boto3

    from benchctl import report

    check_path_value("campaign_id", campaign_id)  # path-safe characters only: safe to quote in SQL
    session = session or boto3.session.Session()
    athena = query or AthenaQuery(session.client("athena"), database=database, workgroup=workgroup, sleep=sleep)
    for _, ddl in athena_view_ddl():
        athena.execute(ddl)
    out: dict[str, str] = {}
    for view in REPORT_VIEWS:  # each result CSV with a `simulated` column (the view's own, else campaigns')
        cols, _ = athena.run(campaign_rows_sql(view, campaign_id))
        out[view] = athena.location(export_sql(view, campaign_id, cols))
    if bucket:
        key = report_key(campaign_id)
        html = report.render_report(athena, campaign_id, "html", source=source or f"s3://{bucket}/lake",
                                    missing_ok=True)
        session.client("s3").put_object(Bucket=bucket, Key=key, Body=html.encode("utf-8"),
                                        ContentType="text/html; charset=utf-8")
        out["report"] = f"s3://{bucket}/{key}"
    return out
