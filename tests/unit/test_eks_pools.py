"""EKS PoolPort adapters: managed node groups on moto EKS, Auto Mode NodePools on FakeKubeApi."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from benchctl.eks_pools import (
    CAMPAIGN_LABEL,
    NODEGROUP_LABEL,
    AutoModePools,
    ManagedNodeGroupPools,
    PoolScalingFailed,
    pools_for,
)
from benchctl.k8s.client import KubeClient
from benchctl.spec import PoolSpec
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


def render(pool: str, nodes: int) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": f"bench-{pool}", "labels": {"app.kubernetes.io/managed-by": "benchctl"}},
            "spec": {"limits": {"nvidia.com/gpu": str(4 * nodes)},
                     "disruption": {"consolidationPolicy": "WhenEmpty"}}}


def auto(api: FakeKubeApi, campaign: str = CAMPAIGN) -> AutoModePools:
    s = pool_spec(name="gpu", nodegroup=None, provider="auto-mode")
    return AutoModePools(CLUSTER, {"gpu": s}, campaign, kube=kube_of(api), render_nodepool=render)


def test_auto_mode_creates_labelled_nodepool_and_restore_deletes_it(api: FakeKubeApi) -> None:
    pools = auto(api)
    rec = pools.scale("gpu", 2, owner="c/exp")
    assert rec["nodepool"] == "bench-gpu" and rec["previous"] is None and rec["requested"] == 2
    stored = api.stored("NodePool", "bench-gpu")
    assert stored is not None
    assert stored["metadata"]["labels"][CAMPAIGN_LABEL] == CAMPAIGN
    assert stored["spec"]["limits"] == {"nvidia.com/gpu": "8"}
    again = pools.scale("gpu", 2, owner="c/exp")  # redelivered: ours already, nothing changes
    assert again["created"] is False
    assert api.stored("NodePool", "bench-gpu") == stored

    # ready when Karpenter accepted the NodePool; nodes come with the workers' pending pods
    assert pools.ready(rec) is False
    api.set_status("NodePool", None, "bench-gpu", {"conditions": [{"type": "Ready", "status": "False"}]})
    assert pools.ready(rec) is False
    api.set_status("NodePool", None, "bench-gpu", {"conditions": [{"type": "Ready", "status": "True"}]})
    assert pools.ready(rec) is True

    assert pools.restore(rec) == {"deleted": "bench-gpu"}
    assert api.stored("NodePool", "bench-gpu") is None
    assert pools.restore(rec)["deleted"] == "bench-gpu"  # already gone is fine


def test_auto_mode_refuses_a_nodepool_that_is_not_ours(api: FakeKubeApi) -> None:
    theirs = api.put({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                      "metadata": {"name": "bench-gpu", "labels": {"team": "infra"}}, "spec": {"limits": {}}})
    pools = auto(api)
    with pytest.raises(ValueError, match=r"bench-gpu.*not this campaign"):
        pools.scale("gpu", 1, owner="o")
    with pytest.raises(ValueError, match="max_nodes"):
        pools.scale("gpu", 9, owner="o")
    fake_record = {"pool": "gpu", "nodepool": "bench-gpu", "requested": 1, "previous": None}
    assert pools.restore(fake_record)["deleted"] is None
    assert api.stored("NodePool", "bench-gpu") == theirs
    assert not [m for m, _ in api.requests if m in ("PUT", "PATCH", "DELETE")]
    # another campaign's NodePool of the same name is not ours either
    api.put({**theirs, "metadata": {"name": "bench-gpu", "labels": {CAMPAIGN_LABEL: "other-campaign"}}})
    with pytest.raises(ValueError, match="other-campaign"):
        pools.scale("gpu", 1, owner="o")


def test_pools_for_dispatches_by_provider(aws: Aws, api: FakeKubeApi) -> None:
    spec = SimpleNamespace(pools=[pool_spec(name="gpu"),
                                  pool_spec(name="auto", nodegroup=None, provider="auto-mode"),
                                  pool_spec(name="laptop", nodegroup=None, provider="local")])
    port = pools_for(spec, CAMPAIGN, cluster_name=CLUSTER, session=aws.session,  # type: ignore[arg-type]
                     kube=kube_of(api), render_nodepool=render)
    ng_rec = port.scale("gpu", 1, owner="o")
    np_rec = port.scale("auto", 1, owner="o")
    assert ng_rec["provider"] == "managed-nodegroup" and np_rec["nodepool"] == "bench-auto"
    with pytest.raises(ValueError, match="laptop"):
        port.scale("laptop", 1, owner="o")
    assert port.restore(ng_rec)["scalingConfig"] == ORIGINAL
    assert port.restore(np_rec) == {"deleted": "bench-auto"}
    assert aws.scaling("gpu-ng") == ORIGINAL and api.stored("NodePool", "bench-auto") is None
