"""The report's "Answers" section: the plan's four questions and four hypotheses, each judged as one statistical
procedure over the comparisons the campaign recorded (``benchctl.spec.comparisons``):

* each answer declares its primary figures before the data (:data:`Q1_PRIMARY`, ...); every point of them is
  one test of the answer's family, the rest are descriptive (shown with an unadjusted interval, no verdict);
* the family is judged by Holm's step-down at family-wise alpha = 1 - ``comparison.confidence``
  (:func:`benchctl.analysis.effects.adjust`): the answer's status is directional only when a test its text shows is;
* failures are measurements: goodput and SLO attainment count every attempted step, latency percentiles only
  valid ones; an answer built on a comparison whose transfer path is unverified is inconclusive;
* "not measured" where no comparison can answer; what was left out is named.
Pure: the standard library and the core.
"""

from __future__ import annotations

import math
from typing import Any

from benchctl.analysis.effects import (
    COUNT,
    Compared,
    Figure,
    Point,
    confidence_text,
    crossovers,
    effects,
    summarize,
)
from benchctl.analysis.inference import fieller
from benchctl.analysis.regimes import RegimeComparison
from benchctl.analysis.verdicts import HIGHER, INCONCLUSIVE, LOWER, Sample
from benchctl.report.answers_more import h2, h3, h4, q3
from benchctl.report.data import ReportData, fmt_value, num
from benchctl.report.evidence import (
    BASELINE,
    NOT_MEASURED,
    TREATMENT,
    UNVERIFIED,
    Answer,
    Evidence,
    Shown,
    attainment,
    by_input,
    duration,
    evidence_of,
    failed_goodput,
    finish,
    fnum,
    has_slo,
    input_label,
    judge,
    method_text,
    not_measured,
    observations,
    samples_text,
    shown,
    sweep_key,
    sweep_points,
    valid_only,
)

ANSWERS_INTRO = (
    "The plan's four questions and four hypotheses, each judged as one procedure over the comparisons the campaign "
    "recorded: each answer's primary figures were declared before the data and every point of them is a test of the "
    "answer's family, judged by Holm's step-down so that the chance that any direction an answer states is false is "
    "at most 1 - comparison.confidence; a direction only where the interval (at the level its step used) clears the "
    "practical threshold with at least three repeats per side, otherwise \"inconclusive\" and why; other figures are "
    "descriptive (an unadjusted interval, no verdict); \"not measured\" where no comparison could answer it; what was "
    "left out is named. Each answer's method line gives its figures, family, variances and design.")

# -------------------------------------------------------------------------------------------------- Q1

TTFT = Figure("ttft_p50_ms", "TTFT p50", "ms", True)
ITL = Figure("itl_p50_ms", "ITL p50", "ms", True)
GOODPUT = Figure("goodput_per_s", "goodput (SLO-meeting requests/s)", "req/s", False, scale=COUNT)
# Q1's primary figures: TTFT p50 at each load (where disaggregation is expected to act: prefill apart from decode)
# and, per input length, the two modes' SLO limits (goodput capacity: the highest load whose attainment, requests
# meeting the TTFT AND the ITL bound, is shown at the target; ITL's effect on users is judged through it). Goodput
# per load is descriptive: below the limits both modes serve the offered load, and a count's variance moves with
# its level, so with 2-5 repeats a per-load test has no power and would only widen the family. ITL and the rest
# are descriptive too. Fewer primary tests keep the family's power.
Q1_PRIMARY = (TTFT,)
Q1_DESCRIPTIVE = (
    GOODPUT,
    ITL,
    Figure("ttft_p99_ms", "TTFT p99", "ms", True, tail=True),
    Figure("itl_p99_ms", "ITL p99", "ms", True, tail=True),
    Figure("output_tokens_per_s", "output tokens/s", "tok/s", False),
    Figure("usd_per_1m_output_tokens", "$/1M output tokens", "$", True),  # tok/s at a fixed price: not tested apart
)
EVERY_STEP = frozenset({GOODPUT.column})  # figures over every attempted step: a failure is a miss
COST_BASIS = ("$: the experiment's allocated nodes x their price over the step's throughput (steady state at that "
              "load; cold start not charged, see v_cost_efficiency)")


def sweep_blocks(pair: Any, pts: dict[Any, dict[str, list[dict[str, Any]]]], figures: tuple[Figure, ...],
                 primary: tuple[Figure, ...]) -> dict[str, Any]:
    """Every figure's effects over every load of every input length of the pair's sweep (one block per figure, so
    that its variances are moderated over the whole sweep; each point's ``group`` is its input), latency figures
    from valid steps, the :data:`EVERY_STEP` ones from every attempted step."""
    out = {}
    for fig in figures:
        every = fig.column in EVERY_STEP
        pick = (lambda rows: rows) if every else valid_only
        exposure = duration if fig.scale == COUNT else None
        default = failed_goodput if every else None
        points = [Point(f"c={fmt_value(k[3])}", float(k[3]),
                        observations(pick(pts[k][BASELINE]), fig.column, exposure=exposure, default=default),
                        observations(pick(pts[k][TREATMENT]), fig.column, exposure=exposure, default=default),
                        group=ikey)
                  for ikey, keys in by_input(pts).items() for k in keys]
        out[fig.column] = effects(fig, points, pair.settings, primary=fig in primary)
    return out


def of_input(block: Any, ikey: Any) -> list[Compared]:
    """A block's effects at the loads of one input length, lightest first."""
    return [c for c in block.effects if c.group == ikey]


def _regime_text(r: RegimeComparison, pair: Any, alpha: float) -> str:
    sides = []
    for i, side in enumerate((BASELINE, TREATMENT)):
        reg = r.regime(i, 1.0 - alpha / 2.0)
        sides.append(f"{pair.experiment(side)} {reg.text() if reg else NOT_MEASURED}")
    level = f" (bounds one-sided at {confidence_text(1.0 - (1.0 - (r.confidence or 1.0 - alpha)) / 2.0)})"
    if r.outcome == HIGHER:
        verdict = f"{pair.treatment}'s SLO limit is higher"
    elif r.outcome == LOWER:
        verdict = f"{pair.treatment}'s SLO limit is lower"
    else:
        verdict = f"{INCONCLUSIVE} ({r.reason or 'not judged'})"
    b, t = r.regime(0, 1.0 - alpha / 2.0), r.regime(1, 1.0 - alpha / 2.0)
    brackets = (f": {pair.baseline} {b.bracket()} vs {pair.treatment} {t.bracket()}" if b and t else "")
    return "; ".join(sides) + f". SLO limits compared{level}: {verdict}{brackets}"


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
    family: list[Any] = []
    shown_only: list[Compared] = []
    units = []
    for pair in pairs:
        pts = sweep_points(ev, pair, a, parts, samples)
        if pts is None:
            continue
        blocks = sweep_blocks(pair, pts, Q1_PRIMARY + Q1_DESCRIPTIVE, Q1_PRIMARY)
        for fig in Q1_PRIMARY:
            (family if pair.verified else shown_only).extend(c for c in blocks[fig.column].effects if shown(c))
        shown_only += [c for fig in Q1_DESCRIPTIVE for c in blocks[fig.column].effects]
        for ikey, keys in by_input(pts).items():
            rows = [r for k in keys for side in (BASELINE, TREATMENT) for r in pts[k][side]]
            regime = (RegimeComparison(input_label(ikey),
                                       tuple(attainment(pts[k][BASELINE], float(k[3])) for k in keys),
                                       tuple(attainment(pts[k][TREATMENT], float(k[3])) for k in keys),
                                       pair.settings.slo_attainment,
                                       spread_pct=pair.settings.deployment_spread_pct) if has_slo(rows) else None)
            if regime is not None and pair.verified and regime.p is not None:
                family.append(regime)
            if regime is not None:
                a.regimes.append((pair, regime))
            units.append((pair, ikey, keys, blocks, regime))
    settings = judge(a, pairs, family, shown_only)
    design = ""
    noted: set[tuple[str, str]] = set()
    for pair, ikey, keys, blocks, regime in units:
        design = ev.design(pair, list(blocks.values()))
        for k in keys:
            got = [c for fig in (*Q1_PRIMARY, *Q1_DESCRIPTIVE)
                   for c in of_input(blocks[fig.column], ikey) if c.load == float(k[3]) and tried(c)]
            a.effects += [Shown(f"{pair.label}, {input_label(ikey)}", f"c={fmt_value(k[3])}", c, pair) for c in got]
            if not got:
                a.figures.append((f"{pair.label}, {input_label(ikey)}, c={fmt_value(k[3])}", (
                    f"{NOT_MEASURED} on both sides: {len(pts_rows(ev, pair, k, BASELINE))} step(s) of {pair.baseline}, "
                    f"{len(pts_rows(ev, pair, k, TREATMENT))} of {pair.treatment}")))
        head = f"{pair.label}, {input_label(ikey)}: " + ("" if pair.verified else f"{UNVERIFIED}. ")
        if (paid := ev.allocation_note(pair)) and (pair.label, "allocation") not in noted:
            noted.add((pair.label, "allocation"))
            a.figures.append((f"{pair.label}, allocation", paid))
            head += f"({paid}) "
        text = [f"{fig.label}: {summarize([(c.where, c) for c in of_input(blocks[fig.column], ikey) if tried(c)])}"
                for fig in Q1_PRIMARY if any(shown(c) for c in of_input(blocks[fig.column], ikey))]
        regimes = (_regime_text(regime, pair, settings.alpha) if regime is not None
                   else f"SLO regime {NOT_MEASURED} (the spec sets no SLO)")
        cross = [f"{fig.label} between c={lo:g} ({pair.experiment(wa)} better) and c={hi:g} ({pair.experiment(wb)} "
                 f"better)" for fig in Q1_PRIMARY
                 for lo, hi, wa, wb in crossovers([(c.load or 0.0, c) for c in of_input(blocks[fig.column], ikey)])]
        parts.append(head + ". ".join(text) + ". " + regimes + ". Crossover: "
                     + ("; ".join(cross) if cross else "none (no directional winner changes with the load)")
                     + _searched(pts, keys, pair))
    a.method = method_text(settings, "TTFT p50 at each load (valid steps), and per input length the two sides' SLO "
                           "limits (goodput capacity, from every attempted step: a request counts only when it met "
                           "the TTFT and the ITL bound)", a.family,
                           list({id(b): b for *_, blocks, _ in units for f in Q1_PRIMARY
                                 if (b := blocks[f.column])}.values()), design, COST_BASIS)
    return finish(a, parts, left, samples, decided=any(t.directional for t in family))


def _searched(pts: Any, keys: list[Any], pair: Any) -> str:
    """Which loads of each side the SLO-edge search chose (from what that side measured before them), or ''."""
    out = []
    chose = []
    for side in (BASELINE, TREATMENT):
        loads = sorted({float(k[3]) for k in keys for r in pts[k][side] if r.get("search_probe") is not None})
        chose.append(loads)
        if loads:
            out.append(f"{pair.experiment(side)} at {', '.join(f'c={x:g}' for x in loads)}")
        else:
            out.append("")
    if not any(out):
        return ""
    chosen = "; ".join(x for x in out if x)
    how = ("the same loads on both sides" if chose[0] == chose[1] else
           "they differ between the sides, each bisecting toward its own edge")
    return f". Loads the SLO-edge search chose from each side's own measured attainment ({how}): {chosen}"


def tried(c: Compared) -> bool:
    """A point either side measured (one without the other still says why it is not compared)."""
    return bool(c.base.n or c.treat.n)


def pts_rows(ev: Evidence, pair: Any, key: Any, side: str) -> list[dict[str, Any]]:
    return [r for r in ev.rows(pair, side, "concurrency_sweep", valid=None) if sweep_key(r) == key]


# -------------------------------------------------------------------------------------------------- Q4/H1

XFER = Figure("kv_transfer_per_request_ms", "KV transfer per request", "ms", True)


def _share(gap: Compared, xfer: Sample, threshold: float) -> tuple[str, str]:
    """The KV transfer's share of a TTFT gap the treatment is shown to pay, with Fieller's interval at the gap's
    level: ("yes", ...) when the share's lower bound reaches ``threshold`` %, ("not the transfer", ...) when its
    upper bound is below it, else (INCONCLUSIVE, why)."""
    if xfer.mean is None:
        return INCONCLUSIVE, "but the KV-transfer time is not measured, so whether it explains the gap cannot be said"
    if xfer.n < 2:
        return INCONCLUSIVE, (f"but the KV transfer ({fnum(xfer.mean, 'ms')} per request) has one repeat: its share of "
                              "the gap has no interval")
    positive = [v for v in gap.base.values if v > 0]
    base_gm = math.exp(sum(math.log(v) for v in positive) / len(positive)) if positive else 0.0
    est, se, df = gap.estimate or 0.0, gap.se or 0.0, gap.df or 1.0
    gap_ms, gap_se = base_gm * math.expm1(est), base_gm * math.exp(est) * se  # the delta method from the log ratio
    x_se = (xfer.sd or 0.0) / math.sqrt(xfer.n)
    conf = gap.confidence or 0.95
    # the transfer's mean with its own degrees of freedom, the gap with the gap's: the gap is clear of zero here
    # exactly when its own interval (the one printed beside) is
    iv = fieller(xfer.mean, x_se, gap_ms, gap_se, float(xfer.n - 1) if x_se > 0 else df, conf, den_df=df)
    if iv is None or not gap_ms:
        return INCONCLUSIVE, (f"but the gap's {confidence_text(conf)} interval includes 0 on the ms scale: the "
                              "transfer's share of it has no bounded interval")
    lo, hi = 100.0 * iv[0], 100.0 * iv[1]
    said = (f"the KV transfer, {fnum(xfer.mean, 'ms')} per request, is {fnum(100.0 * xfer.mean / gap_ms, '%')} of "
            f"the gap ({fnum(gap_ms, 'ms')} per request; {confidence_text(conf)} CI [{fnum(lo)}, {fnum(hi)}] %, Fieller)")
    if lo >= threshold:
        return "yes", f"{said}: at least {threshold:g} %, so the transfer explains the gap"
    if hi < threshold:
        return "not the transfer", f"{said}: below {threshold:g} %, so the rest is scheduling and queueing"
    return INCONCLUSIVE, f"{said}: the interval straddles {threshold:g} %, so whether the transfer explains the gap is open"


def _q4(ev: Evidence, key: str = "q4", kind: str = "question") -> Answer:
    title = ("Does the NIXL transfer overhead cancel the benefit of disaggregation, even for short sequences?"
             if kind == "question" else
             "Low load, short inputs: disaggregation may add transfer and scheduling cost (TTFT, ITL, KV-transfer time)")
    a = Answer(key, kind, title, "v_comparison_steps (v_concurrency_sweep, v_kv_transfer), v_sequence_distribution", "")
    pairs, left = ev.for_question(key)
    if not pairs:
        return not_measured(a, "no valid comparison of an aggregated and a disaggregated experiment with the same "
                                "GPU total and kinds, router and offload", left)
    parts: list[str] = []
    samples: list[str] = []
    family: list[Any] = []
    shown_only: list[Compared] = []
    units = []
    primary = (TTFT, ITL) if key == "h1" else (TTFT,)
    for pair in pairs:
        pts = sweep_points(ev, pair, a, parts, samples, valid=True)
        if pts is None:
            continue
        blocks = sweep_blocks(pair, pts, (TTFT, ITL), primary)
        for ikey, keys in by_input(pts).items():
            lightest = float(keys[0][3])
            for fig in (TTFT, ITL):
                for c in of_input(blocks[fig.column], ikey):
                    target = family if fig in primary and c.load == lightest and pair.verified else shown_only
                    if shown(c):
                        target.append(c)
            xfer = Sample(tuple(o.value for o in observations(pts[keys[0]][TREATMENT], XFER.column)))
            src = ", ".join(sorted({str(r.get("kv_transfer_source")) for k in keys for r in pts[k][TREATMENT]
                                    if r.get("kv_transfer_source")}))
            units.append((pair, ikey, keys, blocks, xfer, src))
    settings = judge(a, pairs, family, shown_only)
    decided = False
    design = ""
    for pair, ikey, keys, blocks, xfer, src in units:
        design = ev.design(pair, list(blocks.values()))
        for k in keys:
            load = float(k[3])
            got = {fig.column: next((c for c in of_input(blocks[fig.column], ikey) if c.load == load), None)
                   for fig in (TTFT, ITL)}
            xs = Sample(tuple(o.value for o in observations(pts_rows_valid(ev, pair, k), XFER.column)))
            a.effects += [Shown(f"{pair.label}, {input_label(ikey)}", f"c={fmt_value(k[3])}", e, pair)
                          for fig in (TTFT, ITL) if (e := got[fig.column]) is not None and shown(e)]
            a.figures.append((f"{pair.label}, {input_label(ikey)}, c={fmt_value(k[3])}", "KV transfer per request "
                              + (f"{fnum(xs.mean, 'ms')} ({src})" if xs.n else NOT_MEASURED)))
        where = f"the lightest load (c={fmt_value(keys[0][3])})"
        gap = next((c for c in of_input(blocks[TTFT.column], ikey) if c.load == float(keys[0][3])), None)
        head = f"{pair.label}, {input_label(ikey)}: "
        if gap is None or not shown(gap):
            parts.append(head + f"{NOT_MEASURED} at {where}")
            continue
        if not pair.verified:
            verdict = f"{UNVERIFIED} at {where}: TTFT p50 {gap.delta_text()}"
        elif not gap.directional:
            verdict = f"{INCONCLUSIVE} at {where} ({gap.reason}): TTFT p50 {gap.delta_text()}"
        elif gap.better == TREATMENT:
            verdict = (f"no at {where}: disaggregated TTFT p50 is lower ({gap.delta_text()}), the KV transfer "
                       f"({fnum(xfer.mean, 'ms')} per request) included")
            decided = True
        else:
            word, said = _share(gap, xfer, pair.settings.transfer_share_pct)
            verdict = f"{word} at {where}: disaggregated TTFT p50 is higher ({gap.delta_text()}); {said}"
            decided = decided or word != INCONCLUSIVE
        if key == "h1":
            itl = next((c for c in of_input(blocks[ITL.column], ikey) if c.load == float(keys[0][3])), None)
            if itl is not None and shown(itl):
                verdict += f"; ITL p50 {itl.text()}"
                decided = decided or (itl.directional and pair.verified)
        parts.append(head + verdict)
    for pair in pairs:
        a.figures += _short_buckets(ev, pair)
    a.method = method_text(
        settings, "TTFT p50 at the lightest load of each input length" + (" and ITL p50 there" if key == "h1" else ""),
        a.family, list({id(b): b for _, _, _, blocks, _, _ in units for f in primary if (b := blocks[f.column])}.values()),
        design,
        f"the transfer explains a TTFT gap the disaggregated side is shown to pay only when the lower bound of its "
        f"share (the KV-transfer time each request paid over the gap per request, Fieller's interval at the gap's "
        f"level) reaches {settings.transfer_share_pct:g} % (comparison.transfer_share_pct); both sides on the same "
        "GPU kinds")
    return finish(a, parts, left, samples, decided=decided)


def pts_rows_valid(ev: Evidence, pair: Any, key: Any) -> list[dict[str, Any]]:
    return [r for r in pts_rows(ev, pair, key, TREATMENT) if r.get("valid")]


def _short_buckets(ev: Evidence, pair: Any) -> list[tuple[str, str]]:
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
                        f"{fmt_value(got[pair.treatment].get('n_requests'))}; descriptive, no interval)"))
    return out


# -------------------------------------------------------------------------------------------------- Q2

COST = Figure("usd_per_1m_output_tokens", "$/1M output tokens", "$", True)


def _q2(ev: Evidence) -> Answer:
    a = Answer("q2", "question", "Does KV-cache offload (GPU -> CPU -> SSD) save real money (e.g. L40S decode "
               "workers)?", "v_comparison_steps (v_step_cache, costs), v_feature_ladder", "")
    pairs, left = ev.for_question("q2")
    if not pairs:
        return not_measured(a, "the campaign has no comparison that changes only kv_offload (a feature-ladder rung, "
                                "or spec comparisons: with question q2)", left)
    parts, samples = [], []
    family: list[Any] = []
    shown_only: list[Compared] = []
    units = []
    for pair in pairs:
        pts: dict[Any, dict[str, list[dict[str, Any]]]] = {}
        for kind in ("concurrency_sweep", "multi_turn", "sequence_distribution", "prefix_cache"):
            pts.update(ev.points(pair, kind, lambda r: (r.get("workload"), r.get("variant"))))
        if not pts:
            parts.append(f"{pair.label}: {NOT_MEASURED} (no valid step on both sides)")
            continue
        samples.append(samples_text(ev, pair, "concurrency_sweep"))
        a.excluded += ev.invalid_steps(pair)
        block = effects(COST, [Point(f"{wl} {variant}", None, observations(sides[BASELINE], COST.column),
                                     observations(sides[TREATMENT], COST.column))
                               for (wl, variant), sides in pts.items()], pair.settings)
        used = [u for r in ev.rows(pair, TREATMENT) if (u := num(r.get("offload_blocks"))) is not None]
        if not used:
            use, usable = ("offload use not measured (no kvbm_offload_blocks_* series on the treatment's steps): no "
                           "conclusion before offload is counted"), False
        elif sum(used) == 0:
            use, usable = f"KVBM offloaded no block on {pair.treatment}: the working set fits the GPU KV cache", False
        else:
            use, usable = f"KVBM offloaded {fmt_value(sum(used))} blocks on {pair.treatment}", True
        testable = usable and pair.verified
        (family if testable else shown_only).extend(c for c in block.effects if shown(c))
        units.append((pair, block, use, usable))
    settings = judge(a, pairs, family, shown_only)
    design = ""
    for pair, block, use, usable in units:
        design = ev.design(pair, [block])
        per = [(c.where, c) for c in block.effects if shown(c)]
        a.effects += [Shown(pair.label, c.where, c, pair) for _, c in per]
        a.figures.append((f"{pair.label}, offload use", use))
        if not pair.verified:
            parts.append(f"{pair.label}: {UNVERIFIED}; $/1M output tokens {summarize(per)}")
        elif usable:
            parts.append(f"{pair.label}: $/1M output tokens {summarize(per)}; {use}")
        else:
            parts.append(f"{pair.label}: {INCONCLUSIVE}: {use}; $/1M output tokens {summarize(per)}")
    a.method = method_text(settings, "$/1M output tokens of every workload step (valid steps), once KVBM's offloads "
                           "are counted", a.family, [u[1] for u in units], design, COST_BASIS)
    return finish(a, parts, left, samples, decided=any(t.directional for t in family))


# -------------------------------------------------------------------------------------------------- answers


def answers(data: ReportData) -> list[Answer]:
    """The plan's questions (q1..q4) and hypotheses (h1..h4), in its order."""
    ev = evidence_of(data)
    return [_q1(ev), _q2(ev), q3(ev), _q4(ev), _q4(ev, "h1", "hypothesis"), h2(ev), h3(ev), h4(ev)]
