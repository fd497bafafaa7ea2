"""Predictions are kept per spec and aiconfigurator version in the workspace and reused by the next run
of the same spec; another spec computes its own."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from benchctl.forecast import predict
from benchctl.local.engine import Progress
from benchctl.local.lake import LocalLake
from benchctl.local.runner import prepare, write_predictions

ROOT = Path(__file__).resolve().parents[2]


def test_the_second_run_of_a_spec_reuses_the_first_runs_predictions(tmp_path, monkeypatch):
    calls: list[str] = []

    def fake_predict(spec, plan, campaign_id):
        calls.append(campaign_id)
        return [{"campaign_id": campaign_id, "experiment": "agg", "step_id": "s1", "workload": "w", "concurrency": 1,
                 "isl": 8, "osl": 8, "mode": "aggregated", "predicted_ttft_ms": 12.5, "source": "aiconfigurator test"}]

    monkeypatch.setattr(predict, "predict_plan", fake_predict)
    out = tmp_path / "ws"
    for cid in ("first", "second"):
        _, spec = prepare(ROOT / "examples" / "smoke.yaml", out, cid)
        assert write_predictions(spec, out, cid, Progress(out=io.StringIO())) == 1
    assert calls == ["first"]  # computed once
    rows = LocalLake(out / "lake").read_table("predictions")
    assert sorted((r["campaign_id"], r["predicted_ttft_ms"]) for r in rows) == [("first", 12.5), ("second", 12.5)]
    _, spec = prepare(ROOT / "examples" / "feature-ladder.yaml", out, "third")
    write_predictions(spec, out, "third", Progress(out=io.StringIO()))
    assert calls == ["first", "third"]  # another spec: its own predictions


def test_a_failing_predictor_is_noted_and_not_cached(tmp_path, monkeypatch):
    def broken(spec, plan, campaign_id):
        raise RuntimeError("no perf data")

    monkeypatch.setattr(predict, "predict_plan", broken)
    _, spec = prepare(ROOT / "examples" / "smoke.yaml", tmp_path / "ws", "c1")
    shown = io.StringIO()
    assert write_predictions(spec, tmp_path / "ws", "c1", Progress(out=shown)) == 0
    assert "no predictions: aiconfigurator failed: RuntimeError: no perf data" in shown.getvalue()
    assert not (tmp_path / "ws" / "cache").exists()
    with pytest.raises(FileNotFoundError):
        next(iter((tmp_path / "ws" / "lake" / "predictions").iterdir()))
