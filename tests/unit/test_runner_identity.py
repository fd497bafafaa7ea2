"""A campaign's load runner identity on EKS (benchctl.aws.runner_identity): its own service account and Pod
Identity association with the load Job role, made once, refused when someone else's, removed at the end.
EKS is moto's with the Pod Identity calls answered by tests/fakes/pod_identity.py (botocore validates each
request against the EKS model); Kubernetes is the fake API server."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from benchctl.aws.k8s.client import KubeClient
from benchctl.aws.k8s.common import LABEL_CAMPAIGN, RUNNER_GRANTS, runner_service_account
from benchctl.aws.runner_identity import SETTLE_S, RunnerIdentity, RunnerIdentityError
from tests.fakes import pod_identity
from tests.fakes.eks_world import runner_grants
from tests.fakes.k8s_api import FakeKubeApi

CLUSTER, NS, CID = "bench", "dynamo-bench", "seed-plan-20261201-101500"
ROLE = "arn:aws:iam::123456789012:role/load-job"


@pytest.fixture
def world() -> Iterator[tuple[Any, pod_identity.PodIdentity, FakeKubeApi]]:
    with mock_aws(), FakeKubeApi() as api:
        session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1")
        fake = pod_identity.install(session, CLUSTER)
        api.put(runner_grants(NS))  # as stacks/kubernetes/benchctl-identities.yaml applies it
        yield session, fake, api


def identity(session: Any, api: FakeKubeApi | None, cid: str = CID, role: str = ROLE, now: float | None = None) -> RunnerIdentity:
    kube = (lambda: KubeClient(api.url, token=lambda: "test-token")) if api is not None else None
    return RunnerIdentity(kube, lambda: session.client("eks"), cluster=CLUSTER, namespace=NS, role_arn=role,
                          campaign_id=cid, clock=lambda: now if now is not None else dt.datetime(2026, 1, 1, 0, 0, 20,
                                                                                               tzinfo=dt.UTC).timestamp())


def test_the_campaigns_service_account_and_association_are_made_once_and_removed(world) -> None:
    session, fake, api = world
    ident = identity(session, api)
    assert ident.ensure() == 20.0  # the association's age (created at the fake's now, the clock 20 s later)
    sa = api.stored("ServiceAccount", CID, NS)
    assert sa["metadata"]["labels"][LABEL_CAMPAIGN] == CID and sa["automountServiceAccountToken"] is False
    (a,) = fake.associations.values()
    assert (a["namespace"], a["serviceAccount"], a["roleArn"]) == (NS, CID, ROLE)
    assert ident.ensure() == 20.0 and len(fake.associations) == 1  # a retried Plan: nothing new
    assert api.stored("ConfigMap", RUNNER_GRANTS, NS)["data"] == {CID: CID}  # granted once both were checked
    removed = ident.release()
    assert removed == [f"pod identity association {a['associationId']}",
                       f"grant of campaign {CID} in ConfigMap {NS}/{RUNNER_GRANTS}", f"ServiceAccount/{CID}"]
    assert fake.associations == {} and api.stored("ServiceAccount", CID, NS) is None
    assert api.stored("ConfigMap", RUNNER_GRANTS, NS).get("data") == {}
    assert ident.release() == []  # again: nothing left, no error


def test_another_owners_service_account_or_role_is_refused_and_nothing_changes(world) -> None:
    session, fake, api = world
    api.put({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": CID, "namespace": NS}})
    with pytest.raises(RunnerIdentityError, match=rf"service account {NS}/{CID} .*exists and is not this campaign's"):
        identity(session, api).ensure()
    assert fake.associations == {} and not api.stored("ConfigMap", RUNNER_GRANTS, NS).get("data")  # no grant
    other = "seed-plan-20261201-101501"
    session.client("eks").create_pod_identity_association(clusterName=CLUSTER, namespace=NS, serviceAccount=other,
                                                          roleArn="arn:aws:iam::123456789012:role/admin")
    with pytest.raises(RunnerIdentityError, match=r"already associated with arn:aws:iam::123456789012:role/admin"):
        identity(session, api, other).ensure()
    assert not api.stored("ConfigMap", RUNNER_GRANTS, NS).get("data")  # another role's account: never granted
    assert identity(session, api, other).release() == [  # ours; the other role's association stays
        f"grant of campaign {other} in ConfigMap {NS}/{RUNNER_GRANTS}", f"ServiceAccount/{other}"]
    assert len(fake.associations) == 1


def test_without_kubernetes_the_association_still_goes_and_the_service_account_is_left_to_the_sweeper(world) -> None:
    session, fake, api = world
    identity(session, api).ensure()
    (aid,) = fake.associations
    assert identity(session, None).release() == [f"pod identity association {aid}"]  # the Report function's path
    assert fake.associations == {} and api.stored("ServiceAccount", CID, NS) is not None


@pytest.mark.parametrize("cid", ["-x", "x-", "Seed", "a_b", "a" * 254, ""])
def test_a_campaign_id_that_cannot_name_a_service_account_is_refused_by_name(cid: str) -> None:
    with pytest.raises(ValueError, match="cannot name its runner's service account"):
        runner_service_account(cid)


def test_the_preflight_makes_the_identity_and_waits_until_it_settled_before_any_pod(world) -> None:
    from benchctl.aws.preflight import preflight
    from benchctl.errors import NotReadyYet
    from tests.unit.test_aws_k8s import _prereqs, _spec, _with_image

    session, fake, api = world
    _prereqs(api)
    young = identity(session, api, now=fake.now.timestamp() + SETTLE_S - 5)
    with pytest.raises(NotReadyYet, match=r"association .* is 10 s old"):
        preflight(_with_image(_spec()), KubeClient(api.url, token=lambda: "test-token"), campaign_id=CID, identity=young)
    assert not [b for m, _, b in api.bodies if m == "POST" and b.get("kind") == "Job"]  # no pod before it settled
    settled = identity(session, api, now=fake.now.timestamp() + SETTLE_S)
    with pytest.raises(NotReadyYet, match="image checks still running"):
        preflight(_with_image(_spec()), KubeClient(api.url, token=lambda: "test-token"), campaign_id=CID, identity=settled)
    jobs = [b for m, _, b in api.bodies if m == "POST" and b.get("kind") == "Job"]
    assert {j["spec"]["template"]["spec"]["serviceAccountName"] for j in jobs} == {CID}


def test_an_association_made_meanwhile_is_judged_again_once(world, monkeypatch) -> None:
    """CreatePodIdentityAssociation answers ResourceInUseException (another Plan attempt made it): the
    association is looked up again and used when it is the load Job role's; a listing that still misses it
    fails by name instead of trying forever."""
    session, fake, api = world
    ident = identity(session, api)
    ident.ensure()
    real = RunnerIdentity._associations
    monkeypatch.setattr(RunnerIdentity, "_associations", lambda self: [])  # the listing lags behind
    with pytest.raises(RunnerIdentityError, match="an association exists that the listing does not show yet"):
        ident.ensure()
    assert fake.calls.count("CreatePodIdentityAssociation") == 3  # the first, then two refused: no loop
    seen = iter([[], real(ident)])  # the second look finds it
    monkeypatch.setattr(RunnerIdentity, "_associations", lambda self: next(seen))
    assert ident.ensure() == 20.0 and len(fake.associations) == 1


def test_without_the_grants_configmap_the_identity_is_refused_naming_the_file_to_apply(world) -> None:
    """The grants are what the admission policy benchctl-runner-identities reads: a cluster without them would
    refuse every runner Job, so Plan stops at once and says which file to apply."""
    session, _fake, api = world
    api.remove("ConfigMap", RUNNER_GRANTS, NS)
    with pytest.raises(RunnerIdentityError, match=rf"ConfigMap {NS}/{RUNNER_GRANTS} does not exist.*"
                                                  r"stacks/kubernetes/benchctl-identities\.yaml"):
        identity(session, api).ensure()


def test_two_campaigns_grants_are_one_key_each_and_one_release_leaves_the_other(world) -> None:
    """A merge patch of one key per campaign: two campaigns granted one after the other both stay granted, and
    one campaign's end removes only its own grant."""
    session, _fake, api = world
    other = "seed-plan-20261201-101501"
    identity(session, api).ensure()
    identity(session, api, other).ensure()
    assert api.stored("ConfigMap", RUNNER_GRANTS, NS)["data"] == {CID: CID, other: other}
    identity(session, api).release()
    assert api.stored("ConfigMap", RUNNER_GRANTS, NS)["data"] == {other: other}
