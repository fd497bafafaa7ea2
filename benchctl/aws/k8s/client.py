"""A minimal Kubernetes REST client: urllib + ssl, a bearer token, the cluster CA. Standard library only.

No ``kubernetes`` package, no kubeconfig, no kubectl: a Lambda gets the endpoint and CA from
``eks.describe_cluster`` and a token from a presigned STS call (``benchctl.aws.eks_token``). Only the kinds
in :data:`RESOURCES` are known; anything else raises ``ValueError`` naming it.
"""

from __future__ import annotations

import builtins
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    api_version: str  # "v1" or "group/version"
    kind: str
    plural: str
    namespaced: bool

    def base(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The collection (no name) or object path; a namespaced kind without namespace lists all."""
        parts = [self.base()]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{urllib.parse.quote(namespace, safe='')}")
        parts.append(self.plural)
        if name:
            parts.append(urllib.parse.quote(name, safe=""))
        return "/".join(parts)


RESOURCES: dict[str, Resource] = {
    r.kind: r
    for r in (
        Resource("v1", "Namespace", "namespaces", False),
        Resource("v1", "Node", "nodes", False),
        Resource("v1", "Pod", "pods", True),
        Resource("v1", "Secret", "secrets", True),
        Resource("v1", "PersistentVolumeClaim", "persistentvolumeclaims", True),
        Resource("v1", "ServiceAccount", "serviceaccounts", True),
        Resource("v1", "ConfigMap", "configmaps", True),  # the runner grants (benchctl.aws.runner_identity)
        Resource("batch/v1", "Job", "jobs", True),
        Resource("apps/v1", "DaemonSet", "daemonsets", True),
        Resource("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False),
        Resource("nvidia.com/v1beta1", "DynamoGraphDeployment", "dynamographdeployments", True),
        Resource("karpenter.sh/v1", "NodePool", "nodepools", False),
        Resource("karpenter.sh/v1", "NodeClaim", "nodeclaims", False),  # read only: a launch's failure (pools)
        Resource("eks.amazonaws.com/v1", "NodeClass", "nodeclasses", False),
    )
}

# Sent with every create and replace: the API server refuses (instead of silently dropping) a field its
# schema does not know, and a duplicate field (kubernetes.io/docs/reference/using-api/api-concepts,
# "Field validation").
FIELD_VALIDATION = {"fieldValidation": "Strict"}


def resource(api_version: str, kind: str) -> Resource:
    """The table entry of ``kind``; ValueError when the kind is unknown or the apiVersion differs."""
    r = RESOURCES.get(kind)
    if r is None:
        raise ValueError(f"unknown Kubernetes kind {kind!r} ({api_version}); known kinds: {sorted(RESOURCES)}")
    if api_version != r.api_version:
        raise ValueError(f"kind {kind!r} is served as apiVersion {r.api_version!r}, not {api_version!r}")
    return r


class ApiError(Exception):
    """A Kubernetes API call failed: HTTP ``status`` (0 = unreachable), the API's ``reason``, a message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{message} (HTTP {status} {reason})")


class NotFound(ApiError):
    """404: the object (or its namespace) does not exist."""


class Conflict(ApiError):
    """409: the object already exists, or a stale resourceVersion."""


def label_selector_text(selector: str | dict[str, str] | None) -> str | None:
    if selector is None or isinstance(selector, str):
        return selector or None
    return ",".join(f"{k}={v}" for k, v in selector.items()) or None


def _what(kind: str, name: str | None, namespace: str | None) -> str:
    if name is None:
        return f"{kind} list" + (f" in namespace {namespace}" if namespace else "")
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


class KubeClient:
    """The few calls benchctl makes. ``token`` is called per request (it caches; see TokenProvider)."""

    def __init__(self, server: str, *, token: Callable[[], str], ca_data: bytes | None = None,
                 timeout: float = 10.0) -> None:
        url = urllib.parse.urlsplit(server)
        if url.scheme == "http":
            if url.hostname != "127.0.0.1":
                raise ValueError(f"Kubernetes API {server}: plain http is allowed only for 127.0.0.1 (tests)")
            handlers: list[urllib.request.BaseHandler] = []
        elif url.scheme == "https":
            if ca_data:
                try:  # PEM (what describe_cluster's base64 decodes to) as text; otherwise DER bytes
                    cadata: str | bytes = ca_data.decode("ascii")
                except UnicodeDecodeError:
                    cadata = ca_data
                context = ssl.create_default_context(cadata=cadata)
            else:
                context = ssl.create_default_context()
            handlers = [urllib.request.HTTPSHandler(context=context)]
        else:
            raise ValueError(f"Kubernetes API {server!r}: expected an https:// URL")
        self.server = server.rstrip("/")
        self.timeout = timeout
        self._token = token
        # no proxies from the environment: the API server is reached directly
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), *handlers)

    # ------------------------------------------------------------ transport

    def _request(self, method: str, path: str, what: str, *, query: dict[str, Any] | None = None,
                 body: Any = None, content_type: str = "application/json", raw: bool = False) -> Any:
        q = {k: v for k, v in (query or {}).items() if v is not None}
        url = self.server + path + (f"?{urllib.parse.urlencode(q)}" if q else "")
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "*/*" if raw else "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310 (scheme checked)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as err:
            raise _api_error(err, method, what) from None
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise ApiError(0, "Unreachable", f"{method} {what}: {self.server} unreachable: {reason}") from None
        if raw:
            return payload.decode("utf-8", errors="replace")
        return json.loads(payload) if payload else {}

    # ------------------------------------------------------------ calls

    def create(self, obj: JSON, *, dry_run: bool = False) -> JSON:
        """Create ``obj``; ``dry_run``: the server authorizes, validates and admits it and persists nothing."""
        r, name, ns = self._parts(obj)
        query = {**FIELD_VALIDATION, **({"dryRun": "All"} if dry_run else {})}
        return dict(self._request("POST", r.path(ns), _what(r.kind, name, ns), query=query, body=obj))

    def can_i(self, verb: str, group: str, resource: str, *, namespace: str = "", name: str = "",
              subresource: str = "") -> tuple[bool, str]:
        """(allowed, the authorizer's reason) for this client's own identity: a SelfSubjectAccessReview, what
        ``kubectl auth can-i`` sends (every authenticated user may create one)."""
        attrs = {k: v for k, v in (("verb", verb), ("group", group), ("resource", resource), ("namespace", namespace),
                                   ("name", name), ("subresource", subresource)) if v or k == "group"}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}
        out = self._request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                            f"SelfSubjectAccessReview {verb} {resource}", body=body)
        status = out.get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or status.get("evaluationError") or "")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> JSON:
        r = self._resource(api_version, kind, namespace)
        return dict(self._request("GET", r.path(namespace, name), _what(kind, name, namespace)))

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             label_selector: str | dict[str, str] | None = None) -> builtins.list[JSON]:
        r = resource(api_version, kind)
        query = {"labelSelector": label_selector_text(label_selector)}
        out = self._request("GET", r.path(namespace), _what(kind, None, namespace), query=query)
        # list items carry no kind/apiVersion on the wire; fill them in for the caller
        return [{"apiVersion": api_version, "kind": kind, **item} for item in out.get("items") or []]

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
               propagation: str = "Foreground") -> bool:
        """Request deletion; False when the object is already gone (404). The object may linger
        (finalizers, foreground propagation): poll ``get`` until NotFound to wait for it."""
        r = self._resource(api_version, kind, namespace)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": propagation}
        try:
            self._request("DELETE", r.path(namespace, name), _what(kind, name, namespace), body=body)
        except NotFound:
            return False
        return True

    def replace(self, obj: JSON) -> JSON:
        r, name, ns = self._parts(obj)
        if not name:
            raise ValueError(f"replace {r.kind}: metadata.name is required")
        return dict(self._request("PUT", r.path(ns, name), _what(r.kind, name, ns), query=FIELD_VALIDATION,
                                  body=obj))

    def merge_patch(self, api_version: str, kind: str, name: str, namespace: str | None, patch: JSON) -> JSON:
        """A JSON merge patch (RFC 7386, ``application/merge-patch+json``) of one object: only the keys in
        ``patch`` change, a null removes one; two writers of different keys never overwrite each other."""
        r = self._resource(api_version, kind, namespace)
        return dict(self._request("PATCH", r.path(namespace, name), _what(kind, name, namespace), body=patch,
                                  content_type="application/merge-patch+json"))

    def logs(self, pod: str, namespace: str, container: str | None = None, tail_lines: int | None = 200) -> str:
        path = RESOURCES["Pod"].path(namespace, pod) + "/log"
        what = f"logs of Pod {namespace}/{pod}" + (f" container {container}" if container else "")
        return str(self._request("GET", path, what, query={"container": container, "tailLines": tail_lines},
                                 raw=True))

    def version(self) -> JSON:
        return dict(self._request("GET", "/version", "server version"))

    # ------------------------------------------------------------ helpers

    @staticmethod
    def _resource(api_version: str, kind: str, namespace: str | None) -> Resource:
        r = resource(api_version, kind)
        if r.namespaced and not namespace:
            raise ValueError(f"{kind} is namespaced: give a namespace")
        return r

    def _parts(self, obj: JSON) -> tuple[Resource, str | None, str | None]:
        meta = obj.get("metadata") or {}
        r = resource(str(obj.get("apiVersion")), str(obj.get("kind")))
        ns = meta.get("namespace") if r.namespaced else None
        if r.namespaced and not ns:
            raise ValueError(f"{r.kind} {meta.get('name')}: metadata.namespace is required")
        return r, meta.get("name"), ns


def _api_error(err: urllib.error.HTTPError, method: str, what: str) -> ApiError:
    """Turn an HTTP error (a ``Status`` body when the API server answered) into a typed ApiError."""
    try:
        text = err.read().decode("utf-8", errors="replace")
    except OSError:
        text = ""
    reason, detail = str(err.reason or ""), text.strip()[:500]
    try:
        status = json.loads(text)
        if isinstance(status, dict):
            reason = str(status.get("reason") or reason)
            detail = str(status.get("message") or detail)
    except ValueError:
        pass
    message = f"{method} {what}: {detail or reason}"
    cls = {404: NotFound, 409: Conflict}.get(err.code, ApiError)
    return cls(err.code, reason or str(err.code), message)
