"""Answers to Q3 and to hypotheses H2, H3 and H4 (the rest, and the procedure: :mod:`benchctl.report.answers`),
over the comparisons the campaign recorded. Pure: the standard library and the core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchctl.analysis.effects import (
    ABS,
    COUNT,
    SHARE,
    Compared,
    Figure,
    Point,
    effects,
    from_estimate,
    summarize,
)
from benchctl.analysis.verdicts import (
    INCONCLUSIVE,
    MIN_REPEATS,
    Sample,
    curvature_se,
    fit_curve,
    fit_line,
    mean_interval,
    slope_se,
)
from benchctl.report.data import fmt_value, num
from benchctl.report.evidence import (
    BASELINE,
    NOT_MEASURED,
    TREATMENT,
    UNVERIFIED,
    Answer,
    Evidence,
    Pair,
    Shown,
    by_input,
    duration,
    failed_goodput,
    finish,
    fnum,
    input_label,
    judge,
    method_text,
    not_measured,
    observations,
    samples_text,
    shown,
    sweep_key,
    sweep_points,
)


def _method(settings: Any, declared: str, a: Answer, blocks: list[Any], design: str, extra: str = "") -> str:
    return method_text(settings, declared, a.family, blocks, design, extra)


def _repeats(rows: list[dict[str, Any]]) -> int:
    return len({r.get("repeat") for r in rows})


def _derived(rows: list[dict[str, Any]], name: str, fn: Callable[[dict[str, Any]], float | None]
             ) -> list[dict[str, Any]]:
    return [{**r, name: fn(r)} for r in rows]


# -------------------------------------------------------------------------------------------------- Q3

SLOPE = Figure("hit_rate_slope", "hit-rate slope", "", False, scale=ABS)
CURVATURE = Figure("hit_rate_curvature", "hit-rate curvature", "", False, scale=ABS)
BEND = 4.0  # a curvature c bends a response over ratios [0, 1] by c / 4 at the middle, from the line between its ends


def _mean(rows: list[dict[str, Any]], column: str) -> float | None:
    vals = [v for r in rows if (v := num(r.get(column))) is not None]
    return sum(vals) / len(vals) if vals else None


def _chain(rows: list[dict[str, Any]]) -> str:
    """"duplication -> achievable -> " of one ratio's steps (means over repeats), as far as the lake has them:
    the input's duplication, the best hit rate any cache could reach on the dataset (v_prefix_cache), and the
    first requests' rate when measured (~0: the step started cold)."""
    dup, ach = _mean(rows, "prefix_ratio_actual"), _mean(rows, "achievable_hit_rate")
    first = _mean(rows, "first_requests_hit_rate")
    return ((f"duplication {fnum(dup)} -> " if dup is not None else "")
            + (f"achievable {fnum(ach)} -> " if ach is not None else "")
            + (f"first requests {fnum(first)}, " if first is not None else ""))


def q3(ev: Evidence) -> Answer:
    a = Answer("q3", "question", "How does the input prefix duplication ratio relate to the server's real cache "
               "hit rate, in both modes? (duplication -> achievable -> measured)",
               "v_comparison_steps (v_step_cache), v_prefix_cache", "")
    pairs, left = ev.for_question("q3")
    if not pairs:
        return not_measured(a, "no valid comparison of an aggregated and a disaggregated experiment", left)
    parts, samples = [], []
    family: list[Any] = []
    units = []
    for pair in pairs:
        conf = pair.settings.confidence
        sides = {side: [r for r in ev.rows(pair, side, "prefix_cache") if num(r.get("cache_hit_rate")) is not None
                        and num(r.get("prefix_ratio")) is not None] for side in (BASELINE, TREATMENT)}
        if not sides[BASELINE] or not sides[TREATMENT]:
            parts.append(f"{pair.label}: {NOT_MEASURED} (no prefix-cache step with a server-measured hit rate on "
                         "both sides)")
            continue
        samples.append(samples_text(ev, pair, "prefix_cache"))
        a.excluded += ev.invalid_steps(pair, "prefix_cache")
        fits = {}
        curves = {}
        for side, rows in sides.items():
            exp = pair.experiment(side)
            pts = [(float(r["prefix_ratio"]), float(r["cache_hit_rate"])) for r in rows]
            fit = fit_line(pts, conf)
            fits[side] = fit
            curves[side] = fit_curve(pts)
            a.figures.append((f"{pair.label}: {exp} fit",
                              fit.text("duplication ratio", "hit rate") if fit else "fewer than 2 ratios: no fit"))
            for ratio in sorted({float(r["prefix_ratio"]) for r in rows}):
                s = Sample(tuple(o.value for o in observations(
                    [r for r in rows if float(r["prefix_ratio"]) == ratio], "cache_hit_rate")))
                iv = mean_interval(s, conf)
                a.figures.append((f"{pair.label}: {exp}, ratio {fmt_value(ratio)}",
                                  _chain([r for r in rows if float(r["prefix_ratio"]) == ratio])
                                  + f"measured hit rate {fnum(s.mean)}" + (
                                      f", {conf:.0%} CI [{fnum(iv.low)}, {fnum(iv.high)}] (descriptive)" if iv
                                      else " (one repeat: no interval)")))
        fb, ft = fits[BASELINE], fits[TREATMENT]
        if fb is None or ft is None:
            parts.append(f"{pair.label}: {INCONCLUSIVE} (fewer than two duplication ratios on a side: no fit)")
            continue
        nb, nt = _repeats(sides[BASELINE]), _repeats(sides[TREATMENT])
        se_df = slope_se(fb, ft)
        slope = Figure(SLOPE.column, SLOPE.label, "", False, scale=ABS,
                       threshold=pair.settings.practical_threshold_pct / 100.0)
        c = from_estimate(slope, pair.label, Sample((fb.slope,) * nb), Sample((ft.slope,) * nt), ft.slope - fb.slope,
                          se_df[0] if se_df else None, se_df[1] if se_df else 1.0,
                          pair.settings)
        # the shape, not only the line between the ends: the curvature of each side's quadratic (three ratios or more)
        cb, ct = curves[BASELINE], curves[TREATMENT]
        bend: Compared | None = None
        if cb is not None and ct is not None:
            cse = curvature_se(cb, ct)
            curv = Figure(CURVATURE.column, CURVATURE.label, "", False, scale=ABS,
                          threshold=BEND * pair.settings.practical_threshold_pct / 100.0)
            bend = from_estimate(curv, pair.label, Sample((cb.curvature,) * nb), Sample((ct.curvature,) * nt),
                                 ct.curvature - cb.curvature, cse[0] if cse else None, cse[1] if cse else 1.0,
                                 pair.settings)
        tests = [c] + ([bend] if bend is not None else [])
        for t in tests:
            if nb < MIN_REPEATS or nt < MIN_REPEATS:
                t.reason = "one repeat per side" if nb == nt == 1 else \
                    f"{nb} / {nt} repeats: at least {MIN_REPEATS} per side needed"
                t.p = None
        (family if pair.verified else []).extend(tests)
        units.append((pair, fb, ft, c, bend, cb, ct))
    settings = judge(a, pairs, family, [t for u in units if not u[0].verified for t in (u[3], u[4]) if t is not None])
    for pair, fb, ft, c, bend, cb, ct in units:
        a.effects.append(Shown(pair.label, "slope of hit rate over duplication ratio", c, pair))
        head = "" if pair.verified else f"{UNVERIFIED}; "
        shape = ""
        if bend is not None and cb is not None and ct is not None:
            a.effects.append(Shown(pair.label, "curvature of hit rate over duplication ratio", bend, pair))
            shape = (f"; {pair.baseline} {cb.text()}, {pair.treatment} {ct.text()}; the treatment's curvature minus the "
                     f"baseline's (a bend of a quarter of it at the middle ratio): {bend.text()}")
        else:
            shape = "; curvature not tested (fewer than three duplication ratios on a side)"
        parts.append(f"{pair.label}: {head}{pair.baseline} {fb.text('duplication ratio', 'hit rate')}; {pair.treatment} "
                     f"{ft.text('duplication ratio', 'hit rate')}; the treatment's slope minus the baseline's: {c.text()}"
                     + shape)
    if units:
        a.method = _method(settings, "the difference of the two modes' slopes of hit rate over duplication ratio "
                           "(least squares over every valid step, ratios x repeats) and, with three ratios or more, of "
                           "their curvatures (a quadratic's, so that a response bending between its ends is seen), two "
                           "tests per comparison", a, [],
                           "", f"a slope difference is directional beyond +/-{settings.practical_threshold_pct / 100:g} "
                           "(hit rate per unit of duplication), a curvature difference beyond "
                           f"+/-{BEND * settings.practical_threshold_pct / 100:g} (a bend of "
                           f"{settings.practical_threshold_pct:g} percentage points at the middle ratio)")
    return finish(a, parts, left, samples, decided=any(t.directional for t in family))


# -------------------------------------------------------------------------------------------------- H2

RECOMPUTED = Figure("recomputed", "recomputed share of input tokens", "", True, scale=SHARE)
PREEMPTIONS = Figure("preemptions", "preemptions", "", True, scale=COUNT)


def _feature(pair: Pair, ev: Evidence) -> str:
    def val(side: str, col: str) -> str:
        got = {fmt_value(r.get(col)) for r in ev.rows(pair, side)}
        return ", ".join(sorted(got)) or "?"

    if "router" in pair.differs:
        return f"router {val(BASELINE, 'router')} -> {val(TREATMENT, 'router')}"
    return f"kv_offload {val(BASELINE, 'kv_offload')} -> {val(TREATMENT, 'kv_offload')}"


def _miss(r: dict[str, Any]) -> float | None:
    h = num(r.get("cache_hit_rate"))
    return None if h is None else 1.0 - h


def h2(ev: Evidence) -> Answer:
    a = Answer("h2", "hypothesis", "Multi-turn: routing and offload may reduce recomputation (the real hit/miss and "
               "preemptions, with and without the feature)", "v_comparison_steps (v_step_cache), v_multi_turn", "")
    pairs, left = ev.for_question("h2")
    if not pairs:
        return not_measured(a, "no comparison that changes only the router or only kv_offload (a feature-ladder rung, "
                               "or spec comparisons: with question h2)", left)
    parts, samples = [], []
    family: list[Any] = []
    shown_only: list[Compared] = []
    units = []
    for pair in pairs:
        pts = ev.points(pair, "multi_turn", lambda r: (r.get("workload"), r.get("variant")))
        feature = _feature(pair, ev)
        if not pts:
            parts.append(f"{pair.label} ({feature}): {NOT_MEASURED} (no valid multi-turn step on both sides)")
            continue
        samples.append(samples_text(ev, pair, "multi_turn"))
        a.excluded += ev.invalid_steps(pair, "multi_turn")
        where = [f"{wl} {variant}" for wl, variant in pts]
        rec = effects(RECOMPUTED, [Point(w, None, observations(_derived(s[BASELINE], "recomputed", _miss), "recomputed"),
                                         observations(_derived(s[TREATMENT], "recomputed", _miss), "recomputed"))
                                   for w, s in zip(where, pts.values(), strict=True)], pair.settings)
        pre = effects(PREEMPTIONS, [Point(w, None, observations(s[BASELINE], "preemptions"),
                                          observations(s[TREATMENT], "preemptions"))
                                    for w, s in zip(where, pts.values(), strict=True)], pair.settings, primary=False)
        (family if pair.verified else shown_only).extend(c for c in rec.effects if shown(c))
        shown_only.extend(pre.effects)
        units.append((pair, feature, rec, pre))
    settings = judge(a, pairs, family, shown_only)
    design = ""
    for pair, feature, rec, pre in units:
        design = ev.design(pair, [rec])
        per = [(c.where, c) for c in rec.effects if shown(c)]
        for c, p in zip(rec.effects, pre.effects, strict=True):
            a.effects += [Shown(pair.label, c.where, x, pair) for x in (c, p) if x is c or shown(x)]
        if not per:
            parts.append(f"{pair.label} ({feature}): {NOT_MEASURED} (no server-measured hit rate on its multi-turn "
                         "steps)")
            continue
        head = "" if pair.verified else f"{UNVERIFIED}; "
        parts.append(f"{pair.label} ({feature}): {head}recomputation {summarize(per)}")
    a.method = _method(settings, "the recomputed share of input tokens (1 - the server's cache hit rate) per "
                       "multi-turn step; preemptions descriptive", a, [u[2] for u in units], design,
                       f"shares judged in percentage points (+/-{settings.practical_threshold_pct:g} pp)")
    return finish(a, parts, left, samples, decided=any(t.directional for t in family))


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
    parts: list[str] = []
    samples: list[str] = []
    family: list[Any] = []
    shown_only: list[Compared] = []
    units = []

    def gauges(rows: list[dict[str, Any]], col: str) -> list[dict[str, Any]]:
        return [{**r, col: (stage.get((r.get("experiment"), r.get("step_id"))) or {}).get(col)} for r in rows]

    def said(rows: list[dict[str, Any]], col: str, unit: str = "") -> str:
        s = Sample(tuple(o.value for o in observations(gauges(rows, col), col)))
        return fnum(s.mean, unit) if s.n else NOT_MEASURED

    for pair in pairs:
        pts = sweep_points(ev, pair, a, parts, samples, valid=True)
        if pts is None:
            continue
        queue = Figure("stage_waiting", "waiting: decode - prefill", "requests", True, scale=ABS,
                       threshold=pair.settings.queue_threshold)
        attain = Figure("goodput_ratio", "SLO attainment", "", False, scale=SHARE)
        for ikey, keys in by_input(pts).items():
            top = sorted(keys, key=lambda k: float(k[3]))[-2:]  # the highest loads
            # the two stages of the same steps: paired per step (prefill as the baseline side)
            q = effects(queue, [Point(f"c={fmt_value(k[3])}", float(k[3]),
                                      observations(gauges(pts[k][TREATMENT], PREFILL_WAITING), PREFILL_WAITING),
                                      observations(gauges(pts[k][TREATMENT], "decode_waiting_avg"),
                                                   "decode_waiting_avg")) for k in top], pair.settings)
            att = effects(attain, [Point(f"c={fmt_value(k[3])}", float(k[3]),
                                         observations(pts[k][BASELINE], "goodput_ratio"),
                                         observations(pts[k][TREATMENT], "goodput_ratio")) for k in top],
                          pair.settings, primary=False)
            if has_prefill:
                (family if pair.verified else shown_only).extend(c for c in q.effects if shown(c))
            shown_only.extend(att.effects)
            units.append((pair, ikey, top, pts, q, att))
    settings = judge(a, pairs, family, shown_only)
    design = ""
    for pair, ikey, top, pts, q, att in units:
        design = ev.design(pair, [q])
        told = []
        for k, c, at in zip(top, q.effects, att.effects, strict=True):
            t, b = pts[k][TREATMENT], pts[k][BASELINE]
            where = f"c={fmt_value(k[3])}"
            line = (f"{pair.treatment} waiting: prefill {said(t, PREFILL_WAITING)}, decode {said(t, 'decode_waiting_avg')}; "
                    f"{pair.baseline} (aggregated) waiting {said(b, 'worker_waiting_avg')}; SLO attainment {at.text()}; "
                    f"GPU util prefill {said(t, 'gpu_util_prefill_avg_pct', '%')}, decode "
                    f"{said(t, 'gpu_util_decode_avg_pct', '%')}")
            if shown(c):
                who = {"higher": "decode queues deeper", "lower": "prefill queues deeper"}.get(c.outcome, "")
                told.append(f"{where}: {who or c.outcome} ({c.delta_text()}" + ("" if who else f"; {c.reason}") + ")")
                line += f"; decode - prefill waiting (paired per step) {c.text()}"
            else:
                told.append(f"{where}: decode waiting {said(t, 'decode_waiting_avg')} vs aggregated "
                            f"{said(b, 'worker_waiting_avg')}")
            a.figures.append((f"{pair.label}, {input_label(ikey)}, {where}", line))
        head = "" if pair.verified else f"{UNVERIFIED}; "
        parts.append(f"{pair.label}, {input_label(ikey)}: {head}" + "; ".join(told))
    if not has_prefill:
        a.verdict = (f"{NOT_MEASURED}: the prefill stage's waiting queue (vllm:num_requests_waiting on the prefill "
                     f"workers: v_stage_queues.{PREFILL_WAITING}) is not in the lake, so the two stages' queues cannot "
                     "be compared; " + " | ".join(parts))
        a.status = NOT_MEASURED
        a.excluded += left
        a.samples = " | ".join(samples)
        return a
    a.method = _method(settings, "the decode minus the prefill stage's time-averaged waiting requests at the two "
                       "highest loads of each input length, paired per step (the two stages of the same step)", a,
                       [u[4] for u in units], design,
                       f"a queue difference is directional beyond +/-{settings.queue_threshold:g} requests "
                       "(comparison.queue_threshold)")
    return finish(a, parts, left, samples, decided=any(t.directional for t in family))


# -------------------------------------------------------------------------------------------------- H4

GOODPUT_PER_USD = Figure("goodput_per_usd_hour", "goodput per $/h", "req/s per $/h", False, scale=COUNT)


def _price_exposure(r: dict[str, Any]) -> float | None:
    """Goodput per $/h times this is the step's count of SLO-meeting requests."""
    d, price = duration(r), num(r.get("gpu_usd_per_hour"))
    return d * price if d is not None and price is not None else None


def _quality_gate(pair: Pair, qual: dict[Any, dict[str, Any]]) -> str:
    """Why the two sides' outputs are not comparable ("" when they are): a failed quality gate, or score
    intervals that do not overlap."""
    why = [f"{e}'s quality gate failed (score {fmt_value(qual.get(e, {}).get('quality_score'))}, threshold "
           f"{fmt_value(qual.get(e, {}).get('quality_min_score'))})"
           for e in (pair.baseline, pair.treatment) if str(qual.get(e, {}).get("quality_gate") or "") == "failed"]
    bounds = [(num(qual.get(e, {}).get("quality_score_low")), num(qual.get(e, {}).get("quality_score_high")))
              for e in (pair.baseline, pair.treatment)]
    if not why and all(lo is not None and hi is not None for lo, hi in bounds):
        (bl, bh), (tl, th) = bounds
        if bh < tl or th < bl:  # type: ignore[operator]
            why.append(f"their quality scores differ (95 % Wilson intervals [{fnum(bl)}, {fnum(bh)}] and "
                       f"[{fnum(tl)}, {fnum(th)}] do not overlap)")
    return "; ".join(why)


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
    parts, samples = [], []
    family: list[Any] = []
    shown_only: list[Compared] = []
    units = []
    for pair in pairs:
        pts = ev.points(pair, "concurrency_sweep", sweep_key, valid=None)
        for e in (pair.baseline, pair.treatment):
            ce, qe = cost.get(e) or {}, qual.get(e) or {}
            a.figures.append((e, f"GPUs used {fmt_value(ce.get('gpus'))} of {fmt_value(ce.get('gpus_allocated'))} "
                                 f"allocated ({fmt_value(ce.get('gpu_kinds'))}), "
                                 f"{fnum(num(ce.get('gpu_usd_per_hour')), '$/h')}; quality score "
                                 f"{fmt_value(qe.get('quality_score')) or NOT_MEASURED} (gate "
                                 f"{fmt_value(qe.get('quality_gate')) or 'none'})"))
        block = effects(GOODPUT_PER_USD, [
            Point(f"ISL {fmt_value(k[1])} c={fmt_value(k[3])}", float(k[3]),
                  observations(s[BASELINE], GOODPUT_PER_USD.column, exposure=_price_exposure, default=failed_goodput),
                  observations(s[TREATMENT], GOODPUT_PER_USD.column, exposure=_price_exposure, default=failed_goodput))
            for k, s in pts.items()], pair.settings)
        per = [c for c in block.effects if shown(c)]
        if not per:
            parts.append(f"{pair.label}: {NOT_MEASURED} (no concurrency-sweep step with goodput and a price on both "
                         "sides: the spec sets no SLO, or a pool is unpriced)")
            continue
        gate = _quality_gate(pair, qual)
        samples.append(samples_text(ev, pair, "concurrency_sweep"))
        (family if pair.verified and not gate else shown_only).extend(per)
        units.append((pair, block, gate, pts))
    settings = judge(a, pairs, family, shown_only)
    design = ""
    for pair, block, gate, _ in units:
        design = ev.design(pair, [block])
        per_load = [(c.where, c) for c in block.effects if shown(c)]
        a.effects += [Shown(pair.label, c.where, c, pair) for c in block.effects if shown(c)]
        if gate:
            parts.append(f"{pair.label}: not comparable ({gate}): goodput per $/h shown, not judged")
        elif not pair.verified:
            parts.append(f"{pair.label}: {UNVERIFIED}; SLO-meeting requests/s per $/h {summarize(per_load)}")
        else:
            parts.append(f"{pair.label}: SLO-meeting requests/s per $/h {summarize(per_load)} (higher = the treatment buys "
                         "more goodput per dollar-hour)")
    a.method = _method(settings, "SLO-meeting requests/s per $/h of the experiment's allocated nodes at each load "
                       "(every attempted step: a failure meets no SLO)", a, [u[1] for u in units], design,
                       "not comparable when either side fails its quality gate or the two quality intervals do not "
                       "overlap")
    return finish(a, parts, left, samples, decided=any(t.directional for t in family))


__all__ = ["h2", "h3", "h4", "q3"]
