"""The report as one self-contained HTML file: inline CSS and SVG, no script, no font, no image, no link to
anything outside it. May import the standard library and the core."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from benchctl.report import client, since, tuning
from benchctl.report.answers import ANSWERS_INTRO, answers
from benchctl.report.calibration import description, mape_columns
from benchctl.report.chartkit import SIM_TAG, esc
from benchctl.report.data import (
    ReportData,
    fmt_value,
    network_rows,
    provenance_items,
    table_sections,
    twin_text,
    versions_pretty,
)
from benchctl.report.ending import RECEIPT_COLUMNS, Ending, ending, receipt_summary
from benchctl.report.evidence import Answer
from benchctl.report.figures import figures
from benchctl.report.glance import COLUMNS as GLANCE_COLUMNS
from benchctl.report.glance import effect_table, forests, notes_text
from benchctl.report.recommend import COLUMNS as REC_COLUMNS
from benchctl.report.recommend import INTRO as REC_INTRO
from benchctl.report.recommend import recommendations

_CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 0;
       color: #1d1d1f; background: #f4f5f7; }
main { max-width: 1180px; margin: 0 auto; padding: 16px 24px 64px; }
h1 { font-size: 26px; margin: 18px 0 4px; }
h2 { font-size: 19px; margin: 0 0 6px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 8px; padding: 14px 18px; margin: 16px 0; }
section section { border: none; padding: 0; margin: 12px 0 0; }
.banner { background: #b00020; color: #fff; font-weight: bold; font-size: 17px; padding: 12px 24px;
          text-align: center; letter-spacing: .02em; }
.sim-tag { display: inline-block; background: #b00020; color: #fff; font-size: 11px; font-weight: bold;
           padding: 2px 6px; border-radius: 4px; vertical-align: middle; margin-left: 6px; }
.note, .desc { color: #555; font-size: 13px; margin: 2px 0 10px; }
.empty { color: #8a6d00; background: #fff8e1; padding: 8px 10px; border-radius: 4px; font-size: 13px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #e1e4e8; padding: 4px 7px; white-space: nowrap; }
th { background: #f0f2f5; text-align: left; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.long { white-space: normal; min-width: 360px; }
tr:nth-child(even) td { background: #fafbfc; }
pre { background: #f6f8fa; padding: 10px; border-radius: 4px; font-size: 12px; overflow-x: auto; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; font-size: 13px; margin: 0; }
dl.kv dt { font-weight: 600; color: #444; }
dl.kv dd { margin: 0; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; word-break: break-all; }
nav ul { columns: 3; font-size: 13px; padding-left: 18px; }
nav a { color: #0b57d0; }
svg.figure { display: block; max-width: 100%; height: auto; margin: 8px 0; border: 1px solid #eceff3; }
svg.figure text { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; }
footer { color: #777; font-size: 12px; }
#ending.bad { border: 2px solid #b00020; }
.partial, .billing, .client-bound, .caveat { color: #b00020; font-weight: bold; }
#recommendations td { white-space: normal; vertical-align: top; }
#recommendations td.long { min-width: 260px; }
section.answer td.long { white-space: normal; }
section.answer td:first-child { white-space: normal; max-width: 200px; }
td.confirmed { color: #1b5e20; font-weight: bold; }
td.refuted { color: #b00020; font-weight: bold; }
details.method summary { cursor: pointer; color: #555; font-size: 13px; }
@media print { details.method > * { display: block; } nav { display: none; } section { break-inside: avoid; } }
"""


def _ending_section(data: ReportData) -> str:
    """How the campaign ended, first thing: the ending, the state and why, whether what follows is partial,
    and the teardown receipt (each resource read back; a pool still billing in red)."""
    e = ending(data)
    return (f'<section id="ending" class="{"bad" if e.partial else "ok"}" data-status="{esc(e.status)}" '
            f'data-receipt-complete="{str(e.receipt_complete).lower()}"><h2>How it ended: {esc(e.headline)}'
            f"{_sim_span(data)}</h2>"
            + (f"<pre class=\"cause\">{esc(e.cause)}</pre>" if e.cause else "")
            + ('<p class="partial">PARTIAL: the results below are what completed before the campaign ended.</p>'
               if e.partial else "")
            + receipt_section(e) + "</section>")


def receipt_section(e: Ending) -> str:
    """The teardown receipt: its one-line summary, then its rows. A campaign that succeeded with every resource
    read back gone, restored or handed over shows the summary alone, the rows folded under it (the decision
    follows at once); any other ending shows them open, a pool still billing in red."""
    rows = [{**r, "billing": r.get("billing") or ""} for r in e.receipt]
    cols = [c for c in RECEIPT_COLUMNS if any(r.get(c) for r in rows)]
    table = _html_table(cols, rows).replace("<td>still billing", '<td class="billing">still billing') if rows else ""
    if table and e.status == "succeeded" and e.receipt_complete and not e.partial:
        table = f'<details id="receipt-rows"><summary>the {len(rows)} rows read back</summary>{table}</details>'
    return (f'<section id="receipt" data-rows="{len(rows)}"><h3>Teardown receipt</h3>'
            f'<p class="desc">{esc(receipt_summary(e))}</p>{table}</section>')


def _sim_span(data: ReportData) -> str:
    return f' <span class="sim-tag" title="{esc(data.sim_text)}">{esc(data.sim_tag)}</span>' if data.simulated else ""


def _html_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            text = fmt_value(v)
            cls = (' class="num"' if isinstance(v, int | float | Decimal) and not isinstance(v, bool)
                   else ' class="long"' if len(text) > 80 else "")
            cells.append(f"<td{cls}>{esc(text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _answer_html(a: Answer, data: ReportData) -> str:
    """One answer: its verdict once, a forest plot of its tests, its figures as numbers (each reason a numbered
    note), what was left out; the method, evidence and samples collapsed."""
    rows, notes = effect_table(a)
    plots = forests(a, data.simulated) if rows else []
    return (f'<section class="answer" id="answer-{a.key}" data-measured="{str(a.measured).lower()}" '
            f'data-status="{esc(a.status)}" data-forests="{len(plots)}">'
            f"<h3>{esc(a.key.upper())}. {esc(a.title)}</h3><p><b>Verdict{' (' + SIM_TAG + ')' if data.simulated else ''}"
            f" ({esc(a.status)}):</b> {esc(a.verdict)}</p>" + "\n".join(plots)
            + (_html_table(GLANCE_COLUMNS, rows) + "".join(f'<p class="note">{esc(n)}</p>' for n in notes_text(notes))
               if rows else "")
            + (_html_table(["where", "figures"], [{"where": w, "figures": f} for w, f in a.figures]) if a.figures else "")
            + (f'<p class="note excluded">Left out or unverified: {esc("; ".join(a.excluded))}.</p>' if a.excluded else "")
            + f'<details class="method"><summary>Method, evidence and samples</summary><p class="note">Evidence: '
            f'{esc(a.evidence)}. Samples: {esc(a.samples or "none")}.'
            + (f" Method: {esc(a.method)}." if a.method else "") + "</p></details></section>")


def render_html(data: ReportData) -> str:
    sim = _sim_span(data)
    c = data.campaign
    tables = table_sections(data)
    figs = figures(data)
    parts: list[str] = []
    toc: list[tuple[str, str]] = []

    toc.append(("ending", "How it ended"))
    parts.append(_ending_section(data))
    found = answers(data)
    recs = recommendations(data, found)
    toc.append(("recommendations", "Recommendations"))
    parts.append(f'<section id="recommendations" data-rows="{len(recs)}"><h2>Recommendations{sim}</h2>'
                 f'<p class="desc">{esc(REC_INTRO)}'
                 + (f" {esc(data.sim_text)}: they rehearse the decision, they say nothing about GPUs." if data.simulated
                    else "") + "</p>"
                 + _html_table(REC_COLUMNS, [r.row() for r in recs]).replace(
                     "<td>confirmed", '<td class="confirmed">confirmed').replace(
                     "<td>refuted", '<td class="refuted">refuted') + "</section>")
    # the plan's questions and hypotheses, answered from the views
    toc.append(("answers", "Answers"))
    items = "".join(_answer_html(a, data) for a in found)
    parts.append(f'<section id="answers" data-rows="{len(found)}"><h2>Answers{sim}</h2><p class="desc">'
                 + esc(ANSWERS_INTRO)
                 + (f" {esc(data.sim_text)}: the verdicts rehearse the analysis, they say nothing about GPUs."
                    if data.simulated else "") + f"</p>{items}</section>")
    toc.append((since.SECTION_ID, since.TITLE))
    parts.append(since.html_section(data, _html_table, esc, sim))
    toc.append((tuning.SECTION_ID, tuning.TITLE))
    parts.append(tuning.html_section(data.tuning, _html_table, esc, sim))
    # figures
    for f in figs:
        toc.append((f.section_id, f.title))
        body = "\n".join(f.svgs) if f.svgs else f'<p class="empty">{esc(f.empty_reason)}</p>'
        parts.append(f'<section id="{f.section_id}" class="fig" data-points="{f.points}" data-figures="{len(f.svgs)}">'
                     f"<h2>{esc(f.title)}{sim}</h2><p class=\"note\">{esc(f.note)}</p>\n{body}\n</section>")
    # tables
    for sid, title, rows, cols, desc in tables:
        toc.append((sid, title))
        body = _html_table(cols, rows.rows) if rows.rows else '<p class="empty">No rows for this campaign.</p>'
        parts.append(f'<section id="{sid}" class="table" data-rows="{len(rows.rows)}">'
                     f'<h2>{esc(title)}{sim}</h2><p class="desc">{esc(desc)} Every column: '
                     f"<code>benchctl query {esc(sid[4:])}</code>.</p>{body}</section>")
    toc.append((client.SECTION_ID, client.TITLE))
    parts.append(client.html_section(data.client, _html_table, esc, sim))
    # predicted vs measured
    toc.append(("predictions", "Predicted vs measured"))
    if data.predictions is not None:
        pred_body = ('<p class="desc">Measured = the step\'s AIPerf p50 (TTFT, ITL) and output tokens/s; '
                     "error = (predicted - measured) / measured x 100.</p>"
                     + _html_table(data.predictions.columns, data.predictions.rows))
        n_pred = len(data.predictions.rows)
    else:
        pred_body, n_pred = f'<p class="empty no-predictions">{esc(data.predictions_note or "No predictions.")}</p>', 0
    parts.append(f'<section id="predictions" data-rows="{n_pred}"><h2>Predicted vs measured{sim}</h2>'
                 f"{pred_body}</section>")
    if data.calibration is not None:  # twin vs prediction vs measurement (benchctl.report.calibration)
        cal = data.calibration
        toc.append(("calibration", "Twin, prediction, measurement"))
        notes = "".join(f'<p class="empty no-measured">{esc(n)}</p>' for n in cal.notes)
        parts.append(f'<section id="calibration" data-rows="{len(cal.rows)}" data-measured='
                     f'"{esc(cal.measured_campaign or "")}"><h2>Twin, prediction, measurement{sim}</h2>'
                     f'<p class="desc">{esc(description(cal))}</p>{notes}'
                     + (_html_table(cal.columns, cal.rows) + "<h3>Error per pair (MAPE, %)</h3>"
                        + _html_table(mape_columns(cal), cal.mape) if cal.rows
                        else '<p class="empty">No concurrency-sweep step to compare.</p>') + "</section>")
    # provenance
    toc.append(("provenance", "Provenance"))
    kv = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in provenance_items(data))
    ds_cols = ["step_id", "workload_kind", "experiments", "dataset_sha256"]
    ds = [d for d in data.datasets if d.get("dataset_sha256")]
    ds_body = (_html_table(ds_cols, ds) if ds else
               '<p class="empty">No generated datasets (AIPerf synthesised every input).</p>')
    img_body = (_html_table(["where", "image", "digest"], data.images) if data.images else
                '<p class="empty">No image digests recorded'
                + (" (the local engine runs processes, not images)."
                   if data.simulated and data.campaign.get("engine") == "local" else ".") + "</p>")
    net_rows, placed = network_rows(data)
    net_body = (_html_table(list(dict.fromkeys(k for r in net_rows for k in r)), net_rows)
                + (_html_table(list(dict.fromkeys(k for r in placed for k in r)), placed) if placed else "")
                if net_rows else '<p class="empty">No network observation recorded (no experiment reached Ready).</p>')
    parts.append(
        f'<section id="provenance" data-rows="1"><h2>Provenance{sim}</h2><dl class="kv">{kv}</dl>'
        f"<h3>Versions (versions_json)</h3><pre>{esc(versions_pretty(data))}</pre>"
        f'<section id="datasets" data-rows="{len(ds)}"><h3>Datasets (steps.dataset_sha256)</h3>{ds_body}</section>'
        f'<section id="images" data-rows="{len(data.images)}"><h3>Image digests</h3>{img_body}</section>'
        f'<section id="network" data-rows="{len(net_rows)}"><h3>Network (observed: CNI, zones, MTU, placement, '
        f"KV-transfer backend){sim}</h3>{net_body}</section>"
        "</section>")

    banner = (f'<div class="banner" id="simulated-banner">{esc(data.sim_tag)}: {esc(data.sim_text)}. Every figure below comes '
              "from the local engine; prices are illustrative."
              + (f" Timed by: {esc(twin_text(data))}." if data.twins else "") + "</div>" if data.simulated else "")
    caveat = client.caveat(data.client)
    nav = "".join(f'<li><a href="#{sid}">{esc(title)}</a></li>' for sid, title in toc)
    generated = datetime.now().astimezone().isoformat(timespec="seconds")
    exp_list = ", ".join(f"{e} ({data.modes.get(e) or '?'})" for e in data.experiments)
    head = (f"<h1>Campaign {esc(data.campaign_id)}{sim}</h1>"
            f'<p class="note">{esc(c.get("spec_name") or "")} · model {esc(c.get("model") or "?")} · engine '
            f"{esc(c.get('engine') or '?')} · status <b>{esc(c.get('status') or '?')}</b> · experiments: "
            f"{esc(exp_list or 'none')}</p>"
            + (f'<p class="caveat" id="caveats">{esc(caveat)}</p>' if caveat else "")
            + f"<nav><ul>{nav}</ul></nav>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>benchctl report: {esc(data.campaign_id)}{' (' + data.sim_tag + ')' if data.simulated else ''}</title>"
        f"<style>{_CSS}</style></head>\n<body>{banner}<main>{head}\n" + "\n".join(parts)
        + f'\n<footer>Generated by benchctl report at {esc(generated)} from {esc(data.source)}.</footer>'
        "</main></body></html>\n"
    )

