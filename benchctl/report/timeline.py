"""The report's campaign timeline: per experiment, the phases between paired timeline events (capacity,
deploy, smoke, each load, teardown), pool restores and hand-overs as points, and each experiment's cost.
The events and their pairs are ``benchctl.lake.timeline``'s. May import the standard library and the core."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchctl.lake import timeline as events
from benchctl.report.chartkit import (
    MODE_COLORS,
    OTHER_COLOR,
    PHASE_COLORS,
    Figure,
    draw_marker,
    duration,
    esc,
    linear_axis,
    svg_open,
)
from benchctl.report.data import ReportData, num


@dataclass
class Segment:
    experiment: str
    phase: str
    start: float
    end: float
    label: str
    closed: bool = True


def timeline_segments(rows: list[dict[str, Any]]) -> tuple[list[Segment], list[tuple[str, float, str]], float]:
    """(phase segments, point events (experiment, t, label), campaign span in s); t from the first event."""
    evs = [e for e in rows if e.get("at") is not None]
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
        if exp == events.CAMPAIGN:
            continue
        last = max(t(e) for e in es)
        for phase in events.PHASES:
            open_: dict[Any, tuple[float, str]] = {}
            for e in es:
                k = (e.get("pool") if phase.key == "pool" else events.detail(e).get(phase.key)) if phase.key else None
                if events.is_event(e, phase.start):
                    label = f"{phase.name} {k}" if k else phase.name
                    open_[k] = (t(e), label)
                elif events.is_event(e, phase.end) and k in open_:
                    s, label = open_.pop(k)
                    segs.append(Segment(exp, phase.name, s, t(e), label))
            for s, label in open_.values():
                segs.append(Segment(exp, phase.name, s, max(last, s), f"{label} (no {phase.end.name} event)",
                                    closed=False))
        for e in es:
            if events.is_event(e, *events.POINTS):
                points.append((exp, t(e), f"{e['event']}" + (f" {e['pool']}" if e.get("pool") else "")))
    return segs, points, span


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

    out = svg_open("svg-timeline", title, width, height, data.simulated)
    axis_y = mt + len(lanes) * lane_h + 6
    out.append('<g class="axes" stroke="#000" stroke-width="1">')
    for tk in xa.ticks:
        x = xa.pos(tk, ml, ml + pw)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{axis_y}" stroke="#eeeeee"/>')
        out.append(f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 5}"/>')
        out.append(f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle" stroke="none">'
                   f'{esc(xa.label(tk))}</text>')
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
        out.append(f'<text x="26" y="{y + lane_h / 2 - 1:.1f}" font-weight="bold">{esc(exp)}</text>')
        out.append(f'<text x="26" y="{y + lane_h / 2 + 12:.1f}" font-size="10" fill="#555">{esc(mode)}</text>')
        for s in (s for s in segs if s.experiment == exp):
            x0, x1 = px(s.start), px(s.end)
            if s.phase == "load":
                i = load_i[exp] = load_i.get(exp, -1) + 1
                warm = "warmup" in s.label
                fill, op = color, 0.3 if warm else (0.95 if i % 2 == 0 else 0.65)
            else:
                fill, op = PHASE_COLORS[s.phase], 0.95
            tip = f"{exp}: {s.label}, {duration(s.end - s.start)} (from {duration(s.start)})"
            dash = ' stroke-dasharray="3 2"' if not s.closed else ""
            out.append(f'<rect class="mark seg seg-{s.phase}" x="{x0:.1f}" y="{y + 7}" '
                       f'width="{max(x1 - x0, 1.5):.1f}" height="{lane_h - 14}" fill="{fill}" fill-opacity="{op}" '
                       f'stroke="#333" stroke-width="0.4"{dash}><title>{esc(tip)}</title></rect>')
            n += 1
        for pexp, pt, label in points:
            if pexp == exp:
                x = px(pt)
                out.append(draw_marker("diamond", x, y + 6, "#222", True, f"{exp}: {label} at {duration(pt)}", 4))
                n += 1
        c = costs.get(exp)
        if c is not None:
            cost, per = num(c.get("cost_usd")), num(c.get("usd_per_1m_output_tokens"))
            text = (f"${cost:,.2f}" if cost is not None else "cost n/a") + (
                f" · ${per:,.2f}/1M tok" if per is not None else "")
        else:
            text = "no cost row"
        out.append(f'<text class="cost" x="{ml + pw + 10}" y="{y + lane_h / 2 + 4:.1f}">{esc(text)}</text>')
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
        out.append(f'<text x="{x + 24}" y="2">{esc(label)}</text>')
        x += 40 + 7 * len(label)
    out.append(draw_marker("diamond", x + 6, -2, "#222", True, "", 4))
    out.append(f'<text x="{x + 18}" y="2">pool restored / handed over</text>')
    out.append("</g></svg>")
    return Figure("fig-timeline", title, note, ["\n".join(out)], n)

