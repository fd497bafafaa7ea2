"""The report's chart kit: inline SVG scatter/line and bar charts drawn here (no script, no font, no image:
the report stays one self-contained file), axes with readable ticks, markers, legends.
May import only the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

SIM_TAG = "SIMULATED"
SIM_TEXT = "Dynamo mocker on CPU — not GPU measurements"
CPU_ENGINE_TAG = "SIMULATED (CPU engine)"  # benchctl.local.cpu_engine.LABEL
CPU_ENGINE_TEXT = ("Dynamo's vLLM worker on vLLM's CPU build serving a tiny random-weight model — not GPU "
                   "measurements")


def sim_label(worker_engine: str | None) -> tuple[str, str]:
    """(tag, text) of a simulated campaign by what served it (the campaigns row's ``worker_engine``)."""
    if worker_engine and CPU_ENGINE_TAG in worker_engine:
        return CPU_ENGINE_TAG, CPU_ENGINE_TEXT
    return SIM_TAG, SIM_TEXT

MODE_COLORS = {"aggregated": "#1f77b4", "disaggregated": "#d62728"}
OTHER_COLOR = "#2ca02c"
MARKERS = ("circle", "square", "triangle", "diamond")
DASHES = (None, "7 4", "2 3", "9 3 2 3")
PHASE_COLORS = {"capacity": "#9e9e9e", "deploy": "#8e6bb8", "smoke": "#2ca25f", "teardown": "#f28e2b"}


def esc(s: Any) -> str:
    """Text escaped for HTML/SVG (attributes included)."""
    return escape(str(s), quote=True)


def duration(s: float) -> str:
    """Seconds as people read a span: s, min or h."""
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"



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





def title_text(title: str, simulated: bool) -> str:
    tag = f' <tspan class="sim-tag" fill="#b00020" font-weight="bold">· {SIM_TAG}</tspan>' if simulated else ""
    return f'<text class="fig-title" x="12" y="22" font-size="15" font-weight="bold">{esc(title)}{tag}</text>'


def svg_open(fig_id: str, title: str, w: int, h: int, simulated: bool) -> list[str]:
    full = f"{title} — {SIM_TAG}: {SIM_TEXT}" if simulated else title
    return [
        f'<svg class="figure" id="{esc(fig_id)}" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        f'aria-label="{esc(full)}" font-family="sans-serif" font-size="12">',
        f"<title>{esc(full)}</title>",
        f'<rect x="0" y="0" width="{w}" height="{h}" fill="#ffffff"/>',
        title_text(title, simulated),
    ]


def draw_marker(kind: str, x: float, y: float, color: str, filled: bool, tip: str, size: float = 4.5) -> str:
    fill = color if filled else "#ffffff"
    attrs = f'fill="{fill}" stroke="{color}" stroke-width="1.8"'
    tip_el = f"<title>{esc(tip)}</title>" if tip else ""
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


def draw_legend(items: list[tuple[str, str, str, bool, str | None, bool]], x: float, y: float) -> list[str]:
    """items: (label, color, marker, filled, dash, line)."""
    out = [f'<g class="legend" transform="translate({x:.0f},{y:.0f})">']
    for i, (label, color, marker, filled, dash, line) in enumerate(items):
        yy = i * 20
        if line:
            d = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<line x1="0" y1="{yy}" x2="26" y2="{yy}" stroke="{color}" stroke-width="2"{d}/>')
        if marker:
            out.append(draw_marker(marker, 13, yy, color, filled, ""))
        out.append(f'<text x="34" y="{yy + 4}">{esc(label)}</text>')
    out.append("</g>")
    return out


def y_grid(ya: Axis, py: Any, ml: float, pw: float) -> list[str]:
    """Horizontal grid lines, ticks and tick labels of a chart's y axis."""
    out = []
    for t in ya.ticks:
        y = py(t)
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        out.append(f'<line x1="{ml - 5}" y1="{y:.1f}" x2="{ml}" y2="{y:.1f}"/>')
        out.append(f'<text x="{ml - 8}" y="{y + 4:.1f}" text-anchor="end" stroke="none">{esc(ya.label(t))}</text>')
    return out


def frame(ml: float, mt: float, pw: float, ph: float) -> list[str]:
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

    out = svg_open(fig_id, title, width, height, simulated)
    # grid, ticks and tick labels
    out.append('<g class="axes" stroke="#000" stroke-width="1">')
    out += y_grid(ya, py, ml, pw)
    for t in xa.ticks:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#f0f0f0"/>')
        out.append(f'<line x1="{x:.1f}" y1="{mt + ph}" x2="{x:.1f}" y2="{mt + ph + 5}"/>')
        out.append(f'<text x="{x:.1f}" y="{mt + ph + 18}" text-anchor="middle" stroke="none">{esc(xa.label(t))}</text>')
    out += frame(ml, mt, pw, ph)
    out.append("</g>")
    out.append(f'<text class="axis-label" x="{ml + pw / 2:.0f}" y="{height - 10}" text-anchor="middle">'
               f'{esc(x_label + (" (log scale)" if xa.log else ""))}</text>')
    out.append(f'<text class="axis-label" transform="translate(16,{mt + ph / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{esc(y_label)}</text>')
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
            out.append(draw_marker(s.marker, px(x), py(y), s.color, s.filled, tip))
            n += 1
            if s.point_labels:
                out.append(f'<text class="point-label" x="{px(x) + 7:.1f}" y="{py(y) - 7:.1f}" font-size="10" '
                           f'fill="#444">{esc(s.point_labels[i])}</text>')
        if s.legend:
            legend.append((s.label, s.color, s.marker, s.filled, s.dash, s.line))
    out += draw_legend(legend, ml + pw + 22, mt + 10)
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

    out = svg_open(fig_id, title, width, height, simulated)
    out.append('<g class="axes" stroke="#000" stroke-width="1">')
    out += y_grid(ya, py, ml, pw)
    out += frame(ml, mt, pw, ph)
    out.append("</g>")
    gw = pw / max(len(groups), 1)
    bw = gw * 0.8 / max(len(bars), 1)
    n = 0
    for gi, g in enumerate(groups):
        gx = ml + gi * gw
        out.append(f'<text x="{gx + gw / 2:.1f}" y="{mt + ph + 18}" text-anchor="middle">{esc(g)}</text>')
        for bi, b in enumerate(bars):
            v = b.values[gi]
            if v is None:
                continue
            x, y = gx + gw * 0.1 + bi * bw, py(v)
            out.append(f'<rect class="mark bar" x="{x:.1f}" y="{y:.1f}" width="{max(bw - 2, 1):.1f}" '
                       f'height="{max(mt + ph - y, 0.5):.1f}" fill="{b.color}" fill-opacity="{b.opacity}" '
                       f'stroke="{b.color}"><title>{esc(b.tips[gi])}</title></rect>')
            n += 1
    out.append(f'<text class="axis-label" transform="translate(16,{mt + ph / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{esc(y_label)}</text>')
    lx, ly = ml + pw + 22, mt + 10
    out.append(f'<g class="legend" transform="translate({lx},{ly})">')
    for i, b in enumerate(bars):
        out.append(f'<rect x="0" y="{i * 20 - 7}" width="22" height="12" fill="{b.color}" '
                   f'fill-opacity="{b.opacity}" stroke="{b.color}"/>')
        out.append(f'<text x="30" y="{i * 20 + 4}">{esc(b.label)}</text>')
    out.append("</g></svg>")
    return "\n".join(out), n


@dataclass
class Figure:
    section_id: str
    title: str
    note: str
    svgs: list[str]
    points: int
    empty_reason: str = ""
