"""``benchctl report``: one self-contained report of a campaign, from the lake, the same on both engines.

HTML (default): inline CSS and inline SVG figures drawn here (no script, no font, no image, no link to
anything outside the file), the comparison tables, the campaign timeline with each experiment's cost,
predicted vs measured figures (when a ``predictions`` table exists) and the provenance block.
Markdown: the same tables, figures omitted. Campaigns of the local engine (``campaigns.simulated``) are
labelled SIMULATED everywhere.

One pipeline: :mod:`.data` reads everything through a ``QueryPort`` (DuckDB locally,
``benchctl.local.query``; Athena on AWS, ``benchctl.aws.athena``) and assembles it; :mod:`.figures` and
:mod:`.timeline` draw with :mod:`.chartkit`; :mod:`.answers` (and :mod:`.answers_more`) judge the plan's
questions over :mod:`.evidence` (the recorded comparisons) with ``benchctl.analysis.verdicts``; :mod:`.html` and
:mod:`.markdown` render. Bad input (an
empty lake, an unknown campaign, an unknown format) raises ValueError naming what is valid.
May import the standard library and the core (never an engine).

May import: the foundation, the spec, the lake, planning and analysis (never an engine: the query port).
"""

from __future__ import annotations

from pathlib import Path

from benchctl.atomic import atomic_write
from benchctl.lake.query import QueryPort
from benchctl.report import since
from benchctl.report.calibration import load_calibration
from benchctl.report.chartkit import SIM_TAG, SIM_TEXT
from benchctl.report.data import ReportData, load_report_data, report_queries
from benchctl.report.figures import pareto_frontier
from benchctl.report.html import render_html
from benchctl.report.markdown import render_markdown
from benchctl.report.timeline import timeline_segments

FORMATS = ("html", "md")

__all__ = ["FORMATS", "SIM_TAG", "SIM_TEXT", "ReportData", "load_report_data", "pareto_frontier", "render",
           "render_html", "render_markdown", "render_report", "report_queries", "timeline_segments", "write_report"]


def render(data: ReportData, fmt: str = "html") -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; valid: {', '.join(FORMATS)}")
    return render_html(data) if fmt == "html" else render_markdown(data)


def render_report(query: QueryPort, campaign_id: str | None, fmt: str = "html", *, source: str,
                  missing_ok: bool = False, compare_measured: str | None = None) -> str:
    """The report of ``campaign_id`` (default: the latest in the lake's campaigns table) as text."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; valid: {', '.join(FORMATS)}")
    data = load_report_data(query, campaign_id, source, missing_ok=missing_ok)
    data.calibration = load_calibration(query, data.campaign, compare_measured)
    data.since, data.since_note = since.load_since(query, source, data.campaign_id)
    return render(data, fmt)


def write_report(query: QueryPort, campaign_id: str | None, out: Path, fmt: str = "html", *, source: str,
                 compare_measured: str | None = None) -> Path:
    """Render and write the report atomically (nothing is written when it cannot be rendered)."""
    text = render_report(query, campaign_id, fmt, source=source, compare_measured=compare_measured)
    return atomic_write(Path(out), text, fsync=True)
