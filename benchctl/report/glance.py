"""Answers at a glance: each answer's compared figures as a table with numeric columns (baseline, treatment,
difference, change, interval) and the reasons a point is not decided as numbered notes under it, once each;
and a forest plot of the answer's tests (one row per point: the change and its interval, zero and the
practical threshold marked), drawn with the report's chart kit. Pure: the standard library and the core."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchctl.analysis.effects import DESCRIPTIVE, Compared, confidence_text
from benchctl.analysis.formatting import round_for_reading
from benchctl.analysis.verdicts import num_text
from benchctl.report.chartkit import esc, linear_axis, svg_open
from benchctl.report.evidence import Answer, Shown

COLUMNS = ["comparison", "point", "figure", "baseline", "treatment", "difference", "change", "interval", "level",
           "verdict"]


def _n(v: float | None) -> float | None:
    """A figure as read: rounded to what tells it apart (a number, so that it sits right-aligned)."""
    return None if v is None else float(round_for_reading(v).replace(",", ""))


def effect_table(a: Answer) -> tuple[list[dict[str, Any]], list[str]]:
    """``(rows, notes)``: one row per compared figure and point; each undecided point's reason once, as a
    numbered note its verdict cell points to ("inconclusive [1]")."""
    notes: list[str] = []
    rows = []
    last: tuple[str, str] = ("", "")
    for s in a.effects:
        c = s.c
        why = c.reason
        mark = ""
        if why:
            if why not in notes:
                notes.append(why)
            mark = f" [{notes.index(why) + 1}]"
        iv = c.change_interval
        unit = c.shown_unit
        rows.append({  # a comparison and point once, over the rows that share them
            "comparison": "" if s.where == last[0] else s.where,
            "point": "" if (s.where, s.point) == last else s.point,
            "figure": f"{c.figure.label} ({c.unit})" if c.unit else c.figure.label,
            "baseline": _n(c.base.mean), "treatment": _n(c.treat.mean), "difference": _n(c.diff),
            "change": f"{num_text(c.change, unit, signed=True)}" if c.change is not None else "",
            "interval": (f"[{num_text(iv[0], signed=True)}, {num_text(iv[1], signed=True)}] {unit}".rstrip()
                         if iv is not None else ""),
            "level": (confidence_text(c.confidence) + (" unadjusted" if c.outcome == DESCRIPTIVE else "")
                      if iv is not None and c.confidence is not None else ""),
            "verdict": (c.outcome if c.directional or c.outcome == DESCRIPTIVE else "inconclusive") + mark})
        last = (s.where, s.point)
    return rows, notes


def notes_text(notes: list[str]) -> list[str]:
    return [f"[{i}] {n}" for i, n in enumerate(notes, 1)]


@dataclass(frozen=True)
class Row:
    label: str
    est: float
    low: float | None
    high: float | None
    directional: bool
    tip: str


def tested(a: Answer) -> list[Shown]:
    """What the forest plot shows: the answer's tested points (its primary figures), else its descriptive ones."""
    primary = [s for s in a.effects if s.c.primary and s.c.outcome != DESCRIPTIVE and s.c.change is not None]
    return primary or [s for s in a.effects if s.c.change is not None]


def forests(a: Answer, simulated: bool) -> list[str]:
    """One forest plot per unit the answer's tested points are read in (% of the baseline, percentage points,
    a figure's own unit)."""
    by_unit: dict[str, list[Shown]] = {}
    for s in tested(a):
        by_unit.setdefault(s.c.shown_unit, []).append(s)
    out = []
    for i, (unit, shown) in enumerate(by_unit.items()):
        figs = sorted({s.c.figure.label for s in shown})
        title = f"{a.key.upper()}: {', '.join(figs)}, change" + (f" in {unit}" if unit else "")
        out.append(forest(f"forest-{a.key}-{i}", title, unit, shown, simulated))
    return out


def _edges(c: Compared) -> tuple[float, float]:
    return c._shown(c.edges[0]), c._shown(c.edges[1])


def forest(fig_id: str, title: str, unit: str, shown: list[Shown], simulated: bool) -> str:
    """A forest plot: one row per point (the change as a marker, filled when directional; its interval as a
    whisker at the level its step used), a solid line at zero, dashed lines at the practical threshold."""
    one_where = len({s.where for s in shown}) == 1
    if one_where:
        title += f": {shown[0].where}"
    rows = []
    for s in shown:
        low, high = s.c.change_interval or (None, None)
        rows.append(Row(("" if one_where else f"{s.where} · ") + s.point
                        + (f" · {s.c.figure.label}" if len({x.c.figure.label for x in shown}) > 1 else ""),
                        float(s.c.change or 0.0), low, high, s.c.directional, f"{s.point}: {s.c.text()}"))
    lo_edge, hi_edge = _edges(shown[0].c)
    values = [v for r in rows for v in (r.est, r.low, r.high) if v is not None] + [lo_edge, hi_edge, 0.0]
    axis = linear_axis(values, zero=True)
    width, label_w, mr, mt, row_h = 1080, 420, 30, 46, 22
    ml, pw = label_w + 20, width - label_w - 20 - mr
    ph = row_h * len(rows)
    height = mt + ph + 70

    def px(v: float) -> float:
        return axis.pos(v, ml, ml + pw)

    out = svg_open(fig_id, title, width, height, simulated)
    out.append('<g class="axes" stroke="#000" stroke-width="1">')
    for t in axis.ticks:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#f0f0f0"/>')
        out.append(f'<text x="{x:.1f}" y="{mt + ph + 18}" text-anchor="middle" stroke="none">'
                   f"{esc(axis.label(t))}</text>")
    out.append(f'<line x1="{ml}" y1="{mt + ph}" x2="{ml + pw}" y2="{mt + ph}"/>')
    out.append("</g>")
    out.append(f'<line class="zero" x1="{px(0.0):.1f}" y1="{mt - 6}" x2="{px(0.0):.1f}" y2="{mt + ph}" '
               'stroke="#333" stroke-width="1.5"/>')
    for edge in (lo_edge, hi_edge):
        out.append(f'<line class="threshold" x1="{px(edge):.1f}" y1="{mt - 6}" x2="{px(edge):.1f}" y2="{mt + ph}" '
                   'stroke="#888" stroke-width="1.2" stroke-dasharray="5 4"/>')
    for i, r in enumerate(rows):
        y = mt + row_h * i + row_h / 2
        if i % 2:
            out.append(f'<rect x="8" y="{y - row_h / 2:.1f}" width="{width - 16}" height="{row_h}" fill="#f7f8fa"/>')
        out.append(f'<text x="{label_w + 8}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{esc(r.label)}</text>')
        color = "#0b57d0" if r.directional else "#555555"
        if r.low is not None and r.high is not None:
            out.append(f'<line class="interval" x1="{px(r.low):.1f}" y1="{y:.1f}" x2="{px(r.high):.1f}" y2="{y:.1f}" '
                       f'stroke="{color}" stroke-width="2"/>')
        else:
            out.append(f'<text x="{px(r.est) + 9:.1f}" y="{y + 4:.1f}" font-size="10" fill="#8a6d00">no interval</text>')
        fill = color if r.directional else "#ffffff"
        out.append(f'<circle class="mark" cx="{px(r.est):.1f}" cy="{y:.1f}" r="5" fill="{fill}" stroke="{color}" '
                   f'stroke-width="1.8"><title>{esc(r.tip)}</title></circle>')
    out.append(f'<text class="axis-label" x="{ml + pw / 2:.0f}" y="{mt + ph + 40}" text-anchor="middle">'
               f"{esc('change, treatment vs baseline' + (f' ({unit})' if unit else ''))}</text>")
    out.append(f'<text x="12" y="{height - 10}" font-size="11" fill="#444">filled: directional; hollow: '
               "inconclusive or descriptive; whisker: the interval at the level its step used; solid line: no change; "
               f"dashed: the practical threshold ({esc(shown[0].c.threshold_text)})</text>")
    out.append("</svg>")
    return "\n".join(out)


__all__ = ["COLUMNS", "effect_table", "forest", "forests", "notes_text", "tested"]
