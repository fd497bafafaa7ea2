"""The report's Answers on made-up campaigns: real lake files (tests/unit/synthetic_lake.py), the real views
and the rendered report. Identical distributions give "inconclusive" everywhere (at the seed plan's nine loads and
5 % noise); a clear difference gives its direction with the interval its family step used; a crossover is named
at the right load; an overloaded load is an SLO miss with its error rate; the transfer explains a gap only by its
share; a disaggregated experiment whose workers used another transfer backend is excluded, one whose path is not
shown by use makes the answer inconclusive; a heterogeneous pair answers no Q4/H1; H4 needs comparable quality;
one repeat per side is never directional."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from benchctl.local.report import render_report
from tests.unit.synthetic_lake import Campaign

LOADS = {1: 100.0, 4: 120.0, 16: 300.0, 64: 900.0}  # the aggregated TTFT p50 (ms) at each concurrency
# the seed plan's nine short-input loads, for the A/A test
NINE = {1: 100.0, 4: 110.0, 16: 130.0, 32: 150.0, 64: 200.0, 256: 300.0, 512: 450.0, 1024: 700.0, 1536: 900.0}
DIRECTIONAL = re.compile(r"\b(lower|higher) at c=|\byes at\b|\bno at\b|\bnot the transfer at\b|"
                         r"queues deeper|\(directional\)")


def figures(ttft: float, **extra: Any) -> dict[str, Any]:
    return {"ttft_p50_ms": ttft, "ttft_p99_ms": ttft * 1.5, "itl_p50_ms": 10.0, "itl_p99_ms": 15.0,
            "output_tokens_per_s": 1000.0, **extra}


def answers(c: Campaign) -> dict[str, str]:
    """{q1: the answer's whole Markdown block, its texts as a reader sees them} of the campaign's rendered
    report (the report escapes every text it did not write: backslash escapes and HTML entities undone)."""
    md = render_report(c.write().root, c.cid, "md")
    section = md[md.index("## Answers"):md.index("## Provenance")]
    section = html.unescape(re.sub(r"\\([\\`*_\[\]|~])", r"\1", section))
    return {m.group(1).lower(): m.group(0) for m in re.finditer(r"### (\w+)\. .*?(?=\n### |\Z)", section, re.S)}


def effect_rows(block: str) -> list[dict[str, str]]:
    """The answer's table of compared figures as rows (a comparison and point written once over the rows that
    share them are filled in; a verdict's numbered note replaced by its text)."""
    lines = block.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| comparison | point | figure |"))
    head = [h.strip() for h in lines[start].strip("|").split("|")]
    notes = dict(re.findall(r"^\[(\d+)\] (.*?)\s*$", block, re.M))
    rows, last = [], {"comparison": "", "point": ""}
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        r = dict(zip(head, (c.strip() for c in ln.strip("|").split("|")), strict=True))
        r["comparison"] = r["comparison"] or last["comparison"]
        r["point"] = r["point"] or last["point"]
        r["verdict"] = re.sub(r" \[(\d+)\]", lambda m: f" ({notes[m.group(1)]})", r["verdict"])
        last = r
        rows.append(r)
    return rows


def verdict(block: str) -> str:
    m = re.search(r"\*\*Verdict[^*]*:\*\* (.*)", block)
    assert m, block
    return m.group(1)


def compared(tmp_path: Path, questions: str = "q1,q3,q4,h1,h3", **kw: Any) -> Campaign:
    """An aggregated and a disaggregated experiment (its transfer path verified: each worker's logged transfer
    model is the spec's), compared for ``questions``."""
    c = Campaign(tmp_path / "lake", **kw)
    c.experiment("agg", "aggregated")
    c.experiment("disagg", "disaggregated")
    c.modelled("disagg")
    c.compare("disagg-vs-agg", "agg", "disagg", questions)
    return c


def two_modes(tmp_path: Path, repeats: int, disagg_ttft: dict[int, float], loads: dict[int, float] = LOADS,
              **kw: Any) -> Campaign:
    """:func:`compared`, each side with a concurrency sweep."""
    c = compared(tmp_path, **kw)
    c.sweep("agg", "aggregated", repeats, {k: figures(v) for k, v in loads.items()})
    c.sweep("disagg", "disaggregated", repeats, {k: figures(v) for k, v in disagg_ttft.items()})
    return c


def test_identical_distributions_in_both_modes_are_inconclusive_everywhere(tmp_path: Path) -> None:
    # Given every workload the answers read, drawn from the same distributions on both sides of every comparison,
    # at the seed plan's nine loads, 3 repeats and 5 % noise per repeat (each figure drawn apart)
    c = two_modes(tmp_path, 3, NINE, loads=NINE, noise=0.05)
    for name, mode, offload, kind in (("disagg-off", "disaggregated", True, "A100-40GB"),
                                      ("disagg-het", "disaggregated", False, "L40S-48GB")):
        c.experiment(name, mode, kv_offload=offload, gpu_kind=kind)
        c.modelled(name)
        c.sweep(name, mode, 3, {k: figures(v) for k, v in NINE.items()})
    c.compare("offload", "disagg", "disagg-off", "q2,h2", differs="kv_offload")
    c.compare("hetero", "agg", "disagg-het", "h4", differs="mode,gpu_kinds,workers")
    for exp, mode in (("agg", "aggregated"), ("disagg", "disaggregated"), ("disagg-off", "disaggregated")):
        for r in range(3):
            for ratio in (0.0, 0.25, 0.5, 0.75, 1.0):
                sid = f"prefix-p{int(ratio * 100)}-r{r}"
                c.step(exp, mode, "prefix_cache", sid, r, prefix_ratio=ratio, variant=f"p{int(ratio * 100)}",
                       ttft_p50_ms=100.0)
                c.cache(exp, mode, sid, r, c._draw(0.1 + 0.8 * ratio) if ratio else 0.0, offload_blocks=50.0)
            sid = f"multi-turn-r{r}"
            c.step(exp, mode, "multi_turn", sid, r, variant="c4", ttft_p50_ms=80.0, output_tokens_per_s=300.0)
            c.cache(exp, mode, sid, r, c._draw(0.6), offload_blocks=50.0, preemptions=round(c._draw(10.0)))
            for load in NINE:
                for role in ("prefill/w-0", "decode/w-0"):
                    c.metric(exp, f"sweep-i1024-c{load}-r{r}", r, "vllm:num_requests_waiting", "avg",
                             c._draw(2.0 + load / 100), source=role)
    got = answers(c)
    # Then every answer is inconclusive (or not measured), and says why
    assert sorted(got) == ["h1", "h2", "h3", "h4", "q1", "q2", "q3", "q4"]
    for key, block in got.items():
        v = verdict(block)
        assert not DIRECTIONAL.search(v), f"{key}: {v}"
        assert "inconclusive" in v or v.startswith("not measured"), f"{key}: {v}"
    assert "the interval includes 0" in verdict(got["q1"])
    assert "(inconclusive)" in got["q2"] and "(inconclusive)" in got["h2"] and "(inconclusive)" in got["h4"]
    # and the method line says what was tested, how the family was adjusted, and on what design
    q1 = got["q1"]
    assert "primary figures, declared before the data: TTFT p50" in q1 and "Holm's step-down" in q1
    assert re.search(r"a family of 10 test\(s\)", q1), q1  # TTFT p50 at 9 loads + the SLO limits
    assert "one deployment per experiment, run in the order agg, disagg" in q1


def test_a_clear_difference_gives_its_direction_with_the_interval(tmp_path: Path) -> None:
    # Given a disaggregated TTFT p50 40 % below the aggregated one at every load, 3 repeats, 1 % noise
    got = answers(two_modes(tmp_path, 3, {k: v * 0.6 for k, v in LOADS.items()}))
    q1 = verdict(got["q1"])
    # Then Q1 says lower, at each load, with an interval around -40 % that clears the threshold, each at the level
    # its Holm step used (a family of 4 loads x 2 figures + the SLO limits)
    found = re.findall(r"c=(\d+) \(-[\d.,]+ ms \((-[\d.]+) %\), (9[\d.]+) % CI \[(-[\d.]+), (-[\d.]+)\] %\)",
                       q1.split("TTFT p50: lower at ", 1)[1].split(". ", 1)[0])
    assert [int(load) for load, *_ in found] == list(LOADS)
    for _, est, level, lo, hi in found:
        assert float(lo) < -40.0 < float(hi) < -5.0 and float(lo) <= float(est) <= float(hi)
        assert 95.0 <= float(level) <= 100 * (1 - 0.05 / 9)
    # ITL is descriptive in Q1 (goodput holds it through the SLO): shown per load, never a verdict
    itl = [r for r in effect_rows(got["q1"]) if r["figure"] == "ITL p50 (ms)"]
    assert "ITL p50" not in q1 and len(itl) == len(LOADS)
    assert all(r["verdict"] == "descriptive" and r["interval"] and r["level"] == "95 % unadjusted" for r in itl), itl


def test_a_crossover_is_named_at_the_right_load(tmp_path: Path) -> None:
    # Given disaggregation slower at c=1 and c=4 (+30 %) and faster from c=16 on (-30 %)
    got = answers(two_modes(tmp_path, 3, {1: 130.0, 4: 156.0, 16: 210.0, 64: 630.0}))
    assert "Crossover: TTFT p50 between c=4 (agg better) and c=16 (disagg better)" in verdict(got["q1"])


def test_one_repeat_per_side_is_never_directional(tmp_path: Path) -> None:
    # Given one repeat per side and a 50 % difference
    got = answers(two_modes(tmp_path, 1, {k: v * 0.5 for k, v in LOADS.items()}))
    for key, block in got.items():
        assert not DIRECTIONAL.search(verdict(block)), f"{key}: {verdict(block)}"
    assert "TTFT p50: inconclusive at c=1, c=4, c=16, c=64 (one repeat per side: no interval)" in verdict(got["q1"])


def test_a_disaggregated_experiment_with_an_unexpected_backend_is_excluded_and_named(tmp_path: Path) -> None:
    # Given two disaggregated experiments asking NIXL LIBFABRIC: one whose decode worker logged UCX (a silent
    # fallback to TCP) and a clearly faster one whose workers all logged LIBFABRIC
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated")
    c.experiment("disagg", "disaggregated")
    c.compare("disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3")
    c.sweep("agg", "aggregated", 3, {k: figures(v) for k, v in LOADS.items()})
    c.sweep("disagg", "disaggregated", 3, {k: figures(v * 0.6, kv_transfer_ms=4.0) for k, v in LOADS.items()})
    c.eks_backends("disagg", "LIBFABRIC", "LIBFABRIC")
    c.experiment("disagg-tcp", "disaggregated")
    c.sweep("disagg-tcp", "disaggregated", 3, {k: figures(v * 3) for k, v in LOADS.items()})
    c.compare("tcp-vs-agg", "agg", "disagg-tcp", "q1,q3,q4,h1,h3")
    c.eks_backends("disagg-tcp", "LIBFABRIC", "UCX")
    got = answers(c)
    q1 = got["q1"]
    # Then it is left out of every verdict, named with what was observed, and the valid comparison stands
    assert "disagg-tcp vs agg" not in verdict(q1) and "| disagg-tcp vs agg" not in q1
    assert ("comparison tcp-vs-agg (disagg-tcp vs agg) excluded: disagg-tcp is invalid: its observed KV transfer "
            "(disagg-tcp-w1: UCX) is not the spec's (NIXL LIBFABRIC)") in q1
    assert verdict(q1).startswith("disagg vs agg") and "TTFT p50: lower at c=1" in verdict(q1)
    for key in ("q3", "q4", "h1", "h3"):
        assert "tcp-vs-agg (disagg-tcp vs agg) excluded" in got[key], key


def test_a_step_over_the_error_rate_threshold_is_excluded_and_named(tmp_path: Path) -> None:
    c = compared(tmp_path, "q1")
    c.sweep("agg", "aggregated", 3, {4: figures(100.0)})
    c.sweep("disagg", "disaggregated", 3, {4: figures(60.0)})
    # a fourth disaggregated repeat with 5 of 40 requests failed (and a TTFT that would hide the difference)
    c.step("disagg", "disaggregated", "concurrency_sweep", "sweep-i1024-c4-r3", 3, errors=5, concurrency=4, isl=1024,
           osl=128, variant="c4", **figures(500.0))
    got = answers(c)
    assert ("disagg/sweep-i1024-c4-r3: error rate 0.125 above max_error_rate 0.01 (its latency percentiles are left "
            "out; its goodput and SLO attainment count)") in got["q1"]
    assert "TTFT p50: lower at c=4" in verdict(got["q1"])
    assert "repeats agg 3, disagg 3 (the smaller, 3, bounds the evidence)" in got["q1"]  # valid repeats


def _gap(tmp_path: Path, base_ms: float, disagg_ms: float, transfer_ms: float, *, noise: float = 0.01,
         repeats: int = 3) -> str:
    c = compared(tmp_path, "q4,h1", noise=noise)
    c.sweep("agg", "aggregated", repeats, {1: figures(base_ms), 4: figures(base_ms * 1.2)})
    c.sweep("disagg", "disaggregated", repeats, {1: figures(disagg_ms, kv_transfer_ms=transfer_ms),
                                                 4: figures(disagg_ms * 1.2, kv_transfer_ms=transfer_ms)})
    return verdict(answers(c)["q4"])


@pytest.mark.parametrize(("transfer_ms", "said"), [
    (28.0, "yes at the lightest load (c=1): disaggregated TTFT p50 is higher"),
    (2.0, "not the transfer at the lightest load (c=1)"),
])
def test_the_transfer_cancels_the_benefit_only_when_its_share_of_the_gap_is_shown(tmp_path: Path, transfer_ms: float,
                                                                                   said: str) -> None:
    # Given disaggregation 28 ms slower at c=1, with a KV transfer of 28 ms per request, or of 2 ms
    q4 = _gap(tmp_path, 100.0, 128.0, transfer_ms)
    assert said in q4
    assert "per request" in q4 and "Fieller" in q4
    if transfer_ms < 10:
        assert "below 50 %, so the rest is scheduling and queueing" in q4


def test_a_small_transfer_inside_a_wide_gap_is_not_said_to_explain_it(tmp_path: Path) -> None:
    # Given the TTFT p50 gap of three exact repeats, agg 100/100/100 ms against disagg 126.3/140/153.7 ms: +40 ms,
    # whose Welch interval is about +6 to +74 % (what made "the transfer explains the gap" out of any 7 ms
    # transfer whose interval touched it), and a KV transfer of 7 ms per request
    c = compared(tmp_path, "q4", noise=0.0)
    for r, (b, t) in enumerate(((100.0, 126.3), (100.0, 140.0), (100.0, 153.7))):
        for exp, mode, ttft in (("agg", "aggregated", b), ("disagg", "disaggregated", t)):
            sid = f"sweep-i1024-c1-r{r}"
            c.step(exp, mode, "concurrency_sweep", sid, r, concurrency=1, isl=1024, osl=128, variant="c1",
                   **figures(ttft))
        c.metric("disagg", f"sweep-i1024-c1-r{r}", r, "vllm:nixl_xfer_time_seconds", "sum", 0.007 * 40)
        c.metric("disagg", f"sweep-i1024-c1-r{r}", r, "vllm:nixl_xfer_time_seconds", "count", 40.0)
    q4 = verdict(answers(c)["q4"])
    # Then a transfer of about a sixth of the gap is never said to explain it
    assert "yes at" not in q4 and "explains the gap" not in q4.replace("whether the transfer explains the gap", ""), q4


def test_stage_queues_without_the_prefill_waiting_queue_are_not_measured_and_say_which_series(tmp_path: Path
                                                                                             ) -> None:
    c = two_modes(tmp_path, 2, LOADS)
    for exp, r in (("disagg", 0), ("disagg", 1), ("agg", 0), ("agg", 1)):
        for load in (16, 64):
            sid = f"sweep-i1024-c{load}-r{r}"
            role = "decode/w-0" if exp == "disagg" else "worker/w-0"
            c.metric(exp, sid, r, "vllm:num_requests_waiting", "avg", 5.0, source=role)
    h3 = answers(c)["h3"]
    assert verdict(h3).startswith("not measured: the prefill stage's waiting queue (vllm:num_requests_waiting on the "
                                  "prefill workers: v_stage_queues.prefill_waiting_avg) is not in the lake")
    assert "c=64: decode waiting 5.00 vs aggregated 5.00" in verdict(h3)


def test_q3_fits_every_ratio_with_its_interval(tmp_path: Path) -> None:
    # Given 5 duplication ratios x 3 repeats, hit rate = 0.9 x ratio (aggregated) and 0.6 x ratio + a bump at
    # ratio 0.75 (disaggregated): a first-to-last slope would miss the bump, a fit over every point does not
    c = two_modes(tmp_path, 0, {})
    for exp, mode, slope in (("agg", "aggregated", 0.9), ("disagg", "disaggregated", 0.6)):
        for r in range(3):
            for ratio in (0.0, 0.25, 0.5, 0.75, 1.0):
                sid = f"prefix-p{int(ratio * 100)}-r{r}"
                c.step(exp, mode, "prefix_cache", sid, r, prefix_ratio=ratio, ttft_p50_ms=100.0)
                bump = 0.3 if mode == "disaggregated" and ratio == 0.75 else 0.0
                c.cache(exp, mode, sid, r, slope * ratio + bump + 0.01 * (r - 1))
    q3 = verdict(answers(c)["q3"])
    agg = re.search(r"agg hit rate = [-\d.]+ \+ ([\d.]+) x duplication ratio, 95% CI \[([\d.]+), ([\d.]+)\]; 15 points",
                    q3)
    assert agg and float(agg.group(2)) < 0.9 < float(agg.group(3)) and float(agg.group(1)) == pytest.approx(0.9)
    dis = re.search(r"disagg hit rate = [-\d.]+ \+ ([\d.]+) x duplication ratio", q3)
    # the bump counts: +0.3 at x - mean(x) = 0.25 over sum((x - mean(x))^2) = 0.625 per repeat adds 0.12
    assert dis and float(dis.group(1)) == pytest.approx(0.6 + 0.3 * 0.25 / 0.625)
    assert "the treatment's slope minus the baseline's: inconclusive (the interval includes 0): -0.18" in q3


def test_h2_compares_recomputation_with_and_without_the_feature(tmp_path: Path) -> None:
    # Given a router rung (round-robin -> KV router) on a multi-turn workload: hit rate 0.2 -> 0.6, on vLLM (the
    # mocker's one meter is the KV router's own, so a round-robin baseline has none: not measured locally)
    c = Campaign(tmp_path / "lake", simulated=False)
    c.experiment("agg", "aggregated", router="round-robin")
    c.experiment("agg-kv", "aggregated")
    c.compare("router", "agg", "agg-kv", "h2", differs="router")
    for exp, hit in (("agg", 0.2), ("agg-kv", 0.6)):
        for r in range(3):
            sid = f"multi-turn-r{r}"
            c.step(exp, "aggregated", "multi_turn", sid, r, variant="c4", ttft_p50_ms=80.0)
            c.cache(exp, "aggregated", sid, r, c._draw(hit), preemptions=3.0)
    block = answers(c)["h2"]
    h2 = verdict(block)
    assert h2.startswith("agg-kv vs agg (router round-robin -> kv): recomputation lower at multi-turn c4 (-0.4")
    assert "(-40.1" in h2 and " pp)" in h2  # a share: judged in percentage points
    # preemptions are descriptive: shown with an unadjusted interval, never in the verdict
    pre = [r for r in effect_rows(block) if r["figure"].startswith("preemptions")]
    assert "preemptions" not in h2 and len(pre) == 1, pre
    assert pre[0]["verdict"] == "descriptive" and pre[0]["difference"] == "0" and pre[0]["change"] == "0 %"
    assert pre[0]["interval"].startswith("[") and pre[0]["level"] == "95 % unadjusted", pre


def test_h4_is_goodput_per_dollar_hour_at_each_load(tmp_path: Path) -> None:
    # Given a heterogeneous experiment at 2/3 of the baseline's $/h, with the same goodput up to c=4 and a third
    # of it at c=16 (past its SLO)
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated", price=30.0)
    c.experiment("het", "disaggregated", price=20.0, gpu_kind="L40S-48GB")
    c.modelled("het")
    c.compare("hetero", "agg", "het", "h4", differs="mode,gpu_kinds,workers")
    c.sweep("agg", "aggregated", 3, {1: figures(100.0), 4: figures(120.0), 16: figures(300.0, attainment=0.9)})
    c.sweep("het", "disaggregated", 3, {1: figures(100.0), 4: figures(120.0), 16: figures(300.0, attainment=0.3)})
    h4 = verdict(answers(c)["h4"])
    assert re.search(r"higher at ISL 1024 c=1 \(\+[\d.]+ req/s per \$/h \(\+50\.00 %\)", h4), h4
    # a third of the goodput at 2/3 of the price: -50 %, read on the count's scale (log(count + 1)): -47 %
    assert re.search(r"lower at ISL 1024 c=16 \(-[\d.]+ req/s per \$/h \(-47\.30 %\)", h4), h4


def test_offload_must_be_used_before_it_is_credited_with_a_saving(tmp_path: Path) -> None:
    c = Campaign(tmp_path / "lake")
    c.experiment("disagg", "disaggregated")
    c.experiment("disagg-off", "disaggregated", kv_offload=True)
    c.modelled("disagg")
    c.modelled("disagg-off")
    c.compare("offload", "disagg", "disagg-off", "q2,h2", differs="kv_offload")
    c.sweep("disagg", "disaggregated", 3, {4: figures(100.0, output_tokens_per_s=1000.0)})
    c.sweep("disagg-off", "disaggregated", 3, {4: figures(100.0, output_tokens_per_s=1500.0)})
    for r in range(3):
        c.cache("disagg-off", "disaggregated", f"sweep-i1024-c4-r{r}", r, 0.1, offload_blocks=0.0)
    q2 = verdict(answers(c)["q2"])
    assert q2.startswith("disagg-off vs disagg: inconclusive: KVBM offloaded no block on disagg-off")


def test_q3_gives_the_modes_slope_difference_a_direction_when_it_clears_the_threshold(tmp_path: Path) -> None:
    c = two_modes(tmp_path, 0, {})
    for exp, mode, slope in (("agg", "aggregated", 0.9), ("disagg", "disaggregated", 0.6)):
        for r in range(3):
            for ratio in (0.0, 0.5, 1.0):
                sid = f"prefix-p{int(ratio * 100)}-r{r}"
                c.step(exp, mode, "prefix_cache", sid, r, prefix_ratio=ratio, ttft_p50_ms=100.0)
                c.cache(exp, mode, sid, r, slope * ratio + 0.01 * (r - 1))
    got = answers(c)["q3"]
    assert "(directional)" in got
    # a family of two tests per comparison (the slope's and the curvature's): the first step at 97.5 %
    assert re.search(r"the treatment's slope minus the baseline's: lower: -0\.3, 97\.5 % CI \[-0\.3[\d]+, -0\.2[\d]+\];",
                     verdict(got)), verdict(got)


def test_q3_reads_each_ratio_as_duplication_then_achievable_then_measured(tmp_path: Path) -> None:
    c = two_modes(tmp_path, 0, {})
    for exp, mode, measured in (("agg", "aggregated", 0.4), ("disagg", "disaggregated", 0.3)):
        for ratio, achievable in ((0.0, 0.0), (0.5, 0.45)):
            sid = f"prefix-p{int(ratio * 100)}-r0"
            c.step(exp, mode, "prefix_cache", sid, 0, prefix_ratio=ratio, prefix_ratio_actual=ratio,
                   achievable_hit_rate=achievable, ttft_p50_ms=100.0)
            c.cache(exp, mode, sid, 0, measured * ratio)
    got = answers(c)["q3"]
    assert "duplication 0.5 -> achievable 0.45 -> measured hit rate 0.2 (one repeat" in got, got
    assert "duplication 0.5 -> achievable 0.45 -> measured hit rate 0.15 (one repeat" in got, got


def test_a_comparison_without_the_workload_an_answer_reads_is_not_measured(tmp_path: Path) -> None:
    c = two_modes(tmp_path, 0, {})  # compared, but no concurrency sweep ran
    for exp, mode in (("agg", "aggregated"), ("disagg", "disaggregated")):
        c.step(exp, mode, "prefix_cache", "prefix-p0-r0", 0, prefix_ratio=0.0, ttft_p50_ms=100.0)
    got = answers(c)
    for key in ("q1", "q4", "h1"):
        assert verdict(got[key]) == "not measured: disagg vs agg: not measured (no concurrency-sweep step on both sides)", key
        assert "(not measured)" in got[key]


def test_an_overloaded_load_is_an_slo_miss_with_its_error_rate_not_the_end_of_the_sweep(tmp_path: Path) -> None:
    # Given both modes within the SLO up to c=16, and the disaggregated one collapsing at c=64: a quarter of its
    # requests failed, 30 % met the SLO (so its steps are over max_error_rate: invalid for latency percentiles)
    c = compared(tmp_path, "q1")
    good = {1: figures(100.0), 4: figures(110.0), 16: figures(150.0)}
    c.sweep("agg", "aggregated", 3, {**good, 64: figures(300.0)}, n_requests=200)
    c.sweep("disagg", "disaggregated", 3, {**good, 64: figures(300.0, errors=50, attainment=0.4)}, n_requests=200)
    got = answers(c)
    q1 = verdict(got["q1"])
    # Then the collapse is a miss at c=64, with its error rate; never "the sweep never left the SLO"
    assert "disagg within the SLO up to c=16; missed the SLO at c=64 (attainment 30 %, error rate 25 %)" in q1
    assert "the limit lies in [c=16, c=64)" in q1
    assert "never left" not in q1 and "the highest load tried" not in q1
    # and its goodput counts (a failed request meets no SLO) while its latency percentiles do not
    at64 = {r["figure"]: r for r in effect_rows(got["q1"]) if r["point"] == "c=64"}
    assert at64["TTFT p50 (ms)"]["verdict"] == "inconclusive (no valid step on the treatment side)", at64
    assert at64["TTFT p50 (ms)"]["treatment"] == "" and at64["TTFT p50 (ms)"]["difference"] == ""
    good = at64["goodput (SLO-meeting requests/s) (req/s)"]
    assert good["verdict"].startswith("descriptive") and float(good["difference"]) < 0, good
    assert re.fullmatch(r"-69\.\d+ %", good["change"]), good
    assert "TTFT p50: inconclusive at c=1, c=4, c=16 (" in q1 and "at c=64 (no valid step on the treatment side)" in q1


def test_a_transfer_path_shown_by_instantiation_only_makes_the_answer_inconclusive(tmp_path: Path) -> None:
    # Given a clear TTFT difference, and a disaggregated prefill pod that logged both LIBFABRIC and UCX
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated")
    c.experiment("disagg", "disaggregated")
    c.compare("disagg-vs-agg", "agg", "disagg", "q1,q4")
    c.sweep("agg", "aggregated", 3, {k: figures(v) for k, v in LOADS.items()})
    c.sweep("disagg", "disaggregated", 3, {k: figures(v * 0.6, kv_transfer_ms=4.0) for k, v in LOADS.items()})
    c.network("disagg", engine="eks", nixl_backends={"disagg-p0": ["LIBFABRIC", "UCX"], "disagg-d0": ["LIBFABRIC"]})
    got = answers(c)
    # Then no direction is stated, and the reason is named
    for key in ("q1", "q4"):
        assert "**Verdict (SIMULATED) (inconclusive):** disagg vs agg, concurrency-sweep ISL 1024/OSL 128: " \
               "inconclusive (transfer path unverified)" in got[key], got[key]
        assert not DIRECTIONAL.search(verdict(got[key])), key
        assert "several backends logged" in got[key] and "disagg-p0: LIBFABRIC, UCX" in got[key]


def test_a_pair_on_different_gpu_kinds_answers_no_transfer_question(tmp_path: Path) -> None:
    # Given an A100 aggregated baseline and a disaggregated A100 + L40S experiment, recorded (by an older campaign)
    # as answering q4 and h1: its TTFT gap mixes the transfer with the GPU kinds
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated")
    c.experiment("het", "disaggregated", gpu_kind="L40S-48GB")
    c.modelled("het")
    c.compare("hetero", "agg", "het", "q4,h1,h4", differs="mode,gpu_kinds,workers")
    c.sweep("agg", "aggregated", 3, {1: figures(100.0)})
    c.sweep("het", "disaggregated", 3, {1: figures(140.0, kv_transfer_ms=30.0)})
    got = answers(c)
    for key in ("q4", "h1"):
        assert verdict(got[key]).startswith("not measured"), key
        assert ("comparison hetero (het vs agg) not used for " + key.upper() + ": its sides run on different GPU "
                "kinds") in got[key]


def test_h4_is_not_comparable_when_a_side_fails_its_quality_gate(tmp_path: Path) -> None:
    # Given a heterogeneous experiment that buys 50 % more goodput per dollar-hour, but fails its quality gate
    c = Campaign(tmp_path / "lake", simulated=False)
    c.experiment("agg", "aggregated", price=30.0)
    c.experiment("het", "disaggregated", price=20.0, gpu_kind="L40S-48GB")
    c.modelled("het")
    c.compare("hetero", "agg", "het", "h4", differs="mode,gpu_kinds,workers")
    c.sweep("agg", "aggregated", 3, {1: figures(100.0), 4: figures(120.0)})
    c.sweep("het", "disaggregated", 3, {1: figures(100.0), 4: figures(120.0)})
    for exp, score, gate in (("agg", (0.92, 0.99), "passed"), ("het", (0.40, 0.62), "failed")):
        c.add("quality", *({"campaign_id": c.cid, "experiment": exp, "question_id": f"q{i}", "question_index": i,
                            "correct": i < 10, "min_score": 0.8, "gate": gate, "simulated": False,
                            "kind": "arithmetic", "score_low": score[0], "score_high": score[1]} for i in range(20)))
    h4 = answers(c)["h4"]
    assert "(inconclusive)" in h4
    assert verdict(h4).startswith("het vs agg: not comparable (het's quality gate failed (score 0.5, threshold 0.8)): "
                                  "goodput per $/h shown, not judged")
