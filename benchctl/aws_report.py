"""The Report state on AWS: the same view files, run by Athena in the stack's workgroup.

First every view is (re)created with ``CREATE OR REPLACE VIEW`` from ``sql/views`` in dependency
order (cheap DDL, so a fresh deployment or an edited view file is live after one campaign), then each
comparison view is queried for the campaign; Athena writes each result as CSV into the workgroup's
enforced output location (``athena-results/`` in the results bucket), where the report links point.
The Report function waits for these short queries itself (bounded by its timeout); everything else
waits in the state machine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchctl.lake import check_path_value
from benchctl.query import REPORT_VIEWS, athena_view_ddl

_DONE = {"SUCCEEDED", "FAILED", "CANCELLED"}


def run_query(athena: Any, sql: str, *, database: str, workgroup: str, timeout_s: float = 300.0,
              sleep: Any = time.sleep) -> dict[str, Any]:
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


_TYPES: dict[str, Any] = {"bigint": int, "integer": int, "double": float, "float": float, "real": float}


def _cell(value: Any, type_name: str) -> Any:
    if value is None:
        return None
    if type_name == "boolean":
        return value == "true"
    conv = _TYPES.get(type_name)
    if conv is None:
        return value
    try:
        return conv(value)
    except ValueError:
        return value


def query_rows(athena: Any, sql: str, *, database: str, workgroup: str, sleep: Any = time.sleep) -> tuple[str, Any]:
    """Run ``sql``; (result CSV URI, Rows) with values typed from Athena's column metadata."""
    from benchctl.report import Rows

    ex = run_query(athena, sql, database=database, workgroup=workgroup, sleep=sleep)
    columns: list[str] = []
    types: list[str] = []
    rows: list[dict[str, Any]] = []
    first = True
    for page in athena.get_paginator("get_query_results").paginate(QueryExecutionId=ex["QueryExecutionId"]):
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
            rows.append({c: _cell(v, t) for c, v, t in zip(columns, values, types, strict=False)})
    return ex.get("ResultConfiguration", {}).get("OutputLocation", ""), Rows(columns, rows)


def athena_report(campaign_id: str, *, database: str, workgroup: str, bucket: str | None = None,
                  session: Any = None, sleep: Any = time.sleep) -> dict[str, str]:
    """Create the views, query each for ``campaign_id``, and (with ``bucket``) write the HTML report to
    ``s3://<bucket>/reports/<campaign_id>/report.html`` (what the status notification links).

    ``{view: result CSV URI, "report": report URI}``.
    """
    import boto3

    from benchctl.report import assemble_report_data, render_html, report_queries

    check_path_value("campaign_id", campaign_id)  # path-safe characters only: safe to quote in SQL
    session = session or boto3.session.Session()
    athena = session.client("athena")
    for _, ddl in athena_view_ddl():
        run_query(athena, ddl, database=database, workgroup=workgroup, sleep=sleep)
    out: dict[str, str] = {}
    results = {}
    queries = {**report_queries(campaign_id),
               **{v: f"SELECT * FROM {v} WHERE campaign_id = '{campaign_id}'" for v in REPORT_VIEWS}}  # noqa: S608
    for key, sql in queries.items():
        uri, rows = query_rows(athena, sql, database=database, workgroup=workgroup, sleep=sleep)
        results[key] = rows
        if not key.startswith("_"):
            out[key] = uri
    if bucket:
        _, camp = query_rows(athena, f"SELECT * FROM campaigns WHERE campaign_id = '{campaign_id}'",  # noqa: S608
                             database=database, workgroup=workgroup, sleep=sleep)
        campaign = camp.rows[0] if camp.rows else {"campaign_id": campaign_id}
        _, predictions = query_rows(athena, f"SELECT * FROM predictions WHERE campaign_id = '{campaign_id}'",  # noqa: S608
                                    database=database, workgroup=workgroup, sleep=sleep)
        data = assemble_report_data(Path("s3"), campaign, results, predictions if predictions.rows else None,
                                    None if predictions.rows else "no predictions for this campaign "
                                    "(`benchctl predict SPEC` writes them)")
        key = f"reports/{campaign_id}/report.html"
        session.client("s3").put_object(Bucket=bucket, Key=key, Body=render_html(data).encode("utf-8"),
                                        ContentType="text/html; charset=utf-8")
        out["report"] = f"s3://{bucket}/{key}"
    return out
