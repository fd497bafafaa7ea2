"""The statistics at every level the world varies: the between-deployment component (measured from the deployments'
shared offsets, or the floor assumed with one deployment), SLO attainment judged on runs rather than pooled
requests, the search allowing for the run spread, and the smallest effect a family could have seen."""

from __future__ import annotations

import math
import random

import pytest
import scipy.stats as st

from benchctl.analysis.components import block_components, satterthwaite, spread_pct, within_components
from benchctl.analysis.effects import Figure, Obs, Point, adjust, effects
from benchctl.analysis.inference import NO_PRIOR
from benchctl.analysis.regimes import MISSED, UNDETERMINED, WITHIN, Attainment, RegimeComparison
from benchctl.analysis.search import Measured, next_load, supported
from benchctl.analysis.verdicts import HIGHER, INCONCLUSIVE, LOWER, Settings
from benchctl.report.levels import detectable

TTFT = Figure("ttft_p50_ms", "TTFT p50", "ms", True)
NO_FLOOR = Settings(deployment_spread_pct=0.0)


def _obs(values: list[float], unit: str | None = None) -> tuple[Obs, ...]:
    return tuple(Obs(v, unit=unit) for v in values)


# ----------------------------------------------------------------------------------------- the components


def test_the_between_deployment_component_is_the_deployments_shared_offset_with_their_degrees_of_freedom() -> None:
    # Given two deployments offset by -+10 % (log) at every one of 6 points, each with a little noise of its own
    rng = random.Random(1)
    cells = [{"d1": [math.log(100.0 * (p + 1)) - 0.1 + rng.gauss(0, 0.01)],
              "d2": [math.log(100.0 * (p + 1)) + 0.1 + rng.gauss(0, 0.01)]} for p in range(6)]
    c = block_components(cells, floor2=0.0)
    # Then the offsets' variance (0.02 = 0.1^2 + 0.1^2 over 1 df) is measured, with 1 degree of freedom (two
    # deployments: one number each, however many points), the residual small and from the points
    assert c.blocks == 2 and c.between_df == 1.0 and c.measured == pytest.approx(0.02, rel=0.15)
    assert all(v < 0.001 for v, _ in c.residual.values()) and c.dominant.startswith("between deployments")
    # a floor above what was measured is used, and taken as known
    floored = block_components(cells, floor2=0.05)
    assert floored.between == 0.05 and math.isinf(floored.between_df) and floored.floor_binds
    # one deployment: the floor is the between component, assumed; the repeats' variance over their count beside it
    one = within_components([{"d": [1.0, 1.1, 0.9]}], floor2=0.0025, repeats_prior=NO_PRIOR)
    assert one.blocks == 1 and one.measured is None and one.between == 0.0025
    assert one.residual[0] == (pytest.approx(0.01 / 3), 2)
    assert spread_pct(math.log1p(0.05) ** 2) == pytest.approx(5.0)
    assert satterthwaite([(1.0, math.inf), (1.0, 4.0)]) == pytest.approx(16.0)


def test_with_one_deployment_the_assumed_spread_widens_every_interval_by_its_variance() -> None:
    # Given -8 % at one point, 5 tight repeats per side (1 % noise): a direction with deployments interchangeable
    base, treat = [100.0, 101.0, 99.0, 100.5, 99.5], [92.0, 93.0, 91.0, 92.5, 91.5]
    sure = effects(TTFT, [Point("c=1", 1.0, _obs(base), _obs(treat))], NO_FLOOR)
    adjust(sure.effects, NO_FLOOR)
    assert sure.effects[0].outcome == LOWER
    # with the default 5 % between deployments assumed (one deployment per side: not in the repeats' spread)
    floored = effects(TTFT, [Point("c=1", 1.0, _obs(base), _obs(treat))], Settings())
    adjust(floored.effects, Settings())
    c = floored.effects[0]
    assert c.outcome == INCONCLUSIVE and c.se is not None and sure.effects[0].se is not None
    assert c.se ** 2 == pytest.approx(sure.effects[0].se ** 2 + 2 * math.log1p(0.05) ** 2)
    assert "between deployments 5.00 % (assumed: comparison.deployment_spread_pct, one deployment)" in \
        floored.components_text()


def test_two_deployments_per_side_judge_the_mode_on_the_deployments_means() -> None:
    # Given at 8 points both modes the same, but the treatment's two deployments happened to land 13 % faster than
    # the baseline's (the world's level: a deployment's offset shared by its repeats and loads), two repeats on each
    rng = random.Random(3)
    offsets = {"b1": -0.02, "b2": 0.0, "t1": -0.15, "t2": -0.13}
    points = []
    for p in range(8):
        def side(units: tuple[str, str], p: int = p) -> tuple[Obs, ...]:
            return tuple(Obs(100.0 * (p + 1) * math.exp(offsets[u] + rng.gauss(0, 0.01)), key=(), unit=u)
                         for u in units for _ in range(2))
        points.append(Point(f"c={p}", float(p), side(("b1", "b2")), side(("t1", "t2"))))
    block = effects(TTFT, points, NO_FLOOR)
    adjust(block.effects, NO_FLOOR)
    # Then the between-deployment spread is measured on each side, the effect's degrees of freedom come from the
    # deployments (2 per side: about 2), and no direction is stated from two deployments' offsets
    assert set(block.components) == {"base", "treat"} and block.deployments == 2
    assert all(c.df is not None and c.df < 5 for c in block.effects)
    assert not any(c.outcome in (LOWER, HIGHER) for c in block.effects)
    # judged as if the repeats were independent (every repeat its own deployment: no level), it would be
    flat = [Point(pt.where, pt.load, tuple(Obs(o.value) for o in pt.base), tuple(Obs(o.value) for o in pt.treat))
            for pt in points]
    naive = effects(TTFT, flat, NO_FLOOR)
    adjust(naive.effects, NO_FLOOR)
    assert any(c.outcome == LOWER for c in naive.effects)


# ----------------------------------------------------------------------------------------- attainment on runs


def test_attainment_is_judged_on_its_runs_spread_not_on_the_pooled_requests() -> None:
    # Given three runs of 2,000 requests at a load, attainment 0.93, 0.97 and 0.92 (runs vary more than coin flips)
    runs = ((1860.0, 2000.0, "d"), (1940.0, 2000.0, "d"), (1840.0, 2000.0, "d"))
    pooled = Attainment(64, 5640.0, 6000.0, repeats=3)
    by_runs = Attainment(64, 5640.0, 6000.0, repeats=3, runs=runs)
    # Then the pooled Wilson bound says within (94 % of 6,000 coin flips), the runs' spread does not
    assert pooled.judged(0.9, 0.975)[0] == WITHIN
    state, low, high = by_runs.judged(0.9, 0.975)
    assert state == UNDETERMINED and low < 0.9 < high
    # the runs' own t interval on their empirical logits (three runs: 2 df)
    logits = [math.log((g + 0.5) / (n - g + 0.5)) for g, n, _ in runs]
    m, s = sum(logits) / 3, st.tstd(logits)
    assert low == pytest.approx(1 / (1 + math.exp(-(m - st.t.ppf(0.975, 2) * s / math.sqrt(3)))), rel=1e-6)
    # a load every run shows missing is missed; a certain miss (every request failed) stays one
    assert Attainment(128, 300.0, 6000.0, runs=((100.0, 2000.0, "d"),) * 3).judged(0.9, 0.975)[0] == MISSED
    assert Attainment(256, 0.0, 0.0, failed_steps=1).judged(0.9, 0.975)[0] == MISSED


def test_with_one_deployment_per_side_the_limits_must_separate_by_what_two_deployments_offsets_reach() -> None:
    def side(edge: float) -> tuple[Attainment, ...]:
        out = []
        for c in (100, 110, 121, 133):
            good = 1990.0 if c <= edge else 1000.0
            out.append(Attainment(c, 3 * good, 6000.0, repeats=3, runs=tuple((good, 2000.0, "d") for _ in range(3))))
        return tuple(out)

    # the treatment within one 10 % step further than the baseline, both certain at every load
    sure = RegimeComparison("x", side(110), side(121), 0.9)
    sure.decide(sure.p is not None and sure.p <= 0.05, 0.05)
    assert sure.outcome == HIGHER
    spread = RegimeComparison("x", side(110), side(121), 0.9, spread_pct=5.0)
    spread.decide(spread.p is not None and spread.p <= 0.05, 0.05)
    assert spread.outcome == INCONCLUSIVE and "two deployments' speed offsets reach at this level" in spread.reason
    assert spread.margin(0.05) == pytest.approx(math.exp(st.norm.ppf(0.975) * math.sqrt(2) * math.log(1.05)))


# ----------------------------------------------------------------------------------------- the search


def test_the_search_allows_for_the_run_spread_and_stops_at_the_resolution_it_supports() -> None:
    # one run of 3,000 requests at 92 %: within as independent coin flips, not with a run spread of 0.3
    m = Measured(512, 2760, 3000)
    assert m.state(0.9, 0.975) == WITHIN and m.state(0.9, 0.975, spread=0.3) == UNDETERMINED
    # two loads 20 % apart whose attainments differ by less than two runs of one load may: located there
    pts = [Measured(16, 2990, 3000), Measured(500, 2910, 3000), Measured(600, 2760, 3000), Measured(1024, 100, 3000)]
    finest = supported(pts, 500, 600, 0.975, 0.3)
    assert finest is not None and finest >= 600 / 500
    nxt = next_load(pts, target=0.9, confidence=0.975, resolution=0.05, spread=0.3)
    assert nxt.load is None and nxt.located and nxt.why.startswith("located to the resolution the run-to-run spread")
    # without a spread allowed for, it bisects on
    assert next_load(pts, target=0.9, confidence=0.975, resolution=0.05).load is not None


# ----------------------------------------------------------------------------------------- what it could have seen


def test_an_answer_says_the_smallest_effect_its_tests_would_have_found() -> None:
    pts = [Point(f"c={i}", float(i), _obs([100.0, 104.0, 97.0]), _obs([101.0, 98.0, 103.0])) for i in range(4)]
    block = effects(TTFT, pts, Settings())
    adjust(block.effects, Settings())
    text = detectable(block.effects, Settings())
    assert text.startswith("the smallest effect its tests would have found with 80 % power, at the family's first "
                           "level: TTFT p50 +/-") and "(median over 4 tests)" in text
    worse = effects(TTFT, [Point("c=1", 1.0, _obs([100.0, 130.0, 70.0]), _obs([100.0, 131.0, 71.0]))], Settings())
    adjust(worse.effects, Settings())
    assert float(detectable(worse.effects, Settings()).split("+/-")[1].split(" %")[0]) > float(
        text.split("+/-")[1].split(" %")[0])
    assert detectable([], Settings()) == ""
