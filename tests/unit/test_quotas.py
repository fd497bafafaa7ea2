"""EC2 vCPU quotas and capacity options of a campaign's GPU pools (benchctl.planning.quotas: what it needs and how that
is judged; benchctl.aws.quotas: what the account gives, read from moto with the EC2 quotas and Capacity
Reservations it lacks added, tests/fakes/ec2_capacity.py), and the registries the cluster must reach."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.planning.quotas import (
    CAPACITY_BLOCK,
    ON_DEMAND,
    SPOT,
    Reading,
    Usage,
    capacity_options,
    egress_targets,
    family,
    judge,
    needs,
    quota_for,
    registry_url,
    skipped,
)
from benchctl.spec.model import parse_spec
from tests.fakes.ec2_capacity import ec2_capacity

ROOT = Path(__file__).resolve().parents[2]
VCPUS = {"p4d.24xlarge": 96, "g6e.12xlarge": 48}  # what DescribeInstanceTypes answers (moto's data agrees below)


def _example(name: str) -> Any:
    return parse_spec(yaml.safe_load((ROOT / "examples" / name).read_text()))


def test_instance_types_fall_in_their_quota_family_and_capacity_type():
    assert [family(t) for t in ("p4d.24xlarge", "p5.48xlarge", "g6e.12xlarge", "gr6.4xlarge", "vt1.3xlarge",
                                "m7i.2xlarge", "inf2.xlarge")] == ["P", "P", "G", "G", "G", None, None]
    assert quota_for("p4d.24xlarge", ON_DEMAND).code == "L-417A185B"
    assert quota_for("g6e.12xlarge", ON_DEMAND).code == "L-DB2E81BA"
    assert quota_for("p4d.24xlarge", SPOT).code == "L-7212CCBC"
    assert quota_for("g6e.12xlarge", SPOT).code == "L-3819A6DF"
    assert quota_for("p5.48xlarge", SPOT) is None  # P5 Spot has a quota of its own, not checked
    assert quota_for("m7i.2xlarge", ON_DEMAND) is None and quota_for("p4d.24xlarge", CAPACITY_BLOCK) is None


def test_the_need_is_the_most_one_experiment_holds_at_once_per_quota():
    seed = _example("seed-plan.yaml")  # each experiment: 16 GPUs on pool p4d = 2 nodes of 96 vCPUs
    (need,) = needs(seed, VCPUS, {})
    assert (need.quota.code, need.vcpus) == ("L-417A185B", 192)
    assert need.pools == {"p4d": (2, "p4d.24xlarge", 96)}
    hetero = _example("hetero-l40s.yaml")
    got = {n.quota.code: n.vcpus for n in needs(hetero, VCPUS, {})}
    assert set(got) == {"L-417A185B", "L-DB2E81BA"} and all(v > 0 for v in got.values())
    spot = {n.quota.code for n in needs(hetero, VCPUS, {"p4d": SPOT, "l40s": SPOT} | {
        p.name: SPOT for p in hetero.pools})}
    assert spot == {"L-7212CCBC", "L-3819A6DF"}
    blocks = {p.name: CAPACITY_BLOCK for p in hetero.pools if family(p.instance_type) == "P"}
    assert "L-417A185B" not in {n.quota.code for n in needs(hetero, VCPUS, blocks)}
    assert any("Capacity Block" in s for s in skipped(hetero, blocks))
    assert any("m7i.2xlarge is not a P, G or VT instance" in s for s in skipped(_example("aws-rehearsal.yaml"), {}))
    with pytest.raises(KeyError, match=r"p4d\.24xlarge"):
        needs(seed, {}, {})


def test_a_campaign_past_its_quota_is_refused_naming_the_code_value_need_and_the_increase():
    (need,) = needs(_example("seed-plan.yaml"), VCPUS, {})
    ok, line = judge(need, Reading(96.0), Usage(0), "us-east-1")
    assert not ok
    assert "EC2 quota L-417A185B (Running On-Demand P instances) in us-east-1 is 96 vCPUs (applied value)" in line
    assert "needs 192 vCPUs at once (pool p4d 2 x p4d.24xlarge (96 vCPUs each))" in line
    assert ("aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-417A185B "
            "--desired-value 192 --region us-east-1") in line
    ok, line = judge(need, Reading(192.0), Usage(96, ("i-0abc (p4d.24xlarge)",)), "us-east-1")
    assert not ok and "other instances hold 96 of it now (i-0abc (p4d.24xlarge))" in line and "96 free" in line
    assert "--desired-value 288" in line
    ok, line = judge(need, Reading(192.0), Usage(0), "us-east-1")
    assert ok and "is 192 vCPUs" in line and "0 held now by other instances" in line
    ok, line = judge(need, Reading(0.0, source="AWS default: no applied value"), None, "us-east-1")
    assert not ok and "is 0 vCPUs (AWS default: no applied value)" in line
    ok, line = judge(need, Reading(None, error="AccessDeniedException: no"), None, "us-east-1")
    assert not ok and "cannot be read (AccessDeniedException: no)" in line


def test_p_pools_on_demand_are_told_their_capacity_options_and_whether_the_node_group_targets_a_reservation():
    seed = _example("seed-plan.yaml")
    odcr = {"CapacityReservationId": "cr-0123", "InstanceType": "p4d.24xlarge", "AvailabilityZone": "us-east-1a",
            "State": "active", "InstanceMatchCriteria": "targeted", "TotalInstanceCount": 2,
            "AvailableInstanceCount": 2}
    ((pool, text),) = capacity_options(seed, {}, [odcr], {"p4d": None}, "us-east-1")
    assert pool == "p4d" and "cr-0123" in text and "2 of 2 instances free" in text
    assert "does not name it, so its nodes do not use it" in text
    assert "describe-capacity-block-offerings --instance-type p4d.24xlarge --instance-count 2" in text
    assert "create-capacity-reservation --instance-type p4d.24xlarge" in text
    (_, text), = capacity_options(seed, {}, [odcr], {"p4d": "cr-0123"}, "us-east-1")
    assert "its nodes launch into it" in text
    (_, text), = capacity_options(seed, {}, [{**odcr, "InstanceMatchCriteria": "open"}], {}, "us-east-1")
    assert "used by any matching On-Demand launch in that zone" in text
    (_, text), = capacity_options(seed, {}, [], {}, "us-east-1")
    assert "no active Capacity Reservation of p4d.24xlarge in us-east-1" in text
    assert capacity_options(seed, {"p4d": SPOT}, [], {}, "us-east-1") == []  # Spot: no reservation to name
    assert capacity_options(_example("fp8.yaml"), {}, [], {}, "us-east-1") == []  # G pools: not named


def test_the_cluster_must_reach_each_registry_of_the_campaigns_images_and_the_hub_when_it_prefetches():
    assert registry_url("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1") == "https://nvcr.io/v2/"
    assert registry_url("public.ecr.aws/aws-cli/aws-cli:2.22.0") == "https://public.ecr.aws/v2/"
    assert registry_url("python:3.11-slim-bookworm") == "https://registry-1.docker.io/v2/"
    assert registry_url("docker.io/library/python@sha256:" + "0" * 64) == "https://registry-1.docker.io/v2/"
    assert registry_url("localhost:5000/x/y:1") == "https://localhost:5000/v2/"
    seed = _example("seed-plan.yaml")
    got = egress_targets(seed, ["nvcr.io/a/b:1", "nvcr.io/a/c:2", "python:3"])
    assert got["https://nvcr.io/v2/"] == "pulls nvcr.io/a/b:1, nvcr.io/a/c:2"
    assert ("https://huggingface.co/api/models" in got) == seed.kubernetes.prefetch_model
    offline = seed.model_copy(update={"kubernetes": seed.kubernetes.model_copy(update={"prefetch_model": False})})
    assert "https://huggingface.co/api/models" not in egress_targets(offline, ["python:3"])


# ------------------------------------------------------------------------------------------ the edge, on moto


def _cluster(session: Any, capacity: str = "ON_DEMAND", template: str | None = None) -> None:
    iam = session.client("iam")
    role = iam.create_role(RoleName="r", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks = session.client("eks")
    eks.create_cluster(name="bench", roleArn=role, resourcesVpcConfig={"subnetIds": ["subnet-1"]})
    eks.create_nodegroup(clusterName="bench", nodegroupName="gpu-p4d", nodeRole=role, subnets=["subnet-1"],
                         instanceTypes=["p4d.24xlarge"], capacityType=capacity,
                         **({"launchTemplate": {"id": template, "version": "1"}} if template else {}))


def test_the_quota_lines_read_the_applied_value_else_the_aws_default_said_so(aws):
    from benchctl.aws.quotas import check, preflight_problems, read_quota

    _cluster(aws)
    seed = _example("seed-plan.yaml")
    with ec2_capacity({"L-417A185B": 384.0}):
        sq = aws.client("service-quotas")
        assert read_quota(sq, "L-417A185B").value == 384.0
        default = read_quota(sq, "L-DB2E81BA")  # no applied value: the AWS default, said so
        assert default.value == 0.0 and default.source.startswith("AWS default")
        unknown = read_quota(sq, "L-00000000")
        assert unknown.value is None and "NoSuchResourceException" in (unknown.error or "")
        lines = check(seed, aws, "bench")
        (quota,) = [ln for ln in lines if ln.name == "quota L-417A185B"]
        assert quota.ok and "is 384 vCPUs (applied value)" in quota.detail and "needs 192 vCPUs" in quota.detail
        assert "0 held now by other instances" in quota.detail
        assert preflight_problems(seed, aws, "bench") == []
    with ec2_capacity({}):  # the default (0): refused, with the capacity options of the P pool
        (problem,) = preflight_problems(seed, aws, "bench")
        assert "L-417A185B" in problem and "is 0 vCPUs (AWS default" in problem and "--desired-value 192" in problem
        assert "capacity options: pool p4d:" in problem and "describe-capacity-block-offerings" in problem


def test_other_running_p_instances_count_against_the_quota_and_the_pools_own_do_not(aws):
    from benchctl.aws.quotas import check

    _cluster(aws)
    ec2 = aws.client("ec2")
    ami = ec2.register_image(Name="gpu-node", RootDeviceName="/dev/xvda")["ImageId"]  # (moto's catalogue is off in tests)
    ec2.run_instances(ImageId=ami, InstanceType="p4d.24xlarge", MinCount=1, MaxCount=1)  # someone else's
    ec2.run_instances(ImageId=ami, InstanceType="p4d.24xlarge", MinCount=1, MaxCount=1, TagSpecifications=[
        {"ResourceType": "instance", "Tags": [{"Key": "eks:cluster-name", "Value": "bench"},
                                              {"Key": "eks:nodegroup-name", "Value": "gpu-p4d"}]}])  # the pool's own
    with ec2_capacity({"L-417A185B": 192.0}):
        (quota,) = [ln for ln in check(_example("seed-plan.yaml"), aws, "bench") if ln.name == "quota L-417A185B"]
    assert not quota.ok and quota.blocking
    assert "other instances hold 96 of it now" in quota.detail and "96 free" in quota.detail


def test_a_spot_node_group_is_judged_against_the_spot_quota(aws):
    from benchctl.aws.quotas import check

    _cluster(aws, capacity="SPOT")
    with ec2_capacity({"L-7212CCBC": 96.0, "L-417A185B": 0.0}):
        names = {ln.name: ln for ln in check(_example("seed-plan.yaml"), aws, "bench")}
    assert "quota L-417A185B" not in names and not names["quota L-7212CCBC"].ok
    assert not any(n.startswith("capacity of pool") for n in names)  # reservations are On-Demand capacity


def test_an_active_reservation_the_launch_template_targets_is_named_as_used(aws):
    from benchctl.aws.quotas import check

    ec2 = aws.client("ec2")
    lt = ec2.create_launch_template(LaunchTemplateName="gpu", LaunchTemplateData={
        "CapacityReservationSpecification": {"CapacityReservationTarget": {"CapacityReservationId": "cr-0abc"}}})
    _cluster(aws, template=lt["LaunchTemplate"]["LaunchTemplateId"])
    found = [{"CapacityReservationId": "cr-0abc", "InstanceType": "p4d.24xlarge", "AvailabilityZone": "us-east-1a",
              "State": "active", "InstanceMatchCriteria": "targeted", "TotalInstanceCount": 2,
              "AvailableInstanceCount": 1},
             {"CapacityReservationId": "cr-0old", "InstanceType": "p4d.24xlarge", "AvailabilityZone": "us-east-1b",
              "State": "expired", "InstanceMatchCriteria": "open", "TotalInstanceCount": 4,
              "AvailableInstanceCount": 4},
             {"CapacityReservationId": "cr-0g6e", "InstanceType": "g6e.12xlarge", "AvailabilityZone": "us-east-1a",
              "State": "active", "InstanceMatchCriteria": "open", "TotalInstanceCount": 1,
              "AvailableInstanceCount": 1}]
    with ec2_capacity({"L-417A185B": 384.0}, found):
        (cap,) = [ln for ln in check(_example("seed-plan.yaml"), aws, "bench") if ln.name == "capacity of pool p4d"]
    assert "cr-0abc" in cap.detail and "1 of 2 instances free" in cap.detail and "its nodes launch into it" in cap.detail
    assert "cr-0old" not in cap.detail and "cr-0g6e" not in cap.detail  # expired; another type


def test_the_aiperf_preflight_job_carries_the_egress_probe_and_stays_a_valid_job():
    import json

    from benchctl.aws.k8s.preflight_jobs import EGRESS_CHECK, render_preflight_job
    from tests.aws_checks import job_problems
    from tests.unit.test_aws_k8s import CID, _with_image

    seed = _with_image(_example("seed-plan.yaml"), "123456789012.dkr.ecr.us-east-1.amazonaws.com/load:1")
    job = render_preflight_job(seed, CID, "aiperf")
    assert job_problems(job) == []  # Kubernetes' own Job schema, strict
    (c,) = job["spec"]["template"]["spec"]["containers"]
    assert EGRESS_CHECK in c["command"][2]
    egress = json.loads({e["name"]: e["value"] for e in c["env"]}["BENCHCTL_EGRESS"])
    assert set(egress) == {"https://nvcr.io/v2/", "https://public.ecr.aws/v2/", "https://registry-1.docker.io/v2/",
                           "https://123456789012.dkr.ecr.us-east-1.amazonaws.com/v2/",
                           "https://huggingface.co/api/models"}
    assert "vllm-runtime:1.6.1-efa" in egress["https://nvcr.io/v2/"]  # the EFA workers' image too
    uploader = render_preflight_job(seed, CID, "uploader")["spec"]["template"]["spec"]["containers"][0]
    assert EGRESS_CHECK not in uploader["command"][2]  # one probe per campaign


def test_a_spec_without_gpu_pools_says_its_pools_quotas_are_not_judged(aws):
    from benchctl.aws.quotas import check

    lines = check(_example("aws-rehearsal.yaml"), aws, "bench")  # its node group is not in this account: named
    assert [ln.detail for ln in lines if ln.ok] == [
        "pool cpu-rehearsal: m7i.2xlarge is not a P, G or VT instance (its quota family is not checked here)"]


def test_the_plan_functions_preflight_refuses_a_campaign_past_its_quota_before_anything_is_scaled(aws, monkeypatch):
    """EksPreflight (Plan's PreflightPort) adds the quota problems to the deployment's and the cluster's."""
    from benchctl.aws import preflight as pf

    _cluster(aws)
    monkeypatch.setattr(pf, "preflight", lambda *a, **k: [])  # the cluster's own checks: test_aws_k8s.py
    monkeypatch.setattr(pf, "deployment_preflight", lambda *a, **k: [])
    port = pf.EksPreflight(lambda: None, aws, None, cluster="bench", nodegroups=("gpu-p4d",), load_image="",
                           campaign_id="seed-plan-20261201-101500", run_uri="s3://b/runs", lake_uri="s3://b/lake")
    seed = _example("seed-plan.yaml")
    with ec2_capacity({"L-417A185B": 96.0}):
        (problem,) = port.check(seed)
    assert problem.startswith("EC2 quota L-417A185B (Running On-Demand P instances) in us-east-1 is 96 vCPUs")
    with ec2_capacity({"L-417A185B": 192.0}):
        assert port.check(seed) == []
    # a node group this deployment may not scale is named by deployment_preflight, not judged here
    other = pf.EksPreflight(lambda: None, aws, None, cluster="bench", nodegroups=("gpu-g6e",), load_image="",
                            campaign_id="seed-plan-20261201-101500", run_uri="s3://b/runs", lake_uri="s3://b/lake")
    with ec2_capacity({"L-417A185B": 96.0}):
        assert other.check(seed) == []
