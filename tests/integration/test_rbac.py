"""stacks/kubernetes/benchctl-rbac.yaml is least privilege per function: every rule is used by the function
whose group it is bound to, and nothing a function does is denied.

The fake API server enforces the file as the RBAC authorizer would (tests/fakes/k8s_api.py), each request
as the calling function's group (one token per function, ``eks_world.FUNCTION_TOKENS``, as each function's
role has its own access entry), and admits every write through the admission policies. Every example
campaign runs through the AWS code path under it (``aws_worlds``: preflight with its image Jobs, pools on
node groups and on Auto Mode, deploy, readiness and image digests, smoke test, warm-up, every step, a
failed step's log tails, teardown, restore), each state as its function; the few paths no example reaches
run here too (a NodePool replaced for a bigger experiment, a running load stopped by its function, by
teardown and by the sweeper, a failed image check, the sweeper). Then each (rule, verb, resource, resource
name) the file grants must have allowed at least one request, and none may have been denied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl import campaign
from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.aws.k8s.client import RESOURCES, ApiError, KubeClient
from benchctl.aws.k8s.common import LABEL_CAMPAIGN, RUNNER_GRANTS
from benchctl.aws.pools import pools_for
from benchctl.aws.sweep import campaign_ids, labelled
from benchctl.campaign import Task
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import parse_spec
from tests.aws_checks import RBAC_FILE, upstream_api
from tests.fakes import eks_world
from tests.fakes.eks_world import CID, FUNCTION_TOKENS, NS, World
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


def _kube(api: FakeKubeApi, function: str) -> KubeClient:
    return KubeClient(api.url, token=lambda: FUNCTION_TOKENS[function])


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
        pools = pools_for(spec, CID, cluster_name="bench", kube=_kube(api, "Pools"))
        pools.scale("p4d", 1, owner=f"{CID}/agg")
        rec = pools.scale("p4d", 2, owner=f"{CID}/disagg")
        pools_for(spec, CID, cluster_name="bench", kube=_kube(api, "Teardown")).restore(rec)
    assert [m for m, _, _ in api.bodies] == ["POST", "POST", "PUT"]
    return api


def _sweeper_finds_and_deletes_by_our_label() -> FakeKubeApi:
    with upstream_api() as api:
        lbl = {"metadata": {"labels": {LABEL_CAMPAIGN: CID}}}
        api.put({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                 "metadata": {"name": "d", "namespace": NS, **lbl["metadata"]}, "spec": {}})
        api.put({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS, **lbl["metadata"]},
                 "spec": {}})
        api.put({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "n", "labels": {
            **lbl["metadata"]["labels"], "app.kubernetes.io/managed-by": "benchctl"}}, "spec": {}})
        api.put({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "p", "namespace": NS,
                                                                            **lbl["metadata"]}, "spec": {}})
        api.put({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CID, "namespace": NS,
                                                                           **lbl["metadata"]}})
        kube = _kube(api, "Sweep")
        # what aws_sweep does: the candidates' ids from the lists, then each campaign's objects deleted
        assert campaign_ids(kube, NS) == {CID}
        found = labelled(kube, NS, CID, deleting=False)
        assert {kind for _, kind, _, _ in found} == {"DynamoGraphDeployment", "Job", "NodePool", "DaemonSet",
                                                     "ServiceAccount"}
        for api_version, kind, name, ns in found:
            kube.delete(api_version, kind, name, ns)
    return api


def _a_running_load_stopped_by(function: str, tmp: Path, example: str) -> FakeKubeApi:
    """One experiment up to a running load step, each state as its function; then ``function`` stops it:
    Load (StopLoadAfterFailure), Teardown (TeardownExperiment) or Sweep (the sweeper's teardown): the
    step's log tails read before its Job is deleted; the experiment torn down, its pools restored."""
    spec = eks_world.example_specs()[example]
    exp = plan_campaign(spec, "aws").experiments[0]
    e, step = Task(exp.name), exp.steps[0].step_id
    with upstream_api() as api, eks_world.moto_eks(spec) as session:
        eks_world.cluster_prerequisites(api, spec)
        eks_world.dynamo_operator(api)
        eks_world.job_controller(api, fail_steps=(step,))  # its runner pod logs why the step failed
        eks_world.daemonset_controller(api)
        eks_world.karpenter(api)
        eks_world.gpu_nodes(api, spec)
        caller = eks_world.Caller()
        p, ctx, _ = eks_world.providers(spec, caller.client(api), tmp, session)
        campaign.plan(p, ctx, Task(state="Plan"))
        caller.function = "Pools"
        campaign.scale_pools(p, ctx, e)
        assert campaign.check_capacity(p, ctx, e)["done"]
        caller.function = "Serving"
        campaign.deploy(p, ctx, e)
        campaign.check_ready(p, ctx, e)
        caller.function = "Load"
        campaign.launch_step(p, ctx, Task(exp.name, step))
        caller.function = function
        if function == "Load":
            campaign.stop_load_after_failure(p, ctx, Task(exp.name, step, error={"Error": "X", "Cause": "y"}))
        else:
            for _ in range(20):
                if campaign.teardown_experiment(p, ctx, e, wait_gone=True)["done"]:
                    break
            if function == "Sweep":  # then the campaign's runner identity, its grant first (campaign.sweep)
                assert (api.stored("ConfigMap", RUNNER_GRANTS, NS) or {}).get("data") == {CID: CID}
                campaign.release_identity(p, ctx)
                assert (api.stored("ConfigMap", RUNNER_GRANTS, NS) or {}).get("data") == {}
        rec = p.state.load(exp.name, step)
        assert rec is not None and rec.stopped and rec.logs is not None
    return api


def _a_failed_image_check() -> FakeKubeApi:
    """Plan's preflight: an image check Job fails; its pod and log tail name why."""
    spec = eks_world.example_specs()["smoke[managed-nodegroup]"]
    with upstream_api() as api, eks_world.moto_eks(spec) as session:
        eks_world.cluster_prerequisites(api, spec)
        eks_world.job_controller(api, fail_steps=("preflight-aiperf",))
        eks_world.gpu_nodes(api, spec)
        problems = eks_world._Preflight(eks_world.Caller("Plan").client(api), session).check(spec)
    assert any("image check 'aiperf' failed" in x for x in problems), problems
    return api


def _every_functions_self_test_reads_the_namespace(monkeypatch: pytest.MonkeyPatch) -> FakeKubeApi:
    """``benchctl doctor``'s eks check, as each function runs it with its own identity."""
    from benchctl.aws import selftest
    from benchctl.aws.env import LambdaEnv

    with upstream_api() as api:
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        for function in FUNCTION_GROUPS:
            monkeypatch.setattr("benchctl.aws.eks_token.kube_for_cluster",
                                lambda name, session=None, fn=function, **_: _kube(api, fn))
            assert NS in selftest._eks(LambdaEnv(runs_uri="s3://b/runs", lake_uri="s3://b/lake", cluster="bench",
                                                namespace=NS), function, None)
    return api


def _a_campaigns_runner_identity_made_again_and_removed(maker: str = "Plan", remover: str = "Teardown",
                                                       cid: str = CID) -> FakeKubeApi:
    """Plan's preflight makes the campaign's runner service account and its grant (and, again on a retried Plan,
    finds them); the end of the campaign removes them (benchctl.aws.runner_identity; EKS as
    tests/fakes/pod_identity.py). ``maker="Load", remover="Load"``: the doctor's runner Job check, which makes and
    removes its own (a ``doctor-…`` campaign id: the only grant the Load function may change)."""
    import boto3
    from moto import mock_aws

    from benchctl.aws.runner_identity import RunnerIdentity
    from tests.fakes import pod_identity

    with mock_aws(), upstream_api() as api:
        session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1")
        pod_identity.install(session, "bench")
        caller = [maker]
        ident = RunnerIdentity(lambda: _kube(api, caller[0]), lambda: session.client("eks"), cluster="bench",
                               namespace=NS, role_arn="arn:aws:iam::123456789012:role/load-job", campaign_id=cid)
        ident.ensure()
        ident.ensure()
        assert (api.stored("ConfigMap", RUNNER_GRANTS, NS) or {}).get("data") == {cid: cid}
        caller[0] = remover  # the end of the campaign (AbortCampaign, a failed Plan's cleanup), or the doctor
        assert ident.release()[-2:] == [f"grant of campaign {cid} in ConfigMap {NS}/{RUNNER_GRANTS}",
                                        f"ServiceAccount/{cid}"]
    return api


@pytest.fixture(scope="module")
def apis(aws_worlds: dict[str, World], tmp_path_factory: pytest.TempPathFactory) -> list[FakeKubeApi]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        self_tests = _every_functions_self_test_reads_the_namespace(monkeypatch)
    return [w.api for w in aws_worlds.values()] + [self_tests,
        _replace_then_restore_a_nodepool(), _sweeper_finds_and_deletes_by_our_label(), _a_failed_image_check(),
        _a_campaigns_runner_identity_made_again_and_removed(),
        _a_campaigns_runner_identity_made_again_and_removed("Load", "Load", "doctor-20261201-000000"),
        *(_a_running_load_stopped_by(fn, tmp_path_factory.mktemp(fn), example) for fn, example in (
            ("Load", "smoke[managed-nodegroup]"), ("Teardown", "smoke[managed-nodegroup]"),
            ("Sweep", "smoke[auto-mode]")))]  # the sweeper restores an Auto Mode pool too: our NodePool goes


def test_nothing_the_code_does_is_denied_or_refused_by_admission(apis: list[FakeKubeApi]) -> None:
    assert [d for api in apis for d in api.denied] == []
    assert [r for api in apis for r in api.refused] == []
    assert all(api.admission is not None for api in apis)  # every write went through the policies
    assert sum(api.admitted for api in apis) > 500
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


def test_each_function_has_its_own_group_and_cluster_rights_only_for_nodes_nodepools_nodeclaims_crds_and_nodeclasses() -> None:
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in DOCS
             if d["kind"] in ("Role", "ClusterRole")}
    bindings = [d for d in DOCS if d["kind"].endswith("Binding")]
    # every binding names its own role; each function's roles are bound to its group alone, except the
    # kube-system read (Plan's EFA plugin check, Serving's network check)
    for b in bindings:
        assert b["roleRef"]["name"] == b["metadata"]["name"]
        groups = [sub["name"] for sub in b["subjects"]]
        assert all(sub["kind"] == "Group" for sub in b["subjects"])
        if b["metadata"]["name"] == "benchctl-kube-system-daemonsets":
            assert b["metadata"]["namespace"] == "kube-system" and groups == ["benchctl-plan", "benchctl-serving"]
        else:
            assert groups == [b["metadata"]["name"]] and groups[0] in FUNCTION_GROUPS.values()
    assert {g for b in bindings for sub in b["subjects"] for g in [sub["name"]]} == set(FUNCTION_GROUPS.values())
    for (kind, ns, name), role in roles.items():
        for rule in role["rules"]:
            assert not any("*" in v for v in rule.values())
            for resource in rule["resources"]:
                if kind == "ClusterRole":
                    assert resource in {"nodes", "nodepools", "customresourcedefinitions", "nodeclasses",
                                        "nodeclaims"}, (name, resource)
                    if resource == "nodeclaims":  # read only, by the function that waits for capacity
                        assert (name, rule["verbs"]) == ("benchctl-pools", ["list"]), (name, rule)
                elif ns == "kube-system":  # the one read outside our namespace: DaemonSets listed, never changed
                    assert (resource, rule["verbs"], rule["apiGroups"]) == ("daemonsets", ["list"], ["apps"])
                elif resource == "namespaces":  # the namespace's own object, and only ours
                    assert ns == NS and rule["resourceNames"] == [NS] and rule["verbs"] == ["get"]
                else:
                    assert ns == NS and resource in NAMESPACED, (name, resource)
            if rule["resources"] in (["customresourcedefinitions"], ["nodeclasses"]):
                assert rule["verbs"] == ["get"] and rule["resourceNames"]  # reads of named objects only
    # secrets: get of the one token secret, by Plan (the preflight), nowhere else
    secret_rules = [(name, rule) for (_, _, name), d in roles.items() for rule in d["rules"]
                    if "secrets" in rule["resources"]]
    assert secret_rules == [("benchctl-plan", {"apiGroups": [""], "resources": ["secrets"],
                                               "resourceNames": ["hf-token"], "verbs": ["get"]})]
    # NodePools: only Pools creates or replaces, only Teardown and the sweeper delete
    verbs = {name: {v for rule in d["rules"] if "nodepools" in rule["resources"] for v in rule["verbs"]}
             for (_, _, name), d in roles.items()}
    assert {n: v for n, v in verbs.items() if v} == {"benchctl-pools": {"create", "get", "update"},
                                                     "benchctl-teardown": {"get", "delete"},
                                                     "benchctl-sweep": {"get", "list", "delete"}}


@pytest.mark.parametrize(("function", "call", "what"), [
    ("Plan", lambda k: k.get("v1", "Secret", "aws-creds", "kube-system"), "secrets"),
    ("Plan", lambda k: k.get("v1", "Secret", "other", NS), "secrets"),
    ("Plan", lambda k: k.list("v1", "Secret", NS), "secrets"),
    ("Load", lambda k: k.get("v1", "Secret", "hf-token", NS), "secrets"),
    ("Load", lambda k: k.create({"apiVersion": "batch/v1", "kind": "Job",
                                 "metadata": {"name": "x", "namespace": "kube-system"}, "spec": {}}), "jobs"),
    ("Serving", lambda k: k.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": NS}}),
     "pods"),
    ("Teardown", lambda k: k.list("v1", "Pod", "kube-system"), "pods"),
    ("Plan", lambda k: k.get("v1", "Namespace", "kube-system"), "namespaces"),
    ("Sweep", lambda k: k.delete("v1", "Node", "n1"), "nodes"),
    ("Load", lambda k: k.create({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                                 "metadata": {"name": "x", "namespace": NS}, "spec": {}}), "dynamographdeployments"),
    ("Serving", lambda k: k.delete("karpenter.sh/v1", "NodePool", "general-purpose"), "nodepools"),
    ("Pools", lambda k: k.delete("karpenter.sh/v1", "NodePool", "general-purpose"), "nodepools"),
    ("Teardown", lambda k: k.create({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "x"},
                                     "spec": {}}), "nodepools"),
    ("Load", lambda k: k.create({"apiVersion": "apps/v1", "kind": "DaemonSet",
                                 "metadata": {"name": "x", "namespace": NS}, "spec": {}}), "daemonsets"),
    ("Pools", lambda k: k.create({"apiVersion": "apps/v1", "kind": "DaemonSet",
                                  "metadata": {"name": "x", "namespace": "kube-system"}, "spec": {}}), "daemonsets"),
    ("Teardown", lambda k: k.list("apps/v1", "DaemonSet", "kube-system"), "daemonsets"),
    ("Plan", lambda k: k.list("apps/v1", "DaemonSet", None), "daemonsets"),  # no cluster-wide list any more
])
def test_what_a_leaked_function_role_cannot_do(function: str, call: Any, what: str) -> None:
    with upstream_api() as api, pytest.raises(ApiError) as err:
        call(_kube(api, function))
    assert err.value.status == 403 and what in str(err.value)
    assert FUNCTION_GROUPS[function] in str(err.value)


def test_the_cluster_guide_points_at_the_rbac_and_admission_files_and_the_groups() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "howto" / "aws-existing-cluster.md").read_text()
    assert "stacks/kubernetes/benchctl-rbac.yaml" in guide and "stacks/kubernetes/benchctl-admission.yaml" in guide
    for function, group in FUNCTION_GROUPS.items():
        assert f"`{function}`: `{group}`" in guide  # how to create each access entry by hand
