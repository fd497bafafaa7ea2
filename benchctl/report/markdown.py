"""The report as Markdown: the same tables and provenance, figures listed (see the HTML report).
May import the standard library and the core."""

from __future__ import annotations

from typing import Any

from benchctl.report.answers import answers
from benchctl.report.chartkit import SIM_TAG, SIM_TEXT
from benchctl.report.data import (
    ReportData,
    fmt_value,
    network_rows,
    provenance_items,
    table_sections,
    versions_pretty,
)
from benchctl.report.ending import RECEIPT_COLUMNS, ending, receipt_summary
from benchctl.report.figures import figures


def _md_cell(v: Any) -> str:
    return fmt_value(v).replace("|", "\\|").replace("\n", " ")


def _md_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(_md_cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(out)


def render_markdown(data: ReportData) -> str:
    tag = f" ({SIM_TAG})" if data.simulated else ""
    out = [f"# benchctl report: campaign {data.campaign_id}{tag}", ""]
    if data.simulated:
        out += [f"> **{SIM_TAG}: {SIM_TEXT}.** Every figure comes from the local engine; prices are illustrative.",
                ""]
    e = ending(data)
    out += [f"## How it ended: {e.headline}{tag}", ""]
    out += ["```text", e.cause, "```", ""] if e.cause else []
    out += ["**PARTIAL: the results below are what completed before the campaign ended.**", ""] if e.partial else []
    cols = [c for c in RECEIPT_COLUMNS if any(r.get(c) for r in e.receipt)]
    out += ["### Teardown receipt", "", receipt_summary(e), ""] + ([_md_table(cols, e.receipt), ""] if e.receipt else [])
    out += [f"## Answers{tag}", "", "The plan's four questions and four hypotheses, each judged over the comparisons "
            "the campaign recorded: every compared figure with its confidence interval over repeats, a direction only "
            "where the interval clears the practical threshold with at least two repeats per side, otherwise "
            "\"inconclusive\" and why; \"not measured\" where no comparison could answer it; what was left out is "
            "named.", ""]
    for a in answers(data):
        out += [f"### {a.key.upper()}. {a.title}", "", f"**Verdict{tag} ({a.status}):** {a.verdict}", ""]
        if a.figures:
            out += [_md_table(["where", "figures"], [{"where": w, "figures": f} for w, f in a.figures]), ""]
        if a.excluded:
            out += [f"_Left out or unverified: {'; '.join(a.excluded)}._", ""]
        out += [f"_Evidence: {a.evidence}. Samples: {a.samples or 'none'}."
                + (f" Method: {a.method}." if a.method else "") + "_", ""]
    out += [f"## Provenance{tag}", ""]
    out += [f"- **{k}**: {v}" for k, v in provenance_items(data)]
    out += ["", "Versions:", "", "```json", versions_pretty(data), "```", ""]
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
    for _sid, title, rows, cols, desc in table_sections(data):
        out += [f"## {title}{tag}", "", desc, ""]
        out += [_md_table(cols, rows.rows) if rows.rows else "_no rows for this campaign_", ""]
    out += [f"## Predicted vs measured{tag}", ""]
    if data.predictions is not None:
        out += [_md_table(data.predictions.columns, data.predictions.rows), ""]
    else:
        out += [f"_{data.predictions_note or 'No predictions.'}_", ""]
    out += [f"## Figures{tag}", "", "Figures are omitted in Markdown: see the HTML report "
            "(`benchctl report --format html`):", ""]
    out += [f"- {f.title}" for f in figures(data)]
    out.append("")
    return "\n".join(out)

