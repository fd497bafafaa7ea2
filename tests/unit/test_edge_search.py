"""The SLO-edge search (benchctl.analysis.search): it brackets a known edge within its resolution, stops by
itself at its budget line, and never calls a load within the SLO without the attainment to show it."""

from __future__ import annotations

import math

import pytest

from benchctl.analysis.search import Measured, bracket, located, next_load, run
from benchctl.forecast.twin import request_seconds
from benchctl.forecast.twin_profile import TimingProfile

TARGET, CONF = 0.9, 0.95


def _knee(edge: int, n: int = 400) -> object:
    """Every request within the SLO up to ``edge``, a third of them past it."""
    return lambda c: Measured(c, n if c <= edge else n // 3, n)


@pytest.mark.parametrize("edge,start", [(37, None), (600, 64), (3, 512), (1000, 1000), (4000, 16)])
def test_the_search_brackets_a_known_edge_within_its_resolution(edge: int, start: int | None) -> None:
    probes, last = run(_knee(edge), [], target=TARGET, confidence=CONF, resolution=0.10, max_probes=16, start=start)
    assert last.located, last.why
    assert last.within is not None and last.past is not None
    assert last.within <= edge < last.past
    assert last.past <= last.within * 1.10 or last.past - last.within <= 1
    # ramp x2 then bisect by ratio: about log2(edge / start) + log2(log(2) / log(1.1)) probes
    assert len(probes) <= abs(math.log2(edge / (start or 16))) + 5


def test_the_fixed_points_bracket_first_so_the_search_only_bisects() -> None:
    fixed = [Measured(512, 400, 400), Measured(1024, 100, 400)]
    probes, last = run(_knee(700), fixed, target=TARGET, confidence=CONF, resolution=0.10, max_probes=6)
    assert last.located and last.within is not None and last.past is not None
    assert 512 <= last.within <= 700 < last.past <= 1024
    assert all(512 < p.load < 1024 for p in probes) and len(probes) <= 4


def test_the_search_stops_by_itself_at_its_budget_line() -> None:
    probes, last = run(_knee(3000), [], target=TARGET, confidence=CONF, resolution=0.01, max_probes=3, start=2)
    assert len(probes) == 3 and last.load is None and not last.located
    assert "budget line of 3 probes" in last.why


def test_a_load_whose_attainment_is_not_shown_counts_as_past() -> None:
    # 9 of 10 within: the point estimate is the target, the Wilson lower bound far below it
    pts = [Measured(8, 40, 40), Measured(16, 9, 10)]
    assert bracket(pts, TARGET, CONF) == (8, 16)
    nxt = next_load(pts, target=TARGET, confidence=CONF, resolution=0.1)
    assert nxt.load == 11 and "bisect" in nxt.why


def test_a_bracket_reaching_past_the_highest_usable_load_is_bisected_below_it() -> None:
    pts = [Measured(4, 200, 200), Measured(64, 0, 200)]
    nxt = next_load(pts, target=TARGET, confidence=CONF, resolution=0.1, max_load=15)
    assert nxt.load == 8 and "out of reach" in nxt.why, nxt  # [4, 16) bisected, not [4, 64) at 16
    stop = next_load(pts, target=TARGET, confidence=CONF, resolution=0.1, max_load=4)
    assert stop.load is None and (stop.within, stop.past) == (4, 64) and "highest load the search may use" in stop.why


def test_every_load_within_ramps_up_and_every_load_past_ramps_down_to_one() -> None:
    up = next_load([Measured(64, 200, 200)], target=TARGET, confidence=CONF, resolution=0.1, max_load=100)
    assert up.load == 100
    assert next_load([Measured(100, 200, 200)], target=TARGET, confidence=CONF, resolution=0.1,
                     max_load=100).load is None
    down = next_load([Measured(4, 0, 200)], target=TARGET, confidence=CONF, resolution=0.1)
    assert down.load == 2
    assert next_load([Measured(1, 0, 200)], target=TARGET, confidence=CONF, resolution=0.1).why.startswith("past")


def test_located_needs_both_sides_of_the_edge() -> None:
    assert not located(None, 10, 0.1) and not located(10, None, 0.1)
    assert located(100, 110, 0.1) and not located(100, 111, 0.1) and located(3, 4, 0.1)


def _linear_itl_twin(a_ms: float, b_ms_per_token: float) -> TimingProfile:
    """An aggregated twin whose decode iteration is a + b x active KV tokens (exactly linear on the grid)."""
    kv = tuple(float(2 ** k) for k in range(6, 21))
    ctx = (64.0, 16384.0)
    return TimingProfile((16.0, 16384.0), (5.0, 5.0), kv, ctx,
                         tuple((a_ms + b_ms_per_token * k, a_ms + b_ms_per_token * k) for k in kv),
                         {"name": "linear-knee"}).check()


def test_on_a_twin_whose_edge_is_known_the_search_finds_it_within_its_resolution() -> None:
    # one worker, ISL 512 / OSL 64: ITL(c) = a + b x c x (isl + osl/2) + (c - 1) x prefill / osl, so the SLO's
    # 20 ms ITL is first missed at the load computed here by hand
    prof, isl, osl, slo_itl = _linear_itl_twin(4.0, 0.0002), 512, 64, 20.0
    ctx = isl + osl / 2

    def itl(c: int) -> float:
        return prof.itl_ms(c * ctx, ctx) + (c - 1) * prof.ttft_ms(isl) / osl

    edge = max(c for c in range(1, 4097) if 4.0 + 0.0002 * c * ctx + (c - 1) * 5.0 / osl <= slo_itl)
    assert itl(edge) <= slo_itl < itl(edge + 1)
    # the twin's own closed-loop request time agrees with the ITL it is built from
    assert request_seconds({"worker": prof}, {"worker": 1}, edge, isl, osl) == pytest.approx(
        (5.0 + osl * itl(edge)) / 1000.0)

    def measure(c: int) -> Measured:
        return Measured(c, 300 if itl(c) <= slo_itl else 0, 300)

    probes, last = run(measure, [], target=TARGET, confidence=CONF, resolution=0.10, max_probes=8, start=16)
    assert last.located, last.why
    assert last.within is not None and last.past is not None
    assert last.within <= edge < last.past <= math.ceil(last.within * 1.10)
    assert len(probes) <= 8


def test_a_light_load_with_too_few_requests_to_show_anything_does_not_stop_the_search() -> None:
    # c=1 sent 6 requests, all within: too few for the Wilson bound to reach 0.9, so undetermined
    pts = [Measured(1, 6, 6), Measured(4, 200, 200), Measured(64, 0, 200)]
    assert bracket(pts, TARGET, CONF) == (4, 64)
    assert next_load(pts, target=TARGET, confidence=CONF, resolution=0.1).load == 16
    # nothing shown either way yet: more load (more requests), not a stop
    few = next_load([Measured(1, 6, 6)], target=TARGET, confidence=CONF, resolution=0.1)
    assert few.load == 2 and "ramp up" in few.why


def test_a_probe_too_short_to_show_attainment_is_named_with_what_it_needs() -> None:
    from benchctl.analysis.search import min_requests

    need = min_requests(TARGET, 0.975)
    assert need == 35  # n / (n + 1.96^2) >= 0.9 from n = 35: every request within, at 97.5 % one-sided
    pts = [Measured(4, 28, 28), Measured(16, 11, 40)]  # c=4 all within but 28 requests: undetermined
    nxt = next_load(pts, target=TARGET, confidence=0.975, resolution=0.1)
    assert nxt.load == 8 and "c=4 sent fewer than 35 requests" in nxt.why and "search.duration_s" in nxt.why
