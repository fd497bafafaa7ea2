"""Campaign over campaign (`benchctl compare`, `v_history`, the report's "Since the previous campaign" section) on
made-up lakes of two or three campaigns (real lake files, the real views): the same distributions twice read "no
change" for every figure; a second campaign 30 % slower reads a change with the right sign; what differs between
the campaigns is listed first; a campaign with no earlier one of its spec is a clear error (exit 2)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from benchctl.cli.main import main
from benchctl.local.query import QueryEngine
from benchctl.local.report import render_report
from benchctl.report import since
from tests.unit.synthetic_lake import Campaign

LOADS = {1: 100.0, 2: 105.0, 4: 120.0, 8: 160.0, 16: 300.0}


def campaign(root: Path, cid: str, day: int, *, slower: float = 1.0, seed: int = 1, noise: float = 0.02,
             repeats: int = 1, spec: str = "made-up", **campaign_row: Any) -> Campaign:
    """One aggregated experiment's sweep (and a multi-turn step): ``slower`` x its latencies, / its throughput."""
    c = Campaign(root, cid=cid, seed=seed, noise=noise)
    c.rows["campaigns"][0].update({"spec_name": spec, "spec_hash": f"hash-{spec}", "vllm_version": "0.14.0",
                                   "started_at": datetime(2026, 12, day, 10),
                                   "versions_json": json.dumps({"aiperf": "0.13.0"}), **campaign_row})
    c.experiment("agg", "aggregated")
    c.sweep("agg", "aggregated", repeats, {k: {"ttft_p50_ms": v * slower, "ttft_p99_ms": v * 1.5 * slower,
                                               "itl_p50_ms": 10.0 * slower, "itl_p99_ms": 15.0 * slower,
                                               "output_tokens_per_s": 1000.0 / slower} for k, v in LOADS.items()})
    for r in range(repeats):
        c.step("agg", "aggregated", "multi_turn", f"multi-turn-r{r}", r, variant="c4", ttft_p50_ms=80.0 * slower,
               itl_p50_ms=9.0 * slower, output_tokens_per_s=300.0 / slower)
    c.write()
    return c


def compared(lake: Path, *args: str) -> dict[str, Any]:
    with QueryEngine(lake) as engine:
        c = since.load_comparison(engine, str(lake), *args)
    return {"c": c, "shifts": {s.figure.label: s for s in c.shifts}, "text": since.text(c)}


def test_the_same_campaign_twice_reads_no_change_for_every_figure(tmp_path: Path) -> None:
    # Given two campaigns of one spec drawn from the same distributions (2 % noise per step, different draws)
    lake = tmp_path / "lake"
    campaign(lake, "a", 1, seed=1)
    campaign(lake, "b", 2, seed=2)
    got = compared(lake)
    c = got["c"]
    # Then the latest is compared with the one before it, nothing differs in provenance, and no figure, primary or
    # descriptive, reads a change: each "no change shown" (no earlier pair measures the day-to-day spread, so its
    # assumed 2 % keeps every interval wider than +/-5 %: a change as large as the threshold is not ruled out)
    assert (c.before["campaign_id"], c.after["campaign_id"]) == ("a", "b")
    assert c.provenance == [] and "nothing recorded" in got["text"]
    for label in ("TTFT p50", "ITL p50", "output tokens/s"):
        s = got["shifts"][label]
        assert s.points == 6 and s.verdict().startswith("no change"), (label, s.row(c.settings))
        assert s.nominal is not None and s.nominal[0] < 0 < s.nominal[1], (label, s.row(c.settings))
    for s in c.shifts:
        assert not s.directional, s.row(c.settings)
    assert c.day.source.startswith("assumed 2 %") and "day-to-day spread assumed 2 %" in got["text"]


def test_the_day_to_day_spread_is_measured_from_the_specs_earlier_pairs(tmp_path: Path) -> None:
    # Given four campaigns of the spec whose whole levels moved by -6 %, +6 %, -6 %, 0 (nothing recorded
    # differing), then a fifth
    lake = tmp_path / "lake"
    for i, level in enumerate((0.94, 1.06, 0.94, 1.0, 1.0)):
        campaign(lake, f"c{i}", i + 1, seed=i, slower=level, noise=0.01)
    c = compared(lake)["c"]
    # Then the last two are compared, the day spread measured from the three earlier pairs (level moves of 12, 12
    # and 6 %: about 7 %), not assumed, and the comparison's intervals are at least as wide as that spread makes
    # them
    assert (c.before["campaign_id"], c.after["campaign_id"]) == ("c3", "c4")
    assert "measured over 3 earlier pair(s)" in c.day.source and 0.05 < c.day.sd < 0.09, c.day
    ttft = next(s for s in c.shifts if s.figure.label == "TTFT p50")
    assert ttft.pct(ttft.high) - ttft.pct(ttft.low) > 2 * 1.96 * 1.41 * 4, ttft.row(c.settings)
    assert not ttft.directional


def test_a_campaign_30_percent_slower_is_named_a_change_with_the_right_sign(tmp_path: Path) -> None:
    # Given the second campaign's twin 30 % slower: every latency x 1.3, every throughput / 1.3
    lake = tmp_path / "lake"
    campaign(lake, "a", 1, seed=1)
    campaign(lake, "b", 2, seed=2, slower=1.3, worker_engine="Dynamo mocker workers (SIMULATED), speedup 0.77")
    got = compared(lake)
    c, shifts = got["c"], got["shifts"]
    # Then TTFT and ITL are higher and worse, output tokens/s lower and worse, each by about 30 % (a throughput:
    # 1/1.3 = -23 %) with its interval around it; and the provenance difference is listed first
    for label, lo, hi in (("TTFT p50", 25.0, 35.0), ("ITL p50", 25.0, 35.0), ("output tokens/s", -27.0, -19.0)):
        s = shifts[label]
        # the day-to-day spread is the assumed floor here (no earlier pair of the spec): a change or a larger day
        assert s.verdict() == ("higher (worse)" if hi > 0 else "lower (worse)") + (
            ", or a day-to-day effect over the assumed 2 %"), s.row(c.settings)
        pct = s.pct(s.estimate)
        assert lo < pct < hi and s.pct(s.low) < pct < s.pct(s.high), (label, s.row(c.settings))
    assert ("worker_engine", "", "Dynamo mocker workers (SIMULATED), speedup 0.77") in c.provenance
    # the other figures are descriptive: their intervals unadjusted, never a verdict
    others = [s for s in c.shifts if not s.primary]
    assert not any(s.directional for s in others), [s.row(c.settings) for s in others]
    assert [s.verdict() for s in others].count("descriptive") == 2, [s.row(c.settings) for s in others]
    text = got["text"]
    assert text.index("What differs") < text.index("Figure by figure") < text.index("Point by point")
    assert ("TTFT p50 higher (worse), or a day-to-day effect over the assumed 2 %; ITL p50 higher (worse), or a "
            "day-to-day effect over the assumed 2 %; output tokens/s lower (worse)") in text


def test_provenance_lists_every_version_that_differs_and_the_default_skips_other_specs(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    campaign(lake, "a", 1, seed=1)
    campaign(lake, "other", 2, seed=3, spec="another-spec")  # later, but of another spec: not the default
    campaign(lake, "b", 3, seed=2, gpu_driver="580.95.05", versions_json=json.dumps({"aiperf": "0.14.0"}))
    got = compared(lake)
    c = got["c"]
    assert c.before["campaign_id"] == "a"
    assert set(c.provenance) == {("gpu_driver", "", "580.95.05"), ("versions.aiperf", "0.13.0", "0.14.0")}
    # named explicitly, another spec's campaign is compared all the same, its spec difference listed
    other = compared(lake, "b", "other")["c"]
    assert ("spec_name", "another-spec", "made-up") in other.provenance


def test_points_with_repeats_get_their_own_unadjusted_interval(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    campaign(lake, "a", 1, seed=1, repeats=3)
    campaign(lake, "b", 2, seed=2, repeats=3, slower=1.3)
    rows = compared(lake)["c"].point_rows()
    ttft = [r for r in rows if r["figure"] == "TTFT p50"]
    assert len(ttft) == 6 and all(r["interval"].startswith("[+") for r in ttft), ttft


def test_compare_without_an_earlier_campaign_of_the_spec_exits_2_naming_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = tmp_path / "lake"
    campaign(lake, "a", 1, spec="one")
    campaign(lake, "b", 2, spec="two")
    assert main(["compare", "--lake", str(lake)]) == 2
    err = capsys.readouterr().err
    assert "campaign b (spec 'two') has no earlier campaign of the same spec" in err and "valid: a (one)" in err
    assert main(["compare", "b", "--against", "nope", "--lake", str(lake)]) == 2
    assert "unknown campaign 'nope'" in capsys.readouterr().err
    assert main(["compare", "b", "--against", "a", "--lake", str(lake), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["before"], out["after"]) == ("a", "b") and ("spec_name" in {p["what"] for p in out["provenance"]})


def test_the_report_compares_its_campaign_with_the_previous_one_of_its_spec(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    campaign(lake, "a", 1, seed=1)
    campaign(lake, "b", 2, seed=2, slower=1.3)
    html = render_report(lake, "b", "html")
    section = html[html.index('<section id="since"'):html.index('<section id="tuning"')]
    assert 'data-before="a"' in section and "higher (worse)" in section
    first = render_report(lake, "a", "md")
    assert "no earlier campaign of the same spec" in first[first.index("## Since the previous campaign"):]


def test_a_long_history_costs_a_bounded_read(tmp_path: Path) -> None:
    # Given nine campaigns of the spec (a nightly run), compared as the report does on every campaign
    lake = tmp_path / "lake"
    for i in range(9):
        campaign(lake, f"n{i}", i + 1, seed=i)
    sql: list[str] = []
    with QueryEngine(lake) as engine:
        real = engine.run

        def counted(q: str) -> Any:
            sql.append(q)
            return real(q)

        engine.run = counted  # type: ignore[method-assign]
        c = since.load_comparison(engine, str(lake))
    # Then the day spread comes from the last five earlier pairs, read in a fixed number of queries (Athena
    # charges per query and per byte: not one per campaign of the history)
    assert (c.before["campaign_id"], c.after["campaign_id"]) == ("n7", "n8")
    assert "over 5 earlier pair(s)" in c.day.source, c.day
    assert len(sql) <= 6 and sum("v_history" in q for q in sql) == 1, sql
