"""The verdict rules, held to scipy's own statistics where it has them: a point's effect on the log scale (paired
or Welch), what a point cannot be judged on, the SLO regime from every attempted step with Wilson bounds, and
the two sides' limits compared; and the fabric check (benchctl.analysis.fabric) by what carried the KV."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import scipy.stats as st

from benchctl.analysis.effects import (
    COUNT,
    DESCRIPTIVE,
    Figure,
    Obs,
    Point,
    adjust,
    crossovers,
    describe,
    effects,
)
from benchctl.analysis.fabric import AS_SPECIFIED, DIFFERS, NOT_OBSERVED, fabric_check
from benchctl.analysis.regimes import MISSED, Attainment, RegimeComparison, slo_regime
from benchctl.analysis.verdicts import (
    HIGHER,
    INCONCLUSIVE,
    LOWER,
    Settings,
    fit_line,
    slope_se,
)

S = Settings(deployment_spread_pct=0.0)  # the repeats' level alone (deployments: tests/unit/test_components.py)
TTFT = Figure("ttft_p50_ms", "TTFT p50", "ms", True)


def _point(base: tuple[float, ...], treat: tuple[float, ...], where: str = "c=1", load: float = 1.0, *,
           keys: bool = False, requests: int | None = None) -> Point:
    def obs(vs: tuple[float, ...]) -> tuple[Obs, ...]:
        return tuple(Obs(v, (r, 42 + r, "sha") if keys else (), requests=requests) for r, v in enumerate(vs))

    return Point(where, load, obs(base), obs(treat))


def _one(base: tuple[float, ...], treat: tuple[float, ...], fig: Figure = TTFT, settings: Settings = S, **kw: object
         ) -> object:
    block = effects(fig, [_point(base, treat, **kw)], settings)  # type: ignore[arg-type]
    adjust(block.effects, settings)
    return block.effects[0]


def test_the_fit_and_its_slope_standard_error_are_scipys() -> None:
    pts = [(0.0, 0.02), (0.0, 0.01), (0.5, 0.41), (0.5, 0.45), (1.0, 0.88), (1.0, 0.9)]
    fit = fit_line(pts, 0.95)
    ref = st.linregress([x for x, _ in pts], [y for _, y in pts])
    assert fit is not None and (fit.slope, fit.intercept, fit.slope_se) == pytest.approx(
        (ref.slope, ref.intercept, ref.stderr), rel=1e-9)
    assert fit.slope_interval is not None and fit.slope_interval.high - fit.slope == pytest.approx(
        st.t.ppf(0.975, 4) * ref.stderr, rel=1e-9)
    assert fit_line([(0.5, 0.1), (0.5, 0.2)], 0.95) is None  # one ratio: no line
    two = fit_line([(0.0, 0.0), (1.0, 0.9)], 0.95)
    assert two is not None and two.slope_interval is None  # two points: a line, no interval
    other = fit_line([(x, y * 0.5) for x, y in pts], 0.95)
    assert other is not None
    se, df = slope_se(fit, other) or (0.0, 0.0)
    vb, vt = (fit.slope_se or 0) ** 2, (other.slope_se or 0) ** 2
    assert se == pytest.approx(math.sqrt(vb + vt)) and df == pytest.approx((vb + vt) ** 2 / (vb ** 2 / 4 + vt ** 2 / 4))


def test_a_paired_point_is_scipys_paired_t_on_the_log_ratio() -> None:
    # one point, paired by repeat (the same seed and dataset on both sides): no other cell to moderate with
    base, treat = (100.0, 110.0, 96.0, 104.0), (60.0, 70.0, 55.0, 66.0)  # 4 repeats
    block = effects(TTFT, [_point(base, treat, keys=True)], S)
    c = block.effects[0]
    logs = [math.log(t) - math.log(b) for b, t in zip(base, treat, strict=True)]
    ref = st.ttest_1samp(logs, 0.0)
    assert block.paired and c.estimate == pytest.approx(sum(logs) / 4) and c.df == pytest.approx(3)
    assert c.estimate / (c.se or 1) == pytest.approx(ref.statistic, rel=1e-9)
    adjust([c], S)
    assert c.outcome == LOWER and c.better == "treatment" and c.confidence == pytest.approx(0.95)
    lo, hi = c.change_interval or (0, 0)
    ref_lo, ref_hi = st.t.interval(0.95, 3, loc=sum(logs) / 4, scale=st.sem(logs))
    assert (lo, hi) == pytest.approx((100 * math.expm1(ref_lo), 100 * math.expm1(ref_hi)), rel=1e-9)
    assert c.text().startswith("lower: -39.75 ms (-38.96 %), 95 % CI [") and "95 % CI [" in c.text()


def test_one_repeat_per_side_is_never_directional() -> None:
    c = _one((100.0,), (50.0,))
    assert (c.outcome, c.reason) == (INCONCLUSIVE, "one repeat per side: no interval")  # type: ignore[attr-defined]
    assert c.delta_text() == "-50.00 ms (-50.00 %), no interval"  # type: ignore[attr-defined]
    c = _one((100.0, 101.0, 99.0), (50.0,))
    assert c.outcome == INCONCLUSIVE and "at least 3 per side" in c.reason  # type: ignore[attr-defined]
    # two repeats per side: a spread of one degree of freedom each is not enough for a direction
    two = _one((100.0, 101.0), (50.0, 51.0))
    assert two.outcome == INCONCLUSIVE and two.reason.endswith("at least 3 per side are needed")  # type: ignore[attr-defined]


def test_tied_repeats_never_give_a_zero_width_verdict() -> None:
    # Given two repeats per side that tie within each side: no direction (fewer than 3), and no interval of width 0
    two = _one((100.0, 100.0), (110.0, 110.0))
    assert two.outcome == INCONCLUSIVE and two.confidence is None  # type: ignore[attr-defined]
    # three that tie on a continuous figure: no measure of noise at all
    c = _one((100.0, 100.0, 100.0), (110.0, 110.0, 110.0))
    assert c.outcome == INCONCLUSIVE and c.reason.startswith("no spread")  # type: ignore[attr-defined]
    # and a small count (goodput at light load: 10 or 11 SLO-meeting requests in a 1 s step): the variance of a
    # value known to one count keeps the interval wide, so +10 % is not a direction
    good = Figure("goodput_per_s", "goodput", "req/s", False, scale=COUNT)
    block = effects(good, [Point("c=1", 1.0, tuple(Obs(10.0, exposure=1.0) for _ in range(3)),
                                 tuple(Obs(11.0, exposure=1.0) for _ in range(3)))], S)
    adjust(block.effects, S)
    g = block.effects[0]
    assert g.se is not None and g.se > 0 and g.outcome == INCONCLUSIVE
    assert g.change_interval is not None and g.change_interval[1] - g.change_interval[0] > 10


def test_a_difference_inside_the_threshold_or_the_noise_is_inconclusive() -> None:
    c = _one((100.0, 100.1, 99.9), (102.0, 102.1, 101.9))  # +2 %, tight: real, within the threshold of 5 %
    assert c.outcome == INCONCLUSIVE  # type: ignore[attr-defined]
    assert c.reason == "the interval does not clear the practical threshold of +/-5 % of the baseline"  # type: ignore[attr-defined]
    assert _one((100.0, 100.1, 99.9), (102.0, 102.1, 101.9), settings=Settings(practical_threshold_pct=1.0, deployment_spread_pct=0.0)
                ).outcome == HIGHER  # type: ignore[attr-defined]
    n = _one((100.0, 110.0, 90.0), (100.01, 110.01, 90.01))
    assert (n.outcome, n.reason) == (INCONCLUSIVE, "the interval includes 0")  # type: ignore[attr-defined]


def test_a_tail_percentile_needs_enough_requests_per_step() -> None:
    p99 = Figure("ttft_p99_ms", "TTFT p99", "ms", True, tail=True)
    few = _one((100.0, 101.0, 99.0), (50.0, 51.0, 49.0), fig=p99, requests=40)
    assert few.outcome == INCONCLUSIVE and few.reason.startswith(  # type: ignore[attr-defined]
        "too few samples for a tail percentile: 40 requests")
    assert _one((100.0, 101.0, 99.0), (50.0, 51.0, 49.0), fig=p99, requests=100).outcome == LOWER  # type: ignore[attr-defined]


def test_holm_judges_a_family_and_descriptive_figures_carry_no_verdict() -> None:
    # Given 20 points of which one differs by -30 %, the rest by nothing
    pts = [_point((100.0, 104.0, 97.0), (101.0, 98.0, 103.0), f"c={i}", float(i)) for i in range(19)]
    pts.append(_point((100.0, 104.0, 97.0), (70.0, 72.0, 68.0), "c=99", 99.0))
    block = effects(TTFT, pts, S)
    fam = adjust(block.effects, S)
    # Then the family has 20 tests, the first judged at 1 - 0.05/20, and only the real one is directional
    assert fam.size == 20 and "Holm" in fam.text()
    hit = [c for c in block.effects if c.directional]
    assert [c.where for c in hit] == ["c=99"] and hit[0].confidence == pytest.approx(1 - 0.05 / 20)
    assert all(c.confidence == pytest.approx(1 - 0.05 / 19) for c in block.effects if not c.directional)
    shown = effects(TTFT, pts, S, primary=False)
    describe(shown.effects, S)
    assert {c.outcome for c in shown.effects} == {DESCRIPTIVE} and "unadjusted" in shown.effects[-1].text()


def test_a_crossover_is_where_the_directional_winner_changes() -> None:
    loads = {1.0: (100, 130), 4.0: (120, 140), 8.0: (150, 151), 16.0: (300, 200), 64.0: (900, 400)}
    block = effects(TTFT, [_point((b, b * 1.01, b * 0.99), (t, t * 1.01, t * 0.99), f"c={c:g}", c)
                           for c, (b, t) in loads.items()], S)
    adjust(block.effects, S)
    per = [(c.load or 0.0, c) for c in block.effects]
    assert [c.better for _, c in per] == ["baseline", "baseline", None, "treatment", "treatment"]
    assert crossovers(per) == [(4.0, 16.0, "baseline", "treatment")]
    assert crossovers(per[:2]) == []


# ------------------------------------------------------------------------------------ SLO regimes


def test_the_slo_limit_is_the_load_before_the_first_shown_miss() -> None:
    loads = [Attainment(1, 400, 400), Attainment(4, 390, 400), Attainment(16, 250, 400), Attainment(64, 20, 400)]
    reg = slo_regime(loads, 0.9, 0.975)
    assert reg is not None and (reg.within, reg.missed) == (4, 16)
    assert reg.text() == ("within the SLO up to c=4; missed the SLO at c=16 (attainment 62 %); the limit lies in "
                          "[c=4, c=16)")


def test_exactly_the_target_is_not_within_and_a_recovery_after_a_miss_does_not_move_the_limit() -> None:
    # 90 % of 400 at a 90 % target: not shown within (the lower bound is below it), not shown missing either
    at = slo_regime([Attainment(1, 400, 400), Attainment(4, 360, 400)], 0.9, 0.975)
    assert at is not None and (at.within, at.missed) == (1, None)
    assert "undetermined at c=4" in at.text() and "the limit is above c=1, not located" in at.text()
    # 1.0, 0.80, 0.95, 0.50: the limit is before the first miss, and the recovery above it is named
    r = slo_regime([Attainment(1, 400, 400), Attainment(4, 320, 400), Attainment(16, 390, 400),
                    Attainment(64, 200, 400)], 0.9, 0.975)
    assert r is not None and (r.within, r.missed) == (1, 4)
    assert "the limit lies in [c=1, c=4)" in r.text() and "c=16 within again above the first miss" in r.text()


def test_an_overloaded_load_is_a_miss_with_its_error_rate_never_the_end_of_a_sweep_within_the_slo() -> None:
    # Given a side within the SLO up to c=16 whose c=64 steps lost 25 % of their requests to errors (30 % met it)
    loads = [Attainment(1, 600, 600), Attainment(4, 597, 600), Attainment(16, 590, 600),
             Attainment(64, 180, 600, errors=150)]
    reg = slo_regime(loads, 0.9, 0.975)
    assert reg is not None
    assert "missed the SLO at c=64 (attainment 30 %, error rate 25 %)" in reg.text()
    assert "never" not in reg.text() and "the highest load tried" not in reg.text()
    # a step that ended with no request completed is a certain miss
    failed = slo_regime([Attainment(1, 600, 600), Attainment(4, 0, 0, failed_steps=1)], 0.9, 0.999)
    assert failed is not None and failed.missed == 4 and failed.states[1][0] == MISSED
    assert "1 step(s) failed with no request completed" in failed.text()


def test_two_sides_limits_are_compared_by_their_brackets() -> None:
    base = (Attainment(16, 600, 600), Attainment(64, 590, 600), Attainment(256, 200, 600))
    better = (Attainment(16, 600, 600), Attainment(64, 598, 600), Attainment(256, 596, 600))
    r = RegimeComparison("ISL 1024", base, better, 0.9)
    assert r.p is not None and r.p < 1e-6
    adjust([r], S)
    assert r.outcome == HIGHER and r.directional
    same = RegimeComparison("ISL 1024", base, base, 0.9)
    adjust([same], S)
    assert same.outcome == INCONCLUSIVE and same.reason == "the brackets overlap" and same.p == 1.0


# ------------------------------------------------------------------------------------ the fabric check

DISAGG = {"experiment": "disagg", "mode": "disaggregated", "nixl_backend": "LIBFABRIC",
          "kv_transfer_bandwidth_gbps": 9.6, "kv_bytes_per_token": 98304}


def test_a_worker_that_logged_another_nixl_backend_makes_the_experiment_invalid() -> None:
    # what EksServing.network records: the backend each prefill/decode pod logged instantiating
    seen = {"engine": "eks", "nixl_backends": {"p-0": ["LIBFABRIC"], "d-0": ["UCX"]}}
    f = fabric_check(DISAGG, seen, [9.1])
    assert (f.status, f.valid) == (DIFFERS, False) and f.observed == "d-0: UCX"
    assert f.text() == "disagg is invalid: its observed KV transfer (d-0: UCX) is not the spec's (NIXL LIBFABRIC)"
    silent = fabric_check(DISAGG, {"engine": "eks", "nixl_backends": {"p-0": ["LIBFABRIC"], "d-0": ["none logged"]}},
                          [9.1])
    assert (silent.status, silent.valid, silent.verified) == (NOT_OBSERVED, True, False) and "d-0" in silent.observed
    assert fabric_check(DISAGG, None).status == NOT_OBSERVED
    assert fabric_check({**DISAGG, "mode": "aggregated"}, None).verified


def test_the_transfer_path_is_verified_by_what_carried_the_kv_not_by_what_was_instantiated() -> None:
    both = {"engine": "eks", "nixl_backends": {"p-0": ["LIBFABRIC", "UCX"], "d-0": ["LIBFABRIC"]}}
    # a worker that logged two backends: which one carried the KV is not known
    mixed = fabric_check(DISAGG, both, [9.1])
    assert (mixed.status, mixed.valid, mixed.verified) == (NOT_OBSERVED, True, False)
    assert "several backends logged" in mixed.observed and "p-0: LIBFABRIC, UCX" in mixed.observed
    one = {"engine": "eks", "nixl_backends": {"p-0": ["LIBFABRIC"], "d-0": ["LIBFABRIC"]}}
    # the right backend everywhere, but the KV moved at TCP's speed (UCX's ~1 GB/s), or was never measured
    slow = fabric_check(DISAGG, one, [0.4, 0.9])
    assert (slow.status, slow.verified) == (NOT_OBSERVED, False) and "0.9 GB/s: TCP's range" in slow.observed
    unmeasured = fabric_check(DISAGG, one, [])
    assert not unmeasured.verified and "no transfer was measured" in unmeasured.observed
    ok = fabric_check(DISAGG, one, [2.0, 8.7])  # the fastest step at EFA's speed
    assert (ok.status, ok.verified) == (AS_SPECIFIED, True) and ok.observed == "LIBFABRIC, up to 8.70 GB/s measured"


def test_a_local_worker_modelling_another_transfer_makes_the_experiment_invalid(tmp_path: Path) -> None:
    from benchctl.local.serving import LocalServing

    # the transfer model a real Dynamo 1.6.1 mocker prefill worker logged at start-up (1 GB/s, 49152 B/token)
    log = Path(__file__).resolve().parents[1] / "data" / "dynamo-1.6.1" / "mocker-prefill-startup.log"
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "prefill-0.log").write_text(log.read_text())
    state = {"deployment_id": "d", "mode": "disaggregated", "workdir": str(tmp_path), "processes": [],
             "components": [{"name": "prefill-0", "role": "prefill", "system_port": 1}]}
    seen = LocalServing(tmp_path).network(state)
    f = fabric_check(DISAGG, seen)  # the spec asked 9.6 GB/s and 98304 B/token
    assert f.status == DIFFERS and f.observed == "prefill-0: 1.0 GB/s, 49152 B/token"
    same = fabric_check({**DISAGG, "kv_transfer_bandwidth_gbps": 1.0, "kv_bytes_per_token": 49152}, seen)
    assert same.status == AS_SPECIFIED
