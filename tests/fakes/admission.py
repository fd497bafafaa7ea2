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

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import celpy
import re2
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


def _short_circuit(operator: str, absorbing: bool) -> Any:
    """``a || b`` / ``a && b`` that skips ``b`` when ``a`` alone decides (true / false). CEL's logical operators are
    commutative over errors (cel-spec langdef.md "Logical Operators": ``true || error`` is true, whichever side
    errs), so the result is the one cel-python's both-sides evaluation gives; only the work differs (a policy's
    guards then spare every later evaluation, as cel-go's evaluation does)."""
    original = getattr(celpy.evaluation.Evaluator, operator)

    def evaluate(self: Any, tree: Any) -> Any:
        if len(tree.children) != 2:
            return original(self, tree)
        left = self.visit(tree.children[0])
        if isinstance(left, (bool, celtypes.BoolType)) and bool(left) is absorbing:
            return celtypes.BoolType(absorbing)
        right = self.visit(tree.children[1])
        func = self.activation.resolve_function("_||_" if absorbing else "_&&_")
        try:
            return func(left, right)
        except TypeError as ex:
            return celpy.CELEvalError(f"found no matching overload for {'_||_' if absorbing else '_&&_'} applied to "
                                      f"'({type(left)}, {type(right)})'", ex.__class__, ex.args, tree=tree)

    return evaluate


celpy.evaluation.Evaluator.conditionalor = _short_circuit("conditionalor", True)  # type: ignore[method-assign]
celpy.evaluation.Evaluator.conditionaland = _short_circuit("conditionaland", False)  # type: ignore[method-assign]


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern)


def _matches(text: Any, pattern: Any) -> Any:
    """CEL's ``matches`` as cel-python defines it (``re2.search``: RE2, the API server's engine, a partial match),
    with each pattern compiled once."""
    try:
        return celtypes.BoolType(_regex(str(pattern)).search(str(text)) is not None)
    except re2.error as ex:
        return celpy.CELEvalError("match error", ex.__class__, ex.args)


FUNCTIONS: dict[str, Any] = {
    "matches": _matches,
    "split": _split,
    "quantity": _quantity,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
}


class _LazyVariables(celtypes.MapType):
    """A policy's ``variables``, each evaluated when an expression first reads it and then kept for the request,
    as the API server does (k8s.io/apiserver pkg/admission/plugin/cel: "variables are lazily evaluated"; the
    ValidatingAdmissionPolicy docs: "a variable is evaluated at most once per request, when first used"). A
    variable whose expression errs is absent: an expression reading it errs in turn (``no such member``)."""

    def __init__(self, expressions: dict[str, str], cel: Cel, activation: dict[str, Any]) -> None:
        super().__init__({})
        self._expressions, self._cel, self._activation = expressions, cel, activation

    def __getitem__(self, key: Any) -> Any:
        name = celtypes.StringType(str(key))
        if not dict.__contains__(self, name):
            if str(key) not in self._expressions:
                raise KeyError(key)
            try:
                value = self._cel.evaluate(self._expressions[str(key)], {**self._activation, "variables": self})
            except celpy.CELEvalError:
                raise KeyError(key) from None
            dict.__setitem__(self, name, value)
        return dict.__getitem__(self, name)

    def __contains__(self, key: object) -> bool:
        return str(key) in self._expressions


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
              obj: JSON | None, old: JSON | None, username: str = "benchctl",
              stored: Callable[[str, str], JSON | None] | None = None) -> list[tuple[int, str, str]]:
        """Every denial of the request as (HTTP code, reason, message); [] when admitted. A pure function of
        the request, the policies and their parameters: the same request (many are, as the same campaigns are
        run in each state) is answered from a memo of this Admission's. ``stored`` (namespace, name -> the
        ConfigMap as the API server stores it now, or None): parameters read live, as the API server reads a
        binding's paramRef at each request (a parameter another request changes, the runner grants); a name it
        does not know falls back to the ``params`` given at construction."""
        import json

        live = self._live_params(stored)
        key = json.dumps([operation, api_version, plural, namespace, sorted(groups), obj, old, username,
                          sorted(live.items(), key=str)], sort_keys=True, default=str)
        if key not in self._verdicts:
            self._verdicts[key] = self._admit(operation=operation, api_version=api_version, plural=plural,
                                              namespace=namespace, groups=groups, obj=obj, old=old,
                                              username=username, params={**self.params, **live})
        return list(self._verdicts[key])

    def _live_params(self, stored: Callable[[str, str], JSON | None] | None) -> dict[tuple[str, str], JSON]:
        """The bindings' parameter objects that ``stored`` holds now (ConfigMaps: their data only matters)."""
        if stored is None:
            return {}
        out = {}
        for binding in self.bindings:
            ref = binding["spec"].get("paramRef")
            if ref:
                where = (ref.get("namespace", ""), ref["name"])
                found = stored(*where)
                if found is not None:
                    out[where] = {"apiVersion": found.get("apiVersion", "v1"), "kind": found.get("kind", "ConfigMap"),
                                  "metadata": {k: found["metadata"][k] for k in ("name", "namespace")
                                               if k in found["metadata"]},
                                  **({"data": found["data"]} if "data" in found else {})}
        return out

    def _admit(self, *, operation: str, api_version: str, plural: str, namespace: str, groups: list[str],
               obj: JSON | None, old: JSON | None, username: str,
               params: dict[tuple[str, str], JSON] | None = None) -> list[tuple[int, str, str]]:
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
            out += self._evaluate(policy, binding, dict(base), group, version, plural, operation,
                                  self.params if params is None else params)
            if out and self._stop_at_first:
                break
        return out

    def first_denial(self, *, operation: str, api_version: str, plural: str, namespace: str, groups: list[str],
                     obj: JSON | None, old: JSON | None = None) -> str | None:
        """The message of the first validation that denies the request (None: admitted), without evaluating the
        rest: the same verdict as :meth:`admit` (a request is refused when any validation denies it), for
        callers that ask only whether and by which rule (the mutation suite)."""
        self._stop_at_first = True
        try:
            out = self._admit(operation=operation, api_version=api_version, plural=plural, namespace=namespace,
                              groups=groups, obj=obj, old=old, username="benchctl")
        finally:
            self._stop_at_first = False
        return out[0][2] if out else None

    _stop_at_first = False

    def _evaluate(self, policy: JSON, binding: JSON, activation: dict[str, Any], group: str, version: str,
                  plural: str, operation: str, params: dict[tuple[str, str], JSON]) -> list[tuple[int, str, str]]:
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
            param = params.get((ref.get("namespace", ""), ref["name"]))
            if param is None:
                if ref.get("parameterNotFoundAction", "Deny") == "Deny":
                    return [(422, "Invalid", prefix + f"no params found for policy binding with `Deny` "
                                                      f"parameterNotFoundAction ({ref.get('namespace')}/{ref['name']})")]
                return []
            activation["params"] = celpy.json_to_cel(param)
        activation["variables"] = _LazyVariables(
            {v["name"]: v["expression"] for v in spec.get("variables") or []}, self.cel, activation)
        out = []
        for val in spec.get("validations") or []:
            reason = val.get("reason", "Invalid")
            code = {"Invalid": 422, "Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}[reason]
            try:
                ok = self.cel.evaluate(val["expression"], activation)
            except celpy.CELEvalError as err:
                if fail:
                    out.append((code, reason, prefix + f"expression '{val['expression'][:80]}' resulted in error: {err}"))
                    if self._stop_at_first:
                        break
                continue
            if not ok:
                out.append((code, reason, prefix + (val.get("message") or f"failed expression: {val['expression']}")))
                if self._stop_at_first:
                    break
        if "Deny" not in (binding["spec"].get("validationActions") or []):
            return []
        return out
