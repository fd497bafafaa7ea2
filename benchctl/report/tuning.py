"""The report's "Tuning" section: each tuned arm's candidates (predicted and measured SLO edge and goodput, the
pilot that measured it, the choice and why) from the lake's ``tuning`` table (``benchctl.campaign.tuning``), and
the sentence that says what the comparison compares: "each arm at the best configuration its own pilots found (per arm: the layout, how many were feasible and how many piloted)", or,
without a tune phase (``tune: off``), that the comparison is of the given configurations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SECTION_ID = "tuning"
TITLE = "Tuning"
COLUMNS = ["experiment", "candidate", "given", "pilot", "predicted_edge", "predicted_goodput_rps", "fits_memory",
           "measured_edge", "measured_goodput_rps", "chosen", "why"]
GIVEN = ("the comparison is of the given configurations: each experiment ran as its spec wrote it (no tune phase; "
         "tune: off)")
DESCRIPTION = ("Before the comparison each arm's configurations of its GPU total were ranked by aiconfigurator's "
               "predicted SLO edge (the highest concurrency predicted within the SLO; goodput = requests/s there), "
               "the best few piloted with short loads, and the arm ran at the one whose pilot held the SLO "
               "(Wilson lower bound of its attainment at comparison.slo_attainment) up to the highest load. Edges "
               "are concurrencies; a candidate without a pilot has no measured figures.")


def tuning_query(cid: str) -> str:
    return (f"SELECT {', '.join(COLUMNS)} FROM tuning WHERE campaign_id = '{cid}' "  # noqa: S608 (a checked id)
            "ORDER BY experiment, chosen DESC, measured_edge DESC NULLS LAST, predicted_edge DESC NULLS LAST, candidate")


def sentence(rows: list[dict[str, Any]]) -> str:
    """What the comparison compares (module doc)."""
    if not rows:
        return GIVEN[0].upper() + GIVEN[1:] + "."
    arms: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        arms.setdefault(str(r["experiment"]), []).append(r)
    each = "; ".join(
        f"{arm}: {next((r['candidate'] for r in v if r['chosen']), '?')}, of {len(v)} feasible layouts "
        f"{sum(1 for r in v if r['pilot'])} piloted ({sum(1 for r in v if r['pilot']) / len(v):.0%})"
        for arm, v in arms.items())
    return f"Each arm at the best configuration its own pilots found ({each})."


def html_section(rows: list[dict[str, Any]], table: Callable[[list[str], list[dict[str, Any]]], str],
                 esc: Callable[[str], str], sim: str) -> str:
    body = table(COLUMNS, rows) if rows else ""
    return (f'<section id="{SECTION_ID}" class="table" data-rows="{len(rows)}"><h2>{esc(TITLE)}{sim}</h2>'
            f'<p class="tuning-sentence"><strong>{esc(sentence(rows))}</strong></p>'
            + (f'<p class="desc">{esc(DESCRIPTION)}</p>' if rows else "") + f"{body}</section>")


def md_lines(rows: list[dict[str, Any]], table: Callable[[list[str], list[dict[str, Any]]], str],
             text: Callable[[str], str], tag: str) -> list[str]:
    out = [f"## {TITLE}{tag}", "", f"**{text(sentence(rows))}**", ""]
    if rows:
        out += [text(DESCRIPTION), "", table(COLUMNS, rows), ""]
    return out
