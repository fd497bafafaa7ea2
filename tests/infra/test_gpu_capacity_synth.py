"""``benchctl:gpu_capacity`` as the platform stack synthesizes it (variants ``odcr``, ``capacity-block`` and
``auto-mode-reserved`` of tests/infra/test_platform_stack.py's VARIANTS, which the lower-bound synth also runs):
each GPU node group in the zone asked for, bought the way asked, tainted ``nvidia.com/gpu``; its placement group's
name an output; a reservation on Auto Mode a NodeClass that selects it; and cdk-nag and cfn-lint as clean as for
the other variants.

What AWS requires, and where it says so:

* EKS user guide, "Manage compute for AI/ML workloads on Amazon EKS with node groups" (the Capacity Blocks
  procedure, formerly "Create a managed node group with Capacity Blocks for ML"): the launch template's data
  holds ``InstanceMarketOptions.MarketType: capacity-block``, ``CapacityReservationSpecification.
  CapacityReservationTarget.CapacityReservationId`` and the block's ``InstanceType``; the node group has
  ``--capacity-type CAPACITY_BLOCK``, only the subnet of the block's zone, desired size 0 until the block is
  active (and at updates), an EKS accelerated AMI type (``AL2023_x86_64_NVIDIA`` in its example) and names no
  instance types itself (its ``create-nodegroup`` example has none: the type is the template's).
* EKS user guide, "Customize managed nodes with launch templates": an instance type is given in the launch
  template or in the node group, not both.
* EC2 user guide, "Work with Capacity Blocks": a block's instances are placed close together, "no need to use a
  cluster placement group"; "Placement group rules and limitations": an ODCR can be made in a cluster placement
  group, which is what the output is for.
* EKS user guide, "Control deployment of workloads into Capacity Reservations with EKS Auto Mode": a NodeClass's
  ``capacityReservationSelectorTerms`` (by ``id``); "Create a Node Class": a custom NodeClass names its ``role``,
  ``subnetSelectorTerms`` and ``securityGroupSelectorTerms``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from stacks.config import DEFAULT_GPU_INSTANCE_TYPES
from stacks.gpu_capacity import RESERVED_NODE_CLASS
from tests import crd_schemas
from tests.infra.conftest import CONTEXT, synth
from tests.infra.test_platform_stack import PF, VARIANTS, _of, _props, _synth
from tests.infra.test_platform_stack import test_cdk_nag_and_cfn_lint_are_clean as nag_and_cfn_lint_check

pytestmark = pytest.mark.infra
GPU_TAINT = [{"Key": "nvidia.com/gpu", "Effect": "NO_SCHEDULE"}]


@pytest.fixture(scope="module")
def odcr(tmp_path_factory):
    return _synth(tmp_path_factory, "odcr")


@pytest.fixture(scope="module")
def capacity_block(tmp_path_factory):
    return _synth(tmp_path_factory, "capacity-block")


@pytest.fixture(scope="module")
def auto_mode_reserved(tmp_path_factory):
    return _synth(tmp_path_factory, "auto-mode-reserved")


def _asked(variant: str) -> dict[str, dict[str, Any]]:
    asked: dict[str, dict[str, Any]] = VARIANTS[variant]["benchctl:gpu_capacity"]
    return asked


def _instance_type(group: str) -> str:
    types: dict[str, str] = CONTEXT.get("benchctl:gpu_instance_types") or DEFAULT_GPU_INSTANCE_TYPES
    return types[group]


def _cid(group: str) -> str:
    return "".join(p.capitalize() for p in group.split("-"))


def _groups(t: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["NodegroupName"]: p for p in _props(t, "AWS::EKS::Nodegroup")}


def _template_data(t: dict[str, Any], group: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = t["Resources"][group["LaunchTemplate"]["Id"]["Ref"]]["Properties"]["LaunchTemplateData"]
    return data


def _zone_of_subnet(t: dict[str, Any], ref: dict[str, str]) -> Any:
    return t["Resources"][ref["Ref"]]["Properties"]["AvailabilityZone"]


def test_a_capacity_block_launch_template_holds_what_the_eks_capacity_block_page_requires(capacity_block):
    t = capacity_block[PF]
    (name, asked), = _asked("capacity-block").items()
    g = _groups(t)[name]
    data = _template_data(t, g)
    # the launch template: market type, the block as the reservation target, the block's instance type
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": asked["reservation_id"]}}
    assert data["InstanceType"] == _instance_type(name)
    # the node group: CAPACITY_BLOCK, no instance types of its own (the template's), 0 desired, the NVIDIA AMI type
    assert g["CapacityType"] == "CAPACITY_BLOCK"
    assert "InstanceTypes" not in g
    assert g["ScalingConfig"]["DesiredSize"] == 0 and g["ScalingConfig"]["MinSize"] == 0
    assert g["AmiType"] == "AL2023_x86_64_NVIDIA" and "ImageId" not in data
    # only the subnet of the block's zone; no placement group (a block's instances are placed together)
    assert [_zone_of_subnet(t, s) for s in g["Subnets"]] == [asked["zone"]]
    assert "Placement" not in data
    assert f"{_cid(name)}PlacementGroup" not in t["Outputs"] and _of(t, "AWS::EC2::PlacementGroup")  # the other's


def test_a_capacity_block_leaves_the_other_gpu_group_on_demand_in_the_first_subnet(capacity_block):
    t = capacity_block[PF]
    (name, asked), = _asked("capacity-block").items()
    others = [n for n in CONTEXT["benchctl:nodegroups"] if n != name]
    assert others
    for other in others:
        g = _groups(t)[other]
        data = _template_data(t, g)
        assert "CapacityType" not in g and g["InstanceTypes"]  # EKS's default, On-Demand, of the group's type
        assert "InstanceMarketOptions" not in data and "CapacityReservationSpecification" not in data
        assert data["Placement"]["GroupName"]["Ref"] in _of(t, "AWS::EC2::PlacementGroup")
        # the VPC was made in the block's zone first: the first subnet is in it
        assert [_zone_of_subnet(t, s) for s in g["Subnets"]] == [asked["zone"]]


def test_a_targeted_odcr_is_the_launch_templates_reservation_target_in_the_placement_group(odcr):
    t = odcr[PF]
    (name, asked), = _asked("odcr").items()
    g = _groups(t)[name]
    data = _template_data(t, g)
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": asked["reservation_id"]}}
    assert "InstanceMarketOptions" not in data and "CapacityType" not in g  # On-Demand, from the reservation
    assert g["InstanceTypes"] == [_instance_type(name)] and "InstanceType" not in data  # in one place, not both
    assert data["Placement"]["GroupName"]["Ref"] in _of(t, "AWS::EC2::PlacementGroup")
    assert [_zone_of_subnet(t, s) for s in g["Subnets"]] == [asked["zone"]]


def test_a_zone_named_makes_the_vpc_in_it_and_in_a_second_zone_that_differs(odcr):
    t = odcr[PF]
    (_, asked), = _asked("odcr").items()
    zones = [p["AvailabilityZone"] for p in _props(t, "AWS::EC2::Subnet")]
    assert zones.count(asked["zone"]) == 2  # one public, one private subnet
    second = [z for z in zones if z != asked["zone"]]
    assert len(second) == 2 and second[0] == second[1]
    # the second zone: the Region's first unless that is the one named, then its second (decided at deploy)
    cond, when_first, otherwise = second[0]["Fn::If"]
    assert t["Conditions"][cond] == {"Fn::Equals": [{"Fn::Select": [0, {"Fn::GetAZs": ""}]}, asked["zone"]]}
    assert when_first == {"Fn::Select": [1, {"Fn::GetAZs": ""}]} and otherwise == {"Fn::Select": [0, {"Fn::GetAZs": ""}]}
    (cluster,) = _props(t, "AWS::EKS::Cluster")
    assert len(cluster["ResourcesVpcConfig"]["SubnetIds"]) == 2  # EKS: subnets in two zones


def test_a_subnet_id_of_the_given_vpc_is_the_groups_one_subnet_and_the_others_keep_the_first(tmp_path):
    given = {"benchctl:vpc_id": "vpc-0123456789abcdef0",
             "benchctl:subnet_ids": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]}
    chosen = given["benchctl:subnet_ids"][1]
    res = synth(tmp_path, {**CONTEXT, **given, "benchctl:platform": "new", "benchctl:gpu_capacity": {
        "gpu-p4d": {"subnet_id": chosen, "purchase": "reservation", "reservation_id": "cr-0123456789abcdef0"}}})
    assert res.returncode == 0, res.stderr[-2000:]
    t = json.loads((tmp_path / f"{PF}.template.json").read_text())
    groups = _groups(t)
    assert groups["gpu-p4d"]["Subnets"] == [chosen]
    assert groups["gpu-g6e"]["Subnets"] == given["benchctl:subnet_ids"][:1]
    assert not _of(t, "AWS::EC2::Subnet")  # the given VPC's subnets, named by id
    assert "GpuZoneIsFirst" not in t.get("Conditions", {})


@pytest.mark.parametrize("variant", ["odcr", "capacity-block"])
def test_every_gpu_node_group_is_tainted_nvidia_gpu_and_no_cpu_group_is(variant, request):
    t = request.getfixturevalue(variant.replace("-", "_"))[PF]
    groups = _groups(t)
    for name in CONTEXT["benchctl:nodegroups"]:
        assert groups[name]["Taints"] == GPU_TAINT, name
    cpu = [n for n in groups if n not in CONTEXT["benchctl:nodegroups"]]
    assert cpu and all("Taints" not in groups[n] for n in cpu)


def test_each_gpu_groups_placement_group_name_is_an_output(odcr):
    t = odcr[PF]
    for name in CONTEXT["benchctl:nodegroups"]:
        ref = _template_data(t, _groups(t)[name])["Placement"]["GroupName"]
        assert t["Outputs"][f"{_cid(name)}PlacementGroup"]["Value"] == ref  # Ref of a placement group: its name


def _applied_docs(t: dict[str, Any]) -> list[dict[str, Any]]:
    """Every Kubernetes document the platform applies, with each intrinsic in it written ``REF:<logical id>`` or
    ``ATT:<logical id>.<attribute>`` (what it names, rather than a made-up value)."""
    docs: list[dict[str, Any]] = []
    for r in _of(t, "Custom::AWSCDK-EKS-KubernetesResource").values():
        manifest = r["Properties"]["Manifest"]
        if isinstance(manifest, dict):
            sep, parts = manifest["Fn::Join"]
            manifest = sep.join(p if isinstance(p, str) else
                                f"REF:{p['Ref']}" if "Ref" in p else "ATT:" + ".".join(p["Fn::GetAtt"]) for p in parts)
        docs += json.loads(manifest)
    return docs


def test_a_reservation_on_auto_mode_is_a_node_class_that_selects_it_with_the_auto_mode_node_role(auto_mode_reserved):
    t = auto_mode_reserved[PF]
    (name, asked), = _asked("auto-mode-reserved").items()
    assert name == RESERVED_NODE_CLASS
    (cluster_id,) = _of(t, "AWS::EKS::Cluster")
    cluster = t["Resources"][cluster_id]["Properties"]
    role_id = cluster["ComputeConfig"]["NodeRoleArn"]["Fn::GetAtt"][0]
    assert t["Resources"][role_id]["Type"] == "AWS::IAM::Role"
    (nc,) = [d for d in _applied_docs(t) if d["kind"] == "NodeClass"]
    assert nc["apiVersion"] == "eks.amazonaws.com/v1" and nc["metadata"]["name"] == RESERVED_NODE_CLASS
    assert crd_schemas.object_meta_problems(nc, namespaced=False) == []
    spec = nc["spec"]
    assert set(spec) == {"role", "subnetSelectorTerms", "securityGroupSelectorTerms", "capacityReservationSelectorTerms"}
    assert spec["capacityReservationSelectorTerms"] == [{"id": asked["reservation_id"]}]
    assert spec["role"] == f"REF:{role_id}"  # the role's name: the cluster's Auto Mode node role
    assert spec["securityGroupSelectorTerms"] == [{"id": f"ATT:{cluster_id}.ClusterSecurityGroupId"}]
    # the nodes' subnet in the reservation's zone only (a private one: the cluster's)
    (term,) = spec["subnetSelectorTerms"]
    subnet = term["id"].removeprefix("REF:")
    assert t["Resources"][subnet]["Properties"]["AvailabilityZone"] == asked["zone"]
    assert {"Ref": subnet} in cluster["ResourcesVpcConfig"]["SubnetIds"]


def test_the_reserved_node_class_is_the_one_the_admission_policy_admits(auto_mode_reserved):
    """The campaign's NodePools name ``kubernetes.node_class`` (the platform spec's: checked at synth), and the
    admission policy admits only that NodeClass."""
    docs = _applied_docs(auto_mode_reserved[PF])
    params = [d for d in docs if d["kind"] == "ConfigMap" and "nodeClass" in json.dumps(d.get("data", {}))]
    assert params and all(f'"nodeClass": "{RESERVED_NODE_CLASS}"' in json.dumps(json.loads(v) if v[:1] == "{" else v)
                          for p in params for v in p["data"].values() if "nodeClass" in v)


def test_a_reserved_node_class_with_a_spec_on_another_node_class_fails_synth(tmp_path):
    res = synth(tmp_path, {**CONTEXT, **VARIANTS["auto-mode-reserved"], "benchctl:platform_spec": "examples/auto-mode.yaml"})
    assert res.returncode == 2, res.stderr[-2000:]
    assert (f"makes the NodeClass '{RESERVED_NODE_CLASS}' for reservation cr-0123456789abcdef0, but the spec's "
            "kubernetes.node_class is 'default'") in res.stderr


@pytest.mark.parametrize("variant", ["odcr", "capacity-block", "auto-mode-reserved"])
def test_cdk_nag_and_cfn_lint_are_clean_with_each_purchase_option(variant, request):
    nag_and_cfn_lint_check(variant, request)
