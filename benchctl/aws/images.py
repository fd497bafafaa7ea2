"""Does a container image exist where a node would pull it from? Asked of its registry, without pulling.

An image reference (``[registry/]repository[:tag][@digest]``, Docker's grammar: no registry means Docker
Hub, a one-part Docker Hub repository is ``library/<name>``) is looked up as the kubelet's pull would
resolve it:

* private Amazon ECR (``<account>.dkr.ecr.<region>.amazonaws.com``): ``ecr:DescribeImages`` with the
  caller's credentials (the nodes pull with their own role; the doctor proves the image is there);
* any other registry: the OCI distribution API, ``HEAD /v2/<repository>/manifests/<tag or digest>``,
  anonymously, following the registry's ``WWW-Authenticate: Bearer`` challenge for a pull token (what
  nvcr.io, public.ecr.aws, Docker Hub and ghcr.io do for public images). A registry that wants
  credentials for the image cannot be answered anonymously: that is said, not guessed.

May import the standard library and boto3 only (an adapter of ``benchctl doctor``).
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DOCKER_HUB = "registry-1.docker.io"
_ECR = re.compile(r"^(\d{12})\.dkr\.ecr\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?\Z")
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"))


@dataclass(frozen=True)
class ImageRef:
    registry: str
    repository: str
    reference: str  # a tag or a digest

    @property
    def ecr(self) -> tuple[str, str] | None:
        """(account, region) of a private ECR registry, else None."""
        m = _ECR.match(self.registry)
        return (m.group(1), m.group(2)) if m else None


def parse_ref(image: str) -> ImageRef:
    """An image reference in parts; ValueError for what is no reference."""
    if not image or any(c.isspace() for c in image):
        raise ValueError(f"{image!r} is not an image reference")
    name, _, digest = image.partition("@")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = "docker.io", name
    tag = ""
    if ":" in path.rsplit("/", 1)[-1]:
        path, _, tag = path.rpartition(":")
    if registry == "docker.io":
        registry = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    if not path or not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", path):
        raise ValueError(f"{image!r}: repository {path!r} is not a valid repository name")
    return ImageRef(registry, path, digest or tag or "latest")


Opener = Callable[[urllib.request.Request], Any]


def _challenge(header: str) -> dict[str, str]:
    """``Bearer realm="…",service="…",scope="…"`` as a dict (empty for another scheme)."""
    if not header.lower().startswith("bearer "):
        return {}
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


def _head(ref: ImageRef, scheme: str, opener: Opener, token: str | None) -> tuple[int, Any]:
    url = f"{scheme}://{ref.registry}/v2/{ref.repository}/manifests/{ref.reference}"
    req = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})  # noqa: S310 - http(s) only
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        resp = opener(req)
        return int(resp.status), resp.headers
    except urllib.error.HTTPError as err:
        return int(err.code), err.headers


def _registry_lookup(ref: ImageRef, scheme: str, opener: Opener) -> tuple[bool, str]:
    status, headers = _head(ref, scheme, opener, None)
    if status == 401:
        params = _challenge(headers.get("WWW-Authenticate", "") if headers else "")
        if not params.get("realm"):
            return False, f"{ref.registry} wants credentials (no bearer challenge): cannot be checked anonymously"
        if urllib.parse.urlsplit(params["realm"]).scheme not in ("https", scheme):
            return False, f"{ref.registry}: token realm {params['realm']!r} is not an https URL"
        query = {k: v for k, v in params.items() if k in ("service", "scope")}
        query.setdefault("scope", f"repository:{ref.repository}:pull")
        req = urllib.request.Request(f"{params['realm']}?{urllib.parse.urlencode(query)}")  # noqa: S310 - checked
        try:
            body = json.load(opener(req))
        except urllib.error.HTTPError as err:
            return False, f"{ref.registry} refused an anonymous pull token ({err.code}): private, or credentials needed"
        status, headers = _head(ref, scheme, opener, body.get("token") or body.get("access_token"))
    if status == 200:
        digest = headers.get("Docker-Content-Digest") if headers else None
        return True, f"in {ref.registry}" + (f" ({digest})" if digest else "")
    if status == 404:
        return False, f"{ref.registry} has no {ref.repository}:{ref.reference} (404)"
    if status in (401, 403):
        return False, f"{ref.registry} refused anonymous access to {ref.repository} ({status}): private, or credentials needed"
    return False, f"{ref.registry} answered {status}"


def _ecr_lookup(ref: ImageRef, session: Any) -> tuple[bool, str]:
    from botocore.exceptions import ClientError

    account, region = ref.ecr or ("", "")
    ecr = session.client("ecr", region_name=region)
    ident = {"imageDigest": ref.reference} if ref.reference.startswith("sha256:") else {"imageTag": ref.reference}
    try:
        found = ecr.describe_images(registryId=account, repositoryName=ref.repository, imageIds=[ident])["imageDetails"]
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "")
        if code in ("ImageNotFoundException", "RepositoryNotFoundException"):
            return False, f"ECR {account}/{ref.repository} has no {ref.reference} ({code})"
        raise
    return bool(found), f"in ECR {account} {region}" + (f" ({found[0].get('imageDigest')})" if found else "")


def image_exists(image: str, *, session: Any = None, opener: Opener | None = None,
                 scheme: str = "https") -> tuple[bool, str]:
    """(exists, how we know) for one image reference; ValueError for a malformed one. ``scheme`` and
    ``opener`` are for tests against a local registry."""
    if scheme not in ("https", "http"):
        raise ValueError(f"registry scheme {scheme!r}: https (http only for a local test registry)")
    ref = parse_ref(image)
    if ref.ecr is not None:
        if session is None:
            import boto3

            session = boto3.session.Session()
        return _ecr_lookup(ref, session)
    return _registry_lookup(ref, scheme, opener or (lambda r: urllib.request.urlopen(r, timeout=20)))  # noqa: S310
