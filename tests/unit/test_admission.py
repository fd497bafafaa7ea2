"""The admission policies (stacks/kubernetes/benchctl-admission.yaml) refuse what a hostile spec or a leaked
function identity would write, and admit what benchctl renders.

Each rule is evaluated by a real CEL interpreter (cel-python; tests/fakes/admission.py, which adds the two
Kubernetes CEL library functions the policies use, ``split`` and ``quantity``) on a case it admits and on
cases it refuses, starting from the objects benchctl itself renders. Every manifest under stacks/kubernetes
is valid against Kubernetes' own OpenAPI schema (kubernetes-validate, strict). The fake API server refuses
over HTTP as the real one does (422 naming the policy and the rule), and stores nothing.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml

from benchctl.aws.k8s.admission import (
    DEFAULT_ALLOW_LIST,
    FUNCTION_GROUPS,
    AdmissionAllowList,
    admission_params,
    allow_list_from_ceilings,
    render_params_file,
)
from benchctl.aws.k8s.client import RESOURCES, ApiError, KubeClient
from benchctl.aws.k8s.nodepool import render_nodepool
from benchctl.aws.k8s.render import render_campaign
from benchctl.planning import ceilings
from tests.aws_checks import ADMISSION_FILE, K8S_VERSION, admission, upstream_api
from tests.fakes.admission import Admission, Quantity, defaulted
from tests.fakes.eks_world import CID, FUNCTION_TOKENS, LOAD_IMAGE, NS, example_specs

ROOT = Path(__file__).resolve().parents[2]
POLICIES = list(yaml.safe_load_all(ADMISSION_FILE.read_text()))
SPECS = example_specs()
LABEL = "app.kubernetes.io/managed-by"

JSON = dict[str, Any]


def _rendered(example: str, path_part: str, kind: str) -> JSON:
    return next(copy.deepcopy(o) for p, o in render_campaign(SPECS[example], CID)
                if o["kind"] == kind and path_part in p)


def _dgd_efa() -> JSON:  # disaggregated over EFA: privileged prefill and decode workers
    return _rendered("smoke[managed-nodegroup]", "disagg/", "DynamoGraphDeployment")


def _dgd_agg() -> JSON:
    return _rendered("smoke[managed-nodegroup]", "agg/", "DynamoGraphDeployment")


def _runner_job() -> JSON:
    return _rendered("smoke[managed-nodegroup]", "jobs/concurrency-sweep", "Job")


def _prepull() -> JSON:
    return _rendered("smoke[managed-nodegroup]", "prepull", "DaemonSet")


def _prefetch() -> JSON:  # the model prefetch: the HF token's Secret, the model volume read-write
    return _rendered("auto-mode", "prefetch-job", "Job")


def _smoke() -> JSON:
    return _rendered("smoke[managed-nodegroup]", "agg/smoke-job", "Job")


SERVING, LOAD, POOLS = FUNCTION_GROUPS["Serving"], FUNCTION_GROUPS["Load"], FUNCTION_GROUPS["Pools"]
# who writes each kind of object (stacks/kubernetes/benchctl-rbac.yaml)
WRITER = {_dgd_efa: SERVING, _dgd_agg: SERVING, _runner_job: LOAD, _prepull: POOLS, _prefetch: POOLS,
          _smoke: SERVING}


def _nodepool() -> JSON:
    return render_nodepool(SPECS["smoke[auto-mode]"], CID, "gpu-a100", 2)


def _admit(obj: JSON | None, *, operation: str = "CREATE", old: JSON | None = None,
           groups: tuple[str, ...] = ("benchctl-serving",), adm: Admission | None = None) -> list[str]:
    target = obj if obj is not None else old
    assert target is not None
    r = RESOURCES[target["kind"]]
    return [m for _, _, m in (adm or admission()).admit(
        operation=operation, api_version=target.get("apiVersion", r.api_version), plural=r.plural,
        namespace=target["metadata"].get("namespace", ""), groups=list(groups), obj=obj, old=old)]


def _pod(obj: JSON, component: str | None = None) -> JSON:
    if obj["kind"] == "DynamoGraphDeployment":
        return next(c["podTemplate"]["spec"] for c in obj["spec"]["components"] if c["type"] == component)
    return obj["spec"]["template"]["spec"]


# ----------------------------------------------------------------------------- what benchctl renders


def _writer(path: str, obj: JSON) -> str:
    """The group of the function that writes a rendered object (stacks/kubernetes/benchctl-rbac.yaml): Pools the
    node pools, the image pre-pull and the model prefetch; Load the runner Jobs; Serving the deployment and its
    smoke Job."""
    if obj["kind"] in ("NodePool", "DaemonSet") or path.endswith("prefetch-job.yaml"):
        return FUNCTION_GROUPS["Pools"]
    return FUNCTION_GROUPS["Load"] if "/jobs/" in path else FUNCTION_GROUPS["Serving"]


def _shape(obj: JSON) -> str:
    """An object with what no rule reads left out: its name, its experiment's, the arguments and env values of
    every container and the command of an unprivileged one (the campaign label, which the service-account rule
    reads, and every key, image and security setting are kept). Objects of one shape get one verdict."""
    import json

    obj = copy.deepcopy(obj)
    experiment = obj["metadata"].get("labels", {}).get("benchctl.io/experiment", "")
    obj["metadata"]["name"] = ""
    specs = ([c["podTemplate"]["spec"] for c in obj["spec"]["components"] if "podTemplate" in c]
             if obj["kind"] == "DynamoGraphDeployment" else [obj["spec"]["template"]["spec"]])
    for pod in specs:
        for c in pod.get("containers", []):
            c.pop("args", None)
            for e in c.get("env", []):
                e["value"] = ""
            if not (c.get("securityContext") or {}).get("privileged"):
                c.pop("command", None)
    text = json.dumps(obj, sort_keys=True)
    return text.replace(f'"{experiment}"', '""') if experiment else text


def test_every_manifest_benchctl_renders_for_every_example_is_admitted() -> None:
    adm, n, shapes = admission(), 0, set()
    for name, spec in SPECS.items():
        for path, obj in render_campaign(spec, CID):
            if obj["kind"] not in RESOURCES:
                continue
            n += 1
            key = (_writer(path, obj), _shape(obj))
            if key in shapes:
                continue
            shapes.add(key)
            assert _admit(obj, adm=adm, groups=(_writer(path, obj),)) == [], (name, path)
    assert n > 150 and len(shapes) > 50


def test_the_policies_and_every_manifest_under_stacks_kubernetes_are_valid_kubernetes_objects() -> None:
    files = sorted((ROOT / "stacks" / "kubernetes").glob("*.yaml"))
    assert {f.name for f in files} >= {"benchctl-rbac.yaml", "benchctl-admission.yaml", "benchctl-admission-params.yaml"}
    kinds = []
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises naming the field
            kinds.append(doc["kind"])
    assert kinds.count("ValidatingAdmissionPolicy") == 3 and kinds.count("ValidatingAdmissionPolicyBinding") == 3
    broken = copy.deepcopy(POLICIES[0])
    broken["spec"]["validations"][0]["messsage"] = "typo"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_the_policies_match_exactly_the_function_groups_and_fail_closed() -> None:
    for doc in POLICIES:
        if doc["kind"] == "ValidatingAdmissionPolicy":
            assert doc["spec"]["failurePolicy"] == "Fail"
            (cond,) = doc["spec"]["matchConditions"]
            for group in FUNCTION_GROUPS.values():
                assert f"'{group}'" in cond["expression"]
        else:
            assert doc["spec"]["validationActions"] == ["Deny"]
            policy = next(p for p in POLICIES if p["metadata"]["name"] == doc["spec"]["policyName"])
            if "paramKind" in policy["spec"]:
                assert doc["spec"]["paramRef"]["parameterNotFoundAction"] == "Deny"


def test_the_params_file_is_the_default_allow_list_rendered() -> None:
    assert (ROOT / "stacks" / "kubernetes" / "benchctl-admission-params.yaml").read_text() == render_params_file()
    data = admission_params()["data"]
    # the largest allowed node (p4d.24xlarge: 96 vCPUs, 1152 GiB, 8 GPUs) times cdk.json's 4 nodes per pool
    assert data["maxGpus"] == "32" and data["maxCpu"] == "384" and data["maxMemory"] == "4608Gi"


# ----------------------------------------------------------------------------- workloads: refused cases


def _image(obj: JSON, image: str, component: str | None = "decode") -> JSON:
    _pod(obj, component)["containers"][0]["image"] = image
    return obj


def _init_image(obj: JSON, image: str) -> JSON:
    _pod(obj)["initContainers"] = [{"name": "x", "image": image}]
    return obj


def _set(component: str | None, **fields: Any) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        _pod(obj, component).update(copy.deepcopy(fields))
        return obj
    return change


def _security(component: str | None, ctx: JSON) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        _pod(obj, component)["containers"][0]["securityContext"] = copy.deepcopy(ctx)
        return obj
    return change


def _container(component: str | None, **fields: Any) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        _pod(obj, component)["containers"][0].update(copy.deepcopy(fields))
        return obj
    return change


def _volume(component: str | None, volume: JSON, mount: JSON | None = None) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        pod = _pod(obj, component)
        pod.setdefault("volumes", []).append(copy.deepcopy(volume))
        pod["containers"][0].setdefault("volumeMounts", []).append(
            copy.deepcopy(mount or {"name": volume["name"], "mountPath": "/x"}))
        return obj
    return change


def _model_read_write(obj: JSON) -> JSON:
    for m in _pod(obj)["containers"][0]["volumeMounts"]:
        if m["name"] == "model-cache":
            m.pop("readOnly")
    return obj


def _component_field(**fields: Any) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        obj["spec"]["components"][0].update(copy.deepcopy(fields))
        return obj
    return change


def _template_annotation(component: str | None, key: str, value: str) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        template = (next(c["podTemplate"] for c in obj["spec"]["components"] if c["type"] == component)
                    if obj["kind"] == "DynamoGraphDeployment" else obj["spec"]["template"])
        template.setdefault("metadata", {}).setdefault("annotations", {})[key] = value
        return obj
    return change


def _v1alpha1(obj: JSON) -> JSON:
    """The same payload as the upstream CRD's older version, whose pod specs sit under spec.services: the
    rules reading spec.components see none of them."""
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": obj["metadata"],
            "spec": {"services": {"Worker": {"componentType": "worker", "replicas": 1, "extraPodSpec": {
                "mainContainer": {"image": "docker.io/evil/root:1", "securityContext": {"privileged": True}},
                "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}}}}


HOSTILE_POD: JSON = {"containers": [{"name": "x", "image": "docker.io/evil/root:1",
                                     "securityContext": {"privileged": True}}],
                     "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
PRIVILEGED = {"privileged": True, "capabilities": {"add": ["IPC_LOCK"]}}

# (case, class, the object as its writer renders it, the change, a phrase of the rule that refuses it)
REFUSED: list[tuple[str, str, Callable[[], JSON], Callable[[JSON], JSON], str]] = [
    # images
    ("foreign image in a worker", "images", _dgd_efa, lambda o: _image(o, "docker.io/evil/root:1"), "allowed registries"),
    ("look-alike registry", "images", _dgd_efa, lambda o: _image(o, "nvcr.io/nvidia/ai-dynamo-evil/x:1"),
     "allowed registries"),
    ("foreign image in a runner Job", "images", _runner_job, lambda o: _image(o, "ghcr.io/x/aiperf:1", None),
     "allowed registries"),
    ("foreign pre-pull image", "images", _prepull, lambda o: _image(o, "quay.io/x/y:1", None), "allowed registries"),
    # a DynamoGraphDeployment's other pod templates and versions
    ("checkpoint job pod template", "dgd", _dgd_agg, _component_field(experimental={"checkpoint": {
        "enabled": True, "job": {"podTemplate": {"spec": HOSTILE_POD}}}}), "only the fields benchctl renders"),
    ("frontend sidecar", "dgd", _dgd_agg, _component_field(frontendSidecar={"image": "docker.io/evil/root:1"}),
     "only the fields benchctl renders"),
    ("multinode", "dgd", _dgd_agg, _component_field(multinode={"nodeCount": 2}), "only the fields benchctl renders"),
    ("a spec-level field", "dgd", _dgd_agg, lambda o: (o["spec"].update(env=[{"name": "X", "value": "1"}]), o)[1],
     "only the fields benchctl renders"),
    ("v1alpha1 services with extraPodSpec", "version", _dgd_agg, _v1alpha1, "only as nvidia.com/v1beta1"),
    ("another component type", "dgd", _dgd_agg, lambda o: (o["spec"]["components"].append(
        {**copy.deepcopy(o["spec"]["components"][0]), "name": "Epp", "type": "epp"}), o)[1],
     "frontend, worker, prefill or decode"),
    # pod templates
    ("apparmor unconfined annotation", "templates", _runner_job,
     _template_annotation(None, "container.apparmor.security.beta.kubernetes.io/aiperf", "unconfined"),
     "only labels and the annotation"),
    ("an annotation on a worker", "templates", _dgd_agg, _template_annotation("worker", "x", "y"),
     "only labels and the annotation"),
    # pod specs
    ("hostNetwork", "pod", _dgd_agg, _set("frontend", hostNetwork=True), "hostNetwork, hostPID and hostIPC"),
    ("hostPID", "pod", _runner_job, _set(None, hostPID=True), "hostNetwork, hostPID and hostIPC"),
    ("hostIPC", "pod", _prepull, _set(None, hostIPC=True), "hostNetwork, hostPID and hostIPC"),
    ("nodeName with tolerate-all", "pod", _runner_job,
     _set(None, nodeName="ip-10-0-0-1", tolerations=[{"operator": "Exists"}]), "a pod spec holds only"),
    ("an init container", "pod", _runner_job, lambda o: _init_image(o, LOAD_IMAGE), "a pod spec holds only"),
    ("a foreign init container", "pod", _runner_job, lambda o: _init_image(o, "ghcr.io/x/y:1"), "allowed registries"),
    ("shareProcessNamespace", "pod", _dgd_agg, _set("worker", shareProcessNamespace=True), "a pod spec holds only"),
    ("runtimeClassName", "pod", _prepull, _set(None, runtimeClassName="unconfined"), "a pod spec holds only"),
    ("hostAliases", "pod", _runner_job, _set(None, hostAliases=[{"ip": "10.0.0.1", "hostnames": ["s3.amazonaws.com"]}]),
     "a pod spec holds only"),
    # containers
    ("envFrom a Secret", "containers", _runner_job, _container(None, envFrom=[{"secretRef": {"name": "hf-token"}}]),
     "a container holds only"),
    ("env from a Secret", "containers", _dgd_agg, _container("worker", env=[
        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "other-campaign-key", "key": "k"}}}]),
     "a container holds only"),
    ("hostPort", "containers", _dgd_agg, _container("frontend", ports=[{"containerPort": 80, "hostPort": 80}]),
     "a container holds only"),
    ("a lifecycle hook", "containers", _runner_job, _container(None, lifecycle={"postStart": {"exec": {
        "command": ["sh", "-c", "curl evil"]}}}), "a container holds only"),
    ("subPath", "containers", _runner_job, lambda o: (_pod(o)["containers"][0]["volumeMounts"][0].update(
        subPath="../../"), o)[1], "a container holds only"),
    # volumes
    ("hostPath", "volumes", _dgd_efa, _set("prefill", volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
     "hostPath"),
    ("a Secret volume in a runner Job", "volumes", _runner_job,
     _volume(None, {"name": "s", "secret": {"secretName": "hf-token"}}), "a Secret or a read-write"),
    ("a Secret volume in a worker", "volumes", _dgd_agg,
     _volume("worker", {"name": "s", "secret": {"secretName": "hf-token"}}), "a Secret or a read-write"),
    ("the model volume read-write in a runner Job", "volumes", _runner_job, _model_read_write,
     "a Secret or a read-write"),
    ("a Secret volume in the smoke Job (Serving writes the prefetch too)", "volumes", _smoke,
     _volume(None, {"name": "s", "secret": {"secretName": "hf-token"}}), "a Secret or a read-write"),
    ("the prefetch's volumes in a Job labelled as another step", "volumes", _prefetch,
     lambda o: (o["metadata"]["labels"].update({"benchctl.io/step": "smoke"}), o)[1], "a Secret or a read-write"),
    ("nfs", "volumes", _runner_job, _volume(None, {"name": "n", "nfs": {"server": "10.0.0.1", "path": "/"}}),
     "volumes are emptyDir"),
    ("gitRepo", "volumes", _dgd_agg, _volume("worker", {"name": "g", "gitRepo": {"repository": "https://x/y"}}),
     "volumes are emptyDir"),
    ("inline CSI", "volumes", _prepull, _volume(None, {"name": "c", "csi": {"driver": "secrets-store.csi.k8s.io"}}),
     "volumes are emptyDir"),
    ("a projected service account token", "volumes", _runner_job, _volume(None, {"name": "t", "projected": {
        "sources": [{"serviceAccountToken": {"path": "token", "audience": "sts.amazonaws.com"}}]}}),
     "volumes are emptyDir"),
    ("a configMap", "volumes", _runner_job, _volume(None, {"name": "m", "configMap": {"name": "aws-auth"}}),
     "volumes are emptyDir"),
    # privilege outside the EFA workers, and what the EFA workers may run
    ("privileged frontend", "privilege", _dgd_efa, _security("frontend", {"privileged": True}),
     "only in prefill and decode"),
    ("privileged aggregated worker", "privilege", _dgd_agg, _security("worker", {"privileged": True}),
     "only in prefill and decode"),
    ("capabilities in a worker", "privilege", _dgd_agg, _security("worker", {"capabilities": {"add": ["SYS_ADMIN"]}}),
     "only in prefill and decode"),
    ("privileged runner Job", "privilege", _runner_job, _security(None, {"privileged": True}),
     "only in prefill and decode"),
    ("privileged pre-pull", "privilege", _prepull, _security(None, {"privileged": True}), "only in prefill and decode"),
    ("a privileged worker with another allowed image", "privilege", _dgd_efa,
     lambda o: _image(o, "python:3.12-slim", "prefill"), "runs only the Dynamo runtime"),
    ("a privileged worker with another command", "privilege", _dgd_efa,
     _container("decode", command=["bash", "-c", "nsenter -t 1 -m sh"]), "runs only the Dynamo runtime"),
    ("root in a runner Job", "security", _runner_job, _security(None, {"runAsUser": 0}), "may only tighten"),
    ("a root pod", "security", _runner_job, lambda o: (_pod(o)["securityContext"].update(runAsUser=0), o)[1],
     "may only tighten"),
    ("runAsNonRoot false", "security", _dgd_agg, _security("frontend", {"runAsNonRoot": False}), "may only tighten"),
    ("allowPrivilegeEscalation", "security", _runner_job, _security(None, {"allowPrivilegeEscalation": True}),
     "may only tighten"),
    ("seccomp Unconfined", "security", _prepull, _security(None, {"seccompProfile": {"type": "Unconfined"}}),
     "may only tighten"),
    ("a pod's seccomp Unconfined", "security", _runner_job, lambda o: (_pod(o)["securityContext"].update(
        seccompProfile={"type": "Unconfined"}), o)[1], "may only tighten"),
    ("procMount Unmasked", "security", _runner_job, _security(None, {"procMount": "Unmasked"}), "may only tighten"),
    ("a runner without the restricted profile", "security", _runner_job,
     lambda o: (_pod(o)["containers"][0].pop("securityContext"), o)[1], 'meets Pod Security "restricted"'),
    ("a runner with a capability kept", "security", _runner_job,
     _security(None, {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]}}),
     'meets Pod Security "restricted"'),
    ("a runner pod without its seccomp profile", "security", _runner_job,
     lambda o: (_pod(o)["securityContext"].pop("seccompProfile"), o)[1], 'meets Pod Security "restricted"'),
    ("a smoke Job as its image's user", "security", _smoke, lambda o: (_pod(o).pop("securityContext"), o)[1],
     'meets Pod Security "restricted"'),
    ("a pre-pull keeping its capabilities", "security", _prepull,
     lambda o: (_pod(o)["containers"][0].pop("securityContext"), o)[1], 'meets Pod Security "restricted"'),
    ("a pre-pull pod as its image's user", "security", _prepull,
     lambda o: (_pod(o)["securityContext"].pop("runAsNonRoot"), o)[1], 'meets Pod Security "restricted"'),
    # identities
    ("service account not listed", "accounts", _runner_job, _set(None, serviceAccountName="admin"), "service account"),
    ("deprecated serviceAccount field", "accounts", _runner_job, _set(None, serviceAccount="admin"), "service account"),
    ("service account in a DGD", "accounts", _dgd_agg, _set("worker", serviceAccountName="dynamo-operator"),
     "service account"),
    ("another campaign's service account", "accounts", _runner_job, _set(None, serviceAccountName="other-campaign-1"),
     "service account"),
    ("the campaign's runner account in a worker", "accounts", _dgd_agg,
     lambda o: _set("worker", serviceAccountName=o["metadata"]["labels"]["benchctl.io/campaign"])(o), "service account"),
    ("the campaign's runner account in the prefetch", "accounts", _prefetch,
     lambda o: _set(None, serviceAccountName=o["metadata"]["labels"]["benchctl.io/campaign"])(o), "service account"),
    ("a runner Job mounting its token", "accounts", _runner_job, _set(None, automountServiceAccountToken=True),
     "mounts no service account token"),
    ("a pre-pull with the default token mount", "accounts", _prepull,
     lambda o: (_pod(o).pop("automountServiceAccountToken"), o)[1], "mounts no service account token"),
    # the label everything is deleted by
    ("no managed-by label", "labelled", _runner_job, lambda o: {**o, "metadata": {**o["metadata"], "labels": {
        k: v for k, v in o["metadata"]["labels"].items() if k != "app.kubernetes.io/managed-by"}}}, "labelled"),
]
FIRST_OF_CLASS = {next(c[0] for c in REFUSED if c[1] == kind) for kind in {c[1] for c in REFUSED}}
# a label-chosen service account: a runner Job naming its campaign's account, written by a function that runs no
# runner (Load runs them; Plan runs its preflight Jobs as the runner, to prove its identity before any scaling)
LABEL_CHOSEN = [FUNCTION_GROUPS[f] for f in ("Pools", "Serving", "Teardown", "Sweep")]


@pytest.mark.parametrize(("case", "kind", "make", "change", "rule"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_workload_breaking_a_rule_is_refused_naming_it(case: str, kind: str, make: Callable[[], JSON],
                                                         change: Callable[[JSON], JSON], rule: str) -> None:
    writer = (WRITER[make],)
    assert _admitted_as_rendered(make)  # the rendered object is admitted from its writer ...
    changed = change(make())
    refused = _admit(changed, groups=writer)  # ... and the change refused, naming the rule
    assert any(rule in m for m in refused), refused
    assert all(m.startswith("ValidatingAdmissionPolicy 'benchctl-workloads' with binding 'benchctl-workloads' "
                            "denied request: ") for m in refused)
    if case in FIRST_OF_CLASS and changed["apiVersion"] == make()["apiVersion"]:  # a replace is held the same way
        assert _admit(changed, operation="UPDATE", old=make(), groups=writer) == refused


@functools.cache
def _admitted_as_rendered(make: Callable[[], JSON]) -> bool:
    return _admit(make(), groups=(WRITER[make],)) == []


def test_the_refused_cases_cover_every_class_of_the_policy() -> None:
    classes = {kind for _, kind, *_ in REFUSED}
    assert classes == {"images", "dgd", "version", "templates", "pod", "containers", "volumes", "privilege",
                       "security", "accounts", "labelled"}


@pytest.mark.parametrize("group", LABEL_CHOSEN)
def test_a_runner_account_is_admitted_only_from_the_functions_that_run_runners(group: str) -> None:
    job = _runner_job()
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == job["metadata"]["labels"]["benchctl.io/campaign"]
    assert _admit(job, groups=(LOAD,)) == [] and _admit(job, groups=(FUNCTION_GROUPS["Plan"],)) == []
    refused = _admit(job, groups=(group,))
    assert any("service account" in m for m in refused), refused


def test_the_prefetch_alone_reads_the_token_and_writes_the_model_volume() -> None:
    prefetch = _prefetch()
    pod = _pod(prefetch)
    assert any("secret" in v for v in pod["volumes"])
    assert any(m["name"] == "model-cache" and not m.get("readOnly") for m in pod["containers"][0]["volumeMounts"])
    assert _admit(prefetch, groups=(POOLS,)) == []
    assert _admit(prefetch, groups=(SERVING,)) == []  # Serving starts it when Pools did not
    for group in (LOAD, FUNCTION_GROUPS["Plan"], FUNCTION_GROUPS["Teardown"]):  # from any other function: refused
        assert any("a Secret or a read-write" in m for m in _admit(prefetch, groups=(group,)))
    # and only as the prefetch: the same pod under another step's label is refused (and held to "restricted")
    relabelled = copy.deepcopy(prefetch)
    relabelled["metadata"]["labels"]["benchctl.io/step"] = "smoke"
    assert any("a Secret or a read-write" in m for m in _admit(relabelled, groups=(SERVING,)))
    assert any('meets Pod Security "restricted"' in m for m in _admit(relabelled, groups=(SERVING,)))


def test_the_fake_sees_what_the_api_server_defaults_before_admission() -> None:
    """The allow-lists admit the fields Kubernetes defaults into every pod template before validating admission
    runs (a fake that skipped defaulting would pass an allow-list that refuses every Job on a real cluster)."""
    seen = defaulted(_runner_job())
    assert seen is not None
    pod = seen["spec"]["template"]["spec"]
    assert {"dnsPolicy", "restartPolicy", "schedulerName", "terminationGracePeriodSeconds"} <= set(pod)
    assert {"imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy"} <= set(pod["containers"][0])
    assert seen["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"] == seen["metadata"]["name"]
    assert _admit(_runner_job(), groups=(LOAD,)) == []


def test_privileged_prefill_and_decode_workers_and_the_campaigns_or_a_listed_service_account_are_admitted() -> None:
    dgd = _dgd_efa()
    assert _pod(dgd, "prefill")["containers"][0]["securityContext"]["privileged"] is True
    assert _pod(dgd, "decode")["containers"][0]["securityContext"]["privileged"] is True
    assert _admit(dgd) == []
    # the runner's own campaign's service account (named after the campaign id, its label), from Load
    job = _runner_job()
    assert _admit(_set(None, serviceAccountName=job["metadata"]["labels"]["benchctl.io/campaign"])(job),
                  groups=(LOAD,)) == []
    # a deployment's listed one (none by default: every runner has its campaign's own)
    listed = Admission(list(yaml.safe_load_all(ADMISSION_FILE.read_text())), [admission_params(
        allow_list_from_ceilings(ceilings.default(), service_accounts=("team-runner",),
                                 load_image_registry=LOAD_IMAGE.split("/")[0] + "/"))])
    assert _admit(_set(None, serviceAccountName="team-runner")(_runner_job()), adm=listed, groups=(LOAD,)) == []
    assert _admit(_set(None, serviceAccountName="team-runner")(_runner_job()), groups=(LOAD,)) != []
    assert _admit(_security("frontend", {"privileged": False})(_dgd_agg())) == []
    # what a container may tighten is admitted anywhere
    tight = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
             "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}, "readOnlyRootFilesystem": True}
    assert _admit(_security(None, tight)(_runner_job()), groups=(LOAD,)) == []
    assert _admit(_security("frontend", tight)(_dgd_agg())) == []


def test_requests_of_other_users_are_not_this_policys_business() -> None:
    hostile = _image(_dgd_efa(), "docker.io/evil/root:1")
    assert _admit(hostile, groups=("system:masters", "team-a")) == []  # a cluster admin: not bound
    for group in FUNCTION_GROUPS.values():  # every function's group is
        assert _admit(hostile, groups=(group, "system:authenticated")) != []


def test_without_its_parameters_every_request_is_refused() -> None:
    bare = Admission(POLICIES, [])
    refused = _admit(_runner_job(), adm=bare)
    assert len(refused) == 1 and "no params found" in refused[0]


def test_an_allow_list_without_the_load_image_registry_refuses_the_runner_jobs() -> None:
    without = Admission(POLICIES, [admission_params(DEFAULT_ALLOW_LIST)])
    job = _runner_job()
    assert LOAD_IMAGE in str(job)
    assert any("allowed registries" in m for m in _admit(job, adm=without))


def test_an_allow_list_names_what_is_wrong_with_it() -> None:
    with pytest.raises(ValueError, match=r"image prefix 'nvcr.io/nvidia': must end in '/'.*instance type 'x9.huge'"):
        AdmissionAllowList(image_prefixes=("nvcr.io/nvidia",), instance_types=("x9.huge",), service_accounts=("a",))
    c = dataclasses.replace(ceilings.default(), instance_types={"p5.48xlarge": 98.32}, max_nodes_per_pool=2)
    allow = allow_list_from_ceilings(c, load_image_registry="1.dkr.ecr.us-east-1.amazonaws.com/")
    data = admission_params(allow)["data"]
    assert data["instanceTypes"] == "p5.48xlarge" and data["maxGpus"] == "16" and data["maxCpu"] == "384"
    assert data["imagePrefixes"].endswith(" 1.dkr.ecr.us-east-1.amazonaws.com/")


# ----------------------------------------------------------------------------- NodePools


def _np_set(path: tuple[str, ...], value: Any) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        target = obj
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
        return obj
    return change


def _requirements(extra: list[JSON] | None = None, types: list[str] | None = None) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        reqs = obj["spec"]["template"]["spec"]["requirements"]
        if types is not None:
            for r in reqs:
                if r["key"] == "node.kubernetes.io/instance-type":
                    r["values"] = types
        reqs += extra or []
        return obj
    return change


def _drop_type_requirement(obj: JSON) -> JSON:
    spec = obj["spec"]["template"]["spec"]
    spec["requirements"] = [r for r in spec["requirements"] if r["key"] != "node.kubernetes.io/instance-type"]
    return obj


NP_REFUSED: list[tuple[str, Callable[[JSON], JSON], str]] = [
    ("no label", _np_set(("metadata", "labels"), {}), "must carry app.kubernetes.io/managed-by"),
    ("another team's label", _np_set(("metadata", "labels"), {LABEL: "team-a"}), "must carry"),
    ("a type not allowed", _requirements(types=["p4d.24xlarge", "u-24tb1.metal"]), "only allowed instance types"),
    ("a second requirement on the type", _requirements(extra=[{"key": "node.kubernetes.io/instance-type",
                                                              "operator": "Exists"}]), "only allowed instance types"),
    ("no type requirement", _drop_type_requirement, "only allowed instance types"),
    ("no cpu limit", lambda o: (o["spec"]["limits"].pop("cpu"), o)[1], "cpu, memory and nvidia.com/gpu limits"),
    ("no limits", lambda o: (o["spec"].pop("limits"), o)[1], "cpu, memory and nvidia.com/gpu limits"),
    ("cpu past the ceiling", _np_set(("spec", "limits", "cpu"), "1537"), "within the deployment's ceilings"),
    ("memory past the ceiling", _np_set(("spec", "limits", "memory"), "17Ti"), "within the deployment's ceilings"),
    ("GPUs past the ceiling", _np_set(("spec", "limits", "nvidia.com/gpu"), 512), "within the deployment's ceilings"),
    ("a weight over other NodePools", _np_set(("spec", "weight"), 100), "has no weight and carries the taint"),
    ("no GPU taint", _np_set(("spec", "template", "spec", "taints"), []), "has no weight and carries the taint"),
    ("a taint another pod tolerates", _np_set(("spec", "template", "spec", "taints"), [
        {"key": "team-a", "effect": "NoSchedule"}]), "has no weight and carries the taint"),
    ("another NodeClass", _np_set(("spec", "template", "spec", "nodeClassRef", "name"), "admin-class"),
     "the deployment's NodeClass"),
]


@pytest.mark.parametrize(("case", "change", "rule"), NP_REFUSED, ids=[c[0] for c in NP_REFUSED])
def test_a_nodepool_breaking_a_rule_is_refused_naming_it(case: str, change: Callable[[JSON], JSON], rule: str) -> None:
    assert _admit(_nodepool(), groups=("benchctl-pools",)) == []
    refused = _admit(change(_nodepool()), groups=("benchctl-pools",))
    assert len(refused) == 1 and rule in refused[0], refused
    assert "ValidatingAdmissionPolicy 'benchctl-nodepools'" in refused[0]


def test_limits_at_the_ceiling_are_admitted_in_any_quantity_form() -> None:
    at = _np_set(("spec", "limits"), {"cpu": "384000m", "memory": "4.5Ti", "nvidia.com/gpu": 32})(_nodepool())
    assert _admit(at, groups=("benchctl-pools",)) == []
    over = _np_set(("spec", "limits"), {"cpu": "384001m", "memory": "4.5Ti", "nvidia.com/gpu": 32})(_nodepool())
    assert "within the deployment's ceilings" in _admit(over, groups=("benchctl-pools",))[0]
    garbage = _np_set(("spec", "limits", "memory"), "lots")(_nodepool())  # not a quantity: an error, refused
    assert "resulted in error" in _admit(garbage, groups=("benchctl-pools",))[0]


def test_only_nodepools_we_labelled_may_be_replaced_or_deleted() -> None:
    ours, builtin = _nodepool(), _nodepool()
    builtin["metadata"] = {"name": "general-purpose", "labels": {}}  # Auto Mode's own, or another team's
    assert _admit(None, operation="DELETE", old=ours, groups=("benchctl-teardown",)) == []
    assert _admit(ours, operation="UPDATE", old=ours, groups=("benchctl-pools",)) == []
    refused = _admit(None, operation="DELETE", old=builtin, groups=("benchctl-sweep",))
    assert len(refused) == 1 and "only the NodePools it labelled" in refused[0]
    # relabelling it ours on the way in does not help: the stored object decides
    relabelled = copy.deepcopy(ours)
    relabelled["metadata"]["name"] = "general-purpose"
    refused = _admit(relabelled, operation="UPDATE", old=builtin, groups=("benchctl-pools",))
    assert len(refused) == 1 and "only the NodePools it labelled" in refused[0]


# ----------------------------------------------------------------------------- the evaluator itself


@pytest.mark.parametrize(("text", "value"), [("1Gi", 2**30), ("16384Gi", 16 * 2**40), ("1536", 1536),
                                             ("500m", 0.5), ("1.5k", 1500), ("1e3", 1000), ("2Ki", 2048)])
def test_quantities_parse_as_kubernetes_serializes_them(text: str, value: float) -> None:
    assert Quantity.parse(text).value == Decimal(str(value))


def test_an_expression_the_interpreter_cannot_compile_fails_at_once() -> None:
    broken = copy.deepcopy(POLICIES)
    broken[0]["spec"]["validations"][0]["expression"] = "object.metadata.labels.exists(k, "
    with pytest.raises(celpy.CELParseError):
        Admission(broken, [admission_params()])


# ----------------------------------------------------------------------------- over HTTP


def test_the_fake_api_server_refuses_a_hostile_write_with_422_and_stores_nothing() -> None:
    hostile = _image(_dgd_efa(), "docker.io/evil/root:1")
    with upstream_api() as api:
        kube = KubeClient(api.url, token=lambda: FUNCTION_TOKENS["Serving"])
        with pytest.raises(ApiError) as err:
            kube.create(hostile)
        assert err.value.status == 422 and "allowed registries" in str(err.value)
        assert api.stored("DynamoGraphDeployment", hostile["metadata"]["name"], NS) is None
        assert len(api.refused) == 1
        kube.create(_dgd_efa())  # what benchctl renders goes through
        assert api.stored("DynamoGraphDeployment", hostile["metadata"]["name"], NS) is not None


@pytest.mark.parametrize("image", [
    "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1", "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "a" * 64,
    "python:3.12-slim", "docker.io/library/python:3.12-slim", "library/python:3.12", "public.ecr.aws/aws-cli/aws-cli:2.27.0",
    "nvcr.io/nvidia/ai-dynamox/vllm-runtime:1", "nvcr.io/nvidia/vllm:1", "python/evil:1", "docker.io/python/evil:1",
    "evil.io/nvcr.io/nvidia/ai-dynamo/x:1", "pythonx:1", "public.ecr.aws/aws-cli/aws-cli-evil:1", "ubuntu:24.04",
])
def test_admission_and_the_ceilings_allow_the_same_images(image: str) -> None:
    """The admission policy's prefixes come from the deployment's ceilings (cdk.json): an image string the
    API server admits is one the spec check allows, and one it refuses the spec check refuses too."""
    allowed_by_ceilings = ceilings.image_problem("image", image, ceilings.resolve(None, {})) is None
    admitted = any(image.startswith(p) for p in DEFAULT_ALLOW_LIST.image_prefixes)
    assert admitted == allowed_by_ceilings, (image, admitted, allowed_by_ceilings)


# ------------------------------------------------------------------------------------------ service accounts


def _runner_account() -> JSON:
    from benchctl.aws.runner_identity import service_account_object

    return service_account_object(CID, NS)


SA_REFUSED: list[tuple[str, Callable[[JSON], JSON], str]] = [
    ("named after another campaign", lambda o: (o["metadata"].update(name="other-campaign-1"), o)[1],
     "named after its campaign id"),
    ("the namespace's default account re-made", lambda o: (o["metadata"].update(name="default"), o)[1],
     "named after its campaign id"),
    ("no campaign label", lambda o: (o["metadata"]["labels"].pop("benchctl.io/campaign"), o)[1],
     "named after its campaign id"),
    ("no managed-by label", lambda o: (o["metadata"]["labels"].pop(LABEL), o)[1], "labelled"),
    ("an IRSA role of the writer's choice", lambda o: (o["metadata"].update(
        annotations={"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/admin"}), o)[1],
     "holds only automountServiceAccountToken"),
    ("its API token mounted", lambda o: {**o, "automountServiceAccountToken": True},
     "holds only automountServiceAccountToken"),
    ("a token Secret", lambda o: {**o, "secrets": [{"name": "dynamo-operator-token"}]},
     "holds only automountServiceAccountToken"),
    ("an image pull Secret", lambda o: {**o, "imagePullSecrets": [{"name": "nvcr"}]},
     "holds only automountServiceAccountToken"),
]


@pytest.mark.parametrize(("case", "change", "rule"), SA_REFUSED, ids=[c[0] for c in SA_REFUSED])
def test_a_service_account_other_than_a_campaigns_runner_account_is_refused(
        case: str, change: Callable[[JSON], JSON], rule: str) -> None:
    """Every ServiceAccount a function may create is a campaign's runner account as Plan makes it (named after
    its campaign, no token, no annotation): a stolen function identity cannot mint one that carries an IRSA
    role, a token Secret or another name."""
    plan = (FUNCTION_GROUPS["Plan"],)
    assert _admit(_runner_account(), groups=plan) == []
    refused = _admit(change(_runner_account()), groups=plan)
    assert any(rule in m for m in refused), refused
    assert all("'benchctl-service-accounts'" in m for m in refused)
