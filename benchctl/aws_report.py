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


def athena_report(campaign_id: str, *, database: str, workgroup: str, session: Any = None,
                  sleep: Any = time.sleep) -> dict[str, str]:
    """Create the views, query each comparison view for ``campaign_id``; ``{view: result CSV URI}``."""
    import boto3

    check_path_value("campaign_id", campaign_id)  # path-safe characters only: safe to quote in SQL
    athena = (session or boto3.session.Session()).client("athena")
    for _, ddl in athena_view_ddl():
        run_query(athena, ddl, database=database, workgroup=workgroup, sleep=sleep)
    out = {}
    for view in REPORT_VIEWS:
        sql = f"SELECT * FROM {view} WHERE campaign_id = '{campaign_id}'"  # noqa: S608 (checked id)
        ex = run_query(athena, sql, database=database, workgroup=workgroup, sleep=sleep)
        out[view] = ex.get("ResultConfiguration", {}).get("OutputLocation", "")
    return out
