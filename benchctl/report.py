"""``benchctl report``: one self-contained report of a campaign, from the lake.

HTML (default): inline CSS and inline SVG figures drawn here (no script, no font, no image, no link to
anything outside the file), the comparison tables, the campaign timeline with each experiment's cost,
predicted vs measured figures (when a ``predictions`` table exists) and the provenance block.
Markdown: the same tables, figures omitted.

Everything is read through :class:`benchctl.query.QueryEngine` (the same view files Athena runs).
Campaigns of the local engine (``campaigns.simulated``) are labelled SIMULATED everywhere.

Entry points: :func:`render_report` (text) and :func:`write_report` (atomic file write), used by the
CLI, the local runner and the AWS Report function. Bad input (empty lake, unknown campaign, unknown
format) raises ValueError naming what is valid.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from html import escape
from pathlib import Path
from typing import Any

from benchctl import schema
from benchctl.lake import check_path_value
from benchctl.query import REPORT_VIEWS, round_for_reading

FORMATS = ("html", "md")
SIM_TAG = "SIMULATED"
SIM_TEXT = "Dynamo mocker on CPU — not GPU measurements"

MODE_COLORS = {"aggregated": "#1f77b4", "disaggregated": "#d62728"}
OTHER_COLOR = "#2ca02c"
MARKERS = ("circle", "square", "triangle", "diamond")
DASHES = (None, "7 4", "2 3", "9 3 2 3")
PHASE_COLORS = {"capacity": "#9e9e9e", "deploy": "#8e6bb8", "smoke": "#2ca25f", "teardown": "#f28e2b"}

# (view, section title, one-line description); the columns shown are REPORT_VIEWS[view] (those present).
TABLES: tuple[tuple[str, str, str], ...] = (
    ("v_concurrency_sweep", "Concurrency sweep",
     "Aggregated vs disaggregated per concurrency: AIPerf's per-step statistics, means over repeats."),
    ("v_prefix_cache", "Prefix cache",
     "Per input prefix duplication ratio: TTFT, its improvement over ratio 0 and the server-measured hit rate."),
    ("v_cost_efficiency", "Cost efficiency",
     "Per experiment: allocation-based cost, $/1M output tokens, tokens per $ and goodput per $/h."),
    ("v_multi_turn", "Multi-turn",
     "Per turn of the multi-turn workload: TTFT as the history grows."),
    ("v_sequence_distribution", "Sequence-length distributions",
     "Per distribution and experiment, overall ('all') and per input-length bucket."),
    ("v_pareto", "Pareto points",
     "Per experiment and concurrency: output tokens/s per GPU vs TTFT p50; on_frontier = not dominated."),
    ("v_feature_ladder", "Feature ladder",
     "Each rung's one changed feature relative to its base experiment."),
)
OPTIONAL_TABLES = frozenset({"v_feature_ladder"})  # shown only when the campaign has rows

PREDICTION_COLUMNS = ("campaign_id", "experiment", "step_id", "concurrency", "predicted_ttft_ms",
                      "predicted_itl_ms", "predicted_output_tokens_per_s", "source")
PREDICTION_EXTRA_COLUMNS = ("system", "fits_memory", "note")  # shown when the table has them


# ==================================================================================================
# data


@dataclass
class Rows:
    columns: list[str]
    rows: list[dict[str, Any]]


@dataclass
class ReportData:
    lake: Path
    campaign: dict[str, Any]
    simulated: bool
    views: dict[str, Rows]
    timeline: list[dict[str, Any]]
    modes: dict[str, str]  # experiment -> mode
    experiments: list[str]  # in campaign order
    datasets: list[dict[str, Any]]
    predictions: Rows | None
    predictions_note: str | None
    images: list[dict[str, str]] = field(default_factory=list)

    @property
    def campaign_id(self) -> str:
        return str(self.campaign["campaign_id"])


def _dicts(cols: list[str], rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _pick_campaign(engine: Any, lake: Path, campaign_id: str | None) -> dict[str, Any]:
    cols, raw = engine.run("SELECT * FROM campaigns")
    rows = _dicts(cols, raw)
    if not rows:
        where = f"{lake} does not exist" if not Path(lake).is_dir() else f"{lake} has no campaigns"
        raise ValueError(f"no campaign to report: {where} (give the lake of a run, e.g. --lake OUT/lake "
                         f"for `benchctl run --out OUT`)")
    known = sorted({str(r["campaign_id"]) for r in rows})
    if campaign_id is None:
        def key(r: dict[str, Any]) -> tuple[bool, datetime, str]:
            return (r["started_at"] is not None, r["started_at"] or datetime.min, str(r["campaign_id"]))

        return max(rows, key=key)
    if campaign_id not in known:
        raise ValueError(f"unknown campaign {campaign_id!r} in {lake}; valid: {', '.join(known)}")
    return next(r for r in rows if r["campaign_id"] == campaign_id)


def _image_digests(versions: Any, path: str = "") -> list[dict[str, str]]:
    """``{"where", "image", "digest"}`` for every ``images`` mapping (and ``@sha256:`` value) inside."""
    out: list[dict[str, str]] = []
    if isinstance(versions, dict):
        for k, v in versions.items():
            where = f"{path}.{k}" if path else str(k)
            if k == "images" and isinstance(v, dict):
                out += [{"where": path or "campaign", "image": str(i), "digest": str(d)} for i, d in v.items()]
            elif isinstance(v, str) and "@sha256:" in v:
                out.append({"where": path or "campaign", "image": str(k), "digest": v})
            else:
                out += _image_digests(v, where)
    elif isinstance(versions, list):
        for i, v in enumerate(versions):
            out += _image_digests(v, f"{path}[{i}]")
    return out


def _load_predictions(engine: Any, cid: str) -> tuple[Rows | None, str | None]:
    if "predictions" not in schema.TABLES:
        return None, "No predictions: this lake has no predictions table yet."
    missing = [c for c in PREDICTION_COLUMNS if c not in schema.column_names("predictions")]
    if missing:
        return None, f"No predictions: the predictions table lacks column(s) {missing}."
    extra = [c for c in PREDICTION_EXTRA_COLUMNS if c in schema.column_names("predictions")]
    sql = f"""
        SELECT p.experiment, p.step_id, coalesce(p.concurrency, s.concurrency) AS concurrency, p.source,
               p.predicted_ttft_ms, s.ttft_p50_ms AS measured_ttft_p50_ms,
               p.predicted_itl_ms, s.itl_p50_ms AS measured_itl_p50_ms,
               p.predicted_output_tokens_per_s, s.output_tokens_per_s AS measured_output_tokens_per_s,
               s.status AS step_status{"".join(f", p.{c}" for c in extra)}
        FROM predictions p
        LEFT JOIN steps s
            ON s.campaign_id = p.campaign_id AND s.experiment = p.experiment AND s.step_id = p.step_id
        WHERE p.campaign_id = '{cid}'
        ORDER BY p.experiment, coalesce(p.concurrency, s.concurrency), p.step_id, p.source
    """  # noqa: S608 (cid is a known, path-safe campaign id)
    try:
        cols, raw = engine.run(sql)
    except Exception as e:  # another engineer's table: never let it break the report
        return None, f"No predictions: the predictions table could not be read ({e})."
    rows = _dicts(cols, raw)
    if not rows:
        return None, "No predictions for this campaign."
    out_cols = ["experiment", "step_id", "concurrency", "source"]
    table: list[dict[str, Any]] = []
    for r in rows:
        row = {c: r[c] for c in out_cols}
        for what, m in (("ttft_ms", "measured_ttft_p50_ms"), ("itl_ms", "measured_itl_p50_ms"),
                        ("output_tokens_per_s", "measured_output_tokens_per_s")):
            p, v = r[f"predicted_{what}"], r[m]
            row[f"predicted_{what}"] = p
            row[m] = v
            row[f"{what}_error_pct"] = (
                (float(p) - float(v)) / float(v) * 100.0 if p is not None and v not in (None, 0) else None
            )
        row["step_status"] = r["step_status"] if r["step_status"] is not None else "not measured"
        for c in extra:
            row[c] = r[c]
        table.append(row)
    return Rows(list(table[0]), table), None


def report_queries(cid: str) -> dict[str, str]:
    """The SQL the report reads (Trino/Athena dialect; DuckDB runs it too), by what it feeds."""
    check_path_value("campaign_id", cid)  # path-safe characters only: safe to quote in SQL
    queries = {v: f"SELECT * FROM {v} WHERE campaign_id = '{cid}'" for v, _, _ in TABLES}  # noqa: S608
    queries["_timeline"] = f"SELECT * FROM timeline WHERE campaign_id = '{cid}' ORDER BY at, event"  # noqa: S608
    queries["_experiments"] = (f"SELECT experiment, mode, experiment_index FROM experiments "  # noqa: S608
                               f"WHERE campaign_id = '{cid}' ORDER BY experiment_index, experiment")
    queries["_steps"] = (f"SELECT experiment, mode, step_id, step_index, workload_kind, dataset_sha256 "  # noqa: S608
                         f"FROM steps WHERE campaign_id = '{cid}' ORDER BY step_index, step_id, experiment")
    return queries


def load_report_data(lake: Path, campaign_id: str | None) -> ReportData:
    from benchctl.query import QueryEngine

    lake = Path(lake)
    with QueryEngine(lake) as engine:
        campaign = _pick_campaign(engine, lake, campaign_id)
        cid = check_path_value("campaign_id", str(campaign["campaign_id"]))
        results: dict[str, Rows] = {}
        for key, sql in report_queries(cid).items():
            cols, raw = engine.run(sql)
            results[key] = Rows(cols, _dicts(cols, raw))
        predictions, note = _load_predictions(engine, cid)
    return assemble_report_data(lake, campaign, results, predictions, note)


def assemble_report_data(lake: Path, campaign: dict[str, Any], results: dict[str, Rows],
                         predictions: Rows | None, note: str | None) -> ReportData:
    """A ReportData from the rows of :func:`report_queries` (whichever engine ran them)."""
    views = {v: results[v] for v, _, _ in TABLES if v in results}
    timeline = results["_timeline"].rows
    exps = results["_experiments"].rows
    steps = results["_steps"].rows
    modes: dict[str, str] = {}
    order: list[str] = []
    for r in exps:
        if r["experiment"] not in order:
            order.append(r["experiment"])
        if r["mode"]:
            modes[r["experiment"]] = r["mode"]
    for r in steps:
        modes.setdefault(r["experiment"], r["mode"] or "")
    for ev in timeline:
        exp = ev["experiment"]
        if exp and exp != "_campaign" and exp not in order:
            order.append(exp)
        if ev["event"] == "deploy_applied" and exp not in modes:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                modes[exp] = json.loads(ev["detail_json"] or "{}").get("mode") or ""
    for r in steps:
        if r["experiment"] not in order:
            order.append(r["experiment"])

    datasets: dict[tuple[str, str], dict[str, Any]] = {}
    for r in steps:
        key = (r["step_id"], r["dataset_sha256"] or "")
        d = datasets.setdefault(key, {"step_id": r["step_id"], "workload_kind": r["workload_kind"],
                                      "dataset_sha256": r["dataset_sha256"], "experiments": []})
        d["experiments"].append(r["experiment"])
    for d in datasets.values():
        d["experiments"] = ", ".join(sorted(set(d["experiments"])))

    try:
        versions = json.loads(campaign.get("versions_json") or "{}")
    except ValueError:
        versions = {}
    return ReportData(
        lake=lake, campaign=campaign, simulated=bool(campaign.get("simulated")), views=views,
        timeline=timeline, modes=modes, experiments=order, datasets=list(datasets.values()),
        predictions=predictions, predictions_note=note, images=_image_digests(versions),
    )


# ==================================================================================================
# formatting


def fmt_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Decimal):
        v = float(v)
    if isinstance(v, float):
        return round_for_reading(v)  # the same rounding as `benchctl query`'s tables
    if isinstance(v, datetime):
        return v.isoformat(sep=" ", timespec="seconds")
    if isinstance(v, date):
        return v.isoformat()
    return str(v)


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _shown_columns(view: str, rows: Rows) -> list[str]:
    wanted = REPORT_VIEWS.get(view, ())
    cols = [c for c in wanted if c in rows.columns]
    return cols or [c for c in rows.columns if c != "campaign_id"]


# ==================================================================================================
# SVG figures


@dataclass
class Series:
    label: str
    color: str
    points: list[tuple[float, float, str]]  # x, y, tooltip
    marker: str = "circle"
    filled: bool = True
    line: bool = True
    dash: str | None = None
    legend: bool = True
    point_labels: list[str] | None = None


@dataclass
class Axis:
    lo: float
    hi: float
    ticks: list[float]
    log: bool = False

    def pos(self, v: float, a: float, b: float) -> float:
        if self.log:
            lv, llo, lhi = math.log2(v), math.log2(self.lo), math.log2(self.hi)
            return a + (lv - llo) / ((lhi - llo) or 1) * (b - a)
        return a + (v - self.lo) / ((self.hi - self.lo) or 1) * (b - a)

    def label(self, v: float) -> str:
        """``v`` with as few decimals as tell every tick apart exactly (2.5 steps keep one)."""
        decimals = next((d for d in range(7) if all(abs(round(t, d) - t) < 1e-9 for t in self.ticks)), 6)
        return f"{v:,.{decimals}f}"


def _nice_step(span: float, n: int) -> float:
    raw = span / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag  # pragma: no cover


def linear_axis(values: Sequence[float], *, zero: bool = True, fixed: tuple[float, float] | None = None,
                n: int = 5) -> Axis:
    if fixed is not None:
        lo, hi = fixed
    else:
        lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
        if zero:
            lo = min(lo, 0.0)
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    step = _nice_step(hi - lo, n)
    if fixed is None:
        lo, hi = math.floor(lo / step) * step, math.ceil(hi / step) * step
    k = round((hi - lo) / step)
    ticks = [round(lo + i * step, 10) for i in range(k + 1)]
    return Axis(lo, hi, ticks)


def log2_axis(values: Sequence[float]) -> Axis:
    lo = 2.0 ** math.floor(math.log2(min(values)))
    hi = 2.0 ** math.ceil(math.log2(max(values)))
    if hi <= lo:
        lo, hi = lo / 2, hi * 2
    ticks, t = [], lo
    while t <= hi * 1.0001:
        ticks.append(t)
        t *= 2
    return Axis(lo, hi, ticks, log=True)


def _t(s: Any) -> str:
    return escape(str(s), quote=True)


def _title_text(title: str, simulated: bool) -> str:
    tag = f' <tspan class="sim-tag" fill="#b00020" font-weight="bold">· {SIM_TAG}</tspan>' if simulated else ""
    return f'<text class="fig-title" x="12" y="22" font-size="15" font-weight="bold">{_t(title)}{tag}</text>'


def _svg_open(fig_id: str, title: str, w: int, h: int, simulated: bool) -> list[str]:
    full = f"{title} — {SIM_TAG}: {SIM_TEXT}" if simulated else title
    return [
        f'<svg class="figure" id="{_t(fig_id)}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        f'aria-label="{_t(full)}" font-family="sans-serif" font-size="12">',
        f"<title>{_t(full)}</title>",
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>',
        _title_text(title, simulated),
    ]


def _marker(kind: str, x: float, y: float, color: str, filled: bool, tip: str, size: float = 4.5) -> str:
    fill = color if filled else "#ffffff"
    attrs = f'fill="{fill}" stroke="{color}" stroke-width="1.8"'
    tip_el = f"<title>{_t(tip)}</title>" if tip else ""
    if kind == "square":
        return (f'<rect class="mark" x="{x - size:.1f}" y="{y - size:.1f}" width="{2 * size:.1f}" '
                f'height="{2 * size:.1f}" {attrs}>{tip_el}</rect>')
    if kind == "triangle":
        s = size * 1.2
        return (f'<path class="mark" d="M{x:.1f},{y - s:.1f} L{x + s:.1f},{y + s * 0.8:.1f} '
                f'L{x - s:.1f},{y + s * 0.8:.1f} Z" {attrs}>{tip_el}</path>')
    if kind == "diamond":
        s = size * 1.25
        return (f'<path class="mark" d="M{x:.1f},{y - s:.1f} L{x + s:.1f},{y:.1f} L{x:.1f},{y + s:.1f} '
                f'L{x - s:.1f},{y:.1f} Z" {attrs}>{tip_el}</path>')
    return f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="{size:.1f}" {attrs}>{tip_el}</circle>'


def _legend(items: list[tuple[str, str, str, bool, str | None, bool]], x: float, y: float) -> list[str]:
    """items: (label, color, marker, filled, dash, line)."""
    out = [f'<g class="legend" transform="translate({x:.0f},{y:.0f})">']
    for i, (label, color, marker, filled, dash, line) in enumerate(items):
        yy = i * 20
        if line:
            d = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<line x1="0" y1="{yy}" x2="26" y2="{yy}" stroke="{color}" stroke-width="2"{d}/>')
        if marker:
            out.append(_marker(marker, 13, yy, color, filled, ""))
        out.append(f'<text x="34" y="{yy + 4}">{_t(label)}</text>')
    out.append("</g>")
    return out


def _y_grid(ya: Axis, py: Any, ml: float, pw: float) -> list[str]:
    """Horizontal grid lines, ticks and tick labels of a chart's y axis."""
    out = []
    for t in ya.ticks:
        y = py(t)
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        out.append(f'<line x1="{ml - 5}" y1="{y:.1f}" x2="{ml}" y2="{y:.1f}"/>')
        out.append(f'<text x="{ml - 8}" y="{y + 4:.1f}" text-anchor="end" stroke="none">{_t(ya.label(t))}</text>')
    return out


def _frame(ml: float, mt: float, pw: float, ph: float) -> list[str]:
    """The x and y axis lines of a plot area."""
    return [f'<line x1="{ml}" y1="{mt + ph}" x2="{ml + pw}" y2="{mt + ph}"/>',
            f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{mt + ph}"/>']


def xy_chart(fig_id: str, title: str, x_label: str, y_label: str, series: list[Series], *, simulated: bool,
             x_log: bool = False, x_fixed: tuple[float, float] | None = None,
             y_fixed: tuple[float, float] | None = None, x_ticks: list[float] | None = None,
             ref_line: str | None = None, width: int = 840, height: int = 400) -> tuple[str, int]:
    """A scatter/line chart: ``(svg, number of data marks)``; ref_line draws y = x with that label."""
    xs = [p[0] for s in series for p in s.points]
    ys = [p[1] for s in series for p in s.points]
    ml, mr, mt, mb = 72, 280, 40, 52
    pw, ph = width - ml - mr, height - mt - mb
    if x_log and xs and min(xs) > 0:
        xa = log2_axis(xs)
    else:
        xa = linear_axis(xs, zero=False, fixed=x_fixed) if x_ticks is None else Axis(
            min(x_ticks), max(x_ticks), list(x_ticks))
        if x_ticks is not None and xa.hi == xa.lo:
            xa = Axis(xa.lo - 1, xa.hi + 1, list(x_ticks))
    ya = linear_axis(ys, zero=True, fixed=y_fixed)

    def px(v: float) -> float:
        return xa.pos(v, ml, ml + pw)

    def py(v: float) -> float:
        return ya.pos(v, mt + ph, mt)

    out = _svg_open(fig_id, title, width, height, simulated)
    # grid, ticks and tick labels
    out.append('<g class="axes" stroke="#000" stroke-width="1">')
    out += _y_grid(ya, py, ml, pw)
    for t in xa.ticks:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#f0f0f0"/>')
        out.append(f'<line x1="{x:.1f}" y1="{mt + ph}" x2="{x:.1f}" y2="{mt + ph + 5}"/>')
        out.append(f'<text x="{x:.1f}" y="{mt + ph + 18}" text-anchor="middle" stroke="none">{_t(xa.label(t))}</text>')
    out += _frame(ml, mt, pw, ph)
    out.append("</g>")
    out.append(f'<text class="axis-label" x="{ml + pw / 2:.0f}" y="{height - 10}" text-anchor="middle">'
               f'{_t(x_label + (" (log scale)" if xa.log else ""))}</text>')
    out.append(f'<text class="axis-label" transform="translate(16,{mt + ph / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{_t(y_label)}</text>')
    legend: list[tuple[str, str, str, bool, str | None, bool]] = []
    if ref_line:
        lo, hi = max(xa.lo, ya.lo), min(xa.hi, ya.hi)
        if hi > lo:
            out.append(f'<path class="ref-line" d="M{px(lo):.1f},{py(lo):.1f} L{px(hi):.1f},{py(hi):.1f}" '
                       'fill="none" stroke="#555" stroke-width="1.5" stroke-dasharray="5 4"/>')
        legend.append((ref_line, "#555", "", False, "5 4", True))
    n = 0
    for s in series:
        pts = sorted(s.points, key=lambda p: p[0]) if s.line else s.points
        if s.line and len(pts) > 1:
            d = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for i, (x, y, _) in enumerate(pts))
            dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
            out.append(f'<path class="series" d="{d}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>')
        for i, (x, y, tip) in enumerate(s.points):
            out.append(_marker(s.marker, px(x), py(y), s.color, s.filled, tip))
            n += 1
            if s.point_labels:
                out.append(f'<text class="point-label" x="{px(x) + 7:.1f}" y="{py(y) - 7:.1f}" font-size="10" '
                           f'fill="#444">{_t(s.point_labels[i])}</text>')
        if s.legend:
            legend.append((s.label, s.color, s.marker, s.filled, s.dash, s.line))
    out += _legend(legend, ml + pw + 22, mt + 10)
    out.append("</svg>")
    return "\n".join(out), n


@dataclass
class BarSeries:
    label: str
    color: str
    opacity: float
    values: list[float | None]
    tips: list[str]


def bar_chart(fig_id: str, title: str, y_label: str, groups: list[str], bars: list[BarSeries], *,
              simulated: bool, width: int = 900, height: int = 400) -> tuple[str, int]:
    ml, mr, mt, mb = 72, 250, 40, 52
    pw, ph = width - ml - mr, height - mt - mb
    ya = linear_axis([v for b in bars for v in b.values if v is not None], zero=True)

    def py(v: float) -> float:
        return ya.pos(v, mt + ph, mt)

    out = _svg_open(fig_id, title, width, height, simulated)
    out.append('<g class="axes" stroke="#000" stroke-width="1">')
    out += _y_grid(ya, py, ml, pw)
    out += _frame(ml, mt, pw, ph)
    out.append("</g>")
    gw = pw / max(len(groups), 1)
    bw = gw * 0.8 / max(len(bars), 1)
    n = 0
    for gi, g in enumerate(groups):
        gx = ml + gi * gw
        out.append(f'<text x="{gx + gw / 2:.1f}" y="{mt + ph + 18}" text-anchor="middle">{_t(g)}</text>')
        for bi, b in enumerate(bars):
            v = b.values[gi]
            if v is None:
                continue
            x, y = gx + gw * 0.1 + bi * bw, py(v)
            out.append(f'<rect class="mark bar" x="{x:.1f}" y="{y:.1f}" width="{max(bw - 2, 1):.1f}" '
                       f'height="{max(mt + ph - y, 0.5):.1f}" fill="{b.color}" fill-opacity="{b.opacity}" '
                       f'stroke="{b.color}"><title>{_t(b.tips[gi])}</title></rect>')
            n += 1
    out.append(f'<text class="axis-label" transform="translate(16,{mt + ph / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{_t(y_label)}</text>')
    lx, ly = ml + pw + 22, mt + 10
    out.append(f'<g class="legend" transform="translate({lx},{ly})">')
    for i, b in enumerate(bars):
        out.append(f'<rect x="0" y="{i * 20 - 7}" width="22" height="12" fill="{b.color}" '
                   f'fill-opacity="{b.opacity}" stroke="{b.color}"/>')
        out.append(f'<text x="30" y="{i * 20 + 4}">{_t(b.label)}</text>')
    out.append("</g></svg>")
    return "\n".join(out), n


# ==================================================================================================
# the figures of a campaign


def _styles(data: ReportData, experiments: Iterable[str]) -> dict[str, tuple[str, str, str | None]]:
    """experiment -> (colour of its mode, marker, dash): one colour per mode, shapes within a mode."""
    seen: dict[str, int] = {}
    out: dict[str, tuple[str, str, str | None]] = {}
    ordered = [e for e in data.experiments if e in set(experiments)]
    ordered += sorted(set(experiments) - set(ordered))
    for e in ordered:
        mode = data.modes.get(e, "")
        i = seen.get(mode, 0)
        seen[mode] = i + 1
        out[e] = (MODE_COLORS.get(mode, OTHER_COLOR), MARKERS[i % len(MARKERS)], DASHES[i % len(DASHES)])
    return out


def _exp_label(data: ReportData, exp: str, workload: str | None = None, many_workloads: bool = False) -> str:
    mode = data.modes.get(exp) or "?"
    return f"{exp} ({mode})" + (f" · {workload}" if many_workloads and workload else "")


def pareto_frontier(points: list[tuple[float, float]]) -> list[bool]:
    """For (throughput, latency) points: True where no other point has >= throughput and <= latency
    with one strictly better (the rule of v_pareto)."""
    return [
        not any(q[0] >= p[0] and q[1] <= p[1] and (q[0] > p[0] or q[1] < p[1]) for q in points)
        for p in points
    ]


@dataclass
class Figure:
    section_id: str
    title: str
    note: str
    svgs: list[str]
    points: int
    empty_reason: str = ""


def fig_pareto(data: ReportData) -> Figure:
    rows = [r for r in data.views["v_pareto"].rows
            if _num(r.get("output_tokens_per_s_per_gpu")) is not None and _num(r.get("ttft_p50_ms")) is not None]
    note = ("Each point is one load level (concurrency) of the sweep; filled and connected: on the Pareto "
            "frontier of its experiment (no other load level has more tokens/s per GPU AND a lower TTFT); "
            "hollow: dominated. TTFT p50 frontier from v_pareto, p99 frontier by the same rule.")
    if not rows:
        return Figure("fig-pareto", "Pareto: TTFT vs output tokens/s per GPU", note, [], 0,
                      "No concurrency-sweep points with a GPU count in v_pareto.")
    workloads = sorted({str(r["workload"]) for r in rows})
    styles = _styles(data, {r["experiment"] for r in rows})
    svgs, total = [], 0
    for stat in ("p50", "p99"):
        col = f"ttft_{stat}_ms"
        series: list[Series] = []
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rows:
            if _num(r.get(col)) is not None:
                groups.setdefault((r["experiment"], r["workload"]), []).append(r)
        for (exp, wl), grp in groups.items():
            color, marker, dash = styles[exp]
            pts = [(float(r["output_tokens_per_s_per_gpu"]), float(r[col])) for r in grp]
            front = ([bool(r["on_frontier"]) for r in grp] if stat == "p50" and
                     all(r.get("on_frontier") is not None for r in grp) else pareto_frontier(pts))
            label = _exp_label(data, exp, wl, len(workloads) > 1)
            for on in (True, False):
                sel = [(p, r) for p, r, f in zip(pts, grp, front, strict=True) if f == on]
                if not sel:
                    continue
                series.append(Series(
                    label=f"{label} frontier" if on else f"{label} dominated", color=color, marker=marker,
                    filled=on, line=on, dash=dash, legend=on,
                    points=[(x, y, f"{exp} {r['variant']}: {x:.1f} tok/s/GPU, TTFT {stat} {y:.1f} ms"
                             + (" (frontier)" if on else " (dominated)")) for (x, y), r in sel],
                    point_labels=[str(r["variant"]) for _, r in sel]))
        series.append(Series("dominated (hollow)", "#777", [], filled=False, line=False))
        svg, n = xy_chart(f"svg-pareto-{stat}", f"Pareto: TTFT {stat} vs output tokens/s per GPU",
                          "output tokens/s per GPU", f"TTFT {stat} (ms)", series, simulated=data.simulated)
        svgs.append(svg)
        total += n
    return Figure("fig-pareto", "Pareto: TTFT vs output tokens/s per GPU", note, svgs, total)


def _side_series(data: ReportData, rows: list[dict[str, Any]], x_col: str, y_col: str,
                 *, tip: Callable[[str, float, float], str], dash: str | None = None,
                 filled: bool = True, label_suffix: str = "") -> list[Series]:
    """Series per (experiment, workload) out of a side-by-side view (agg_*/disagg_* columns)."""
    workloads = sorted({str(r.get("workload")) for r in rows})
    pts: dict[tuple[str, str], dict[float, float]] = {}
    for r in rows:
        for side in ("agg", "disagg"):
            exp, x, y = r.get(f"{side}_experiment"), _num(r.get(x_col)), _num(r.get(f"{side}_{y_col}"))
            if exp and x is not None and y is not None:
                pts.setdefault((str(exp), str(r.get("workload"))), {})[x] = y
    styles = _styles(data, {e for e, _ in pts})
    out = []
    for (exp, wl), xy in pts.items():
        color, marker, exp_dash = styles[exp]
        out.append(Series(
            label=_exp_label(data, exp, wl, len(workloads) > 1) + label_suffix, color=color, marker=marker,
            filled=filled, dash=dash or exp_dash,
            points=[(x, y, tip(exp, x, y)) for x, y in sorted(xy.items())]))
    return out


def fig_concurrency(data: ReportData) -> Figure:
    rows = data.views["v_concurrency_sweep"].rows
    title = "TTFT and ITL p50 vs concurrency"
    note = "Means over repeats of AIPerf's per-step p50, aggregated vs disaggregated (v_concurrency_sweep)."
    svgs, total = [], 0
    for stat, label in (("ttft_p50_ms", "TTFT p50 (ms)"), ("itl_p50_ms", "ITL p50 (ms)")):
        def tip(e: str, x: float, y: float, label: str = label) -> str:
            return f"{e} c{x:g}: {label} {y:.2f}"

        series = _side_series(data, rows, "concurrency", stat, tip=tip)
        if not series:
            continue
        xs = [p[0] for s in series for p in s.points]
        svg, n = xy_chart(f"svg-concurrency-{stat.split('_')[0]}", f"{label.split(' (')[0]} vs concurrency",
                          "concurrency", label, series, simulated=data.simulated,
                          x_log=bool(xs) and min(xs) > 0 and max(xs) / min(xs) >= 4)
        svgs.append(svg)
        total += n
    return Figure("fig-concurrency", title, note, svgs, total,
                  "" if svgs else "No concurrency-sweep rows in v_concurrency_sweep.")


def fig_multi_turn(data: ReportData) -> Figure:
    rows = data.views["v_multi_turn"].rows
    note = "TTFT of each turn (the history, and so the input, grows with the turn): p50 solid, p99 dashed."
    series = _side_series(data, rows, "turn", "ttft_p50_ms", label_suffix=" p50",
                          tip=lambda e, x, y: f"{e} turn {x:g}: TTFT p50 {y:.2f} ms")
    series += _side_series(data, rows, "turn", "ttft_p99_ms", dash="5 4", filled=False, label_suffix=" p99",
                           tip=lambda e, x, y: f"{e} turn {x:g}: TTFT p99 {y:.2f} ms")
    if not series:
        return Figure("fig-multi-turn", "TTFT per turn", note, [], 0, "No multi-turn rows in v_multi_turn.")
    turns = sorted({p[0] for s in series for p in s.points})
    svg, n = xy_chart("svg-multi-turn", "TTFT per turn (multi-turn)", "turn", "TTFT (ms)", series,
                      simulated=data.simulated, x_ticks=turns)
    return Figure("fig-multi-turn", "TTFT per turn", note, [svg], n)


def fig_distribution(data: ReportData) -> Figure:
    rows = [r for r in data.views["v_sequence_distribution"].rows if r.get("isl_bucket") == "all"]
    note = ("TTFT over every request of each length distribution, per experiment: p50 solid, p99 light "
            "(the spread; v_sequence_distribution, bucket 'all').")
    if not rows:
        return Figure("fig-distribution", "TTFT spread per sequence-length distribution", note, [], 0,
                      "No sequence-distribution rows in v_sequence_distribution.")
    groups = list(dict.fromkeys(str(r["distribution"]) for r in rows))
    workloads = sorted({str(r["workload"]) for r in rows})
    if len(workloads) > 1:
        groups = list(dict.fromkeys(f"{r['workload']}/{r['distribution']}" for r in rows))
    exps = list(dict.fromkeys(str(r["experiment"]) for r in rows))
    styles = _styles(data, exps)
    bars = []
    for exp in [e for e in data.experiments if e in exps] + [e for e in exps if e not in data.experiments]:
        for stat, opacity in (("p50", 1.0), ("p99", 0.35)):
            vals: list[float | None] = []
            tips = []
            for g in groups:
                r = next((r for r in rows if r["experiment"] == exp and
                          (f"{r['workload']}/{r['distribution']}" if len(workloads) > 1 else r["distribution"]) == g),
                         None)
                v = _num(r.get(f"ttft_{stat}_ms")) if r else None
                vals.append(v)
                tips.append(f"{exp} {g}: TTFT {stat} {v:.2f} ms (n={r['n_requests'] if r else 0})"
                            if v is not None else "")
            bars.append(BarSeries(f"{_exp_label(data, exp)} TTFT {stat}", styles[exp][0], opacity, vals, tips))
    svg, n = bar_chart("svg-distribution", "TTFT p50 / p99 per length distribution", "TTFT (ms)", groups, bars,
                       simulated=data.simulated)
    return Figure("fig-distribution", "TTFT spread per sequence-length distribution", note, [svg], n)


def fig_prefix(data: ReportData) -> Figure:
    rows = data.views["v_prefix_cache"].rows
    note = ("The server-measured KV cache hit rate next to the input's prefix duplication ratio (dashed "
            "y = x): the first requests find a cold cache and blocks are cached whole, so it stays below.")
    series = _side_series(data, rows, "prefix_ratio", "cache_hit_rate",
                          tip=lambda e, x, y: f"{e} prefix ratio {x:g}: measured hit rate {y:.3f}")
    if not series:
        return Figure("fig-prefix", "Prefix ratio vs measured cache hit rate", note, [], 0,
                      "No prefix-cache rows with a measured hit rate in v_prefix_cache.")
    svg, n = xy_chart("svg-prefix", "Prefix ratio vs measured cache hit rate", "input prefix duplication ratio",
                      "measured cache hit rate", series, simulated=data.simulated, x_fixed=(0.0, 1.0),
                      y_fixed=(0.0, 1.0), ref_line="duplication ratio (y = x)")
    return Figure("fig-prefix", "Prefix ratio vs measured cache hit rate", note, [svg], n)


# --------------------------------------------------------------------------------------- timeline

_PAIRS = (  # phase, start event, end event, key
    ("capacity", "scale_requested", "nodes_ready", "pool"),
    ("deploy", "deploy_applied", "ready", None),
    ("smoke", "ready", "smoke_ok", None),
    ("load", "load_start", "load_end", "step_id"),
    ("teardown", "teardown_start", "teardown_done", None),
)
_POINT_EVENTS = ("pool_restored", "pool_handed_over")


@dataclass
class Segment:
    experiment: str
    phase: str
    start: float
    end: float
    label: str
    closed: bool = True


def _detail(ev: dict[str, Any]) -> dict[str, Any]:
    try:
        d = json.loads(ev.get("detail_json") or "{}")
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def timeline_segments(events: list[dict[str, Any]]) -> tuple[list[Segment], list[tuple[str, float, str]], float]:
    """(phase segments, point events (experiment, t, label), campaign span in s); t from the first event."""
    evs = [e for e in events if e.get("at") is not None]
    if not evs:
        return [], [], 0.0
    t0 = min(e["at"] for e in evs)

    def t(e: dict[str, Any]) -> float:
        return float((e["at"] - t0).total_seconds())

    span = max(t(e) for e in evs)
    segs: list[Segment] = []
    points: list[tuple[str, float, str]] = []
    by_exp: dict[str, list[dict[str, Any]]] = {}
    for e in sorted(evs, key=lambda e: e["at"]):
        by_exp.setdefault(str(e["experiment"]), []).append(e)
    for exp, es in by_exp.items():
        if exp == "_campaign":
            continue
        last = max(t(e) for e in es)
        for phase, start_ev, end_ev, key in _PAIRS:
            open_: dict[Any, tuple[float, str]] = {}
            for e in es:
                k = (e.get("pool") if key == "pool" else _detail(e).get("step_id")) if key else None
                if e["event"] == start_ev:
                    label = f"{phase} {k}" if k else phase
                    open_[k] = (t(e), label)
                elif e["event"] == end_ev and k in open_:
                    s, label = open_.pop(k)
                    segs.append(Segment(exp, phase, s, t(e), label))
            for s, label in open_.values():
                segs.append(Segment(exp, phase, s, max(last, s), f"{label} (no {end_ev} event)", closed=False))
        for e in es:
            if e["event"] in _POINT_EVENTS:
                points.append((exp, t(e), f"{e['event']}" + (f" {e['pool']}" if e.get("pool") else "")))
    return segs, points, span


def _duration(s: float) -> str:
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def fig_timeline(data: ReportData) -> Figure:
    title = "Campaign timeline"
    note = ("Per experiment: capacity (scale request → nodes ready), deploy → ready, smoke test, each load "
            "window (warm-up lighter), teardown; ◆ pool restored / handed over. Right: the experiment's "
            "allocation-based cost and $/1M output tokens (v_cost_efficiency).")
    segs, points, span = timeline_segments(data.timeline)
    if not segs and not points:
        return Figure("fig-timeline", title, note, [], 0, "No timeline events for this campaign.")
    costs = {r["experiment"]: r for r in data.views["v_cost_efficiency"].rows}
    lanes = [e for e in data.experiments if any(s.experiment == e for s in segs) or any(p[0] == e for p in points)]
    lanes += sorted({s.experiment for s in segs} - set(lanes))
    width, ml, mr, mt, lane_h = 1100, 150, 260, 44, 34
    pw = width - ml - mr
    height = mt + len(lanes) * lane_h + 100
    unit, div = ("h", 3600.0) if span >= 2 * 3600 else ("min", 60.0) if span >= 300 else ("s", 1.0)
    xa = linear_axis([0.0, max(span, 1e-3) / div], zero=True, n=8)

    def px(sec: float) -> float:
        return xa.pos(sec / div, ml, ml + pw)

    out = _svg_open("svg-timeline", title, width, height, data.simulated)
    axis_y = mt + len(lanes) * lane_h + 6
    out.append('<g class="axes" stroke="#000" stroke-width="1">')
    for tk in xa.ticks:
        x = xa.pos(tk, ml, ml + pw)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{axis_y}" stroke="#eeeeee"/>')
        out.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 5}"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle" stroke="none">'
                   f'{_t(xa.label(tk))}</text>')
    out.append(f'<line x1="{ml}" y1="{axis_y}" x2="{ml + pw}" y2="{axis_y}"/>')
    out.append("</g>")
    out.append(f'<text class="axis-label" x="{ml + pw / 2:.0f}" y="{axis_y + 36}" text-anchor="middle">'
               f'time since the campaign started ({unit})</text>')
    n = 0
    load_i: dict[str, int] = {}
    for li, exp in enumerate(lanes):
        y = mt + li * lane_h
        mode = data.modes.get(exp, "")
        color = MODE_COLORS.get(mode, OTHER_COLOR)
        out.append(f'<rect x="{ml}" y="{y + 3}" width="{pw}" height="{lane_h - 6}" fill="#fafafa"/>')
        out.append(f'<rect x="8" y="{y + lane_h / 2 - 6:.1f}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="26" y="{y + lane_h / 2 - 1:.1f}" font-weight="bold">{_t(exp)}</text>')
        out.append(f'<text x="26" y="{y + lane_h / 2 + 12:.1f}" font-size="10" fill="#555">{_t(mode)}</text>')
        for s in (s for s in segs if s.experiment == exp):
            x0, x1 = px(s.start), px(s.end)
            if s.phase == "load":
                i = load_i[exp] = load_i.get(exp, -1) + 1
                warm = "warmup" in s.label
                fill, op = color, 0.3 if warm else (0.95 if i % 2 == 0 else 0.65)
            else:
                fill, op = PHASE_COLORS[s.phase], 0.95
            tip = f"{exp}: {s.label}, {_duration(s.end - s.start)} (from {_duration(s.start)})"
            dash = ' stroke-dasharray="3 2"' if not s.closed else ""
            out.append(f'<rect class="mark seg seg-{s.phase}" x="{x0:.1f}" y="{y + 7}" '
                       f'width="{max(x1 - x0, 1.5):.1f}" height="{lane_h - 14}" fill="{fill}" fill-opacity="{op}" '
                       f'stroke="#333" stroke-width="0.4"{dash}><title>{_t(tip)}</title></rect>')
            n += 1
        for pexp, pt, label in points:
            if pexp == exp:
                x = px(pt)
                out.append(_marker("diamond", x, y + 6, "#222", True, f"{exp}: {label} at {_duration(pt)}", 4))
                n += 1
        c = costs.get(exp)
        if c is not None:
            cost, per = _num(c.get("cost_usd")), _num(c.get("usd_per_1m_output_tokens"))
            text = (f"${cost:,.2f}" if cost is not None else "cost n/a") + (
                f" · ${per:,.2f}/1M tok" if per is not None else "")
        else:
            text = "no cost row"
        out.append(f'<text class="cost" x="{ml + pw + 10}" y="{y + lane_h / 2 + 4:.1f}">{_t(text)}</text>')
    # legend
    ly = axis_y + 56
    items = [("capacity", PHASE_COLORS["capacity"], 0.95), ("deploy → ready", PHASE_COLORS["deploy"], 0.95),
             ("smoke", PHASE_COLORS["smoke"], 0.95), ("load (mode colour)", MODE_COLORS["aggregated"], 0.95),
             ("warm-up", MODE_COLORS["aggregated"], 0.3), ("teardown", PHASE_COLORS["teardown"], 0.95)]
    out.append(f'<g class="legend" transform="translate({ml},{ly})">')
    x = 0
    for label, col, op in items:
        out.append(f'<rect x="{x}" y="-8" width="18" height="12" fill="{col}" fill-opacity="{op}" stroke="#333" '
                   'stroke-width="0.4"/>')
        out.append(f'<text x="{x + 24}" y="2">{_t(label)}</text>')
        x += 40 + 7 * len(label)
    out.append(_marker("diamond", x + 6, -2, "#222", True, "", 4))
    out.append(f'<text x="{x + 18}" y="2">pool restored / handed over</text>')
    out.append("</g></svg>")
    return Figure("fig-timeline", title, note, ["\n".join(out)], n)


# ==================================================================================================
# HTML

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
"""


def _sim_span(data: ReportData) -> str:
    return f' <span class="sim-tag" title="{_t(SIM_TEXT)}">{SIM_TAG}</span>' if data.simulated else ""


def _html_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    head = "".join(f"<th>{_t(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            text = fmt_value(v)
            cls = (' class="num"' if isinstance(v, int | float | Decimal) and not isinstance(v, bool)
                   else ' class="long"' if len(text) > 80 else "")
            cells.append(f"<td{cls}>{_t(text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _table_sections(data: ReportData) -> list[tuple[str, str, Rows, list[str], str]]:
    """(section id, title, rows, columns, description) of every table shown."""
    out = []
    for view, title, desc in TABLES:
        rows = data.views[view]
        if view in OPTIONAL_TABLES and not rows.rows:
            continue
        out.append((f"tbl-{view}", f"{title} ({view})", rows, _shown_columns(view, rows), desc))
    return out


def _figures(data: ReportData) -> list[Figure]:
    return [fig_pareto(data), fig_concurrency(data), fig_multi_turn(data), fig_distribution(data),
            fig_prefix(data), fig_timeline(data)]


def _provenance_items(data: ReportData) -> list[tuple[str, str]]:
    c = data.campaign
    try:
        pricing = json.loads(c.get("pricing_json") or "{}")
    except ValueError:
        pricing = {}
    started, ended = c.get("started_at"), c.get("ended_at")
    took = _duration((ended - started).total_seconds()) if isinstance(started, datetime) and isinstance(
        ended, datetime) else ""
    items = [
        ("campaign_id", data.campaign_id), ("status", fmt_value(c.get("status"))),
        ("spec_name", fmt_value(c.get("spec_name"))), ("spec_hash", fmt_value(c.get("spec_hash"))),
        ("model", fmt_value(c.get("model"))), ("engine", fmt_value(c.get("engine"))),
        ("simulated", f"true — {SIM_TEXT}" if data.simulated else "false"),
        ("started_at (UTC)", fmt_value(started)), ("ended_at (UTC)", fmt_value(ended) + (f" ({took})" if took else "")),
        ("pricing source", fmt_value(pricing.get("source")) or "not given"),
        ("pricing as of", fmt_value(pricing.get("as_of")) or "not given"),
        ("lake", fmt_value(c.get("lake_uri")) or str(data.lake)),
    ]
    for k in ("failed_state", "error", "cause"):
        if c.get(k):
            items.append((k, fmt_value(c[k])))
    return items


def _versions_pretty(data: ReportData) -> str:
    raw = data.campaign.get("versions_json")
    try:
        return json.dumps(json.loads(raw or "{}"), indent=2, sort_keys=True)
    except ValueError:
        return str(raw)


def render_html(data: ReportData) -> str:
    sim = _sim_span(data)
    c = data.campaign
    tables = _table_sections(data)
    figures = _figures(data)
    parts: list[str] = []
    toc: list[tuple[str, str]] = []

    # figures
    for f in figures:
        toc.append((f.section_id, f.title))
        body = "\n".join(f.svgs) if f.svgs else f'<p class="empty">{_t(f.empty_reason)}</p>'
        parts.append(f'<section id="{f.section_id}" class="fig" data-points="{f.points}" data-figures="{len(f.svgs)}">'
                     f"<h2>{_t(f.title)}{sim}</h2><p class=\"note\">{_t(f.note)}</p>\n{body}\n</section>")
    # tables
    for sid, title, rows, cols, desc in tables:
        toc.append((sid, title))
        body = _html_table(cols, rows.rows) if rows.rows else '<p class="empty">No rows for this campaign.</p>'
        parts.append(f'<section id="{sid}" class="table" data-rows="{len(rows.rows)}">'
                     f'<h2>{_t(title)}{sim}</h2><p class="desc">{_t(desc)} Every column: '
                     f"<code>benchctl query {_t(sid[4:])}</code>.</p>{body}</section>")
    # predicted vs measured
    toc.append(("predictions", "Predicted vs measured"))
    if data.predictions is not None:
        pred_body = ('<p class="desc">Measured = the step\'s AIPerf p50 (TTFT, ITL) and output tokens/s; '
                     "error = (predicted - measured) / measured x 100.</p>"
                     + _html_table(data.predictions.columns, data.predictions.rows))
        n_pred = len(data.predictions.rows)
    else:
        pred_body, n_pred = f'<p class="empty no-predictions">{_t(data.predictions_note or "No predictions.")}</p>', 0
    parts.append(f'<section id="predictions" data-rows="{n_pred}"><h2>Predicted vs measured{sim}</h2>'
                 f"{pred_body}</section>")
    # provenance
    toc.append(("provenance", "Provenance"))
    kv = "".join(f"<dt>{_t(k)}</dt><dd>{_t(v)}</dd>" for k, v in _provenance_items(data))
    ds_cols = ["step_id", "workload_kind", "experiments", "dataset_sha256"]
    ds = [d for d in data.datasets if d.get("dataset_sha256")]
    ds_body = (_html_table(ds_cols, ds) if ds else
               '<p class="empty">No generated datasets (AIPerf synthesised every input).</p>')
    img_body = (_html_table(["where", "image", "digest"], data.images) if data.images else
                '<p class="empty">No image digests recorded'
                + (" (the local engine runs processes, not images)." if data.simulated else ".") + "</p>")
    parts.append(
        f'<section id="provenance" data-rows="1"><h2>Provenance{sim}</h2><dl class="kv">{kv}</dl>'
        f"<h3>Versions (versions_json)</h3><pre>{_t(_versions_pretty(data))}</pre>"
        f'<section id="datasets" data-rows="{len(ds)}"><h3>Datasets (steps.dataset_sha256)</h3>{ds_body}</section>'
        f'<section id="images" data-rows="{len(data.images)}"><h3>Image digests</h3>{img_body}</section>'
        "</section>")

    banner = (f'<div class="banner" id="simulated-banner">{SIM_TAG}: {_t(SIM_TEXT)}. Every figure below comes '
              "from the local engine; prices are illustrative.</div>" if data.simulated else "")
    nav = "".join(f'<li><a href="#{sid}">{_t(title)}</a></li>' for sid, title in toc)
    generated = datetime.now().astimezone().isoformat(timespec="seconds")
    exp_list = ", ".join(f"{e} ({data.modes.get(e) or '?'})" for e in data.experiments)
    head = (f"<h1>Campaign {_t(data.campaign_id)}{sim}</h1>"
            f'<p class="note">{_t(c.get("spec_name") or "")} · model {_t(c.get("model") or "?")} · engine '
            f"{_t(c.get('engine') or '?')} · status <b>{_t(c.get('status') or '?')}</b> · experiments: "
            f"{_t(exp_list or 'none')}</p>"
            f"<nav><ul>{nav}</ul></nav>")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>benchctl report: {_t(data.campaign_id)}{' (' + SIM_TAG + ')' if data.simulated else ''}</title>"
        f"<style>{_CSS}</style></head>\n<body>{banner}<main>{head}\n" + "\n".join(parts)
        + f'\n<footer>Generated by benchctl report at {_t(generated)} from {_t(data.lake)}.</footer>'
        "</main></body></html>\n"
    )


# ==================================================================================================
# Markdown


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
    out += [f"## Provenance{tag}", ""]
    out += [f"- **{k}**: {v}" for k, v in _provenance_items(data)]
    out += ["", "Versions:", "", "```json", _versions_pretty(data), "```", ""]
    ds = [d for d in data.datasets if d.get("dataset_sha256")]
    out += ["Datasets (steps.dataset_sha256):", ""]
    out += [_md_table(["step_id", "workload_kind", "experiments", "dataset_sha256"], ds) if ds
            else "_no generated datasets_", ""]
    if data.images:
        out += ["Image digests:", "", _md_table(["where", "image", "digest"], data.images), ""]
    for _sid, title, rows, cols, desc in _table_sections(data):
        out += [f"## {title}{tag}", "", desc, ""]
        out += [_md_table(cols, rows.rows) if rows.rows else "_no rows for this campaign_", ""]
    out += [f"## Predicted vs measured{tag}", ""]
    if data.predictions is not None:
        out += [_md_table(data.predictions.columns, data.predictions.rows), ""]
    else:
        out += [f"_{data.predictions_note or 'No predictions.'}_", ""]
    out += [f"## Figures{tag}", "", "Figures are omitted in Markdown: see the HTML report "
            "(`benchctl report --format html`):", ""]
    out += [f"- {f.title}" for f in _figures(data)]
    out.append("")
    return "\n".join(out)


# ==================================================================================================
# entry points


def render_report(lake: Path, campaign_id: str | None, fmt: str = "html") -> str:
    """The report of ``campaign_id`` (default: the latest in the lake's campaigns table) as text."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; valid: {', '.join(FORMATS)}")
    data = load_report_data(Path(lake), campaign_id)
    return render_html(data) if fmt == "html" else render_markdown(data)


def write_report(lake: Path, campaign_id: str | None, out: Path, fmt: str = "html") -> Path:
    """Render and write the report atomically (temporary file in the same directory, then rename)."""
    text = render_report(lake, campaign_id, fmt)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return out
