"""What every manifest benchctl renders shares: our labels and selectors, object names, and the pod pieces
(the model volume, the Hugging Face token, the images).

Every object carries :func:`labels` (campaign, experiment, step, plus an informative managed-by) and its
name is DNS-1123, at most 63 characters, and includes a short hash of the campaign id (two campaigns may
share a namespace; :mod:`benchctl.spec.names` derives them and knows the limits Dynamo's webhook adds). Objects and pods are SELECTED by :func:`selection` only: our ``benchctl.io/`` labels,
never ``app.kubernetes.io/managed-by``, which the Dynamo operator's Grove pathway overwrites on pods.
Pure: standard library and benchctl only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from benchctl import monitors
from benchctl.spec.deployment import ModelSpec, PoolSpec
from benchctl.spec.model import Kubernetes
from benchctl.spec.names import dgd_name, object_name

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
ARTIFACTS = "/artifacts"  # a load runner Job's emptyDir: a directory per step (request, inputs, out)
LAKE_PLACEHOLDER = "s3://<results-bucket>/lake"  # render_campaign's default: filled in by the engine
RUNS_PLACEHOLDER = "s3://<results-bucket>/runs"  # the run stores' root (render_campaign's default)
REGION_PLACEHOLDER = "<region>"
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
KVBM_METRICS_PORT = monitors.KVBM_METRICS_PORT
# Host memory of a KVBM worker besides its CPU KV cache (Python, CUDA context, NIXL staging): a stated
# assumption; the request is this plus DYN_KVBM_CPU_CACHE_GB, so the scheduler reserves the cache.
KVBM_BASE_MEMORY_GIB = 16

_LABEL_VALUE_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z")


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


def job_name(campaign_id: str, experiment: str, step_id: str) -> str:
    return object_name(campaign_id, (experiment, step_id))


def nodepool_name(campaign_id: str, pool: str | PoolSpec) -> str:
    return object_name(campaign_id, (pool.name if isinstance(pool, PoolSpec) else pool,))


def prefetch_job_name(campaign_id: str) -> str:
    return object_name(campaign_id, ("prefetch",))


def preflight_job_name(campaign_id: str, check: str) -> str:
    return object_name(campaign_id, ("preflight", check))


def frontend_service_url(namespace: str, campaign_id: str, experiment: str) -> str:
    """In-cluster URL of an experiment's frontend (FACTS: Service ``<name>-frontend``, port 8000)."""
    return (f"http://{dgd_name(campaign_id, experiment)}-frontend.{namespace}"
            f".svc.cluster.local:{FRONTEND_PORT}")


def runner_service_account(campaign_id: str) -> str:
    """The Kubernetes service account of a campaign's load runner (and preflight) pods: the campaign id itself.
    EKS Pod Identity tags the role session with it (``kubernetes-service-account``) and the load Job role's
    policy names its objects by it (``runner/${aws:PrincipalTag/kubernetes-service-account}/*``, the raw area's
    ``campaign_id=${...}``): one campaign's runner reaches only that campaign's keys. A service account name is
    a DNS-1123 subdomain; a campaign id in its normal form (``context.check_campaign_id``) is one label of it."""
    from benchctl.campaign.context import check_campaign_id

    return check_campaign_id(campaign_id, "the campaign id cannot name its runner's service account")


# The runner grants: a ConfigMap in the benchmark namespace (stacks/kubernetes/benchctl-identities.yaml) whose data
# maps each live campaign id to its runner service account. The admission policy benchctl-runner-identities reads it
# as its parameter: a Job runs as a service account only when its campaign's grant names that account.
RUNNER_GRANTS = "benchctl-runner-grants"


def runner_grant_patch(campaign_id: str, *, granted: bool) -> JSON:
    """The JSON merge patch (RFC 7386) of :data:`RUNNER_GRANTS` that adds (``granted``) or removes a campaign's
    grant: one key per campaign, so concurrent campaigns never overwrite each other's."""
    account = runner_service_account(campaign_id)
    return {"data": {campaign_id: account if granted else None}}


def control_uri(runs_uri: str, campaign_id: str) -> str:
    """Where a campaign's runner hand-over lives: ``s3://<the run stores' bucket>/runner/<campaign id>``
    (``constants.runner_prefix``; a top-level prefix of the results bucket, outside ``runs/``)."""
    from benchctl.constants import runner_prefix

    if not runs_uri.startswith("s3://"):
        raise ValueError(f"the run stores' root must be an s3:// URI, not {runs_uri!r}")
    return f"s3://{runs_uri.removeprefix('s3://').split('/', 1)[0]}/{runner_prefix(campaign_id)}"


def raw_s3_uri(campaign_id: str, experiment: str, step_id: str, lake_uri: str = LAKE_PLACEHOLDER) -> str:
    """A step's raw area, as the S3 lake lays it out (``<lake>/raw/campaign_id=…/experiment=…/step_id=…/``)."""
    return (f"{lake_uri.rstrip('/')}/raw/campaign_id={campaign_id}/experiment={experiment}"
            f"/step_id={step_id}/")


# -------------------------------------------------------------------------------------- shared bits


def meta(name: str, lbl: dict[str, str], namespace: str | None = None) -> JSON:
    meta: JSON = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(lbl)
    return meta


HF_TOKEN_KEY = "HF_TOKEN"  # noqa: S105 (a key name, not a secret): the key inside the token secret


HF_TOKEN_DIR = "/var/run/secrets/huggingface"  # noqa: S105 (a mount path, not a secret)


def hf_env(k: Kubernetes) -> list[JSON]:
    """The Hugging Face token and hub cache of what downloads from the Hub: the model prefetch only. The
    token is a file (:func:`hf_token_volume`, read through huggingface_hub's ``HF_TOKEN_PATH``), not an
    environment variable: nothing the process starts or dumps inherits it, and no other pod mounts it."""
    return [
        {"name": "HF_TOKEN_PATH", "value": f"{HF_TOKEN_DIR}/token"},
        {"name": "HF_HOME", "value": HF_HOME},
    ]


def hf_token_volume(k: Kubernetes) -> JSON:
    """The token secret's one key as the file ``token`` (mounted read-only at :data:`HF_TOKEN_DIR`)."""
    return {"name": "hf-token", "secret": {"secretName": k.hf_token_secret,
                                            "items": [{"key": HF_TOKEN_KEY, "path": "token"}]}}


HF_TOKEN_MOUNT: JSON = {"name": "hf-token", "mountPath": HF_TOKEN_DIR, "readOnly": True}


# Everything that reads the model reads it offline from the prefetched model volume, never from the Hub:
# the volume is a Hugging Face hub cache (what the prefetch's snapshot_download writes under HF_HOME). With
# these variables AIPerf resolves `--tokenizer <model> --tokenizer-revision <rev>` there (FACTS "A tokenizer
# without a hub"), and the Dynamo frontend and workers never reach for the Hub (they are given the snapshot
# directory itself, :func:`model_snapshot_dir`).
OFFLINE_TOKENIZER_ENV: list[JSON] = [
    {"name": "HF_HOME", "value": HF_HOME},
    {"name": "HF_HUB_OFFLINE", "value": "1"},
    {"name": "TRANSFORMERS_OFFLINE", "value": "1"},
]


def model_snapshot_dir(model: ModelSpec) -> str:
    """The model's files on the volume, as the pods mount it: the hub cache's snapshot directory of
    ``model.revision`` (``$HF_HOME/hub/models--<org>--<name>/snapshots/<commit>``). The hub cache names a
    snapshot directory by its commit only (a branch or tag is a file under ``refs/`` naming one), so the
    revision must be a commit hash; the spec requires one for pools on EKS."""
    from benchctl.spec.deployment import is_commit

    if not is_commit(model.revision):
        raise ValueError(f"model.revision {model.revision!r}: the workers serve the snapshot directory of a commit "
                         "(hub/models--<org>--<name>/snapshots/<commit>) from the model volume; pin a full "
                         "40-character commit hash")
    return f"{HF_HOME}/hub/models--{model.name.replace('/', '--')}/snapshots/{model.revision}"


# On EKS Auto Mode (Karpenter) a node whose pods carry this is not disrupted voluntarily (drift, consolidation)
# while they run: a campaign's serving pods stay on the nodes they started on (FACTS "First contact").
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}


def model_volume(k: Kubernetes) -> JSON:
    # Workers of one experiment may run on several nodes at once: the PVC must be ReadWriteMany (EFS).
    return {"name": "model-cache", "persistentVolumeClaim": {"claimName": k.model_pvc}}


MODEL_MOUNT: JSON = {"name": "model-cache", "mountPath": MODELS_DIR}


def aiperf_image(k: Kubernetes) -> str:
    """The load image: the spec's, else the placeholder of the deployment's (see LOAD_IMAGE_PLACEHOLDER)."""
    return k.aiperf_image or LOAD_IMAGE_PLACEHOLDER


def runtime_version(k: Kubernetes) -> str | None:
    """``runtimeVersionOverride`` of every component: the spec's version, or None when the image's tag
    is one (Dynamo's webhook parses it). The spec refuses an untagged image without a version."""
    from benchctl.spec.model import image_tag_version

    if k.dynamo_runtime_version is not None:
        return k.dynamo_runtime_version
    if image_tag_version(k.dynamo_image) is None:  # unreachable through parse_spec; kept for direct use
        raise ValueError(f"kubernetes.dynamo_image {k.dynamo_image!r}: no version tag and no dynamo_runtime_version")
    return None


def json_arg(obj: JSON) -> str:
    return json.dumps(obj, separators=(",", ":"))


# ------------------------------------------------------------------------------------------ placement
#
# GPU nodes carry the taint nvidia.com/gpu:NoSchedule: the platform's GPU managed node groups
# (stacks/platform_nodes.py) and every Karpenter NodePool a campaign creates (benchctl.aws.k8s.nodepool; the
# admission policy benchctl-nodepools refuses one without it). Only what must run there tolerates it: the GPU
# workers, the mocker workers of an Auto Mode pool (their NodePool carries the taint too) and the pre-pull
# DaemonSets (:func:`scheduling`). Everything else of a campaign (the Frontend, the load runner, smoke, prefetch
# and preflight Jobs) and of the platform (Prometheus, Grafana, the operators) runs on the CPU pool
# (:func:`cpu_node_affinity`) and never tolerates it: a pod there is not evicted when a GPU pool scales in.

GPU_TOLERATION: JSON = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
POOL_LABEL = "benchctl.io/pool"  # on the platform's managed node groups (stacks/platform_nodes.py)
CPU_POOL = "cpu"  # the platform's CPU node group's benchctl.io/pool (benchctl-cpu): platform pods, Frontend, Jobs
# EKS Auto Mode's built-in NodePool for general workloads (EKS user guide, "Enable or Disable Built-in NodePools":
# system, tainted CriticalAddonsOnly, and general-purpose); Karpenter labels its nodes karpenter.sh/nodepool
AUTO_MODE_CPU_NODEPOOL = "general-purpose"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
NODEPOOL_LABEL = "karpenter.sh/nodepool"


def tolerates_gpu_taint(pool: PoolSpec) -> bool:
    """Whether a pod pinned to this pool's nodes must tolerate the GPU taint: a GPU pool's, and any Auto Mode
    pool's (every NodePool a campaign creates carries the taint, a CPU one included). A CPU managed node group
    (the rehearsal's) is not tainted: its mocker workers need no toleration."""
    return pool.gpus_per_node > 0 or pool.provider == "auto-mode"


def scheduling(campaign_id: str, pool: PoolSpec) -> JSON:
    """Where a worker of this pool may run: its node group or NodePool, tolerating the GPU taint where the
    pool's nodes carry it (:func:`tolerates_gpu_taint`)."""
    out: JSON = {}
    if pool.provider == "managed-nodegroup":
        if not pool.nodegroup:
            raise ValueError(f"pools.{pool.name}.nodegroup: required for provider managed-nodegroup "
                             f"(the EKS managed node group its workers are pinned to)")
        out["nodeSelector"] = {NODEGROUP_LABEL: pool.nodegroup}
    elif pool.provider == "auto-mode":
        out["nodeSelector"] = {NODEPOOL_LABEL: nodepool_name(campaign_id, pool.name)}
    # provider "local" (a spec written for the local engine): no node pinning; any GPU node will do
    if tolerates_gpu_taint(pool):
        out["tolerations"] = [dict(GPU_TOLERATION)]
    return out


def cpu_node_affinity(nodegroups: Sequence[str] = (), nodepools: Sequence[str] = ()) -> JSON:
    """The node affinity of a pod that belongs on the CPU pool (it never tolerates the GPU taint).

    Required, either term: the platform's CPU node group (``benchctl.io/pool=cpu``), or a node of no benchctl
    pool at all (an existing cluster's nodes, Auto Mode's general-purpose NodePool); and in both, no GPU node
    whoever labels it (GPU feature discovery's ``nvidia.com/gpu.present``, Auto Mode's
    ``eks.amazonaws.com/instance-gpu-manufacturer``), no node of a NodePool a campaign created
    (``benchctl.io/campaign``, its template's label), none of ``nodegroups`` / ``nodepools`` (the campaign's
    own pools). ``NotIn`` and ``DoesNotExist`` hold for a node without the label (Kubernetes "Assigning Pods to
    Nodes", node affinity operators). Preferred: the CPU node group, or Auto Mode's general-purpose NodePool
    (each term matches only on its kind of platform). Not a hard nodeSelector on the CPU pool: a cluster the
    platform did not make has no such label, and the pods must still run there."""
    common: list[JSON] = [{"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]},
                          {"key": "eks.amazonaws.com/instance-gpu-manufacturer", "operator": "NotIn",
                           "values": ["nvidia"]},
                          {"key": LABEL_CAMPAIGN, "operator": "DoesNotExist"}]
    common += [{"key": key, "operator": "NotIn", "values": sorted(set(values))}
               for key, values in ((NODEGROUP_LABEL, nodegroups), (NODEPOOL_LABEL, nodepools)) if values]
    return {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [CPU_POOL]}, *common]},
            {"matchExpressions": [{"key": POOL_LABEL, "operator": "DoesNotExist"}, *common]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": POOL_LABEL, "operator": "In", "values": [CPU_POOL]}]}},
            {"weight": 100, "preference": {"matchExpressions": [
                {"key": NODEPOOL_LABEL, "operator": "In", "values": [AUTO_MODE_CPU_NODEPOOL]}]}}]}}


def off_campaign_pools(pools: Sequence[PoolSpec], campaign_id: str) -> JSON:
    """:func:`cpu_node_affinity` off these pools' nodes (their node groups and this campaign's NodePools)."""
    nodegroups = [p.nodegroup for p in pools if p.provider == "managed-nodegroup" and p.nodegroup]
    nodepools = [nodepool_name(campaign_id, p.name) for p in pools if p.provider == "auto-mode"]
    return cpu_node_affinity(nodegroups, nodepools)

