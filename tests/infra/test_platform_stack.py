"""The platform stack (``-c benchctl:platform=new|existing``), synthesised offline without Docker, once per
variant (a module fixture each): managed node groups, EKS Auto Mode, and an existing cluster with some pieces
skipped. Each piece is asserted from the template; every manifest the stack applies goes through the
campaign's strict Kubernetes/CRD validation; cfn-lint and cdk-nag as for the other stacks; and the wiring:
the seed plan, planned for AWS, passes the deployment's and the cluster's preflight against exactly what the
platform creates and the control plane it configures, with no name edited."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from benchctl.aws.env import LambdaEnv
from benchctl.aws.k8s.common import HF_TOKEN_KEY
from benchctl.spec.model import load_spec
from stacks import platform_manifests as pm
from stacks import platform_values as pv
from stacks.cluster_objects import KUBERNETES_DIR, TOKEN_SYNC
from stacks.config import PLATFORM_PIECES
from stacks.platform_nodes import EFA_INTERFACES
from tests import crd_schemas
from tests.aws_checks import job_problems
from tests.infra.cfn_resolve import Resolver
from tests.infra.conftest import CONTEXT, ROOT, load_templates, synth

pytestmark = pytest.mark.infra
PF, CP = "benchctl-dev-platform", "benchctl-dev-control-plane"
GIVEN_VPC = {"benchctl:vpc_id": "vpc-0123456789abcdef0",
             "benchctl:subnet_ids": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"],
             "benchctl:cluster_security_group_id": "sg-0123456789abcdef0"}
VARIANTS: dict[str, dict[str, Any]] = {
    "nodegroups": {"benchctl:platform": "new"},
    "auto-mode": {"benchctl:platform": "new", "benchctl:platform_capacity": "auto-mode",
                  "benchctl:platform_spec": "examples/auto-mode.yaml"},
    "existing": {"benchctl:platform": "existing", **GIVEN_VPC,
                 "benchctl:platform_skip": ["eks-pod-identity-agent", "nvidia-device-plugin", "rbac"]},
    # benchctl:gpu_capacity (tests/infra/test_gpu_capacity_synth.py holds what each makes)
    "odcr": {"benchctl:platform": "new", "benchctl:gpu_capacity": {"gpu-p4d": {
        "zone": "us-east-1b", "purchase": "reservation", "reservation_id": "cr-0123456789abcdef0"}}},
    "capacity-block": {"benchctl:platform": "new", "benchctl:gpu_capacity": {"gpu-p4d": {
        "zone": "us-east-1a", "purchase": "capacity-block", "reservation_id": "cr-0fedcba9876543210"}}},
    "auto-mode-reserved": {"benchctl:platform": "new", "benchctl:platform_capacity": "auto-mode",
                           "benchctl:platform_spec": "tests/infra/specs/auto-mode-reserved.yaml",
                           "benchctl:gpu_capacity": {"benchctl-reserved": {
                               "zone": "us-east-1a", "purchase": "reservation",
                               "reservation_id": "cr-0123456789abcdef0"}}},
}
SEED = load_spec(ROOT / "examples" / "seed-plan.yaml")


def _synth(tmp_path_factory: pytest.TempPathFactory, variant: str) -> dict[str, Any]:
    out = tmp_path_factory.mktemp(f"cdk.out.platform-{variant}")
    res = synth(out, {**CONTEXT, **VARIANTS[variant]})
    assert res.returncode == 0, res.stderr[-3000:]
    return {**load_templates(out), "_out": {"dir": str(out)}}


@pytest.fixture(scope="module")
def nodegroups(tmp_path_factory):
    return _synth(tmp_path_factory, "nodegroups")


@pytest.fixture(scope="module")
def auto_mode(tmp_path_factory):
    return _synth(tmp_path_factory, "auto-mode")


@pytest.fixture(scope="module")
def existing(tmp_path_factory):
    return _synth(tmp_path_factory, "existing")


def _of(t: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in t["Resources"].items() if v["Type"] == kind}


def _props(t: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in _of(t, kind).values()]


def applied(templates: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every manifest the platform applies, by construct, as the kubectl handler receives it (intrinsics
    resolved to test values; CDK's prune label removed)."""
    r = Resolver({k: v for k, v in templates.items() if not k.startswith("_")})
    out = {}
    for lid, res in _of(templates[PF], "Custom::AWSCDK-EKS-KubernetesResource").items():
        docs = json.loads(r.resolve(res["Properties"]["Manifest"], PF))
        for d in docs:
            labels = d["metadata"].get("labels") or {}
            for k in [k for k in labels if k.startswith("aws.cdk.eks/prune-")]:
                del labels[k]
            if not labels:
                d["metadata"].pop("labels", None)
        out[lid] = docs
    return out


def charts_of(t: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["Chart"]: p for p in _props(t, "Custom::AWSCDK-EKS-HelmChart")}


def _settings(templates: dict[str, Any], spec: Any, **kw: Any) -> pv.PlatformSettings:
    return pv.settings_from_spec(spec, cluster_name=CONTEXT["benchctl:cluster_name"], region="us-east-1",
                                 efs_file_system_id="x", **kw)


# ------------------------------------------------------------------------------------------ new, node groups


def test_a_new_cluster_is_pinned_with_api_authentication_and_its_logs_kept_a_month(nodegroups):
    (cluster,) = _props(nodegroups[PF], "AWS::EKS::Cluster")
    assert cluster["Name"] == CONTEXT["benchctl:cluster_name"] and cluster["Version"] == "1.35"
    assert cluster["AccessConfig"]["AuthenticationMode"] == "API"  # access entries only, no aws-auth ConfigMap
    assert cluster["ComputeConfig"] == {"Enabled": False}
    assert len(cluster["Logging"]["ClusterLogging"]["EnabledTypes"]) == 5
    (group,) = [p for p in _props(nodegroups[PF], "AWS::Logs::LogGroup")
                if p.get("LogGroupName") == f"/aws/eks/{CONTEXT['benchctl:cluster_name']}/cluster"]
    assert group["RetentionInDays"] == 30
    assert len(_props(nodegroups[PF], "AWS::EC2::NatGateway")) == 1  # the idle cost docs/howto/aws-empty-account.md states


def test_gpu_node_groups_are_named_from_context_start_empty_and_launch_with_every_efa_interface(nodegroups):
    t = nodegroups[PF]
    groups = {p["NodegroupName"]: p for p in _props(t, "AWS::EKS::Nodegroup")}
    gpu_types = {"gpu-p4d": "p4d.24xlarge", "gpu-g6e": "g6e.12xlarge"}
    assert set(groups) == {*CONTEXT["benchctl:nodegroups"], "benchctl-cpu", "benchctl-rehearsal"}
    templates = _of(t, "AWS::EC2::LaunchTemplate")
    placement = _of(t, "AWS::EC2::PlacementGroup")
    assert {p["Properties"]["Strategy"] for p in placement.values()} == {"cluster"}
    for name, itype in gpu_types.items():
        g = groups[name]
        assert g["InstanceTypes"] == [itype] and g["AmiType"] == "AL2023_x86_64_NVIDIA"  # the accelerated AMI
        assert g["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0,
                                      "MaxSize": CONTEXT["benchctl:ceilings"]["max_nodes_per_pool"]}
        assert len(g["Subnets"]) == 1  # one AZ: the placement group's
        data = templates[g["LaunchTemplate"]["Id"]["Ref"]]["Properties"]["LaunchTemplateData"]
        nics = data["NetworkInterfaces"]
        assert [n["InterfaceType"] for n in nics] == ["efa"] * EFA_INTERFACES[itype]
        assert [n["NetworkCardIndex"] for n in nics] == list(range(EFA_INTERFACES[itype]))
        assert all(n["Groups"] == [{"Fn::GetAtt": [next(iter(_of(t, "AWS::EKS::Cluster"))),
                                                   "ClusterSecurityGroupId"]}] for n in nics)
        assert data["Placement"]["GroupName"]["Ref"] in placement
        assert data["MetadataOptions"]["HttpTokens"] == "required"
        assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1  # no pod reaches the node role
    assert EFA_INTERFACES["p4d.24xlarge"] == 4  # FACTS: p4d.24xlarge has 4 EFA interfaces
    cpu = groups["benchctl-cpu"]
    assert cpu["InstanceTypes"] == ["m7i.4xlarge"] and cpu["ScalingConfig"]["DesiredSize"] == 1
    assert cpu["AmiType"] == "AL2023_x86_64_STANDARD"


def test_add_ons_pod_identity_agent_and_efs_csi_driver_with_its_pod_identity_role(nodegroups):
    t = nodegroups[PF]
    addons = {p["AddonName"]: p for p in _props(t, "AWS::EKS::Addon")}
    assert set(addons) == {"eks-pod-identity-agent", "aws-efs-csi-driver"}
    cpu = next(k for k, r in _of(t, "AWS::EKS::Nodegroup").items() if r["Properties"]["NodegroupName"] == "benchctl-cpu")
    (efs,) = [r for r in _of(t, "AWS::EKS::Addon").values() if r["Properties"]["AddonName"] == "aws-efs-csi-driver"]
    assert cpu in efs["DependsOn"]  # its controller needs a node, or the add-on stays DEGRADED
    agent = next(k for k, r in _of(t, "AWS::EKS::Addon").items() if r["Properties"]["AddonName"] == "eks-pod-identity-agent")
    assert agent in efs["DependsOn"]  # and its credentials come through the Pod Identity agent
    (assoc,) = addons["aws-efs-csi-driver"]["PodIdentityAssociations"]
    assert assoc["ServiceAccount"] == "efs-csi-controller-sa"
    role = t["Resources"][assoc["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    assert "AmazonEFSCSIDriverPolicy" in json.dumps(role["ManagedPolicyArns"])
    trust = role["AssumeRolePolicyDocument"]["Statement"]
    assert {s["Principal"]["Service"] for s in trust} == {"pods.eks.amazonaws.com"}
    assert {a for s in trust for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])} == {
        "sts:AssumeRole", "sts:TagSession"}


def test_the_charts_are_the_pinned_ones_in_the_plans_order_with_their_checked_values(nodegroups):
    t = nodegroups[PF]
    got = charts_of(t)
    settings = _settings(nodegroups, SEED, gpu_nodegroups=tuple(CONTEXT["benchctl:nodegroups"]))
    keys = pv.charts_to_install(settings)
    assert keys == list(pv.INSTALL_ORDER)  # node groups: both device plugins too
    assert [p["Chart"] for p in _props(t, "Custom::AWSCDK-EKS-HelmChart")] == [pv.CHARTS[k].chart for k in keys]
    for key in keys:
        pin, p = pv.CHARTS[key], got[pv.CHARTS[key].chart]
        assert (p["Repository"], p["Version"], p["Release"], p["Namespace"]) == (
            pin.repository, pin.version, pin.release, pin.namespace)
        assert json.loads(p["Values"]) == pv.chart_values(key, settings), key
    assert got["dynamo-platform"]["Version"] == "1.6.1"  # the release the runtime images are
    # each chart's wait ends well before the kubectl handler's Lambda would be killed (which would leave the
    # custom resource unanswered and CloudFormation waiting an hour): a timed-out chart fails at once
    handlers = [r["Properties"] for r in _of(t, "AWS::Lambda::Function").values()
                if "KubectlProvider" in json.dumps(r.get("Metadata", {})) or r["Properties"].get("Handler") in
                ("index.handler", "framework.onEvent")]
    limit = min(int(h["Timeout"]) for h in handlers)
    assert limit == 900 and all(int(p["Timeout"].removesuffix("s")) <= limit - 300 for p in got.values()), (
        limit, [p["Timeout"] for p in got.values()])
    # each chart after the one before (the Dynamo chart's PodMonitors need the monitoring CRDs)
    ids = {p["Properties"]["Chart"]: lid for lid, p in _of(t, "Custom::AWSCDK-EKS-HelmChart").items()}
    for before, after in itertools.pairwise(keys):
        assert ids[pv.CHARTS[before].chart] in t["Resources"][ids[pv.CHARTS[after].chart]]["DependsOn"]


def test_monitoring_provisions_our_dashboards_as_grafana_loads_them(nodegroups):
    docs = [d for ds in applied(nodegroups).values() for d in ds]
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap" and "benchctl-dashboard-" in
            d["metadata"]["name"]}
    files = pm.dashboard_files()
    assert len(maps) == len(files) >= 1
    for path in files:
        cm = maps[f"benchctl-dashboard-{path.stem}"]
        assert cm["data"] == {path.name: path.read_text()}  # the JSON we ship, unchanged
        assert cm["metadata"]["labels"][pv.DASHBOARD_LABEL] == pv.DASHBOARD_LABEL_VALUE
        assert cm["metadata"]["namespace"] == pv.CHARTS["kube-prometheus-stack"].namespace
    assert any(d["kind"] == "PodMonitor" for d in docs)


def test_model_storage_is_an_encrypted_retained_file_system_with_the_claim_and_the_download_job(nodegroups):
    t = nodegroups[PF]
    (lid, fs), = _of(t, "AWS::EFS::FileSystem").items()
    assert fs["Properties"]["Encrypted"] is True and fs["DeletionPolicy"] == "Retain"  # benchctl:model_fs_removal
    assert len(_of(t, "AWS::EFS::MountTarget")) == 2
    (sg,) = [p for p in _props(t, "AWS::EC2::SecurityGroup") if "model file system" in p["GroupDescription"]]
    assert [(r["FromPort"], r["ToPort"]) for r in sg["SecurityGroupIngress"]] == [(2049, 2049)]
    docs = {(d["kind"], d["metadata"]["name"]): d for ds in applied(nodegroups).values() for d in ds}
    sc = docs[("StorageClass", pv.STORAGE_CLASS)]
    assert sc["parameters"]["fileSystemId"] == lid and sc["reclaimPolicy"] == "Retain"
    claim = docs[("PersistentVolumeClaim", SEED.kubernetes.model_pvc)]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"] and claim["spec"]["storageClassName"] == pv.STORAGE_CLASS
    settings = _settings(nodegroups, SEED, gpu_nodegroups=tuple(CONTEXT["benchctl:nodegroups"]))
    job = pm.model_download_job(settings)
    assert docs[("Job", job["metadata"]["name"])] == json.loads(json.dumps(job))
    # named by its content (a Job's template is immutable: a changed download is a new Job, never a refused
    # replace that rolls the update back); the same content, the same name
    assert pm.model_download_job(settings)["metadata"]["name"] == job["metadata"]["name"]
    other = dataclasses.replace(settings, model=SEED.model.model_copy(update={"revision": "0" * 40}))
    assert pm.model_download_job(other)["metadata"]["name"] != job["metadata"]["name"]
    assert len(job["metadata"]["name"]) <= 63
    # the claim, class and Job once the file system's mount targets and the CSI driver exist
    (storage,) = [r for r in _of(t, "Custom::AWSCDK-EKS-KubernetesResource").values()
                  if "StorageClass" in json.dumps(r["Properties"]["Manifest"])]
    addon = next(k for k, r in _of(t, "AWS::EKS::Addon").items() if r["Properties"]["AddonName"] == "aws-efs-csi-driver")
    assert {lid, addon} <= set(storage["DependsOn"]) and any(d.startswith("ModelFsEfsMountTarget")
                                                             for d in storage["DependsOn"])


def test_the_hf_token_comes_from_a_secret_the_user_fills_through_a_pod_identity_copy(nodegroups):
    t = nodegroups[PF]
    (lid, secret), = _of(t, "AWS::SecretsManager::Secret").items()
    assert "SecretString" not in secret["Properties"]  # generated placeholder; never a token in the template
    assert not t.get("Parameters", {}).keys() - {"BootstrapVersion"}  # no parameter takes a token
    (assoc,) = _props(t, "AWS::EKS::PodIdentityAssociation")
    assert (assoc["Namespace"], assoc["ServiceAccount"]) == (SEED.kubernetes.namespace, TOKEN_SYNC)
    reader = assoc["RoleArn"]["Fn::GetAtt"][0]
    (policy,) = [p for p in _props(t, "AWS::IAM::Policy") if p["Roles"] == [{"Ref": reader}]]
    assert policy["PolicyDocument"]["Statement"] == [{
        "Action": ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"], "Effect": "Allow",
        "Resource": {"Ref": lid}}]
    docs = {(d["kind"], d["metadata"]["name"]): d for ds in applied(nodegroups).values() for d in ds}
    role = docs[("Role", TOKEN_SYNC)]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"],
                              "resourceNames": [SEED.kubernetes.hf_token_secret], "verbs": ["get", "patch"]}]
    cron = docs[("CronJob", TOKEN_SYNC)]
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == TOKEN_SYNC
    script = pod["containers"][0]["command"][-1]
    assert f'"{HF_TOKEN_KEY}"' in script and f"/secrets/{SEED.kubernetes.hf_token_secret}" in script
    assert {"name": "SECRET_ARN", "value": lid} in pod["containers"][0]["env"]
    assert "set -x" not in script and "echo \"$tok" not in script  # the token is never printed


def test_our_rbac_and_admission_are_applied_as_the_files_say_with_the_load_images_registry_allowed(nodegroups):
    """The files as they are, but the admission parameters: the deployment's allow-list with the registry the
    control plane publishes the load image to (the step the file's header asks a person to do by hand)."""
    from benchctl.aws.k8s.admission import admission_params, allow_list_from_ceilings
    from benchctl.planning import ceilings

    files = [d for p in sorted(KUBERNETES_DIR.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    (rbac,) = [docs for docs in applied(nodegroups).values() if any(d["kind"] == "ValidatingAdmissionPolicy"
                                                                    for d in docs)]
    registry = "123456789012.dkr.ecr.us-east-1.amazonaws.com/"  # the test account and Region (cfn_resolve)
    params = admission_params(allow_list_from_ceilings(ceilings.from_context_file(ROOT / "cdk.json"),
                                                       load_image_registry=registry))
    assert registry in params["data"]["imagePrefixes"].split()
    assert rbac == [params if d["kind"] == "ConfigMap" and d["metadata"]["name"] == params["metadata"]["name"]
                    else d for d in files]
    # the allow-list and the runner grants (empty: Plan adds each campaign's), nothing else
    assert sorted(d["metadata"]["name"] for d in rbac if d["kind"] == "ConfigMap") == [
        "benchctl-admission", "benchctl-runner-grants"]
    (grants,) = [d for d in rbac if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "benchctl-runner-grants"]
    assert not grants.get("data")


def test_every_manifest_the_platform_applies_passes_the_campaigns_strict_validation(nodegroups, auto_mode, existing):
    cluster_scoped = {"Namespace", "StorageClass", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding"}
    seen = set()
    for templates in (nodegroups, auto_mode, existing):
        for docs in applied(templates).values():
            for d in docs:
                seen.add(d["kind"])
                problems = (crd_schemas.problems(d) if d["kind"] in crd_schemas.FILES else
                            job_problems(d) + crd_schemas.object_meta_problems(
                                d, namespaced=d["kind"] not in cluster_scoped))
                assert problems == [], (d["kind"], d["metadata"]["name"], problems)
    assert {"Namespace", "StorageClass", "PersistentVolumeClaim", "Job", "CronJob", "ConfigMap", "PodMonitor",
            "Role", "RoleBinding", "ClusterRole", "ValidatingAdmissionPolicy", "Secret"} <= seen


def test_nothing_is_exposed_or_left_billing_by_a_load_balancer_or_volume(nodegroups):
    """cdk destroy removes everything but the model file system (model_fs_removal, stated) and the retained
    nothing else: no Service of type LoadBalancer (an orphaned ELB), no persistent volume claim template
    (an orphaned EBS volume) in any chart's values or manifest."""
    t = nodegroups[PF]
    text = json.dumps([p.get("Values", "") for p in _props(t, "Custom::AWSCDK-EKS-HelmChart")]
                      + [applied(nodegroups)])
    assert "LoadBalancer" not in text and "volumeClaimTemplate" not in text and '"storageSpec"' not in text
    kept = {lid for lid, r in t["Resources"].items() if r.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate")}
    assert kept == set(_of(t, "AWS::EFS::FileSystem"))


# ------------------------------------------------------------------------------------------ Auto Mode, existing


def test_auto_mode_builds_in_the_device_plugins_and_pod_identity_agent(auto_mode):
    t = auto_mode[PF]
    (cluster,) = _props(t, "AWS::EKS::Cluster")
    assert cluster["ComputeConfig"]["Enabled"] is True
    assert cluster["ComputeConfig"]["NodePools"] == ["system", "general-purpose"]  # the default NodeClass too
    assert not _of(t, "AWS::EKS::Nodegroup") and not _of(t, "AWS::EC2::LaunchTemplate")
    assert {p["AddonName"] for p in _props(t, "AWS::EKS::Addon")} == {"aws-efs-csi-driver"}
    assert set(charts_of(t)) == {"kube-prometheus-stack", "dcgm-exporter", "dynamo-platform"}
    env = _env(auto_mode)
    assert env.nodegroups == () and env.cluster == cluster["Name"]


def test_an_existing_cluster_gets_only_what_it_lacks(existing):
    t = existing[PF]
    assert not _of(t, "AWS::EKS::Cluster") and not _of(t, "AWS::EC2::VPC") and not _of(t, "AWS::EKS::Nodegroup")
    (entry,) = _props(t, "AWS::EKS::AccessEntry")  # the kubectl handler's, on the named cluster
    assert entry["ClusterName"] == CONTEXT["benchctl:cluster_name"]
    assert ":cluster-access-policy/AmazonEKSClusterAdminPolicy" in json.dumps(entry["AccessPolicies"])
    assert {p["AddonName"] for p in _props(t, "AWS::EKS::Addon")} == {"aws-efs-csi-driver"}  # agent skipped
    assert set(charts_of(t)) == {pv.CHARTS[k].chart for k in pv.CHARTS} - {"nvidia-device-plugin"}
    assert not any(d["kind"] == "ValidatingAdmissionPolicy" for ds in applied(existing).values() for d in ds)
    # its namespace may hold more than ours: cdk destroy leaves it
    (ns,) = [lid for lid, docs in applied(existing).items() if [d["kind"] for d in docs] == ["Namespace"]]
    assert t["Resources"][ns]["DeletionPolicy"] == "Retain"
    (_fs,) = _props(t, "AWS::EFS::FileSystem")
    assert {p["SubnetId"] for p in _props(t, "AWS::EFS::MountTarget")} == set(GIVEN_VPC["benchctl:subnet_ids"])
    (sg,) = [p for p in _props(t, "AWS::EC2::SecurityGroup") if "model file system" in p["GroupDescription"]]
    assert sg["SecurityGroupIngress"][0]["SourceSecurityGroupId"] == GIVEN_VPC["benchctl:cluster_security_group_id"]
    assert set(PLATFORM_PIECES) == set(pv.EKS_ADDONS) | set(pv.CHARTS) | {"model-storage", "rbac"}


# ------------------------------------------------------------------------------------------ nag, cfn-lint


@pytest.mark.parametrize("variant", ["nodegroups", "auto-mode", "existing"])
def test_cdk_nag_and_cfn_lint_are_clean(variant, request):
    templates = request.getfixturevalue(variant.replace("-", "_"))
    out = Path(templates["_out"]["dir"])
    meta = json.loads((out / f"{PF}.metadata.json").read_text())
    errors = [e["data"] for entries in meta.values() for e in entries
              if e["type"] == "aws:cdk:error" and "AwsSolutions-" in str(e["data"])]
    assert errors == []
    (report,) = out.glob(f"AwsSolutions-*{PF}-NagReport.csv")
    text = report.read_text()
    assert "Compliant" in text and "Non-Compliant" not in text
    for r in templates[PF]["Resources"].values():
        for sup in r.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
            assert len(sup["reason"]) >= 30, sup
    cfn_lint = str(Path(sys.executable).parent / "cfn-lint")
    res = subprocess.run([cfn_lint, "--ignore-checks", "W3005", "W3045", "--", str(out / f"{PF}.template.json"),
                          str(out / f"{CP}.template.json")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


# ------------------------------------------------------------------------------------------ wiring


def _env(templates: dict[str, Any]) -> LambdaEnv:
    (fn,) = [r["Properties"] for lid, r in _of(templates[CP], "AWS::Lambda::Function").items()
             if lid.startswith("PlanFunction")]
    r = Resolver({k: v for k, v in templates.items() if not k.startswith("_")})
    return LambdaEnv.from_env({k: str(r.resolve(v, CP)) for k, v in fn["Environment"]["Variables"].items()})


class _Kube:
    """The cluster as the platform leaves it: the objects its manifests create (the token secret as the
    CronJob fills it) and the Dynamo CRD its chart applies; nothing else. Missing: NotFound, as the API says."""

    def __init__(self, docs: list[dict[str, Any]]) -> None:
        self.objects = {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d for d in docs}

    def version(self) -> dict[str, str]:
        return {"gitVersion": "v1.35.0-eks"}

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        from benchctl.aws.k8s.client import NotFound

        try:
            return self.objects[(kind, name, namespace)]
        except KeyError:
            raise NotFound(404, "NotFound", f"{kind} {namespace}/{name} not found") from None

    def list(self, api_version: str, kind: str, namespace: str | None = None, **_: Any) -> list[dict[str, Any]]:
        return [d for (k, _n, ns), d in self.objects.items() if k == kind and ns in (namespace, None)]


class _Eks:
    class exceptions:
        class ResourceNotFoundException(Exception):
            pass

    def __init__(self, cluster: str, nodegroups: set[str], addons: set[str]) -> None:
        self.cluster, self.nodegroups, self.addons = cluster, nodegroups, addons

    def describe_nodegroup(self, clusterName: str, nodegroupName: str) -> dict[str, Any]:
        if clusterName != self.cluster or nodegroupName not in self.nodegroups:
            raise self.exceptions.ResourceNotFoundException(nodegroupName)
        return {"nodegroup": {"nodegroupName": nodegroupName}}

    def describe_addon(self, clusterName: str, addonName: str) -> dict[str, Any]:
        if clusterName != self.cluster or addonName not in self.addons:
            err = Exception(addonName)
            err.response = {"Error": {"Code": "ResourceNotFoundException"}}  # type: ignore[attr-defined]
            raise err
        return {"addon": {"addonName": addonName}}


def _platform_world(templates: dict[str, Any], *, efa: bool = True) -> tuple[_Eks, list[dict[str, Any]]]:
    """The cluster as the platform leaves it: EKS (its node groups and add-ons, from the template) and the
    Kubernetes objects the preflight reads (what the stack applies, the token filled as the sync leaves it,
    what the charts install that the preflight looks for)."""
    pf = templates[PF]
    (cluster,) = _props(pf, "AWS::EKS::Cluster")
    groups = {p["NodegroupName"] for p in _props(pf, "AWS::EKS::Nodegroup")}
    eks = _Eks(cluster["Name"], groups, {p["AddonName"] for p in _props(pf, "AWS::EKS::Addon")})
    docs = [d for ds in applied(templates).values() for d in ds]
    for d in docs:
        if d["kind"] == "Secret":  # as the token-sync CronJob leaves it once the user filled the secret
            d["data"] = {HF_TOKEN_KEY: "aGZfdGVzdA=="}
    # what the charts install that the preflight looks for: the Dynamo CRD (the operator applies it) and the EFA
    # device plugin's DaemonSet, with the image of the chart's own default values at the pinned version
    docs.append({"kind": "CustomResourceDefinition", "metadata": {"name": "dynamographdeployments.nvidia.com"}})
    assert "dynamo-platform" in charts_of(pf)
    if efa:
        assert "aws-efa-k8s-device-plugin" in charts_of(pf)
        plugin = pv.CHARTS["aws-efa-k8s-device-plugin"]
        image = pv.reference_defaults(plugin.key)["image"]["repository"]
        docs.append({"kind": "DaemonSet", "metadata": {"name": plugin.release, "namespace": plugin.namespace},
                     "spec": {"template": {"spec": {"containers": [{"name": "plugin", "image": f"{image}:v0.5.20"}]}}}})
    return eks, docs


def test_the_seed_plan_runs_against_the_new_platforms_outputs_with_no_name_edited(nodegroups):
    """The control plane's configuration came from the platform's outputs (app.py), and the seed plan as
    shipped passes the deployment preflight (its node groups may be scaled, the Pod Identity Agent is there)
    and the cluster preflight (namespace, Dynamo CRD, token secret with its key, RWX claim, node groups)
    against exactly what the platform creates."""
    from benchctl.aws.preflight import deployment_preflight, preflight
    from benchctl.planning.plan import plan_campaign

    pf, env = nodegroups[PF], _env(nodegroups)
    outputs = {k: v["Value"] for k, v in pf["Outputs"].items() if isinstance(v["Value"], str)}
    (cluster,) = _props(pf, "AWS::EKS::Cluster")
    groups = {p["NodegroupName"] for p in _props(pf, "AWS::EKS::Nodegroup")}
    assert env.cluster == outputs["ClusterName"] == cluster["Name"]
    assert env.namespace == outputs["Namespace"] == SEED.kubernetes.namespace
    assert set(env.nodegroups) == set(outputs["Nodegroups"].split(",")) == groups - {"benchctl-cpu"}
    assert "benchctl-rehearsal" in env.nodegroups  # the rehearsal's: the functions may scale it
    # the run record's provenance of the platform's monitoring, in every function's environment
    from benchctl.campaign.provenance import dashboards_sha256

    assert json.loads(env.platform_json) == {"scrape_interval": pv.DEFAULT_SCRAPE_INTERVAL,
                                             "dashboards_sha256": dashboards_sha256(ROOT / "dashboards")}
    assert (outputs["HfTokenKubernetesSecret"], outputs["ModelClaim"]) == (SEED.kubernetes.hf_token_secret,
                                                                          SEED.kubernetes.model_pvc)
    # the control plane's access entries and load Job role name the platform's cluster and namespace
    assert {p["ClusterName"] for p in _props(nodegroups[CP], "AWS::EKS::AccessEntry")} == {cluster["Name"]}
    assert f'"aws:RequestTag/kubernetes-namespace": "{env.namespace}"' in json.dumps(nodegroups[CP])
    assert PF in json.loads((Path(nodegroups["_out"]["dir"]) / "manifest.json").read_text())["artifacts"][CP][
        "dependencies"]

    plan = plan_campaign(SEED, "aws")
    assert plan.experiments
    eks, docs = _platform_world(nodegroups)
    assert deployment_preflight(SEED, env.nodegroups, env.cluster, eks) == []
    assert preflight(SEED, cast(Any, _Kube(docs)), eks=eks, cluster_name=env.cluster) == []
    # rendered as the AWS engine renders it (with the control plane's load image): every namespace, claim,
    # secret and node group it names is the platform's, and every image is one the platform's admission
    # parameters admit
    from benchctl.aws.k8s.render import render_campaign
    from benchctl.aws.preflight import with_load_image

    rendered = [obj for _, obj in render_campaign(with_load_image(SEED, env.load_image), "seed-plan-20261201-101500")]
    assert rendered
    made = {(d["kind"], d["metadata"]["name"]) for d in docs}
    (params,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "benchctl-admission"]
    prefixes = params["data"]["imagePrefixes"].split()
    seen: dict[str, set[str]] = {"claimName": set(), "secretName": set(), "nodegroup": set(), "image": set()}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("claimName", "secretName", "image") and isinstance(v, str):
                    seen[k].add(v)
                if node.get("key") == "eks.amazonaws.com/nodegroup" and k == "values":
                    seen["nodegroup"].update(v)  # a node affinity's term
                if k == "eks.amazonaws.com/nodegroup" and isinstance(v, str):
                    seen["nodegroup"].add(v)  # a nodeSelector
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for obj in rendered:
        assert obj["metadata"].get("namespace", env.namespace) == env.namespace, obj["metadata"]
        walk(obj)
    assert seen["claimName"] == {outputs["ModelClaim"]} and ("PersistentVolumeClaim", outputs["ModelClaim"]) in made
    assert seen["secretName"] == {outputs["HfTokenKubernetesSecret"]} and ("Secret", outputs["HfTokenKubernetesSecret"]) in made
    assert seen["nodegroup"] and seen["nodegroup"] <= set(env.nodegroups)
    assert env.load_image in seen["image"]
    assert [i for i in seen["image"] if not any(i.startswith(p) for p in prefixes)] == []
    # held: the same preflight names what a platform without the claim would lack
    bare = cast(Any, _Kube([d for d in docs if d["kind"] != "PersistentVolumeClaim"]))
    assert any("model-cache" in p for p in preflight(SEED, bare, eks=eks, cluster_name=env.cluster))



def test_the_rehearsal_finds_its_cpu_node_group_on_the_new_platform_and_passes_plans_preflight(nodegroups):
    """The README's path on a new platform: deploy, doctor, then the rehearsal (examples/aws-rehearsal.yaml, as
    shipped) passes Plan's preflight (deployment and cluster) against the node groups the platform synthesizes:
    its CPU group exists with the standard AMI, no placement group, the root volume the Dynamo image needs,
    empty until the rehearsal scales it, and the functions may scale it."""
    from benchctl.aws.preflight import deployment_preflight, preflight
    from stacks.platform_nodes import REHEARSAL_ROOT_GIB, REHEARSAL_SPEC

    rehearsal = load_spec(ROOT / REHEARSAL_SPEC)
    (pool,) = rehearsal.pools
    groups = {p["NodegroupName"]: p for p in _props(nodegroups[PF], "AWS::EKS::Nodegroup")}
    group = groups[pool.nodegroup]
    assert group["InstanceTypes"] == [pool.instance_type] and group["AmiType"] == "AL2023_x86_64_STANDARD"
    assert group["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": pool.max_nodes}
    assert group["DiskSize"] == REHEARSAL_ROOT_GIB and "LaunchTemplate" not in group  # no placement group
    assert len(group["Subnets"]) == 2 and group["Labels"] == {"benchctl.io/pool": pool.name}
    env = _env(nodegroups)
    eks, docs = _platform_world(nodegroups)
    assert deployment_preflight(rehearsal, env.nodegroups, env.cluster, eks) == []
    assert preflight(rehearsal, cast(Any, _Kube(docs)), eks=eks, cluster_name=env.cluster) == []
    # held: a platform without the group (the state before this one) fails the same preflight naming it
    eks.nodegroups.discard(pool.nodegroup)
    gone = tuple(n for n in env.nodegroups if n != pool.nodegroup)
    assert deployment_preflight(rehearsal, gone, env.cluster, eks) == [
        f"pool {pool.name}: node group {pool.nodegroup!r} is not one this deployment may scale (CDK context "
        f"benchctl:nodegroups = {list(gone)}); add it there and deploy again, or use one of those"]
    assert preflight(rehearsal, cast(Any, _Kube(docs)), eks=eks, cluster_name=env.cluster) == [
        f"pool {pool.name}: node group {pool.nodegroup!r} not found in cluster {env.cluster!r}"]



def test_the_rehearsal_on_auto_mode_is_a_cpu_nodepool_the_platform_admits_and_plans_preflight_passes(auto_mode):
    """On an Auto Mode platform the rehearsal's CPU pool is a NodePool the campaign makes (examples/
    aws-rehearsal-auto-mode.yaml): Plan's preflight passes against what the platform and Auto Mode provide (the
    Karpenter CRD, the default NodeClass), and every object each function creates for it, the CPU NodePool
    included, is admitted by the platform's own admission policies and parameters, as that function."""
    from benchctl.aws.k8s.admission import FUNCTION_GROUPS
    from benchctl.aws.preflight import deployment_preflight, preflight, with_load_image
    from benchctl.aws.verbs import created_objects
    from tests.fakes.admission import Admission

    rehearsal = load_spec(ROOT / "examples" / "aws-rehearsal-auto-mode.yaml")
    (pool,) = rehearsal.pools
    assert (pool.provider, pool.gpus_per_node) == ("auto-mode", 0)
    env = _env(auto_mode)
    eks, docs = _platform_world(auto_mode, efa=False)
    docs += [{"kind": "CustomResourceDefinition", "metadata": {"name": "nodepools.karpenter.sh"}},  # Auto Mode's own
             {"kind": "NodeClass", "metadata": {"name": rehearsal.kubernetes.node_class}}]
    assert deployment_preflight(rehearsal, env.nodegroups, env.cluster, eks) == []
    assert preflight(rehearsal, cast(Any, _Kube(docs)), eks=eks, cluster_name=env.cluster) == []
    (params,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "benchctl-admission"]
    policies = [d for ds in applied(auto_mode).values() for d in ds
                if d["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")]
    # the runner grants as applied, with the campaign's grant Plan adds (stacks/kubernetes/benchctl-identities.yaml)
    (grants,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "benchctl-runner-grants"]
    cid = "aws-rehearsal-auto-mode-20261205-101010"
    admission = Admission(policies, [params, {**grants, "data": {cid: cid}}])
    spec = with_load_image(rehearsal, env.load_image)
    made: dict[str, int] = {}
    for fn in ("Plan", "Pools", "Serving", "Load"):
        for obj in created_objects(fn, spec, "aws-rehearsal-auto-mode-20261205-101010"):
            from benchctl.aws.k8s.client import resource

            r = resource(obj["apiVersion"], obj["kind"])
            refused = admission.admit(operation="CREATE", api_version=r.api_version, plural=r.plural,
                                      namespace=obj["metadata"].get("namespace", ""), groups=[FUNCTION_GROUPS[fn]],
                                      obj=obj, old=None)
            assert refused == [], (fn, obj["kind"], obj["metadata"]["name"], refused)
            made[obj["kind"]] = made.get(obj["kind"], 0) + 1
    assert made["NodePool"] == 1 and made["DaemonSet"] >= 1 and made["DynamoGraphDeployment"] == 2
    # held: the same admission refuses the CPU NodePool without its taint, or of a type the ceilings do not list
    (nodepool,) = [o for o in created_objects("Pools", spec, "aws-rehearsal-auto-mode-20261205-101010")
                   if o["kind"] == "NodePool"]
    for change, rule in ((lambda o: o["spec"]["template"]["spec"].pop("taints"), "[isolation]"),
                         (lambda o: o["spec"]["template"]["spec"]["requirements"][0].update(values=["m7i.48xlarge"]),
                          "[types]")):
        bad = json.loads(json.dumps(nodepool))
        change(bad)
        refused = [m.split("denied request: ", 1)[-1] for _, _, m in admission.admit(
            operation="CREATE", api_version="karpenter.sh/v1", plural="nodepools", namespace="",
            groups=[FUNCTION_GROUPS["Pools"]], obj=bad, old=None)]
        assert any(m.startswith(rule) for m in refused), (rule, refused)


# ------------------------------------------------------------------------------------------ bad context


@pytest.mark.parametrize(("change", "expected"), [
    ({"benchctl:platform": "yes"}, "CDK context 'benchctl:platform': 'yes' is not valid; valid: none (default"),
    ({"benchctl:platform": "new", "benchctl:platform_capacity": "karpenter"}, "'benchctl:platform_capacity': "
     "'karpenter' is not valid"),
    ({"benchctl:platform": "new", "benchctl:gpu_instance_types": {"gpu-p4d": "p4d.24xlarge"}},
     "no instance type for node group(s) ['gpu-g6e']"),
    ({"benchctl:platform": "new", "benchctl:gpu_instance_types": {"gpu-p4d": "p5.48xlarge", "gpu-g6e": "g6e.12xlarge"}},
     "['p5.48xlarge'] not in 'benchctl:ceilings' instance_types"),
    ({"benchctl:platform": "existing"}, "give 'benchctl:vpc_id', 'benchctl:subnet_ids'"),
    ({"benchctl:platform": "existing", **GIVEN_VPC, "benchctl:platform_skip": ["grafana"]},
     "'benchctl:platform_skip': ['grafana'] not a piece of the platform"),
    ({"benchctl:platform": "new", "benchctl:platform_skip": ["rbac"]}, "is for platform=existing only"),
    ({"benchctl:platform": "new", "benchctl:cpu_instance_type": "m7i.2xlarge"},
     "'benchctl:cpu_instance_type': 'm7i.2xlarge' is not valid"),
    ({"benchctl:platform": "new", "benchctl:namespace": "bench"}, "its kubernetes.namespace 'dynamo-bench' is not "
     "benchctl:namespace 'bench'"),
    ({"benchctl:platform": "new", "benchctl:nodegroups": ["gpu-p4d", "gpu-g6e", "benchctl-rehearsal"],
      "benchctl:gpu_instance_types": {"gpu-p4d": "p4d.24xlarge", "gpu-g6e": "g6e.12xlarge",
                                      "benchctl-rehearsal": "g6e.12xlarge"}},
     "'benchctl-rehearsal' is the rehearsal's CPU node group (examples/aws-rehearsal.yaml), which the platform makes "
     "itself"),
    ({"benchctl:platform": "new", "benchctl:nodegroups": ["gpu-g6e"]}, "pool p4d names node group 'gpu-p4d', not "
     "one of benchctl:nodegroups ['gpu-g6e']"),
    ({"benchctl:platform": "new", "benchctl:platform_spec": "../etc/spec.yaml"}, "'benchctl:platform_spec'"),
])
def test_bad_platform_context_fails_synth_naming_the_key(tmp_path, change, expected):
    res = synth(tmp_path, {**CONTEXT, **change})
    assert res.returncode == 2, res.stderr[-2000:]
    assert expected in res.stderr
    assert not list(tmp_path.glob("*.template.json"))
