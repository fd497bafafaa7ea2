"""EKS Pod Identity associations for a boto3 session whose EKS is moto's (moto 5 has none of these calls).

The four calls ``benchctl.aws.runner_identity`` makes, answered in this process from a table of associations,
after botocore validated each request against the EKS service model (a misspelt or missing parameter fails
here as it would against AWS): CreatePodIdentityAssociation (ResourceInUseException when the cluster has one
for that namespace and service account: one association per service account; ResourceNotFoundException for
an unknown cluster), ListPodIdentityAssociations (summaries: no role, filtered by namespace and service
account, paginated by ``maxResults``), DescribePodIdentityAssociation and DeletePodIdentityAssociation
(ResourceNotFoundException for an unknown id). Field names and shapes: the EKS API reference
(CreatePodIdentityAssociation, PodIdentityAssociation, PodIdentityAssociationSummary).
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass
class PodIdentity:
    account: str = "123456789012"
    region: str = "us-east-1"
    clusters: set[str] = field(default_factory=set)
    associations: dict[str, JSON] = field(default_factory=dict)  # id -> association
    calls: list[str] = field(default_factory=list)
    now: dt.datetime = field(default_factory=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def _response(self, status: int, body: JSON) -> tuple[Any, JSON]:
        from botocore.awsrequest import AWSResponse

        body = {**body, "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}}}
        return AWSResponse("https://eks.amazonaws.com", status, {}, None), body

    def _error(self, status: int, code: str, message: str) -> tuple[Any, JSON]:
        return self._response(status, {"Error": {"Code": code, "Message": message}})

    def handle(self, model: Any, params: JSON, **_: Any) -> tuple[Any, JSON]:
        op, body = model.name, params.get("body") or {}
        self.calls.append(op)
        url = params["url_path"]  # /clusters/{name}/pod-identity-associations[/{id}]
        parts = url.split("?")[0].strip("/").split("/")
        cluster = parts[1]
        if cluster not in self.clusters:
            return self._error(404, "ResourceNotFoundException", f"No cluster found for name: {cluster}.")
        if op == "CreatePodIdentityAssociation":
            import json

            req = json.loads(body) if isinstance(body, (bytes, str)) else body
            if any(a["clusterName"] == cluster and a["namespace"] == req["namespace"]
                   and a["serviceAccount"] == req["serviceAccount"] for a in self.associations.values()):
                return self._error(409, "ResourceInUseException", "Association already exists")
            aid = f"a-{next(self._ids):017d}"
            a = {"clusterName": cluster, "namespace": req["namespace"], "serviceAccount": req["serviceAccount"],
                 "roleArn": req["roleArn"], "associationId": aid, "tags": dict(req.get("tags") or {}),
                 "associationArn": f"arn:aws:eks:{self.region}:{self.account}:podidentityassociation/{cluster}/{aid}",
                 "createdAt": self.now, "modifiedAt": self.now, "disableSessionTags": False}
            self.associations[aid] = a
            return self._response(200, {"association": dict(a)})
        if op == "ListPodIdentityAssociations":
            q = params.get("query_string") or {}
            found = [a for a in self.associations.values() if a["clusterName"] == cluster
                     and q.get("namespace") in (None, a["namespace"])
                     and q.get("serviceAccount") in (None, a["serviceAccount"])]
            start = int(q.get("nextToken") or 0)
            size = int(q.get("maxResults") or 100)
            page = found[start:start + size]
            out: JSON = {"associations": [{k: a[k] for k in ("clusterName", "namespace", "serviceAccount",
                                                              "associationArn", "associationId")} for a in page]}
            if start + size < len(found):
                out["nextToken"] = str(start + size)
            return self._response(200, out)
        aid = parts[3]
        if aid not in self.associations or self.associations[aid]["clusterName"] != cluster:
            return self._error(404, "ResourceNotFoundException", f"Association {aid} not found")
        if op == "DescribePodIdentityAssociation":
            return self._response(200, {"association": dict(self.associations[aid])})
        if op == "DeletePodIdentityAssociation":
            return self._response(200, {"association": self.associations.pop(aid)})
        raise AssertionError(f"unexpected EKS call {op}")


OPERATIONS = ("CreatePodIdentityAssociation", "ListPodIdentityAssociations", "DescribePodIdentityAssociation",
              "DeletePodIdentityAssociation")


def install(session: Any, *clusters: str, fake: PodIdentity | None = None) -> PodIdentity:
    """Answer the session's (and its later clients') Pod Identity calls from ``fake`` (a new one by default)."""
    fake = fake or PodIdentity()
    fake.clusters.update(clusters)
    for op in OPERATIONS:
        session.events.register(f"before-call.eks.{op}", fake.handle)
    return fake


def install_everywhere(monkeypatch: Any, *clusters: str) -> PodIdentity:
    """Answer the Pod Identity calls of every botocore session created from now on (as moto registers its own
    handler: ``botocore.handlers.BUILTIN_HANDLERS``), until ``monkeypatch`` undoes it."""
    import botocore.handlers

    fake = PodIdentity()
    fake.clusters.update(clusters)
    monkeypatch.setattr(botocore.handlers, "BUILTIN_HANDLERS", [
        *botocore.handlers.BUILTIN_HANDLERS, *((f"before-call.eks.{op}", fake.handle) for op in OPERATIONS)])
    return fake
