"""The preflight's quota, usage and capacity reads (benchctl.aws.quotas) as the Plan function makes them: with
its synthesized role, against moto's server with IAM enforced (tests/fakes/moto_iam.py) and EC2's GPU quotas and
Capacity Reservations added to moto (tests/fakes/ec2_capacity.py). The same reads with the role's quota
statement taken away are refused (AccessDenied), and the preflight says so instead of judging.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.ec2_capacity import ec2_capacity
from tests.fakes.moto_iam import (
    Enforcement,
    administrator,
    assume_roles,
    fresh_account,
    function_roles,
    iam_enforced,
    role_documents,
)
from tests.infra.cfn_resolve import REGION, Resolver
from tests.infra.conftest import CONTEXT, CP

pytestmark = [pytest.mark.infra, pytest.mark.timeout(600)]
JSON = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
CLUSTER = CONTEXT["benchctl:cluster_name"]


def _without(docs: list[JSON], prefix: str) -> list[JSON]:
    """The role's documents with every action of QUOTA_ACTIONS that starts with ``prefix`` taken away."""
    from stacks.function_needs import QUOTA_ACTIONS

    gone = {a for a in QUOTA_ACTIONS if a.startswith(prefix)}
    out = []
    for d in docs:
        sts = []
        for s in d["Statement"]:
            acts = s["Action"] if isinstance(s["Action"], list) else [s["Action"]]
            kept = [a for a in acts if a not in gone]
            if kept:
                sts.append({**s, "Action": kept})
        out.append({**d, "Statement": sts})
    assert out != docs, f"the Plan role grants none of {sorted(gone)} to take away"
    return out


@pytest.fixture(scope="module")
def world(templates: dict[str, JSON]) -> Iterator[tuple[dict[str, Any], Enforcement]]:
    import boto3
    from moto.server import ThreadedMotoServer

    from tests.infra.test_runner_rehearsal import _free_port

    t = {k: v for k, v in templates.items() if not k.startswith("_")}
    plan_role = function_roles(t, CP)["lambdas.plan.handler"]
    trust = Resolver(t).resolve(t[CP]["Resources"][plan_role]["Properties"]["AssumeRolePolicyDocument"], CP)
    docs = role_documents(t, CP, plan_role)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    fresh_account(url)
    try:
        root = boto3.session.Session(aws_access_key_id="setup", aws_secret_access_key="setup", region_name=REGION)
        credentials = assume_roles(root.client("iam", endpoint_url=url), root.client("sts", endpoint_url=url), {
            "plan-function": (trust, docs), "plan-without-quotas": (trust, _without(docs, "")),
            "plan-without-servicequotas": (trust, _without(docs, "servicequotas:"))})
        credentials["admin"] = administrator(root.client("iam", endpoint_url=url))
        iam = root.client("iam", endpoint_url=url)
        node_role = iam.create_role(RoleName="nodes", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        eks = root.client("eks", endpoint_url=url)
        eks.create_cluster(name=CLUSTER, roleArn=node_role, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
        eks.create_nodegroup(clusterName=CLUSTER, nodegroupName="gpu-p4d", nodeRole=node_role, subnets=["subnet-1"],
                             instanceTypes=["p4d.24xlarge"])
        ec2 = root.client("ec2", endpoint_url=url)
        ami = ec2.register_image(Name="gpu-node", RootDeviceName="/dev/xvda")["ImageId"]  # (moto's AMI catalogue is off in tests)
        ec2.run_instances(ImageId=ami, InstanceType="p4d.24xlarge", MinCount=1, MaxCount=1)  # another team's
        sessions = {name: boto3.session.Session(
            aws_access_key_id=c["AWS_ACCESS_KEY_ID"], aws_secret_access_key=c["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=c.get("AWS_SESSION_TOKEN"), region_name=REGION) for name, c in credentials.items()}
        reservation = {"CapacityReservationId": "cr-0p4d", "InstanceType": "p4d.24xlarge",
                       "AvailabilityZone": f"{REGION}a", "State": "active", "InstanceMatchCriteria": "open",
                       "TotalInstanceCount": 2, "AvailableInstanceCount": 2}
        with (pytest.MonkeyPatch.context() as mp, ec2_capacity({"L-417A185B": 288.0}, [reservation]),
              iam_enforced(url) as enforcement):
            mp.setenv("AWS_ENDPOINT_URL", url)
            yield sessions, enforcement
    finally:
        fresh_account(url)
        server.stop()


def _seed() -> Any:
    from benchctl.spec.model import parse_spec

    return parse_spec(yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text()))


def test_the_plan_functions_role_reads_the_quota_its_usage_and_the_reservations(world):
    from benchctl.aws.quotas import check

    sessions, enforcement = world
    lines = {ln.name: ln for ln in check(_seed(), sessions["plan-function"], CLUSTER)}
    quota = lines["quota L-417A185B"]
    assert quota.ok and "is 288 vCPUs (applied value)" in quota.detail and "needs 192 vCPUs" in quota.detail
    assert "96 held now by other instances" in quota.detail
    assert "cr-0p4d" in lines["capacity of pool p4d"].detail
    assert not [ln for ln in lines.values() if not ln.ok], lines
    mine = {a for who, a, _ in enforcement.checked if "plan-function" in who}
    assert {"servicequotas:GetServiceQuota", "ec2:DescribeInstanceTypes", "ec2:DescribeInstances",
            "ec2:DescribeCapacityReservations", "eks:DescribeNodegroup"} <= mine
    assert not [d for d in enforcement.denied if "plan-function" in d[0]]


def test_without_the_grant_the_reads_are_refused_and_the_preflight_does_not_judge(world):
    from benchctl.aws.quotas import check, preflight_problems

    sessions, enforcement = world
    lines = check(_seed(), sessions["plan-without-quotas"], CLUSTER)
    (line,) = lines
    assert not line.ok and not line.blocking and "AccessDenied" in line.detail and "DescribeInstanceTypes" in line.detail
    assert preflight_problems(_seed(), sessions["plan-without-quotas"], CLUSTER) == []  # it cannot tell: the doctor says
    denied = {a for who, a, _ in enforcement.denied if "plan-without-quotas" in who}
    assert "ec2:DescribeInstanceTypes" in denied
    # Service Quotas alone taken away: the quota is named unreadable, and neither refused nor passed
    lines = {ln.name: ln for ln in check(_seed(), sessions["plan-without-servicequotas"], CLUSTER)}
    quota = lines["quota L-417A185B"]
    assert not quota.ok and not quota.blocking
    # (moto answers this JSON service's AccessDenied as XML, which botocore reads as code "403"; AWS answers
    # AccessDeniedException: both name it)
    assert "cannot be read (servicequotas:GetServiceQuota L-417A185B: " in quota.detail
    assert "AccessDenied" in quota.detail
    assert any(a == "servicequotas:GetServiceQuota" and "plan-without-servicequotas" in who
               for who, a, _ in enforcement.denied)
