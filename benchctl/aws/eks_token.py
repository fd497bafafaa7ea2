"""EKS authentication without kubeconfig: a bearer token from a presigned STS call, endpoint and CA.

The token is what ``aws eks get-token`` / aws-iam-authenticator produce: STS ``GetCallerIdentity``
presigned (GET, ``X-Amz-Expires=60``) with the signed header ``x-k8s-aws-id: <cluster>``, then
``k8s-aws-v1.`` + the URL in unpadded urlsafe base64. EKS accepts it for 15 minutes; we treat it as
valid for 14 and refresh a minute before that. Signing needs no IAM permission; the caller's role
needs an EKS access entry.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

from benchctl.aws.k8s.client import KubeClient

K8S_AWS_ID_HEADER = "x-k8s-aws-id"
TOKEN_PREFIX = "k8s-aws-v1."  # noqa: S105 (a format prefix, not a secret)
URL_EXPIRES_S = 60
TOKEN_LIFETIME_S = 14 * 60  # EKS honours 15 min from signing; stay a minute short
REFRESH_BEFORE_S = 60


def _session(session: Any) -> Any:
    if session is not None:
        return session
    import boto3

    return boto3.Session()


def _sts_client(session: Any) -> Any:
    """An STS client that carries ``x-k8s-aws-id`` from the call's params into the signed headers."""
    sts = session.client("sts", region_name=session.region_name)

    def take_cluster_id(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        if K8S_AWS_ID_HEADER in params:
            context[K8S_AWS_ID_HEADER] = params.pop(K8S_AWS_ID_HEADER)

    def add_header(request: Any, **_: Any) -> None:
        if K8S_AWS_ID_HEADER in request.context:
            request.headers[K8S_AWS_ID_HEADER] = request.context[K8S_AWS_ID_HEADER]

    sts.meta.events.register("provide-client-params.sts.GetCallerIdentity", take_cluster_id)
    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_header)
    return sts


def eks_token(cluster_name: str, session: Any = None, *, clock: Callable[[], float] = time.time) -> tuple[str, float]:
    """``(token, expiry epoch seconds)`` for the Kubernetes API of ``cluster_name``."""
    now = clock()
    sts = _sts_client(_session(session))
    url = sts.generate_presigned_url(
        "get_caller_identity", Params={K8S_AWS_ID_HEADER: cluster_name}, ExpiresIn=URL_EXPIRES_S, HttpMethod="GET"
    )
    token = TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return token, now + TOKEN_LIFETIME_S


def cluster_endpoint(cluster_name: str, session: Any = None) -> tuple[str, bytes]:
    """``(https endpoint, CA certificate PEM bytes)`` of the cluster, from ``eks.describe_cluster``."""
    cluster = _session(session).client("eks").describe_cluster(name=cluster_name)["cluster"]
    endpoint = cluster.get("endpoint")
    ca = (cluster.get("certificateAuthority") or {}).get("data")
    if not endpoint or not ca:
        raise ValueError(f"EKS cluster {cluster_name} (status {cluster.get('status')}) has no API endpoint/CA yet")
    return str(endpoint), base64.b64decode(ca)


class TokenProvider:
    """A callable returning a valid token: cached, re-presigned ``REFRESH_BEFORE_S`` before expiry."""

    def __init__(self, cluster_name: str, session: Any = None, *, clock: Callable[[], float] = time.time,
                 presign: Callable[[str, Any], tuple[str, float]] | None = None) -> None:
        self.cluster_name = cluster_name
        self.session = session
        self.clock = clock
        self._presign = presign or (lambda name, s: eks_token(name, s, clock=clock))
        self._token: str | None = None
        self._expires = 0.0

    def __call__(self) -> str:
        if self._token is None or self.clock() >= self._expires - REFRESH_BEFORE_S:
            if self.session is None:
                self.session = _session(None)
            self._token, self._expires = self._presign(self.cluster_name, self.session)
        return self._token


def kube_for_cluster(cluster_name: str, session: Any = None, *, timeout: float = 10.0,
                     clock: Callable[[], float] = time.time) -> KubeClient:
    """A KubeClient for the EKS cluster: endpoint and CA from describe_cluster, a refreshing token."""
    session = _session(session)
    endpoint, ca = cluster_endpoint(cluster_name, session)
    return KubeClient(endpoint, token=TokenProvider(cluster_name, session, clock=clock), ca_data=ca,
                      timeout=timeout)
