"""The report's "Load generator" section: per step, whether AIPerf kept up, with the figures behind the verdict
(``benchctl.lake.client_load``: issue lag against its budget, requests issued on time, AIPerf's CPU against its
cores), and the caveat sentence when any step was client-bound. May import the standard library and the core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchctl.lake import client_load
from benchctl.lake.paths import check_path_value

SECTION_ID = "client"
TITLE = "Load generator (client)"
BOUND, KEEPS_UP, NOT_MEASURED = "CLIENT-BOUND", "keeps up", "not measured"
COLUMNS = ("experiment", "step_id", "concurrency", "client", "why", "client_on_time_fraction",
           "client_issue_lag_p50_ms", "client_issue_lag_p95_ms", "client_lag_budget_ms",
           "client_credit_to_start_p95_ms", "client_effective_concurrency", "client_cpu_cores",
           "client_cpu_cores_available", "client_cpu_wait_fraction")
DESCRIPTION = (
    "Per step: did AIPerf issue its requests on time? Issue lag = how long a concurrency slot stayed free "
    "before AIPerf sent the next request on it (from its records); on time = within the budget "
    f"max({client_load.LAG_FLOOR_MS:g} ms, {client_load.LAG_FRACTION * 100:g} % of the step's request latency p50). "
    f"A step is {BOUND} when fewer than {client_load.MIN_ON_TIME * 100:g} % of its requests were on time or "
    f"AIPerf's processes used more than {client_load.MAX_CPU_SHARE * 100:g} % of the cores they could use during "
    "the profiling phase (CPU measured by the load runner; 'not measured' where it recorded none). "
    "credit_to_start_p95 and effective_concurrency are AIPerf's own figures; cpu_wait_fraction: of the time AIPerf's "
    "processes were runnable, the share they waited for a CPU (the host's contention, not judged).")


def client_query(cid: str) -> str:
    check_path_value("campaign_id", cid)  # path-safe characters only: safe to quote in SQL
    cols = ", ".join(c for c in COLUMNS if c.startswith("client_"))
    return (f"SELECT experiment, step_id, step_index, concurrency, request_latency_p50_ms, {cols} "  # noqa: S608
            f"FROM steps WHERE campaign_id = '{cid}' ORDER BY step_index, step_id, experiment")


def client_rows(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The section's rows: each step's figures with its verdict (``client``) and the figure behind it."""
    out = []
    for s in steps:
        bound, why = client_load.verdict(s)
        flag = NOT_MEASURED if bound is None else BOUND if bound else KEEPS_UP
        out.append({**{c: s.get(c) for c in COLUMNS if c not in ("client", "why")}, "client": flag, "why": why})
    return [{c: r.get(c) for c in COLUMNS} for r in out]


def caveat(rows: list[dict[str, Any]]) -> str | None:
    """One sentence when any step was client-bound, naming them; None otherwise."""
    bound = [f"{r['experiment']}/{r['step_id']}" for r in rows if r["client"] == BOUND]
    if not bound:
        return None
    shown = ", ".join(bound[:6]) + (f" and {len(bound) - 6} more" if len(bound) > 6 else "")
    return (f"Caveat: the load generator could not keep up in {len(bound)} of {len(rows)} steps ({shown}): it sent "
            "requests late or ran out of CPU, so the server saw less load than the step's concurrency (its throughput "
            "is understated, its latencies belong to a lower load) and AIPerf's own delays may be in its timings "
            f"(see \"{TITLE}\").")


def html_section(rows: list[dict[str, Any]], table: Callable[[list[str], list[dict[str, Any]]], str],
                 esc: Callable[[str], str], sim: str) -> str:
    """The section as HTML (``table`` renders rows; client-bound cells are marked ``class="client-bound"``)."""
    n_bound = sum(1 for r in rows if r["client"] == BOUND)
    body = (table(list(COLUMNS), rows).replace(f"<td>{BOUND}</td>", f'<td class="client-bound">{BOUND}</td>')
            if rows else '<p class="empty">No steps for this campaign.</p>')
    note = caveat(rows)
    return (f'<section id="{SECTION_ID}" class="table" data-rows="{len(rows)}" data-client-bound="{n_bound}">'
            f"<h2>{esc(TITLE)}{sim}</h2><p class=\"desc\">{esc(DESCRIPTION)}</p>"
            + (f'<p class="caveat client-caveat">{esc(note)}</p>' if note else "") + f"{body}</section>")


def md_lines(rows: list[dict[str, Any]], table: Callable[[list[str], list[dict[str, Any]]], str],
             text: Callable[[Any], str], tag: str) -> list[str]:
    out = [f"## {TITLE}{tag}", "", text(DESCRIPTION), ""]
    note = caveat(rows)
    out += [f"**{text(note)}**", ""] if note else []
    out += [table(list(COLUMNS), rows) if rows else "_no steps for this campaign_", ""]
    return out
