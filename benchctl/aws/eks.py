"""The serving, load and smoke ports on EKS: Kubernetes objects we render.

* ``EksServing`` (ServingPort): the experiment's DynamoGraphDeployment. Ready when its ``Ready``
  condition is True AND ``status.observedGeneration`` caught up with ``metadata.generation``
  (FACTS); ``status.state == failed`` is a ServingFailed naming the conditions. Teardown deletes, by
  our labels only, the experiment's Jobs, then its deployment and its image pre-pull DaemonSets (created by
  ``prepare`` before the pools are scaled, with the model prefetch Job; ScalePools records the pending
  deployment first, so a failure before Deploy tears them down too); ``remaining`` says, from lists only,
  what is still going away (the state machine comes back until nothing is, bounded); repeating it is harmless.
* ``EksLoad`` (LoadPort, ``benchctl.aws.eks_load``): one load runner Job per workload of an experiment.
* ``EksSmoke`` (SmokePort): a short Job of a few chat requests plus a ``/metrics`` GET against the
  frontend; started by SmokeTest, polled by CheckSmoke.

The deployment is rendered from the deployment request as given (``render.render_deployment``); what the
later calls need of it (namespace, URL, which workers run KVBM) is kept in the state it returns. A load
Job is rendered from its typed ``LoadRequest`` (campaign, experiment, step, argv, artifact and input
URIs). Objects are only created from ``benchctl.aws.k8s`` renderers (so they carry our labels) and only
selected and deleted through our own labels (``common.selection``: campaign, experiment, step; never managed-by, which
Grove overwrites on pods): nothing of anybody else's is touched. Every create and replace is sent with
``fieldValidation=Strict`` (the client's), so a field the API server does not know fails loudly.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

from benchctl.analysis.quality import answers_from_log
from benchctl.aws.eks_kube import (
    DAEMONSET,
    DGD,
    JOB,
    _conditions,
    _Jobs,
    _Kube,
    job_logs,
    job_status,
)
from benchctl.aws.k8s.client import ApiError, Conflict, NotFound
from benchctl.aws.k8s.common import (
    KVBM_METRICS_PORT,
    LABEL_CAMPAIGN,
    LABEL_ROLE,
    WORKER_SYSTEM_PORT,
    dgd_name,
    frontend_service_url,
    selection,
    selector,
)
from benchctl.aws.k8s.efa import NIXL_TELEMETRY_PORT
from benchctl.aws.k8s.jobs import render_smoke_job
from benchctl.aws.k8s.nodepool import prepull_pools, render_prepull
from benchctl.aws.k8s.prefetch import render_prefetch_job
from benchctl.aws.k8s.render import render_deployment, uses_kvbm
from benchctl.campaign.ports import JSON, DeploymentRequest
from benchctl.errors import ServingFailed
from benchctl.planning.mocker import MOCKER_PRECISION

# NIXL's Python agent logs each backend it creates (ai-dynamo/nixl src/api/python/_api.py,
# ``logger.info("Backend %s was instantiated", backend)``)
_NIXL_BACKEND = re.compile(r"Backend (\w+) was instantiated")
# vLLM logs its engine's configuration once at start-up ("Initializing a V1 LLM engine (vX) with config: ...",
# vllm/config VllmConfig.__str__): the dtype it computes in, the quantization it loaded (from the checkpoint's
# quantization_config, or --quantization) and the KV cache's dtype. The precision actually run, not the spec's.
_VLLM_PRECISION = {"dtype": re.compile(r"(?<![\w])dtype=([\w.]+)"),
                   "quantization": re.compile(r"(?<![\w])quantization=([\w-]+)"),
                   "kv_cache_dtype": re.compile(r"(?<![\w])kv_cache_dtype=([\w]+)")}


def engine_precision(log: str) -> JSON | None:
    """``{"dtype", "quantization", "kv_cache_dtype"}`` from the last vLLM engine configuration line of a worker's
    log (``quantization`` None: unquantized weights), or None when the log holds no such line."""
    lines = [line for line in log.splitlines() if "with config:" in line and "quantization=" in line]
    if not lines:
        return None
    found = {k: (m.group(1) if (m := rx.search(lines[-1])) else None) for k, rx in _VLLM_PRECISION.items()}
    if found["quantization"] == "None":
        found["quantization"] = None
    return found


class EksServing(_Kube):
    """``ServingPort`` on EKS: the experiment's DynamoGraphDeployment, rendered from the request as given."""

    def prepare(self, request: DeploymentRequest) -> None:
        """Called by ScalePools before the GPU pools are scaled: a pre-pull DaemonSet per pool of the
        experiment (``render_prepull``: the runtime image is pulled on each node as it joins, while the
        others boot), and with ``kubernetes.prefetch_model`` the campaign's model prefetch Job (once per
        campaign; a CPU node's work), so the download runs while the GPU nodes boot. Deploy waits for the
        prefetch before applying the deployment; teardown deletes the DaemonSets with the experiment."""
        target = request.target
        if target is None:
            return
        if request.campaign_id != self.campaign_id:
            raise ValueError(f"deployment {request.deployment_id}: campaign {request.campaign_id!r} is not "
                             f"{self.campaign_id!r}")
        for pool in prepull_pools(target):
            with contextlib.suppress(Conflict):  # a redelivered event: our own (the name carries the campaign)
                self.kube.create(render_prepull(target, self.campaign_id, pool))
        if target.kubernetes.prefetch_model:
            with contextlib.suppress(Conflict):  # an earlier experiment of this campaign started it
                self.kube.create(render_prefetch_job(
                    target.model, target.kubernetes, self.campaign_id, weights=target.experiment.engine == "vllm",
                    pools=target.pools, more=target.checkpoints))

    def deploy(self, request: DeploymentRequest) -> JSON:
        """Apply the experiment's DynamoGraphDeployment, or, with ``kubernetes.prefetch_model``, first wait
        for the campaign's model prefetch Job (started by :meth:`prepare`; created here when it was not)."""
        target = request.target
        if target is None:
            raise ValueError(f"deployment {request.deployment_id}: the request has no cluster target")
        if request.campaign_id != self.campaign_id:
            raise ValueError(f"deployment {request.deployment_id}: campaign {request.campaign_id!r} is not "
                             f"{self.campaign_id!r}")
        experiment, namespace = request.deployment_id, target.kubernetes.namespace
        url = frontend_service_url(namespace, self.campaign_id, experiment)
        dgd = render_deployment(request)
        state = {"deployment_id": experiment, "name": dgd_name(self.campaign_id, experiment),
                 "namespace": namespace, "url": url, "metrics_urls": [f"{url}/metrics"],
                 "model": target.model.name, "engine": "eks", "worker_engine": target.experiment.engine,
                 # the mocker models KV offload and transfer itself: no KVBM or NIXL exporter to scrape
                 "kvbm_roles": sorted({g.role for g in target.experiment.workers
                                       if uses_kvbm(target.experiment, g.role) and target.experiment.engine == "vllm"}),
                 "nixl_telemetry": target.experiment.mode == "disaggregated" and target.experiment.engine == "vllm",
                 "dcgm_exporter_urls": list(target.kubernetes.dcgm_exporter_urls)}
        if target.kubernetes.prefetch_model:
            job = render_prefetch_job(target.model, target.kubernetes, self.campaign_id,
                                      weights=target.experiment.engine == "vllm", pools=target.pools,
                                      more=target.checkpoints)
            with contextlib.suppress(Conflict):  # another experiment of this campaign started it
                self.kube.create(job)
            return {**state, "prefetch_job": job["metadata"]["name"], "manifest": dgd}
        self._apply(dgd)
        return state

    def _apply(self, dgd: JSON) -> None:
        name, namespace = dgd["metadata"]["name"], dgd["metadata"]["namespace"]
        try:
            self.kube.create(dgd)
        except Conflict:  # redelivered event, or somebody else's object with our name
            existing = self.kube.get(*DGD, name, namespace)
            if not self._ours(existing):
                raise ServingFailed(f"DynamoGraphDeployment {namespace}/{name} exists and is not this "
                                    f"campaign's ({LABEL_CAMPAIGN} missing or different); refusing to touch it") from None

    def _prefetch_done(self, state: JSON) -> bool:
        """True once the prefetch Job succeeded (then the deployment kept in the state is applied, idempotently)."""
        name = state["prefetch_job"]
        jstate = {"name": name, "namespace": state["namespace"],
                  "pod_selector": selector(selection(self.campaign_id, step_id="prefetch"))}
        code = job_status(self.kube, jstate)
        if code is None:
            return False
        if code != 0:
            logs = job_logs(self.kube, jstate)
            raise ServingFailed(f"model prefetch Job {name} failed: "
                                + "; ".join(f"{k}: {v[-400:]}" for k, v in logs.items()))
        try:
            self.kube.get(*DGD, state["name"], state["namespace"])
        except NotFound:
            self._apply(state["manifest"])
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
        """Image digests actually running (the pods' ``imageID``), per container image; the engine's packages,
        the Kubernetes version and the workers' nodes' NVIDIA drivers (``benchctl.aws.engine_provenance``); the
        precision each worker's vLLM engine logged running (:func:`engine_precision`: dtype, quantization, KV cache dtype); with a
        model prefetch, its own duration from the Job's start and completion times (apart from start-up)."""
        from benchctl.aws.engine_provenance import cluster_provenance

        sel = selector(selection(self.campaign_id, state["deployment_id"]))
        digests: dict[str, str] = {}
        precision: JSON = {}
        pods = sorted(self.kube.list("v1", "Pod", state["namespace"], sel), key=lambda o: o["metadata"]["name"])
        workers = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
                   in ("worker", "prefill", "decode")]
        for pod in pods:
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                if cs.get("image") and cs.get("imageID"):
                    digests[str(cs["image"])] = str(cs["imageID"])
            role = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
            if role in ("worker", "prefill", "decode") and state.get("worker_engine", "vllm") == "vllm":
                name = pod["metadata"]["name"]
                try:
                    found = engine_precision(self.kube.logs(name, state["namespace"], "main", 5000))
                except ApiError as err:
                    precision[name] = f"unknown ({err})"
                    continue
                precision[name] = found or "not logged: no vLLM engine configuration line in the worker's log"
        out: JSON = {"images": digests, **cluster_provenance(self.kube, state["namespace"], pods, workers)}
        if state.get("worker_engine") == "mocker":
            out["precision"] = MOCKER_PRECISION
        elif precision:
            out["precision"] = precision
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
        system port's ``/metrics`` (vLLM and Dynamo worker series), where KVBM runs KVBM's exporter and,
        disaggregated, NIXL's telemetry exporter (``NIXL_TELEMETRY_PORT``)."""
        out = {"frontend": f"{state['url']}/metrics"}
        for i, url in enumerate(state.get("dcgm_exporter_urls") or ()):  # GPU use (spec kubernetes.dcgm_exporter_urls)
            out[f"dcgm/{i}"] = str(url)
        kvbm = set(state.get("kvbm_roles") or ())
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
            if role in kvbm:
                out[f"kvbm/{name}"] = f"http://{host}:{KVBM_METRICS_PORT}/metrics"
            if state.get("nixl_telemetry"):  # NIXL's own exporter: bytes moved, errors, per backend
                out[f"nixl/{name}"] = f"http://{host}:{NIXL_TELEMETRY_PORT}/metrics"
        return out

    def network(self, state: JSON) -> JSON:
        """The deployment's network as the cluster shows it (no exec): the VPC CNI's version and MTU from the
        aws-node DaemonSet (none on EKS Auto Mode, which manages its own), each worker pod's node, zone,
        instance type and EFA interfaces, and the NIXL backend each worker's log says it instantiated
        (``Backend <NAME> was instantiated``: only LIBFABRIC proves EFA; UCX between nodes is TCP). Which NIC
        a pod uses is not in the API (it needs the kubelet's pod-resources API or exec): not recorded."""
        out: JSON = {"engine": "eks"}
        try:
            nodes = {n["metadata"]["name"]: n for n in self.kube.list("v1", "Node")}
        except ApiError as err:
            nodes, out["nodes_error"] = {}, str(err)
        try:
            cni = next((d for d in self.kube.list("apps/v1", "DaemonSet", "kube-system")
                        if d["metadata"]["name"] == "aws-node"), None)
        except ApiError as err:
            cni, out["cni_error"] = None, str(err)
        if cni is not None:
            main: JSON = next((c for c in (cni["spec"]["template"]["spec"].get("containers") or [])
                         if c.get("name") == "aws-node"), {})
            env = {e.get("name"): e.get("value") for e in main.get("env") or []}
            out["cni"] = f"amazon-vpc-cni {str(main.get('image', '')).rpartition(':')[2] or 'unknown'}"
            mtu = env.get("POD_MTU") or env.get("AWS_VPC_ENI_MTU")
            out["mtu"] = int(mtu) if mtu and str(mtu).isdigit() else 9001
            out["mtu_source"] = ("aws-node env POD_MTU/AWS_VPC_ENI_MTU" if mtu else
                                 "aws-node sets no AWS_VPC_ENI_MTU: the CNI's default 9001")
        elif "cni_error" not in out:
            out["cni"] = "no aws-node DaemonSet: EKS Auto Mode's managed networking (or another CNI)"
        placement, zones, backends = [], set(), {}
        sel = selector(selection(self.campaign_id, state["deployment_id"]))
        for pod in sorted(self.kube.list("v1", "Pod", state["namespace"], sel), key=lambda o: o["metadata"]["name"]):
            role = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ROLE)
            node_name = (pod.get("spec") or {}).get("nodeName")
            node = nodes.get(node_name or "", {})
            node_labels = (node.get("metadata") or {}).get("labels") or {}
            zone = node_labels.get("topology.kubernetes.io/zone")
            zones.add(zone) if zone else None
            limits: JSON = {}
            for c in (pod.get("spec") or {}).get("containers") or []:
                limits.update(((c.get("resources") or {}).get("limits")) or {})
            name = pod["metadata"]["name"]
            placement.append({"pod": name, "role": role, "node": node_name, "zone": zone,
                              "instance_type": node_labels.get("node.kubernetes.io/instance-type"),
                              "pod_ip": (pod.get("status") or {}).get("podIP"),
                              "efa": limits.get("vpc.amazonaws.com/efa")})
            if role in ("prefill", "decode"):
                try:
                    found = sorted(set(_NIXL_BACKEND.findall(self.kube.logs(name, state["namespace"], "main", 5000))))
                except ApiError as err:
                    found = [f"unknown ({err})"]
                backends[name] = found or ["none logged"]
        out.update(zones=sorted(zones), placement=placement, nixl_backends=backends,
                   transfer_backend=", ".join(sorted({b for v in backends.values() for b in v})) or
                   "none: aggregated (no prefill -> decode transfer)",
                   source="the cluster's DaemonSets, nodes and pods, and the workers' logs")
        return out

    def teardown(self, state: JSON) -> JSON:
        experiment, namespace = state["deployment_id"], self._namespace(state)
        sel = selector(selection(self.campaign_id, experiment))
        removed: JSON = {"jobs": [], "deployments": [], "prepull": []}
        for kind, key in ((JOB, "jobs"), (DGD, "deployments"), (DAEMONSET, "prepull")):  # load, serving, images
            for obj in self.kube.list(*kind, namespace, sel):
                name = obj["metadata"]["name"]
                if obj["metadata"].get("deletionTimestamp"):
                    continue  # being deleted already (a repeated teardown)
                if self._ours(obj) and self.kube.delete(*kind, name, namespace):
                    removed[key].append(name)
        return removed

    def remaining(self, state: JSON) -> list[str]:
        """What of the experiment is still there after ``teardown`` (objects being deleted, their pods).
        Never waits: the state machine polls this (TeardownExperiment comes back until it is empty)."""
        return self._left(self._namespace(state), (JOB, DGD, DAEMONSET),
                          selector(selection(self.campaign_id, state["deployment_id"])))

    def observe(self, state: JSON, removed: JSON | None) -> list[JSON]:
        """Read back what teardown deleted (its DynamoGraphDeployment, Jobs, pre-pull DaemonSets) and
        whatever of the experiment the cluster still lists (objects being deleted, their pods): lists only,
        as :meth:`remaining` (RBAC grants DaemonSets no GET)."""
        left = self.remaining(state)
        out: list[JSON] = []
        for key, kind in (("deployments", DGD[1]), ("jobs", JOB[1]), ("prepull", DAEMONSET[1])):
            for name in (removed or {}).get(key) or []:
                there = f"{kind}/{name}" in left
                out.append({"kind": kind, "name": name, "present": there,
                            "why": "still listed after its deletion (finalizers or pods holding it)" if there else ""})
        named = {f"{o['kind']}/{o['name']}" for o in out}
        for item in left:
            if item not in named:
                kind, _, name = item.partition("/")
                out.append({"kind": kind, "name": name, "present": True,
                            "why": "still listed after the experiment's teardown"})
        return out

    def _namespace(self, state: JSON) -> str:
        """Where the deployment is: its state says (also the pending one ScalePools and Deploy record before
        creating anything: ``campaign.serving.record_intent``)."""
        ns = state.get("namespace")
        if not ns:
            raise ValueError(f"deployment {state.get('deployment_id')}: its recorded state names no namespace")
        return str(ns)


def _seconds_between(start: Any, end: Any) -> float | None:
    from datetime import datetime

    try:
        return (datetime.fromisoformat(str(end).replace("Z", "+00:00"))
                - datetime.fromisoformat(str(start).replace("Z", "+00:00"))).total_seconds()
    except ValueError:
        return None


class EksSmoke(_Jobs):
    """A short Job of a few chat requests plus a ``/metrics`` GET against the frontend: started here,
    polled by CheckSmoke (never waited for in a function)."""

    def start(self, deployment: JSON, requests: int, max_tokens: int, *, quality: list[JSON] | None = None) -> JSON:
        """The Job renders the spec's quality questions itself (``quality``, from the same spec, is what it
        sends); their answers are read back from its log by :meth:`result`."""
        job = render_smoke_job(self.spec, self.campaign_id, deployment["deployment_id"], deployment["url"])
        with contextlib.suppress(Conflict):  # a redelivered event: follow the Job already there
            self.kube.create(job)
        return {"name": job["metadata"]["name"], "namespace": self.namespace, "requests": requests,
                "max_tokens": max_tokens, "quality_questions": len(quality) if quality is not None else None,
                "pod_selector": selector(selection(self.campaign_id, deployment["deployment_id"], "smoke"))}

    def poll(self, started: JSON) -> int | None:
        return job_status(self.kube, started)

    def result(self, started: JSON) -> JSON:
        out = {k: v for k, v in started.items() if k in ("requests", "max_tokens", "name")}
        if started.get("quality_questions") is not None:
            logs = job_logs(self.kube, started, int(started["quality_questions"]) + 50)
            out["quality_answers"] = answers_from_log("\n".join(str(t) for t in logs.values()))
        return out

    def failure_logs(self, started: JSON) -> JSON:
        return job_logs(self.kube, started)


