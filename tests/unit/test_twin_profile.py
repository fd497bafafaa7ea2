"""Timing profiles in the mocker's own NPZ format: written as the mocker's loader accepts, read back checked."""

from __future__ import annotations

import numpy as np
import pytest

from benchctl.forecast.twin_profile import (
    ProfileError,
    TimingProfile,
    profile_dir,
    read_profile,
    write_profile,
)


def sample(**over) -> TimingProfile:
    fields = {"prefill_isl": (64.0, 1024.0, 4096.0), "prefill_ttft_ms": (10.0, 40.0, 160.0),
                  "decode_active_kv_tokens": (0.0, 10000.0), "decode_context_length": (1.0, 1001.0),
                  "decode_itl": ((5.0, 5.0), (9.0, 7.0)), "provenance": {"source": "test"}}
    fields.update(over)
    return TimingProfile(**fields)


def test_profile_round_trips_and_the_mocker_recognises_its_format(tmp_path):
    from dynamo.mocker.utils.planner_profiler_perf_data_converter import is_mocker_format_npz

    npz = write_profile(profile_dir(tmp_path, "a100-tp4"), sample())
    assert is_mocker_format_npz(npz)
    back = read_profile(npz.parent)
    assert back == sample()


def test_curves_interpolate_linearly_and_clamp_at_the_edges():
    p = sample()
    assert p.ttft_ms(544.0) == pytest.approx(25.0)
    assert p.ttft_ms(1.0) == 10.0 and p.ttft_ms(1e6) == 160.0
    assert p.itl_ms(5000.0, 501.0) == pytest.approx((5 + 5 + 9 + 7) / 4)
    assert p.itl_ms(20000.0, 1.0) == 9.0


@pytest.mark.parametrize("over,rule", [
    ({"prefill_ttft_ms": (1.0, 2.0)}, "same length"),
    ({"prefill_isl": (64.0, 64.0, 100.0)}, "strictly increasing"),
    ({"decode_itl": ((5.0, 5.0),)}, "grid"),
    ({"decode_itl": ((5.0, 0.0), (9.0, 7.0))}, "> 0"),
    ({"prefill_ttft_ms": (10.0, float("nan"), 1.0)}, "finite"),
])
def test_a_profile_the_mocker_could_not_use_is_refused_with_the_rule(tmp_path, over, rule):
    with pytest.raises(ProfileError, match=rule):
        write_profile(tmp_path / "p", sample(**over))
    assert not (tmp_path / "p" / "perf_data.npz").exists()


def test_an_npz_without_the_mockers_keys_is_refused_naming_them(tmp_path):
    np.savez(tmp_path / "x.npz", prefill_isl=np.array([1.0, 2.0]))
    with pytest.raises(ProfileError, match=r"missing.*prefill_ttft_ms"):
        read_profile(tmp_path / "x.npz")


def test_a_profile_name_outside_the_pattern_is_refused(tmp_path):
    with pytest.raises(ProfileError, match="must match"):
        profile_dir(tmp_path, "../escape")
