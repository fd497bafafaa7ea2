"""The verdict rules (benchctl.verdicts) held to scipy's own statistics, and the fabric check
(benchctl.fabric) over what the engines record: a direction only where the evidence carries one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import scipy.stats as st

from benchctl.fabric import AS_SPECIFIED, DIFFERS, NOT_OBSERVED, fabric_check
from benchctl.verdicts import (
    HIGHER,
    INCONCLUSIVE,
    LOWER,
    Compared,
    Sample,
    Settings,
    compare,
    crossovers,
    fit_line,
    mean_interval,
    slo_regime,
    slope_difference,
    t_quantile,
    welch,
)

S = Settings()


@pytest.mark.parametrize("p", [0.8, 0.9, 0.95, 0.975, 0.995, 0.9995, 0.05])
@pytest.mark.parametrize("df", [1, 1.5, 2, 3, 4.7, 10, 30, 1000])
def test_the_t_quantile_is_scipys(p: float, df: float) -> None:
    assert t_quantile(p, df) == pytest.approx(st.t.ppf(p, df), rel=1e-9)


def test_the_t_quantile_refuses_what_has_none() -> None:
    for p, df in ((0.0, 3), (1.0, 3), (0.9, 0)):
        with pytest.raises(ValueError, match="t_quantile"):
            t_quantile(p, df)


def test_welch_interval_is_scipys() -> None:
    rng = random.Random(3)
    for _ in range(20):
        a = [rng.gauss(100, 5) for _ in range(rng.randint(2, 6))]
        b = [rng.gauss(90, 15) for _ in range(rng.randint(2, 6))]
        iv = welch(Sample(tuple(a)), Sample(tuple(b)), 0.9)
        ref = st.ttest_ind(b, a, equal_var=False).confidence_interval(0.9)
        assert iv is not None and (iv.low, iv.high) == pytest.approx((ref.low, ref.high), rel=1e-9)
    m = mean_interval(Sample((1.0, 2.0, 4.0)), 0.95)
    ref = st.t.interval(0.95, 2, loc=7 / 3, scale=st.sem([1.0, 2.0, 4.0]))
    assert m is not None and (m.low, m.high) == pytest.approx(ref, rel=1e-9)


def test_the_fit_and_its_slope_interval_are_scipys() -> None:
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
    diff = slope_difference(fit, other, 0.95)
    assert diff is not None and diff.low < other.slope - fit.slope < diff.high < 0


def test_one_repeat_per_side_is_never_directional() -> None:
    c = compare("TTFT p50", "ms", Sample((100.0,)), Sample((50.0,)), S, lower_is_better=True)
    assert (c.outcome, c.reason) == (INCONCLUSIVE, "one repeat per side: no interval")
    assert c.delta_text() == "-50.00 ms (-50.00 %), no interval"
    c = compare("TTFT p50", "ms", Sample((100.0, 101.0)), Sample((50.0,)), S, lower_is_better=True)
    assert c.outcome == INCONCLUSIVE and "at least 2 per side" in c.reason


def test_a_clear_difference_is_directional_with_its_interval() -> None:
    c = compare("TTFT p50", "ms", Sample((100.0, 102.0, 98.0)), Sample((50.0, 51.0, 49.0)), S, lower_is_better=True)
    assert c.outcome == LOWER and c.better == "treatment" and c.interval is not None
    assert c.interval.low < -50.0 < c.interval.high < 0
    assert c.text().startswith("lower: -50.00 ms (-50.00 %), 95% CI [")
    t = compare("output tokens/s", "tok/s", Sample((100.0, 102.0, 98.0)), Sample((50.0, 51.0, 49.0)), S,
                lower_is_better=False)
    assert t.outcome == LOWER and t.better == "baseline"


def test_a_difference_inside_the_threshold_or_the_noise_is_inconclusive() -> None:
    # +2 % with a tight interval: real, but within the practical threshold of 5 %
    c = compare("x", "ms", Sample((100.0, 100.1, 99.9)), Sample((102.0, 102.1, 101.9)), S, lower_is_better=True)
    assert c.outcome == INCONCLUSIVE and c.reason == "the interval does not clear the practical threshold of +/-5 %"
    assert c.interval is not None and c.interval.low > 0
    # the same difference at a 1 % threshold is directional
    assert compare("x", "ms", c.base, c.treat, Settings(practical_threshold_pct=1.0),
                   lower_is_better=True).outcome == HIGHER
    # +0.01 ms on noisy repeats: the interval includes 0
    n = compare("x", "ms", Sample((100.0, 110.0, 90.0)), Sample((100.01, 110.01, 90.01)), S, lower_is_better=True)
    assert (n.outcome, n.reason) == (INCONCLUSIVE, "the interval includes 0")


def test_a_tail_percentile_needs_enough_requests_per_step() -> None:
    b, t = Sample((100.0, 101.0, 99.0), min_requests=40), Sample((50.0, 51.0, 49.0), min_requests=400)
    c = compare("TTFT p99", "ms", b, t, S, lower_is_better=True, tail=True)
    assert c.outcome == INCONCLUSIVE and c.reason.startswith("too few samples for a tail percentile: 40 requests")
    enough = compare("TTFT p99", "ms", Sample(b.values, 100), t, S, lower_is_better=True, tail=True)
    assert enough.outcome == LOWER


def test_slo_regime_names_the_limit_between_two_loads() -> None:
    att = {1.0: Sample((1.0, 1.0)), 4.0: Sample((0.95, 0.93)), 16.0: Sample((0.6, 0.7)), 64.0: Sample((0.1, 0.0))}
    reg = slo_regime(att, 0.9)
    assert reg is not None and (reg.highest_within, reg.next_missed) == (4.0, 16.0)
    assert reg.text() == "c=4 (c=16 misses it: the limit lies between c=4 and c=16)"
    never = slo_regime({1.0: Sample((1.0,)), 8.0: Sample((0.99,))}, 0.9)
    assert never is not None and never.text().endswith("the sweep never left the SLO (the limit is above c=8)")
    none = slo_regime({1.0: Sample((0.5,))}, 0.9)
    assert none is not None and none.text().startswith("none: even c=1 misses it")


def test_a_crossover_is_where_the_directional_winner_changes() -> None:
    def at(b: float, t: float) -> Compared:
        return compare("TTFT p50", "ms", Sample((b, b * 1.01, b * 0.99)), Sample((t, t * 1.01, t * 0.99)), S,
                       lower_is_better=True)

    per = [(1.0, at(100, 130)), (4.0, at(120, 140)), (8.0, at(150, 151)), (16.0, at(300, 200)), (64.0, at(900, 400))]
    assert [c.better for _, c in per] == ["baseline", "baseline", None, "treatment", "treatment"]
    assert crossovers(per) == [(4.0, 16.0, "baseline", "treatment")]
    assert crossovers(per[:2]) == []


# ------------------------------------------------------------------------------------ the fabric check

DISAGG = {"experiment": "disagg", "mode": "disaggregated", "nixl_backend": "LIBFABRIC",
          "kv_transfer_bandwidth_gbps": 9.6, "kv_bytes_per_token": 98304}


def test_a_worker_that_logged_another_nixl_backend_makes_the_experiment_invalid() -> None:
    # what EksServing.network records: the backend each prefill/decode pod logged instantiating
    seen = {"engine": "eks", "nixl_backends": {"p-0": ["LIBFABRIC"], "d-0": ["UCX"]}}
    f = fabric_check(DISAGG, seen)
    assert (f.status, f.valid) == (DIFFERS, False) and f.observed == "d-0: UCX"
    assert f.text() == "disagg is invalid: its observed KV transfer (d-0: UCX) is not the spec's (NIXL LIBFABRIC)"
    ok = fabric_check(DISAGG, {"engine": "eks", "nixl_backends": {"p-0": ["LIBFABRIC"], "d-0": ["LIBFABRIC"]}})
    assert (ok.status, ok.valid) == (AS_SPECIFIED, True)
    silent = fabric_check(DISAGG, {"engine": "eks", "nixl_backends": {"p-0": ["LIBFABRIC"], "d-0": ["none logged"]}})
    assert (silent.status, silent.valid) == (NOT_OBSERVED, True) and "d-0" in silent.observed
    assert fabric_check(DISAGG, None).status == NOT_OBSERVED
    assert fabric_check({**DISAGG, "mode": "aggregated"}, None).valid


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
