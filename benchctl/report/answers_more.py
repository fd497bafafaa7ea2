"""Answers to Q3 and to hypotheses H2, H3 and H4 (the rest: :mod:`benchctl.report.answers`), over the
comparisons the campaign recorded, with ``benchctl.verdicts``' rules. Pure: the standard library and the core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchctl.report.data import fmt_value, num
from benchctl.report.evidence import (
    BASELINE,
    DIRECTIONAL,
    NOT_MEASURED,
    TREATMENT,
    Answer,
    Evidence,
    Pair,
    by_input,
    finish,
    fnum,
    input_label,
    not_measured,
    per_repeat,
    samples_text,
    sweep_key,
    sweep_points,
)
from benchctl.verdicts import (
    INCONCLUSIVE,
    Compared,
    Sample,
    compare,
    fit_line,
    judge,
    mean_interval,
    slope_difference,
    summarize,
)


def _repeats(rows: list[dict[str, Any]]) -> int:
    return len({r.get("repeat") for r in rows})


def _derived(rows: list[dict[str, Any]], name: str, fn: Callable[[dict[str, Any]], float | None]
             ) -> list[dict[str, Any]]:
    return [{**r, name: fn(r)} for r in rows]


# -------------------------------------------------------------------------------------------------- Q3


def q3(ev: Evidence) -> Answer:
    a = Answer("q3", "question", "How does the input prefix duplication ratio relate to the server's real cache "
               "hit rate, in both modes?", "v_comparison_steps (v_step_cache), v_prefix_cache", "")
    pairs, left = ev.for_question("q3")
    if not pairs:
        return not_measured(a, "no valid comparison of an aggregated and a disaggregated experiment", left)
    parts, compared, samples = [], [], []
    for pair in pairs:
        conf = pair.settings.confidence
        a.method = (pair.settings.describe() + "; hit rate = a + b x duplication ratio, least squares over every "
                    "valid step (ratios x repeats), the slope's Student-t interval")
        sides = {side: [r for r in ev.rows(pair, side, "prefix_cache") if num(r.get("cache_hit_rate")) is not None
                        and num(r.get("prefix_ratio")) is not None] for side in (BASELINE, TREATMENT)}
        if not sides[BASELINE] or not sides[TREATMENT]:
            parts.append(f"{pair.label}: {NOT_MEASURED} (no prefix-cache step with a server-measured hit rate on "
                         "both sides)")
            continue
        samples.append(samples_text(ev, pair, "prefix_cache"))
        a.excluded += ev.invalid_steps(pair, "prefix_cache")
        fits = {}
        for side, rows in sides.items():
            exp = pair.experiment(side)
            fit = fit_line([(float(r["prefix_ratio"]), float(r["cache_hit_rate"])) for r in rows], conf)
            fits[side] = fit
            a.figures.append((f"{pair.label}: {exp} fit",
                              fit.text("duplication ratio", "hit rate") if fit else "fewer than 2 ratios: no fit"))
            for ratio in sorted({float(r["prefix_ratio"]) for r in rows}):
                s = per_repeat([r for r in rows if float(r["prefix_ratio"]) == ratio], "cache_hit_rate")
                iv = mean_interval(s, conf)
                a.figures.append((f"{pair.label}: {exp}, ratio {fmt_value(ratio)}",
                                  f"hit rate {fnum(s.mean)}" + (f", {conf:.0%} CI [{fnum(iv.low)}, {fnum(iv.high)}]"
                                                                if iv else " (one repeat: no interval)")))
        fb, ft = fits[BASELINE], fits[TREATMENT]
        if fb is None or ft is None:
            parts.append(f"{pair.label}: {INCONCLUSIVE} (fewer than two duplication ratios on a side: no fit)")
            continue
        # n per side: the repeats behind the fit (its points are ratios x repeats)
        nb, nt = _repeats(sides[BASELINE]), _repeats(sides[TREATMENT])
        diff = judge("hit-rate slope", "", Sample((fb.slope,) * nb), Sample((ft.slope,) * nt),
                     slope_difference(fb, ft, conf), pair.settings, lower_is_better=False)
        compared.append(diff)
        parts.append(f"{pair.label}: {pair.baseline} {fb.text('duplication ratio', 'hit rate')}; {pair.treatment} "
                     f"{ft.text('duplication ratio', 'hit rate')}; the treatment's slope minus the baseline's: "
                     f"{diff.text()}")
    return finish(a, parts, compared, left, samples)


# -------------------------------------------------------------------------------------------------- H2


def _feature(pair: Pair, ev: Evidence) -> str:
    def val(side: str, col: str) -> str:
        got = {fmt_value(r.get(col)) for r in ev.rows(pair, side)}
        return ", ".join(sorted(got)) or "?"

    if "router" in pair.differs:
        return f"router {val(BASELINE, 'router')} -> {val(TREATMENT, 'router')}"
    return f"kv_offload {val(BASELINE, 'kv_offload')} -> {val(TREATMENT, 'kv_offload')}"


def h2(ev: Evidence) -> Answer:
    a = Answer("h2", "hypothesis", "Multi-turn: routing and offload may reduce recomputation (the real hit/miss and "
               "preemptions, with and without the feature)", "v_comparison_steps (v_step_cache), v_multi_turn", "")
    pairs, left = ev.for_question("h2")
    if not pairs:
        return not_measured(a, "no comparison that changes only the router or only kv_offload (a feature-ladder rung, "
                               "or spec comparisons: with question h2)", left)
    parts, compared, samples = [], [], []
    for pair in pairs:
        a.method = (pair.settings.describe() + "; recomputation = 1 - the server's cache hit rate (share of input "
                    "tokens prefilled again)")
        pts = ev.points(pair, "multi_turn", lambda r: (r.get("workload"), r.get("variant")))
        feature = _feature(pair, ev)
        if not pts:
            parts.append(f"{pair.label} ({feature}): {NOT_MEASURED} (no valid multi-turn step on both sides)")
            continue
        samples.append(samples_text(ev, pair, "multi_turn"))
        a.excluded += ev.invalid_steps(pair, "multi_turn")
        rec, pre = [], []

        def miss(r: dict[str, Any]) -> float | None:
            h = num(r.get("cache_hit_rate"))
            return None if h is None else 1.0 - h

        for (wl, variant), sides in pts.items():
            b, t = (_derived(sides[s], "recomputed", miss) for s in (BASELINE, TREATMENT))
            c = compare("recomputed share", "", per_repeat(b, "recomputed"), per_repeat(t, "recomputed"),
                        pair.settings, lower_is_better=True)
            p = compare("preemptions", "", per_repeat(b, "preemptions"), per_repeat(t, "preemptions"), pair.settings,
                        lower_is_better=True)
            where = f"{wl} {variant}"
            if c.base.n and c.treat.n:
                rec.append((where, c))
            if p.base.n and p.treat.n:
                pre.append((where, p))
            a.figures.append((f"{pair.label}, {where}", f"recomputed share of input tokens {c.text()}; preemptions "
                                                        f"{p.text() if p.base.n and p.treat.n else NOT_MEASURED}"))
        if not rec:
            parts.append(f"{pair.label} ({feature}): {NOT_MEASURED} (no server-measured hit rate on its multi-turn "
                         "steps)")
            continue
        compared += [c for _, c in rec]
        parts.append(f"{pair.label} ({feature}): recomputation {summarize(rec)}; preemptions "
                     + (summarize(pre) if pre else NOT_MEASURED))
    return finish(a, parts, compared, left, samples)


# -------------------------------------------------------------------------------------------------- H3

PREFILL_WAITING = "prefill_waiting_avg"  # vllm:num_requests_waiting of the prefill workers (asked of v_stage_queues)


def h3(ev: Evidence) -> Answer:
    a = Answer("h3", "hypothesis", "High load, long inputs: less prefill interference, but decode capacity may become "
               "the bottleneck (both stages' waiting queues, GPU use, SLO attainment; aggregated beside)",
               "v_stage_queues, v_comparison_steps", "")
    pairs, left = ev.for_question("h3")
    if not pairs:
        return not_measured(a, "no valid comparison of an aggregated and a disaggregated experiment", left)
    sq = ev.view("v_stage_queues")
    stage = {(r.get("experiment"), r.get("step_id")): r for r in sq.rows}
    has_prefill = PREFILL_WAITING in sq.columns and any(num(r.get(PREFILL_WAITING)) is not None for r in sq.rows)
    decode_col = "decode_waiting_avg"
    parts: list[str] = []
    samples: list[str] = []
    compared: list[Compared] = []

    def said(s: Sample, unit: str = "") -> str:
        return fnum(s.mean, unit) if s.n else NOT_MEASURED

    def gauges(rows: list[dict[str, Any]], col: str) -> Sample:
        return per_repeat([{**(stage.get((r.get("experiment"), r.get("step_id"))) or {}), "repeat": r.get("repeat")}
                           for r in rows], col)

    for pair in pairs:
        a.method = pair.settings.describe() + "; queue depth = the stage's time-averaged waiting requests"
        pts = sweep_points(ev, pair, a, parts, samples)
        if pts is None:
            continue
        for ikey, keys in by_input(pts).items():
            top = sorted(keys, key=lambda k: float(k[3]))[-2:]  # the highest loads
            told = []
            for k in top:
                b, t = pts[k][BASELINE], pts[k][TREATMENT]
                dec, agg = gauges(t, decode_col), gauges(b, "worker_waiting_avg")
                pre = gauges(t, PREFILL_WAITING) if has_prefill else Sample(())
                att = [compare("goodput ratio", "", per_repeat(b, "goodput_ratio"), per_repeat(t, "goodput_ratio"),
                               pair.settings, lower_is_better=False)]
                gpu_p, gpu_d = gauges(t, "gpu_util_prefill_avg_pct"), gauges(t, "gpu_util_decode_avg_pct")
                where = f"c={fmt_value(k[3])}"
                line = (f"{pair.treatment} waiting: prefill {said(pre)}, decode {said(dec)}; {pair.baseline} "
                        f"(aggregated) waiting {said(agg)}; SLO attainment {att[0].text()}; GPU util prefill "
                        f"{said(gpu_p, '%')}, decode {said(gpu_d, '%')}")
                if pre.n and dec.n:
                    c = compare("waiting: decode - prefill", "requests", pre, dec, pair.settings,
                                lower_is_better=True)
                    compared.append(c)
                    who = {"higher": "decode queues deeper", "lower": "prefill queues deeper"}.get(c.outcome, "")
                    told.append(f"{where}: {who or c.outcome} ({c.delta_text()}" + ("" if who else f"; {c.reason}")
                                + ")")
                    line += f"; decode - prefill waiting {c.text()}"
                else:
                    told.append(f"{where}: decode waiting {said(dec)} vs aggregated {said(agg)}")
                a.figures.append((f"{pair.label}, {input_label(ikey)}, {where}", line))
            parts.append(f"{pair.label}, {input_label(ikey)}: " + "; ".join(told))
    if not has_prefill:
        a.verdict = (f"{NOT_MEASURED}: the prefill stage's waiting queue (vllm:num_requests_waiting on the prefill "
                     f"workers: v_stage_queues.{PREFILL_WAITING}) is not in the lake, so the two stages' queues cannot "
                     "be compared; " + " | ".join(parts))
        a.status = NOT_MEASURED
        a.excluded += left
        a.samples = " | ".join(samples)
        return a
    return finish(a, parts, compared, left, samples)


# -------------------------------------------------------------------------------------------------- H4


def h4(ev: Evidence) -> Answer:
    a = Answer("h4", "hypothesis", "Cost: a heterogeneous GPU combination may pay off over some load range (goodput "
               "per dollar-hour at the same SLO and quality, per load)", "v_comparison_steps, v_cost_efficiency, "
               "v_quality", "")
    pairs, left = ev.for_question("h4")
    if not pairs:
        return not_measured(a, "the campaign has no valid comparison of experiments on different GPU kinds (a "
                               "disaggregated heterogeneous experiment beside a baseline)", left)
    cost = {r.get("experiment"): r for r in ev.view("v_cost_efficiency").rows}
    qual = {r.get("experiment"): r for r in ev.view("v_quality").rows}
    parts, compared, samples = [], [], []
    for pair in pairs:
        a.method = (pair.settings.describe() + "; goodput per $/h = SLO-meeting requests/s over the experiment's "
                    "allocated nodes' $/h, at each load")
        pts = ev.points(pair, "concurrency_sweep", sweep_key)
        for e in (pair.baseline, pair.treatment):
            ce, qe = cost.get(e) or {}, qual.get(e) or {}
            a.figures.append((e, f"GPUs used {fmt_value(ce.get('gpus'))} of {fmt_value(ce.get('gpus_allocated'))} "
                                 f"allocated ({fmt_value(ce.get('gpu_kinds'))}), "
                                 f"{fnum(num(ce.get('gpu_usd_per_hour')), '$/h')}; quality score "
                                 f"{fmt_value(qe.get('quality_score')) or NOT_MEASURED} (gate "
                                 f"{fmt_value(qe.get('quality_gate')) or 'none'})"))
        per: list[tuple[str, Compared]] = []
        for k, sides in pts.items():
            c = compare("goodput per $/h", "req/s per $/h", per_repeat(sides[BASELINE], "goodput_per_usd_hour"),
                        per_repeat(sides[TREATMENT], "goodput_per_usd_hour"), pair.settings, lower_is_better=False)
            if c.base.n and c.treat.n:
                per.append((f"c={fmt_value(k[3])}", c))
                a.figures.append((f"{pair.label}, {input_label(k)}, c={fmt_value(k[3])}", f"goodput per $/h {c.text()}"))
        if not per:
            parts.append(f"{pair.label}: {NOT_MEASURED} (no concurrency-sweep step with goodput and a price on both "
                         "sides: the spec sets no SLO, or a pool is unpriced)")
            continue
        samples.append(samples_text(ev, pair, "concurrency_sweep"))
        a.excluded += ev.invalid_steps(pair, "concurrency_sweep")
        compared += [c for _, c in per]
        parts.append(f"{pair.label}: SLO-meeting requests/s per $/h {summarize(per)} (higher = the treatment buys "
                     "more goodput per dollar-hour)")
    return finish(a, parts, compared, left, samples)


__all__ = ["DIRECTIONAL", "h2", "h3", "h4", "q3"]
