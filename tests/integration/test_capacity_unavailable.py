"""Capacity failures end in minutes: a GPU node group that EC2 can only partly serve ends the campaign at the next
CheckCapacity poll, through the usual teardown, report and receipt, instead of waiting out ``timeouts.capacity_s``
(30 minutes in the hetero example) while the node that did launch bills.

The campaign is the hetero example (its first experiment needs two p4d.24xlarge nodes) run through the AWS engine's
own code path (``tests/fakes/eks_world.py``): the fake Kubernetes API with the platform's RBAC and admission policies,
moto's EKS node groups. What EKS reports is imitated as EKS reports it (``eks_world.capacity_runs_out``): one node of
two joins, the node group's health lists ``AsgInstanceLaunchFailures`` carrying EC2's ``InsufficientInstanceCapacity``
message (EKS API reference, "Issue" data type; the message as quoted in aws/containers-roadmap#2204), its status turns
DEGRADED (aws/containers-roadmap#2326) and its desired size stays at two."""

from __future__ import annotations

from typing import Any

import pytest

from benchctl.planning.plan import plan_campaign
from tests.aws_checks import upstream_api
from tests.fakes import eks_world
from tests.fakes.eks_world import CID, World

HETERO = "hetero-l40s"
ISSUE_AT_POLL = 2  # the first poll sees the group still launching; the issue appears before the second


@pytest.fixture(scope="module")
def ended(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("capacity")
    spec = eks_world.example_specs()[HETERO]
    first = plan_campaign(spec, "aws").experiments[0]
    assert first.nodes == {"p4d": 2}, first.nodes  # what the test is about: one of TWO nodes launches
    issued: dict[str, Any] = {}

    def ec2_runs_out(world: World, experiment: str, poll: int) -> None:
        if experiment == first.name and poll == ISSUE_AT_POLL:
            issued["issue"] = eks_world.capacity_runs_out(world, "p4d", launched=1, zone="us-east-1a")
            issued["scaling"] = scaling(session)

    with upstream_api() as api, eks_world.moto_eks(spec) as session:
        eks_world.cluster_prerequisites(api, spec)
        eks_world.dynamo_operator(api)
        eks_world.job_controller(api)
        eks_world.daemonset_controller(api)
        before = scaling(session)
        world = eks_world.run_campaign(spec, api, tmp, session, failure_path=True, before_capacity_poll=ec2_runs_out)
        after = scaling(session)
        from benchctl.campaign.receipt import campaign_receipt

        receipt = campaign_receipt(world.providers, world.ctx, why_unread="unread")
    from benchctl.local.report import write_report

    html = write_report(tmp / "lake", CID, tmp / "report.html", "html").read_text()
    nodegroup = str(next(p for p in spec.pools if p.name == "p4d").nodegroup)
    return {"world": world, "experiment": first.name, "nodegroup": nodegroup, "before": before, "after": after, "issued": issued,
            "receipt": receipt, "html": html}


def scaling(session: Any) -> dict[str, dict[str, int]]:
    eks = session.client("eks")
    return {ng: dict(eks.describe_nodegroup(clusterName=eks_world.CLUSTER, nodegroupName=ng)["nodegroup"]["scalingConfig"])
            for ng in eks.list_nodegroups(clusterName=eks_world.CLUSTER)["nodegroups"]}


def test_insufficient_capacity_after_one_of_two_nodes_ends_the_campaign_failed_with_capacity_unavailable(
        ended: dict[str, Any]) -> None:
    failed = ended["world"].failed
    assert failed is not None, "the campaign did not fail"
    assert (failed.state, failed.experiment, failed.error) == ("CheckCapacity", ended["experiment"],
                                                               "CapacityUnavailable"), failed
    # the message a person acts on: type, zone, EC2's code, how many launched of how many, what to do
    for part in ("p4d.24xlarge", "us-east-1a", "InsufficientInstanceCapacity", "1 of 2",
                 f"node group {ended['nodegroup']}", "describe-instance-type-offerings"):
        assert part in failed.message, (part, failed.message)
    rec = ended["world"].providers.state.campaign()
    assert rec is not None and (rec.status, rec.error, rec.failed_state) == ("failed", "CapacityUnavailable",
                                                                             "CheckCapacity"), rec


def test_the_capacity_failure_ends_within_two_poll_intervals_of_the_issue(ended: dict[str, Any]) -> None:
    assert ended["issued"], "EC2 never ran out: the poll the issue was to appear at was not reached"
    polls = ended["world"].capacity_polls[ended["experiment"]]
    after_issue = polls - ISSUE_AT_POLL + 1
    assert 1 <= after_issue <= 2, f"{after_issue} CheckCapacity polls after the issue appeared"
    # the node group had been asked for two and was left at two by EKS (the ASG's desired size stays)
    assert ended["issued"]["scaling"][ended["nodegroup"]]["desiredSize"] == 2, ended["issued"]["scaling"]


def test_every_node_group_is_back_to_its_prior_size_after_a_capacity_failure(ended: dict[str, Any]) -> None:
    assert ended["after"] == ended["before"], (ended["before"], ended["after"])
    assert ended["world"].failed.teardown["done"] and ended["world"].failed.abort["done"]


def test_a_capacity_failure_has_its_report_and_teardown_receipt(ended: dict[str, Any]) -> None:
    failed = ended["world"].failed
    assert "report_error" not in failed.report, failed.report
    assert failed.report["receipt"]["rows"] >= 1, failed.report
    rows = {r["kind"]: r for r in ended["receipt"]}
    group = rows["node group"]
    assert (group["name"], group["state"]) == (ended["nodegroup"], "restored"), group
    assert group["now"] == group["recorded"], group
    # the node that did launch is still up in the fake cluster (nothing drains it here): the receipt says it bills
    assert str(group["billing"]).startswith("still billing: 1 node"), group
    ending = ended["html"][ended["html"].index('<section id="ending"'):]
    assert 'data-status="failed"' in ending[:300], ending[:300]
    assert "in state CheckCapacity: CapacityUnavailable" in ending[:600], ending[:600]
    assert "InsufficientInstanceCapacity" in ending and "1 of 2 p4d.24xlarge" in ending, ending[:1500]
