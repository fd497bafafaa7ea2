"""`benchctl calibrate`: a profile fitted from a (synthetic) lake's request records recovers the curves the
records were drawn from, is written to the twin store with its provenance, and bad input writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.cli.main import main
from benchctl.forecast.calibrate import (
    CalibrationError,
    calibrate,
    curve_errors,
    fit_decode,
    fit_prefill,
    prefill_stalls,
)
from benchctl.forecast.twin_profile import read_profile
from benchctl.local.query import QueryEngine
from tests.unit.synthetic_lake import Campaign


def known_ttft(isl: float) -> float:
    return 18.0 + 0.04 * isl + 1.5e-5 * isl * isl


def known_itl(kv: float, ctx: float) -> float:
    return 7.0 + 0.0009 * kv + 0.002 * ctx


def _campaign(root: Path, *, isls=(128, 512, 1024, 2048), concurrencies=(1, 4, 8), osl=64, noise=0.003,
              records=True, cid="meas") -> Campaign:
    c = Campaign(root, cid=cid, noise=noise, simulated=False)
    for mode, exp in (("aggregated", "agg"), ("disaggregated", "disagg")):
        c.experiment(exp, mode)
        for isl in isls:
            for conc in (concurrencies if isl == isls[0] else (1,)):
                ctx = isl + osl / 2
                c.step(exp, mode, "concurrency_sweep", f"s-i{isl}-c{conc}", 0, n_requests=12, concurrency=conc,
                       isl=isl, osl=osl, ttft_p50_ms=known_ttft(isl) * (1 + 0.3 * (conc - 1)),
                       itl_p50_ms=known_itl(conc * ctx, ctx), output_tokens_per_s=1000.0)
    if not records:
        c.rows.pop("requests")
    return c


def _fit(root: Path, **kw):
    c = _campaign(root, **kw)
    c.write()
    with QueryEngine(root) as q:
        return calibrate(q, c.cid, str(root))


def test_the_fit_recovers_the_curves_the_records_were_drawn_from(tmp_path):
    cals = _fit(tmp_path / "lake")
    assert [c.experiment for c in cals] == ["agg", "disagg"]
    for cal in cals:
        # the concurrency-1 steps only: the 30 % per extra request of TTFT at higher load never reaches the fit
        assert cal.prefill.terms == ("1", "isl", "isl^2")
        assert cal.prefill.domain["isl"] == (128.0, 2048.0)
        for isl in (128, 700, 2048):
            assert cal.profile.ttft_ms(isl) == pytest.approx(known_ttft(isl), rel=0.02)
        assert cal.decode.terms == ("1", "kv", "ctx")
        for kv, ctx in ((160, 160), (1280, 160), (2080, 2080)):
            assert cal.profile.itl_ms(kv, ctx) == pytest.approx(known_itl(kv, ctx), rel=0.02)
        assert cal.profile.provenance["prefill"]["residual_max_pct"] < 2
    # records without their times: nothing to take out
    assert [cal.profile.provenance["decode"]["prefill_share_ms"] for cal in cals] == [{}, {}]


def test_one_context_fits_itl_against_kv_alone_and_says_its_domain(tmp_path):
    cals = _fit(tmp_path / "lake", concurrencies=(1, 2, 4, 8))
    dec = cals[0].decode
    assert dec.terms == ("1", "kv", "ctx")  # the other ISLs' c=1 steps vary the context
    only = fit_decode([(c * 160.0, 160.0, known_itl(c * 160.0, 160.0)) for c in (1, 2, 4, 8)])
    assert only.terms == ("1", "kv")
    assert only.domain == {"kv": (160.0, 1280.0), "ctx": (160.0, 160.0)}
    assert only(kv=640.0, ctx=160.0) == pytest.approx(known_itl(640.0, 160.0), rel=1e-6)


def test_two_input_lengths_fit_a_line_and_one_is_refused():
    line = fit_prefill([(100.0, 20.0), (300.0, 40.0)])
    assert line.terms == ("1", "isl") and line(isl=200.0) == pytest.approx(30.0)
    with pytest.raises(CalibrationError, match=r"1 distinct input length\(s\) \(256\).*at least 2"):
        fit_prefill([(256.0, 20.0), (256.0, 21.0)])
    with pytest.raises(CalibrationError, match="at least 2: run two or more concurrencies"):
        fit_decode([(300.0, 300.0, 9.0)])


def test_curve_errors_measure_the_gap_over_the_domain(tmp_path):
    cal = _fit(tmp_path / "lake")[0]
    assert max(curve_errors(cal.profile, cal.profile, cal.prefill, cal.decode).values()) == 0
    scaled = type(cal.profile)(cal.profile.prefill_isl, tuple(v * 1.2 for v in cal.profile.prefill_ttft_ms),
                               cal.profile.decode_active_kv_tokens, cal.profile.decode_context_length,
                               cal.profile.decode_itl)
    err = curve_errors(cal.profile, scaled, cal.prefill, cal.decode)
    assert err["prefill_max_error_pct"] == pytest.approx(20.0) and err["decode_max_error_pct"] == 0


def test_cli_writes_one_profile_per_experiment_with_provenance_and_the_spec_line(tmp_path, capsys):
    _campaign(tmp_path / "lake").write()
    ws = tmp_path / "ws"
    assert main(["calibrate", "--lake", str(tmp_path / "lake"), "--campaign", "meas", "--workspace", str(ws)]) == 0
    out = capsys.readouterr().out
    for exp in ("agg", "disagg"):
        prof = read_profile(ws / "twin" / f"meas-{exp}")
        prov = prof.provenance
        assert prov["campaign_id"] == "meas" and prov["experiment"] == exp and prov["source"] == "calibrate"
        assert prov["label"] == f"SIMULATED on the twin calibrated from campaign meas ({exp})"
        assert prov["lake"] == str((tmp_path / "lake").resolve())
        assert len(prov["prefill"]["steps"]) == 4 and len(prov["decode"]["steps"]) == 6
        assert "extrapolates" in prov["domain_note"]
        assert f"mocker: {{twin: meas-{exp}}}" in out
    assert set(read_profile(ws / "twin" / "meas-disagg").provenance["roles"]) == {"prefill", "decode"}
    assert "KV transfer" in read_profile(ws / "twin" / "meas-disagg").provenance["attribution"]["ttft"]
    # the same campaign again replaces its own profiles; another campaign's name is refused
    assert main(["calibrate", "--lake", str(tmp_path / "lake"), "--campaign", "meas", "--workspace", str(ws)]) == 0
    prov_file = ws / "twin" / "meas-agg" / "provenance.json"
    prov_file.write_text(json.dumps({"campaign_id": "other"}))
    assert main(["calibrate", "--lake", str(tmp_path / "lake"), "--campaign", "meas", "--workspace", str(ws),
                 "--experiment", "agg"]) == 2
    assert "a profile named meas-agg exists (from other)" in capsys.readouterr().err


@pytest.mark.parametrize(("kw", "args", "says"), [
    ({}, ["--campaign", "nope"], "--campaign nope: no steps of it in .*; campaigns with steps: meas"),
    ({"records": False}, ["--campaign", "meas"], "holds no successful request records"),
    ({"isls": (256,)}, ["--campaign", "meas"], r"experiment agg: prefill: .*1 distinct input length"),
    ({"concurrencies": (1,), "isls": (256, 256)}, ["--campaign", "meas"], "distinct input length"),
    ({}, ["--campaign", "meas", "--experiment", "x"], "--experiment x: not in campaign meas; valid: agg, disagg"),
    ({}, ["--campaign", "meas", "--name", "mine"], "--name mine: one name for 2 experiments"),
    ({}, ["--campaign", "meas", "--experiment", "agg", "--name", "Bad Name"], "profile name 'Bad Name' must match"),
])
def test_bad_input_exits_2_naming_what_and_writes_nothing(tmp_path, capsys, kw, args, says):
    _campaign(tmp_path / "lake", **kw).write()
    ws = tmp_path / "ws"
    assert main(["calibrate", "--lake", str(tmp_path / "lake"), "--workspace", str(ws), *args]) == 2
    import re

    assert re.search(says, capsys.readouterr().err)
    assert not ws.exists()


def test_a_missing_lake_exits_2(tmp_path, capsys):
    assert main(["calibrate", "--lake", str(tmp_path / "none"), "--campaign", "c"]) == 2
    assert "no lake there" in capsys.readouterr().err


def test_active_kv_is_per_decoding_worker(tmp_path):
    c = _campaign(tmp_path / "lake", isls=(128, 512))
    c.rows["experiments"][0]["workers_json"] = json.dumps([{"role": "worker", "replicas": 2}])
    c.rows["experiments"][1]["workers_json"] = json.dumps([{"role": "prefill", "replicas": 3},
                                                           {"role": "decode", "replicas": 4}])
    c.write()
    with QueryEngine(tmp_path / "lake") as q:
        agg, disagg = calibrate(q, "meas", "lake")
    # concurrency over the decoding workers, one request per busy worker at least
    assert agg.decode.domain["kv"] == (160.0, 8 * 160.0 / 2)
    assert disagg.decode.domain["kv"] == (160.0, 544.0)  # the ISL-512 step at concurrency 1 reaches furthest
    assert sorted(p[0] for p in disagg.decode.points if p[1] == 160.0) == [160.0, 160.0, 320.0]
    assert disagg.profile.provenance["decode"]["decoding_replicas"] == 4


def _rec(start_ms: float, ttft_ms: float, end_ms: float) -> dict:
    return {"start_ns": int(start_ms * 1e6), "ttft_ms": ttft_ms, "end_ns": int(end_ms * 1e6)}


def test_prefill_stalls_count_only_the_others_prefills_inside_a_decode():
    # lockstep (a closed loop of equal lengths): every prefill lies in every TTFT, none in a decode
    assert prefill_stalls([_rec(0, 50, 500), _rec(0, 50, 500), _rec(0.5, 49.5, 500.5)]) == [0, 0, 0]
    # staggered: b's prefill (100..150) inside a's decode (50..500); c's (120..200) overlaps it: the union counts
    a, b, c = _rec(0, 50, 500), _rec(100, 50, 600), _rec(120, 80, 700)
    stalls = prefill_stalls([a, b, c])
    assert stalls[0] == pytest.approx(100.0)  # 100..200
    assert stalls[1] == pytest.approx(50.0)  # c's 150..200 inside b's decode 150..600
    assert stalls[2] == pytest.approx(0.0)
    assert prefill_stalls([a, b, c], replicas=2)[0] == pytest.approx(50.0)  # half of the others share its worker
    assert prefill_stalls([a, {"ttft_ms": 5.0}])[1] is None


def test_the_stalls_come_out_of_the_aggregated_itl_only(tmp_path):
    c = _campaign(tmp_path / "lake", isls=(128, 512), concurrencies=(1, 2))
    for r in c.rows["requests"]:  # the c=2 steps in staggered pairs: the second's prefill inside the first's decode
        if r["step_id"] == "s-i128-c2":
            i = r["request_index"]
            start = (i // 2) * 1000 + (i % 2) * 100
            r.update(start_ns=int(start * 1e6), end_ns=int((start + 700) * 1e6), ttft_ms=63.0)
    c.write()
    with QueryEngine(tmp_path / "lake") as q:
        agg, disagg = calibrate(q, "meas", "lake")
    # the first of a pair: its decode (63..700 ms) held the second's prefill (100..163): 63 ms over 63 intervals,
    # 1 ms a token; the second: nothing. The median request: half of it.
    assert agg.profile.provenance["decode"]["prefill_share_ms"] == {"s-i128-c2": 0.5}
    step_itl = next(s["itl_p50_ms"] for s in c.rows["steps"] if s["step_id"] == "s-i128-c2" and s["experiment"] == "agg")
    assert [p[2] for p in agg.decode.points if p[0] == 2 * 160] == [pytest.approx(step_itl - 0.5)]
    assert disagg.profile.provenance["decode"]["prefill_share_ms"] == {}


def test_only_concurrency_sweep_steps_are_fitted(tmp_path):
    c = _campaign(tmp_path / "lake", isls=(128, 512))
    c.step("agg", "aggregated", "multi_turn", "mt-0", 0, concurrency=1, isl=4000, osl=16, ttft_p50_ms=1.0,
           itl_p50_ms=1.0, output_tokens_per_s=1.0)
    c.write()
    with QueryEngine(tmp_path / "lake") as q:
        agg = calibrate(q, "meas", "lake", experiments=["agg"])[0]
    assert "mt-0" not in agg.profile.provenance["prefill"]["steps"] + agg.profile.provenance["decode"]["steps"]
    assert agg.prefill.domain["isl"] == (128.0, 512.0)


def _with_router(root: Path, per_request: int) -> Campaign:
    """AIPerf's TTFT 15 ms above the prefill (the client/HTTP/frontend path); the router's meter at the prefill,
    ``per_request`` observations per request (a disaggregated router counts two)."""
    c = _campaign(root, isls=(128, 512, 1024, 2048), concurrencies=(1,), noise=0.0)
    for r in c.rows["requests"]:
        r["ttft_ms"] = known_ttft(r["isl"]) + 15.0
    for s in c.rows["steps"]:
        n = sum(1 for r in c.rows["requests"] if r["step_id"] == s["step_id"] and r["experiment"] == s["experiment"])
        for stat, value in (("sum", known_ttft(s["isl"]) / 1000.0 * n * per_request), ("count", n * per_request)):
            c.metric(s["experiment"], s["step_id"], 0, "dynamo_component_router_time_to_first_token_seconds", stat,
                     value, source="frontend")
    return c


def test_the_routers_ttft_leaves_the_path_out_where_it_counts_each_request_once(tmp_path):
    _with_router(tmp_path / "lake", 1).write()
    with QueryEngine(tmp_path / "lake") as q:
        agg = calibrate(q, "meas", "lake", experiments=["agg"])[0]
        e2e = calibrate(q, "meas", "lake", experiments=["agg"], ttft="aiperf")[0]
    assert agg.profile.provenance["prefill"]["ttft_source"] == "router"
    assert agg.profile.ttft_ms(1024) == pytest.approx(known_ttft(1024), rel=1e-6)
    assert agg.profile.provenance["prefill"]["path_overhead_ms"] == {f"s-i{i}-c1": 15.0 for i in (128, 512, 1024, 2048)}
    assert e2e.profile.provenance["prefill"]["ttft_source"] == "aiperf"
    assert e2e.profile.ttft_ms(1024) == pytest.approx(known_ttft(1024) + 15.0, rel=1e-6)


def test_a_router_counting_twice_per_request_is_not_used(tmp_path, capsys):
    _with_router(tmp_path / "lake", 2).write()
    with QueryEngine(tmp_path / "lake") as q:
        agg = calibrate(q, "meas", "lake", experiments=["agg"])[0]
    assert agg.profile.provenance["prefill"]["ttft_source"] == "aiperf"
    assert agg.profile.ttft_ms(1024) == pytest.approx(known_ttft(1024) + 15.0, rel=1e-6)
    ws = tmp_path / "ws"
    assert main(["calibrate", "--lake", str(tmp_path / "lake"), "--campaign", "meas", "--workspace", str(ws),
                 "--ttft", "router"]) == 2
    assert "lack dynamo_component_router_time_to_first_token_seconds with one observation per request" in \
        capsys.readouterr().err
    assert not ws.exists()
