"""``benchctl doctor`` proves every verb each function uses on the cluster, as that function's own identity,
before a campaign pays for a node: each function's self-test runs (through the doctor's Lambda invocation,
answered by the real handler) against the strict fake API server with our RBAC file and our admission
policies enforced, each function with its own token in its own group (as its access entry maps it). Every
verb of every Role taken out in turn, the admission parameters deleted, or the load image's registry left out
of them: each makes the doctor fail naming the function, the verb, the object and the fix."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from benchctl.aws.doctor import _function_checks
from benchctl.aws.k8s.admission import FUNCTION_GROUPS, admission_params, allow_list_from_ceilings
from benchctl.aws.selftest import KUBERNETES_FUNCTIONS
from benchctl.aws.verbs import FUNCTION_VERBS
from benchctl.planning import ceilings
from benchctl.spec.model import load_spec_text
from benchctl.spec.text import spec_data
from tests.fakes.admission import Admission
from tests.unit.test_doctor import CLUSTER, LOAD_IMAGE, RBAC, ROOT, account  # noqa: F401  (the fixture)

REHEARSAL = ROOT / "examples" / "aws-rehearsal.yaml"
POLICIES = [d for d in yaml.safe_load_all((ROOT / "stacks" / "kubernetes" / "benchctl-admission.yaml").read_text()) if d]
ALLOWED = admission_params(allow_list_from_ceilings(ceilings.default(), load_image_registry=LOAD_IMAGE.split("/")[0] + "/"))


@pytest.fixture
def cluster(account, monkeypatch):  # noqa: F811
    """The account's cluster with every function its own token and group, our admission enforced."""
    from benchctl.aws.k8s.client import KubeClient

    api = account["api"]
    for fn, group in FUNCTION_GROUPS.items():
        api.add_token(f"token-{fn}", {group, "system:authenticated"})

    def kube_for(name: str, session: Any = None, **_: Any) -> KubeClient:
        import os

        fn = os.environ["AWS_LAMBDA_FUNCTION_NAME"].removeprefix("benchctl-")  # the invoked function's identity
        return KubeClient(api.url, token=lambda: f"token-{fn}")

    monkeypatch.setattr("benchctl.aws.eks_token.kube_for_cluster", kube_for)
    api.enforce_admission(Admission(POLICIES, [copy.deepcopy(ALLOWED)]))
    return account


def _verbs(deployed: dict[str, Any], *functions: str, spec: Path = REHEARSAL) -> list[tuple[str, bool, str]]:
    data = spec_data(load_spec_text(spec), str(spec))
    arns = {fn: deployed["arns"][f"{fn}FunctionArn"] for fn in functions}
    return [(c.name, c.ok, c.detail) for c in _function_checks(deployed["session"], arns, data) if c.name.endswith(" verbs")]


def test_each_function_proves_its_verbs_as_its_own_identity_and_nothing_is_stored(cluster):
    api = cluster["api"]
    lines = _verbs(cluster, *KUBERNETES_FUNCTIONS)
    assert [(name, d) for name, ok, d in lines if not ok] == []
    assert {name for name, _, _ in lines} == {f"{fn} verbs" for fn in KUBERNETES_FUNCTIONS}
    # the creates went through RBAC and admission as dry runs: every kind a function creates for the rehearsal
    kinds = {kind for kind, _, _ in api.dry_runs}
    assert kinds == {"ServiceAccount", "Job", "DaemonSet", "DynamoGraphDeployment"}
    assert api.admitted >= len(api.dry_runs) > 10
    assert api.all_stored("Job") == [] and api.all_stored("ServiceAccount") == []  # nothing persisted
    # the rest as access reviews in each function's own group (the NodePool create too: the rehearsal renders none)
    asked = {(groups, verb, resource) for groups, verb, _, resource, _, _, _ in api.reviews}
    assert (("benchctl-pools", "system:authenticated"), "create", "nodepools") in asked
    assert (("benchctl-sweep", "system:authenticated"), "list", "serviceaccounts") in asked


def _rules(manifests: list[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """(document, rule, verb) of every verb of every rule of every Role and ClusterRole."""
    return [(i, j, verb) for i, d in enumerate(manifests) if d["kind"] in ("Role", "ClusterRole")
            for j, rule in enumerate(d["rules"]) for verb in rule["verbs"]]


def _bound(doc: dict[str, Any]) -> list[str]:
    """The functions whose groups a Role's binding names."""
    groups = {s["name"] for b in RBAC if b["kind"] in ("RoleBinding", "ClusterRoleBinding")
              and b["roleRef"]["name"] == doc["metadata"]["name"] for s in b["subjects"]}
    return [fn for fn, g in FUNCTION_GROUPS.items() if g in groups]


def test_the_verb_table_is_what_the_rbac_file_grants_each_function():
    """The doctor asks for what the code uses (FUNCTION_VERBS), the file grants it: the two are equal, so a verb
    taken out of the file is one the doctor still asks for (and a new one the code needs is added to both)."""
    granted: dict[str, set[tuple[str, str, str, str, str]]] = {fn: set() for fn in FUNCTION_GROUPS}
    for doc in RBAC:
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        ns = doc["metadata"].get("namespace", "")
        scope = "cluster" if not ns else ("kube-system" if ns == "kube-system" else "namespace")
        for rule in doc["rules"]:
            for fn in _bound(doc):
                for group in rule["apiGroups"]:
                    for res in rule["resources"]:
                        for verb in rule["verbs"]:
                            for name in rule.get("resourceNames") or [""]:
                                granted[fn].add((verb, group, res, scope, name))
    names = {"<namespace>": "dynamo-bench", "<secret>": "hf-token", "<claim>": "model-cache"}
    wanted = {fn: {(v.verb, v.group, v.resource, v.scope, names.get(v.name, v.name)) for v in verbs}
              for fn, verbs in FUNCTION_VERBS.items()}
    assert wanted == granted


def test_any_single_verb_taken_out_of_a_role_fails_the_doctor_naming_function_verb_and_fix(cluster):
    """Every verb of every rule of every Role in turn (70 of them), the check each bound function's self-test
    runs (benchctl.aws.verbs.check_verbs, as in the Lambda: its own token, RBAC and admission enforced)."""
    from benchctl.aws.k8s.client import KubeClient
    from benchctl.aws.preflight import with_load_image
    from benchctl.aws.verbs import check_verbs
    from benchctl.spec.model import load_spec

    api, spec = cluster["api"], with_load_image(load_spec(REHEARSAL), LOAD_IMAGE)  # as the Lambda completes it
    eks = boto3.client("eks")
    cases = _rules(RBAC)
    assert len(cases) >= 60
    for doc, rule, verb in cases:
        manifests = copy.deepcopy(RBAC)
        role = manifests[doc]
        role["rules"][rule]["verbs"].remove(verb)
        api.enforce_rbac(manifests)
        resource = role["rules"][rule]["resources"][0]
        failed = []
        for fn in _bound(role):
            kube = KubeClient(api.url, token=lambda fn=fn: f"token-{fn}")
            problems, _ = check_verbs(fn, spec, kube, "doctor-verbs-20261205-101010", eks=eks, cluster=CLUSTER,
                                      nodegroups=("gpu-ng", "benchctl-rehearsal"))
            failed += [(fn, p) for p in problems]
        assert failed, f"{role['metadata']['name']} without {verb} {resource}: the doctor passed"
        for fn, detail in failed:
            assert detail.startswith(f"{fn}: ") and verb in detail and resource.split("/")[0] in detail, detail
            assert role["metadata"]["name"] in detail and "fix: give" in detail, detail
    api.enforce_rbac(RBAC)
    assert [p for fn in KUBERNETES_FUNCTIONS for p in check_verbs(
        fn, spec, KubeClient(api.url, token=lambda fn=fn: f"token-{fn}"), "doctor-verbs-20261205-101010", eks=eks,
        cluster=CLUSTER, nodegroups=("gpu-ng", "benchctl-rehearsal"))[0]] == []


def test_the_admission_parameters_deleted_fail_every_create_naming_the_configmap(cluster):
    cluster["api"].admission.params.clear()
    failed = [(name, detail) for name, ok, detail in _verbs(cluster, *KUBERNETES_FUNCTIONS) if not ok]
    assert {name for name, _ in failed} == {"Plan verbs", "Pools verbs", "Serving verbs", "Load verbs"}
    assert all("no params found" in d and "ConfigMap benchctl-admission is missing" in d for _, d in failed)


def test_an_image_prefix_left_out_of_the_admission_parameters_fails_naming_the_image(cluster):
    params = copy.deepcopy(ALLOWED)
    registry = LOAD_IMAGE.split("/")[0] + "/"
    params["data"]["imagePrefixes"] = " ".join(p for p in params["data"]["imagePrefixes"].split() if p != registry)
    cluster["api"].admission.params = {(params["metadata"]["namespace"], params["metadata"]["name"]): params}
    failed = [(name, detail) for name, ok, detail in _verbs(cluster, *KUBERNETES_FUNCTIONS) if not ok]
    assert {name for name, _ in failed} == {"Plan verbs", "Serving verbs", "Load verbs"}  # its Jobs: checks, smoke, runners
    assert all(LOAD_IMAGE in d and "image_repositories" in d for _, d in failed), failed


def test_a_node_group_the_deployment_scales_but_cannot_read_fails_pools_and_teardown_naming_it(cluster):
    boto3.client("eks").delete_nodegroup(clusterName=CLUSTER, nodegroupName="gpu-ng")
    failed = [(name, detail) for name, ok, detail in _verbs(cluster, *KUBERNETES_FUNCTIONS) if not ok]
    assert all("benchctl-rehearsal" not in d for _, d in failed)  # the other group is still read
    assert {name for name, _ in failed} == {"Pools verbs", "Teardown verbs"}
    assert all(f"eks:DescribeNodegroup {CLUSTER}/gpu-ng" in d and "benchctl:nodegroups" in d for _, d in failed)


def test_the_doctor_says_which_node_group_the_rehearsal_runs_on_and_whether_this_deployment_may_scale_it(cluster):
    from benchctl.aws.doctor import nodegroup_checks

    env = {"BENCHCTL_CLUSTER": CLUSTER, "BENCHCTL_NODEGROUPS": "gpu-ng"}
    (line,) = nodegroup_checks(cluster["session"], REHEARSAL, env)
    assert not line.ok and line.name == "node group of pool cpu-rehearsal"
    assert "'benchctl-rehearsal' is not one this deployment may scale" in line.detail
    (line,) = nodegroup_checks(cluster["session"], REHEARSAL, {**env, "BENCHCTL_NODEGROUPS": "gpu-ng,benchctl-rehearsal"})
    assert line.ok and line.detail.startswith("benchctl-rehearsal: m7i.2xlarge (")
    assert line.detail.endswith("0 of at most 2 nodes now; this deployment may scale it")
    boto3.client("eks").delete_nodegroup(clusterName=CLUSTER, nodegroupName="benchctl-rehearsal")
    (line,) = nodegroup_checks(cluster["session"], REHEARSAL, {**env, "BENCHCTL_NODEGROUPS": "gpu-ng,benchctl-rehearsal"})
    assert not line.ok and "ResourceNotFoundException" in line.detail
