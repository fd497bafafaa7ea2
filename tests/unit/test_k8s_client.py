"""KubeClient against FakeKubeApi (HTTP on 127.0.0.1), the EKS token under moto, TokenProvider refresh."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from benchctl.aws.eks_token import REFRESH_BEFORE_S, TokenProvider, cluster_endpoint, eks_token
from benchctl.aws.k8s.client import ApiError, Conflict, KubeClient, NotFound
from tests.fakes.k8s_api import FakeKubeApi

NS = "dynamo-bench"


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi(token="secret-token") as fake:
        yield fake


@pytest.fixture
def kube(api: FakeKubeApi) -> KubeClient:
    return KubeClient(api.url, token=lambda: "secret-token", timeout=5)


def pod(name: str, labels: dict[str, str] | None = None, ns: str = NS) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def dgd(name: str) -> dict:
    return {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"components": [{"name": "frontend", "type": "frontend", "replicas": 1}]}}


def nodepool(name: str) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"limits": {"nvidia.com/gpu": "8"}}}


def test_create_get_list_delete_roundtrip(api: FakeKubeApi, kube: KubeClient) -> None:
    created = kube.create(pod("a", {"app": "x", "role": "worker"}))
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    kube.create(pod("b", {"app": "x", "role": "frontend"}))
    kube.create(pod("c", {"app": "y"}))
    kube.create(pod("d", {"app": "x"}, ns="other"))
    assert kube.get("v1", "Pod", "a", NS)["metadata"]["labels"] == {"app": "x", "role": "worker"}

    def names(sel: str | dict[str, str] | None, ns: str | None = NS) -> list[str]:
        return [p["metadata"]["name"] for p in kube.list("v1", "Pod", ns, label_selector=sel)]

    assert names(None) == ["a", "b", "c"]
    assert names("app=x") == ["a", "b"]
    assert names({"app": "x", "role": "frontend"}) == ["b"]
    assert names("role") == ["a", "b"]
    assert names("!role") == ["c"]
    assert names("app!=x") == ["c"]
    assert names("app=x", ns=None) == ["a", "b", "d"]  # all namespaces
    assert all(p["kind"] == "Pod" and p["apiVersion"] == "v1" for p in kube.list("v1", "Pod", NS))

    kube.create(nodepool("gpu"))  # cluster-scoped
    assert kube.get("karpenter.sh/v1", "NodePool", "gpu")["spec"]["limits"] == {"nvidia.com/gpu": "8"}
    assert kube.delete("karpenter.sh/v1", "NodePool", "gpu") is True
    assert kube.delete("v1", "Pod", "a", NS) is True
    assert kube.get("v1", "Pod", "a", NS)["metadata"]["deletionTimestamp"]  # stopping within its grace period
    api.settle()
    assert names(None) == ["b", "c"]
    assert api.deletes[-1] == ("Pod", NS, "a", "Foreground")


def test_create_existing_raises_conflict_naming_the_object(kube: KubeClient) -> None:
    kube.create(dgd("agg"))
    with pytest.raises(Conflict) as err:
        kube.create(dgd("agg"))
    assert err.value.status == 409 and err.value.reason == "AlreadyExists"
    assert "DynamoGraphDeployment dynamo-bench/agg" in str(err.value)


def test_missing_object_delete_false_get_not_found(kube: KubeClient) -> None:
    assert kube.delete("batch/v1", "Job", "nope", NS) is False
    with pytest.raises(NotFound) as err:
        kube.get("batch/v1", "Job", "nope", NS)
    assert err.value.status == 404 and "Job dynamo-bench/nope" in str(err.value)
    with pytest.raises(NotFound):
        kube.replace({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ghost", "labels": {"a": "b"}}})


def test_creates_and_replaces_ask_for_strict_field_validation(api: FakeKubeApi, kube: KubeClient) -> None:
    # Given a server that validates DynamoGraphDeployments strictly (unknown fields refused, not pruned)
    api.validate_with("DynamoGraphDeployment",
                      lambda obj: [f"spec.{k}: unknown field" for k in obj.get("spec", {}) if k != "components"])
    created = kube.create(dgd("agg"))
    bad = {**created, "spec": {**created["spec"], "sharedMemory": {"size": "8Gi"}}}
    # Then the client's replace carries fieldValidation=Strict, so the unknown field is an error (422)
    with pytest.raises(ApiError) as err:
        kube.replace(bad)
    assert err.value.status == 422 and "spec.sharedMemory: unknown field" in str(err.value)
    with pytest.raises(ApiError):
        kube.create({**dgd("other"), "spec": {"components": [], "sharedMemory": {}}})
    assert [path.split("?", 1)[1] for m, path in api.requests if m in ("POST", "PUT")] == ["fieldValidation=Strict"] * 3


def test_bearer_token_required(api: FakeKubeApi) -> None:
    wrong = KubeClient(api.url, token=lambda: "stale")
    with pytest.raises(ApiError) as err:
        wrong.version()
    assert err.value.status == 401 and not isinstance(err.value, NotFound)
    assert KubeClient(api.url, token=lambda: "secret-token").version()["major"] == "1"


def test_generation_resource_version_and_status_owned_by_server(api: FakeKubeApi, kube: KubeClient) -> None:
    obj = dgd("agg")
    obj["status"] = {"state": "successful"}  # a client cannot write status
    created = kube.create(obj)
    assert "status" not in created and created["metadata"]["generation"] == 1
    labelled = kube.replace({**created, "metadata": {**created["metadata"], "labels": {"a": "b"}},
                             "status": {"state": "failed"}})
    assert labelled["metadata"]["generation"] == 1 and "status" not in labelled
    assert int(labelled["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    api.set_status("DynamoGraphDeployment", NS, "agg", {"state": "pending"})
    current = kube.get("nvidia.com/v1beta1", "DynamoGraphDeployment", "agg", NS)
    changed = kube.replace({**current, "spec": {"components": [{"name": "frontend", "type": "frontend", "replicas": 2}]}})
    assert changed["metadata"]["generation"] == 2 and changed["status"] == {"state": "pending"}
    replaced = kube.replace({**changed, "spec": {"components": []}})
    assert replaced["metadata"]["generation"] == 3
    with pytest.raises(Conflict):  # stale resourceVersion
        kube.replace(changed)


def test_foreground_delete_lingers_for_configured_gets(api: FakeKubeApi, kube: KubeClient) -> None:
    api.set_delete_gets("DynamoGraphDeployment", 2)
    kube.create(dgd("agg"))
    assert kube.delete("nvidia.com/v1beta1", "DynamoGraphDeployment", "agg", NS) is True
    for _ in range(2):
        assert kube.get("nvidia.com/v1beta1", "DynamoGraphDeployment", "agg", NS)["metadata"]["deletionTimestamp"]
    assert kube.delete("nvidia.com/v1beta1", "DynamoGraphDeployment", "agg", NS) is False
    assert len(api.deletes) == 1


def test_hooks_pods_logs_and_status_after_gets(api: FakeKubeApi, kube: KubeClient) -> None:
    def make_pod(fake: FakeKubeApi, job: dict) -> None:
        fake.add_pod(NS, f"{job['metadata']['name']}-abc", labels={"job-name": job["metadata"]["name"]},
                     owner=job, logs="line1\nline2\nline3\n")
        fake.set_status("Job", NS, job["metadata"]["name"], {"failed": 1,
                        "conditions": [{"type": "Failed", "status": "True"}]})

    api.on_create("Job", make_pod)
    api.status_after_gets("DynamoGraphDeployment", 2, {"state": "successful"})
    kube.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "load", "namespace": NS},
                 "spec": {"template": {}}})
    assert kube.get("batch/v1", "Job", "load", NS)["status"]["failed"] == 1
    pods = kube.list("v1", "Pod", NS, label_selector="job-name=load")
    assert [p["metadata"]["name"] for p in pods] == ["load-abc"]
    assert kube.logs("load-abc", NS, container="main", tail_lines=2) == "line2\nline3\n"
    kube.delete("batch/v1", "Job", "load", NS)
    # foreground: the Job stays, held by the finalizer, while its pod stops; then both are gone
    assert kube.get("batch/v1", "Job", "load", NS)["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert [p["metadata"]["name"] for p in kube.list("v1", "Pod", NS)] == ["load-abc"]
    for _ in range(api.grace):
        kube.list("v1", "Pod", NS)
    assert kube.list("v1", "Pod", NS) == [] and kube.list("batch/v1", "Job", NS) == []

    kube.create(dgd("agg"))
    assert "status" not in kube.get("nvidia.com/v1beta1", "DynamoGraphDeployment", "agg", NS)
    assert kube.get("nvidia.com/v1beta1", "DynamoGraphDeployment", "agg", NS)["status"] == {"state": "successful"}


def test_nodes_and_unknown_kinds(api: FakeKubeApi, kube: KubeClient) -> None:
    api.add_node("n1", {"pool": "gpu"}, allocatable_gpus=4)
    [node] = kube.list("v1", "Node", label_selector="pool=gpu")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    with pytest.raises(ValueError, match="Deployment"):
        kube.get("apps/v1", "Deployment", "x", NS)
    with pytest.raises(ValueError, match="namespaced"):
        kube.get("v1", "Pod", "x")
    with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
        KubeClient("http://example.com", token=lambda: "t")


def test_token_provider_refreshes_before_expiry() -> None:
    now = [1000.0]
    calls: list[str] = []

    def presign(cluster: str, session: object) -> tuple[str, float]:
        calls.append(cluster)
        return f"tok-{len(calls)}", now[0] + 14 * 60

    provider = TokenProvider("bench", session=object(), clock=lambda: now[0], presign=presign)
    assert provider() == "tok-1"
    now[0] += 14 * 60 - REFRESH_BEFORE_S - 1
    assert provider() == "tok-1" and calls == ["bench"]
    now[0] += 1  # inside the refresh window
    assert provider() == "tok-2" and calls == ["bench", "bench"]


@mock_aws
def test_eks_token_is_a_presigned_get_caller_identity_url() -> None:
    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret",
                            region_name="us-west-2")
    token, expiry = eks_token("bench-cluster", session, clock=lambda: 5000.0)
    assert expiry == 5000.0 + 14 * 60
    assert token.startswith("k8s-aws-v1.") and not token.endswith("=")
    body = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    assert parts.scheme == "https" and parts.hostname is not None and parts.hostname.startswith("sts.")
    assert query["Action"] == "GetCallerIdentity"
    assert query["X-Amz-Expires"] == "60"
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"].split(";")
    assert query["X-Amz-Credential"].startswith("AKIDEXAMPLE/")


@mock_aws
def test_cluster_endpoint_from_describe_cluster() -> None:
    session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1")
    session.client("eks").create_cluster(name="bench", roleArn="arn:aws:iam::123456789012:role/eks",
                                         resourcesVpcConfig={})
    endpoint, ca = cluster_endpoint("bench", session)
    assert endpoint.startswith("https://") and isinstance(ca, bytes) and ca


def _owned(api: FakeKubeApi, kube: KubeClient) -> tuple[dict, list[str]]:
    job = kube.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": NS},
                       "spec": {"template": {}}})
    pods = [api.add_pod(NS, f"j-{i}", owner=job)["metadata"]["name"] for i in range(2)]
    return job, pods


def _names_of(kube: KubeClient, api_version: str, kind: str) -> list[str]:
    return [o["metadata"]["name"] for o in kube.list(api_version, kind, NS)]


def test_foreground_deletion_keeps_the_owner_until_its_dependents_are_gone(api: FakeKubeApi, kube: KubeClient) -> None:
    _, pods = _owned(api, kube)
    kube.delete("batch/v1", "Job", "j", NS)  # our client's default: Foreground
    seen = []
    while jobs := kube.list("batch/v1", "Job", NS):
        (job,) = jobs
        assert job["metadata"]["deletionTimestamp"] and "foregroundDeletion" in job["metadata"]["finalizers"]
        seen.append(_names_of(kube, "v1", "Pod"))
        assert len(seen) < 10, seen
    assert seen[0] == pods  # the pods were still stopping while the Job was listed
    assert _names_of(kube, "v1", "Pod") == []


def test_background_deletion_removes_the_owner_at_once_and_its_dependents_later(api: FakeKubeApi,
                                                                                kube: KubeClient) -> None:
    _, pods = _owned(api, kube)
    kube.delete("batch/v1", "Job", "j", NS, propagation="Background")
    assert _names_of(kube, "batch/v1", "Job") == []
    assert _names_of(kube, "v1", "Pod") == pods  # the garbage collector has not got to them yet
    api.settle()
    assert _names_of(kube, "v1", "Pod") == []


def test_orphan_deletion_leaves_the_dependents_without_their_owner(api: FakeKubeApi, kube: KubeClient) -> None:
    _, pods = _owned(api, kube)
    kube.delete("batch/v1", "Job", "j", NS, propagation="Orphan")
    api.settle()
    left = kube.list("v1", "Pod", NS)
    assert [p["metadata"]["name"] for p in left] == pods
    assert all(not p["metadata"].get("ownerReferences") for p in left)
