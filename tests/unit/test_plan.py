"""Planning: deterministic ids, node packing, estimates and budget refusal."""

import copy
import json
from pathlib import Path

import yaml

from benchctl.planning.cache_state import step_seed
from benchctl.planning.plan import CampaignPlan, nodes_needed, plan_campaign
from benchctl.spec.model import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]


def test_same_spec_same_plan_and_json_round_trip():
    a = plan_campaign(load_spec(ROOT / "examples" / "seed-plan.yaml"), "aws")
    b = plan_campaign(load_spec(ROOT / "examples" / "seed-plan.yaml"), "aws")
    assert a.to_json() == b.to_json()
    assert CampaignPlan.from_json(json.loads(json.dumps(a.to_json()))) == a
    # the seed plan deploys each experiment 5 times (design.deployments), one repeat on each: its steps, over its
    # deployments in run order
    agg = a.deployments_of(a.experiments[0].lake_name)
    assert [e.deployment for e in agg] == [1, 2, 3, 4, 5] and [e.repeats for e in agg] == [[0], [1], [2], [3], [4]]
    steps = [s for e in agg for s in e.steps]
    ids = [s.step_id for s in steps]
    # 5 repeats of: 11 concurrencies at ISL 1024 + 4 search probes + 1 multi-turn step + 3 distributions + 5
    # prefix ratios + 7 concurrencies at ISL 8192 + 4 probes (the long sweep, the last workload)
    per = 11 + 4 + 1 + 3 + 5 + 7 + 4
    assert len(ids) == len(set(ids)) == per * 5
    assert ids[0] == "concurrency-sweep-c1-r0" and ids[10] == "concurrency-sweep-c1536-r0"
    assert ids[11:15] == [f"concurrency-sweep-s{k}-r0" for k in (1, 2, 3, 4)]
    assert ids[15] == "multi-turn-c8-r0" and ids[per + 15] == "multi-turn-c8-r1"
    assert ids[16:19] == [f"sequence-distribution-{d}-r0" for d in ("uniform", "zipf", "lognormal")]
    assert ids[-11:] == [f"concurrency-sweep-long-{v}-r4" for v in ("c1", "c4", "c16", "c64", "c128", "c192", "c256",
                                                                     "s1", "s2", "s3", "s4")]
    # each step's AIPerf seed: its repeat's (42, 43, ...) salted with its index, so no two steps send one prompt
    assert [s.seed for s in steps] == [step_seed(s.kind, 42 + s.repeat, s.index) for s in steps]
    assert len({s.seed for s in steps}) == len(steps)
    # every experiment runs the same steps (comparisons join on workload + variant)
    disagg = a.deployments_of(next(e.lake_name for e in a.experiments if e.lake_name != agg[0].lake_name))
    assert [s.variant for e in agg for s in e.steps] == [s.variant for e in disagg for s in e.steps]


def test_step_params_carry_each_workloads_definition():
    plan = plan_campaign(load_spec(ROOT / "examples" / "seed-plan.yaml"), "aws")
    steps = {s.step_id: s for e in plan.deployments_of(plan.experiments[0].lake_name) for s in e.steps}
    mt = steps["multi-turn-c8-r1"]
    assert (mt.kind, mt.concurrency, mt.isl, mt.osl, mt.duration_s) == ("multi_turn", 8, 512, 256, 300)
    assert mt.params["turns"] == 5 and mt.params["dataset_conversations"] >= 8
    sd = steps["sequence-distribution-zipf-r2"]
    assert (sd.concurrency, sd.request_count, sd.isl, sd.seed) == (16, 500, None, step_seed(sd.kind, 44, sd.index))
    assert sd.params["isl_range"] == [128, 4096] and sd.params["osl_range"] == [64, 2048]
    pc = steps["prefix-cache-p25-r0"]
    assert (pc.isl, pc.osl, pc.concurrency, pc.params["prefix_ratio"]) == (2048, 512, 16, 0.25)


def test_seed_plan_packs_onto_two_p4d_nodes():
    spec = load_spec(ROOT / "examples" / "seed-plan.yaml")
    assert nodes_needed(spec, spec.experiments[0]) == {"p4d": 2}
    assert nodes_needed(spec, spec.experiments[1]) == {"p4d": 2}
    plan = plan_campaign(spec, "aws")
    assert [e.gpus for e in plan.experiments] == [16] * 10  # 5 deployments of each


def test_packing_does_not_split_a_worker_across_nodes():
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data["experiments"][0]["workers"][0].update(replicas=3, tensor_parallel=3)  # 3 per node max 2
    spec = parse_spec(data)
    assert nodes_needed(spec, spec.experiments[0]) == {"gpu-a100": 2}


def test_estimates_add_up_and_budget_refuses():
    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    spec = parse_spec(data)
    plan = plan_campaign(spec, "aws")
    exp = plan.experiments[0]
    assert exp.est_s > sum(s.est_s for s in exp.steps)  # plus capacity/ready/smoke/teardown
    assert plan.est_usd is not None and plan.est_usd > 0
    cheap = copy.deepcopy(data)
    cheap["budget"] = {"max_usd": 1.0}
    refused = plan_campaign(parse_spec(cheap), "aws")
    assert refused.budget_problems and "budget.max_usd" in refused.budget_problems[0]
