"""The vendored upstream CRD schemas (tests/data/crds/), validating like an API server with pruning as errors.

What a real API server does with ``fieldValidation=Strict`` (the query parameter benchctl's client sends on
every create and replace): a field that the structural schema does not know is an error instead of being
silently pruned. The transformation is the one described in tests/data/crds/README.md:

* every ``type: object`` with ``properties`` but neither ``additionalProperties`` nor
  ``x-kubernetes-preserve-unknown-fields: true`` gets ``additionalProperties: false``;
* ``x-kubernetes-int-or-string: true`` means integer or string (the schema already says ``anyOf``);
* every other ``x-kubernetes-*`` key is dropped (CEL rules are read and checked by hand in the tests).

``metadata`` is ``{"type": "object"}`` in a CRD schema: the API server validates ObjectMeta itself, so do
:func:`object_meta_problems`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

DATA = Path(__file__).resolve().parent / "data" / "crds"
FILES = {"DynamoGraphDeployment": "dgd-v1beta1.json", "NodePool": "nodepool-v1.json",
         "PodMonitor": "podmonitor-v1.json", "ServiceMonitor": "servicemonitor-v1.json"}
API_VERSIONS = {"DynamoGraphDeployment": "nvidia.com/v1beta1", "NodePool": "karpenter.sh/v1",
                "PodMonitor": "monitoring.coreos.com/v1", "ServiceMonitor": "monitoring.coreos.com/v1"}
NAMESPACED = {"DynamoGraphDeployment": True, "NodePool": False, "PodMonitor": True, "ServiceMonitor": True}
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _structural(node: Any) -> Any:
    if isinstance(node, list):
        return [_structural(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _structural(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out and "type" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def raw_schema(kind: str) -> dict[str, Any]:
    """The vendored ``openAPIV3Schema`` as is (x-kubernetes-* keys included)."""
    result: dict[str, Any] = json.loads((DATA / FILES[kind]).read_text())
    return result


def sha256(kind: str) -> str:
    return hashlib.sha256((DATA / FILES[kind]).read_bytes()).hexdigest()


@cache
def validator(kind: str) -> jsonschema.Draft7Validator:
    schema = _structural(copy.deepcopy(raw_schema(kind)))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def object_meta_problems(obj: dict[str, Any], *, namespaced: bool) -> list[str]:
    """What the API server's ObjectMeta validation would refuse in the fields benchctl sets."""
    meta = obj.get("metadata") or {}
    problems = []
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    if namespaced != ("namespace" in meta):
        problems.append(f"metadata.namespace: {'required' if namespaced else 'not allowed'} for this kind")
    for key, value in (meta.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        if not _LABEL_NAME.match(label) or len(label) > 63 or (prefix and not _DNS1123_SUBDOMAIN.match(prefix)):
            problems.append(f"metadata.labels: key {key!r} is not a qualified name")
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            problems.append(f"metadata.labels.{key}: {value!r} is not a label value")
    allowed = {"name", "namespace", "labels", "annotations", "resourceVersion"}
    problems += [f"metadata.{k}: not set by a client" for k in meta if k not in allowed]
    return problems


def problems(obj: dict[str, Any]) -> list[str]:
    """Every reason the API server would refuse ``obj`` (a kind of :data:`FILES`), strictly."""
    kind = obj.get("kind")
    if kind not in FILES:
        return [f"kind {kind!r}: no vendored schema (known: {sorted(FILES)})"]
    out = [] if obj.get("apiVersion") == API_VERSIONS[kind] else [
        f"apiVersion {obj.get('apiVersion')!r}: the vendored {kind} schema is {API_VERSIONS[kind]}"]
    out += [f"{'.'.join(map(str, e.absolute_path)) or '(object)'}: {e.message}"
            for e in sorted(validator(kind).iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]
    return out + object_meta_problems(obj, namespaced=NAMESPACED[kind])
