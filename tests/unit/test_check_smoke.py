"""scripts/check_smoke.py, the check CI runs on what `make smoke` printed: fed output made by the same
formatter `benchctl run` prints with, for the views it prints."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from benchctl.analysis.formatting import format_result
from benchctl.analysis.views import REPORT_VIEWS

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_smoke", ROOT / "scripts" / "check_smoke.py")
assert spec is not None and spec.loader is not None
check_smoke = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_smoke)


def _value(col: str, row: int) -> object:
    if col.endswith("experiment"):
        return {"agg_experiment": "agg", "disagg_experiment": "disagg"}.get(col, ["agg", "disagg"][row % 2])
    if col in ("workload", "category", "scope", "variant", "distribution", "isl_bucket", "gpu_kinds",
               "changed_feature", "base_experiment"):
        return f"{col}-{row}"
    return 1.5 + row


def _output(tmp_path: Path, *, drop: tuple[str, str] | None = None, status: str = "SUCCEEDED") -> str:
    report = tmp_path / "report.html"
    report.write_text("<html>report</html>")
    parts = [f"campaign smoke-1: {status} in 250 s", "",
             "All figures below are SIMULATED: Dynamo mocker workers on CPU, not GPU measurements."]
    for view, cols in REPORT_VIEWS.items():
        if view == "v_feature_ladder":
            continue  # printed for ladder specs only
        rows = [tuple(_value(c, r) for c in cols) for r in range(2)]
        if drop and drop[0] == view:
            rows = [tuple(None if c.startswith(drop[1]) or (c == "experiment" and v == drop[1].rstrip("_"))
                          else v for c, v in zip(cols, r, strict=True)) for r in rows]
            if "experiment" in cols:
                rows = [r for r in rows if r[cols.index("experiment")] is not None]
        parts += ["", f"{view} (SIMULATED)", format_result(list(cols), rows, "table")]
    parts += ["", f"the report (tables, figures, timeline, cost, provenance; opens offline): {report}"]
    return "\n".join(parts) + "\n"


def test_a_good_smoke_output_passes(tmp_path):
    assert check_smoke.problems(_output(tmp_path)) == []


@pytest.mark.parametrize("view", ["v_concurrency_sweep", "v_prefix_cache", "v_multi_turn"])
def test_a_side_by_side_view_without_disaggregated_figures_fails(tmp_path, view):
    assert check_smoke.problems(_output(tmp_path, drop=(view, "disagg_"))) == [f"{view}: no disagg figure in any row"]


@pytest.mark.parametrize("view", ["v_pareto", "v_cost_efficiency", "v_sequence_distribution"])
def test_a_per_experiment_view_missing_one_mode_fails(tmp_path, view):
    (problem,) = check_smoke.problems(_output(tmp_path, drop=(view, "disagg_")))
    assert problem.startswith(f"{view}: no row of the disagg experiment")


def test_a_failed_campaign_or_a_missing_report_fails(tmp_path):
    assert check_smoke.problems(_output(tmp_path, status="FAILED"))[0].startswith("no 'campaign <id>: SUCCEEDED")
    text = _output(tmp_path)
    (tmp_path / "report.html").unlink()
    assert check_smoke.problems(text) == [f"the report {tmp_path / 'report.html'} does not exist or is empty"]
    assert "v_pareto: not printed" in check_smoke.problems(text.replace("v_pareto (SIMULATED)", "v_other"))
