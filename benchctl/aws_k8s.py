"""The serving, load and smoke ports on EKS, plus the preflight check: Kubernetes objects we render.

* ``EksServing`` (ServingPort): the experiment's DynamoGraphDeployment. Ready when its ``Ready``
  condition is True AND ``status.observedGeneration`` caught up with ``metadata.generation``
  (FACTS); ``status.state == failed`` is a ServingFailed naming the conditions. Teardown deletes, by
  our labels only, the experiment's Jobs and then its deployment; ``remaining`` says what is still
  going away (the state machine comes back until nothing is, bounded); repeating it is harmless.
* ``EksLoad`` (LoadPort): one Job per AIPerf step (its artifacts go to the step's raw S3 prefix);
  ``poll`` maps Job conditions to an exit code; ``failure_logs`` collects the pods' log tails;
  ``stop`` deletes the Job (Foreground: its pods go with it).
* ``EksSmoke``: a short Job of a few chat requests plus a ``/metrics`` GET against the frontend;
  started by SmokeTest, polled by CheckSmoke.
* ``preflight``: before anything is scaled, every prerequisite checked and each missing one named,
  including one short CPU Job per image (AIPerf's version, the uploader's AWS CLI and identity).

Objects are only created from ``benchctl.k8s.render`` (so they carry our labels) and only selected and
deleted through our own labels (``render.selection``: campaign, experiment, step; never managed-by, which
Grove overwrites on pods): nothing of anybody else's is touched. Every create and replace is sent with
``fieldValidation=Strict`` (the client's), so a field the API server does not know fails loudly.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from typing import Any

from benchctl.errors import NotReadyYet, ServingFailed
from benchctl.k8s.client import ApiError, Conflict, KubeClient, NotFound
from benchctl.k8s.render import (
    HF_TOKEN_KEY,
    KVBM_METRICS_PORT,
    LABEL_CAMPAIGN,
    LABEL_ROLE,
    LOAD_IMAGE_PLACEHOLDER,
    WORKER_SYSTEM_PORT,
    aiperf_image,
    dgd_name,
    frontend_service_url,
    render_dgd,
    render_load_job,
    render_prefetch_job,
    render_preflight_job,
    render_smoke_job,
    selection,
    selector,
    uses_kvbm,
)
from benchctl.ports import JSON, DeploymentSpec
from benchctl.spec import CampaignSpec

DGD = ("nvidia.com/v1beta1", "DynamoGraphDeployment")
JOB = ("batch/v1", "Job")
KubeSource = KubeClient | Callable[[], KubeClient]
SpecSource = CampaignSpec | Callable[[], CampaignSpec]
_RAW = re.compile(r"/campaign_id=([^/]+)/experiment=([^/]+)/step_id=([^/]+)/?$")


def _resolve(source: Any) -> Any:
    return source() if callable(source) and not isinstance(source, KubeClient | CampaignSpec) else source


class _Base:
    def __init__(self, kube: KubeSource, spec: SpecSource, campaign_id: str, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self._kube, self._spec, self.campaign_id = kube, spec, campaign_id
        self.clock, self.sleep = clock, sleep

    @property
    def kube(self) -> KubeClient:
        kube: KubeClient = _resolve(self._kube)
        return kube

    @property
    def spec(self) -> CampaignSpec:
        spec: CampaignSpec = _resolve(self._spec)
        return spec

    @property
    def namespace(self) -> str:
        return self.spec.kubernetes.namespace

    def _ours(self, obj: JSON) -> bool:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_CAMPAIGN) == self.campaign_id

    def _left(self, kinds: tuple[tuple[str, str], ...], sel: str) -> list[str]:
        """Our objects of these kinds and our pods still matching ``sel`` (deleted ones go away in a while)."""
        left = []
        for api_version, kind in kinds:
            for o in self.kube.list(api_version, kind, self.namespace, sel):
                if self._ours(o):
                    with contextlib.suppress(NotFound):  # read it again: gone between the list and now
                        self.kube.get(api_version, kind, o["metadata"]["name"], self.namespace)
                        left.append(f"{kind}/{o['metadata']['name']}")
        return left + [f"Pod/{o['metadata']['name']}" for o in self.kube.list("v1", "Pod", self.namespace, sel)]


def _conditions(obj: JSON) -> dict[str, str]:
    return {str(c.get("type")): str(c.get("status")) for c in (obj.get("status") or {}).get("conditions") or []}


class EksServing(_Base):
    def deploy(self, dspec: DeploymentSpec) -> JSON:
        """Apply the experiment's DynamoGraphDeployment, or, with ``kubernetes.prefetch_model``, first
        the campaign's model prefetch Job (once per campaign; the deployment follows when it is done)."""
        experiment = dspec.deployment_id
        url = frontend_service_url(self.spec, self.campaign_id, experiment)
        state = {"deployment_id": experiment, "name": dgd_name(self.campaign_id, experiment),
                 "namespace": self.namespace, "url": url, "metrics_urls": [f"{url}/metrics"],
                 "model": self.spec.model.name, "engine": "eks"}
        if self.spec.kubernetes.prefetch_model:
            job = render_prefetch_job(self.spec, self.campaign_id)
            with contextlib.suppress(Conflict):  # another experiment of this campaign started it
                self.kube.create(job)
            return {**state, "prefetch_job": job["metadata"]["name"]}
        self._apply(experiment)
        return state

    def _apply(self, experiment: str) -> None:
        obj = render_dgd(self.spec, self.campaign_id, experiment)
        name = obj["metadata"]["name"]
        try:
            self.kube.create(obj)
        except Conflict:  # redelivered event, or somebody else's object with our name
            existing = self.kube.get(*DGD, name, self.namespace)
            if not self._ours(existing):
                raise ServingFailed(f"DynamoGraphDeployment {self.namespace}/{name} exists and is not this "
                                    f"campaign's ({LABEL_CAMPAIGN} missing or different); refusing to touch it") from None

    def _prefetch_done(self, state: JSON) -> bool:
        """True once the prefetch Job succeeded (then the deployment is applied, idempotently)."""
        name = state["prefetch_job"]
        load = EksLoad(self._kube, self._spec, self.campaign_id)
        jstate = {"name": name, "namespace": state["namespace"],
                  "pod_selector": selector(selection(self.campaign_id, step_id="prefetch"))}
        code = load.poll(jstate)
        if code is None:
            return False
        if code != 0:
            logs = load.failure_logs(jstate)
            raise ServingFailed(f"model prefetch Job {name} failed: "
                                + "; ".join(f"{k}: {v[-400:]}" for k, v in logs.items()))
        try:
            self.kube.get(*DGD, state["name"], state["namespace"])
        except NotFound:
            self._apply(state["deployment_id"])
        return True

    def _get(self, state: JSON) -> JSON:
        try:
            return self.kube.get(*DGD, state["name"], state["namespace"])
        except NotFound:
            raise ServingFailed(f"DynamoGraphDeployment {state['namespace']}/{state['name']} is gone") from None

    def probe_ready(self, state: JSON) -> bool:
        if state.get("prefetch_job") and not self._prefetch_done(state):
            return False
        dgd = self._get(state)
        status = dgd.get("status") or {}
        if status.get("state") == "failed":
            raise ServingFailed(f"DynamoGraphDeployment {state['name']} failed: conditions {status.get('conditions')}")
        caught_up = int(status.get("observedGeneration", -1)) >= int(dgd["metadata"].get("generation", 0))
        return caught_up and _conditions(dgd).get("Ready") == "True"

    def check_alive(self, state: JSON) -> None:
        status = self._get(state).get("status") or {}
        if status.get("state") == "failed":
            raise ServingFailed(f"DynamoGraphDeployment {state['name']} failed during the load: "
                                f"{status.get('conditions')}")

    def versions(self, state: JSON) -> JSON:
        """Image digests actually running (the pods' ``imageID``), per container image; with a model
        prefetch, its own duration from the Job's start and completion times (apart from start-up)."""
        sel = selector(selection(self.campaign_id, state["deployment_id"]))
        digests: dict[str, str] = {}
        for pod in self.kube.list("v1", "Pod", state["namespace"], sel):
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                if cs.get("image") and cs.get("imageID"):
                    digests[str(cs["image"])] = str(cs["imageID"])
        out: JSON = {"images": digests}
        if state.get("prefetch_job"):
            with contextlib.suppress(NotFound):
                st = self.kube.get(*JOB, state["prefetch_job"], state["namespace"]).get("status") or {}
                out["model_prefetch"] = {"job": state["prefetch_job"], "started": st.get("startTime"),
                                         "completed": st.get("completionTime"),
                                         "seconds": _seconds_between(st.get("startTime"), st.get("completionTime"))}
        return out

    def metrics_urls(self, state: JSON) -> dict[str, str]:
        """Every metrics endpoint of the experiment, by source name: the frontend (through its Service;
        AIPerf scrapes it by itself as the ``--url``) and, per Running worker pod found by our labels, its
        system port's ``/metrics`` (vLLM and Dynamo worker series) and, where KVBM runs, KVBM's exporter."""
        out = {"frontend": f"{state['url']}/metrics"}
        exp = self.spec.experiment(state["deployment_id"])
        sel = selector(selection(self.campaign_id, state["deployment_id"]))
        for pod in sorted(self.kube.list("v1", "Pod", state["namespace"], sel), key=lambda o: o["metadata"]["name"]):
            role = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
            status = pod.get("status") or {}
            ip = status.get("podIP")
            if role not in ("worker", "prefill", "decode") or status.get("phase") != "Running" or not ip:
                continue
            host = f"[{ip}]" if ":" in ip else ip
            name = pod["metadata"]["name"]
            out[f"{role}/{name}"] = f"http://{host}:{WORKER_SYSTEM_PORT}/metrics"
            if uses_kvbm(exp, role):
                out[f"kvbm/{name}"] = f"http://{host}:{KVBM_METRICS_PORT}/metrics"
        return out

    def teardown(self, state: JSON) -> JSON:
        experiment = state["deployment_id"]
        sel = selector(selection(self.campaign_id, experiment))
        removed: JSON = {"jobs": [], "deployments": []}
        for kind, key in ((JOB, "jobs"), (DGD, "deployments")):  # load first, then serving
            for obj in self.kube.list(*kind, self.namespace, sel):
                name = obj["metadata"]["name"]
                if self._ours(obj) and self.kube.delete(*kind, name, self.namespace):
                    removed[key].append(name)
        return removed

    def remaining(self, state: JSON) -> list[str]:
        """What of the experiment is still there after ``teardown`` (objects being deleted, their pods).
        Never waits: the state machine polls this (TeardownExperiment comes back until it is empty)."""
        return self._left((JOB, DGD), selector(selection(self.campaign_id, state["deployment_id"])))


def _seconds_between(start: Any, end: Any) -> float | None:
    from datetime import datetime

    try:
        return (datetime.fromisoformat(str(end).replace("Z", "+00:00"))
                - datetime.fromisoformat(str(start).replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return None


def _raw_parts(artifact_dir: str) -> tuple[str, str, str]:
    m = _RAW.search(artifact_dir)
    if not m:
        raise ValueError(f"{artifact_dir!r} is not a step's raw area (…/campaign_id=C/experiment=E/step_id=S/)")
    return m.group(1), m.group(2), m.group(3)


class EksLoad(_Base):
    def launch(self, argv: list[str], artifact_dir: str, job_id: str) -> JSON:
        campaign_id, experiment, step_id = _raw_parts(artifact_dir)
        if campaign_id != self.campaign_id:
            raise ValueError(f"{artifact_dir}: campaign {campaign_id!r} is not {self.campaign_id!r}")
        input_uri = next((a for a in argv if a.startswith("s3://") and "/inputs/" in a), None)
        job = render_load_job(self.spec, campaign_id, experiment, step_id, argv, artifact_dir, input_s3_uri=input_uri)
        name = job["metadata"]["name"]
        try:
            self.kube.create(job)
        except Conflict:
            if not self._ours(self.kube.get(*JOB, name, self.namespace)):
                raise ValueError(f"Job {self.namespace}/{name} exists and is not this campaign's") from None
        return {"job_id": job_id, "name": name, "namespace": self.namespace, "artifact_dir": artifact_dir,
                "pod_selector": selector(selection(campaign_id, experiment, step_id))}

    def poll(self, state: JSON) -> int | None:
        try:
            job = self.kube.get(*JOB, state["name"], state["namespace"])
        except NotFound:
            return 1  # gone before finishing: deleted or expired; nothing to wait for
        cond = _conditions(job)
        st = job.get("status") or {}
        if cond.get("Complete") == "True" or int(st.get("succeeded") or 0) > 0:
            return 0
        if cond.get("Failed") == "True" or int(st.get("failed") or 0) > 0:
            return 1
        return None

    def failure_logs(self, state: JSON, tail_lines: int = 100) -> JSON:
        """The last log lines of every container of the Job's pods, found by our labels (``pod_selector``;
        for a state recorded without it, the ``benchctl.io/`` labels of the Job's own pod template)."""
        out: JSON = {}
        try:
            sel = state.get("pod_selector") or self._template_selector(state)
            pods = self.kube.list("v1", "Pod", state["namespace"], sel)
            for pod in pods:
                name = pod["metadata"]["name"]
                spec = pod.get("spec") or {}
                containers = [c["name"] for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
                for c in containers or [None]:
                    try:
                        text = self.kube.logs(name, state["namespace"], c, tail_lines)
                    except ApiError:
                        continue
                    if text:
                        out[f"{name}/{c or 'default'}"] = text
        except ApiError as err:
            out["error"] = str(err)
        return out

    def _template_selector(self, state: JSON) -> str:
        job = self.kube.get(*JOB, state["name"], state["namespace"])
        tmpl = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
        ours = {k: v for k, v in (tmpl.get("labels") or {}).items() if k.startswith("benchctl.io/")}
        if LABEL_CAMPAIGN not in ours:
            raise ApiError(0, "NotOurs", f"Job {state['name']}: its pod template carries no {LABEL_CAMPAIGN} label")
        return selector(ours)

    def stop(self, state: JSON) -> None:
        self.kube.delete(*JOB, state["name"], state["namespace"])


class EksSmoke(_Base):
    """A short Job of a few chat requests plus a ``/metrics`` GET against the frontend: started here,
    polled by CheckSmoke (never waited for in a function)."""

    def start(self, state: JSON, n: int, max_tokens: int) -> JSON:
        job = render_smoke_job(self.spec, self.campaign_id, state["deployment_id"], state["url"])
        with contextlib.suppress(Conflict):  # a redelivered event: follow the Job already there
            self.kube.create(job)
        return {"name": job["metadata"]["name"], "namespace": self.namespace, "requests": n, "max_tokens": max_tokens,
                "pod_selector": selector(selection(self.campaign_id, state["deployment_id"], "smoke"))}

    def poll(self, job: JSON) -> int | None:
        return EksLoad(self._kube, self._spec, self.campaign_id).poll(job)

    def failure_logs(self, job: JSON) -> JSON:
        return EksLoad(self._kube, self._spec, self.campaign_id).failure_logs(job)


# A pod that will never start: name the reason at once instead of waiting for the Job's deadline.
_STUCK = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
          "CreateContainerError", "RunContainerError"}


def _check_objects(spec: CampaignSpec, kube: KubeClient) -> list[str]:
    """The namespace, CRDs, NodeClass, secret (and its key), volume claim and service account."""
    k = spec.kubernetes
    auto_mode = any(p.provider == "auto-mode" for p in spec.pools)
    checks: list[tuple[tuple[str, str, str, str | None], str]] = [
        (("v1", "Namespace", k.namespace, None), f"namespace {k.namespace!r}"),
        (("apiextensions.k8s.io/v1", "CustomResourceDefinition", "dynamographdeployments.nvidia.com", None),
         "CRD dynamographdeployments.nvidia.com (install the dynamo-platform chart)"),
        (("v1", "Secret", k.hf_token_secret, k.namespace), f"secret {k.namespace}/{k.hf_token_secret} (HF token)"),
        (("v1", "PersistentVolumeClaim", k.model_pvc, k.namespace), f"volume claim {k.namespace}/{k.model_pvc} (model cache)"),
        (("v1", "ServiceAccount", k.load_service_account, k.namespace),
         f"service account {k.namespace}/{k.load_service_account} (the load Jobs' identity; without it their "
         "pods are never created and each Job fails only at its deadline)"),
    ]
    if auto_mode:
        checks += [
            (("apiextensions.k8s.io/v1", "CustomResourceDefinition", "nodepools.karpenter.sh", None),
             "CRD nodepools.karpenter.sh (EKS Auto Mode)"),
            (("eks.amazonaws.com/v1", "NodeClass", k.node_class, None),
             f"NodeClass {k.node_class!r} (EKS Auto Mode, kubernetes.node_class; our NodePools launch nodes of it)"),
        ]
    problems: list[str] = []
    found: dict[str, JSON] = {}
    for (api_version, kind, name, ns), what in checks:
        try:
            found[kind] = kube.get(api_version, kind, name, ns)
        except NotFound:
            problems.append(f"missing {what}")
        except ApiError as err:
            problems.append(f"cannot read {what}: {err}")
    secret = found.get("Secret")
    if secret is not None and HF_TOKEN_KEY not in {**(secret.get("data") or {}), **(secret.get("stringData") or {})}:
        problems.append(f"secret {k.namespace}/{k.hf_token_secret} has no key {HF_TOKEN_KEY!r} (keys: "
                        f"{sorted(secret.get('data') or {})}); workers and the model prefetch read the token from it")
    pvc = found.get("PersistentVolumeClaim")
    if pvc is not None:
        modes = (pvc.get("status") or {}).get("accessModes") or (pvc.get("spec") or {}).get("accessModes") or []
        if modes and "ReadWriteMany" not in modes:
            problems.append(f"volume claim {k.namespace}/{k.model_pvc} is {modes}, not ReadWriteMany: the workers "
                            "of one experiment run on several nodes at once and all mount it")
    return problems


def _check_gpu_drivers(spec: CampaignSpec, kube: KubeClient) -> list[str]:
    """GPU nodes of the spec's pools (or of their instance types) that report an NVIDIA driver older than
    ``kubernetes.min_gpu_driver`` (what the Dynamo image's CUDA needs). Only nodes that exist and carry GPU
    feature discovery's driver label can be judged here; the pools' readiness checks their new nodes again."""
    from benchctl.eks_pools import old_drivers

    need = spec.kubernetes.min_gpu_driver
    problems: list[str] = []
    for pool in spec.pools:
        if pool.provider == "local":
            continue
        sel = (f"eks.amazonaws.com/nodegroup={pool.nodegroup}" if pool.provider == "managed-nodegroup"
               else f"node.kubernetes.io/instance-type={pool.instance_type}")
        try:
            nodes = kube.list("v1", "Node", label_selector=sel)
        except ApiError as err:
            problems.append(f"pool {pool.name}: cannot list its nodes to read their GPU driver: {err}")
            continue
        problems += [f"pool {pool.name}: node {old}: the Dynamo image {spec.kubernetes.dynamo_image} needs NVIDIA "
                     f"driver {need} or newer (kubernetes.min_gpu_driver); use a newer GPU AMI"
                     for old in old_drivers(nodes, need)]
    return problems


def _pod_problem(pod: JSON) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _STUCK:
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip()
    return None


def check_images(spec: CampaignSpec, kube: KubeClient, campaign_id: str) -> list[str]:
    """One short CPU Job per image (AIPerf's version; the uploader's AWS CLI and its identity), created
    once; NotReadyYet while one runs; the problems of the failed ones, named with their logs; the Jobs are
    deleted once judged."""
    if aiperf_image(spec) == LOAD_IMAGE_PLACEHOLDER:
        return ["kubernetes.aiperf_image is not set and this deployment has no load image (BENCHCTL_LOAD_IMAGE, "
                "set by the control-plane stack): give an image holding aiperf 0.13.0"]
    k = spec.kubernetes
    load = EksLoad(kube, spec, campaign_id)
    problems: list[str] = []
    running: list[str] = []
    judged: list[str] = []
    for check in ("aiperf", "uploader"):
        job = render_preflight_job(spec, campaign_id, check)
        name = job["metadata"]["name"]
        image = job["spec"]["template"]["spec"]["containers"][0]["image"]
        with contextlib.suppress(Conflict):  # Plan retried: follow the Job already there
            kube.create(job)
        jstate = {"name": name, "namespace": k.namespace,
                  "pod_selector": selector(selection(campaign_id, step_id=f"preflight-{check}"))}
        code = load.poll(jstate)
        stuck = None
        if code is None:
            pods = kube.list("v1", "Pod", k.namespace, jstate["pod_selector"])
            stuck = next((why for why in map(_pod_problem, pods) if why), None)
            if stuck is None:
                running.append(f"{check} ({image})")
                continue
        judged.append(name)
        if code != 0:
            logs = "; ".join(f"{c}: {' | '.join(t.strip().splitlines())[-300:]}"  # one line per problem
                             for c, t in load.failure_logs(jstate, 20).items())
            problems.append(f"image check {check!r} failed for {image}: "
                            + (stuck or f"Job {name} exited {code}") + (f"; logs: {logs}" if logs else ""))
    if running:
        raise NotReadyYet(f"preflight: image checks still running: {', '.join(running)}")
    for name in judged:
        kube.delete(*JOB, name, k.namespace)
    return problems


def preflight(spec: CampaignSpec, kube: KubeClient, *, eks: Any = None, cluster_name: str = "",
              campaign_id: str | None = None) -> list[str]:
    """Every missing prerequisite, by name (empty: all there), before anything is scaled.

    Read-only checks first: the cluster, namespace, CRDs (and the Auto Mode NodeClass), the token secret
    and its key, the volume claim, the load service account, the node groups, the GPU driver of the pools'
    nodes that report it. Only when all pass (the Jobs need the namespace and the service account), with a
    ``campaign_id``: the image checks (:func:`check_images`), which raise NotReadyYet while they run.
    """
    try:
        kube.version()
    except ApiError as err:
        return [f"cluster {cluster_name or kube}: Kubernetes API not reachable ({err})"]
    problems = _check_objects(spec, kube)
    for pool in spec.pools:
        if pool.provider != "managed-nodegroup" or eks is None:
            continue
        if not pool.nodegroup:
            problems.append(f"pool {pool.name}: no nodegroup named in the spec")
            continue
        try:
            eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=pool.nodegroup)
        except eks.exceptions.ResourceNotFoundException:
            problems.append(f"pool {pool.name}: node group {pool.nodegroup!r} not found in cluster {cluster_name!r}")
    problems += _check_gpu_drivers(spec, kube)
    if problems or campaign_id is None:
        return problems
    return check_images(spec, kube, campaign_id)
