"""Deployments as a level of the design (``design:``), through the spec, the plan and the campaign's operations:
each experiment deployed several times in a randomized counterbalanced order with its seed recorded, every
deployment its own plan entry and records under the experiment's name in the lake; a step whose every request
failed is a measured overload that ends its sweep's escalation, not the campaign; a client-bound step never
steers the search; a concurrency: auto search that cannot reach its edge is refused; a warm pool waits a node's
boot, not the capacity timeout; the plan's allocation table prices the design it runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.campaign import Task
from benchctl.campaign.context import Ctx
from benchctl.campaign.ingest import ingest_step
from benchctl.campaign.load import check_load, launch_step
from benchctl.campaign.probes import probe_load
from benchctl.campaign.records import LoadRecord
from benchctl.campaign.serving import deploy
from benchctl.errors import SpecError
from benchctl.local.lake import LocalLake
from benchctl.planning.plan import plan_campaign
from benchctl.spec.design import Design, rounds, twin_speed, unit_name
from benchctl.spec.model import parse_spec
from benchctl.spec.names import dgd_name_problem
from tests.fakes.ports import RECORDS_JSONL, SUMMARY_JSON, FakeLoad, FakeServing, providers_for_test

ROOT = Path(__file__).resolve().parents[2]


def _smoke(**top: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data.update(top)
    return data


def _ctx() -> Ctx:
    return Ctx(campaign_id="c1", run_uri="file:///x", lake_uri="file:///y", poll_seconds=1, fail_at=None)


# ----------------------------------------------------------------------------------------- the spec and its order


@pytest.mark.parametrize(("design", "field"), [
    ({"deployments": 0}, "design.deployments"),
    ({"deployments": 9}, "design.deployments"),
    ({"deployments": 2.5}, "design.deployments"),
    ({"order": "sideways"}, "design.order"),
    ({"order_seed": -1}, "design.order_seed"),
    ({"twin_spread_pct": 60}, "design.twin_spread_pct"),
    ({"deployments": 8, "spread": 1}, "design.spread"),
])
def test_a_design_out_of_its_bounds_is_refused_naming_the_field(design: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_smoke(design=design))
    assert any(line.startswith(field) for line in err.value.problems), err.value.problems


def test_more_runs_than_a_campaign_holds_and_a_deployment_named_like_another_experiment_are_refused() -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(_smoke(design={"deployments": 5}, repeats=9))
    assert "design.deployments: 5 deployments x repeats 9 = 45 repeats per experiment; at most 40" in err.value.problems
    data = _smoke(design={"deployments": 2})
    data["experiments"].append({**data["experiments"][0], "name": "agg--d2"})
    data["comparisons"] = [{"name": "x", "baseline": "agg", "treatment": "disagg"}]
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert any("deployment 2 of experiment 'agg' would be named 'agg--d2', the name of another experiment" in p
               for p in err.value.problems), err.value.problems


def test_the_randomized_order_draws_each_odd_round_and_reverses_it_the_next_from_a_recorded_seed() -> None:
    names = ["a", "b", "c"]
    got = rounds(names, Design(deployments=4), seed=7)
    assert got[1] == list(reversed(got[0])) and got[3] == list(reversed(got[2]))
    assert all(sorted(r) == names for r in got)
    assert rounds(names, Design(deployments=4), seed=7) == got  # the same seed, the same order
    firsts = {tuple(rounds(names, Design(deployments=1), seed=s)[0]) for s in range(40)}
    assert len(firsts) > 3  # the first experiment is no longer always the same one
    assert rounds(names, Design(deployments=3, order="as-written"), seed=7) == [names] * 3


def test_a_deployments_name_fits_dynamos_webhook_and_the_spec_or_is_shortened_with_a_hash() -> None:
    assert unit_name("agg", 1, 1) == "agg" and unit_name("agg", 2, 3) == "agg--d2"
    # a name past the spec's 40 characters with "--d3" is cut, with a hash of the whole so that two experiments
    # that share a head stay apart; its DGD (benchctl.spec.names.dgd_name) fits Dynamo's webhook either way
    long = "disagg-2p2d-tp4-with-a-long-name-xyz1"
    short = unit_name(long, 3, 5, ["prefill", "decode"])
    assert len(f"{long}--d3") > 40 and short.endswith("-d3") and len(short) <= 20
    assert short != unit_name("disagg-2p2d-tp4-with-a-long-name-xyz2", 3, 5, ["prefill", "decode"])
    assert dgd_name_problem(short, ["prefill", "decode"]) is None


def test_the_twins_spread_is_seeded_per_deployment_and_off_by_default() -> None:
    on = Design(deployments=2, twin_spread_pct=5)
    assert twin_speed(Design(deployments=2), 42, "agg--d1") == 1.0
    speeds = {u: twin_speed(on, 42, u) for u in ("agg--d1", "agg--d2", "disagg--d1", "disagg--d2")}
    assert len(set(speeds.values())) == 4 and all(0.8 < s < 1.25 for s in speeds.values())
    assert twin_speed(on, 42, "agg--d1") == speeds["agg--d1"] and twin_speed(on, 43, "agg--d1") != speeds["agg--d1"]


# ----------------------------------------------------------------------------------------- the plan


def test_each_deployment_is_a_plan_entry_running_its_own_repeats_under_the_experiments_name() -> None:
    spec = parse_spec(_smoke(design={"deployments": 2}, repeats=2))
    plan = plan_campaign(spec, "local")
    assert plan.design["deployments"] == 2 and plan.design["order_seed"] == spec.seed
    assert [(e.name, e.lake_name, e.deployment, e.repeats) for e in plan.experiments] == [
        ("agg--d1", "agg", 1, [0, 1]), ("disagg--d1", "disagg", 1, [0, 1]),
        ("disagg--d2", "disagg", 2, [2, 3]), ("agg--d2", "agg", 2, [2, 3])]
    # step ids unique over an experiment's deployments; a step's deployment found from its id
    ids = [s.step_id for e in plan.deployments_of("agg") for s in e.steps]
    assert len(ids) == len(set(ids)) and plan.unit_of_step("agg", "multi-turn-c4-r3").name == "agg--d2"
    # the pools stay warm between consecutive deployments unless design.fresh_nodes asks for other nodes
    assert all(e.handover for e in plan.experiments[:-1])
    fresh = plan_campaign(parse_spec(_smoke(design={"deployments": 2, "fresh_nodes": True}, repeats=2)), "aws")
    assert not any(e.handover for e in fresh.experiments)
    assert fresh.est_s > plan_campaign(spec.model_copy(update={"design": spec.design}), "aws").est_s


# ----------------------------------------------------------------------------------------- overload, client, search


def _probing(tmp_path: Path, serving: Any = None, load: Any = None, **extra: Any) -> Any:
    data = _smoke(**extra)
    data["workloads"] = [{"kind": "concurrency_sweep", "name": "sweep", "concurrency": [4, 16, 64], "isl": 256,
                          "osl": 32, "duration_s": 5, "search": {"max_probes": 3, "duration_s": 3}}]
    spec = parse_spec(data)
    ports = {k: v for k, v in (("serving", serving), ("load", load)) if v is not None}
    return spec, providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, **ports)


def _every_request_failed(artifact_dir: Path) -> None:
    """What AIPerf 0.13 leaves when every request failed: no summary, error records (it exits 1)."""
    (artifact_dir / SUMMARY_JSON).unlink()
    lines = []
    for line in (artifact_dir / RECORDS_JSONL).read_text().splitlines():
        rec = json.loads(line)
        if rec["metadata"].get("benchmark_phase") == "profiling":
            rec["metrics"] = {}
            rec["error"] = {"code": 503, "type": "HTTPError", "message": "Service Unavailable"}
        lines.append(json.dumps(rec))
    (artifact_dir / RECORDS_JSONL).write_text("\n".join(lines) + "\n")


def test_a_sweep_step_whose_every_request_failed_is_a_measured_overload_that_ends_the_sweeps_escalation(
        tmp_path: Path) -> None:
    _, p = _probing(tmp_path, serving=FakeServing(), load=FakeLoad())
    exp = p.state.plan().experiments[0].name
    deploy(p, _ctx(), Task(state="Deploy", experiment=exp))
    for step in ("sweep-c4-r0", "sweep-c16-r0"):
        launch_step(p, _ctx(), Task(state="LaunchLoad", experiment=exp, step=step))
        rec = p.state.load(exp, step)
        if step == "sweep-c16-r0":
            _every_request_failed(Path(rec.artifact_dir))
        check_load(p, _ctx(), Task(state="CheckLoad", experiment=exp, step=step))
        got = ingest_step(p, _ctx(), exp, step)  # no LoadFailed: the campaign goes on
    assert got["status"] == "failed" and got["overloaded"] is True
    assert p.state.load(exp, "sweep-c16-r0").overloaded
    # the sweep's higher load does not run, and says why
    out = launch_step(p, _ctx(), Task(state="LaunchLoad", experiment=exp, step="sweep-c64-r0"))
    assert out["skipped"] and "sweep-c16-r0 at c=16 answered no request (overloaded: a measured miss)" in out["why"]
    assert p.state.load(exp, "sweep-c64-r0").skipped
    # the search reads the overload as a certain miss and bisects below it
    first = next(s for s in p.state.plan().experiment(exp).steps if s.probe == 1)
    nxt = probe_load(p, _ctx(), exp, first)
    assert nxt.load is not None and 4 < nxt.load < 16, nxt


def test_the_search_never_chooses_a_probe_from_a_step_whose_load_generator_fell_behind(tmp_path: Path) -> None:
    _, p = _probing(tmp_path)
    exp = p.state.plan().experiments[0].name
    for c, (good, n, behind) in {4: (200, 200, False), 16: (200, 200, True), 64: (20, 200, False)}.items():
        p.state.save_load(exp, f"sweep-c{c}-r0", LoadRecord(state={}, launched_at=0.0, ended=True, exit_code=0,
                                                            ingest_status="succeeded", slo={"good": good, "n": n},
                                                            client_bound=behind))
    first = next(s for s in p.state.plan().experiment(exp).steps if s.probe == 1)
    nxt = probe_load(p, _ctx(), exp, first)
    # c=16 looked within, but it sent less than its load: the bracket is [4, 64), bisected at 16 (once client-bound
    # is no proof of the client's reach: a neighbour's burst does that too)
    assert (nxt.within, nxt.past, nxt.load) == (4, 64, 16), nxt


def test_a_search_whose_client_falls_behind_never_probes_that_load_again_and_stops_naming_the_client(
        tmp_path: Path) -> None:
    _, p = _probing(tmp_path)
    exp = p.state.plan().experiments[0].name
    steps = {s.step_id: s for s in p.state.plan().experiment(exp).steps}

    def measured(sid: str, c: int, behind: bool) -> None:
        p.state.save_load(exp, sid, LoadRecord(state={}, launched_at=0.0, ended=True, exit_code=0, concurrency=c,
                                               ingest_status="succeeded", slo={"good": 200, "n": 200},
                                               client_bound=behind))

    measured("sweep-c4-r0", 4, False)
    measured("sweep-c16-r0", 16, True)
    assert probe_load(p, _ctx(), exp, steps["sweep-s1-r0"]).load == 8  # one strike at c>=16: ramps up as before
    measured("sweep-s1-r0", 8, True)
    # two strikes at c>=8: not 8 again (a probe spent on nothing), the ramp stays below it
    assert probe_load(p, _ctx(), exp, steps["sweep-s2-r0"]).load == 7
    measured("sweep-s2-r0", 5, True)
    nxt = probe_load(p, _ctx(), exp, steps["sweep-s3-r0"])
    assert nxt.load is None and not nxt.located, nxt
    assert "the load generator fell behind twice at or above c=5 (client-bound)" in nxt.why, nxt.why


def test_a_single_client_bound_probe_is_tried_again_at_its_load() -> None:
    from benchctl.campaign.probes import out_of_reach

    assert out_of_reach([]) is None and out_of_reach([8]) is None  # once: a neighbour's burst, say
    assert out_of_reach([8, 8]) == 8 and out_of_reach([16, 8]) == 8 and out_of_reach([16, 8, 5]) == 5
    assert out_of_reach([16, 16]) == 16 and out_of_reach([5, 16]) == 5  # a strike at a load counts for those below


def test_a_later_deployment_reruns_the_first_deployments_probe_loads(tmp_path: Path) -> None:
    _, p = _probing(tmp_path, design={"deployments": 2})
    plan = p.state.plan()
    d1, d2 = plan.deployments_of(plan.experiments[0].lake_name)
    p.state.save_load(d1.name, "sweep-s1-r0", LoadRecord(state={}, launched_at=0.0, ended=True, exit_code=0,
                                                         ingest_status="succeeded", slo={"good": 200, "n": 200},
                                                         concurrency=9))
    probe = next(s for s in d2.steps if s.probe == 1)
    assert probe.repeat == 1 and probe_load(p, _ctx(), d2.name, probe).load == 9


def test_an_auto_search_that_cannot_reach_its_edge_is_refused_naming_both_numbers() -> None:
    from benchctl.planning.placement import feasible

    data = _smoke()
    data["workloads"] = [{"kind": "concurrency_sweep", "name": "sweep", "concurrency": "auto", "isl": 256, "osl": 32,
                          "duration_s": 5}]
    with pytest.raises(SpecError) as err:
        feasible(parse_spec(data))
    (line,) = err.value.problems
    assert line.startswith("workloads[0].search.max_probes: 6 probes cannot locate the SLO edge from the default "
                           "start c=16 up to c=1024, experiment 'agg'"), line
    assert "that takes up to 10" in line and "set search.start to the predicted edge" in line
    data["workloads"][0]["search"] = {"start": 700}
    assert feasible(parse_spec(data))  # from the prediction: one doubling either way, then 3 bisections: 5 probes


def test_a_pool_kept_warm_waits_a_nodes_boot_not_the_capacity_timeout(tmp_path: Path) -> None:
    from benchctl import campaign
    from benchctl.errors import DeadlineExceeded
    from benchctl.local.pool import LocalPool
    from benchctl.planning.plan import WARM_CAPACITY_S

    class Serving:
        def prepare(self, request: Any) -> None:
            pass

        def teardown(self, state: Any) -> dict[str, bool]:
            return {"removed": True}

    class Gone(LocalPool):  # the node kept warm went away: never ready again
        ready_now = True

        def ready(self, record: Any) -> bool:
            return self.ready_now

    spec = parse_spec(_smoke(timeouts={"capacity_s": 3600, "ready_s": 120, "load_grace_s": 120}))
    now = [1000.0]
    pool = Gone({"gpu-a100": 0})
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, pools=pool, serving=Serving())
    p.clock = lambda: now[0]  # type: ignore[method-assign]
    first, second = (e.name for e in p.state.plan().experiments)
    campaign.scale_pools(p, _ctx(), Task(first))
    campaign.teardown_experiment(p, _ctx(), Task(first), handover=True)
    campaign.scale_pools(p, _ctx(), Task(second))
    rec = p.state.pools(second)
    pool.ready_now = False
    now[0] = rec.requested_at + WARM_CAPACITY_S - 1
    assert campaign.check_capacity(p, _ctx(), Task(state="CheckCapacity", experiment=second)) == {"done": False}
    now[0] = rec.requested_at + WARM_CAPACITY_S + 1  # far inside timeouts.capacity_s (3600 s)
    with pytest.raises(DeadlineExceeded, match=f"kept warm by {first}, not ready within 600 s"):
        campaign.check_capacity(p, _ctx(), Task(state="CheckCapacity", experiment=second))


# ----------------------------------------------------------------------------------------- the allocation table


def test_the_allocation_table_prices_the_plans_own_design_as_the_plan_does_and_trades_power_for_money() -> None:
    from benchctl.forecast.allocation import allocations, format_allocations

    spec = parse_spec(yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text()))
    plan = plan_campaign(spec, "aws")
    rows = {(a.deployments, a.repeats): a for a in allocations(spec, plan)}
    own = rows[(spec.design.deployments, spec.repeats)]
    assert own.chosen and own.hours == pytest.approx(plan.est_s / 3600, rel=1e-3)
    assert own.usd == pytest.approx(plan.est_usd, rel=1e-3)
    # one deployment per side cannot see a spread larger than it assumes; several measure it
    assert rows[(1, 3)].false_directional_2x > 0.05 > rows[(5, 1)].false_directional_2x
    assert rows[(5, 1)].power > rows[(3, 1)].power > rows[(1, 3)].power
    assert rows[(5, 1)].usd > rows[(1, 3)].usd
    text = format_allocations(spec, list(rows.values()))
    assert "5 x 1" in text and "<- this plan" in text and "false directional" in text


def test_the_lake_names_a_deployments_rows_by_its_experiment_and_costs_each_deployments_own_pools(
        tmp_path: Path) -> None:
    from benchctl.planning.costs import cost_rows, experiment_totals

    spec = parse_spec(_smoke(design={"deployments": 2}, pricing={"instances": {"p4d.24xlarge": {"usd_per_hour": 20.0}}}))
    plan = plan_campaign(spec, "aws")
    t = "2026-01-05T{}:00+00:00"
    timeline = []
    for i, e in enumerate(plan.experiments):
        timeline += [{"experiment": e.lake_name, "deployment": e.name, "event": "scale_requested", "pool": "gpu-a100",
                      "at": t.format(f"1{i}:00"), "detail_json": json.dumps({"nodes": e.nodes["gpu-a100"]})},
                     {"experiment": e.lake_name, "deployment": e.name, "event": "pool_restored", "pool": "gpu-a100",
                      "at": t.format(f"1{i}:30"), "detail_json": None}]
    rows = cost_rows("c1", spec, plan, timeline, [], simulated=True)
    assert sorted((r["experiment"], r["deployment"]) for r in rows) == [
        ("agg", "agg--d1"), ("agg", "agg--d2"), ("disagg", "disagg--d1"), ("disagg", "disagg--d2")]
    totals = experiment_totals(rows)
    # half an hour per deployment, two deployments: one hour of its nodes; its $/h is one deployment's
    agg_nodes = plan.experiments[0].nodes["gpu-a100"]
    assert totals["agg"]["node_hours"] == pytest.approx(agg_nodes * 1.0)
    assert totals["agg"]["gpu_usd_per_hour"] == pytest.approx(agg_nodes * 20.0, rel=0.2)
