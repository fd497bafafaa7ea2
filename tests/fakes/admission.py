"""ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1) evaluated as the API server does, with a real
CEL interpreter (cel-python, ``celpy``).

What the API server does for each write (the Kubernetes docs' "Validating Admission Policy"): every policy
with a binding whose ``matchConstraints.resourceRules`` match the request (API group, version, resource,
operation) and whose ``matchConditions`` all hold is evaluated: its ``variables`` in order (``variables.x``),
then each validation with ``object``, ``oldObject`` (a Job's or DaemonSet's defaulted first, as the API server
defaults before admission: :func:`defaulted`) (null on CREATE; ``object`` null on DELETE), ``request``
(operation, userInfo) and ``params`` (the binding's ``paramRef``; missing with ``parameterNotFoundAction:
Deny``: denied). A validation that is false denies with its message; one that errors (or a match condition
that errors) denies under ``failurePolicy: Fail``. A denial is a 422 Invalid unless the validation names
another ``reason`` (Forbidden: 403), its message ``ValidatingAdmissionPolicy '<p>' with binding '<b>' denied
request: <message>``.

Kubernetes' CEL library adds functions to standard CEL; cel-python has the standard ones (``has``, ``all``,
``exists``, ``filter``, ``map``, ``startsWith``, ``in``, ``size``). The few our policies use that it lacks are
implemented here, after Kubernetes' own definitions: ``string.split(sep)`` (the strings extension,
cel-go ext/strings.go) and ``quantity(string)`` with ``isGreaterThan`` / ``isLessThan`` / ``compareTo``
(k8s.io/apiserver pkg/cel/library/quantity.go, resource.Quantity's suffixes).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes

JSON = dict[str, Any]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18)}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$")


@dataclass(frozen=True)
class Quantity:
    """A Kubernetes resource.Quantity's value (its serialized form: number + binary/decimal suffix or exponent)."""

    value: Decimal

    @staticmethod
    def parse(text: str) -> Quantity:
        m = _QUANTITY.match(str(text))
        if not m:
            raise ValueError(f"quantities must match the regular expression {_QUANTITY.pattern}: {text!r}")
        number, suffix, exponent = Decimal(m.group(1)), m.group(2) or "", m.group(3)
        if exponent is not None:
            return Quantity(number * Decimal(10) ** int(exponent))
        return Quantity(number * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]))


def _split(s: Any, sep: Any) -> celtypes.ListType:
    return celtypes.ListType([celtypes.StringType(x) for x in str(s).split(str(sep))])


def _quantity(s: Any) -> Quantity:
    try:
        return Quantity.parse(str(s))
    except ValueError as err:
        raise celpy.CELEvalError(str(err)) from err


def _compare(a: Any, b: Any) -> int:
    if not isinstance(a, Quantity) or not isinstance(b, Quantity):
        raise celpy.CELEvalError(f"no such overload: {type(a).__name__}.compareTo({type(b).__name__})")
    return (a.value > b.value) - (a.value < b.value)


def _compare_to(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType(_compare(a, b))


def _is_greater_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(a, b) > 0)


def _is_less_than(a: Any, b: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_compare(a, b) < 0)


FUNCTIONS: dict[str, Any] = {
    "split": _split,
    "quantity": _quantity,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
}


class Cel:
    """Compiled CEL programs (cached per expression text, for the process: a program is a pure function of its
    text, evaluated afresh on each activation): a syntax error is an error at once, as when the API server
    refuses a policy whose expressions do not compile."""

    _programs: dict[str, Any] = {}  # shared by every instance: compiling is most of an Admission's set-up

    def __init__(self) -> None:
        self.env = celpy.Environment()

    def program(self, expression: str) -> Any:
        if expression not in self._programs:
            self._programs[expression] = self.env.program(self.env.compile(expression), functions=FUNCTIONS)
        return self._programs[expression]

    def evaluate(self, expression: str, activation: dict[str, Any]) -> Any:
        """The expression's value; a CEL evaluation error raises ``celpy.CELEvalError``."""
        out = self.program(expression).evaluate(activation)
        if isinstance(out, celpy.CELEvalError):
            raise out
        return out


def _default_pod_spec(spec: JSON) -> None:
    """What the API server's defaulting adds to a pod template before admission sees it (k8s.io/kubernetes
    pkg/apis/core/v1/defaults.go at 023f88a: SetDefaults_PodSpec, SetDefaults_Container, SetDefaults_Volume,
    SetDefaults_SecretVolumeSource). An allow-list of pod fields must admit these, or every Job is refused."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
        last = c.get("image", "").rpartition("/")[2]  # name[:tag][@digest]: no tag and no digest is :latest
        tag = "" if "@" in last else (last.rpartition(":")[2] if ":" in last else "latest")
        c.setdefault("imagePullPolicy", "Always" if tag == "latest" else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
    for v in spec.get("volumes", []):
        if set(v) == {"name"}:
            v["emptyDir"] = {}
        if "secret" in v:
            v["secret"].setdefault("defaultMode", 420)


def defaulted(obj: JSON | None) -> JSON | None:
    """A copy of a Job or DaemonSet as validating admission sees it: defaulted (above; a Job's completions,
    parallelism, backoffLimit, completionMode, suspend: pkg/apis/batch/v1/defaults.go; a DaemonSet's
    updateStrategy and revisionHistoryLimit: pkg/apis/apps/v1/defaults.go) and, for a Job, with the selector and
    template labels its create strategy generates (pkg/registry/batch/job/strategy.go). A custom resource (a
    DynamoGraphDeployment) gets only its CRD schema's defaults, none of them under the fields the policies read."""
    import copy

    if obj is None or obj.get("kind") not in ("Job", "DaemonSet"):
        return obj
    out = copy.deepcopy(obj)
    spec = out.setdefault("spec", {})
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    _default_pod_spec(template.setdefault("spec", {}))
    if out["kind"] == "Job":
        for k, v in {"completions": 1, "parallelism": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
                     "suspend": False, "podReplacementPolicy": "TerminatingOrFailed"}.items():
            spec.setdefault(k, v)
        uid = "00000000-0000-0000-0000-000000000000"
        name = out.get("metadata", {}).get("name", "")
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        template["metadata"].setdefault("labels", {}).update({
            "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
            "controller-uid": uid, "job-name": name})
    else:
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        spec.setdefault("revisionHistoryLimit", 10)
    return out


def _matches_rule(rule: JSON, group: str, version: str, plural: str, operation: str) -> bool:
    def has(key: str, value: str) -> bool:
        return bool({"*", value} & set(rule.get(key) or []))

    return (has("apiGroups", group) and has("apiVersions", version) and has("resources", plural)
            and has("operations", operation))


class Admission:
    """The policies and bindings of ``manifests`` and the parameter objects (``params``, ConfigMaps)."""

    def __init__(self, manifests: list[JSON], params: list[JSON] = ()) -> None:  # type: ignore[assignment]
        self.policies = {d["metadata"]["name"]: d for d in manifests if d and d.get("kind") == "ValidatingAdmissionPolicy"}
        self.bindings = [d for d in manifests if d and d.get("kind") == "ValidatingAdmissionPolicyBinding"]
        self.params = {(p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in params}
        self.cel = Cel()
        self._verdicts: dict[str, list[tuple[int, str, str]]] = {}
        for policy in self.policies.values():  # compile everything up front
            spec = policy["spec"]
            for item in [*(spec.get("matchConditions") or []), *(spec.get("variables") or []),
                         *(spec.get("validations") or [])]:
                self.cel.program(item["expression"])

    def admit(self, *, operation: str, api_version: str, plural: str, namespace: str, groups: list[str],
              obj: JSON | None, old: JSON | None, username: str = "benchctl") -> list[tuple[int, str, str]]:
        """Every denial of the request as (HTTP code, reason, message); [] when admitted. A pure function of
        the request and the policies: the same request (many are, as the same campaigns are run in each state)
        is answered from a memo of this Admission's."""
        import json

        key = json.dumps([operation, api_version, plural, namespace, sorted(groups), obj, old, username],
                         sort_keys=True, default=str)
        if key not in self._verdicts:
            self._verdicts[key] = self._admit(operation=operation, api_version=api_version, plural=plural,
                                              namespace=namespace, groups=groups, obj=obj, old=old,
                                              username=username)
        return list(self._verdicts[key])

    def _admit(self, *, operation: str, api_version: str, plural: str, namespace: str, groups: list[str],
               obj: JSON | None, old: JSON | None, username: str) -> list[tuple[int, str, str]]:
        group, _, version = api_version.rpartition("/")
        request = {"operation": operation, "namespace": namespace,
                   "userInfo": {"username": username, "groups": list(groups)},
                   "resource": {"group": group, "version": version, "resource": plural}}
        base = {"object": celpy.json_to_cel(defaulted(obj)), "oldObject": celpy.json_to_cel(defaulted(old)),
                "request": celpy.json_to_cel(request)}
        out: list[tuple[int, str, str]] = []
        for binding in self.bindings:
            policy = self.policies.get(binding["spec"]["policyName"])
            if policy is None:
                continue
            out += self._evaluate(policy, binding, dict(base), group, version, plural, operation)
        return out

    def _evaluate(self, policy: JSON, binding: JSON, activation: dict[str, Any], group: str, version: str,
                  plural: str, operation: str) -> list[tuple[int, str, str]]:
        spec = policy["spec"]
        rules = (spec.get("matchConstraints") or {}).get("resourceRules") or []
        if not any(_matches_rule(r, group, version, plural, operation) for r in rules):
            return []
        pname, bname = policy["metadata"]["name"], binding["metadata"]["name"]
        prefix = f"ValidatingAdmissionPolicy '{pname}' with binding '{bname}' denied request: "
        fail = spec.get("failurePolicy", "Fail") == "Fail"
        try:
            if not all(self.cel.evaluate(c["expression"], activation) for c in spec.get("matchConditions") or []):
                return []
        except celpy.CELEvalError as err:
            return [(422, "Invalid", prefix + f"matchCondition error: {err}")] if fail else []
        ref = binding["spec"].get("paramRef")
        if spec.get("paramKind") and ref:
            param = self.params.get((ref.get("namespace", ""), ref["name"]))
            if param is None:
                if ref.get("parameterNotFoundAction", "Deny") == "Deny":
                    return [(422, "Invalid", prefix + f"no params found for policy binding with `Deny` "
                                                      f"parameterNotFoundAction ({ref.get('namespace')}/{ref['name']})")]
                return []
            activation["params"] = celpy.json_to_cel(param)
        variables: dict[str, Any] = {}
        for v in spec.get("variables") or []:
            activation["variables"] = celtypes.MapType({celtypes.StringType(k): x for k, x in variables.items()})
            with contextlib.suppress(celpy.CELEvalError):  # an expression that reads it errors in turn
                variables[v["name"]] = self.cel.evaluate(v["expression"], activation)
        activation["variables"] = celtypes.MapType({celtypes.StringType(k): x for k, x in variables.items()})
        out = []
        for val in spec.get("validations") or []:
            reason = val.get("reason", "Invalid")
            code = {"Invalid": 422, "Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}[reason]
            try:
                ok = self.cel.evaluate(val["expression"], activation)
            except celpy.CELEvalError as err:
                if fail:
                    out.append((code, reason, prefix + f"expression '{val['expression'][:80]}' resulted in error: {err}"))
                continue
            if not ok:
                out.append((code, reason, prefix + (val.get("message") or f"failed expression: {val['expression']}")))
        if "Deny" not in (binding["spec"].get("validationActions") or []):
            return []
        return out
