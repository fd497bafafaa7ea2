"""Kubernetes manifests of a campaign, rendered from its spec: plain dicts, same input ⇒ same output.

Pure: standard library and benchctl only; nothing here talks to a cluster. What is rendered:

* a ``DynamoGraphDeployment`` (``nvidia.com/v1beta1``) per experiment: a frontend and vLLM workers
  (one ``worker`` component aggregated; ``prefill`` + ``decode`` disaggregated);
* a Karpenter ``NodePool`` (``karpenter.sh/v1``) per EKS Auto Mode pool;
* ``batch/v1`` Jobs: one per AIPerf step (and the warm-up), the smoke test, the model prefetch, and
  the preflight's image checks.

Every object carries :func:`labels` (campaign, experiment, step, plus an informative managed-by) and its
name is DNS-1123, at most 63 characters, and includes a short hash of the campaign id (two campaigns may
share a namespace). Objects and pods are SELECTED by :func:`selection` only: our ``benchctl.io/`` labels,
never ``app.kubernetes.io/managed-by``, which the Dynamo operator's Grove pathway overwrites on pods.
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
import re
import shlex
from typing import Any

from benchctl import aiperf_args
from benchctl.plan import plan_campaign
from benchctl.spec import CampaignSpec, Experiment, KvOffload, PoolSpec, WorkerGroup

JSON = dict[str, Any]

LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_CAMPAIGN = "benchctl.io/campaign"
LABEL_EXPERIMENT = "benchctl.io/experiment"
LABEL_STEP = "benchctl.io/step"
LABEL_ROLE = "benchctl.io/role"  # on a DGD's pod templates: frontend | worker | prefill | decode
MANAGED_BY = "benchctl"

DGD_API_VERSION = "nvidia.com/v1beta1"
NODEPOOL_API_VERSION = "karpenter.sh/v1"
FRONTEND_PORT = 8000  # FACTS "Dynamo on Kubernetes": the frontend Service is <name>-frontend, port 8000
GPU = "nvidia.com/gpu"
MODELS_DIR = "/models"  # the model PVC's mount point
HF_HOME = "/models/hf"  # a Hugging Face hub cache on the model volume (hub/models--org--name/snapshots/<rev>)
ARTIFACTS = "/artifacts"  # a load Job's emptyDir
ARTIFACT_OUT = "/artifacts/out"  # where AIPerf writes, then uploaded as is
INPUTS_DIR = "/artifacts/inputs"
EXIT_CODE_FILE = "/artifacts/out/exit_code"
LAKE_PLACEHOLDER = "s3://<results-bucket>/lake"  # render_campaign's default: filled in by the engine
# kubernetes.aiperf_image unset: the deployment's load image (BENCHCTL_LOAD_IMAGE), known on AWS only
LOAD_IMAGE_PLACEHOLDER = "<benchctl-load-image>"
DEFAULT_DEADLINE_S = 7200
JOB_TTL_S = 86400
PREFLIGHT_DEADLINE_S = 600
# A worker's system server (health and /metrics): the Dynamo operator gives every worker container
# DYN_SYSTEM_PORT=9090 and a port named "system" (deploy/cloud/operator/internal/dynamo/component_worker.go,
# internal/consts: DynamoSystemPort = 9090).
WORKER_SYSTEM_PORT = 9090
# KVBM's Prometheus exporter with DYN_KVBM_METRICS=true (FACTS "Dynamo on Kubernetes": port 6880).
KVBM_METRICS_PORT = 6880
# Host memory of a KVBM worker besides its CPU KV cache (Python, CUDA context, NIXL staging): a stated
# assumption; the request is this plus DYN_KVBM_CPU_CACHE_GB, so the scheduler reserves the cache.
KVBM_BASE_MEMORY_GIB = 16

# Component names inside a DGD (the operator lowercases them into child object names, so short).
_COMPONENT = {"frontend": "Frontend", "worker": "Worker", "prefill": "Prefill", "decode": "Decode"}

# vLLM connectors (FACTS "Dynamo on Kubernetes": in 1.6.x --kv-transfer-config is explicit; NixlConnector
# for prefill/decode transfer, the KVBM connector for offload; --connector/--is-prefill-worker are gone).
NIXL_CONNECTOR: JSON = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
KVBM_CONNECTOR: JSON = {"kv_connector": "DynamoConnector", "kv_connector_module_path": "kvbm.vllm_integration.connector",
                        "kv_role": "kv_both"}
# KV events a worker publishes for the KV router (FACTS: "workers publishing KV events"). Dynamo's vLLM
# worker only forwards events when vLLM is given a kv-events config with enable_kv_cache_events.
KV_EVENTS_CONFIG: JSON = {"publisher": "zmq", "topic": "kv-events", "endpoint": "tcp://*:20080",
                          "enable_kv_cache_events": True}

_LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# ------------------------------------------------------------------------------------------ labels


def _check_label_value(value: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE_RE.match(value):
        raise ValueError(
            f"label value {value!r} is not a valid Kubernetes label value (at most 63 characters: "
            f"letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
        )
    return value


def labels(campaign_id: str, experiment: str | None = None, step_id: str | None = None) -> dict[str, str]:
    """Our labels: managed-by and campaign always; experiment and step when given. Values validated."""
    out = {LABEL_MANAGED: MANAGED_BY, LABEL_CAMPAIGN: _check_label_value(campaign_id)}
    if experiment is not None:
        out[LABEL_EXPERIMENT] = _check_label_value(experiment)
    if step_id is not None:
        out[LABEL_STEP] = _check_label_value(step_id)
    return out


def selection(campaign_id: str, experiment: str | None = None, step_id: str | None = None) -> dict[str, str]:
    """The labels that SELECT our objects and pods: our own ``benchctl.io/`` labels only (campaign, and
    experiment/step when given). Never managed-by: Grove overwrites it on the pods it creates."""
    return {k: v for k, v in labels(campaign_id, experiment, step_id).items() if k != LABEL_MANAGED}


def selector(labels: dict[str, str]) -> str:
    """An equality label selector, ``k=v,k2=v2`` (in the dict's order)."""
    for v in labels.values():
        _check_label_value(v)
    return ",".join(f"{k}={v}" for k, v in labels.items())


# ------------------------------------------------------------------------------------------- names


def _sha1(text: str, n: int) -> str:
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:n]


def _dns_part(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def _object_name(campaign_id: str, parts: tuple[str, ...], limit: int = 63) -> str:
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
    """The DGD of one experiment. At most 42 characters: the operator derives child names from it
    (``<name>-frontend`` Service, ``<name>-<component>`` workloads), which must stay within 63."""
    return _object_name(campaign_id, (experiment,), limit=42)


def job_name(campaign_id: str, experiment: str, step_id: str) -> str:
    return _object_name(campaign_id, (experiment, step_id))


def nodepool_name(campaign_id: str, pool: str | PoolSpec) -> str:
    return _object_name(campaign_id, (pool.name if isinstance(pool, PoolSpec) else pool,))


def prefetch_job_name(campaign_id: str) -> str:
    return _object_name(campaign_id, ("prefetch",))


def preflight_job_name(campaign_id: str, check: str) -> str:
    return _object_name(campaign_id, ("preflight", check))


def frontend_service_url(spec: CampaignSpec, campaign_id: str, experiment: str) -> str:
    """In-cluster URL of an experiment's frontend (FACTS: Service ``<name>-frontend``, port 8000)."""
    return (f"http://{dgd_name(campaign_id, experiment)}-frontend.{spec.kubernetes.namespace}"
            f".svc.cluster.local:{FRONTEND_PORT}")


def raw_s3_uri(campaign_id: str, experiment: str, step_id: str, lake_uri: str = LAKE_PLACEHOLDER) -> str:
    """A step's raw area, as the S3 lake lays it out (``<lake>/raw/campaign_id=…/experiment=…/step_id=…/``)."""
    return (f"{lake_uri.rstrip('/')}/raw/campaign_id={campaign_id}/experiment={experiment}"
            f"/step_id={step_id}/")


# -------------------------------------------------------------------------------------- shared bits


def _meta(name: str, lbl: dict[str, str], namespace: str | None = None) -> JSON:
    meta: JSON = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(lbl)
    return meta


HF_TOKEN_KEY = "HF_TOKEN"  # noqa: S105 (a key name, not a secret): the key inside the token secret


def _hf_env(spec: CampaignSpec) -> list[JSON]:
    return [
        {"name": "HF_TOKEN",
         "valueFrom": {"secretKeyRef": {"name": spec.kubernetes.hf_token_secret, "key": HF_TOKEN_KEY}}},
        {"name": "HF_HOME", "value": HF_HOME},
    ]


# The load Jobs read the tokenizer from the prefetched model volume, never from the internet: the volume
# is a Hugging Face hub cache (what the prefetch's `hf download` writes under HF_HOME), and with the
# offline variables AIPerf resolves `--tokenizer <model> --tokenizer-revision <rev>` there (FACTS "A
# tokenizer without a hub": the hub-cache layout works in every AIPerf mode, trace datasets included).
OFFLINE_TOKENIZER_ENV: list[JSON] = [
    {"name": "HF_HOME", "value": HF_HOME},
    {"name": "HF_HUB_OFFLINE", "value": "1"},
    {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
]


def _model_volume(spec: CampaignSpec) -> JSON:
    # Workers of one experiment may run on several nodes at once: the PVC must be ReadWriteMany (EFS).
    return {"name": "model-cache", "persistentVolumeClaim": {"claimName": spec.kubernetes.model_pvc}}


_MODEL_MOUNT: JSON = {"name": "model-cache", "mountPath": MODELS_DIR}


def aiperf_image(spec: CampaignSpec) -> str:
    """The load image: the spec's, else the placeholder of the deployment's (see LOAD_IMAGE_PLACEHOLDER)."""
    return spec.kubernetes.aiperf_image or LOAD_IMAGE_PLACEHOLDER


def runtime_version(spec: CampaignSpec) -> str | None:
    """``runtimeVersionOverride`` of every component: the spec's version, or None when the image's tag
    is one (Dynamo's webhook parses it). The spec refuses an untagged image without a version."""
    from benchctl.spec import image_tag_version

    k = spec.kubernetes
    if k.dynamo_runtime_version is not None:
        return k.dynamo_runtime_version
    if image_tag_version(k.dynamo_image) is None:  # unreachable through parse_spec; kept for direct use
        raise ValueError(f"kubernetes.dynamo_image {k.dynamo_image!r}: no version tag and no dynamo_runtime_version")
    return None


def _json_arg(obj: JSON) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _scheduling(spec: CampaignSpec, campaign_id: str, pool: PoolSpec) -> JSON:
    """Where a worker of this pool may run: its node group or NodePool, tolerating the GPU taint."""
    out: JSON = {}
    if pool.provider == "managed-nodegroup":
        if not pool.nodegroup:
            raise ValueError(f"pools.{pool.name}.nodegroup: required for provider managed-nodegroup "
                             f"(the EKS managed node group its workers are pinned to)")
        out["nodeSelector"] = {"eks.amazonaws.com/nodegroup": pool.nodegroup}
    elif pool.provider == "auto-mode":
        out["nodeSelector"] = {"karpenter.sh/nodepool": nodepool_name(campaign_id, pool.name)}
    # provider "local" (a spec written for the local engine): no node pinning; any GPU node will do
    out["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    return out


# ---------------------------------------------------------------------------------------------- DGD


def _kv_transfer_config(exp: Experiment, role: str) -> JSON | None:
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
    if role == "prefill" and offload:
        return {"kv_connector": "PdConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"connectors": [dict(KVBM_CONNECTOR), dict(NIXL_CONNECTOR)]},
                "kv_connector_module_path": "kvbm.vllm_integration.connector"}
    return dict(NIXL_CONNECTOR)


def uses_kvbm(exp: Experiment, role: str) -> bool:
    return exp.kv_offload is not None and (exp.mode == "aggregated" or role == "prefill")


def worker_args(spec: CampaignSpec, exp: Experiment, group: WorkerGroup) -> list[str]:
    """``python3 -m dynamo.vllm`` arguments of one worker group (Dynamo 1.6.x flags)."""
    args = ["--model", spec.model.name, "--tensor-parallel-size", str(group.tensor_parallel),
            # explicit in every experiment (vLLM's default anyway), so a router rung changes only routing
            "--enable-prefix-caching"]
    if spec.model.revision:  # the same snapshot the prefetch downloaded and AIPerf tokenizes with
        args += ["--revision", spec.model.revision]
    if exp.mode == "disaggregated":
        args += ["--disaggregation-mode", group.role]
    kv_transfer = _kv_transfer_config(exp, group.role)
    if kv_transfer is not None:
        args += ["--kv-transfer-config", _json_arg(kv_transfer)]
    if exp.router == "kv" and group.role != "decode":
        # decode workers publish no KV events in Dynamo (the router places requests by prefill overlap)
        args += ["--kv-events-config", _json_arg(KV_EVENTS_CONFIG)]
    return args


def kvbm_memory_request(offload: KvOffload) -> str:
    """A KVBM worker's host memory request: its CPU KV cache (DYN_KVBM_CPU_CACHE_GB, decimal GB) in whole
    GiB plus KVBM_BASE_MEMORY_GIB for the rest of the process, so the node is never overcommitted."""
    return f"{KVBM_BASE_MEMORY_GIB + math.ceil(offload.cpu_cache_gb * 1e9 / 2**30)}Gi"


def _kvbm_env(offload: KvOffload) -> list[JSON]:
    env = [{"name": "DYN_KVBM_CPU_CACHE_GB", "value": f"{offload.cpu_cache_gb:g}"}]
    if offload.disk_cache_gb is not None:
        env.append({"name": "DYN_KVBM_DISK_CACHE_GB", "value": f"{offload.disk_cache_gb:g}"})
    # FACTS: kvbm_* offload/onboard/hit-rate metrics on port 6880 with DYN_KVBM_METRICS=true
    env.append({"name": "DYN_KVBM_METRICS", "value": "true"})
    return env


def _component_names(exp: Experiment) -> list[str]:
    """One name per worker group: ``Worker``/``Prefill``/``Decode``, numbered when a role repeats."""
    names = []
    for g in exp.workers:
        same = [x for x in exp.workers if x.role == g.role]
        base = _COMPONENT[g.role]
        names.append(base if len(same) == 1 else f"{base}-{same.index(g)}")
    return names


def render_dgd(spec: CampaignSpec, campaign_id: str, experiment: str) -> JSON:
    """The experiment's ``DynamoGraphDeployment``: a frontend and its vLLM workers."""
    exp = spec.experiment(experiment)
    k = spec.kubernetes
    lbl = labels(campaign_id, experiment)
    version = runtime_version(spec)
    frontend: JSON = {
        "name": _COMPONENT["frontend"],
        "type": "frontend",
        "replicas": 1,
        "podTemplate": {
            "metadata": {"labels": {**lbl, LABEL_ROLE: "frontend"}},
            "spec": {"containers": [{
                "name": "main",
                "image": k.dynamo_image,
                "command": ["python3", "-m", "dynamo.frontend"],
                "args": ["--http-port", str(FRONTEND_PORT), "--router-mode", exp.router],
            }]},
        },
    }
    components = [frontend]
    for g, cname in zip(exp.workers, _component_names(exp), strict=True):
        env = _hf_env(spec)
        requests: JSON = {}
        if exp.kv_offload is not None and uses_kvbm(exp, g.role):
            env += _kvbm_env(exp.kv_offload)
            requests["memory"] = kvbm_memory_request(exp.kv_offload)
        gpus = str(g.tensor_parallel)
        pod_spec: JSON = {
            **_scheduling(spec, campaign_id, spec.pool(g.pool)),
            "volumes": [_model_volume(spec)],
            "containers": [{
                "name": "main",
                "image": k.dynamo_image,
                "command": ["python3", "-m", "dynamo.vllm"],
                "args": worker_args(spec, exp, g),
                "env": env,
                "resources": {"limits": {GPU: gpus}, "requests": {GPU: gpus, **requests}},
                "volumeMounts": [dict(_MODEL_MOUNT)],
            }],
        }
        components.append({
            "name": cname,
            "type": g.role,
            "replicas": g.replicas,
            "sharedMemorySize": k.shared_memory,
            "podTemplate": {"metadata": {"labels": {**lbl, LABEL_ROLE: g.role}}, "spec": pod_spec},
        })
    if version is not None:  # Dynamo's admission webhook: required when the image tag is no version
        for c in components:
            c["runtimeVersionOverride"] = version
    return {
        "apiVersion": DGD_API_VERSION,
        "kind": "DynamoGraphDeployment",
        "metadata": _meta(dgd_name(campaign_id, experiment), lbl, k.namespace),
        "spec": {"backendFramework": "vllm", "components": components},
    }


# ------------------------------------------------------------------------------------------ NodePool


def consolidate_after(spec: CampaignSpec, pool_name: str) -> str:
    """How long Karpenter leaves an EMPTY node of our NodePool before removing it (``WhenEmpty``).

    A pool the plan hands over from one experiment to the next (``ExperimentPlan.handover``) stands empty
    between the end of one experiment's teardown and the moment the next one's workers are scheduled:
    ScalePools, CheckCapacity (bounded by ``timeouts.capacity_s``) and Deploy up to Ready (bounded by
    ``timeouts.ready_s``). The delay covers that whole gap plus the plan's teardown allowance, so the nodes
    stay warm for the entire campaign; restore deletes the NodePool, which releases them at once, and the
    delay is only the backstop should every teardown path fail. A pool used by one experiment at a time
    only: 60 s (restore deletes it right after that experiment anyway).
    """
    from benchctl.plan import OVERHEADS

    plan = plan_campaign(spec, "aws")
    if not any(pool_name in e.handover for e in plan.experiments):
        return "60s"
    gap_s = OVERHEADS["aws"]["teardown"] + spec.timeouts.capacity_s + spec.timeouts.ready_s
    return f"{math.ceil(gap_s / 60)}m"


def render_nodepool(spec: CampaignSpec, campaign_id: str, pool_name: str, nodes: int) -> JSON:
    """An EKS Auto Mode (Karpenter) ``NodePool`` for one pool, room for ``nodes`` nodes of its instance type.

    Karpenter counts a node's whole capacity against ``limits`` and never launches an instance type larger
    than what remains (FACTS "Karpenter"), so the limit is ``nodes x gpus_per_node`` GPUs: 1 node of p4d
    (8 GPUs) -> ``nvidia.com/gpu: "8"``. ``WhenEmpty`` consolidation after :func:`consolidate_after`.
    """
    pool = spec.pool(pool_name)
    if nodes <= 0:
        raise ValueError(f"nodepool {pool_name}: nodes must be positive, got {nodes}")
    gpus = nodes * pool.gpus_per_node
    lbl = labels(campaign_id)
    return {
        "apiVersion": NODEPOOL_API_VERSION,
        "kind": "NodePool",
        "metadata": _meta(nodepool_name(campaign_id, pool.name), lbl),
        "spec": {
            "template": {
                "metadata": {"labels": dict(lbl)},
                "spec": {
                    "nodeClassRef": {"group": "eks.amazonaws.com", "kind": "NodeClass",
                                     "name": spec.kubernetes.node_class},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": [pool.instance_type]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                    "taints": [{"key": GPU, "effect": "NoSchedule"}],
                },
            },
            "limits": {GPU: str(gpus)},
            "disruption": {"consolidationPolicy": "WhenEmpty",
                           "consolidateAfter": consolidate_after(spec, pool.name)},
        },
    }


# ---------------------------------------------------------------------------------------------- Jobs


def _job(spec: CampaignSpec, name: str, lbl: dict[str, str], pod_spec: JSON, deadline_s: int) -> JSON:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, lbl, spec.kubernetes.namespace),
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": JOB_TTL_S,
            "activeDeadlineSeconds": deadline_s,
            "template": {"metadata": {"labels": dict(lbl)}, "spec": {"restartPolicy": "Never", **pod_spec}},
        },
    }


def _with_artifact_dir(argv: list[str], path: str) -> list[str]:
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--artifact-dir" and i + 1 < len(out):
            out[i + 1] = path
            return out
        if a.startswith("--artifact-dir="):
            out[i] = f"--artifact-dir={path}"
            return out
    return [*out, "--artifact-dir", path]


def aiperf_script(argv: list[str]) -> str:
    """The load container's ``sh -c`` script: run AIPerf, keep its exit code, always succeed (so the
    artifacts of a failed run are still uploaded; the uploader exits with the kept code)."""
    return f"mkdir -p {ARTIFACT_OUT}; {shlex.join(['aiperf', *argv])}; echo $? > {EXIT_CODE_FILE}; exit 0"


def render_load_job(
    spec: CampaignSpec,
    campaign_id: str,
    experiment: str,
    step_id: str,
    argv: list[str],
    raw_s3_uri: str,
    *,
    input_s3_uri: str | None = None,
    active_deadline_s: int = DEFAULT_DEADLINE_S,
) -> JSON:
    """The Job running one AIPerf step (``argv`` as for ``aiperf``, e.g. from ``aiperf_args.step_args``).

    Init containers: fetch the step's dataset (when ``input_s3_uri``) to ``/artifacts/inputs/<name>``
    (every mention of the S3 URI in ``argv`` becomes that path), then AIPerf writing to
    ``/artifacts/out``, reading the tokenizer offline from the model volume (mounted read-only). The main
    container uploads ``/artifacts/out`` to ``raw_s3_uri`` and exits with AIPerf's exit code.

    No Kubernetes API token is mounted (``automountServiceAccountToken: false``): the Job needs none (S3
    access comes from EKS Pod Identity, which injects its own credentials), and AIPerf's in-cluster
    metrics discovery, which would list every inference pod of the namespace (other campaigns' too, and
    the frontend a second time), finds nothing; the workers' endpoints are given with ``--server-metrics``.
    """
    k = spec.kubernetes
    lbl = labels(campaign_id, experiment, step_id)
    argv = _with_artifact_dir(argv, ARTIFACT_OUT)
    init: list[JSON] = []
    mount = [{"name": "artifacts", "mountPath": ARTIFACTS}]
    if input_s3_uri is not None:
        local = f"{INPUTS_DIR}/{posixpath.basename(input_s3_uri.rstrip('/'))}"
        argv = [local if a == input_s3_uri else a.replace(input_s3_uri, local) for a in argv]
        init.append({
            "name": "fetch-input",
            "image": k.uploader_image,
            "command": ["sh", "-c", f"mkdir -p {INPUTS_DIR} && aws s3 cp {shlex.quote(input_s3_uri)} "
                                    f"{shlex.quote(local)}"],
            "volumeMounts": [dict(m) for m in mount],
        })
    resources = {"cpu": k.load_cpu, "memory": k.load_memory}
    init.append({
        "name": "aiperf",
        "image": aiperf_image(spec),
        "command": ["sh", "-c", aiperf_script(argv)],
        "env": [dict(e) for e in OFFLINE_TOKENIZER_ENV],
        "resources": {"limits": dict(resources), "requests": dict(resources)},
        "volumeMounts": [*(dict(m) for m in mount), {**_MODEL_MOUNT, "readOnly": True}],
    })
    # 97: the upload failed; 98: AIPerf's container left no exit code (cannot happen but must not pass)
    upload = (f"aws s3 cp --recursive {ARTIFACT_OUT} {shlex.quote(raw_s3_uri)} || exit 97; "
              f'exit "$(cat {EXIT_CODE_FILE} 2>/dev/null || echo 98)"')
    pod_spec: JSON = {
        "serviceAccountName": k.load_service_account,
        "automountServiceAccountToken": False,
        "volumes": [{"name": "artifacts", "emptyDir": {}}, _model_volume(spec)],
        "initContainers": init,
        "containers": [{
            "name": "upload",
            "image": k.uploader_image,
            "command": ["sh", "-c", upload],
            "volumeMounts": [dict(m) for m in mount],
        }],
    }
    return _job(spec, job_name(campaign_id, experiment, step_id), lbl, pod_spec, active_deadline_s)


# Values come from the environment, so the script is one constant (nothing to quote).
SMOKE_SCRIPT = """\
import json, os, sys, urllib.request
url = os.environ["FRONTEND_URL"].rstrip("/")
model = os.environ["MODEL"]
n, max_tokens = int(os.environ["SMOKE_REQUESTS"]), int(os.environ["SMOKE_MAX_TOKENS"])
for i in range(n):
    body = {"model": model, "max_tokens": max_tokens, "stream": False,
            "messages": [{"role": "user", "content": f"Smoke test {i}: say hello."}]}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.load(r)
    if not out.get("choices"):
        sys.exit(f"smoke request {i}: no choices in the answer: {out}")
    print(f"smoke request {i}: ok ({(out.get('usage') or {}).get('completion_tokens')} tokens)")
with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
    text = r.read().decode()
if "dynamo_frontend" not in text:
    sys.exit("smoke: /metrics has no dynamo_frontend_* series")
print(f"smoke: {n} requests ok, /metrics ok")
"""


def render_smoke_job(spec: CampaignSpec, campaign_id: str, experiment: str, frontend_url: str) -> JSON:
    """A Job sending ``smoke.requests`` chat completions and reading ``/metrics``; fails on any error."""
    lbl = labels(campaign_id, experiment, "smoke")
    pod_spec: JSON = {"automountServiceAccountToken": False, "containers": [{
        "name": "smoke",
        "image": aiperf_image(spec),
        "command": ["python3", "-c", SMOKE_SCRIPT],
        "env": [
            {"name": "FRONTEND_URL", "value": frontend_url},
            {"name": "MODEL", "value": spec.model.name},
            {"name": "SMOKE_REQUESTS", "value": str(spec.smoke.requests)},
            {"name": "SMOKE_MAX_TOKENS", "value": str(spec.smoke.max_tokens)},
        ],
        "resources": {"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "1", "memory": "512Mi"}},
    }]}
    return _job(spec, job_name(campaign_id, experiment, "smoke"), lbl, pod_spec, 900)


def render_prefetch_job(spec: CampaignSpec, campaign_id: str) -> JSON:
    """Fill the model volume once per campaign (timed apart from deployment start-up): the model at
    ``model.revision`` (unset: main) into the hub cache under HF_HOME, where workers and AIPerf read it."""
    lbl = labels(campaign_id, step_id="prefetch")
    # huggingface_hub >= 1.0 drops `huggingface-cli` for `hf`; use whichever the image has
    script = ('if command -v hf >/dev/null 2>&1; then exec hf download "$MODEL" --revision "$REVISION"; '
              'else exec huggingface-cli download "$MODEL" --revision "$REVISION"; fi')
    pod_spec: JSON = {
        "automountServiceAccountToken": False,
        "volumes": [_model_volume(spec)],
        "containers": [{
            "name": "prefetch",
            "image": spec.kubernetes.dynamo_image,
            "command": ["sh", "-c", script],
            "env": [*_hf_env(spec), {"name": "MODEL", "value": spec.model.name},
                    {"name": "REVISION", "value": spec.model.revision or "main"}],
            "volumeMounts": [dict(_MODEL_MOUNT)],
        }],
    }
    return _job(spec, prefetch_job_name(campaign_id), lbl, pod_spec, DEFAULT_DEADLINE_S)


# The preflight's image checks: each prints its tool's version; the check script compares it with what
# benchctl needs, so a Job that succeeds proves the image runs and holds the right tool, on a CPU node
# (no GPU toleration), with the load Jobs' service account, before any pool is scaled.
PREFLIGHT_CHECKS: dict[str, str] = {
    # AIPerf's own version string is the package's; the Job fails unless it is the one we parse for
    "aiperf": ('v="$(aiperf --version 2>&1 | tail -n 1)"; echo "aiperf --version: $v"; '
               'case "$v" in *"{version}"*) ;; *) echo "need aiperf {version}" >&2; exit 3;; esac'),
    # the uploader runs `aws s3 cp`: AWS CLI v2, and credentials from Pod Identity for the service account
    "uploader": ('v="$(aws --version 2>&1)"; echo "aws --version: $v"; '
                 'case "$v" in aws-cli/2.*) ;; *) echo "need AWS CLI v2" >&2; exit 3;; esac; '
                 'aws sts get-caller-identity --query Arn --output text || exit 4'),
}


# Without a model prefetch the volume must already hold the model: the AIPerf check then also loads the
# tokenizer as the load Jobs will, offline from the volume at the pinned revision (AIPerf's own loader).
TOKENIZER_CHECK = ("python3 -c 'import os; from aiperf.common.tokenizer import Tokenizer; "
                   "Tokenizer.from_pretrained(os.environ[\"MODEL\"], revision=os.environ[\"REVISION\"]); "
                   "print(\"tokenizer\", os.environ[\"MODEL\"], os.environ[\"REVISION\"], \"read offline\")' || exit 5")


def render_preflight_job(spec: CampaignSpec, campaign_id: str, check: str) -> JSON:
    """A short CPU Job proving one image before anything is scaled (``check`` in PREFLIGHT_CHECKS)."""
    image = {"aiperf": aiperf_image(spec), "uploader": spec.kubernetes.uploader_image}[check]
    script = PREFLIGHT_CHECKS[check].replace("{version}", aiperf_args.AIPERF_VERSION)
    resources = {"cpu": "500m", "memory": "1Gi"}
    container: JSON = {"name": check, "image": image, "command": ["sh", "-c", script],
                       "resources": {"limits": dict(resources), "requests": dict(resources)}}
    pod_spec: JSON = {
        "serviceAccountName": spec.kubernetes.load_service_account,
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if check == "aiperf" and not spec.kubernetes.prefetch_model:
        container["command"][2] = f"{script}; {TOKENIZER_CHECK}"
        container["env"] = [*(dict(e) for e in OFFLINE_TOKENIZER_ENV), {"name": "MODEL", "value": spec.model.name},
                            {"name": "REVISION", "value": spec.model.revision or "main"}]
        container["volumeMounts"] = [{**_MODEL_MOUNT, "readOnly": True}]
        pod_spec["volumes"] = [_model_volume(spec)]
    lbl = labels(campaign_id, step_id=f"preflight-{check}")
    return _job(spec, preflight_job_name(campaign_id, check), lbl, pod_spec, PREFLIGHT_DEADLINE_S)


# ------------------------------------------------------------------------------------------ campaign


def _nodepool_nodes(spec: CampaignSpec) -> dict[str, int]:
    """Auto Mode pools -> the most nodes any experiment needs there (experiments run one at a time)."""
    from benchctl.plan import nodes_needed

    out: dict[str, int] = {}
    for exp in spec.experiments:
        for pool, nodes in nodes_needed(spec, exp).items():
            if spec.pool(pool).provider == "auto-mode":
                out[pool] = max(out.get(pool, 0), nodes)
    return out


def _deadline(spec: CampaignSpec, est_s: float) -> int:
    """A load Job's own deadline: the campaign's limit for it (estimate + load grace, see
    campaign.check_load) plus time to pull images and fetch the dataset. A backstop, not the rule."""
    return math.ceil(est_s + spec.timeouts.load_grace_s + 600)


def render_campaign(spec: CampaignSpec, campaign_id: str, *, lake_uri: str = LAKE_PLACEHOLDER) -> list[tuple[str, JSON]]:
    """Every manifest a campaign applies, as (relative path, object), in apply order.

    ``lake_uri`` is the S3 lake root (``BENCHCTL_LAKE_URI``); the default is a visible placeholder. The
    step Jobs' ``--server-metrics`` (the workers' pod addresses) are known only at launch: not rendered.
    """
    from benchctl.campaign import step_dataset

    plan = plan_campaign(spec, "aws")
    out: list[tuple[str, JSON]] = []
    for pool, nodes in sorted(_nodepool_nodes(spec).items()):
        out.append((f"nodepools/{pool}.yaml", render_nodepool(spec, campaign_id, pool, nodes)))
    if spec.kubernetes.prefetch_model:
        out.append(("prefetch-job.yaml", render_prefetch_job(spec, campaign_id)))
    datasets: dict[str, str | None] = {}
    for exp_plan in plan.experiments:
        e = exp_plan.name
        url = frontend_service_url(spec, campaign_id, e)
        out.append((f"experiments/{e}/dynamographdeployment.yaml", render_dgd(spec, campaign_id, e)))
        out.append((f"experiments/{e}/smoke-job.yaml", render_smoke_job(spec, campaign_id, e, url)))
        steps = exp_plan.steps
        if spec.warmup.request_count and steps:
            # as campaign.launch_warmup: highest concurrency, the first step's input length, short outputs
            first = steps[0]
            _, osl = spec.workloads[0].max_lengths()
            isl = first.isl or first.params["isl_range"][0]
            argv = aiperf_args.warmup_args(
                model=spec.model.name, tokenizer=spec.model.name, url=url, artifact_dir=ARTIFACT_OUT,
                request_count=spec.warmup.request_count, concurrency=max(s.concurrency or 1 for s in steps),
                isl=isl, osl=min(osl, 64), seed=spec.seed, tokenizer_revision=spec.model.revision,
            )
            out.append((f"experiments/{e}/jobs/warmup.yaml",
                        render_load_job(spec, campaign_id, e, "warmup", argv,
                                        raw_s3_uri(campaign_id, e, "warmup", lake_uri),
                                        active_deadline_s=_deadline(spec, 60.0 + spec.warmup.request_count))))
        for step in steps:
            if step.step_id not in datasets:
                ds = step_dataset(step)
                datasets[step.step_id] = ds.name if ds is not None else None
            name = datasets[step.step_id]
            raw = raw_s3_uri(campaign_id, e, step.step_id, lake_uri)
            argv = aiperf_args.step_args(
                step, model=spec.model.name, tokenizer=spec.model.name, url=url, artifact_dir=ARTIFACT_OUT,
                input_file=f"{INPUTS_DIR}/{name}" if name else None, slo=spec.slo.model_dump(),
                tokenizer_revision=spec.model.revision,
            )
            out.append((f"experiments/{e}/jobs/{step.step_id}.yaml",
                        render_load_job(spec, campaign_id, e, step.step_id, argv, raw,
                                        input_s3_uri=f"{raw}inputs/{name}" if name else None,
                                        active_deadline_s=_deadline(spec, step.est_s))))
    return out
