"""GPUs as they are bought (``pools[].capacity``): the spec's rules, a Capacity Block's window at plan and in the
budget guard, reserved and block capacity priced as paid, and EC2's zones and reservations judged in the preflight
and ``doctor`` (benchctl.planning.capacity, the edge benchctl.aws.capacity_checks on moto with
tests/fakes/ec2_capacity.py)."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.errors import SpecError
from benchctl.planning.budget import budget_problem, budget_slack_s, guarded
from benchctl.planning.capacity import BLOCK_RECLAIM_S, teardown_margin_s
from benchctl.planning.costs import block_usage, campaign_block_idle_usd, cost_rows
from benchctl.planning.plan import OVERHEADS, format_plan, plan_campaign
from benchctl.spec.model import parse_spec
from tests.fakes.ec2_capacity import ec2_capacity

ROOT = Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())  # 10 deployments on 2 x p4d.24xlarge
CR = "cr-0123456789abcdef0"


def _spec(capacity: dict[str, Any] | None = None, *, budget: bool = True, **pool: Any) -> Any:
    data = copy.deepcopy(SEED)
    if not budget:
        data.pop("budget", None)
    if capacity is not None:
        data["pools"][0]["capacity"] = capacity
    data["pools"][0].update(pool)
    return parse_spec(data, "t.yaml")


def _problems(capacity: dict[str, Any], **pool: Any) -> list[str]:
    with pytest.raises(SpecError) as err:
        _spec(capacity, **pool)
    return err.value.problems


def _block(start: datetime, hours: float, **extra: Any) -> dict[str, Any]:
    """A block bought at $10/node-h (the seed spec's budget.max_usd holds a 30-hour one at that price)."""
    return {"purchase": "capacity-block", "reservation_id": CR, "zone": "us-east-1a", "usd_per_node_hour": 10.0,
            "block_start": start.isoformat(), "block_end": (start + timedelta(hours=hours)).isoformat(), **extra}


T0 = datetime(2026, 12, 8, 10, 0, tzinfo=UTC)


# ------------------------------------------------------------------------------------------ the spec


def test_a_pool_is_on_demand_unless_its_capacity_says_otherwise():
    assert _spec().pools[0].capacity.purchase == "on-demand"
    spec = _spec({"purchase": "reservation", "reservation_id": CR, "zone": "us-east-1a", "usd_per_node_hour": 15.0})
    assert (spec.pools[0].capacity.reservation_id, spec.pools[0].capacity.zone) == (CR, "us-east-1a")


@pytest.mark.parametrize(("capacity", "pool", "expected"), [
    ({"purchase": "reservation"}, {}, "purchase 'reservation' needs reservation_id"),
    ({"purchase": "on-demand", "reservation_id": CR}, {}, "is given but purchase is 'on-demand'"),
    ({"purchase": "reservation", "reservation_id": "cr-nothex"}, {}, "pools[0].capacity.reservation_id: \"cr-nothex\""),
    ({"zone": "US East"}, {}, "pools[0].capacity.zone: \"US East\" is invalid"),
    ({"purchase": "capacity-block", "reservation_id": CR, "block_start": "2026-12-08T10:00:00Z"}, {},
     "purchase 'capacity-block' needs block_end"),
    ({"purchase": "capacity-block", "reservation_id": CR, "block_start": "2026-12-08T10:00:00",
      "block_end": "2026-12-09T10:00:00Z"}, {}, "has no UTC offset"),
    ({"purchase": "capacity-block", "reservation_id": CR, "block_start": "2026-12-08T10:00:00Z",
      "block_end": "2026-12-08T09:00:00Z"}, {}, "block_end 2026-12-08T09:00:00+00:00 is not after block_start"),
    ({"purchase": "reservation", "reservation_id": CR, "block_end": "2026-12-08T09:00:00Z"}, {},
     "block_end only apply to purchase 'capacity-block'"),
    ({"purchase": "reservation", "reservation_id": CR}, {"provider": "local"}, "needs an EKS pool"),
])
def test_a_capacity_that_cannot_be_bought_is_refused_naming_the_field_and_what_is_valid(capacity, pool, expected):
    got = _problems(capacity, **pool)
    assert any(expected in p for p in got), got
    assert all(p.startswith("pools[0]") for p in got), got  # each problem names where


def test_a_cpu_pool_cannot_be_on_a_reservation():
    data = yaml.safe_load((ROOT / "examples" / "aws-rehearsal.yaml").read_text())
    data["pools"][0]["capacity"] = {"purchase": "reservation", "reservation_id": CR}
    with pytest.raises(SpecError) as err:
        parse_spec(data, "t.yaml")
    assert any("needs a GPU pool" in p and "gpus_per_node 0" in p for p in err.value.problems)


def test_a_spec_with_a_block_parses_back_to_itself():
    spec = _spec(_block(T0, 48))
    again = parse_spec(spec.model_dump(mode="json"), "again")
    assert again == spec and again.pools[0].capacity.block_hours == 48


# ------------------------------------------------------------------------------------------ the plan


def test_a_capacity_block_ending_before_the_campaigns_planned_end_is_refused_at_plan_with_both_times():
    # Given a block that starts with the campaign and lasts less than its planned duration (24.2 h)
    spec = _spec(_block(T0, 20))
    plan = plan_campaign(spec, "aws", start=T0)
    # Then the plan is refused, naming the block's end and the campaign's planned end with its teardown margin
    (problem,) = plan.budget_problems
    planned_end = T0 + timedelta(seconds=plan.est_s + teardown_margin_s(spec))
    assert "ends 2026-12-09T06:00:00Z" in problem
    named = re.search(r"teardown margin .* is (\S+Z) ", problem)
    assert named and abs((datetime.fromisoformat(named.group(1)) - planned_end).total_seconds()) <= 1
    assert f"teardown margin {teardown_margin_s(spec) / 60:.0f} min" in problem and "30 min before its end" in problem
    # a block long enough for the plan and its margin is not
    room = (plan.est_s + teardown_margin_s(spec)) / 3600 + 0.01
    assert plan_campaign(_spec(_block(T0, room)), "aws", start=T0).budget_problems == []
    assert plan_campaign(_spec(_block(T0, room - 0.02)), "aws", start=T0).budget_problems


def test_without_a_start_the_plan_checks_the_blocks_length_and_is_the_same_every_time():
    short = _spec(_block(T0, 20))
    (problem,) = plan_campaign(short, "aws").budget_problems
    assert "lasts 20.00 h (2026-12-08T10:00:00Z to 2026-12-09T06:00:00Z)" in problem and "do not fit" in problem
    assert plan_campaign(short, "aws") == plan_campaign(short, "aws")
    assert plan_campaign(_spec(_block(T0, 30)), "aws").budget_problems == []
    shown = format_plan(plan_campaign(short, "aws"))
    assert f"capacity: p4d: Capacity Block {CR} in us-east-1a, 2026-12-08T10:00:00Z to 2026-12-09T06:00:00Z" in shown
    assert "REFUSED pool p4d: Capacity Block" in shown


def test_a_campaign_started_before_its_block_is_refused_naming_the_blocks_start():
    spec = _spec(_block(T0, 48))
    (problem,) = plan_campaign(spec, "aws", start=T0 - timedelta(hours=1)).budget_problems
    assert "starts 2026-12-08T10:00:00Z" in problem and "would scale the pool at 2026-12-08T09:00:00Z" in problem
    assert plan_campaign(spec, "aws", start=T0.timestamp()).budget_problems == []  # epoch seconds, as the clock


# ------------------------------------------------------------------------------------------ the guard


def test_the_guard_stops_a_campaign_on_a_block_in_time_to_tear_down_before_the_block_ends():
    spec = _spec(_block(T0, 30), budget=False)
    plan = plan_campaign(spec, "aws", start=T0)
    assert guarded(spec, plan)  # a block's end alone is something to hold the campaign to
    unbudgeted = _spec(budget=False)
    assert not guarded(unbudgeted, plan_campaign(unbudgeted, "aws"))
    done: set[tuple[str, str]] = set()
    margin = teardown_margin_s(spec)
    deadline = T0 + timedelta(hours=30) - timedelta(seconds=margin)
    # at the start the whole plan fits: slack is the window less the plan and the margin
    slack = budget_slack_s(spec, plan, [], done, T0.isoformat())
    assert slack is not None and abs(slack - ((deadline - T0).total_seconds() - plan.est_s)) < 1
    assert budget_problem(spec, plan, [], done, T0.isoformat()) is None
    # late (the waits ran long): the remaining estimate would end past the block's end less the margin
    late = T0 + timedelta(hours=7)
    problem = budget_problem(spec, plan, [], done, late.isoformat())
    assert problem is not None and "ends 2026-12-09T16:00:00Z" in problem
    assert f"done by {deadline.isoformat(timespec='seconds').replace('+00:00', 'Z')}" in problem
    assert budget_slack_s(spec, plan, [], done, late.isoformat()) == 0.0
    # the last steps of the last deployment, near the end: the guard lets them run while they fit
    last = plan.experiments[-1]
    done_all_but_one = {(e.name, s.step_id) for e in plan.experiments for s in e.steps} - {
        (last.name, last.steps[-1].step_id)}
    left_s = last.steps[-1].est_s + OVERHEADS["aws"]["teardown"]  # the step, then the deployment's teardown
    assert budget_problem(spec, plan, [], done_all_but_one, (deadline - timedelta(seconds=left_s + 60)).isoformat()) is None
    assert budget_problem(spec, plan, [], done_all_but_one, (deadline - timedelta(seconds=left_s - 60)).isoformat())
    assert margin == BLOCK_RECLAIM_S + spec.timeouts.teardown_s


# ------------------------------------------------------------------------------------------ costs


def _timeline(plan: Any, hours: float) -> list[dict[str, Any]]:
    e = plan.experiments[0]
    return [{"experiment": e.name, "deployment": e.name, "event": "scale_requested", "pool": "p4d",
             "at": T0.isoformat(), "detail_json": json.dumps({"nodes": 2})},
            {"experiment": e.name, "deployment": e.name, "event": "pool_restored", "pool": "p4d",
             "at": (T0 + timedelta(hours=hours)).isoformat(), "detail_json": "{}"}]


def test_a_reservation_is_priced_at_what_the_user_pays_for_it():
    on_demand = _spec()
    odcr = _spec({"purchase": "reservation", "reservation_id": CR, "usd_per_node_hour": 12.5})
    plan = plan_campaign(odcr, "aws")
    (row,) = cost_rows("c1", odcr, plan, _timeline(plan, 2.0), [], simulated=False)
    fees = json.loads(row["fees_json"])
    assert row["price_per_node_hour_usd"] == pytest.approx(12.5 + fees["node_price_parts"]["root_volume"])
    assert fees["purchase"] == "reservation" and fees["reservation_id"] == CR
    assert CR in fees["purchase_text"] and "capacity_block_usd" not in fees
    # without a price of its own an ODCR bills at the on-demand rate
    plain = _spec({"purchase": "reservation", "reservation_id": CR})
    assert plan_campaign(plain, "aws").est_usd == plan_campaign(on_demand, "aws").est_usd


def test_a_capacity_blocks_idle_hours_are_the_campaigns_cost():
    spec = _spec(_block(T0, 30))
    plan = plan_campaign(spec, "aws", start=T0)
    # the plan: the block's whole window (2 nodes x 30 h x $10) at least, however little of it the plan uses
    used_block = sum(e.est_node_hours["p4d"] for e in plan.experiments) * 10.0
    unblocked = plan_campaign(_spec({"purchase": "reservation", "reservation_id": CR, "usd_per_node_hour": 10.0}),
                              "aws")
    assert unblocked.est_usd is not None
    assert plan.est_usd == pytest.approx(unblocked.est_usd + (2 * 30 * 10.0 - used_block), abs=0.02)
    # the rows: one deployment held the pool 2 h; the rest of the block is idle, on the block pool's first row
    timeline = _timeline(plan, 2.0)
    (row,) = cost_rows("c1", spec, plan, timeline, [], simulated=False)
    fees = json.loads(row["fees_json"])
    assert fees["capacity_block_usd"] == pytest.approx(600.0)
    assert fees["capacity_block_used_usd"] == pytest.approx(2 * 2 * 10.0)
    assert fees["capacity_block_idle_usd"] == pytest.approx(600.0 - 40.0)
    assert campaign_block_idle_usd([row]) == pytest.approx(560.0)
    assert block_usage(spec, plan, timeline)["p4d"]["capacity_block_nodes"] == 2
    nodes_how = fees["scope_items"][0]["how"]
    assert "Capacity Block" in nodes_how and "idle hours are in the campaign's capacity_block_idle_usd" in nodes_how


def test_the_cost_scope_names_the_drain_and_the_nat_image_pulls_as_not_measured():
    spec = _spec()
    plan = plan_campaign(spec, "aws")
    (row,) = cost_rows("c1", spec, plan, _timeline(plan, 1.0), [], simulated=False)
    items = {i["item"]: i for i in json.loads(row["fees_json"])["scope_items"]}
    assert items["nodes draining after the restore request"]["status"] == "excluded"
    nat = items["NAT gateway data processing of image pulls"]
    assert nat["status"] == "excluded" and "attributable" in nat["why"] and "not measured" in nat["why"]


# ------------------------------------------------------------------------------------------ EC2, on moto


def _cluster(session: Any, zone: str = "us-east-1b") -> None:
    """A cluster whose node group gpu-p4d has one subnet, in ``zone`` (EKS DescribeNodegroup ``subnets``)."""
    ec2 = session.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone=zone)["Subnet"]["SubnetId"]
    role = session.client("iam").create_role(RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks = session.client("eks")
    eks.create_cluster(name="bench", roleArn=role, resourcesVpcConfig={"subnetIds": [subnet]})
    eks.create_nodegroup(clusterName="bench", nodegroupName="gpu-p4d", nodeRole=role, subnets=[subnet],
                         instanceTypes=["p4d.24xlarge"])


OFFERED = {"p4d.24xlarge": ["us-east-1a", "us-east-1c"]}


def _reservation(**change: Any) -> dict[str, Any]:
    return {"CapacityReservationId": CR, "InstanceType": "p4d.24xlarge", "AvailabilityZone": "us-east-1a",
            "State": "active", "InstanceMatchCriteria": "targeted", "TotalInstanceCount": 2,
            "AvailableInstanceCount": 2, **change}


def _preflight(session: Any) -> Any:
    from benchctl.aws import preflight as pf

    return pf.EksPreflight(lambda: None, session, None, cluster="bench", nodegroups=("gpu-p4d",), load_image="",
                           campaign_id="seed-plan-20261201-101500", run_uri="s3://b/runs", lake_uri="s3://b/lake")


def test_a_zone_without_the_offering_is_refused_by_the_plan_and_doctor_with_the_zones_that_have_it(
        aws, monkeypatch, tmp_path):
    from benchctl.aws import doctor
    from benchctl.aws import preflight as pf

    _cluster(aws, zone="us-east-1b")  # the node group's subnet: a zone that does not offer p4d.24xlarge
    monkeypatch.setattr(pf, "preflight", lambda *a, **k: [])  # the cluster's own checks: test_aws_preflight.py
    monkeypatch.setattr(pf, "deployment_preflight", lambda *a, **k: [])
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(SEED))
    with ec2_capacity({"L-417A185B": 384.0}, offerings=OFFERED):
        # the plan's preflight (Plan's PreflightPort)
        (problem,) = _preflight(aws).check(_spec())
        lines = list(doctor.capacity_checks(aws, path, "bench"))
    assert "p4d.24xlarge is not offered in us-east-1b (the zone of node group gpu-p4d's subnets)" in problem
    assert "zones of this Region that offer it: us-east-1a, us-east-1c" in problem
    line = next(ln for ln in lines if ln.name == "offering of pool p4d")
    assert not line.ok and line.detail == problem
    assert [ln.name for ln in lines] == ["offering of pool p4d", "reservation of pool p4d"]
    # a spec zone the node group does not launch in is refused too, naming both
    with ec2_capacity({"L-417A185B": 384.0}, offerings=OFFERED):
        (problem,) = _preflight(aws).check(_spec({"zone": "us-east-1c"}))
    assert "capacity.zone is us-east-1c, but node group gpu-p4d's subnets are in us-east-1b" in problem


def test_a_node_group_in_an_offering_zone_passes_the_preflight(aws, monkeypatch):
    from benchctl.aws import preflight as pf

    _cluster(aws, zone="us-east-1c")
    monkeypatch.setattr(pf, "preflight", lambda *a, **k: [])
    monkeypatch.setattr(pf, "deployment_preflight", lambda *a, **k: [])
    with ec2_capacity({"L-417A185B": 384.0}, offerings=OFFERED):
        assert _preflight(aws).check(_spec()) == []
        assert _preflight(aws).check(_spec({"zone": "us-east-1c"})) == []


def test_a_reservation_that_cannot_give_the_plans_nodes_is_refused_naming_why(aws):
    from benchctl.aws.capacity_checks import check

    _cluster(aws, zone="us-east-1a")
    spec = _spec({"purchase": "reservation", "reservation_id": CR})
    cases = {
        "state": (_reservation(State="expired"), f"Capacity Reservation {CR} is expired, not active"),
        "type": (_reservation(InstanceType="p5.48xlarge"), "holds p5.48xlarge, but the pool's instance_type is "
                                                           "p4d.24xlarge"),
        "zone": (_reservation(AvailabilityZone="us-east-1c"), "is in us-east-1c, but the pool's nodes launch in "
                                                              "us-east-1a"),
        "free": (_reservation(AvailableInstanceCount=1), "has 1 of 2 instances free; the plan needs 2 of it at once"),
    }
    for why, (found, expected) in cases.items():
        with ec2_capacity({}, [found], offerings={"p4d.24xlarge": ["us-east-1a", "us-east-1c"]}):
            bad = [ln for ln in check(spec, aws, "bench") if not ln.ok]
        assert [ln.detail for ln in bad if expected in ln.detail], (why, bad)
        assert all(ln.blocking and ln.name == "reservation of pool p4d" for ln in bad), why
    with ec2_capacity({}, [_reservation()], offerings=OFFERED):
        lines = {ln.name: ln for ln in check(spec, aws, "bench")}
    assert lines["reservation of pool p4d"].ok and "2 free, the plan needs 2" in lines["reservation of pool p4d"].detail
    with ec2_capacity({}, [], offerings=OFFERED):  # an id the account does not have
        (missing,) = [ln for ln in check(spec, aws, "bench") if not ln.ok]
    assert "not found in this account and Region" in missing.detail and missing.blocking


def test_a_scheduled_block_is_refused_until_it_starts():
    from benchctl.planning.capacity import reservation_problems

    pool = _spec(_block(T0, 30)).pools[0]
    (problem,) = reservation_problems(pool, _reservation(State="scheduled", StartDate="2026-12-08T10:00:00Z"), 2)
    assert "Capacity Block" in problem and "is scheduled, not active" in problem and "starts 2026-12-08T10:00:00Z" in problem


def test_the_fake_refuses_what_ec2_does_not_define(aws):
    ec2 = aws.client("ec2")
    with ec2_capacity({}, offerings=OFFERED):
        with pytest.raises(Exception, match="InvalidParameterValue"):
            ec2.describe_instance_type_offerings(LocationType="availability-zone",
                                                 Filters=[{"Name": "instance-family", "Values": ["p4d"]}])
        got = ec2.describe_instance_type_offerings(LocationType="availability-zone", Filters=[
            {"Name": "instance-type", "Values": ["p4d.24xlarge"]}, {"Name": "location", "Values": ["us-east-1c"]}])
    assert [o["Location"] for o in got["InstanceTypeOfferings"]] == ["us-east-1c"]


# ------------------------------------------------------------------------------------------ the report


def test_the_report_says_which_purchase_option_ran(tmp_path):
    from benchctl.local.lake import LocalLake
    from benchctl.local.report import render_report
    from tests.unit.test_report import C, build_lake

    spec = _spec(_block(T0, 30))
    plan = plan_campaign(spec, "aws", start=T0)
    lake: LocalLake = build_lake(tmp_path / "lake", simulated=False)
    before = render_report(lake.root, C)
    assert "not recorded (on-demand prices of the spec)" in before  # rows from before the purchase was recorded
    rows = cost_rows(C, spec, plan, _timeline(plan, 2.0), [], simulated=False)
    lake.write("costs", rows, part_name="costs-block")
    html = render_report(lake.root, C)
    prov = html[html.index('<section id="provenance"'):]
    assert "purchase option" in prov
    assert f"p4d: Capacity Block {CR} in us-east-1a, 2026-12-08T10:00:00Z to 2026-12-09T16:00:00Z" in prov


# ------------------------------------------------------------------------------------------ through the real ASL


def _block_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spare_s: float,
               lead_s: float = 0.0) -> tuple[Any, Any, float]:
    """The smoke spec's pool on a Capacity Block that starts ``lead_s`` before the campaign and ends ``spare_s`` after
    its planned end with the teardown margin, run through the real ASL in the world whose capacity wait says "not yet" twice
    (WAIT_S each on the campaign's clock, tests/unit/test_budget_guard.py): (result, world, the plan's est_s)."""
    import io

    from benchctl.campaign.context import StartInput
    from benchctl.local.engine import Progress, execute
    from benchctl.local.runner import prepare
    from tests.fakes.ports import record_asl_waits
    from tests.unit.test_budget_guard import SlowWorld

    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data["pools"][0].update({"provider": "managed-nodegroup", "nodegroup": "gpu-a100"})
    data["workloads"] = [{"kind": "concurrency_sweep", "name": "concurrency-sweep", "concurrency": [1], "isl": 256,
                          "osl": 32, "request_count": 4}]
    data["timeouts"] = {"capacity_s": 7200, "ready_s": 7200, "load_grace_s": 3600, "teardown_s": 60}
    data.pop("budget", None)
    start = datetime.fromtimestamp(1_700_000_000.0, UTC)  # the world's clock at Plan
    est = plan_campaign(parse_spec(data), "local").est_s
    end = start + timedelta(seconds=est + BLOCK_RECLAIM_S + 60 + spare_s)
    data["pools"][0]["capacity"] = {"purchase": "capacity-block", "reservation_id": CR, "zone": "us-east-1a",
                                    "block_start": (start - timedelta(seconds=lead_s)).isoformat(),
                                    "block_end": end.isoformat()}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "block.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    begin, _ = prepare(path, tmp_path / "out", "blk")
    world = SlowWorld(tmp_path / "out" / "lake", "capacity")
    record_asl_waits(monkeypatch)
    result = execute(engine=world, start=StartInput(begin.spec_uri, "blk", poll_seconds=1),
                     progress=Progress(out=io.StringIO()))
    return result, world, est


def test_a_campaign_on_a_block_too_short_for_it_is_refused_by_the_plan_state_before_anything_scales(
        tmp_path, monkeypatch):
    # Given a block long enough for the plan (so `benchctl run` lets it start) that began an hour before the campaign
    # and ends 10 min before its planned end with the teardown margin
    result, world, _ = _block_run(tmp_path, monkeypatch, spare_s=-600.0, lead_s=3600.0)
    # Then the Plan state refuses it, naming both times, before anything is scaled
    assert result.status == "FAILED" and "Capacity Block" in result.cause, result.cause
    assert re.search(r"ends 2023-11-14T\d\d:\d\d:\d\dZ; the campaign's planned end on it with its teardown margin "
                     r".* is 2023-11-14T\d\d:\d\d:\d\dZ \(campaign start 2023-11-14T22:13:20Z", result.cause), result.cause
    assert world.pool_sizes_now() == world.initial_sizes and world.serving.deploy_calls == []


def test_a_campaign_whose_waits_run_long_is_stopped_in_time_to_tear_down_before_its_block_ends(
        tmp_path, monkeypatch):
    # Given a block with 30 min to spare, and a capacity wait that takes 2 x 20 min on the campaign's clock
    result, world, _ = _block_run(tmp_path, monkeypatch, spare_s=1800.0)
    # Then the guard stops it during the wait (no budget is set: the block's end is what it holds it to)
    assert (result.status, result.error) == ("FAILED", "BudgetExceeded"), result.cause
    assert "Capacity Block" in result.cause and "(while waiting for capacity)" in result.cause
    assert world.leftovers() == {"deployments": [], "prepared": [], "loads": [], "pools": []}
    assert world.pool_sizes_now() == world.initial_sizes
    # and with the waits' 40 min to spare it runs to success
    ok, _, _ = _block_run(tmp_path / "ok", monkeypatch, spare_s=2 * 1200.0 + 600.0)
    assert ok.status == "SUCCEEDED", ok.cause
