"""What a campaign compares with what: the spec's comparisons (validated against the plan's questions), the
default pairing a spec without them gets, and the comparisons rows the Plan state writes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.cli import main as cli
from benchctl.errors import SpecError
from benchctl.spec.comparisons import comparison_rows, default_comparisons, resolved
from benchctl.spec.model import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())


def with_experiments(*extra: dict[str, Any], comparisons: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    data = copy.deepcopy(SMOKE)
    data["experiments"] += list(extra)
    if comparisons is not None:
        data["comparisons"] = comparisons
    return data


DISAGG_4P4D = {"name": "disagg-4p4d", "mode": "disaggregated", "router": "kv",
               "workers": [{"role": "prefill", "pool": "gpu-a100", "replicas": 2, "tensor_parallel": 4},
                           {"role": "decode", "pool": "gpu-a100", "replicas": 2, "tensor_parallel": 4}]}
AGG_RR = {"name": "agg-rr", "base": "agg", "change": {"router": "round-robin"}}


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    return err.value.problems


def test_the_default_pairing_of_the_examples() -> None:
    got = {p.stem: [(r.baseline, r.treatment, r.questions) for r in resolved(load_spec(p))]
           for p in sorted((ROOT / "examples").glob("*.yaml"))}
    both = ("q1", "q3", "q4", "h1", "h3")
    assert got["smoke"] == [("agg", "disagg", both)]
    assert got["seed-plan"] == [("agg-tp4x4", "disagg-2p2d-tp4", both)]
    # a ladder: each rung against its base, for what its one change can answer
    assert got["feature-ladder"] == [("agg-kv", "disagg-kv", both), ("agg", "agg-kv", ("h2",)),
                                     ("disagg-kv", "disagg-kv-off", ("q2", "h2")),
                                     ("disagg-kv-off", "disagg-kv-ssd", ("q2", "h2"))]
    # A100 prefill + L40S decode against the A100 baseline: not Q1, Q4 or H1 (other GPU kinds: a gap between
    # kinds is not the transfer's), but H4
    assert got["hetero-l40s"] == [("agg-a100-tp4x4", "disagg-a100p-l40sd", ("q3", "h3", "h4"))]


def test_a_disaggregated_experiment_with_more_gpus_is_not_paired_for_q1_by_default() -> None:
    spec = parse_spec(with_experiments(DISAGG_4P4D))
    # 16 GPUs against 8: no aggregated experiment of its total; the smoke pair stays
    assert [(r.baseline, r.treatment) for r in default_comparisons(spec)] == [("agg", "disagg")]


def test_q1_at_another_gpu_total_is_refused_naming_the_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                   ) -> None:
    bad = with_experiments(DISAGG_4P4D, comparisons=[
        {"name": "big-vs-agg", "baseline": "agg", "treatment": "disagg-4p4d", "question": "q1"}])
    (line,) = problems(bad)
    assert line.startswith("comparisons[0].question: q1 (comparison 'big-vs-agg') needs the same gpus on both sides; "
                           "baseline "
                           "'agg' (aggregated, 8 GPUs A100-40GB, router kv, no offload), treatment 'disagg-4p4d' "
                           "(disaggregated, 16 GPUs A100-40GB")
    assert line.endswith("valid for this pair: q3, h3")
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert cli.main(["validate", str(tmp_path / "bad.yaml")]) == 2
    assert "comparisons[0].question: q1 (comparison 'big-vs-agg') needs the same gpus" in capsys.readouterr().err


def test_q1_with_another_router_is_refused() -> None:
    bad = with_experiments(AGG_RR, comparisons=[
        {"name": "rr", "baseline": "agg-rr", "treatment": "disagg", "question": ["q1", "q3"]}])
    (line,) = problems(bad)
    assert "question: q1 (comparison 'rr') needs the same router on both sides" in line
    assert line.endswith("valid for this pair: q3, h3")


@pytest.mark.parametrize(("comparison", "needle"), [
    ({"name": "x", "baseline": "nope", "treatment": "disagg"}, "comparisons[0].baseline: 'nope' is not an "
                                                                 "experiment (comparison 'x'); valid: ['agg', 'disagg']"),
    ({"name": "x", "baseline": "agg", "treatment": "agg"}, "comparisons[0].treatment: 'agg' is also the baseline"),
    ({"name": "x", "baseline": "disagg", "treatment": "agg", "question": "q4"},
     "question: q4 (comparison 'x') needs an aggregated baseline and a disaggregated treatment"),
    ({"name": "x", "baseline": "agg", "treatment": "disagg", "question": "q2"},
     "q2 (comparison 'x') needs only kv_offload to differ"),
    ({"name": "x", "baseline": "agg", "treatment": "disagg", "question": "q9"}, "comparisons[0].question"),
])
def test_bad_comparisons_are_named(comparison: dict[str, Any], needle: str) -> None:
    assert any(needle in p for p in problems(with_experiments(comparisons=[comparison]))), needle


def test_two_comparisons_of_the_same_pair_or_name_are_refused() -> None:
    c = {"name": "x", "baseline": "agg", "treatment": "disagg"}
    assert problems(with_experiments(comparisons=[c, {**c, "name": "y"}])) == [
        "comparisons[1]: comparison 'y' compares the same experiments as comparisons[0] ('x')"]
    assert problems(with_experiments(AGG_RR, comparisons=[c, {**c, "baseline": "agg-rr"}]))[0] == (
        "comparisons[1].name: 'x' is used twice; comparison names must be unique")


def test_a_comparison_its_difference_answers_nothing_is_refused() -> None:
    twin = {"name": "agg-2", "mode": "aggregated", "router": "kv",
            "workers": [{"role": "worker", "pool": "gpu-a100", "replicas": 2, "tensor_parallel": 4}]}
    (line,) = problems(with_experiments(twin, comparisons=[{"name": "same", "baseline": "agg", "treatment": "agg-2"}]))
    assert line.startswith("comparisons[0]: comparison 'same': 'agg' (aggregated, 8 GPUs A100-40GB, router kv, no "
                           "offload) and 'agg-2' (aggregated, 8 GPUs A100-40GB, router kv, no offload) differ in nothing")


def test_spec_comparisons_replace_the_default_and_carry_the_settings() -> None:
    data = with_experiments(AGG_RR, comparisons=[{"name": "router", "baseline": "agg-rr", "treatment": "agg"}])
    data["comparison"] = {"confidence": 0.9, "practical_threshold_pct": 2, "max_error_rate": 0.05}
    spec = parse_spec(data)
    (row,) = comparison_rows("c1", spec)
    assert row == {"campaign_id": "c1", "comparison": "router", "comparison_index": 0, "baseline": "agg-rr",
                   "treatment": "agg", "questions": "h2", "differs": "router", "source": "spec", "confidence": 0.9,
                   "practical_threshold_pct": 2.0, "max_error_rate": 0.05, "slo_attainment": 0.9,
                   "min_samples_p99": 100, "transfer_share_pct": 50.0, "queue_threshold": 1.0,
                   "deployment_spread_pct": 5.0}
    assert problems({**data, "comparison": {"confidence": 1.5}})[0].startswith("comparison.confidence: 1.5 is invalid")


def test_plan_records_the_comparisons_in_the_lake(tmp_path: Path) -> None:
    from benchctl import campaign
    from benchctl.campaign import Task
    from benchctl.campaign.context import Ctx
    from benchctl.local.lake import LocalLake
    from benchctl.local.query import QueryEngine
    from tests.fakes.ports import providers_for_test

    lake = LocalLake(tmp_path / "lake")
    p = providers_for_test(tmp_path / "run", lake, read_uri=lambda uri: yaml.safe_dump(SMOKE).encode())
    ctx = Ctx("camp-p", str(tmp_path / "run"), str(tmp_path / "lake"), 1, None)
    for _ in range(2):  # a redelivered Plan writes the same rows again, not twice
        campaign.plan(p, ctx, Task(state="Plan", input={"spec_uri": "file:///smoke.yaml"}))
    _, rows = QueryEngine(lake.root).run("SELECT comparison, baseline, treatment, questions, differs, source, "
                                         "confidence FROM comparisons")
    assert rows == [("disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3", "mode,workers", "default", 0.95)]


def test_plan_says_what_the_campaign_compares(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(ROOT / "examples" / "smoke.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("comparisons (default pairing):\n"
                                 "  disagg-vs-agg: disagg vs agg (differs in mode, workers): q1, q3, q4, h1, h3")
