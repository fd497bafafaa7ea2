"""The report's Answers on made-up campaigns: real lake files (tests/unit/synthetic_lake.py), the real views
and the rendered report. Identical distributions give "inconclusive" everywhere; a clear difference gives its
direction with the interval; a crossover is named at the right load; a disaggregated experiment whose workers
used another transfer backend is excluded and named; one repeat per side is never directional."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from benchctl.local.report import render_report
from tests.unit.synthetic_lake import Campaign

LOADS = {1: 100.0, 4: 120.0, 16: 300.0, 64: 900.0}  # the aggregated TTFT p50 (ms) at each concurrency
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


def verdict(block: str) -> str:
    m = re.search(r"\*\*Verdict[^*]*:\*\* (.*)", block)
    assert m, block
    return m.group(1)


def two_modes(tmp_path: Path, repeats: int, disagg_ttft: dict[int, float], **kw: Any) -> Campaign:
    """An aggregated and a disaggregated experiment, compared, each with a concurrency sweep."""
    c = Campaign(tmp_path / "lake", **kw)
    c.experiment("agg", "aggregated")
    c.experiment("disagg", "disaggregated")
    c.compare("disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3")
    c.sweep("agg", "aggregated", repeats, {k: figures(v) for k, v in LOADS.items()})
    c.sweep("disagg", "disaggregated", repeats, {k: figures(v) for k, v in disagg_ttft.items()})
    return c


def test_identical_distributions_in_both_modes_are_inconclusive_everywhere(tmp_path: Path) -> None:
    # Given every workload the answers read, drawn from the same distributions on both sides of every comparison
    c = two_modes(tmp_path, 3, LOADS)
    for name, mode, offload, kind in (("disagg-off", "disaggregated", True, "A100-40GB"),
                                      ("disagg-het", "disaggregated", False, "L40S-48GB")):
        c.experiment(name, mode, kv_offload=offload, gpu_kind=kind)
        c.sweep(name, mode, 3, {k: figures(v) for k, v in LOADS.items()})
    c.compare("offload", "disagg", "disagg-off", "q2,h2", differs="kv_offload")
    c.compare("hetero", "agg", "disagg-het", "h4", differs="mode,gpu_kinds,workers")
    for exp, mode in (("agg", "aggregated"), ("disagg", "disaggregated"), ("disagg-off", "disaggregated")):
        for r in range(3):
            for ratio in (0.0, 0.5, 1.0):
                sid = f"prefix-p{int(ratio * 100)}-r{r}"
                c.step(exp, mode, "prefix_cache", sid, r, prefix_ratio=ratio, variant=f"p{int(ratio * 100)}",
                       ttft_p50_ms=100.0)
                c.cache(exp, mode, sid, r, c._draw(0.1 + 0.8 * ratio) if ratio else 0.0, offload_blocks=50.0)
            sid = f"multi-turn-r{r}"
            c.step(exp, mode, "multi_turn", sid, r, variant="c4", ttft_p50_ms=80.0, output_tokens_per_s=300.0)
            c.cache(exp, mode, sid, r, c._draw(0.6), offload_blocks=50.0, preemptions=c._draw(10.0))
    got = answers(c)
    # Then every answer is inconclusive (or not measured), and says why
    assert sorted(got) == ["h1", "h2", "h3", "h4", "q1", "q2", "q3", "q4"]
    for key, block in got.items():
        v = verdict(block)
        assert not DIRECTIONAL.search(v), f"{key}: {v}"
        assert "inconclusive" in v or v.startswith("not measured"), f"{key}: {v}"
    assert "the interval includes 0" in verdict(got["q1"])
    assert "(inconclusive)" in got["q2"] and "(inconclusive)" in got["h2"] and "(inconclusive)" in got["h4"]


def test_a_clear_difference_gives_its_direction_with_the_interval(tmp_path: Path) -> None:
    # Given a disaggregated TTFT p50 40 % below the aggregated one at every load, 3 repeats, 1 % noise
    got = answers(two_modes(tmp_path, 3, {k: v * 0.6 for k, v in LOADS.items()}))
    q1 = verdict(got["q1"])
    # Then Q1 says lower, at each load, with an interval around -40 % that clears the threshold
    found = re.findall(r"c=(\d+) \(-[\d.,]+ ms \((-[\d.]+) %\), 95% CI \[(-[\d.]+), (-[\d.]+)\] %\)",
                       q1.split("TTFT p50: lower at ", 1)[1].split(". ", 1)[0])
    assert [int(load) for load, *_ in found] == list(LOADS)
    for _, est, lo, hi in found:
        assert float(lo) < -40.0 < float(hi) < -5.0 and float(lo) <= float(est) <= float(hi)
    itl = q1.split("ITL p50: ", 1)[1].split(". ", 1)[0]  # what did not change is not called a change
    assert itl.startswith("inconclusive at c=1") and "lower at" not in itl and "higher at" not in itl


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
    c = two_modes(tmp_path, 3, {k: v * 0.6 for k, v in LOADS.items()})
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
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated")
    c.experiment("disagg", "disaggregated")
    c.compare("disagg-vs-agg", "agg", "disagg", "q1")
    c.sweep("agg", "aggregated", 3, {4: figures(100.0)})
    c.sweep("disagg", "disaggregated", 2, {4: figures(60.0)})
    # a third disaggregated repeat with 5 of 40 requests failed (and a TTFT that would hide the difference)
    c.step("disagg", "disaggregated", "concurrency_sweep", "sweep-i1024-c4-r2", 2, errors=5, concurrency=4, isl=1024,
           osl=128, variant="c4", **figures(500.0))
    got = answers(c)
    assert "disagg/sweep-i1024-c4-r2: error rate 0.125 above max_error_rate 0.01" in got["q1"]
    assert "TTFT p50: lower at c=4" in verdict(got["q1"])
    assert "repeats agg 3, disagg 2 (the smaller, 2, bounds the evidence)" in got["q1"]


@pytest.mark.parametrize(("transfer_ms", "said"), [
    (28.0, "yes at the lightest load (c=1): disaggregated TTFT p50 is higher"),
    (2.0, "not the transfer at the lightest load (c=1)"),
])
def test_the_transfer_cancels_the_benefit_only_when_it_explains_the_gap(tmp_path: Path, transfer_ms: float,
                                                                        said: str) -> None:
    # Given disaggregation 28 ms slower at c=1, with a KV transfer of 28 ms, or of 2 ms
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated")
    c.experiment("disagg", "disaggregated")
    c.compare("disagg-vs-agg", "agg", "disagg", "q4,h1")
    c.sweep("agg", "aggregated", 3, {1: figures(100.0)})
    c.sweep("disagg", "disaggregated", 3, {1: figures(128.0, kv_transfer_ms=transfer_ms)})
    got = answers(c)
    assert said in verdict(got["q4"])
    if transfer_ms < 10:
        assert "explains only about" in verdict(got["q4"]) and "the rest is scheduling and queueing" in verdict(got["q4"])


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
    h2 = verdict(answers(c)["h2"])
    assert h2.startswith("agg-kv vs agg (router round-robin -> kv): recomputation lower at multi-turn c4 (-0.4")
    assert "preemptions inconclusive at multi-turn c4 (the interval includes 0)" in h2


def test_h4_is_goodput_per_dollar_hour_at_each_load(tmp_path: Path) -> None:
    # Given a heterogeneous experiment at 2/3 of the baseline's $/h, with the same goodput up to c=4 and a third
    # of it at c=16 (past its SLO)
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated", price=30.0)
    c.experiment("het", "disaggregated", price=20.0, gpu_kind="L40S-48GB")
    c.compare("hetero", "agg", "het", "h4", differs="mode,gpu_kinds,workers")
    c.sweep("agg", "aggregated", 3, {1: figures(100.0), 4: figures(120.0), 16: figures(300.0, attainment=0.9)})
    c.sweep("het", "disaggregated", 3, {1: figures(100.0), 4: figures(120.0), 16: figures(300.0, attainment=0.3)})
    h4 = verdict(answers(c)["h4"])
    assert re.search(r"higher at c=1 \(\+[\d.]+ req/s per \$/h \(\+50\.00 %\)", h4), h4
    assert re.search(r"lower at c=16 \(-[\d.]+ req/s per \$/h \(-50\.00 %\)", h4), h4


def test_offload_must_be_used_before_it_is_credited_with_a_saving(tmp_path: Path) -> None:
    c = Campaign(tmp_path / "lake")
    c.experiment("disagg", "disaggregated")
    c.experiment("disagg-off", "disaggregated", kv_offload=True)
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
    assert re.search(r"the treatment's slope minus the baseline's: lower: -0\.3 \(-33\.33 %\), 95% CI \[-3[\d.]+, -3[\d.]+\] %",
                     verdict(got)), verdict(got)


def test_a_comparison_without_the_workload_an_answer_reads_is_not_measured(tmp_path: Path) -> None:
    c = two_modes(tmp_path, 0, {})  # compared, but no concurrency sweep ran
    for exp, mode in (("agg", "aggregated"), ("disagg", "disaggregated")):
        c.step(exp, mode, "prefix_cache", "prefix-p0-r0", 0, prefix_ratio=0.0, ttft_p50_ms=100.0)
    got = answers(c)
    for key in ("q1", "q4", "h1"):
        assert verdict(got[key]) == ("not measured: disagg vs agg: not measured (no valid concurrency-sweep step on "
                                     "both sides)"), key
        assert "(not measured)" in got[key]
