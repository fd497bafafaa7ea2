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

    def answer(self, op: str, cluster: str, association_id: str, req: JSON) -> tuple[int, JSON]:
        """One call's (HTTP status, body): an error body is ``{"Error": {"Code", "Message"}}``."""
        self.calls.append(op)

        def error(status: int, code: str, message: str) -> tuple[int, JSON]:
            return status, {"Error": {"Code": code, "Message": message}}

        if cluster not in self.clusters:
            return error(404, "ResourceNotFoundException", f"No cluster found for name: {cluster}.")
        if op == "CreatePodIdentityAssociation":
            if any(a["clusterName"] == cluster and a["namespace"] == req["namespace"]
                   and a["serviceAccount"] == req["serviceAccount"] for a in self.associations.values()):
                return error(409, "ResourceInUseException", "Association already exists")
            aid = f"a-{next(self._ids):017d}"
            a = {"clusterName": cluster, "namespace": req["namespace"], "serviceAccount": req["serviceAccount"],
                 "roleArn": req["roleArn"], "associationId": aid, "tags": dict(req.get("tags") or {}),
                 "associationArn": f"arn:aws:eks:{self.region}:{self.account}:podidentityassociation/{cluster}/{aid}",
                 "createdAt": self.now, "modifiedAt": self.now, "disableSessionTags": False}
            self.associations[aid] = a
            return 200, {"association": dict(a)}
        if op == "ListPodIdentityAssociations":
            found = [a for a in self.associations.values() if a["clusterName"] == cluster
                     and req.get("namespace") in (None, a["namespace"])
                     and req.get("serviceAccount") in (None, a["serviceAccount"])]
            start = int(req.get("nextToken") or 0)
            size = int(req.get("maxResults") or 100)
            out: JSON = {"associations": [{k: a[k] for k in ("clusterName", "namespace", "serviceAccount",
                                                              "associationArn", "associationId")}
                                          for a in found[start:start + size]]}
            if start + size < len(found):
                out["nextToken"] = str(start + size)
            return 200, out
        if association_id not in self.associations or self.associations[association_id]["clusterName"] != cluster:
            return error(404, "ResourceNotFoundException", f"Association {association_id} not found")
        if op == "DescribePodIdentityAssociation":
            return 200, {"association": dict(self.associations[association_id])}
        if op == "DeletePodIdentityAssociation":
            return 200, {"association": self.associations.pop(association_id)}
        raise AssertionError(f"unexpected EKS call {op}")

    def handle(self, model: Any, params: JSON, **_: Any) -> tuple[Any, JSON]:
        """botocore's ``before-call`` hook: the request as botocore serialized it (validated already)."""
        import json

        from botocore.awsrequest import AWSResponse

        parts = params["url_path"].split("?")[0].strip("/").split("/")
        body = params.get("body") or {}
        req = json.loads(body) if isinstance(body, bytes | str) and body else dict(params.get("query_string") or {})
        status, out = self.answer(model.name, parts[1], parts[3] if len(parts) > 3 else "", req)
        out = {**out, "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}}}
        return AWSResponse("https://eks.amazonaws.com", status, {}, None), out


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


def serve_on_moto(monkeypatch: Any, *clusters: str) -> PodIdentity:
    """Answer the four calls in moto's own EKS (its server, in this process: url paths added to
    ``moto.eks.urls``, set before the server first serves EKS), each authorized as moto authorizes any call
    (``BaseResponse.call_action``: the caller's signature and identity policies, on the resource this names:
    the cluster for Create and List, the association for Describe and Delete; EKS service authorization
    reference), and Create also as ``iam:PassRole`` of the role it associates (what IAM asks of the caller)."""
    from moto.core.responses import ActionResult
    from moto.eks import exceptions as ex
    from moto.eks import urls
    from moto.eks.responses import EKSResponse

    fake = PodIdentity()
    fake.clusters.update(clusters)

    class Response(EKSResponse):
        def _arn(self) -> str:  # from the path itself: the parameters are parsed after the authorization
            parts = self.path.split("?")[0].strip("/").split("/")
            cluster, aid = parts[1], (parts[3] if len(parts) > 3 else "")
            base = f"arn:aws:eks:{self.region}:{self.current_account}"
            return f"{base}:podidentityassociation/{cluster}/{aid}" if aid else f"{base}:cluster/{cluster}"

        def _determine_resource(self) -> str:
            return self._arn()

        def _answer(self, op: str) -> ActionResult:
            req = {k: self._get_param(k) for k in ("namespace", "serviceAccount", "roleArn", "tags", "maxResults",
                                                    "nextToken")}
            status, out = fake.answer(op, self._get_param("name"), self._get_param("associationId") or "",
                                      {k: v for k, v in req.items() if v is not None})
            if status != 200:
                raise {404: ex.ResourceNotFoundException, 409: ex.ResourceInUseException}[status](
                    message=out["Error"]["Message"])
            return ActionResult(out)

        def create_pod_identity_association(self) -> ActionResult:
            from moto.iam.access_control import IAMRequest

            if type(self).request_count >= _settings().INITIAL_NO_AUTH_ACTION_COUNT:
                check = IAMRequest(account_id=self.current_account, method=self.method, path=self.raw_path,
                                   data=self.data, body=self.raw_body, headers=self.headers,
                                   action=self._get_action())
                check._action = "iam:PassRole"
                check.check_action_permitted(self._get_param("roleArn"))
            return self._answer("CreatePodIdentityAssociation")

        def list_pod_identity_associations(self) -> ActionResult:
            return self._answer("ListPodIdentityAssociations")

        def describe_pod_identity_association(self) -> ActionResult:
            return self._answer("DescribePodIdentityAssociation")

        def delete_pod_identity_association(self) -> ActionResult:
            return self._answer("DeletePodIdentityAssociation")

    monkeypatch.setitem(urls.url_paths, "{0}/clusters/(?P<name>[^/]+)/pod-identity-associations$",
                        Response.dispatch)
    monkeypatch.setitem(urls.url_paths,
                        "{0}/clusters/(?P<name>[^/]+)/pod-identity-associations/(?P<associationId>[^/]+)$",
                        Response.dispatch)
    return fake


def _settings() -> Any:
    from moto import settings

    return settings
