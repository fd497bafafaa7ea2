"""The report's "Answers" section: the plan's four questions and four hypotheses, each judged over the
comparisons the campaign recorded (``benchctl.comparisons``), with ``benchctl.verdicts``' rules: every
compared figure with its interval over repeats (or why it has none), a direction only where the evidence
carries one, otherwise "inconclusive" and why; "not measured" where no comparison can answer it. What was
left out (invalid steps, experiments whose transfer backend is not the spec's) is named.
Pure: the standard library and the core.
"""

from __future__ import annotations

from typing import Any

from benchctl.report.answers_more import h2, h3, h4, q3
from benchctl.report.data import ReportData, fmt_value, num
from benchctl.report.evidence import (
    BASELINE,
    DIRECTIONAL,
    NOT_MEASURED,
    TREATMENT,
    Answer,
    Evidence,
    Pair,
    by_input,
    evidence_of,
    finish,
    fnum,
    input_label,
    not_measured,
    per_repeat,
    samples_text,
    sweep_points,
)
from benchctl.verdicts import (
    INCONCLUSIVE,
    Compared,
    Interval,
    Sample,
    compare,
    crossovers,
    mean_interval,
    slo_regime,
    summarize,
)

# -------------------------------------------------------------------------------------------------- Q1

Q1_FIGURES = (  # (column, label, unit, lower is better, tail percentile, in the verdict)
    ("ttft_p50_ms", "TTFT p50", "ms", True, False, True),
    ("ttft_p99_ms", "TTFT p99", "ms", True, True, False),
    ("itl_p50_ms", "ITL p50", "ms", True, False, True),
    ("itl_p99_ms", "ITL p99", "ms", True, True, False),
    ("output_tokens_per_s", "output tokens/s", "tok/s", False, False, True),
    ("goodput_per_s", "goodput (SLO-meeting requests/s)", "req/s", False, False, True),
    ("usd_per_1m_output_tokens", "$/1M output tokens", "$", True, False, True),
)
COST_BASIS = ("$: the experiment's allocated nodes x their price over the step's throughput (steady state at that "
              "load; cold start not charged, see v_cost_efficiency)")


def _q1(ev: Evidence) -> Answer:
    a = Answer("q1", "question", "At the same GPU total, how does disaggregation change TTFT, ITL and successful "
               "throughput, from light load to past the SLO?", "v_comparison_steps, v_concurrency_sweep", "")
    pairs, left = ev.for_question("q1")
    if not pairs:
        return not_measured(a, "no valid comparison of an aggregated and a disaggregated experiment at the same GPU "
                                "total, router and offload (spec comparisons: with question q1, or the default "
                                "pairing)", left)
    parts: list[str] = []
    samples: list[str] = []
    compared: list[Compared] = []
    for pair in pairs:
        a.method = pair.settings.describe() + "; " + COST_BASIS
        pts = sweep_points(ev, pair, a, parts, samples)
        if pts is None:
            continue
        for ikey, keys in by_input(pts).items():
            per_fig: dict[str, list[tuple[float, Compared]]] = {f[0]: [] for f in Q1_FIGURES}
            for key in keys:
                b, t = pts[key][BASELINE], pts[key][TREATMENT]
                row = []
                for col, label, unit, lower, tail, _ in Q1_FIGURES:
                    c = compare(label, unit, per_repeat(b, col), per_repeat(t, col), pair.settings,
                                lower_is_better=lower, tail=tail)
                    if c.base.n and c.treat.n:
                        per_fig[col].append((float(key[3]), c))
                        compared.append(c)
                        row.append(f"{label} {c.text()}")
                a.figures.append((f"{pair.label}, {input_label(ikey)}, c={fmt_value(key[3])}", "; ".join(row) or (
                    f"{NOT_MEASURED} on both sides: {len(b)} valid step(s) of {pair.baseline}, {len(t)} of "
                    f"{pair.treatment}")))
            text = [f"{label}: {summarize([(f'c={c:g}', x) for c, x in per_fig[col]])}"
                    for col, label, _, _, _, shown in Q1_FIGURES if shown and per_fig[col]]
            regimes = []
            for side in (BASELINE, TREATMENT):
                att = {float(k[3]): per_repeat(pts[k][side], "goodput_ratio") for k in keys}
                reg = slo_regime({k: s for k, s in att.items() if s.n}, pair.settings.slo_attainment)
                regimes.append(f"{pair.experiment(side)} {reg.text() if reg else NOT_MEASURED + ' (no SLO set)'}")
            cross = [f"{label} between c={lo:g} ({pair.experiment(wa)} better) and c={hi:g} ({pair.experiment(wb)} "
                     f"better)" for col, label, *_ in Q1_FIGURES for lo, hi, wa, wb in crossovers(per_fig[col])]
            parts.append(f"{pair.label}, {input_label(ikey)}: " + ". ".join(text)
                         + f". Highest load within the SLO at >= {pair.settings.slo_attainment:.0%} attainment: "
                         + "; ".join(regimes) + ". Crossover: " + ("; ".join(cross) if cross else
                                                                  "none (no directional winner changes with the load)"))
    return finish(a, parts, compared, left, samples)


# -------------------------------------------------------------------------------------------------- Q4/H1


def _transfer(rows: list[dict[str, Any]], confidence: float) -> tuple[Sample, Interval | None, str]:
    s = per_repeat(rows, "kv_transfer_ms")
    src = ", ".join(sorted({str(r.get("kv_transfer_source")) for r in rows if r.get("kv_transfer_source")}))
    return s, mean_interval(s, confidence), src


def _explains(gap: Compared, xfer: Sample, xfer_iv: Interval | None, where: str) -> tuple[str, bool]:
    """The Q4 verdict at one load from the TTFT gap (treatment - baseline) and the transfer time, and whether it
    is a conclusion (False: inconclusive)."""
    xs = (f"{fnum(xfer.mean, 'ms')}" + (f" [{fnum(xfer_iv.low)}, {fnum(xfer_iv.high)}]" if xfer_iv else " (no interval)")
          if xfer.n else "not measured")
    if not gap.directional:
        return f"{INCONCLUSIVE} at {where} ({gap.reason}): TTFT p50 {gap.delta_text()}; KV transfer {xs}", False
    if gap.better == TREATMENT:
        return (f"no at {where}: disaggregated TTFT p50 is lower ({gap.delta_text()}), KV transfer ({xs}) included",
                True)
    giv = gap.interval
    if xfer.mean is None or giv is None:
        return (f"{INCONCLUSIVE} at {where}: disaggregated TTFT p50 is higher ({gap.delta_text()}), but the KV-transfer "
                "time is not measured, so whether it explains the gap cannot be said"), False
    t_iv = xfer_iv or Interval(xfer.mean, xfer.mean, xfer.mean, giv.confidence, 0)
    if t_iv.overlaps(giv):
        return (f"yes at {where}: disaggregated TTFT p50 is higher ({gap.delta_text()}) and the KV transfer ({xs}) "
                "explains that gap within its interval"), True
    if t_iv.high < giv.low:
        share = xfer.mean / gap.diff * 100 if gap.diff else None
        return (f"not the transfer at {where}: disaggregated TTFT p50 is higher ({gap.delta_text()}) but the KV "
                f"transfer ({xs}) explains only about {fnum(share, '%')} of it: the rest is scheduling and "
                "queueing"), True
    return f"yes at {where}: the KV transfer ({xs}) is at least the whole TTFT p50 gap ({gap.delta_text()})", True


def _q4(ev: Evidence, key: str = "q4", kind: str = "question") -> Answer:
    title = ("Does the NIXL transfer overhead cancel the benefit of disaggregation, even for short sequences?"
             if kind == "question" else
             "Low load, short inputs: disaggregation may add transfer and scheduling cost (TTFT, ITL, KV-transfer time)")
    a = Answer(key, kind, title, "v_comparison_steps (v_concurrency_sweep, v_kv_transfer), v_sequence_distribution", "")
    pairs, left = ev.for_question(key)
    if not pairs:
        return not_measured(a, "no valid comparison of an aggregated and a disaggregated experiment with the same "
                                "GPU total, router and offload", left)
    parts: list[str] = []
    samples: list[str] = []
    gaps: list[Compared] = []
    decided = False
    for pair in pairs:
        a.method = pair.settings.describe() + "; the transfer explains the gap when their intervals overlap"
        pts = sweep_points(ev, pair, a, parts, samples)
        if pts is None:
            continue
        for ikey, keys in by_input(pts).items():
            for i, k in enumerate(sorted(keys, key=lambda k: float(k[3]))):
                b, t = pts[k][BASELINE], pts[k][TREATMENT]
                gap = compare("TTFT p50", "ms", per_repeat(b, "ttft_p50_ms"), per_repeat(t, "ttft_p50_ms"),
                              pair.settings, lower_is_better=True)
                itl = compare("ITL p50", "ms", per_repeat(b, "itl_p50_ms"), per_repeat(t, "itl_p50_ms"), pair.settings,
                              lower_is_better=True)
                xfer, xiv, src = _transfer(t, pair.settings.confidence)
                gaps.append(gap)
                where = f"c={fmt_value(k[3])}"
                a.figures.append((f"{pair.label}, {input_label(ikey)}, {where}",
                                  f"TTFT p50 {gap.text()}; ITL p50 {itl.text()}; KV transfer "
                                  + (f"{fnum(xfer.mean, 'ms')}" + (f" [{fnum(xiv.low)}, {fnum(xiv.high)}]" if xiv else "")
                                     + f" ({src})" if xfer.n else "not measured")))
                if i == 0:  # the lightest load: where the overhead matters most
                    verdict, conclusive = _explains(gap, xfer, xiv, f"the lightest load ({where})")
                    decided = decided or conclusive or (key == "h1" and itl.directional)
                    if key == "h1":
                        verdict += f"; ITL p50 {itl.text()}"
                    parts.append(f"{pair.label}, {input_label(ikey)}: {verdict}")
        a.figures += _short_buckets(ev, pair)
    return finish(a, parts, gaps, left, samples, status=DIRECTIONAL if decided else INCONCLUSIVE)


def _short_buckets(ev: Evidence, pair: Pair) -> list[tuple[str, str]]:
    """The shortest input bucket of each sequence distribution, both sides (pooled percentiles: no interval)."""
    rows = [r for r in ev.view("v_sequence_distribution").rows if r.get("isl_bucket") not in (None, "all")
            and r.get("experiment") in (pair.baseline, pair.treatment)]
    out = []
    for dist in sorted({str(r.get("distribution")) for r in rows}):
        drows = [r for r in rows if str(r.get("distribution")) == dist]
        lo = min(drows, key=lambda r: int(str(r.get("isl_bucket")).split("-")[0]))["isl_bucket"]
        got = {r.get("experiment"): r for r in drows if r.get("isl_bucket") == lo}
        if len(got) == 2:
            out.append((f"{pair.label}, {dist} shortest inputs ({lo} tokens)",
                        f"TTFT p50 {pair.baseline} {fnum(num(got[pair.baseline].get('ttft_p50_ms')), 'ms')}, "
                        f"{pair.treatment} {fnum(num(got[pair.treatment].get('ttft_p50_ms')), 'ms')} (requests pooled "
                        f"over repeats: {fmt_value(got[pair.baseline].get('n_requests'))} / "
                        f"{fmt_value(got[pair.treatment].get('n_requests'))}; no interval)"))
    return out


# -------------------------------------------------------------------------------------------------- Q2


def _q2(ev: Evidence) -> Answer:
    a = Answer("q2", "question", "Does KV-cache offload (GPU -> CPU -> SSD) save real money (e.g. L40S decode "
               "workers)?", "v_comparison_steps (v_step_cache, costs), v_feature_ladder", "")
    pairs, left = ev.for_question("q2")
    if not pairs:
        return not_measured(a, "the campaign has no comparison that changes only kv_offload (a feature-ladder rung, "
                                "or spec comparisons: with question q2)", left)
    parts, compared, samples = [], [], []
    for pair in pairs:
        a.method = pair.settings.describe() + "; " + COST_BASIS
        pts: dict[Any, dict[str, list[dict[str, Any]]]] = {}
        for kind in ("concurrency_sweep", "multi_turn", "sequence_distribution", "prefix_cache"):
            pts.update(ev.points(pair, kind, lambda r: (r.get("workload"), r.get("variant"))))
        if not pts:
            parts.append(f"{pair.label}: {NOT_MEASURED} (no valid step on both sides)")
            continue
        samples.append(samples_text(ev, pair, "concurrency_sweep"))
        a.excluded += ev.invalid_steps(pair)
        per: list[tuple[str, Compared]] = []
        for (wl, variant), sides in pts.items():
            c = compare("$/1M output tokens", "$", per_repeat(sides[BASELINE], "usd_per_1m_output_tokens"),
                        per_repeat(sides[TREATMENT], "usd_per_1m_output_tokens"), pair.settings, lower_is_better=True)
            if c.base.n and c.treat.n:
                per.append((f"{wl} {variant}", c))
                a.figures.append((f"{pair.label}, {wl} {variant}", f"$/1M output tokens {c.text()}"))
        used = [num(r.get("offload_blocks")) for r in ev.rows(pair, TREATMENT)]
        known = [u for u in used if u is not None]
        if not known:
            use, usable = ("offload use not measured (no kvbm_offload_blocks_* series on the treatment's steps): no "
                           "conclusion before offload is counted"), False
        elif sum(known) == 0:
            use, usable = f"KVBM offloaded no block on {pair.treatment}: the working set fits the GPU KV cache", False
        else:
            use, usable = f"KVBM offloaded {fmt_value(sum(known))} blocks on {pair.treatment}", True
        a.figures.append((f"{pair.label}, offload use", use))
        if usable:
            compared += [c for _, c in per]
            parts.append(f"{pair.label}: $/1M output tokens {summarize(per)}; {use}")
        else:
            parts.append(f"{pair.label}: {INCONCLUSIVE}: {use}; $/1M output tokens {summarize(per)}")
    return finish(a, parts, compared, left, samples)


# -------------------------------------------------------------------------------------------------- answers


def answers(data: ReportData) -> list[Answer]:
    """The plan's questions (q1..q4) and hypotheses (h1..h4), in its order."""
    ev = evidence_of(data)
    return [_q1(ev), _q2(ev), q3(ev), _q4(ev), _q4(ev, "h1", "hypothesis"), h2(ev), h3(ev), h4(ev)]
