"""The tune phase's pure parts: the spec's ``tune:``, the candidates, the plan's pilots and the choice from
made-up measurements (the real campaign on the twin: tests/e2e/test_tune.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchctl.campaign.tuning import Measured, measured_edge, ranking
from benchctl.errors import SpecError
from benchctl.planning import tune
from benchctl.planning.plan import format_plan, plan_campaign
from benchctl.spec.model import parse_spec

ROOT = Path(__file__).resolve().parents[2]


def _seed(**tune_block) -> dict:
    d = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    if tune_block is not None:
        d["tune"] = tune_block
    return d


def test_tune_is_off_by_default_and_off_spelled_any_way_keeps_the_plan():
    base = plan_campaign(parse_spec(yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())), "aws")
    for off in ("off", False, None):
        d = _seed()
        d["tune"] = off
        spec = parse_spec(d)
        assert spec.tune is None
        plan = plan_campaign(spec, "aws")
        assert [e.name for e in plan.experiments] == [e.name for e in base.experiments]
        assert plan.est_gpu_hours == base.est_gpu_hours and all(e.tune == {} for e in plan.experiments)


@pytest.mark.parametrize(("block", "field"), [
    ({"workload": "multi-turn"}, "tune.workload"),
    ({"experiments": ["nope"]}, "tune.experiments"),
    ({"pilots": 0}, "tune.pilots"),
    ({"loads": [4, 4]}, "tune.loads"),
    ({"bogus": 1}, "tune.bogus"),
])
def test_a_bad_tune_block_names_the_field(block, field):
    with pytest.raises(SpecError) as err:
        parse_spec(_seed(**block))
    assert any(line.startswith(field) for line in err.value.problems), err.value.problems


def test_candidates_keep_the_gpu_total_and_the_arms_own_layout_first():
    spec = parse_spec(_seed())
    agg, dis = spec.experiments
    a = tune.candidates(spec, agg)
    d = tune.candidates(spec, dis)
    assert a[0].given and a[0].label == "w4x4" and {c.label for c in a} >= {"w4x4", "w8x2", "w16x1", "w2x8"}
    assert d[0].given and d[0].label == "p2x4-d2x4" and len(d) >= 3
    for c in a + d:
        assert sum(g.replicas * g.tensor_parallel for g in c.workers) == 16
    # prefill and decode never share a node over EFA: on 2 x 8 GPUs each role takes one node's 8
    for c in d:
        assert [g.replicas * g.tensor_parallel for g in c.workers] == [8, 8], c.label


def test_the_plan_runs_pilots_first_and_sizes_the_arm_for_every_candidate():
    spec = parse_spec(_seed(pilots=3, pilot_requests=40, loads=[64, 256, 512]))
    plan = plan_campaign(spec, "aws")
    names = [e.name for e in plan.experiments]
    arms = plan.experiments[6:]  # the seed plan deploys each arm 5 times (design.deployments), after every pilot
    assert {e.lake_name for e in arms} == {"agg-tp4x4", "disagg-2p2d-tp4"} and len(names) == 6 + 10
    pilots = plan.experiments[:6]
    assert all("arm" in e.tune for e in pilots)
    assert pilots[0].name == "agg-tp4x4--tune-w4x4" and pilots[3].name == "disagg-2p2d-tp4--tune-p2x4-d2x4"
    for e in pilots:
        assert [s.concurrency for s in e.steps] == [64, 256, 512]
        assert [s.request_count for s in e.steps] == [128, 512, 1024]  # at least two waves of the load
    arm = plan.deployments_of("disagg-2p2d-tp4")[0]
    assert arm.tune["searched"] == len(arm.tune["candidates"]) and arm.nodes == {"p4d": 2}
    assert "tune pilot of agg-tp4x4" in format_plan(plan) and "among 9 candidates" in format_plan(plan)
    assert plan.est_gpu_hours > plan_campaign(parse_spec(_seed(pilots=1, loads=[64])), "aws").est_gpu_hours


def test_a_ranker_decides_which_candidates_are_piloted():
    def ranker(spec, arm, cands):  # made up: the last enumerated is best, one does not fit
        out = [tune.replace(c, predicted_edge=10 * i, predicted_goodput=float(i), fits=i != 1)
               for i, c in enumerate(cands)]
        return sorted(out, key=lambda c: (c.fits is False, -(c.predicted_edge or 0)))

    spec = parse_spec(_seed(pilots=2, experiments=["disagg-2p2d-tp4"], loads=[16]))
    plan = plan_campaign(spec, "aws", ranker=ranker)
    pilots = [e.tune["candidate"]["label"] for e in plan.experiments if "arm" in e.tune]
    cands = tune.candidates(spec, spec.experiments[1])
    assert pilots == ["p2x4-d2x4", cands[-1].label]  # the arm's own, and the best predicted


def test_the_measured_edge_is_the_highest_load_every_load_up_to_holds_the_slo():
    m = Measured([(4, 60, 60, 10.0), (8, 60, 59, 10.0), (16, 60, 40, 10.0), (32, 60, 60, 10.0)])
    edge, goodput, loads = measured_edge(m, 0.9, 0.95)
    assert edge == 8 and goodput == pytest.approx(5.9)  # c=32 passing after c=16 failed does not count
    assert [ld["within"] for ld in loads] == [True, True, False, True]
    assert measured_edge(Measured([(4, 20, 20, 5.0)]), 0.9, 0.95)[0] == 0  # 20 of 20 cannot show 90 %


def _cand(label, pilot, given=False, edge=None):
    return {"label": label, "pilot": pilot, "given": given, "predicted_edge": edge, "workers": []}


def test_the_choice_is_the_highest_measured_edge_and_a_tie_keeps_the_arms_own_layout_not_one_runs_goodput():
    cands = [_cand("a", "pa", edge=30), _cand("own", "po", given=True, edge=20), _cand("b", "pb", edge=10),
             _cand("c", None, edge=5)]
    ok = [(4, 60, 60, 10.0), (8, 60, 60, 10.0)]
    measured = {"pa": Measured([*ok[:1], (8, 60, 30, 10.0)]), "po": Measured(ok), "pb": Measured(ok)}
    out = ranking(cands, measured, 0.9, 0.95)
    assert [r["label"] for r in out][:3] == ["own", "b", "a"] and out[0]["chosen"]
    assert "tied at the pilots' load resolution with b: the arm's own layout is kept" in out[0]["why"]
    assert out[-1]["label"] == "c" and out[-1]["measured_edge"] is None
    # the same edge and twice the goodput at one load below it: one run's noise, not a difference
    measured["pb"] = Measured([(4, 60, 60, 10.0), (8, 60, 60, 5.0)])
    assert ranking(cands, measured, 0.9, 0.95)[0]["label"] == "own"
    # a tie the arm's own layout is not in: the better prediction of the tied
    measured["po"] = Measured([(4, 60, 60, 10.0), (8, 60, 30, 10.0)])
    measured["pa"] = Measured(ok)
    got = ranking(cands, measured, 0.9, 0.95)
    assert got[0]["label"] == "a" and "the better prediction of them, not one run's goodput" in got[0]["why"]
    nothing = ranking(cands, {}, 0.9, 0.95)
    assert next(r for r in nothing if r["chosen"])["label"] == "own"


def test_the_pilots_load_finer_than_the_grids_doubling_near_the_predicted_edge():
    # Given the seed plan's grid (..., 256, 512, 1024, 1536) and the pilots' best predicted edge at c=700
    spec = parse_spec(_seed(pilots=3))
    chosen = [tune.Candidate("agg-tp4x4", "w4x4", (), given=True, predicted_edge=700)]
    loads = tune._loads(spec, chosen)
    # Then the pilots measure around it a factor of sqrt(2) apart (495, 700, 990), not only the grid's 512 and
    # 1024, and at most MAX_LOADS loads, one past twice the edge
    assert {495, 700, 990} <= set(loads) and len(loads) <= tune.MAX_LOADS, loads
    assert max(loads) > 2 * 700 and loads == sorted(loads)
    # without a prediction: the grid's loads, as before
    assert tune._loads(spec, [tune.Candidate("agg-tp4x4", "w4x4", (), given=True)]) == \
        sorted(spec.workloads[0].concurrency)[-tune.MAX_LOADS:]
