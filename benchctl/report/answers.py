"""The report's "Answers" section: the plan's four questions and four hypotheses, each with the figures that
answer it, a verdict computed from those figures, its sample counts and spread, and "not measured" where the
campaign ran no experiment that could answer it. Read from the comparison views only (the same rows the
report's tables show). Pure: the standard library and the core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchctl.report.data import Rows, fmt_value, num

NOT_MEASURED = "not measured"


@dataclass
class Answer:
    key: str
    kind: str  # "question" | "hypothesis"
    title: str
    evidence: str  # what answers it (views)
    verdict: str
    figures: list[tuple[str, str]] = field(default_factory=list)  # (what, value)
    samples: str = ""

    @property
    def measured(self) -> bool:
        return not self.verdict.startswith(NOT_MEASURED)


def _rows(views: dict[str, Rows], name: str) -> list[dict[str, Any]]:
    r = views.get(name)
    return r.rows if r is not None else []


def _f(v: float | None, unit: str = "") -> str:
    return "n/a" if v is None else f"{fmt_value(float(v))}{unit}"


def _delta_pct(new: float | None, base: float | None) -> float | None:
    if new is None or base is None or base == 0:
        return None
    return (new - base) / base * 100.0


def _sweep_pairs(views: dict[str, Rows]) -> list[dict[str, Any]]:
    rows = [r for r in _rows(views, "v_concurrency_sweep")
            if num(r.get("agg_ttft_p50_ms")) is not None and num(r.get("disagg_ttft_p50_ms")) is not None]
    return sorted(rows, key=lambda r: (num(r.get("isl")) or 0, num(r.get("concurrency")) or 0))


def _q1(views: dict[str, Rows]) -> Answer:
    a = Answer("q1", "question", "At the same GPU total, how does disaggregation change TTFT, ITL and successful "
               "throughput, from light load to past the SLO?", "v_concurrency_sweep, v_cost_efficiency", NOT_MEASURED)
    cats = {r.get("experiment"): r.get("category") for r in _rows(views, "v_cost_efficiency")}
    pairs = [r for r in _sweep_pairs(views) if cats.get(r.get("disagg_experiment")) == "disaggregated same GPU total"]
    if not pairs:
        a.verdict = (f"{NOT_MEASURED}: no concurrency sweep with an aggregated and a disaggregated experiment of the "
                     "same GPU kind and total")
        return a
    better_ttft = better_tps = 0
    for r in pairs:
        dt = num(r["disagg_ttft_p50_ms"]) - num(r["agg_ttft_p50_ms"])  # type: ignore[operator]
        di = (num(r.get("disagg_itl_p50_ms")) or 0) - (num(r.get("agg_itl_p50_ms")) or 0)
        dp = _delta_pct(num(r.get("disagg_output_tokens_per_s")), num(r.get("agg_output_tokens_per_s")))
        better_ttft += dt < 0
        better_tps += (dp or 0) > 0
        a.figures.append((f"ISL {fmt_value(r.get('isl'))}, concurrency {fmt_value(r.get('concurrency'))}",
                          f"TTFT p50 disagg-agg {_f(dt, ' ms')}; ITL p50 disagg-agg {_f(di, ' ms')}; "
                          f"output tokens/s {_f(dp, ' %')}; goodput agg {_f(num(r.get('agg_goodput_ratio')))} / "
                          f"disagg {_f(num(r.get('disagg_goodput_ratio')))}"))
    n = len(pairs)
    a.verdict = (f"disaggregated TTFT p50 lower at {better_ttft} of {n} concurrencies; output throughput higher at "
                 f"{better_tps} of {n}")
    reps = sorted({int(num(r.get("n_repeats")) or 0) for r in pairs})
    sds = [num(r.get(k)) for r in pairs for k in ("agg_ttft_p50_ms_sd", "disagg_ttft_p50_ms_sd")]
    sds_known = [s for s in sds if s is not None]
    a.samples = (f"{n} concurrencies x repeats {reps}; TTFT p50 spread (sd over repeats) up to "
                 f"{_f(max(sds_known), ' ms') if sds_known else 'n/a (one repeat)'}")
    return a


def _short(views: dict[str, Rows]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The lightest-load, shortest-input sweep pair, and the disaggregated KV-transfer rows of its step(s)."""
    pairs = _sweep_pairs(views)
    if not pairs:
        return None, []
    first = min(pairs, key=lambda r: (num(r.get("concurrency")) or 0, num(r.get("isl")) or 0))
    kv = [r for r in _rows(views, "v_kv_transfer")
          if r.get("experiment") == first.get("disagg_experiment") and r.get("workload_kind") == "concurrency_sweep"
          and num(r.get("concurrency")) == num(first.get("concurrency")) and num(r.get("isl")) == num(first.get("isl"))
          and num(r.get("kv_transfer_ms")) is not None]
    return first, kv


def _q4(views: dict[str, Rows], key: str = "q4", kind: str = "question") -> Answer:
    title = ("Does the NIXL transfer overhead cancel the benefit of disaggregation, even for short sequences?"
             if kind == "question" else
             "Low load, short inputs: disaggregation may add transfer and scheduling cost (TTFT, ITL, KV-transfer time)")
    a = Answer(key, kind, title, "v_concurrency_sweep, v_kv_transfer", NOT_MEASURED)
    first, kv = _short(views)
    if first is None:
        a.verdict = f"{NOT_MEASURED}: no concurrency sweep in both modes"
        return a
    dt = num(first["disagg_ttft_p50_ms"]) - num(first["agg_ttft_p50_ms"])  # type: ignore[operator]
    di = (num(first.get("disagg_itl_p50_ms")) or 0) - (num(first.get("agg_itl_p50_ms")) or 0)
    xfer = [num(r["kv_transfer_ms"]) or 0.0 for r in kv]
    mean_x = sum(xfer) / len(xfer) if xfer else None
    where = f"ISL {fmt_value(first.get('isl'))}, concurrency {fmt_value(first.get('concurrency'))}"
    a.figures = [(where, f"TTFT p50 agg {_f(num(first['agg_ttft_p50_ms']), ' ms')}, disagg "
                         f"{_f(num(first['disagg_ttft_p50_ms']), ' ms')} (disagg-agg {_f(dt, ' ms')})"),
                 (where, f"ITL p50 disagg-agg {_f(di, ' ms')}")]
    if mean_x is not None:
        src = sorted({str(r.get("kv_transfer_source")) for r in kv})
        a.figures.append((where, f"KV-transfer time {_f(mean_x, ' ms')} per request ({', '.join(src)})"))
    else:
        a.figures.append((where, "KV-transfer time: not measured (no transfer series or model for this step)"))
    if dt > 0:
        cause = (f"; the KV transfer ({_f(mean_x, ' ms')}) is {_f(mean_x / dt * 100, ' %')} of that overhead"
                 if mean_x is not None and dt else "")
        a.verdict = f"yes at light load: disaggregated TTFT p50 is {_f(dt, ' ms')} higher{cause}"
    else:
        a.verdict = f"no: disaggregated TTFT p50 is {_f(-dt, ' ms')} lower even at the lightest load and shortest input"
    a.samples = f"{fmt_value(first.get('n_repeats'))} repeat(s); {len(kv)} KV-transfer step row(s)"
    return a


def _q2(views: dict[str, Rows]) -> Answer:
    a = Answer("q2", "question", "Does KV-cache offload (GPU -> CPU -> SSD) save real money (e.g. L40S decode "
               "workers)?", "v_feature_ladder, v_cost_efficiency", NOT_MEASURED)
    rungs = [r for r in _rows(views, "v_feature_ladder") if r.get("changed_feature") == "kv_offload"]
    cost = {r.get("experiment"): r for r in _rows(views, "v_cost_efficiency")}
    if not rungs:
        a.verdict = f"{NOT_MEASURED}: the campaign has no feature-ladder rung that changes kv_offload"
        return a
    cheaper = 0
    pairs = {(r.get("base_experiment"), r.get("experiment")) for r in rungs}
    for base, exp in sorted(pairs, key=str):
        b, e = cost.get(base) or {}, cost.get(exp) or {}
        d = _delta_pct(num(e.get("usd_per_1m_output_tokens")), num(b.get("usd_per_1m_output_tokens")))
        cheaper += (d or 0) < 0
        a.figures.append((f"{exp} vs {base}", f"$/1M output tokens {_f(num(b.get('usd_per_1m_output_tokens')))} -> "
                                               f"{_f(num(e.get('usd_per_1m_output_tokens')))} ({_f(d, ' %')})"))
    a.verdict = f"offload lowered $/1M output tokens in {cheaper} of {len(pairs)} rung(s)"
    a.samples = f"{len(rungs)} ladder row(s)"
    return a


def _q3(views: dict[str, Rows]) -> Answer:
    a = Answer("q3", "question", "How does the input prefix duplication ratio relate to the server's real cache "
               "hit rate, in both modes?", "v_prefix_cache", NOT_MEASURED)
    rows = sorted(_rows(views, "v_prefix_cache"), key=lambda r: num(r.get("prefix_ratio")) or 0)
    if not rows:
        a.verdict = f"{NOT_MEASURED}: no prefix-cache workload"
        return a
    for r in rows:
        a.figures.append((f"prefix ratio {fmt_value(r.get('prefix_ratio'))}",
                          f"hit rate agg {_f(num(r.get('agg_cache_hit_rate')))}, disagg "
                          f"{_f(num(r.get('disagg_cache_hit_rate')))}; TTFT improvement agg "
                          f"{_f(num(r.get('agg_ttft_improvement_pct')), ' %')}, disagg "
                          f"{_f(num(r.get('disagg_ttft_improvement_pct')), ' %')}"))
    parts = []
    for mode in ("agg", "disagg"):
        pts = [(num(r.get("prefix_ratio")), num(r.get(f"{mode}_cache_hit_rate"))) for r in rows]
        pts2 = [(x, y) for x, y in pts if x is not None and y is not None]
        if len(pts2) >= 2 and pts2[-1][0] != pts2[0][0]:
            slope = (pts2[-1][1] - pts2[0][1]) / (pts2[-1][0] - pts2[0][0])
            parts.append(f"{mode}: hit rate rises {_f(slope)} per unit of duplication")
        else:
            parts.append(f"{mode}: {NOT_MEASURED}")
    a.verdict = "; ".join(parts)
    a.samples = f"{len(rows)} ratios x repeats {sorted({fmt_value(r.get('n_repeats')) for r in rows})}"
    return a


def _h2(views: dict[str, Rows]) -> Answer:
    a = Answer("h2", "hypothesis", "Multi-turn: routing and offload may reduce recomputation (the real hit/miss and "
               "eviction in both modes)", "v_multi_turn", NOT_MEASURED)
    rows = _rows(views, "v_multi_turn")
    if not rows:
        a.verdict = f"{NOT_MEASURED}: no multi-turn workload"
        return a
    r0 = rows[0]
    ha, hd = num(r0.get("agg_cache_hit_rate")), num(r0.get("disagg_cache_hit_rate"))
    a.figures.append(("server cache hit rate", f"agg {_f(ha)}, disagg {_f(hd)}"))
    for r in sorted(rows, key=lambda r: num(r.get("turn")) or 0):
        a.figures.append((f"turn {fmt_value(r.get('turn'))}", f"TTFT p50 agg {_f(num(r.get('agg_ttft_p50_ms')), ' ms')}, "
                                                              f"disagg {_f(num(r.get('disagg_ttft_p50_ms')), ' ms')}"))
    a.verdict = ("the server reused cached prefixes in both modes" if (ha or 0) > 0 and (hd or 0) > 0 else
                 "no cache reuse measured in at least one mode") + " (evictions: see v_prefix_cache preemptions)"
    a.samples = f"requests per turn agg {sorted({fmt_value(r.get('agg_n_requests')) for r in rows})}"
    return a


def _h3(views: dict[str, Rows]) -> Answer:
    a = Answer("h3", "hypothesis", "High load, long inputs: less prefill interference, but decode capacity may become "
               "the bottleneck (stage queues, GPU use, SLO attainment)", "v_stage_queues", NOT_MEASURED)
    rows = [r for r in _rows(views, "v_stage_queues") if r.get("mode") == "disaggregated"
            and r.get("status") == "succeeded"]
    if not rows:
        a.verdict = f"{NOT_MEASURED}: no disaggregated step with stage-queue metrics"
        return a
    top = max(rows, key=lambda r: ((num(r.get("concurrency")) or 0), (num(r.get("isl")) or 0)))
    pq, dq = num(top.get("prefill_inflight_max")), num(top.get("waiting_max"))
    a.figures = [(f"{top.get('step_id')}", f"prefill backlog max {_f(pq)}, decode waiting max {_f(dq)}, decode "
                                           f"running max {_f(num(top.get('running_max')))}, goodput "
                                           f"{_f(num(top.get('goodput_ratio')))}, GPU util "
                                           f"{_f(num(top.get('gpu_util_avg_pct')), ' %')} ({top.get('gpu_source')})")]
    if pq is None or dq is None:
        a.verdict = f"{NOT_MEASURED}: the queue series are missing for the highest-load step"
    else:
        a.verdict = ("decode is the bottleneck at the highest load (its queue is deeper)" if dq > pq else
                     "prefill is the bottleneck at the highest load (its backlog is deeper)" if pq > dq else
                     "neither stage queues more than the other at the highest load")
    a.samples = f"{len(rows)} disaggregated step(s)"
    return a


def _h4(views: dict[str, Rows]) -> Answer:
    a = Answer("h4", "hypothesis", "Cost: a heterogeneous GPU combination may pay off over some load range (period "
               "cost and successful output tokens at the same quality and SLO)", "v_cost_efficiency", NOT_MEASURED)
    rows = _rows(views, "v_cost_efficiency")
    het = [r for r in rows if r.get("category") == "disaggregated heterogeneous"]
    base = [r for r in rows if r.get("category") == "aggregated same-GPU baseline"]
    if not het or not base:
        a.verdict = f"{NOT_MEASURED}: the campaign has no disaggregated heterogeneous experiment beside a baseline"
        return a
    b = base[0]
    wins = 0
    for h in het:
        d = _delta_pct(num(h.get("tokens_per_usd")), num(b.get("tokens_per_usd")))
        g = _delta_pct(num(h.get("goodput_per_usd_hour")), num(b.get("goodput_per_usd_hour")))
        wins += (d or 0) > 0
        a.figures.append((f"{h.get('experiment')} vs {b.get('experiment')}",
                          f"tokens per $ {_f(d, ' %')}; SLO-meeting requests/s per $/h {_f(g, ' %')}"))
    a.verdict = f"heterogeneous bought more tokens per dollar in {wins} of {len(het)} experiment(s)"
    a.samples = f"{len(het)} heterogeneous, {len(base)} baseline experiment(s)"
    return a


def answers(views: dict[str, Rows]) -> list[Answer]:
    """The plan's questions (q1..q4) and hypotheses (h1..h4), in its order."""
    return [_q1(views), _q2(views), _q3(views), _q4(views), _q4(views, "h1", "hypothesis"), _h2(views), _h3(views),
            _h4(views)]
