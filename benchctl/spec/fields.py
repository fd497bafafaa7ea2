"""The spec's free strings, each held to the rule of where it ends up: argv, file paths, Kubernetes objects and
label selectors, the lake. A value outside its rule is refused at validation with one line naming the field,
the value and what is valid (``<path>: <value> is invalid: <rule>: <what is valid>; <why not this one>``).

* ``model.name``, ``checkpoint.name``: a Hugging Face repo id, huggingface_hub's own rules
  (``huggingface_hub.utils.validate_repo_id``, 1.33.0): ``name`` or ``namespace/name``, each part 1-96 of
  ``A-Z a-z 0-9 _ - .``, starting and ending with a letter, digit or ``_``, no ``--`` or ``..``, not ending in
  ``.git``. It reaches argv (``--model``, ``--served-model-name``, the tokenizer) and the hub cache's folder.
* ``model.revision``, ``checkpoint.revision``: a 40-hex commit or a git ref name (``main``, ``v1.0``,
  ``refs/pr/1``) under git-check-ref-format's rules: no ``..``, no empty or dot-leading component, no
  ``.lock`` component, not ending in ``/`` or ``.``; never a leading ``-``, whitespace or control character.
  On EKS only a commit passes (``spec.py``): it names the snapshot directory.
* ``kubernetes.dcgm_exporter_urls``: only an in-cluster Service, ``http(s)://<service>.<namespace>.svc
  [.cluster.local][:port][/path]``: never an IP literal (169.254.169.254 is the instance metadata service,
  whose credentials a load pod that scrapes it would write into the lake), user info, another scheme, host,
  query or fragment. The local engine does not read these URLs (only ``benchctl.aws.eks`` does), so no
  loopback exception exists.
* Kubernetes object names (secret, volume claim, service account, NodeClass): RFC 1123 subdomains, as the
  API server checks them; an EKS node group name (a label value in our node selectors): 1-63 of ``A-Z a-z 0-9
  - _``, starting and ending with a letter or digit; CPU and memory sizes: Kubernetes quantities of the units
  the load Job's sizing reads (``8``, ``500m``; ``16Gi``, ``512Mi``, ``4G``).
* Free text (description, GPU kind, price source and date): no control or bidirectional-override characters
  (newline and tab only in ``description``), bounded length.

Pure: pydantic and the standard library.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

_ASCII = re.ASCII


def _refuse(rule: str) -> Callable[[str], PydanticCustomError]:
    def error(why: str) -> PydanticCustomError:
        return PydanticCustomError("spec_field", "{message}", {"message": f"{rule}; {why}" if why else rule})
    return error


def _checked(check: Callable[[str], str | None], rule: str) -> AfterValidator:
    refuse = _refuse(rule)

    def validate(value: str) -> str:
        why = check(value)
        if why is not None:
            raise refuse(why)
        return value
    validate.__doc__ = rule  # the rule as the generated spec reference states it (benchctl.cli.reference)
    return AfterValidator(validate)


# C0 and C1 controls, DEL, the line/paragraph separators and the bidirectional overrides (Trojan Source)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _control(value: str, allowed: str = "") -> str | None:
    bad = next((c for c in value if _CONTROL.match(c) and c not in allowed), None)
    return None if bad is None else f"it holds the control character U+{ord(bad):04X}"


# ----------------------------------------------------------------------------- Hugging Face repo ids and revisions

HF_PART_MAX = 96
_HF_PART = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?", _ASCII)


def repo_id_problem(value: str) -> str | None:
    """Why ``value`` is not a Hugging Face repo id under huggingface_hub's ``validate_repo_id``, or None."""
    if (c := _control(value)) is not None:
        return c
    parts = value.split("/")
    if len(parts) > 2:
        return "it has more than one '/'"
    for part in parts:
        if not 1 <= len(part) <= HF_PART_MAX:
            return f"a part is empty or over {HF_PART_MAX} characters"
        if not _HF_PART.fullmatch(part):
            if re.fullmatch(r"[A-Za-z0-9_.-]+", part, _ASCII):
                return (f"part {part!r} starts or ends with '-' or '.'" +
                        (" (a leading '-' reads as an option)" if value.startswith("-") else ""))
            return "it holds a character outside A-Z a-z 0-9 _ - ."
    if "--" in value or ".." in value:
        return "it holds '--' or '..'"
    if value.endswith(".git"):
        return "it ends in '.git'"
    return None


HfRepoId = Annotated[str, _checked(repo_id_problem, (
    "Hugging Face repo id rule: 'name' or 'namespace/name', each part 1-96 of A-Z a-z 0-9 _ - . starting and "
    "ending with a letter, digit or '_', no '--' or '..', not ending in '.git' (huggingface_hub "
    "validate_repo_id), e.g. Qwen/Qwen3-30B-A3B"))]

_COMMIT = re.compile(r"[0-9a-f]{40}", _ASCII)
_REF_CHARS = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}", _ASCII)


def revision_problem(value: str) -> str | None:
    """Why ``value`` is neither a 40-hex commit nor a safe git ref name, or None."""
    if _COMMIT.fullmatch(value):
        return None
    if (c := _control(value)) is not None:
        return c
    if ".." in value:
        return "it holds '..'"
    if value[:1] in ("-", "."):
        return f"it starts with {value[:1]!r}" + (" (it would read as an option)" if value[:1] == "-" else "")
    if not _REF_CHARS.fullmatch(value):
        return ("it is empty, over 100 characters, or holds a character outside A-Z a-z 0-9 . _ / - "
                "(whitespace included)")
    parts = value.split("/")
    if any(not p for p in parts):
        return "it has an empty component ('//' or a trailing '/')"
    if any(p.startswith(".") or p.endswith(".lock") for p in parts):
        return "a component starts with '.' or ends with '.lock'"
    if value.endswith("."):
        return "it ends with '.'"
    return None


HfRevision = Annotated[str, _checked(revision_problem, (
    "revision rule: a 40-hex commit or a git ref name (e.g. main, v1.0, refs/pr/1): A-Z a-z 0-9 . _ / -, "
    "starting with a letter or digit, at most 100 characters, no '..', no empty or '.'-leading component, "
    "no '.lock' component, not ending in '/' or '.'"))]

# ----------------------------------------------------------------------------------------- in-cluster metrics URLs

_DNS1035 = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"  # a Service name
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"  # a namespace
_SERVICE_URL = re.compile(
    rf"https?://{_DNS1035}\.{_DNS1123_LABEL}\.svc(\.cluster\.local)?(:(?P<port>[0-9]{{1,5}}))?(/[A-Za-z0-9._~/-]*)?",
    _ASCII)
_METADATA_HOSTS = {"metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"}


def service_url_problem(value: str) -> str | None:
    """Why ``value`` is not an in-cluster Service URL (the only metrics URLs a spec may name on AWS), or None."""
    if (c := _control(value)) is not None:
        return c
    m = _SERVICE_URL.fullmatch(value)
    if m and 1 <= int(m.group("port") or 80) <= 65535:
        return None
    try:
        parts = urlsplit(value)
        host = (parts.hostname or "").rstrip(".")
        port = parts.port
    except ValueError as err:
        return f"it is not a URL ({err})"
    if parts.scheme not in ("http", "https"):
        return f"scheme {parts.scheme or '(none)'!r} is not http or https"
    if "@" in parts.netloc:
        return "it holds user info (user@): credentials never go in a spec"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None or re.fullmatch(r"[0-9.]+|0x[0-9a-f.x]+", host, re.I):
        why = ("the instance metadata service (link-local)" if str(ip) in ("169.254.169.254", "fd00:ec2::254")
               else "link-local" if ip is not None and ip.is_link_local
               else "loopback" if ip is not None and ip.is_loopback else "an address, not a Service")
        return f"host {host!r} is an IP literal: {why}"
    if host in _METADATA_HOSTS or host == "localhost":
        return f"host {host!r} is not a Service (a metadata or loopback name)"
    if port is not None and not 1 <= port <= 65535:
        return f"port {port} is not 1-65535"
    if parts.query or parts.fragment or "?" in value or "#" in value:
        return "it has a query or fragment"
    return (f"host {host!r} is not <service>.<namespace>.svc[.cluster.local] (lowercase Service and namespace "
            "names), or the path holds characters outside A-Z a-z 0-9 . _ ~ / -")


InClusterUrl = Annotated[str, _checked(service_url_problem, (
    "in-cluster metrics URL rule: http(s)://<service>.<namespace>.svc[.cluster.local][:port][/path] only, e.g. "
    "http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics; no IP literal, user info, query or other host"))]

# ------------------------------------------------------------------------------------ Kubernetes names and sizes

_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", _ASCII)


def _object_name(value: str) -> str | None:
    if len(value) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(value):
        return _control(value) or "it is not one"
    return None


K8sObjectName = Annotated[str, _checked(_object_name, (
    "Kubernetes object name rule: an RFC 1123 subdomain, at most 253 of a-z 0-9 - . , each dot-separated part "
    "starting and ending with a letter or digit"))]

_NODEGROUP = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?", _ASCII)
NodegroupName = Annotated[str, _checked(lambda v: None if _NODEGROUP.fullmatch(v) else _control(v) or "it is not one", (
    "EKS node group name rule: 1-63 of A-Z a-z 0-9 - _ starting and ending with a letter or digit (EKS's "
    "nodegroupName; it is the eks.amazonaws.com/nodegroup label value our node selectors match)"))]

_CPU = re.compile(r"(0|[1-9][0-9]{0,6})(\.[0-9]{1,3})?m?", _ASCII)
_MEMORY = re.compile(r"(0|[1-9][0-9]{0,12})(\.[0-9]{1,3})?(Ki|Mi|Gi|Ti|k|M|G|T)?", _ASCII)


def _positive(pattern: re.Pattern[str]) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if not pattern.fullmatch(value):
            return _control(value) or "it is not one"
        return None if re.search(r"[1-9]", value) else "it is zero"
    return check


CpuQuantity = Annotated[str, _checked(_positive(_CPU), (
    "CPU quantity rule: a positive Kubernetes quantity in cores or millicores, e.g. 8, 0.5, 500m"))]
MemoryQuantity = Annotated[str, _checked(_positive(_MEMORY), (
    "memory quantity rule: a positive Kubernetes quantity in bytes with an optional unit Ki Mi Gi Ti k M G T, "
    "e.g. 16Gi, 512Mi"))]

# ---------------------------------------------------------------------------------------------- image references
# The distribution reference grammar (distribution/reference, regexp.go), ASCII only: [domain[:port]/]path[:tag]
# [@sha256:digest]; a tag at most 128 characters, a name at most 255.
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?/)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
_IMAGE = re.compile(rf"(?P<name>{_DOMAIN}{_PATH})(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}))?"
                    r"(?:@sha256:[0-9a-f]{64})?", _ASCII)
IMAGE_TAG_MAX = 128


def image_problem(value: str) -> str | None:
    m = _IMAGE.fullmatch(value)
    if m is None:
        return _control(value) or "it is not one"
    if len(m["name"]) > 255:
        return f"its name is {len(m['name'])} characters long"
    return None


ImageReference = Annotated[str, _checked(image_problem, (
    "image reference rule: [registry[:port]/]path[:tag][@sha256:<64 hex>] in ASCII (distribution/reference), "
    "a tag of at most 128 of A-Z a-z 0-9 _ . - starting with a letter, digit or _, e.g. "
    "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"))]

# ------------------------------------------------------------------------------------------------------ free text


def Text(max_length: int, *, multiline: bool = False) -> AfterValidator:
    """Free text: at most ``max_length`` characters, no control characters (newline and tab when ``multiline``)."""
    def check(value: str) -> str | None:
        if len(value) > max_length:
            return f"it is {len(value)} characters long"
        return _control(value, "\n\t" if multiline else "")
    return _checked(check, f"text rule: at most {max_length} characters, no control or bidirectional-override "
                           "characters" + (" (newline and tab are fine)" if multiline else ""))


# ------------------------------------------------------------------------------------------------------ the twin
# A twin profile's name in the store (benchctl.forecast.twin_profile): the spec's `mocker.twin` names one, or auto/off.
PROFILE_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}\Z")


def _twin_choice(value: str) -> str | None:
    return None if value in ("auto", "off") or PROFILE_NAME_PATTERN.match(value) else "it is none of them"


TwinChoice = Annotated[str, _checked(_twin_choice, (
    "twin rule: auto (aiconfigurator's profile of the pool's GPU), off (the mocker's built-in timing) or the name "
    "of a profile in <workspace>/twin/ (lower-case letters, digits, '.', '_', '-'; at most 128, starting with a "
    "letter or digit)"))]
