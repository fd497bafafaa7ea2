"""Names of the Kubernetes objects benchctl derives from its ids, and the limits the other side puts on them.

Every object name is DNS-1123, at most 63 characters, and ends in a short hash of the campaign id (two
campaigns may share a namespace): ``bc-<parts>-<sha1(campaign_id)[:8]>``, parts too long cut and given a hash
of their own. A DynamoGraphDeployment's name is held to Dynamo's admission webhook as well: on the Grove
pathway (the operator's default) it refuses a component whose DGD name plus lowercased component name is
over 45 characters, the room Grove leaves in a pod's name (ai-dynamo/dynamo
``deploy/operator/internal/webhook/validation``: ``maxCombinedResourceNameLength``; Grove's PodCliqueSet
validator has the same 45).

Pure: the standard library only. The spec refuses an experiment on EKS whose DGD would not fit
(:func:`dgd_name_problem`); ``benchctl.aws.k8s`` names every object with :func:`object_name`.
"""

from __future__ import annotations

import hashlib
import re

# Dynamo's webhook (Grove pathway): len(DGD name) + len(lowercased component name) <= 45 for every component
GROVE_NAME_LIMIT = 45
# Component names inside a DGD, per role (the operator lowercases them into child object names)
COMPONENT = {"frontend": "Frontend", "worker": "Worker", "prefill": "Prefill", "decode": "Decode"}
# Every DGD has a Frontend: no DGD name longer than this can pass, whatever its workers are called. Names of
# experiments that fit are unchanged; a longer one is cut (with a hash), as it never deployed anyway.
DGD_NAME_LIMIT = GROVE_NAME_LIMIT - len(COMPONENT["frontend"])

_DNS1123_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


def _sha1(text: str, n: int) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:n]


def _dns_part(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def object_name(campaign_id: str, parts: tuple[str, ...], limit: int = 63) -> str:
    """``bc-<parts>-<sha1(campaign_id)[:8]>``; parts too long are cut and given a hash of their own."""
    suffix = f"-{_sha1(campaign_id, 8)}"
    body = _dns_part("-".join(parts)) or "x"
    room = limit - len("bc-") - len(suffix)
    if len(body) > room:  # keep it unique: the cut is followed by a hash of the whole
        body = body[: room - 7].rstrip("-") + "-" + _sha1("\n".join(parts), 6)
    name = f"bc-{body}{suffix}"
    assert len(name) <= limit and _DNS1123_RE.match(name), name
    return name


def dgd_name(campaign_id: str, experiment: str) -> str:
    """The DGD of one experiment: at most DGD_NAME_LIMIT (37) characters, so that it and its Frontend fit
    Dynamo's webhook (:data:`GROVE_NAME_LIMIT`); child names (``<name>-frontend`` Service) stay within 63."""
    return object_name(campaign_id, (experiment,), limit=DGD_NAME_LIMIT)


def component_names(roles: list[str]) -> list[str]:
    """One component name per worker group, from their roles in order: ``Worker``/``Prefill``/``Decode``,
    numbered (``Prefill-0``, ``Prefill-1``) when a role repeats."""
    out = []
    for i, role in enumerate(roles):
        n = roles.count(role)
        out.append(COMPONENT[role] if n == 1 else f"{COMPONENT[role]}-{roles[:i].count(role)}")
    return out


def dgd_name_problem(experiment: str, roles: list[str]) -> str | None:
    """Why Dynamo's webhook would refuse the DGD of an experiment with worker groups of these roles (None: it
    fits): its name plus its longest component name over GROVE_NAME_LIMIT, with the longest experiment name
    that would fit."""
    name = dgd_name("campaign", experiment)
    longest = max((c.lower() for c in [COMPONENT["frontend"], *component_names(roles)]), key=len)
    total = len(name) + len(longest)
    if total <= GROVE_NAME_LIMIT:
        return None
    overhead = len(dgd_name("campaign", "x")) - 1  # "bc-" + "-" + the campaign's hash
    return (f"{experiment!r} ({len(experiment)} characters) is too long to deploy on EKS: its DynamoGraphDeployment "
            f"name ({len(name)} characters, bc-<experiment>-<campaign hash>) and its component {longest!r} "
            f"({len(longest)}) make {total}, over the {GROVE_NAME_LIMIT} characters Dynamo's admission webhook allows "
            f"(Grove pod names); give this experiment a name of at most {GROVE_NAME_LIMIT - len(longest) - overhead} "
            "characters")
