"""The report's figures of the comparison views: Pareto, TTFT/ITL vs concurrency, per turn, per length
distribution, prefix ratio vs measured cache hit rate. May import the standard library and the core."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from benchctl.report.chartkit import (
    DASHES,
    MARKERS,
    MODE_COLORS,
    OTHER_COLOR,
    BarSeries,
    Figure,
    Series,
    bar_chart,
    xy_chart,
)
from benchctl.report.data import ReportData, num


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


def fig_pareto(data: ReportData) -> Figure:
    rows = [r for r in data.views["v_pareto"].rows
            if num(r.get("output_tokens_per_s_per_gpu")) is not None and num(r.get("ttft_p50_ms")) is not None]
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
            if num(r.get(col)) is not None:
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
            exp, x, y = r.get(f"{side}_experiment"), num(r.get(x_col)), num(r.get(f"{side}_{y_col}"))
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
                v = num(r.get(f"ttft_{stat}_ms")) if r else None
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
            "y = x): the first requests find a cold cache and blocks are cached whole, so it stays below, and "
            "normally below v_prefix_cache.achievable_hit_rate, the best any cache could do on the dataset.")
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


def figures(data: ReportData) -> list[Figure]:
    """Every figure of the report, in its order."""
    from benchctl.report.timeline import fig_timeline

    return [fig_pareto(data), fig_concurrency(data), fig_multi_turn(data), fig_distribution(data),
            fig_prefix(data), fig_timeline(data)]
