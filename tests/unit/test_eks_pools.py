"""EKS PoolPort adapters: managed node groups on moto EKS, Auto Mode NodePools on FakeKubeApi.

Auto Mode NodePools are rendered by the real renderer (``pools_for`` wires ``render_nodepool``) and held to
Karpenter's vendored NodePool schema: a fake renderer here once hid that the adapter passed NODES where the
renderer took GPUs (a 1-node p4d pool got ``nvidia.com/gpu: "1"``, and Karpenter never launches a node
larger than the remaining limit)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from benchctl.aws.k8s.client import KubeClient
from benchctl.aws.k8s.common import nodepool_name
from benchctl.aws.pool_nodes import CAMPAIGN_LABEL, NODEGROUP_LABEL, STALE_ISSUE_GRACE_S, PoolScalingFailed
from benchctl.aws.pools import ManagedNodeGroupPools, pools_for
from benchctl.errors import CapacityUnavailable
from benchctl.spec.deployment import PoolSpec
from benchctl.spec.model import parse_spec
from tests import crd_schemas
from tests.fakes.eks_world import ICE_MESSAGE, set_nodegroup_health
from tests.fakes.k8s_api import FakeKubeApi

CLUSTER = "bench"
ROLE = "arn:aws:iam::123456789012:role/eks"
ORIGINAL = {"minSize": 0, "maxSize": 4, "desiredSize": 0}
OTHER = {"minSize": 1, "maxSize": 3, "desiredSize": 1}
CAMPAIGN = "seed-20250101-000000"


def pool_spec(name: str = "gpu", nodegroup: str | None = "gpu-ng", provider: str = "managed-nodegroup",
              max_nodes: int = 4) -> PoolSpec:
    return PoolSpec(name=name, instance_type="g6e.12xlarge", gpus_per_node=4, gpu_kind="L40S-48GB",
                    max_nodes=max_nodes, provider=provider, nodegroup=nodegroup)  # type: ignore[arg-type]


@dataclass
class Aws:
    session: Any
    eks: Any
    updated: list[str] = field(default_factory=list)  # node groups passed to UpdateNodegroupConfig
    update_status: dict[str, str] = field(default_factory=lambda: {"status": "Successful"})
    described_updates: list[str] = field(default_factory=list)

    def scaling(self, nodegroup: str) -> dict[str, int]:
        return dict(self.eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=nodegroup)["nodegroup"]["scalingConfig"])


@pytest.fixture
def aws() -> Iterator[Aws]:
    with mock_aws():
        session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1")
        eks = session.client("eks")
        eks.create_cluster(name=CLUSTER, roleArn=ROLE, resourcesVpcConfig={})
        for ng, cfg in (("gpu-ng", ORIGINAL), ("other-ng", OTHER)):
            eks.create_nodegroup(clusterName=CLUSTER, nodegroupName=ng, nodeRole=ROLE, subnets=["subnet-1"],
                                 scalingConfig=dict(cfg))
        state = Aws(session, eks)

        def watch_updates(params: dict[str, Any], **_: Any) -> None:
            state.updated.append(params["url_path"].split("/node-groups/")[1].split("/")[0])

        # moto does not implement DescribeUpdate: answer that one call (and only it) here
        def describe_update(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
            state.described_updates.append(params["query_string"].get("nodegroupName", ""))
            return AWSResponse("", 200, {}, None), {"update": {"id": "u", **state.update_status, "errors": []}}

        session.events.register("before-call.eks.UpdateNodegroupConfig", watch_updates)
        session.events.register("before-call.eks.DescribeUpdate", describe_update)
        yield state


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as fake:
        yield fake


def kube_of(api: FakeKubeApi) -> KubeClient:
    return KubeClient(api.url, token=lambda: "test-token")


def managed(aws: Aws, api: FakeKubeApi | None = None, **spec: Any) -> ManagedNodeGroupPools:
    s = pool_spec(**spec)
    return ManagedNodeGroupPools(CLUSTER, {s.name: s}, session=aws.session,
                                 kube=kube_of(api) if api else None, clock=lambda: 100.0)


def test_scale_then_restore_puts_back_exactly_the_previous_config(aws: Aws) -> None:
    pools = managed(aws)
    rec = pools.scale("gpu", 2, owner="c/exp")
    assert rec["previous"] == ORIGINAL and rec["requested"] == 2 and rec["update_id"]
    assert rec["pool"] == "gpu" and rec["nodegroup"] == "gpu-ng" and rec["simulated"] is False
    assert aws.scaling("gpu-ng") == {"minSize": 2, "maxSize": 4, "desiredSize": 2}

    restored = pools.restore(rec)
    assert restored["scalingConfig"] == ORIGINAL and restored["updated"] is True
    assert aws.scaling("gpu-ng") == ORIGINAL
    again = pools.restore(rec)
    assert again == {"nodegroup": "gpu-ng", "scalingConfig": ORIGINAL, "updated": False}
    assert aws.updated == ["gpu-ng", "gpu-ng"]  # scale + first restore; the repeat made no call
    assert aws.scaling("other-ng") == OTHER


def test_scale_never_shrinks_and_skips_update_when_already_enough(aws: Aws) -> None:
    aws.eks.update_nodegroup_config(clusterName=CLUSTER, nodegroupName="gpu-ng",
                                    scalingConfig={"minSize": 2, "maxSize": 4, "desiredSize": 3})
    aws.updated.clear()
    rec = managed(aws).scale("gpu", 2, owner="c/exp")
    assert rec["update_id"] is None and aws.updated == []
    assert aws.scaling("gpu-ng") == {"minSize": 2, "maxSize": 4, "desiredSize": 3}


def test_refuses_unknown_nodegroup_and_too_many_nodes_before_any_update(aws: Aws) -> None:
    with pytest.raises(ValueError, match=r"'gpu'.*'missing-ng'.*does not exist"):
        managed(aws, nodegroup="missing-ng").scale("gpu", 1, owner="o")
    with pytest.raises(ValueError, match=r"'gpu'.*gpu-ng.*max_nodes 4"):
        managed(aws).scale("gpu", 5, owner="o")
    with pytest.raises(ValueError, match="not in the spec"):
        managed(aws).scale("cpu", 1, owner="o")
    with pytest.raises(ValueError, match="nodegroup"):
        managed(aws, nodegroup=None).scale("gpu", 1, owner="o")
    assert aws.updated == []
    assert aws.scaling("gpu-ng") == ORIGINAL and aws.scaling("other-ng") == OTHER


def test_restore_refuses_a_record_naming_another_nodegroup(aws: Aws) -> None:
    pools = managed(aws)
    rec = pools.scale("gpu", 2, owner="o")
    with pytest.raises(ValueError, match="other-ng"):
        pools.restore({**rec, "nodegroup": "other-ng", "previous": {"minSize": 0, "maxSize": 1, "desiredSize": 0}})
    assert aws.scaling("other-ng") == OTHER and aws.updated == ["gpu-ng"]


def test_ready_needs_successful_update_and_enough_ready_gpu_nodes(aws: Aws, api: FakeKubeApi) -> None:
    pools = managed(aws, api)
    rec = pools.scale("gpu", 2, owner="o")
    assert pools.ready(rec) is False  # no nodes yet
    api.add_node("n1", {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=4)
    api.add_node("n2", {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=4, ready=False)
    api.add_node("n3", {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=0)  # device plugin not up yet
    api.add_node("n4", {NODEGROUP_LABEL: "other-ng"}, allocatable_gpus=4)
    api.add_node("n5", {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=4, unschedulable=True)
    assert pools.ready(rec) is False
    api.add_node("n2", {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=4)  # now Ready
    aws.update_status["status"] = "InProgress"
    assert pools.ready(rec) is False
    aws.update_status["status"] = "Successful"
    assert pools.ready(rec) is True
    assert set(aws.described_updates) == {"gpu-ng"}
    aws.update_status["status"] = "Failed"
    with pytest.raises(PoolScalingFailed, match="gpu-ng"):
        pools.ready(rec)


def test_ready_refuses_new_gpu_nodes_whose_driver_is_too_old_for_the_dynamo_image(aws: Aws, api: FakeKubeApi) -> None:
    # Given node-group nodes up with GPUs, one reporting (GPU feature discovery) an R570 driver
    s = pool_spec()
    pools = ManagedNodeGroupPools(CLUSTER, {s.name: s}, session=aws.session, kube=kube_of(api), min_gpu_driver=580)
    rec = pools.scale("gpu", 2, owner="o")
    api.add_node("n1", {NODEGROUP_LABEL: "gpu-ng", "nvidia.com/cuda.driver-version.major": "580"}, allocatable_gpus=4)
    api.add_node("n2", {NODEGROUP_LABEL: "gpu-ng", "nvidia.com/cuda.driver.major": "570"}, allocatable_gpus=4)
    # Then capacity fails, naming the node and the driver the image needs, before anything is deployed
    with pytest.raises(PoolScalingFailed, match=r"n2 \(driver 570\).*580 or newer"):
        pools.ready(rec)
    api.add_node("n2", {NODEGROUP_LABEL: "gpu-ng", "nvidia.com/cuda.driver.major": "580"}, allocatable_gpus=4)
    assert pools.ready(rec) is True
    api.add_node("n3", {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=4)  # no label: cannot be judged, not refused
    assert pools.ready(rec) is True


def auto_spec(max_nodes: int = 2, instance_type: str = "p4d.24xlarge", gpus: int = 8) -> Any:
    """A two-experiment Auto Mode spec: agg needs 1 node, disagg (prefill and decode apart) 2."""
    return parse_spec({
        "name": "auto", "model": {"name": "Qwen/Qwen3-30B-A3B", "revision": "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"},
        "pools": [{"name": "gpu", "instance_type": instance_type, "gpus_per_node": gpus, "gpu_kind": "A100-40GB",
                   "max_nodes": max_nodes, "provider": "auto-mode"}],
        "experiments": [
            {"name": "agg", "mode": "aggregated", "workers": [{"role": "worker", "pool": "gpu", "replicas": 2,
                                                                "tensor_parallel": 4}]},
            {"name": "disagg", "mode": "disaggregated", "workers": [
                {"role": "prefill", "pool": "gpu", "replicas": 1, "tensor_parallel": 8},
                {"role": "decode", "pool": "gpu", "replicas": 1, "tensor_parallel": 8}]},
        ],
        "workloads": [{"kind": "concurrency_sweep", "concurrency": [1], "isl": 16, "osl": 16, "request_count": 4}],
    })


def auto(api: FakeKubeApi, campaign: str = CAMPAIGN, spec: Any = None) -> Any:
    """The Auto Mode adapter exactly as the AWS engine builds it (``pools_for``: the real renderer)."""
    return pools_for(spec or auto_spec(), campaign, cluster_name=CLUSTER, kube=kube_of(api)).adapters["auto-mode"]


NAME = nodepool_name(CAMPAIGN, "gpu")


def test_a_one_node_p4d_pool_gets_eight_gpus_of_limit(api: FakeKubeApi) -> None:
    # Given an Auto Mode p4d pool (8 GPUs per node) and an experiment that needs ONE node
    pools = auto(api)
    # When the experiment's pool is scaled through the AWS code path
    pools.scale("gpu", 1, owner="c/agg")
    # Then the NodePool POSTed leaves room for one whole p4d, and is valid for Karpenter's own schema
    (body,) = [b for m, path, b in api.bodies if m == "POST" and "/nodepools" in path]
    assert body["spec"]["limits"] == {"cpu": "96", "memory": "1152Gi", "nvidia.com/gpu": "8"}
    assert crd_schemas.problems(body) == []
    assert api.stored("NodePool", NAME)["spec"]["limits"] == {"cpu": "96", "memory": "1152Gi", "nvidia.com/gpu": "8"}


def test_auto_mode_creates_labelled_nodepool_and_restore_deletes_it(api: FakeKubeApi) -> None:
    pools = auto(api)
    rec = pools.scale("gpu", 2, owner="c/exp")
    assert rec["nodepool"] == NAME and rec["previous"] is None and rec["requested"] == 2
    stored = api.stored("NodePool", NAME)
    assert stored is not None
    assert stored["metadata"]["labels"][CAMPAIGN_LABEL] == CAMPAIGN
    assert stored["spec"]["limits"] == {"cpu": "192", "memory": "2304Gi", "nvidia.com/gpu": "16"}  # 2 nodes x 8 GPUs
    again = pools.scale("gpu", 2, owner="c/exp")  # redelivered: ours already, nothing changes
    assert again["created"] is False
    assert api.stored("NodePool", NAME) == stored

    # ready when Karpenter accepted the NodePool; nodes come with the workers' pending pods
    assert pools.ready(rec) is False
    api.set_status("NodePool", None, NAME, {"conditions": [{"type": "Ready", "status": "False"}]})
    assert pools.ready(rec) is False
    api.set_status("NodePool", None, NAME, {"conditions": [{"type": "Ready", "status": "True"}]})
    assert pools.ready(rec) is True

    assert pools.restore(rec) == {"deleted": NAME}
    assert api.stored("NodePool", NAME) is None
    assert pools.restore(rec)["deleted"] == NAME  # already gone is fine


def test_a_later_experiment_needing_another_size_replaces_our_nodepool(api: FakeKubeApi) -> None:
    # Given agg's 1-node NodePool kept warm for disagg, which needs 2 nodes
    pools = auto(api)
    pools.scale("gpu", 1, owner="c/agg")
    # When disagg scales the same pool
    rec = pools.scale("gpu", 2, owner="c/disagg")
    # Then the NodePool is replaced in place (PUT, the verb RBAC grants as update) with room for 2 nodes
    assert rec["created"] is False
    puts = [b for m, path, b in api.bodies if m == "PUT"]
    assert len(puts) == 1 and puts[0]["spec"]["limits"] == {"cpu": "192", "memory": "2304Gi", "nvidia.com/gpu": "16"}
    assert crd_schemas.problems(puts[0]) == []
    assert api.stored("NodePool", NAME)["spec"]["limits"] == {"cpu": "192", "memory": "2304Gi", "nvidia.com/gpu": "16"}
    assert all("fieldValidation=Strict" in path for m, path, _ in api.bodies)


def test_auto_mode_refuses_a_nodepool_that_is_not_ours(api: FakeKubeApi) -> None:
    theirs = api.put({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                      "metadata": {"name": NAME, "labels": {"team": "infra"}}, "spec": {"limits": {}}})
    pools = auto(api)
    with pytest.raises(ValueError, match=rf"{NAME}.*not this campaign"):
        pools.scale("gpu", 1, owner="o")
    with pytest.raises(ValueError, match="max_nodes"):
        pools.scale("gpu", 9, owner="o")
    fake_record = {"pool": "gpu", "nodepool": NAME, "requested": 1, "previous": None}
    assert pools.restore(fake_record)["deleted"] is None
    assert api.stored("NodePool", NAME) == theirs
    assert not [m for m, _ in api.requests if m in ("PUT", "PATCH", "DELETE")]
    # another campaign's NodePool of the same name is not ours either
    api.put({**theirs, "metadata": {"name": NAME, "labels": {CAMPAIGN_LABEL: "other-campaign"}}})
    with pytest.raises(ValueError, match="other-campaign"):
        pools.scale("gpu", 1, owner="o")


def test_pools_for_dispatches_by_provider(aws: Aws, api: FakeKubeApi) -> None:
    base = auto_spec().model_dump(mode="json")
    base["pools"] = [pool_spec(name="gpu").model_dump(mode="json"),
                     pool_spec(name="auto", nodegroup=None, provider="auto-mode").model_dump(mode="json"),
                     pool_spec(name="laptop", nodegroup=None, provider="local").model_dump(mode="json")]
    base["experiments"] = [{"name": "a", "mode": "aggregated", "workers": [
        {"role": "worker", "pool": p, "replicas": 1, "tensor_parallel": 4} for p in ("gpu", "auto", "laptop")]}]
    port = pools_for(parse_spec(base), CAMPAIGN, cluster_name=CLUSTER, session=aws.session, kube=kube_of(api))
    ng_rec = port.scale("gpu", 1, owner="o")
    np_rec = port.scale("auto", 1, owner="o")
    assert ng_rec["provider"] == "managed-nodegroup" and np_rec["nodepool"] == nodepool_name(CAMPAIGN, "auto")
    assert api.stored("NodePool", np_rec["nodepool"])["spec"]["limits"] == {"cpu": "48", "memory": "384Gi", "nvidia.com/gpu": "4"}  # g6e: 4/node
    with pytest.raises(ValueError, match="laptop"):
        port.scale("laptop", 1, owner="o")
    assert port.restore(ng_rec)["scalingConfig"] == ORIGINAL
    assert port.restore(np_rec) == {"deleted": np_rec["nodepool"]}
    assert aws.scaling("gpu-ng") == ORIGINAL and api.stored("NodePool", np_rec["nodepool"]) is None


def test_the_receipt_reads_a_node_group_back_and_bills_until_the_added_nodes_are_gone(aws: Aws, api: FakeKubeApi) -> None:
    pools = managed(aws, api)
    rec = pools.scale("gpu", 2, owner="c/exp")
    for n in ("n1", "n2"):
        api.add_node(n, {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=4)
    api.add_node("theirs", {NODEGROUP_LABEL: "other-ng"}, allocatable_gpus=4)  # another node group's: not counted
    seen = pools.observe(rec)  # not restored yet: read back as it is
    assert (seen["state"], seen["nodes"]) == ("still there", 2) and seen["billing"].startswith("still billing: 2 node")
    pools.restore(rec)
    seen = pools.observe(rec)  # the size is back, but the two added nodes still run: still billing
    assert (seen["kind"], seen["name"], seen["state"], seen["now"]) == ("node group", "gpu-ng", "restored", ORIGINAL)
    assert seen["billing"].startswith("still billing"), seen
    for n in ("n1", "n2"):
        api.remove("Node", n)
    assert pools.observe(rec)["billing"] == "ended"


def test_the_receipt_reads_our_nodepool_back_and_its_nodes(api: FakeKubeApi) -> None:
    pools = auto(api)
    rec = pools.scale("gpu", 1, owner="c/exp")
    api.add_node("k1", {"karpenter.sh/nodepool": NAME}, allocatable_gpus=8)
    seen = pools.observe(rec)
    assert (seen["kind"], seen["state"], seen["why"]) == ("NodePool", "still there", "not deleted")
    pools.restore(rec)
    seen = pools.observe(rec)  # gone, but Karpenter still drains its node
    assert seen["state"] == "gone" and seen["billing"] == f"still billing: 1 node(s) of NodePool {NAME} up"
    api.remove("Node", "k1")
    assert pools.observe(rec)["billing"] == "ended"


# ---------------------------------------------------------------- capacity failures end the wait


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ice_issue(zone: str = "us-east-1a") -> dict[str, Any]:
    """AsgInstanceLaunchFailures as EKS reports EC2's InsufficientInstanceCapacity (eks_world.ICE_MESSAGE)."""
    return {"code": "AsgInstanceLaunchFailures", "resourceIds": ["eks-gpu-ng-asg"],
            "message": ICE_MESSAGE.format(type="g6e.12xlarge", zone=zone, others="us-east-1b")}


def clocked(aws: Aws, api: FakeKubeApi, clock: Clock) -> ManagedNodeGroupPools:
    s = pool_spec()
    return ManagedNodeGroupPools(CLUSTER, {s.name: s}, session=aws.session, kube=kube_of(api), clock=clock)


def test_a_node_group_out_of_capacity_raises_capacity_unavailable_naming_type_zone_code_and_launched(
        aws: Aws, api: FakeKubeApi) -> None:
    # Given a scale-up to 2 of which one node joined, and the group reporting EC2's InsufficientInstanceCapacity
    pools = managed(aws, api)
    rec = pools.scale("gpu", 2, owner="o")
    assert pools.ready(rec) is False  # launching: nothing reported yet
    api.add_node("n1", {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=4)
    set_nodegroup_health(aws.session, "gpu-ng", [ice_issue("us-east-1d")], "DEGRADED")
    # Then the next check ends the wait, naming what a person needs
    with pytest.raises(CapacityUnavailable) as caught:
        pools.ready(rec)
    err = caught.value
    assert (err.instance_type, err.zone, err.code, err.launched, err.requested) == (
        "g6e.12xlarge", "us-east-1d", "InsufficientInstanceCapacity", 1, 2)
    assert "1 of 2 g6e.12xlarge node(s) launched in us-east-1d" in str(err) and "gpu-ng" in str(err)
    assert "AsgInstanceLaunchFailures on eks-gpu-ng-asg" in str(err)


def test_the_zone_of_a_capacity_failure_comes_from_the_launched_nodes_when_the_message_names_none(
        aws: Aws, api: FakeKubeApi) -> None:
    pools = managed(aws, api)
    rec = pools.scale("gpu", 3, owner="o")
    api.add_node("n1", {NODEGROUP_LABEL: "gpu-ng", "topology.kubernetes.io/zone": "us-east-1f"}, allocatable_gpus=4)
    set_nodegroup_health(aws.session, "gpu-ng", [{"code": "InstanceLimitExceeded", "resourceIds": [],
                                                  "message": "vCPU limit of the account reached"}], "DEGRADED")
    with pytest.raises(CapacityUnavailable, match=r"1 of 3 g6e.12xlarge node\(s\) launched in us-east-1f; "
                                                  r"InstanceLimitExceeded"):
        pools.ready(rec)


def test_a_capacity_issue_does_not_end_the_wait_once_the_requested_nodes_are_up(aws: Aws, api: FakeKubeApi) -> None:
    pools = managed(aws, api)
    rec = pools.scale("gpu", 1, owner="o")
    api.add_node("n1", {NODEGROUP_LABEL: "gpu-ng"}, allocatable_gpus=4)
    set_nodegroup_health(aws.session, "gpu-ng", [ice_issue()], "ACTIVE")
    assert pools.ready(rec) is True


def test_transient_health_issues_do_not_end_the_wait(aws: Aws, api: FakeKubeApi) -> None:
    pools = managed(aws, api)
    rec = pools.scale("gpu", 2, owner="o")
    for code in ("ClusterUnreachable", "InternalFailure", "AutoScalingGroupRateLimitExceeded", "PodEvictionFailure"):
        set_nodegroup_health(aws.session, "gpu-ng", [{"code": code, "message": "m", "resourceIds": []}], "ACTIVE")
        assert pools.ready(rec) is False, code


def test_a_node_group_that_cannot_launch_at_all_fails_as_a_broken_node_group(aws: Aws, api: FakeKubeApi) -> None:
    pools = managed(aws, api)
    rec = pools.scale("gpu", 2, owner="o")
    set_nodegroup_health(aws.session, "gpu-ng", [{"code": "Ec2LaunchTemplateNotFound", "resourceIds": ["lt-1"],
                                                  "message": "launch template lt-1 not found"}], "DEGRADED")
    with pytest.raises(PoolScalingFailed, match=r"gpu-ng.*Ec2LaunchTemplateNotFound.*lt-1 not found.*0 of 2"):
        pools.ready(rec)


def test_an_issue_the_group_had_before_the_request_is_judged_only_after_the_grace(aws: Aws, api: FakeKubeApi) -> None:
    # Given a group left DEGRADED by an earlier scale-out that failed (EKS keeps the issue until one succeeds)
    set_nodegroup_health(aws.session, "gpu-ng", [ice_issue()], "DEGRADED")
    clock = Clock(1000.0)
    pools = clocked(aws, api, clock)
    rec = pools.scale("gpu", 2, owner="o")
    assert rec["issues_before"] == [f"AsgInstanceLaunchFailures: {ice_issue()['message']}"]
    # Then the old issue does not end this wait at once (this launch may succeed and clear it) ...
    clock.now += STALE_ISSUE_GRACE_S - 1
    assert pools.ready(rec) is False
    # ... but a new issue does, and the old one does once the grace is over with the nodes still missing
    set_nodegroup_health(aws.session, "gpu-ng", [ice_issue("us-east-1c")], "DEGRADED")
    with pytest.raises(CapacityUnavailable, match="us-east-1c"):
        pools.ready(rec)
    set_nodegroup_health(aws.session, "gpu-ng", [ice_issue()], "DEGRADED")
    clock.now += 2
    with pytest.raises(CapacityUnavailable, match="us-east-1a"):
        pools.ready(rec)


def nodeclaim(name: str, launched: dict[str, str] | None, nodepool: str = NAME) -> dict[str, Any]:
    """A Karpenter v1 NodeClaim of ``nodepool`` with its Launched condition (status, reason, message)."""
    conditions = [{"type": "Launched", "lastTransitionTime": "2026-12-07T00:00:00Z", "observedGeneration": 1,
                   **launched}] if launched else []
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": nodepool}},
            "spec": {"nodeClassRef": {"group": "eks.amazonaws.com", "kind": "NodeClass", "name": "default"},
                     "requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                       "values": ["us-east-1b"]}]},
            "status": {"conditions": conditions}}


def test_an_auto_mode_nodeclaim_that_cannot_launch_for_capacity_raises_capacity_unavailable(api: FakeKubeApi) -> None:
    pools = auto(api)
    pools.watch_launches = True  # benchctl.aws.auto_mode_pools.READ_NODECLAIMS: on once RBAC grants list nodeclaims
    rec = pools.scale("gpu", 2, owner="o")
    api.set_status("NodePool", None, NAME, {"conditions": [{"type": "Ready", "status": "True"}]})
    api.put(nodeclaim(f"{NAME}-aaaaa", {"status": "True", "reason": "Launched", "message": ""}))
    api.put(nodeclaim(f"{NAME}-bbbbb", {"status": "False", "reason": "LaunchFailed", "message":
                                        "creating instance, RequestLimitExceeded: Request limit exceeded."}))
    api.put(nodeclaim("someone-elses-ccccc", {"status": "False", "reason": "InsufficientCapacityError", "message": "x"},
                      nodepool="someone-else"))
    assert pools.ready(rec) is True  # throttling is retried by Karpenter; another NodePool's claim is not ours
    api.put(nodeclaim(f"{NAME}-ddddd", {"status": "False", "reason": "LaunchFailed", "message":
                                        "creating instance, InsufficientInstanceCapacity - We currently do not have "
                                        "sufficient p4d.24xlarge capacity"}))
    with pytest.raises(CapacityUnavailable) as caught:
        pools.ready(rec)
    err = caught.value
    assert (err.instance_type, err.zone, err.code, err.launched, err.requested) == (
        "p4d.24xlarge", "us-east-1b", "InsufficientInstanceCapacity", 1, 2)
    assert f"NodeClaim {NAME}-ddddd Launched=False (LaunchFailed)" in str(err)


def test_the_readiness_wait_of_an_auto_mode_deployment_ends_when_its_nodeclaim_cannot_launch(
        api: FakeKubeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Auto Mode the nodes launch for the workers' pending pods, after Deploy: CheckReady asks the pools."""
    from types import SimpleNamespace

    from benchctl.campaign import spend
    from benchctl.campaign.base import Task
    from benchctl.campaign.context import Ctx
    from benchctl.campaign.records import PoolsRecord
    from benchctl.campaign.serving import check_ready

    spec = auto_spec()
    eks_pools = pools_for(spec, CAMPAIGN, cluster_name=CLUSTER, kube=kube_of(api))
    rec = eks_pools.scale("gpu", 2, owner="o")
    api.set_status("NodePool", None, NAME, {"conditions": [{"type": "Ready", "status": "True"}]})
    waits: list[str] = []
    state = SimpleNamespace(deployment=lambda exp: SimpleNamespace(pending=False, state={}, deployed_at=0.0),
                            spec=lambda: spec, pools=lambda exp: PoolsRecord(records=[rec], requested_at=0.0))
    p: Any = SimpleNamespace(state=state, pools=eks_pools, clock=lambda: 10.0,
                             serving=SimpleNamespace(probe_ready=lambda s: waits.append("probe") or False))
    monkeypatch.setattr(spend, "budget_guard", lambda *a, **k: None)  # no budget here (its own tests: test_budget_guard)
    ctx, task = Ctx(CAMPAIGN, "/tmp/run", "/tmp/lake", 30, None), Task("agg", state="CheckReady")
    api.put(nodeclaim(f"{NAME}-aaaaa", {"status": "True", "reason": "Launched", "message": ""}))
    assert check_ready(p, ctx, task) == {"done": False}  # one node launched, the other still coming: wait
    api.put(nodeclaim(f"{NAME}-bbbbb", {"status": "False", "reason": "LaunchFailed", "message":
                                        "creating instance, InsufficientInstanceCapacity - We currently do not have "
                                        "sufficient p4d.24xlarge capacity"}))
    with pytest.raises(CapacityUnavailable, match=r"1 of 2 p4d\.24xlarge"):
        check_ready(p, ctx, task)
    assert waits == ["probe", "probe"]
