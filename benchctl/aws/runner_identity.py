"""A campaign's own load runner identity on EKS: a service account named after the campaign and its EKS Pod
Identity association with the load Job role, created before the campaign's first runner pod (the preflight)
and removed when the campaign ends, on every path (Report, the abort and plan-failure cleanups, the sweeper).

Why: one role serves every campaign's runner, and EKS Pod Identity tags each role session with the pod's
service account (``kubernetes-service-account``, beside ``eks-cluster-arn`` and ``kubernetes-namespace``;
EKS user guide, "Grant Pods access to AWS resources based on tags", pod-id-abac). The load Job role's policy
names every object by that tag (``runner/${aws:PrincipalTag/kubernetes-service-account}/…``, the raw area's
``campaign_id=${aws:PrincipalTag/kubernetes-service-account}/…``), so a runner reaches its own campaign's keys
only; its trust admits only this account, cluster and namespace. The service account's name is the campaign id
(``k8s.common.runner_service_account``).

Associations are eventually consistent ("may take several seconds to be effective after the initial API call
returns", CreatePodIdentityAssociation in the EKS API reference): :meth:`RunnerIdentity.ensure` returns the
association's age, and the preflight waits until it is :data:`SETTLE_S` old before it starts a pod with it.

The grant: a Job's own label cannot choose its service account (any writer of Jobs sets that label). Once the
service account and its association are checked to be this campaign's, :meth:`RunnerIdentity.ensure` adds the
campaign's entry to the grants ConfigMap (``k8s.common.RUNNER_GRANTS``: campaign id -> its runner account, one key
per campaign, by JSON merge patch so that concurrent campaigns do not race); the admission policy
benchctl-runner-identities (stacks/kubernetes/benchctl-identities.yaml) admits a Job that names a service account
only when its campaign's grant names that account, and benchctl-runner-grants holds who may change which grant
(Plan adds and removes; Teardown and the sweeper only remove; the Load function only its doctor's ``doctor-…``
grant). :meth:`RunnerIdentity.release` removes the grant before the service account.

EKS calls (``eks`` client): CreatePodIdentityAssociation (with iam:PassRole of the load Job role), List- and
DescribePodIdentityAssociation, DeletePodIdentityAssociation. Kubernetes (``kube``, optional for
:meth:`release`: the Report function has none, the sweeper removes a service account left behind by its
campaign label, and its grant): create, get and delete of ServiceAccounts in the namespace; a merge patch of the
grants ConfigMap.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from benchctl.aws.k8s.client import ApiError, Conflict, NotFound
from benchctl.aws.k8s.common import (
    LABEL_CAMPAIGN,
    RUNNER_GRANTS,
    labels,
    meta,
    runner_grant_patch,
    runner_service_account,
)
from benchctl.campaign.ports import JSON

SETTLE_S = 15.0  # how old an association must be before a pod is started with it (see the docstring)


def service_account_object(campaign_id: str, namespace: str) -> JSON:
    """A campaign's runner service account as Plan creates it: named after the campaign, our labels, no API token
    (what the admission policy benchctl-service-accounts admits, and nothing more)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
            "metadata": meta(runner_service_account(campaign_id), labels(campaign_id), namespace)}


class RunnerIdentityError(ValueError):
    """The campaign's service account or its association exists and is not this campaign's (another owner's
    name, another role): nothing is changed."""


class RunnerIdentity:
    """``IdentityPort`` on EKS for one campaign (see the module's docstring)."""

    def __init__(self, kube: Callable[[], Any] | None, eks: Callable[[], Any], *, cluster: str,
                 namespace: str | Callable[[], str], role_arn: str, campaign_id: str,
                 clock: Callable[[], float] = time.time) -> None:
        self._kube, self._eks, self._namespace = kube, eks, namespace
        self.cluster, self.role_arn, self.campaign_id = cluster, role_arn, campaign_id
        self.service_account = runner_service_account(campaign_id)
        self.clock = clock

    @property
    def namespace(self) -> str:
        """The runner pods' namespace (the spec's ``kubernetes.namespace``, read when first needed)."""
        if callable(self._namespace):
            self._namespace = self._namespace()
        return self._namespace

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.service_account} (cluster {self.cluster})"

    def _associations(self) -> list[JSON]:
        """This service account's associations, described (the listing names no role)."""
        eks = self._eks()
        out = []
        kw: JSON = {"clusterName": self.cluster, "namespace": self.namespace, "serviceAccount": self.service_account}
        while True:
            page = eks.list_pod_identity_associations(**kw)
            for summary in page.get("associations", []):
                with contextlib.suppress(eks.exceptions.ResourceNotFoundException):  # deleted meanwhile
                    out.append(eks.describe_pod_identity_association(
                        clusterName=self.cluster, associationId=summary["associationId"])["association"])
            if not page.get("nextToken"):
                return out
            kw["nextToken"] = page["nextToken"]

    def ensure(self, *, again: bool = True) -> float:
        """The service account and its association, created unless there (a retried Plan); returns the
        association's age in seconds. :class:`RunnerIdentityError` when either belongs to someone else."""
        if not self.role_arn:
            raise RunnerIdentityError("BENCHCTL_LOAD_ROLE_ARN is not set: the control-plane stack sets it to the "
                                      "load Job role, which each campaign's runner service account is associated with")
        kube = self._kube() if self._kube is not None else None
        if kube is None:
            raise RunnerIdentityError(f"service account {self.where}: no Kubernetes client to create it with")
        try:
            kube.create(service_account_object(self.campaign_id, self.namespace))
        except Conflict:
            found = kube.get("v1", "ServiceAccount", self.service_account, self.namespace)
            owner = ((found.get("metadata") or {}).get("labels") or {}).get(LABEL_CAMPAIGN)
            if owner != self.campaign_id:
                raise RunnerIdentityError(
                    f"service account {self.where} exists and is not this campaign's (label {LABEL_CAMPAIGN}="
                    f"{owner!r}): its runner would act as whoever it belongs to; remove it or use another "
                    "campaign id") from None
        existing = self._associations()
        others = [a for a in existing if a.get("roleArn") != self.role_arn or a.get("targetRoleArn")]
        if others:
            raise RunnerIdentityError(
                f"service account {self.where} is already associated with {others[0].get('roleArn')} "
                f"(association {others[0].get('associationId')}), not the load Job role {self.role_arn}")
        if existing:
            created = existing[0]["createdAt"]
        else:
            eks = self._eks()
            try:
                created = eks.create_pod_identity_association(
                    clusterName=self.cluster, namespace=self.namespace, serviceAccount=self.service_account,
                    roleArn=self.role_arn)["association"]["createdAt"]
            except eks.exceptions.ResourceInUseException:  # created meanwhile (a concurrent retry): judged again,
                if not again:  # once (a listing that still misses it: Plan's Retry comes back)
                    raise RunnerIdentityError(f"service account {self.where}: an association exists that the "
                                              "listing does not show yet; Plan retries") from None
                return self.ensure(again=False)
        self.grant(kube)
        return max(0.0, self.clock() - created.timestamp())

    @property
    def grants_where(self) -> str:
        return f"ConfigMap {self.namespace}/{RUNNER_GRANTS}"

    def grant(self, kube: Any) -> None:
        """Add this campaign's grant (its runner service account) to the grants ConfigMap, after :meth:`ensure`
        checked that the account and its association are this campaign's. :class:`RunnerIdentityError` naming
        what to do when the ConfigMap is missing or the grant was refused."""
        try:
            found = kube.merge_patch("v1", "ConfigMap", RUNNER_GRANTS, self.namespace,
                                     runner_grant_patch(self.campaign_id, granted=True))
        except NotFound:
            raise RunnerIdentityError(
                f"{self.grants_where} does not exist: the runner grants the admission policy "
                "benchctl-runner-identities reads (without it every runner Job is refused); apply "
                "stacks/kubernetes/benchctl-identities.yaml (the platform stack applies it)") from None
        except ApiError as err:
            raise RunnerIdentityError(f"{self.grants_where}: the grant of campaign {self.campaign_id} to service "
                                      f"account {self.service_account} was refused: {err}") from None
        if ((found.get("data") or {}).get(self.campaign_id)) != self.service_account:
            raise RunnerIdentityError(f"{self.grants_where}: campaign {self.campaign_id} is granted "
                                      f"{(found.get('data') or {}).get(self.campaign_id)!r}, not its own runner "
                                      f"service account {self.service_account}")

    def revoke(self, kube: Any) -> str | None:
        """Remove this campaign's grant (idempotent: removing an absent key changes nothing); what it names, or
        None when there are no grants at all."""
        try:
            kube.merge_patch("v1", "ConfigMap", RUNNER_GRANTS, self.namespace,
                             runner_grant_patch(self.campaign_id, granted=False))
        except NotFound:  # no grants at all: nothing to remove
            return None
        return f"grant of campaign {self.campaign_id} in {self.grants_where}"

    def release(self, service_account: bool = True) -> list[str]:
        """Delete the association(s) of the campaign's service account with the load Job role, then (unless
        ``service_account`` is False: a function that calls no Kubernetes) the campaign's grant and the service
        account when it is ours; what was removed. Idempotent."""
        removed = []
        eks = self._eks()
        for a in self._associations():
            if a.get("roleArn") != self.role_arn:
                continue  # not ours to remove (ensure refused to use it)
            with contextlib.suppress(eks.exceptions.ResourceNotFoundException):
                eks.delete_pod_identity_association(clusterName=self.cluster, associationId=a["associationId"])
                removed.append(f"pod identity association {a['associationId']}")
        if self._kube is None or not service_account:
            return removed
        try:  # without its association the service account grants nothing: one this function may not reach
            kube = self._kube()  # (the Report function calls no Kubernetes) is the sweeper's, by its label
            revoked = self.revoke(kube)  # the grant first (always: idempotent), so that it never outlives the
            found = kube.get("v1", "ServiceAccount", self.service_account, self.namespace)  # account the sweeper finds
            if ((found.get("metadata") or {}).get("labels") or {}).get(LABEL_CAMPAIGN) == self.campaign_id:
                kube.delete("v1", "ServiceAccount", self.service_account, self.namespace)
                removed += [*([revoked] if revoked else []), f"ServiceAccount/{self.service_account}"]
        except NotFound:
            pass
        except Exception as err:
            removed.append(f"ServiceAccount/{self.service_account} left for the sweeper ({type(err).__name__}: "
                           f"{str(err)[:200]})")
        return removed
