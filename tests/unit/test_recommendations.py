"""The report's Recommendations on made-up campaigns (real lake files, the real views, the rendered Markdown):
each of the plan's four scenarios comes out confirmed, refuted and inconclusive in turn from a lake built for it,
"not measured" when the campaign did not measure it, and a crossover the data reveals is named."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from benchctl.analysis.verdicts import Settings
from benchctl.local.report import render_report
from tests.unit.synthetic_lake import Campaign
from tests.unit.test_answers import LOADS, compared, figures, two_modes

LOW, MULTI, HIGH, COST = ("single model, fewer than 8 concurrent requests", "multi-turn with a high cache hit rate",
                          "32+ concurrent requests under a strict SLA", "cost first")


def recommendations(c: Campaign) -> dict[str, dict[str, str]]:
    """{scenario: its row} of the rendered report's Recommendations table, as a reader sees it."""
    md = render_report(c.write().root, c.cid, "md")
    section = html.unescape(re.sub(r"\\([\\`*_\[\]|~])", r"\1", md[md.index("## Recommendations"):
                                                                   md.index("## Answers")]))
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    head = [h.strip() for h in lines[0].strip("|").split("|")]
    rows = [dict(zip(head, (x.strip() for x in ln.strip("|").split("|")), strict=True)) for ln in lines[2:]]
    return {r["scenario"]: r for r in rows}


def _sweep(tmp_path: Path, repeats: int, disagg: dict[int, float], loads: dict[int, float] = LOADS,
           **kw: Any) -> dict[str, dict[str, str]]:
    return recommendations(two_modes(tmp_path, repeats, disagg, loads=loads, **kw))


def _scaled(factor: dict[int, float], loads: dict[int, float] = LOADS) -> dict[int, float]:
    return {k: v * factor.get(k, 1.0) for k, v in loads.items()}


# ------------------------------------------------------------------------------------- fewer than 8 requests


@pytest.mark.parametrize(("disagg", "repeats", "outcome", "recommended"), [
    ({1: 1.4, 4: 1.4}, 3, "confirmed", "aggregated"),  # disaggregation 40 % slower below c=8
    ({1: 0.6, 4: 0.6}, 3, "refuted", "disaggregated"),  # 40 % faster
    ({1: 0.6, 4: 0.6}, 1, "inconclusive", ""),  # the same, one repeat per side: nothing decided
    ({1: 1.4, 4: 0.6}, 3, "inconclusive", ""),  # the two loads disagree
])
def test_the_low_load_scenario_follows_the_decided_ttft_tests_below_8(tmp_path: Path, disagg: dict[int, float],
                                                                     repeats: int, outcome: str, recommended: str
                                                                     ) -> None:
    got = _sweep(tmp_path, repeats, _scaled(disagg))[LOW]
    assert (got["outcome"], got["recommended"]) == (outcome, recommended), got
    assert "c=1" in got["evidence"] and "c=4" in got["evidence"] and "c=16" not in got["evidence"], got
    if repeats == 1:
        assert got["why"] == "no test decided: one repeat per side: no interval", got


def test_no_practical_difference_at_low_load_confirms_the_simpler_mode(tmp_path: Path) -> None:
    # Given both modes within 1 % of each other below c=8, 5 repeats, 0.5 % noise, and deployments stated to vary by
    # 1 % (comparison.deployment_spread_pct; at the default 5 % no interval of one deployment per side can lie within
    # +/-5 %): every interval inside +/-5 %
    got = _sweep(tmp_path, 5, _scaled({1: 1.01, 4: 0.99}), noise=0.005,
                 settings=Settings(deployment_spread_pct=1.0))[LOW]
    assert (got["outcome"], got["recommended"]) == ("confirmed", "aggregated"), got
    assert got["why"].startswith("no practical difference below c=8: every interval lies within the practical "
                                 "threshold (+/-5 % of the baseline)"), got


def test_the_low_load_scenario_is_not_measured_without_a_load_below_8(tmp_path: Path) -> None:
    loads = {16: 300.0, 64: 900.0}
    got = _sweep(tmp_path, 3, _scaled({16: 0.6, 64: 0.6}, loads), loads=loads)[LOW]
    assert got["outcome"] == "not measured" and "no load below 8 concurrent requests" in got["why"], got


# ------------------------------------------------------------------------------------- 32+ requests, strict SLA


@pytest.mark.parametrize(("factor", "repeats", "outcome", "recommended"), [
    (0.6, 3, "confirmed", "disaggregated"),
    (1.4, 3, "refuted", "aggregated"),
    (0.6, 1, "inconclusive", ""),
])
def test_the_high_load_scenario_follows_the_decided_ttft_tests_from_32(tmp_path: Path, factor: float, repeats: int,
                                                                      outcome: str, recommended: str) -> None:
    got = _sweep(tmp_path, repeats, _scaled({64: factor}))[HIGH]
    assert (got["outcome"], got["recommended"]) == (outcome, recommended), got
    assert "TTFT p50 at c=64" in got["evidence"] and "c=16:" not in got["evidence"], got
    assert "SLO limits compared" in got["evidence"], got  # the spec set an SLO: its limits are read too


def test_the_high_load_scenario_is_not_measured_below_32(tmp_path: Path) -> None:
    loads = {1: 100.0, 4: 120.0, 16: 300.0}
    got = _sweep(tmp_path, 3, _scaled({16: 0.6}, loads), loads=loads)[HIGH]
    assert got["outcome"] == "not measured" and "no load of 32 or more" in got["why"], got


# ------------------------------------------------------------------------------------- multi-turn, high hit rate


def _multi_turn(tmp_path: Path, repeats: int, disagg_ttft: float, hit_rate: float = 0.7) -> dict[str, dict[str, str]]:
    c = compared(tmp_path, "q1")
    for exp, mode, ttft in (("agg", "aggregated", 100.0), ("disagg", "disaggregated", disagg_ttft)):
        for r in range(repeats):
            for variant in ("c4", "c8"):
                sid = f"multi-turn-{variant}-r{r}"
                c.step(exp, mode, "multi_turn", sid, r, variant=variant, ttft_p50_ms=ttft, output_tokens_per_s=300.0)
                c.cache(exp, mode, sid, r, c._draw(hit_rate))
    return recommendations(c)


@pytest.mark.parametrize(("ttft", "repeats", "outcome", "recommended"), [
    (60.0, 3, "confirmed", "disaggregated"),
    (140.0, 3, "refuted", "aggregated"),
    (60.0, 1, "inconclusive", ""),
])
def test_the_multi_turn_scenario_is_its_own_family_of_ttft_tests(tmp_path: Path, ttft: float, repeats: int,
                                                                 outcome: str, recommended: str) -> None:
    got = _multi_turn(tmp_path, repeats, ttft)[MULTI]
    assert (got["outcome"], got["recommended"]) == (outcome, recommended), got
    assert "multi-turn c4" in got["evidence"] and "multi-turn c8" in got["evidence"], got
    assert "hit rate 70" in got["evidence"] or "hit rate 69" in got["evidence"], got


def test_a_low_hit_rate_leaves_the_multi_turn_scenario_not_measured(tmp_path: Path) -> None:
    got = _multi_turn(tmp_path, 3, 60.0, hit_rate=0.2)[MULTI]
    assert got["outcome"] == "not measured" and got["why"].startswith("the premise does not hold"), got


# ------------------------------------------------------------------------------------- cost first


def _hetero(tmp_path: Path, repeats: int, het_price: float, het_attainment: float = 1.0) -> dict[str, dict[str, str]]:
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated", price=30.0)
    c.experiment("het", "disaggregated", price=het_price, gpu_kind="L40S-48GB")
    c.modelled("het")
    c.compare("hetero", "agg", "het", "h4", differs="mode,gpu_kinds,workers")
    c.sweep("agg", "aggregated", repeats, {1: figures(100.0), 4: figures(120.0)})
    c.sweep("het", "disaggregated", repeats, {1: figures(100.0), 4: figures(120.0, attainment=het_attainment)})
    return recommendations(c)


@pytest.mark.parametrize(("price", "attainment", "repeats", "outcome", "recommended"), [
    (20.0, 1.0, 3, "confirmed", "het"),  # the same goodput at 2/3 of the price
    (45.0, 1.0, 3, "refuted", "agg"),  # at 1.5 x the price
    (20.0, 1.0, 1, "inconclusive", ""),
    (20.0, 0.3, 3, "inconclusive", ""),  # cheaper at c=1, a third of the goodput at c=4: the loads disagree
])
def test_the_cost_scenario_follows_h4s_decided_goodput_per_dollar_hour(tmp_path: Path, price: float,
                                                                      attainment: float, repeats: int, outcome: str,
                                                                      recommended: str) -> None:
    got = _hetero(tmp_path, repeats, price, attainment)[COST]
    assert (got["outcome"], got["recommended"]) == (outcome, recommended), got
    assert got["evidence"].startswith("H4 (SLO-meeting requests/s per $/h): het vs agg:"), got


def test_a_campaign_without_every_scenario_says_which_it_did_not_measure(tmp_path: Path) -> None:
    # Given a campaign of two modes at c=16 only, no multi-turn workload and no heterogeneous comparison
    loads = {16: 300.0}
    got = _sweep(tmp_path, 3, _scaled({16: 0.6}, loads), loads=loads)
    assert {k: r["outcome"] for k, r in got.items()} == {LOW: "not measured", MULTI: "not measured",
                                                        HIGH: "not measured", COST: "not measured"}
    assert all(r["why"] for r in got.values())


def test_a_crossover_the_data_reveals_is_a_row_of_its_own(tmp_path: Path) -> None:
    # Given disaggregation slower at c=1 and c=4 (+30 %) and faster from c=16 on (-30 %)
    got = _sweep(tmp_path, 3, {1: 130.0, 4: 156.0, 16: 210.0, 64: 630.0})
    cross = [r for k, r in got.items() if k.startswith("crossover load")]
    assert len(cross) == 1 and cross[0]["recommended"] == "aggregated up to c=4, disaggregated from c=16", cross
    assert got[LOW]["outcome"] == "confirmed" and got[HIGH]["outcome"] == "confirmed", got
