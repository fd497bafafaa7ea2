"""Costs: allocation- and usage-based cost per experiment x pool, the budget guard, v_cost_efficiency."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchctl.campaign import experiment_row
from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine
from benchctl.planning import budget, costs
from benchctl.planning.plan import CampaignPlan, plan_campaign
from benchctl.spec.model import CampaignSpec, parse_spec

C = "camp-cost"
LIST_P4D, LIST_G6E, EKS = 21.96, 10.49, 0.10  # the instances' list prices
ROOT_H = 200 * 0.08 / 730  # each GPU node's 200 GiB gp3 root volume at $0.08/GB-month, per hour
P4D, G6E = LIST_P4D + ROOT_H, LIST_G6E + ROOT_H  # a node-hour, all in
SWEEP = ("concurrency-sweep-c1-r0", "concurrency-sweep-c4-r0")


def make_spec(*, priced_g6e: bool = True, budget: dict[str, float] | None = None) -> CampaignSpec:
    def workers(*groups: tuple[str, str, int]) -> list[dict[str, Any]]:
        return [{"role": r, "pool": p, "replicas": n, "tensor_parallel": 4} for r, p, n in groups]

    instances = {"p4d.24xlarge": {"usd_per_hour": LIST_P4D}}
    if priced_g6e:
        instances["g6e.12xlarge"] = {"usd_per_hour": LIST_G6E}
    return parse_spec({
        "name": "cost-test",
        "model": {"name": "Qwen/Qwen3-30B-A3B", "revision": "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"},
        "pools": [
            {"name": "p4d", "instance_type": "p4d.24xlarge", "gpus_per_node": 8, "gpu_kind": "A100-40GB",
             "max_nodes": 4},
            {"name": "g6e", "instance_type": "g6e.12xlarge", "gpus_per_node": 4, "gpu_kind": "L40S-48GB"},
        ],
        "experiments": [
            {"name": "agg", "mode": "aggregated", "workers": workers(("worker", "p4d", 4))},
            {"name": "disagg", "mode": "disaggregated", "workers": workers(("prefill", "p4d", 2),
                                                                            ("decode", "p4d", 2))},
            {"name": "hetero", "mode": "disaggregated", "workers": workers(("prefill", "p4d", 2),
                                                                            ("decode", "g6e", 2))},
            {"name": "disagg-big", "mode": "disaggregated", "workers": workers(("prefill", "p4d", 4),
                                                                                ("decode", "p4d", 4))},
        ],
        "workloads": [{"kind": "concurrency_sweep", "concurrency": [1, 4], "isl": 128, "osl": 64,
                       "duration_s": 120}],
        "pricing": {"source": "test list price", "as_of": "2026-01-01", "instances": instances,
                    "eks_cluster_usd_per_hour": EKS},
        "budget": budget or {},
        "design": {"order": "as-written"},  # the figures below follow the spec's order
    })


def at(hhmm: str) -> str:
    return f"2026-01-05T{hhmm}:00+00:00"


def ev(experiment: str, event: str, hhmm: str, pool: str | None = None, **detail: Any) -> dict[str, Any]:
    return {"campaign_id": C, "experiment": experiment, "event": event, "at": at(hhmm), "pool": pool,
            "detail_json": json.dumps(detail) if detail else None}


def experiment_events(exp: str, pools: dict[str, tuple[int, str, str | None]], loads: list[tuple[str, str, str]],
                      ) -> list[dict[str, Any]]:
    """scale at start, restore at end (None: not restored), loads (step_id, start, end)."""
    rows = []
    for pool, (nodes, start, _) in pools.items():
        rows.append(ev(exp, "scale_requested", start, pool, nodes=nodes, previous=0))
    for step_id, start, end in loads:
        rows += [ev(exp, "load_start", start, step_id=step_id), ev(exp, "load_end", end, step_id=step_id)]
    for pool, (_, _, end) in pools.items():
        if end is not None:
            rows.append(ev(exp, "pool_restored", end, pool, restored_to=0))
    return rows


def step(exp: str, step_id: str, tokens: int, status: str = "succeeded", **extra: Any) -> dict[str, Any]:
    c = int(step_id.split("-c")[1].split("-", maxsplit=1)[0])
    return {"campaign_id": C, "experiment": exp, "step_id": step_id, "status": status, "total_output_tokens": tokens,
            "workload": "concurrency-sweep", "workload_kind": "concurrency_sweep", "concurrency": c, "repeat": 0,
            "mode": "aggregated" if exp == "agg" else "disaggregated", "benchmark_duration_s": 120.0, **extra}


@pytest.fixture
def spec() -> CampaignSpec:
    return make_spec()


@pytest.fixture
def plan(spec: CampaignSpec) -> CampaignPlan:
    return plan_campaign(spec, "aws")


# ------------------------------------------------------------------------------------------ cost rows


def agg_timeline() -> list[dict[str, Any]]:
    return [
        ev("_campaign", "planned", "09:55", steps=8),
        *experiment_events("agg", {"p4d": (2, "10:00", "12:30")},
                           [("warmup", "10:20", "10:25"), (SWEEP[0], "10:30", "10:32"), (SWEEP[1], "10:35", "10:37")]),
    ]


def test_cost_rows_allocation_period_price_fee_and_tokens(spec: CampaignSpec, plan: CampaignPlan) -> None:
    steps = [step("agg", SWEEP[0], 1000), step("agg", SWEEP[1], 3000),
             step("agg", "concurrency-sweep-c4-r1", 500, status="failed"), step("disagg", SWEEP[0], 9999)]
    rows = costs.cost_rows(C, spec, plan, agg_timeline(), steps, simulated=False)
    assert len(rows) == 1
    r = rows[0]
    fees = json.loads(r["fees_json"])
    # 2 nodes from 10:00 to 12:30 = 2.5 h at $21.96 (and its root volume), plus the EKS fee for the 2.5 h the experiment ran
    assert fees["node_usd"] == pytest.approx(2 * 2.5 * P4D, rel=1e-12)
    assert fees["eks_cluster_usd"] == pytest.approx(0.10 * 2.5, rel=1e-12)
    assert r["cost_usd"] == pytest.approx(2 * 2.5 * P4D + 0.10 * 2.5, rel=1e-12)
    assert (r["pool"], r["nodes"], r["node_hours"], r["gpu_hours"]) == ("p4d", 2, 5.0, 40.0)
    assert (r["gpu_kind"], r["instance_type"], r["price_per_node_hour_usd"]) == ("A100-40GB", "p4d.24xlarge", P4D)
    assert r["price_source"] == "test list price (as of 2026-01-01)"
    # only the succeeded steps of this experiment count
    assert r["successful_output_tokens"] == 4000
    assert r["usd_per_1m_output_tokens"] == pytest.approx((2 * 2.5 * P4D + 0.25) / 4000 * 1e6, rel=1e-12)
    # usage: the two 2-minute load windows (warm-up excluded) x 2 nodes x price
    assert fees["usage_based_usd"] == pytest.approx(2 * (4 / 60) * P4D, rel=1e-12)
    assert fees["period_end_event"] == "pool_restored"
    assert "root EBS volumes" in fees["scope_text"] and any("network" in x for x in fees["excluded"])
    assert "; model-cache file system (EFS) and S3 results (the platform's, kept between" in fees["scope_text"]
    assert fees["root_volume_usd"] == pytest.approx(2 * 2.5 * ROOT_H) and fees["auto_mode_fee_usd"] == 0.0
    # the node-hour by part, and every scope item priced or excluded with why
    assert fees["node_price_parts"] == {"instance": LIST_P4D, "root_volume": pytest.approx(ROOT_H), "auto_mode_fee": 0.0}
    items = {i["item"]: i for i in fees["scope_items"]}
    assert items["root EBS volumes"]["status"] == "priced" and "p4d 200 GiB" in items["root EBS volumes"]["how"]
    assert all(i["status"] == "priced" or i.get("why") for i in items.values())
    assert items["EKS Auto Mode management fee"] == {"item": "EKS Auto Mode management fee", "status": "excluded",
                                                      "why": "not applicable: no Auto Mode pool"}
    assert r["simulated"] is False
    assert costs.usage_cost(spec, plan, agg_timeline(), "agg") == pytest.approx(fees["usage_based_usd"])


def test_cost_rows_unrestored_pool_runs_to_the_latest_event(spec: CampaignSpec, plan: CampaignPlan) -> None:
    tl = experiment_events("agg", {"p4d": (2, "10:00", None)}, [(SWEEP[0], "10:30", "11:00")])
    (r,) = costs.cost_rows(C, spec, plan, tl, [], simulated=True)
    assert r["node_hours"] == pytest.approx(2.0)  # 2 nodes x 1 h (10:00 .. latest event 11:00)
    assert json.loads(r["fees_json"])["period_end_event"] == "latest_event"
    assert r["successful_output_tokens"] == 0 and r["usd_per_1m_output_tokens"] is None
    assert r["simulated"] is True


def hetero_timeline() -> list[dict[str, Any]]:
    return experiment_events("hetero", {"p4d": (1, "13:00", "14:00"), "g6e": (2, "13:00", "14:30")},
                             [(SWEEP[0], "13:20", "13:22"), (SWEEP[1], "13:25", "13:27")])


def test_cost_rows_per_pool_and_experiment_totals(spec: CampaignSpec, plan: CampaignPlan) -> None:
    steps = [step("hetero", SWEEP[0], 2500), step("hetero", SWEEP[1], 4100)]
    rows = costs.cost_rows(C, spec, plan, hetero_timeline(), steps, simulated=False)
    assert [(r["pool"], r["gpu_kind"], r["nodes"]) for r in rows] == [("g6e", "L40S-48GB", 2), ("p4d", "A100-40GB", 1)]
    g6e, p4d = rows
    # the cluster fee (1.5 h of wall time) is on the experiment's first pool row only
    assert g6e["cost_usd"] == pytest.approx(2 * 1.5 * G6E + 0.10 * 1.5)
    assert p4d["cost_usd"] == pytest.approx(1 * 1.0 * P4D)
    assert json.loads(p4d["fees_json"])["eks_cluster_usd"] == 0.0
    total = costs.experiment_totals(rows)["hetero"]
    expected = 2 * 1.5 * G6E + 0.10 * 1.5 + P4D
    assert total["cost_usd"] == pytest.approx(expected)
    assert total["gpu_usd_per_hour"] == pytest.approx(2 * G6E + P4D)
    assert total["usd_per_1m_output_tokens"] == pytest.approx(expected / 6600 * 1e6)
    # the rows' $/1M are each pool's share: they add up to the experiment's
    assert sum(r["usd_per_1m_output_tokens"] for r in rows) == pytest.approx(total["usd_per_1m_output_tokens"])


def test_unpriced_pool_has_no_cost(plan: CampaignPlan) -> None:
    spec = make_spec(priced_g6e=False)
    rows = costs.cost_rows(C, spec, plan, hetero_timeline(), [step("hetero", SWEEP[0], 1000)], simulated=False)
    g6e, p4d = rows
    assert (g6e["price_per_node_hour_usd"], g6e["cost_usd"], g6e["usd_per_1m_output_tokens"]) == (None, None, None)
    assert g6e["price_source"] == "unpriced"
    assert g6e["node_hours"] == pytest.approx(3.0)  # still recorded
    assert p4d["cost_usd"] == pytest.approx(P4D) and p4d["price_source"] != "unpriced"
    assert costs.experiment_totals(rows)["hetero"]["usd_per_1m_output_tokens"] is None
    assert costs.usage_cost(spec, plan, hetero_timeline(), "hetero") is None


def test_step_costs_use_load_time_only(spec: CampaignSpec, plan: CampaignPlan) -> None:
    out = costs.step_costs(spec, plan, [step("agg", SWEEP[0], 1000), step("agg", SWEEP[1], 50, status="failed")])
    assert out[0]["usd_per_hour"] == pytest.approx(2 * P4D)
    assert out[0]["cost_usd"] == pytest.approx(2 * P4D * 120 / 3600)
    assert out[0]["usd_per_1m_output_tokens"] == pytest.approx(2 * P4D * 120 / 3600 / 1000 * 1e6)
    assert out[1]["usd_per_1m_output_tokens"] is None


# ------------------------------------------------------------------------------------------ budget


def test_accrued_counts_restored_and_held_pools_up_to_now(spec: CampaignSpec, plan: CampaignPlan) -> None:
    tl = [*agg_timeline(), *experiment_events("disagg", {"p4d": (2, "13:00", None)}, [])]
    got = costs.accrued_usd(spec, plan, tl, at("14:00"))
    assert got == pytest.approx(2 * 2.5 * P4D + 2 * 1.0 * P4D + 0.10 * (2.5 + 1.0))
    # earlier "now": the held pool counts only up to it
    assert costs.accrued_usd(spec, plan, tl, at("13:30")) == pytest.approx(
        2 * 2.5 * P4D + 2 * 0.5 * P4D + 0.10 * (2.5 + 0.5))


def test_remaining_from_the_plan_estimates(spec: CampaignSpec, plan: CampaignPlan) -> None:
    assert plan.est_usd is not None
    assert costs.remaining_usd(spec, plan, set()) == pytest.approx(plan.est_usd, abs=0.01)
    everything = {(e.name, s.step_id) for e in plan.experiments for s in e.steps}
    assert costs.remaining_usd(spec, plan, everything) == 0.0
    assert costs.remaining_hours(plan, everything) == 0.0
    # agg half done: its other step (130 s with set-up) and its teardown (180 s) are left
    agg = plan.experiment("agg")
    rest = everything - {("agg", SWEEP[1])}
    assert costs.remaining_hours(plan, rest) == pytest.approx((agg.steps[1].est_s + 180.0) / 3600)
    assert costs.remaining_usd(spec, plan, rest) == pytest.approx((agg.steps[1].est_s + 180.0) / 3600
                                                                  * (2 * P4D + 0.10))


def test_budget_problem_names_the_figures_and_the_next_step() -> None:
    spec = make_spec(budget={"max_usd": 60.0})
    plan = plan_campaign(spec, "aws")
    done = {("agg", SWEEP[0])}
    now = at("12:00")
    spent = costs.accrued_usd(spec, plan, agg_timeline(), now)
    left = costs.remaining_usd(spec, plan, done)
    assert spent + left > 60.0
    msg = budget.budget_problem(spec, plan, agg_timeline(), done, now)
    assert msg == (f"budget.max_usd: accrued ${spent:.2f} + remaining estimate ${left:.2f} = ${spent + left:.2f} "
                   f"exceeds $60.00 before step {SWEEP[1]} of experiment agg")


def test_budget_problem_none_within_budget_and_hours_checked() -> None:
    roomy = make_spec(budget={"max_usd": 100_000.0, "max_hours": 100.0})
    plan = plan_campaign(roomy, "aws")
    assert budget.budget_problem(roomy, plan, agg_timeline(), set(), at("12:00")) is None
    tight = make_spec(budget={"max_hours": 3.0})
    msg = budget.budget_problem(tight, plan_campaign(tight, "aws"), agg_timeline(), set(), at("12:00"))
    left_h = costs.remaining_hours(plan, set())
    # elapsed from the first event (09:55) to 12:00
    assert msg == (f"budget.max_hours: elapsed 2.08 h + remaining estimate {left_h:.2f} h = {125 / 60 + left_h:.2f} h "
                   f"exceeds 3 h before step {SWEEP[0]} of experiment agg")


# ------------------------------------------------------------------------------------------ the view


def test_cost_efficiency_view_categories_and_figures(tmp_path: Path, spec: CampaignSpec, plan: CampaignPlan) -> None:
    lake = LocalLake(tmp_path / "lake")
    timeline = [
        *agg_timeline(),
        *experiment_events("disagg", {"p4d": (2, "12:40", "14:40")}, [(SWEEP[0], "13:00", "13:02")]),
        *hetero_timeline(),
        *experiment_events("disagg-big", {"p4d": (4, "15:00", "16:00")}, [(SWEEP[0], "15:20", "15:22")]),
    ]
    slo = {"slo_ttft_ms": 500.0}
    steps = [
        step("agg", SWEEP[0], 1000, output_tokens_per_s=8.0, **slo),
        step("agg", SWEEP[1], 3000, output_tokens_per_s=25.0, **slo),
        step("agg", "concurrency-sweep-c4-r1", 700, status="failed", **slo),
        step("disagg", SWEEP[0], 1200, output_tokens_per_s=10.0),
        step("hetero", SWEEP[0], 2500, output_tokens_per_s=20.0, benchmark_duration_s=100.0),
        step("hetero", SWEEP[1], 4100, output_tokens_per_s=34.0, benchmark_duration_s=140.0),
        step("disagg-big", SWEEP[0], 5000, output_tokens_per_s=40.0),
    ]
    requests = [  # agg c1: 2 of 2 meet the TTFT SLO; c4: 3 of 4
        {"campaign_id": C, "experiment": "agg", "step_id": sid, "repeat": 0, "request_index": i, "ttft_ms": t}
        for sid, ttfts in ((SWEEP[0], (100.0, 200.0)), (SWEEP[1], (100.0, 100.0, 100.0, 900.0)))
        for i, t in enumerate(ttfts)
    ]
    lake.write("experiments", [experiment_row(C, i, e) for i, e in enumerate(spec.experiments)], part_name="exp")
    lake.write("timeline", timeline, part_name="timeline")
    lake.write("steps", steps, part_name="steps")
    lake.write("requests", requests, part_name="requests")
    lake.write("costs", costs.cost_rows(C, spec, plan, timeline, steps, simulated=False), part_name="costs")

    cols, result = QueryEngine(lake.root).run("v_cost_efficiency")
    rows = {r["experiment"]: r for r in (dict(zip(cols, x, strict=True)) for x in result)}
    assert {k: r["category"] for k, r in rows.items()} == {
        "agg": "aggregated same-GPU baseline",
        "disagg": "disaggregated same GPU total",
        "hetero": "disaggregated heterogeneous",
        "disagg-big": "other",  # 32 GPUs: no aggregated experiment with that total
    }
    h = rows["hetero"]
    assert (h["gpus"], h["gpus_allocated"], h["gpu_kinds"], h["nodes"]) == (16, 16, "A100-40GB+L40S-48GB", 3)
    # by hand from the timeline: p4d 1 node 13:00-14:00, g6e 2 nodes 13:00-14:30, cluster fee for 1.5 h;
    # tokens from the two succeeded steps
    cost = 1 * 1.0 * P4D + 2 * 1.5 * G6E + 0.10 * 1.5
    assert h["cost_usd"] == pytest.approx(cost)
    assert h["successful_output_tokens"] == 6600
    assert h["usd_per_1m_output_tokens"] == pytest.approx(cost / (2500 + 4100) * 1e6)
    assert h["gpu_usd_per_hour"] == pytest.approx(P4D + 2 * G6E)
    assert h["usage_cost_usd"] == pytest.approx((P4D + 2 * G6E) * 4 / 60)
    assert h["output_tokens_per_s"] == pytest.approx(6600 / 240)
    assert h["sweep_peak_output_tokens_per_s"] == pytest.approx(34.0)
    assert h["tokens_per_usd"] == pytest.approx(6600 / cost)
    assert h["price_source"] == "test list price (as of 2026-01-01)"
    assert "not included" in h["scope"] and h["simulated"] is False
    a = rows["agg"]
    assert a["successful_output_tokens"] == 4000 and (a["n_steps_succeeded"], a["n_steps_failed"]) == (2, 1)
    assert a["goodput_ratio"] == pytest.approx((1.0 + 0.75) / 2)
    assert a["goodput_per_s"] == pytest.approx(3 / 120)
    assert a["goodput_per_usd_hour"] == pytest.approx(3 / 120 / (2 * P4D))
    assert rows["disagg"]["goodput_per_usd_hour"] is None  # no SLO on its steps


def test_a_pool_handed_over_is_paid_once_by_each_holder_in_turn(spec: CampaignSpec, plan: CampaignPlan) -> None:
    """agg keeps its p4d pool warm for disagg (pool_handed_over at 12:30, no restore for agg); disagg scales
    it at 12:31 and still holds it at 14:00. The budget guard counts the pool once at any moment: agg's
    window ends at the handover, and the cost row says which event ended it."""
    tl = [*agg_timeline()[:-1], ev("agg", "pool_handed_over", "12:30", "p4d", nodes=2),
          *experiment_events("disagg", {"p4d": (2, "12:31", None)}, [])]
    got = costs.accrued_usd(spec, plan, tl, at("14:00"))
    held_h = 2.5 + (14 * 60 - (12 * 60 + 31)) / 60
    assert got == pytest.approx(2 * held_h * P4D + 0.10 * held_h)
    rows = costs.cost_rows(C, spec, plan, tl, [], simulated=False)
    agg = next(r for r in rows if r["experiment"] == "agg")
    fees = json.loads(agg["fees_json"])
    assert fees["period_end"] == at("12:30").replace("Z", "+00:00") and fees["period_end_event"] == "pool_handed_over"


def test_cold_start_is_reported_apart_and_the_steady_state_per_1m_leaves_it_out(
        tmp_path: Path, spec: CampaignSpec, plan: CampaignPlan) -> None:
    """agg boots the p4d pool (10:00) and answers at 10:30, then hands the pool over warm (12:30); disagg takes
    it at 12:31 and answers at 12:46 (a deploy on warm nodes), restored 14:31. Each experiment's cold start is
    its own (scale request to ready), and the steady-state $/1M of both leaves it out, so the first experiment
    no longer carries the node boot in its $/1M; hetero never answered: all of its cost is cold start."""
    tl = [*agg_timeline()[:-1], ev("agg", "ready", "10:30", startup_s=1800.0),
          ev("agg", "pool_handed_over", "12:30", "p4d", nodes=2),
          *experiment_events("disagg", {"p4d": (2, "12:31", "14:31")}, [(SWEEP[0], "13:00", "13:02")]),
          ev("disagg", "ready", "12:46", startup_s=900.0),
          *experiment_events("hetero", {"p4d": (1, "15:00", "15:30")}, [])]
    steps = [step("agg", SWEEP[0], 1_000_000), step("disagg", SWEEP[0], 1_000_000)]
    rows = costs.cost_rows(C, spec, plan, tl, steps, simulated=False)
    totals = costs.experiment_totals(rows)
    agg, disagg, hetero = totals["agg"], totals["disagg"], totals["hetero"]
    assert agg["cost_usd"] == pytest.approx(2 * 2.5 * P4D + EKS * 2.5)
    assert agg["cold_start_usd"] == pytest.approx(2 * 0.5 * P4D + EKS * 0.5)  # boot + deploy
    assert disagg["cold_start_usd"] == pytest.approx(2 * 0.25 * P4D + EKS * 0.25)  # deploy on warm nodes only
    for t in (agg, disagg):
        assert t["steady_state_usd"] == pytest.approx(t["cost_usd"] - t["cold_start_usd"])
        assert t["steady_state_usd_per_1m_output_tokens"] == pytest.approx(t["steady_state_usd"])  # 1M tokens
    assert agg["steady_state_usd"] == pytest.approx(2 * 2.0 * P4D + EKS * 2.0)
    assert hetero["cold_start_usd"] == pytest.approx(hetero["cost_usd"]) and hetero["steady_state_usd"] == 0.0
    fees = json.loads(next(r for r in rows if r["experiment"] == "hetero")["fees_json"])
    assert fees["cold_start_end_event"] == "none: never ready (all cold start)"

    lake = LocalLake(tmp_path / "lake")
    lake.write("experiments", [experiment_row(C, i, e) for i, e in enumerate(spec.experiments)], part_name="exp")
    lake.write("timeline", tl, part_name="timeline")
    lake.write("steps", steps, part_name="steps")
    lake.write("costs", rows, part_name="costs")
    cols, result = QueryEngine(lake.root).run("v_cost_efficiency")
    view = {r["experiment"]: r for r in (dict(zip(cols, x, strict=True)) for x in result)}
    for name in ("agg", "disagg"):
        v, t = view[name], totals[name]
        assert v["cold_start_usd"] == pytest.approx(t["cold_start_usd"])
        assert v["steady_state_cost_usd"] == pytest.approx(t["steady_state_usd"])
        assert v["steady_state_usd_per_1m_output_tokens"] == pytest.approx(t["steady_state_usd_per_1m_output_tokens"])
        assert v["cold_start_share"] == pytest.approx(t["cold_start_usd"] / t["cost_usd"])
        assert v["usd_per_1m_output_tokens"] == pytest.approx(t["usd_per_1m_output_tokens"])  # allocation, beside
    assert view["agg"]["cold_start_share"] > view["disagg"]["cold_start_share"]


def test_an_auto_mode_pool_pays_its_management_fee_where_priced_and_is_named_unpriced_where_not():
    from benchctl.planning.node_price import node_price, node_price_parts, scope_items

    data = make_spec().model_dump(mode="json", exclude_none=True)
    data["pools"][0].update(provider="auto-mode", root_volume_gib=100)
    spec = parse_spec(data)
    assert node_price_parts(spec, "p4d") == {"instance": LIST_P4D, "root_volume": pytest.approx(100 * 0.08 / 730),
                                             "auto_mode_fee": None}
    assert node_price(spec, "p4d") == pytest.approx(LIST_P4D + 100 * 0.08 / 730)  # the unpriced fee left out...
    (fee,) = [i for i in scope_items(spec, ["p4d"]) if "Auto Mode" in i["item"]]
    assert fee["status"] == "excluded" and "['p4d.24xlarge']" in fee["why"]  # ...and named
    data["pricing"]["auto_mode_fee_usd_per_hour"] = {"p4d.24xlarge": 2.5}
    spec = parse_spec(data)
    assert node_price(spec, "p4d") == pytest.approx(LIST_P4D + 100 * 0.08 / 730 + 2.5)
    (fee,) = [i for i in scope_items(spec, ["p4d"]) if "Auto Mode" in i["item"]]
    assert fee["status"] == "priced"
    plan = plan_campaign(spec, "aws")
    bare = plan_campaign(parse_spec({**data, "pricing": {**data["pricing"], "auto_mode_fee_usd_per_hour": {}}}), "aws")
    assert plan.est_usd is not None and bare.est_usd is not None and plan.est_usd > bare.est_usd  # the plan prices it too
