"""The report as Markdown: the same tables and provenance, figures listed (see the HTML report).

Every text that comes from the spec, the lake or a log goes through :func:`md_text`: a renderer shows it as
the characters it is (no raw HTML, no link, code span, emphasis or table cell of its own); the versions
JSON sits in a code fence longer than any backtick run it holds. May import the standard library and the
core."""

from __future__ import annotations

import re
from typing import Any

from benchctl.report import client, since, tuning
from benchctl.report.answers import ANSWERS_INTRO, answers
from benchctl.report.calibration import description, mape_columns
from benchctl.report.chartkit import SIM_TAG
from benchctl.report.data import (
    ReportData,
    fmt_value,
    network_rows,
    provenance_items,
    table_sections,
    twin_text,
    versions_pretty,
)
from benchctl.report.ending import RECEIPT_COLUMNS, ending, receipt_summary
from benchctl.report.figures import figures
from benchctl.report.glance import COLUMNS as GLANCE_COLUMNS
from benchctl.report.glance import effect_table, notes_text
from benchctl.report.recommend import COLUMNS as REC_COLUMNS
from benchctl.report.recommend import INTRO as REC_INTRO
from benchctl.report.recommend import recommendations

# CommonMark's backslash escapes (any ASCII punctuation may be escaped) for the characters that start
# inline structure: code spans, emphasis, links and images, GFM tables and strikethrough
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_text(v: Any) -> str:
    """``v`` as inline Markdown text that renders as exactly its characters: one line (line breaks become
    spaces), ``&``, ``<`` and ``>`` as entities (so no raw HTML), inline punctuation backslash-escaped."""
    text = " ".join(fmt_value(v).splitlines())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code_block(text: str, info: str = "") -> list[str]:
    """``text`` verbatim in a fenced code block whose fence is longer than any backtick run inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]


def _md_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    out = ["| " + " | ".join(md_text(c) for c in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(md_text(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(out)


def render_markdown(data: ReportData) -> str:
    tag = f" ({SIM_TAG})" if data.simulated else ""
    out = [f"# benchctl report: campaign {md_text(data.campaign_id)}{tag}", ""]
    if data.simulated:
        out += [f"> **{data.sim_tag}: {data.sim_text}.** Every figure comes from the local engine; prices are illustrative.",
                *([f"> Timed by: {md_text(twin_text(data))}."] if data.twins else []), ""]
    caveat = client.caveat(data.client)
    out += [f"> **{md_text(caveat)}**", ""] if caveat else []
    e = ending(data)
    out += [f"## How it ended: {e.headline_in(md_text)}{tag}", ""]  # the lake's failed state and error escaped
    out += [*md_code_block(e.cause, "text"), ""] if e.cause else []  # a fence longer than any backtick run in it
    out += ["**PARTIAL: the results below are what completed before the campaign ended.**", ""] if e.partial else []
    cols = [c for c in RECEIPT_COLUMNS if any(r.get(c) for r in e.receipt)]
    out += ["### Teardown receipt", "", receipt_summary(e, md_text), ""] + ([_md_table(cols, e.receipt), ""] if e.receipt else [])
    found = answers(data)
    out += [f"## Recommendations{tag}", "", md_text(REC_INTRO), "",
            _md_table(REC_COLUMNS, [r.row() for r in recommendations(data, found)]), ""]
    out += [f"## Answers{tag}", "", md_text(ANSWERS_INTRO), ""]
    for a in found:
        out += [f"### {a.key.upper()}. {md_text(a.title)}", "",
                f"**Verdict{tag} ({md_text(a.status)}):** {md_text(a.verdict)}", ""]
        shown, notes = effect_table(a)
        if shown:
            out += [_md_table(GLANCE_COLUMNS, shown), ""] + [f"{md_text(n)}  " for n in notes_text(notes)] + [""]
        if a.figures:
            out += [_md_table(["where", "figures"], [{"where": w, "figures": f} for w, f in a.figures]), ""]
        if a.excluded:
            out += [f"_Left out or unverified: {md_text('; '.join(a.excluded))}._", ""]
        out += [f"_Evidence: {md_text(a.evidence)}. Samples: {md_text(a.samples or 'none')}."
                + (f" Method: {md_text(a.method)}." if a.method else "") + "_", ""]
    out += [f"## Provenance{tag}", ""]
    out += [f"- **{md_text(k)}**: {md_text(v)}" for k, v in provenance_items(data)]
    out += ["", "Versions:", "", *md_code_block(versions_pretty(data), "json"), ""]
    ds = [d for d in data.datasets if d.get("dataset_sha256")]
    out += ["Datasets (steps.dataset_sha256):", ""]
    out += [_md_table(["step_id", "workload_kind", "experiments", "dataset_sha256"], ds) if ds
            else "_no generated datasets_", ""]
    if data.images:
        out += ["Image digests:", "", _md_table(["where", "image", "digest"], data.images), ""]
    net_rows, placed = network_rows(data)
    out += [f"Network (observed: CNI, zones, MTU, placement, KV-transfer backend){tag}:", ""]
    if net_rows:
        out += [_md_table(list(dict.fromkeys(k for r in net_rows for k in r)), net_rows), ""]
        if placed:
            out += [_md_table(list(dict.fromkeys(k for r in placed for k in r)), placed), ""]
    else:
        out += ["_no network observation recorded_", ""]
    out += since.md_lines(data, _md_table, md_text, tag)
    out += tuning.md_lines(data.tuning, _md_table, md_text, tag)
    for _sid, title, rows, cols, desc in table_sections(data):
        out += [f"## {title}{tag}", "", md_text(desc), ""]
        out += [_md_table(cols, rows.rows) if rows.rows else "_no rows for this campaign_", ""]
    out += client.md_lines(data.client, _md_table, md_text, tag)
    out += [f"## Predicted vs measured{tag}", ""]
    if data.predictions is not None:
        out += [_md_table(data.predictions.columns, data.predictions.rows), ""]
    else:
        out += [f"_{md_text(data.predictions_note or 'No predictions.')}_", ""]
    if data.calibration is not None:  # twin vs prediction vs measurement (benchctl.report.calibration)
        cal = data.calibration
        out += [f"## Twin, prediction, measurement{tag}", "", md_text(description(cal)), ""]
        out += [f"_{md_text(n)}_" for n in cal.notes] + ([""] if cal.notes else [])
        out += ([_md_table(cal.columns, cal.rows), "", "Error per pair (MAPE, %):", "",
                 _md_table(mape_columns(cal), cal.mape), ""] if cal.rows else ["_no concurrency-sweep step_", ""])
    out += [f"## Figures{tag}", "", "Figures are omitted in Markdown: see the HTML report "
            "(`benchctl report --format html`):", ""]
    out += [f"- {md_text(f.title)}" for f in figures(data)]
    out.append("")
    return "\n".join(out)

