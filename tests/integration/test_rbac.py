"""stacks/kubernetes/benchctl-rbac.yaml is least privilege: every rule is used by the code, and nothing the
code does is denied.

The fake API server enforces the file as the RBAC authorizer would (tests/fakes/k8s_api.py). Every example
campaign runs through the AWS code path under it (``aws_worlds``: preflight with its image Jobs, pools on
node groups and on Auto Mode, deploy, readiness and image digests, smoke test, warm-up, every step, a
failed step's log tails, teardown, restore); the few paths no example reaches run here too (a NodePool
replaced for a bigger experiment, the sweeper). Then each (rule, verb, resource, resource name) the file
grants must have allowed at least one request, and none may have been denied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.aws.k8s.client import RESOURCES, ApiError, KubeClient
from benchctl.aws.k8s.common import LABEL_CAMPAIGN
from benchctl.aws.pools import pools_for
from benchctl.aws.sweep import campaign_ids, labelled
from benchctl.spec import parse_spec
from tests.aws_checks import RBAC_FILE, upstream_api
from tests.fakes.eks_world import CID, NS, TOKEN, World
from tests.fakes.k8s_api import FakeKubeApi

DOCS = list(yaml.safe_load_all(RBAC_FILE.read_text()))
NAMESPACED = {r.plural for r in RESOURCES.values() if r.namespaced} | {"pods/log"}


def _rules() -> list[tuple[tuple[str, str], int, dict[str, Any]]]:
    out = []
    for doc in DOCS:
        if doc["kind"] in ("Role", "ClusterRole"):
            key = (doc["metadata"].get("namespace", "") if doc["kind"] == "Role" else "", doc["metadata"]["name"])
            out += [(key, i, rule) for i, rule in enumerate(doc["rules"])]
    return out


def _kube(api: FakeKubeApi) -> KubeClient:
    return KubeClient(api.url, token=lambda: TOKEN)


def _replace_then_restore_a_nodepool() -> FakeKubeApi:
    """Auto Mode: a later experiment needs more nodes than the NodePool handed over (PUT), then restore."""
    spec = parse_spec({
        "name": "grow", "model": {"name": "Qwen/Qwen3-30B-A3B", "revision": "ad44e777bcd18fa416d9da3bd8f70d33ebb85d39"},
        "pools": [{"name": "p4d", "instance_type": "p4d.24xlarge", "gpus_per_node": 8, "gpu_kind": "A100-40GB",
                   "max_nodes": 2, "provider": "auto-mode"}],
        "experiments": [
            {"name": "agg", "mode": "aggregated", "workers": [{"role": "worker", "pool": "p4d", "replicas": 2,
                                                                "tensor_parallel": 4}]},
            {"name": "disagg", "mode": "disaggregated", "workers": [
                {"role": "prefill", "pool": "p4d", "replicas": 1, "tensor_parallel": 8},
                {"role": "decode", "pool": "p4d", "replicas": 1, "tensor_parallel": 8}]}],
        "workloads": [{"kind": "concurrency_sweep", "concurrency": [1], "isl": 16, "osl": 16, "request_count": 4}],
    })
    with upstream_api() as api:
        pools = pools_for(spec, CID, cluster_name="bench", kube=_kube(api))
        pools.scale("p4d", 1, owner=f"{CID}/agg")
        rec = pools.scale("p4d", 2, owner=f"{CID}/disagg")
        pools.restore(rec)
    assert [m for m, _, _ in api.bodies] == ["POST", "POST", "PUT"]
    return api


def _sweeper_finds_and_deletes_by_our_label() -> FakeKubeApi:
    with upstream_api() as api:
        lbl = {"metadata": {"labels": {LABEL_CAMPAIGN: CID}}}
        api.put({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                 "metadata": {"name": "d", "namespace": NS, **lbl["metadata"]}, "spec": {}})
        api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS, **lbl["metadata"]},
                 "spec": {}})
        api.put({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "n", **lbl["metadata"]},
                 "spec": {}})
        api.put({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "p", "namespace": NS,
                                                                            **lbl["metadata"]}, "spec": {}})
        api.put({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CID, "namespace": NS,
                                                                           **lbl["metadata"]}})
        kube = _kube(api)
        # what aws_sweep does: the candidates' ids from the lists, then each campaign's objects deleted
        assert campaign_ids(kube, NS) == {CID}
        found = labelled(kube, NS, CID, deleting=False)
        assert {kind for _, kind, _, _ in found} == {"DynamoGraphDeployment", "Job", "NodePool", "DaemonSet",
                                                     "ServiceAccount"}
        for api_version, kind, name, ns in found:
            kube.delete(api_version, kind, name, ns)
    return api


def _a_campaigns_runner_identity_made_again_and_removed() -> FakeKubeApi:
    """Plan's preflight makes the campaign's runner service account (and, again on a retried Plan, finds it);
    the end of the campaign removes it (benchctl.aws.runner_identity; EKS as tests/fakes/pod_identity.py)."""
    import boto3
    from moto import mock_aws

    from benchctl.aws.runner_identity import RunnerIdentity
    from tests.fakes import pod_identity

    with mock_aws(), upstream_api() as api:
        session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1")
        pod_identity.install(session, "bench")
        ident = RunnerIdentity(lambda: _kube(api), lambda: session.client("eks"), cluster="bench", namespace=NS,
                               role_arn="arn:aws:iam::123456789012:role/load-job", campaign_id=CID)
        ident.ensure()
        ident.ensure()
        assert ident.release()[-1] == f"ServiceAccount/{CID}"
    return api


@pytest.fixture(scope="module")
def apis(aws_worlds: dict[str, World]) -> list[FakeKubeApi]:
    return [w.api for w in aws_worlds.values()] + [_replace_then_restore_a_nodepool(),
                                                   _sweeper_finds_and_deletes_by_our_label(),
                                                   _a_campaigns_runner_identity_made_again_and_removed()]


def test_nothing_the_code_does_is_denied(apis: list[FakeKubeApi]) -> None:
    assert [d for api in apis for d in api.denied] == []
    assert sum(len(api.authorized) for api in apis) > 1000


def test_every_rule_is_used_by_the_code_and_nothing_else_is_granted(apis: list[FakeKubeApi]) -> None:
    used = {(key, i, verb, resource, name) for api in apis for key, i, verb, resource, name in api.authorized}
    unused = []
    for key, i, rule in _rules():
        for verb in rule["verbs"]:
            for resource in rule["resources"]:
                names = rule.get("resourceNames") or [None]
                for name in names:
                    if not any(u[:4] == (key, i, verb, resource) and (name is None or u[4] == name) for u in used):
                        unused.append(f"{key[1]} rule {i}: {verb} {resource}" + (f" [{name}]" if name else ""))
    assert unused == [], "granted but never used by the code: remove from stacks/kubernetes/benchctl-rbac.yaml"


def test_namespaced_objects_only_through_the_role_and_cluster_rights_only_for_nodes_nodepools_and_crds() -> None:
    roles = {d["kind"]: d for d in DOCS if d["kind"] in ("Role", "ClusterRole")}
    assert set(roles) == {"Role", "ClusterRole"}
    assert roles["Role"]["metadata"]["namespace"] == NS
    for rule in roles["Role"]["rules"]:
        for resource in rule["resources"]:
            if resource == "namespaces":  # the namespace's own object, and only ours
                assert rule["resourceNames"] == [NS] and rule["verbs"] == ["get"]
            else:
                assert resource in NAMESPACED, resource
    cluster = {r for rule in roles["ClusterRole"]["rules"] for r in rule["resources"]}
    assert cluster == {"nodes", "nodepools", "customresourcedefinitions", "nodeclasses", "daemonsets"}
    for rule in roles["ClusterRole"]["rules"]:
        if rule["resources"] == ["daemonsets"]:  # the EFA device plugin's presence: read, never changed
            assert rule["verbs"] == ["list"] and rule["apiGroups"] == ["apps"]
        if rule["resources"] in (["customresourcedefinitions"], ["nodeclasses"]):
            assert rule["verbs"] == ["get"] and rule["resourceNames"]  # reads of named objects only
    # secrets: get of the one token secret, in the namespace, nowhere else
    secret_rules = [(d["kind"], rule) for d in roles.values() for rule in d["rules"] if "secrets" in rule["resources"]]
    assert secret_rules == [("Role", {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["hf-token"],
                                      "verbs": ["get"]})]
    assert not any("*" in v for d in roles.values() for rule in d["rules"] for v in rule.values())
    bindings = [d for d in DOCS if d["kind"].endswith("Binding")]
    assert {(b["kind"], b["roleRef"]["kind"]) for b in bindings} == {("RoleBinding", "Role"),
                                                                     ("ClusterRoleBinding", "ClusterRole")}
    assert all(b["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "benchctl"}]
               for b in bindings)


@pytest.mark.parametrize(("call", "what"), [
    (lambda k: k.get("v1", "Secret", "aws-creds", "kube-system"), "secrets"),
    (lambda k: k.get("v1", "Secret", "other", NS), "secrets"),
    (lambda k: k.list("v1", "Secret", NS), "secrets"),
    (lambda k: k.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x", "namespace": "kube-system"},
                         "spec": {}}), "jobs"),
    (lambda k: k.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": NS}}), "pods"),
    (lambda k: k.list("v1", "Pod", "kube-system"), "pods"),
    (lambda k: k.get("v1", "Namespace", "kube-system"), "namespaces"),
    (lambda k: k.delete("v1", "Node", "n1"), "nodes"),
])
def test_what_a_leaked_function_role_cannot_do(call: Any, what: str) -> None:
    with upstream_api() as api, pytest.raises(ApiError) as err:
        call(_kube(api))
    assert err.value.status == 403 and what in str(err.value)


def test_the_readme_points_at_the_rbac_file_and_its_group() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "stacks/kubernetes/benchctl-rbac.yaml" in readme and "--kubernetes-groups benchctl" in readme
