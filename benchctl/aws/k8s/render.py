"""Kubernetes manifests of a campaign, rendered from its spec: plain dicts, same input ⇒ same output.

Pure: standard library and benchctl only; nothing here talks to a cluster. What is rendered:

* a ``DynamoGraphDeployment`` (``nvidia.com/v1beta1``) per experiment, from the deployment request the
  campaign makes (``benchctl.campaign.ports.DeploymentRequest``, as given): a frontend and vLLM workers (one
  ``worker`` component aggregated; ``prefill`` + ``decode`` disaggregated), or Dynamo mocker workers on CPU
  nodes for an ``engine: mocker`` experiment (``benchctl.aws.k8s.mocker``);
* a Karpenter ``NodePool`` (``karpenter.sh/v1``) per EKS Auto Mode pool;
* ``batch/v1`` Jobs (``benchctl.aws.k8s.jobs``): a load runner per workload of an experiment (and the
  warm-up), the smoke test, the model prefetch; the preflight's image checks (``preflight_jobs``).

Labels, names and the pod pieces every manifest shares are ``benchctl.aws.k8s.common``'s.
"""

from __future__ import annotations

import math
from typing import Any

from benchctl.aws.k8s.common import (
    DGD_API_VERSION,
    DO_NOT_DISRUPT,
    FRONTEND_PORT,
    GPU,
    KVBM_BASE_MEMORY_GIB,
    LABEL_MANAGED,
    LABEL_ROLE,
    LAKE_PLACEHOLDER,
    MODEL_MOUNT,
    OFFLINE_TOKENIZER_ENV,
    REGION_PLACEHOLDER,
    RUNS_PLACEHOLDER,
    control_uri,
    dgd_name,
    frontend_service_url,
    json_arg,
    labels,
    meta,
    model_snapshot_dir,
    model_volume,
    raw_s3_uri,
    runtime_version,
    scheduling,
)
from benchctl.aws.k8s.efa import (
    EFA_RESOURCE,
    EFA_SECURITY_CONTEXT,
    NIXL_TELEMETRY_ENV,
    efa_env,
    efa_image,
    efa_per_worker,
)
from benchctl.aws.k8s.jobs import (
    off_gpu_pools,
    raw_prefix,
    render_runner_job,
    render_smoke_job,
    runner_deadline_s,
    runner_request,
    runner_step_dir,
)
from benchctl.aws.k8s.mocker import mocker_container, mocker_volumes
from benchctl.aws.k8s.nodepool import (
    prepull_pools,
    render_nodepool,
    render_prepull,
)
from benchctl.aws.k8s.prefetch import render_prefetch_job
from benchctl.campaign.ports import DeploymentRequest
from benchctl.campaign.runstate import runner_key
from benchctl.planning import aiperf_args
from benchctl.planning.placement import keeps_role_together
from benchctl.planning.plan import plan_campaign
from benchctl.planning.units import entry_experiment
from benchctl.spec.deployment import Experiment, KvOffload, ModelSpec, PoolSpec, WorkerGroup
from benchctl.spec.model import CampaignSpec, Kubernetes
from benchctl.spec.names import COMPONENT, component_names, dgd_name_problem

JSON = dict[str, Any]

# vLLM connectors (FACTS "Dynamo on Kubernetes": in 1.6.x --kv-transfer-config is explicit; NixlConnector
# for prefill/decode transfer, the KVBM connector for offload; --connector/--is-prefill-worker are gone).
NIXL_CONNECTOR: JSON = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
KVBM_CONNECTOR: JSON = {"kv_connector": "DynamoConnector", "kv_connector_module_path": "kvbm.vllm_integration.connector",
                        "kv_role": "kv_both"}
# KV events a worker publishes for the KV router (FACTS: "workers publishing KV events"). Dynamo's vLLM
# worker only forwards events when vLLM is given a kv-events config with enable_kv_cache_events.
KVBM_DISK_DIR = "/kvbm-disk"  # the SSD tier's directory (DYN_KVBM_DISK_CACHE_DIR), an emptyDir on the node
KV_EVENTS_CONFIG: JSON = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:20080",
                          "enable_kv_cache_events": True}


def _kv_transfer_config(exp: Experiment, role: str, backend: str | None = None) -> JSON | None:
    """The worker's ``--kv-transfer-config`` (None: no connector).

    FACTS "Dynamo on Kubernetes": NixlConnector for prefill/decode, the KVBM connector for offload.
    Disaggregated with offload, the prefill worker gets Dynamo's ``PdConnector``, a vLLM multi-connector
    of exactly [KVBM (DynamoConnector), NixlConnector] in that order: KVBM offloads and onboards the
    prefix blocks where prefill computes them, NIXL hands the KV to decode. The decode worker keeps the
    plain NixlConnector (it only receives KV; it does not publish prefix-cache state), as Dynamo's own
    disaggregated KVBM example does; its offload env is therefore not set either.
    """
    offload = exp.kv_offload is not None
    if exp.mode == "aggregated":
        return dict(KVBM_CONNECTOR) if offload else None
    nixl = nixl_connector(backend)
    if role == "prefill" and offload:
        return {"kv_connector": "PdConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"connectors": [dict(KVBM_CONNECTOR), nixl]},
                "kv_connector_module_path": "kvbm.vllm_integration.connector"}
    return nixl


def nixl_connector(backend: str | None) -> JSON:
    """vLLM's NixlConnector config; LIBFABRIC is named in ``kv_connector_extra_config.backends``, as Dynamo's
    AWS recipe does: without it NIXL silently stays on UCX (FACTS "Disaggregation over EFA")."""
    out = dict(NIXL_CONNECTOR)
    if backend and backend != "UCX":
        out["kv_connector_extra_config"] = {"backends": [backend]}
    return out


def uses_kvbm(exp: Experiment, role: str) -> bool:
    return exp.kv_offload is not None and (exp.mode == "aggregated" or role == "prefill")


def worker_args(model: ModelSpec, exp: Experiment, group: WorkerGroup, pool: PoolSpec | None = None, *,
                weights: ModelSpec | None = None) -> list[str]:
    """``python3 -m dynamo.vllm`` arguments of one worker group (Dynamo 1.6.x flags).

    The model is the prefetched snapshot directory of ``model.revision`` on the volume, served under
    ``model.name`` (``weights``, an experiment's checkpoint: its snapshot instead, under the same name): Dynamo
    1.6.1's worker calls ``fetch_model(--model)`` (the Hub, without the revision) before vLLM starts unless
    ``--model`` is a path that exists (``dynamo/vllm/main.py``: ``should_prefetch_model``); a path is loaded as is."""
    args = ["--model", model_snapshot_dir(weights or model), "--served-model-name", model.name,
            "--tensor-parallel-size", str(group.tensor_parallel),
            # explicit in every experiment (vLLM's default anyway), so a router rung changes only routing
            "--enable-prefix-caching"]
    if exp.mode == "disaggregated":
        args += ["--disaggregation-mode", group.role]
    kv_transfer = _kv_transfer_config(exp, group.role, pool.network.nixl_backend if pool is not None else None)
    if kv_transfer is not None:
        args += ["--kv-transfer-config", json_arg(kv_transfer)]
    if exp.router == "kv" and group.role != "decode":
        # decode workers publish no KV events in Dynamo (the router places requests by prefill overlap)
        args += ["--kv-events-config", json_arg(KV_EVENTS_CONFIG)]
    return args


def _affinity(lbl: dict[str, str], role: str, together: bool) -> JSON:
    """Prefill and decode workers of one experiment on different nodes (EFA does not work within a node,
    FACTS "Disaggregation over EFA"), in one zone where the scheduler can. ``together``
    (``benchctl.planning.placement.keeps_role_together``): the role's pods REQUIRE a node holding one of them (the
    first goes anywhere, kube-scheduler's "first pod in a series"), so spreading cannot scatter a role
    over nodes the other role then cannot use; the plan counts nodes by the same rules."""
    other = "decode" if role == "prefill" else "prefill"
    mine = {k: v for k, v in lbl.items() if k != LABEL_MANAGED}
    same: list[JSON] = ([{"labelSelector": {"matchLabels": {**mine, LABEL_ROLE: role}},
                          "topologyKey": "kubernetes.io/hostname"}] if together else [])
    return {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {**mine, LABEL_ROLE: other}},
            "topologyKey": "kubernetes.io/hostname"}]},
        "podAffinity": {**({"requiredDuringSchedulingIgnoredDuringExecution": same} if same else {}),
                        "preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {**mine, LABEL_ROLE: other}},
                                                "topologyKey": "topology.kubernetes.io/zone"}}]},
    }


def kvbm_memory_request(offload: KvOffload) -> str:
    """A KVBM worker's host memory request: its CPU KV cache (DYN_KVBM_CPU_CACHE_GB, decimal GB) in whole
    GiB plus KVBM_BASE_MEMORY_GIB for the rest of the process, so the node is never overcommitted."""
    return f"{KVBM_BASE_MEMORY_GIB + math.ceil(offload.cpu_cache_gb * 1e9 / 2**30)}Gi"


def _kvbm_env(offload: KvOffload) -> list[JSON]:
    env = [{"name": "DYN_KVBM_CPU_CACHE_GB", "value": f"{offload.cpu_cache_gb:g}"}]
    if offload.disk_cache_gb is not None:
        env.append({"name": "DYN_KVBM_DISK_CACHE_GB", "value": f"{offload.disk_cache_gb:g}"})
        # FACTS: the default directory is /tmp (in the container's writable layer): an emptyDir instead
        env.append({"name": "DYN_KVBM_DISK_CACHE_DIR", "value": KVBM_DISK_DIR})
    # FACTS: kvbm_* offload/onboard/hit-rate metrics on port 6880 with DYN_KVBM_METRICS=true
    env.append({"name": "DYN_KVBM_METRICS", "value": "true"})
    return env


def _component_names(exp: Experiment) -> list[str]:
    """One name per worker group (:func:`benchctl.spec.names.component_names`), refused when Dynamo's webhook would
    refuse the DGD's name with them (the spec refuses it for pools on EKS; here for any spec rendered)."""
    why = dgd_name_problem(exp.name, [g.role for g in exp.workers])
    if why:
        raise ValueError(f"experiment {why}")
    return component_names([g.role for g in exp.workers])


def render_dgd(spec: CampaignSpec, campaign_id: str, experiment: str, exp: Experiment | None = None) -> JSON:
    """The experiment's ``DynamoGraphDeployment`` from the spec (``benchctl render``): what the campaign's
    deployment request for it renders to (``exp``: the experiment as a plan entry deploys it, default the spec's)."""
    from benchctl.campaign import deployment_request

    return render_deployment(deployment_request(spec, campaign_id, experiment, exp))


def render_deployment(request: DeploymentRequest) -> JSON:
    """The ``DynamoGraphDeployment`` of a deployment request, as given: a frontend and its workers (vLLM, or
    the mocker for an ``engine: mocker`` experiment)."""
    if request.target is None:
        raise ValueError(f"deployment {request.deployment_id}: the request has no cluster target to render")
    exp, k, campaign_id, experiment = (request.target.experiment, request.target.kubernetes, request.campaign_id,
                                       request.deployment_id)
    lbl = labels(campaign_id, experiment)
    version = runtime_version(k)
    # The frontend reads the model card's files (tokenizer, config, chat template) where the workers published
    # them, the snapshot directory on the volume: mounted at the same path, offline, as Dynamo's AWS recipes do.
    # It runs on the CPU pool, off the experiment's pools, and does not tolerate the GPU taint (common: placement):
    # a GPU pool's scale-in never evicts it. The operator copies podTemplate.spec onto the pod (the DGD CRD's
    # components[].podTemplate.spec is a PodSpec: affinity included).
    frontend: JSON = {
        "name": COMPONENT["frontend"],
        "type": "frontend",
        "replicas": 1,
        "podTemplate": {
            "metadata": {"labels": {**lbl, LABEL_ROLE: "frontend"}, "annotations": dict(DO_NOT_DISRUPT)},
            "spec": {"affinity": off_gpu_pools(request.target.pools, campaign_id),
                     "volumes": [model_volume(k)], "containers": [{
                "name": "main",
                "image": k.dynamo_image,
                "command": ["python3", "-m", "dynamo.frontend"],
                "args": ["--http-port", str(FRONTEND_PORT), "--router-mode", exp.router],
                "env": [dict(e) for e in OFFLINE_TOKENIZER_ENV],
                "volumeMounts": [{**MODEL_MOUNT, "readOnly": True}],
            }]},
        },
    }
    components = [frontend]
    for g, cname in zip(exp.workers, _component_names(exp), strict=True):
        pool = request.target.pool(g.pool)
        if exp.engine == "mocker":  # a rehearsal on CPU nodes (benchctl.aws.k8s.mocker)
            components.append(_component(cname, g, lbl, k, {**scheduling(campaign_id, pool), "volumes": mocker_volumes(
                k), "containers": [mocker_container(request.target.model, exp.mode, g, request.mocker, k)]}))
            continue
        env = [dict(e) for e in OFFLINE_TOKENIZER_ENV]  # the snapshot, offline: no Hub, no token
        requests: JSON = {}
        volumes, mounts = [model_volume(k)], [{**MODEL_MOUNT, "readOnly": True}]  # only the prefetch writes it
        if exp.kv_offload is not None and uses_kvbm(exp, g.role):
            env += _kvbm_env(exp.kv_offload)
            requests["memory"] = kvbm_memory_request(exp.kv_offload)
            if exp.kv_offload.disk_cache_gb is not None:  # the SSD tier on the node's disk, not the image's /tmp
                volumes.append({"name": "kvbm-disk", "emptyDir": {"sizeLimit": f"{math.ceil(exp.kv_offload.disk_cache_gb)}G"}})
                mounts.append({"name": "kvbm-disk", "mountPath": KVBM_DISK_DIR})
        gpus = str(g.tensor_parallel)
        limits: JSON = {GPU: gpus}
        container: JSON = {"name": "main", "image": k.dynamo_image}
        pod_extra: JSON = {}
        efa = efa_per_worker(pool, g) if exp.mode == "disaggregated" else 0
        if efa:  # the KV crosses pods: over EFA, with the EFA image, on another node than the other role
            limits[EFA_RESOURCE] = requests[EFA_RESOURCE] = str(efa)
            container["image"] = efa_image(pool, k)
            container["securityContext"] = dict(EFA_SECURITY_CONTEXT)
            env += efa_env(pool.network.nixl_backend)
            together = keeps_role_together({p.name: p for p in request.target.pools}, exp, g.role)
            pod_extra["affinity"] = _affinity(lbl, g.role, together)
        if exp.mode == "disaggregated":
            env += [dict(e) for e in NIXL_TELEMETRY_ENV]
        container.update({
            "command": ["python3", "-m", "dynamo.vllm"],
            "args": worker_args(request.target.model, exp, g, pool, weights=request.target.weights),
            "env": env,
            "resources": {"limits": limits, "requests": {GPU: gpus, **requests}},
            "volumeMounts": mounts,
        })
        pod_spec: JSON = {
            **scheduling(campaign_id, pool),
            **pod_extra,
            "volumes": volumes,
            "containers": [container],
        }
        components.append(_component(cname, g, lbl, k, pod_spec))
    if version is not None:  # Dynamo's admission webhook: required when the image tag is no version
        for c in components:
            c["runtimeVersionOverride"] = version
    return {
        "apiVersion": DGD_API_VERSION,
        "kind": "DynamoGraphDeployment",
        "metadata": meta(dgd_name(campaign_id, experiment), lbl, k.namespace),
        # the mocker is no backend framework of the operator's (Dynamo's own mocker DGDs name none)
        "spec": {**({"backendFramework": "vllm"} if exp.engine == "vllm" else {}), "components": components},
    }


def _component(name: str, g: WorkerGroup, lbl: dict[str, str], k: Kubernetes, pod_spec: JSON) -> JSON:
    return {
        "name": name,
        "type": g.role,
        "replicas": g.replicas,
        "sharedMemorySize": k.shared_memory,
        "podTemplate": {"metadata": {"labels": {**lbl, LABEL_ROLE: g.role}, "annotations": dict(DO_NOT_DISRUPT)},
                        "spec": pod_spec},
    }


# ------------------------------------------------------------------------------------------ campaign


def _nodepool_nodes(spec: CampaignSpec) -> dict[str, int]:
    """Auto Mode pools -> the most nodes any experiment needs there (experiments run one at a time)."""
    from benchctl.planning.plan import nodes_needed

    out: dict[str, int] = {}
    for exp in spec.experiments:
        for pool, nodes in nodes_needed(spec, exp).items():
            if spec.pool(pool).provider == "auto-mode":
                out[pool] = max(out.get(pool, 0), nodes)
    return out


def render_campaign(spec: CampaignSpec, campaign_id: str, *, lake_uri: str = LAKE_PLACEHOLDER,
                    runs_uri: str = RUNS_PLACEHOLDER, region: str = REGION_PLACEHOLDER) -> list[tuple[str, JSON]]:
    """Every manifest a campaign applies, as (relative path, object), in apply order.

    Load: one runner Job per workload of an experiment (``jobs/<workload>.yaml``; the warm-up's is
    ``jobs/warmup.yaml``); what each step asks of it is :func:`render_requests`. ``lake_uri`` is the S3
    lake root (``BENCHCTL_LAKE_URI``), ``runs_uri`` the run stores' root (its bucket's ``runner/``: the hand-over);
    the defaults are visible placeholders."""
    from benchctl.campaign import deployment_request

    plan = plan_campaign(spec, "aws")
    out: list[tuple[str, JSON]] = []
    for pool, nodes in sorted(_nodepool_nodes(spec).items()):
        out.append((f"nodepools/{pool}.yaml", render_nodepool(spec, campaign_id, pool, nodes)))
    if spec.kubernetes.prefetch_model:
        out.append(("prefetch-job.yaml", render_prefetch_job(
            spec.model, spec.kubernetes, campaign_id, weights=spec.experiments[0].engine == "vllm", pools=spec.pools,
            more=spec.checkpoints())))
    grace = spec.timeouts.load_grace_s
    control = f"{control_uri(runs_uri, campaign_id)}/"

    def runner(e: str, group: str, steps: list[tuple[str, float]]) -> JSON:
        raw = raw_s3_uri(campaign_id, e, steps[0][0], lake_uri)
        return render_runner_job(spec, campaign_id, e, group, [s for s, _ in steps], raw_prefix(raw, steps[0][0]),
                                 f"{control}{runner_key(e)}", region,
                                 active_deadline_s=runner_deadline_s(sum(est for _, est in steps), len(steps), grace,
                                                                     spec.timeouts.capacity_s))

    for exp_plan in plan.experiments:
        e = exp_plan.name
        exp = entry_experiment(spec, exp_plan)  # one deployment of an experiment is named after it
        url = frontend_service_url(spec.kubernetes.namespace, campaign_id, e)
        target = deployment_request(spec, campaign_id, e, exp).target
        assert target is not None
        for pool in prepull_pools(target):  # before the pools are scaled: the images arrive with the nodes
            out.append((f"experiments/{e}/prepull-{pool}.yaml", render_prepull(target, campaign_id, pool)))
        out.append((f"experiments/{e}/dynamographdeployment.yaml", render_dgd(spec, campaign_id, e, exp)))
        out.append((f"experiments/{e}/smoke-job.yaml", render_smoke_job(spec, campaign_id, e, url)))
        steps = exp_plan.steps
        if spec.warmup.request_count and steps:
            out.append((f"experiments/{e}/jobs/warmup.yaml",
                        runner(e, "warmup", [("warmup", 60.0 + spec.warmup.request_count)])))
        for workload in dict.fromkeys(s.workload for s in steps):
            group = [(s.step_id, s.est_s) for s in steps if s.workload == workload]
            out.append((f"experiments/{e}/jobs/{workload}.yaml", runner(e, workload, group)))
    return out


def render_requests(spec: CampaignSpec, campaign_id: str) -> list[tuple[str, JSON]]:
    """What LaunchLoad puts in the run store for each step's runner Job (``experiments/<e>/requests/<step>.json``):
    AIPerf's argv in the Job's paths (artifacts to ``/artifacts/<step>/out``, the step's kept input from
    ``/artifacts/<step>/inputs/``) and the step's deadline. The workers' ``--server-metrics`` (their pod
    addresses) are known only at launch: not rendered."""
    from benchctl.campaign import step_dataset

    grace = spec.timeouts.load_grace_s
    out: list[tuple[str, JSON]] = []

    def request(step_id: str, argv: list[str], est_s: float) -> JSON:
        return runner_request(step_id, argv, est_s, grace)

    for exp_plan in plan_campaign(spec, "aws").experiments:
        e, steps = exp_plan.name, exp_plan.steps
        url = frontend_service_url(spec.kubernetes.namespace, campaign_id, e)
        if spec.warmup.request_count and steps:
            # as campaign.launch_warmup: highest concurrency, the first step's input length, short outputs
            first = steps[0]
            _, osl = spec.workloads[0].max_lengths()
            isl = first.isl or first.params["isl_range"][0]
            argv = aiperf_args.warmup_args(
                model=spec.model.name, tokenizer=spec.model.name, url=url, artifact_dir="",
                request_count=spec.warmup.request_count, concurrency=max(s.concurrency or 1 for s in steps),
                isl=isl, osl=min(osl, 64), seed=spec.seed, tokenizer_revision=spec.model.revision,
                sampling=spec.sampling_fields(), thinking=spec.thinking,
            )
            out.append((f"experiments/{e}/requests/warmup.json",
                        request("warmup", argv, 60.0 + spec.warmup.request_count)))
        for step in steps:
            ds = step_dataset(step)
            argv = aiperf_args.step_args(
                step, model=spec.model.name, tokenizer=spec.model.name, url=url, artifact_dir="",
                input_file=f"{runner_step_dir(step.step_id)}/inputs/{ds.name}" if ds is not None else None,
                slo=spec.slo.model_dump(), tokenizer_revision=spec.model.revision, sampling=spec.sampling_fields(),
                thinking=spec.thinking,
            )
            out.append((f"experiments/{e}/requests/{step.step_id}.json", request(step.step_id, argv, step.est_s)))
    return out
