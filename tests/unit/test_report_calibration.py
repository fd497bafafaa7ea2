"""The report's three-way comparison (benchctl.report.calibration): twin, prediction and measurement side by
side per sweep step, MAPE per metric between each pair, "no measured campaign" without one."""

from __future__ import annotations

import json

import pytest

from benchctl.cli.main import main
from benchctl.report.calibration import NO_MEASURED, three_way, twin_label
from tests.unit.synthetic_lake import Campaign

TWIN = {1: (50.0, 10.0, 100.0), 4: (80.0, 12.0, 300.0)}  # concurrency -> ttft p50, itl p50, output tokens/s
PRED = {1: (40.0, 10.0, 125.0), 4: (100.0, 15.0, 300.0)}
MEAS = {1: (40.0, 8.0, 100.0), 4: (80.0, 16.0, 400.0)}


def _rows(figs, exp="agg"):
    return [{"experiment": exp, "concurrency": c, "isl": 1024, "osl": 128, "ttft_p50_ms": t, "itl_p50_ms": i,
             "output_tokens_per_s": o} for c, (t, i, o) in figs.items()]


def test_mape_per_pair_and_metric_against_the_reference():
    cal = three_way(_rows(TWIN), _rows(PRED), _rows(MEAS), {"agg": "twin a100"}, "meas")
    mape = {m["pair"]: m for m in cal.mape}
    # twin vs prediction: ttft |50-40|/40=25 %, |80-100|/100=20 % -> 22.5; itl 0 and 20 -> 10
    assert mape["twin vs prediction"]["ttft_p50_ms_mape_pct"] == pytest.approx(22.5)
    assert mape["twin vs prediction"]["itl_p50_ms_mape_pct"] == pytest.approx(10.0)
    assert mape["twin vs prediction"]["output_tokens_per_s_mape_pct"] == pytest.approx(10.0)
    # twin vs measured: ttft 25 and 0 -> 12.5; itl 25 and 25 -> 25; throughput 0 and 25 -> 12.5
    assert mape["twin vs measured"]["ttft_p50_ms_mape_pct"] == pytest.approx(12.5)
    assert mape["twin vs measured"]["itl_p50_ms_mape_pct"] == pytest.approx(25.0)
    assert mape["prediction vs measured"]["ttft_p50_ms_mape_pct"] == pytest.approx(12.5)
    assert mape["prediction vs measured"]["steps"] == 2
    assert cal.rows[0] == {"experiment": "agg", "concurrency": 1, "isl": 1024, "osl": 128, "twin": "twin a100",
                           "twin_ttft_p50_ms": 50.0, "prediction_ttft_p50_ms": 40.0, "measured_ttft_p50_ms": 40.0,
                           "twin_itl_p50_ms": 10.0, "prediction_itl_p50_ms": 10.0, "measured_itl_p50_ms": 8.0,
                           "twin_output_tokens_per_s": 100.0, "prediction_output_tokens_per_s": 125.0,
                           "measured_output_tokens_per_s": 100.0}
    assert not cal.notes


def test_repeats_are_averaged_and_unmatched_steps_count_for_no_pair():
    twin = _rows(TWIN) + _rows({1: (70.0, 10.0, 100.0)}) + _rows({16: (1.0, 1.0, 1.0)})
    cal = three_way(twin, _rows(PRED), None, {})
    assert [r["concurrency"] for r in cal.rows] == [1, 4, 16]
    assert cal.rows[0]["twin_ttft_p50_ms"] == 60.0 and cal.rows[2]["prediction_ttft_p50_ms"] is None
    (only,) = cal.mape
    assert only["pair"] == "twin vs prediction" and only["steps"] == 2
    assert only["ttft_p50_ms_mape_pct"] == pytest.approx((20 / 40 + 20 / 100) / 2 * 100)
    assert "measured_ttft_p50_ms" not in cal.rows[0] and cal.notes[0].startswith(NO_MEASURED)


def test_twin_label_names_the_profile_or_its_absence():
    assert twin_label(json.dumps({"twin": "a100-tp4"})) == "twin a100-tp4"
    assert twin_label(json.dumps({"twin": "off"})) == "the mocker's built-in timing (no twin)"
    assert "no twin" in twin_label(None)


def _lake(root):
    for cid, figs, simulated in (("twin", TWIN, True), ("meas", MEAS, False)):
        c = Campaign(root, cid=cid, simulated=simulated, noise=0.0)
        c.experiment("agg", "aggregated")
        c.rows["experiments"][0]["mocker_json"] = json.dumps({"twin": "a100-tp4"}) if simulated else None
        for conc, (t, i, o) in figs.items():
            c.step("agg", "aggregated", "concurrency_sweep", f"sweep-c{conc}", 0, concurrency=conc, isl=1024,
                   osl=128, ttft_p50_ms=t, itl_p50_ms=i, output_tokens_per_s=o)
        if simulated:
            c.add("predictions", *({"campaign_id": cid, "experiment": "agg", "step_id": f"sweep-c{conc}",
                                    "concurrency": conc, "isl": 1024, "osl": 128, "predicted_ttft_ms": t,
                                    "predicted_itl_ms": i, "predicted_output_tokens_per_s": o, "source": "test"}
                                   for conc, (t, i, o) in PRED.items()))
        c.write()


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_the_report_shows_the_three_way_comparison_with_its_error(tmp_path, fmt):
    _lake(tmp_path / "lake")
    out = tmp_path / f"r.{fmt}"
    assert main(["report", "--lake", str(tmp_path / "lake"), "--campaign", "twin", "--out", str(out),
                 "--compare-measured", "meas"]) == 0
    text = out.read_text()
    assert "Twin, prediction, measurement" in text and "twin a100-tp4" in text and "measured campaign meas" in text
    assert "twin vs measured" in text and "prediction vs measured" in text and "22.5" in text
    if fmt == "html":
        assert 'id="calibration" data-rows="2" data-measured="meas"' in text


def test_without_a_measured_campaign_the_report_says_so(tmp_path):
    _lake(tmp_path / "lake")
    out = tmp_path / "r.md"
    assert main(["report", "--lake", str(tmp_path / "lake"), "--campaign", "twin", "--out", str(out)]) == 0
    text = out.read_text()
    assert NO_MEASURED in text and "twin vs prediction" in text and "twin vs measured" not in text
    # a measured campaign's own report has no twin section
    assert main(["report", "--lake", str(tmp_path / "lake"), "--campaign", "meas", "--out", str(out)]) == 0
    assert "Twin, prediction, measurement" not in out.read_text()


def test_an_unknown_measured_campaign_exits_2_and_writes_nothing(tmp_path, capsys):
    _lake(tmp_path / "lake")
    out = tmp_path / "r.html"
    assert main(["report", "--lake", str(tmp_path / "lake"), "--campaign", "twin", "--out", str(out),
                 "--compare-measured", "nope"]) == 2
    assert "--compare-measured nope: no such campaign in the lake; valid: meas" in capsys.readouterr().err
    assert not out.exists()
    assert main(["report", "--lake", str(tmp_path / "lake"), "--campaign", "meas", "--out", str(out),
                 "--compare-measured", "twin"]) == 2
    assert "the reported campaign meas is not simulated" in capsys.readouterr().err
    assert not out.exists()


def _twins_table(tmp_path, monkeypatch, provenance: dict | None = None):
    from benchctl.lake import schema
    from benchctl.local.lake import LocalLake

    if "twins" not in schema.TABLES:  # the local engine's record of what timed each role (benchctl.forecast.twin)
        monkeypatch.setitem(schema.TABLES, "twins", schema._table(
            "twins", "test", ("campaign_id", "experiment"), "campaign_id string\nexperiment string\nrole string\n"
            "profile string\nlabel string\nprovenance_json string\nnote string"))
    _lake(tmp_path / "lake")
    LocalLake(tmp_path / "lake").write("twins", [{
        "campaign_id": "twin", "experiment": "agg", "role": "worker", "profile": "aic-x",
        "label": "SIMULATED on the a100_sxm TP4 twin", "provenance_json": json.dumps(provenance or {})}],
        part_name="twins")


def test_the_twin_is_named_from_the_twins_table_when_the_lake_has_one(tmp_path, monkeypatch):
    _twins_table(tmp_path, monkeypatch, {"source": "aiconfigurator"})
    out = tmp_path / "r.md"
    assert main(["report", "--lake", str(tmp_path / "lake"), "--campaign", "twin", "--out", str(out)]) == 0
    text = out.read_text()
    assert "agg: worker: SIMULATED on the a100\\_sxm TP4 twin" in text and NO_MEASURED in text


def test_a_twin_calibrated_from_a_campaign_of_the_lake_is_compared_with_it(tmp_path, monkeypatch):
    _twins_table(tmp_path, monkeypatch, {"source": "calibrate", "campaign_id": "meas"})
    out = tmp_path / "r.md"
    assert main(["report", "--lake", str(tmp_path / "lake"), "--campaign", "twin", "--out", str(out)]) == 0
    text = out.read_text()
    assert "measured campaign meas: the one the twin was calibrated from" in text
    assert "twin vs measured" in text and NO_MEASURED not in text
