"""The report on this machine: the ``ReportPort`` of the local engine (the comparison views as CSV and JSON,
each row saying whether it is simulated, plus ``report.html`` in the campaign's run directory, from one DuckDB
engine per run) and the lake-path entry points of ``benchctl report``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchctl import report
from benchctl.analysis.formatting import format_result
from benchctl.analysis.views import REPORT_VIEWS, campaign_rows_sql, export_sql
from benchctl.lake.paths import check_path_value
from benchctl.local.query import QueryEngine
from benchctl.report.data import HOW_TO_GET_A_LAKE

# every column of these, per campaign, with a `simulated` column (campaigns.simulated) when the view has none
EXPORTED_VIEWS = (*REPORT_VIEWS, "v_step_stats", "v_step_cache")


def _engine(lake: Path) -> QueryEngine:
    if not Path(lake).is_dir():
        raise ValueError(f"no campaign to report: {lake} does not exist ({HOW_TO_GET_A_LAKE})")
    return QueryEngine(Path(lake), snapshot=True)  # one state of the lake, read once for ~60 queries


def render_report(lake: Path, campaign_id: str | None, fmt: str = "html") -> str:
    """The report of ``campaign_id`` (default: the latest) of the lake at ``lake``, as text."""
    if fmt not in report.FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; valid: {', '.join(report.FORMATS)}")
    with _engine(lake) as engine:
        return report.render_report(engine, campaign_id, fmt, source=str(lake))


def write_report(lake: Path, campaign_id: str | None, out: Path, fmt: str = "html", *,
                 compare_measured: str | None = None) -> Path:
    """``benchctl report``: render and write atomically (nothing is written when it cannot be rendered)."""
    if fmt not in report.FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; valid: {', '.join(report.FORMATS)}")
    with _engine(lake) as engine:
        return report.write_report(engine, campaign_id, out, fmt, source=str(lake), compare_measured=compare_measured)


def report_views(query: QueryEngine, lake: Path, campaign_id: str, out_dir: Path) -> dict[str, str]:
    """This campaign's comparison views, each as CSV and JSON, and the report, into ``out_dir``."""
    check_path_value("campaign_id", campaign_id)  # path-safe characters only: safe to quote
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for view in EXPORTED_VIEWS:
        cols, _ = query.run(campaign_rows_sql(view, campaign_id))
        cols, rows = query.run(export_sql(view, campaign_id, cols))  # with its `simulated` column
        (out_dir / f"{view}.csv").write_text(format_result(cols, rows, "csv"), encoding="utf-8")
        (out_dir / f"{view}.json").write_text(format_result(cols, rows, "json"), encoding="utf-8")
        written[view] = str(out_dir / f"{view}.csv")
    path = report.write_report(query, campaign_id, out_dir / "report.html", "html", source=str(lake))
    written["report"] = str(path)  # the one file a person opens
    return written


class LocalReport:
    """``ReportPort`` of a local campaign: written into ``<run dir>/report/`` from a snapshot of the lake (one
    DuckDB engine that reads each table once, see ``QueryEngine``), opened and closed per report."""

    def __init__(self, lake: Path, run_dir: Callable[[str], Path]) -> None:
        self.lake, self.run_dir = Path(lake), run_dir

    def write(self, campaign_id: str) -> dict[str, str]:
        with _engine(self.lake) as engine:
            return report_views(engine, self.lake, campaign_id, self.run_dir(campaign_id) / "report")
