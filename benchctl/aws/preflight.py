"""The preflight on EKS: before anything is scaled, every prerequisite of a campaign checked and each missing
one named, including one short CPU Job per image (AIPerf's version and the cluster's egress to the registries
and the Hub; the uploader's AWS CLI, its identity and every call a load runner makes with it), what this
deployment itself allows (its node groups, the Pod Identity Agent add-on), the account's EC2 vCPU quotas
for the GPU pools (``benchctl.aws.quotas``) and whether EC2 can give them their nodes where they launch: the
type offered in the pool's zone, its reservation or Capacity Block usable (``benchctl.aws.capacity_checks``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from benchctl.aws.eks_kube import JOB, job_logs, job_status
from benchctl.aws.k8s.client import ApiError, Conflict, KubeClient, NotFound
from benchctl.aws.k8s.common import HF_TOKEN_KEY, LOAD_IMAGE_PLACEHOLDER, aiperf_image, selection, selector
from benchctl.aws.k8s.preflight_jobs import render_preflight_job
from benchctl.aws.runner_identity import SETTLE_S, RunnerIdentityError
from benchctl.campaign.ports import JSON
from benchctl.constants import POD_IDENTITY_ADDON
from benchctl.errors import NotReadyYet
from benchctl.spec.deployment import PoolSpec
from benchctl.spec.model import CampaignSpec

# A pod that will never start: name the reason at once instead of waiting for the Job's deadline.
_STUCK = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
          "CreateContainerError", "RunContainerError"}


def _check_objects(spec: CampaignSpec, kube: KubeClient) -> list[str]:
    """The namespace, CRDs, NodeClass, secret (and its key) and volume claim (the runners' service account is
    the campaign's own, made by the preflight: ``benchctl.aws.runner_identity``)."""
    k = spec.kubernetes
    auto_mode = any(p.provider == "auto-mode" for p in spec.pools)
    checks: list[tuple[tuple[str, str, str, str | None], str]] = [
        (("v1", "Namespace", k.namespace, None), f"namespace {k.namespace!r}"),
        (("apiextensions.k8s.io/v1", "CustomResourceDefinition", "dynamographdeployments.nvidia.com", None),
         "CRD dynamographdeployments.nvidia.com (install the dynamo-platform chart)"),
        (("v1", "Secret", k.hf_token_secret, k.namespace), f"secret {k.namespace}/{k.hf_token_secret} (HF token)"),
        (("v1", "PersistentVolumeClaim", k.model_pvc, k.namespace), f"volume claim {k.namespace}/{k.model_pvc} (model cache)"),
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
                        f"{sorted(secret.get('data') or {})}); the model prefetch reads the token from it")
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
    from benchctl.aws.pool_nodes import old_drivers

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


EFA_RESOURCE = "vpc.amazonaws.com/efa"
EFA_PLUGIN_IMAGE = "aws-efa-k8s-device-plugin"  # the image of AWS's EFA device plugin (eks-charts, aws-samples)
EFA_PLUGIN_NAMESPACE = "kube-system"
EFA_PLUGIN_INSTALL = ("helm install aws-efa-k8s-device-plugin eks/aws-efa-k8s-device-plugin -n kube-system "
                      "(https://aws.github.io/eks-charts; EKS user guide, 'Manage EFA devices on Amazon EKS')")


def _pool_selector(pool: PoolSpec) -> str:
    return (f"eks.amazonaws.com/nodegroup={pool.nodegroup}" if pool.provider == "managed-nodegroup"
            else f"node.kubernetes.io/instance-type={pool.instance_type}")


def _check_efa(spec: CampaignSpec, kube: KubeClient) -> list[str]:
    """Node-group pools whose workers ask for EFA (``network.efa``) need AWS's EFA device plugin, which
    advertises the interfaces as ``vpc.amazonaws.com/efa``: without it the workers are never scheduled (or, had
    the request been left out, NIXL would silently fall back to TCP). Checked on the DaemonSets of kube-system
    (by the plugin's image, whatever the release is called) and on the pools' nodes that exist and lack the
    resource. EKS Auto Mode pools are not checked: Auto Mode runs the NVIDIA and EFA device plugins itself
    (not as DaemonSets; EKS user guide, "Deploy an accelerated workload") and gives EFA interfaces to the
    instances it launches for pods that request them, which our NodePools' nodes are."""
    efa_pools = [p for p in spec.pools if p.network.efa and p.provider == "managed-nodegroup"]
    if not efa_pools:
        return []
    problems: list[str] = []
    try:
        daemonsets = kube.list("apps/v1", "DaemonSet", EFA_PLUGIN_NAMESPACE)
    except ApiError as err:
        return [f"pools {[p.name for p in efa_pools]} ask for EFA: cannot list the DaemonSets of "
                f"{EFA_PLUGIN_NAMESPACE} to find the EFA device plugin: {err}"]
    plugin = [d["metadata"]["name"] for d in daemonsets
              if any(EFA_PLUGIN_IMAGE in str(c.get("image", ""))
                     for c in (((d.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])]
    if not plugin:
        problems.append(f"pools {', '.join(p.name for p in efa_pools)} ask for EFA (network.efa) but the EFA device "
                        f"plugin is missing: no DaemonSet in {EFA_PLUGIN_NAMESPACE} runs the {EFA_PLUGIN_IMAGE} "
                        f"image, so no node advertises {EFA_RESOURCE} and the workers would never be scheduled; "
                        f"install it: {EFA_PLUGIN_INSTALL}")
    for pool in efa_pools:
        try:
            nodes = kube.list("v1", "Node", label_selector=_pool_selector(pool))
        except ApiError as err:
            problems.append(f"pool {pool.name}: cannot list its nodes to read their {EFA_RESOURCE}: {err}")
            continue
        for node in nodes:
            have = ((node.get("status") or {}).get("allocatable") or {}).get(EFA_RESOURCE)
            if plugin and not have:  # the plugin is installed but does not run (or match) there
                problems.append(f"pool {pool.name}: node {node['metadata']['name']} advertises no {EFA_RESOURCE} "
                                f"although pool {pool.name} asks for EFA: the EFA device plugin ({', '.join(plugin)}) "
                                "does not run on it (its node selector or tolerations), or the instance has no EFA "
                                "interfaces attached")
    return problems


def _pod_problem(pod: JSON) -> str | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _STUCK:
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip()
    return None


def _unscheduled(pod: JSON) -> str | None:
    """The scheduler's reason a pod is not placed (``PodScheduled`` False), e.g. ``Insufficient cpu``."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason', '')}: {cond.get('message', '')}".strip(": ")
    return None


def check_images(spec: CampaignSpec, kube: KubeClient, campaign_id: str, **where: str) -> list[str]:
    """One short CPU Job per image (AIPerf's version; the uploader's AWS CLI, its identity and the load Job
    role's path: ``where`` is the campaign's ``run_uri``, ``lake_uri`` and ``region``, see
    ``render_preflight_job``), created once; NotReadyYet while one runs; the problems of the failed ones,
    named with their logs; the Jobs are deleted once judged."""
    if aiperf_image(spec.kubernetes) == LOAD_IMAGE_PLACEHOLDER:
        return ["kubernetes.aiperf_image is not set and this deployment has no load image (BENCHCTL_LOAD_IMAGE, "
                "set by the control-plane stack): give an image holding aiperf 0.13.0"]
    k = spec.kubernetes
    problems: list[str] = []
    running: list[str] = []
    judged: list[str] = []
    for check in ("aiperf", "uploader"):
        job = render_preflight_job(spec, campaign_id, check, **where)
        name = job["metadata"]["name"]
        image = job["spec"]["template"]["spec"]["containers"][0]["image"]
        with contextlib.suppress(Conflict):  # Plan retried: follow the Job already there
            kube.create(job)
        jstate = {"name": name, "namespace": k.namespace,
                  "pod_selector": selector(selection(campaign_id, step_id=f"preflight-{check}"))}
        code = job_status(kube, jstate)
        stuck = None
        if code is None:
            pods = kube.list("v1", "Pod", k.namespace, jstate["pod_selector"])
            stuck = next((why for why in map(_pod_problem, pods) if why), None)
            if stuck is None:  # unscheduled: a node may still come (an autoscaler); named while it waits
                waiting = next((why for why in map(_unscheduled, pods) if why), None)
                running.append(f"{check} ({image})" + (f" not scheduled yet: {waiting}" if waiting else ""))
                continue
        judged.append(name)
        if code != 0:
            logs = "; ".join(f"{c}: {' | '.join(t.strip().splitlines())[-300:]}"  # one line per problem
                             for c, t in job_logs(kube, jstate, 20).items())
            size = ("" if check != "aiperf" else f" (it asks a load runner's {k.load_cpu} CPU and {k.load_memory} "
                    "of memory, kubernetes.load_cpu/load_memory, on a CPU node; never scheduled, it ends at its "
                    "deadline)")
            problems.append(f"image check {check!r} failed for {image}: "
                            + (stuck or f"Job {name} exited {code}{size}") + (f"; logs: {logs}" if logs else ""))
    if running:
        raise NotReadyYet(f"preflight: image checks still running: {', '.join(running)}")
    for name in judged:
        kube.delete(*JOB, name, k.namespace)
    return problems


def preflight(spec: CampaignSpec, kube: KubeClient, *, eks: Any = None, cluster_name: str = "",
              campaign_id: str | None = None, identity: Any = None, **where: str) -> list[str]:
    """Every missing prerequisite, by name (empty: all there), before anything is scaled.

    Read-only checks first: the cluster, namespace, CRDs (and the Auto Mode NodeClass), the token secret
    and its key, the volume claim, the load service account, the node groups, the GPU driver of the pools'
    nodes that report it, the EFA device plugin of pools that ask for EFA. Only when all pass (the Jobs need the namespace), with a
    ``campaign_id``: the campaign's runner ``identity`` (its service account and Pod Identity association,
    ``benchctl.aws.runner_identity``: made here, NotReadyYet until it is :data:`SETTLE_S` old), then the image
    checks (:func:`check_images`, as the campaign's runners will work: ``where``), which raise NotReadyYet while
    they run.
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
    problems += _check_efa(spec, kube)
    if problems or campaign_id is None:
        return problems
    if identity is not None:  # before any pod of the campaign starts: the image checks run as its runners
        try:
            age = identity.ensure()
        except RunnerIdentityError as err:
            return [str(err)]
        if age < SETTLE_S:
            raise NotReadyYet(f"the runner's Pod Identity association ({identity.where}) is {age:.0f} s old; "
                              f"associations take several seconds to be effective: its pods start at {SETTLE_S:.0f} s")
    return check_images(spec, kube, campaign_id, **where)


def _allowed(nodegroups: tuple[str, ...]) -> list[str]:
    return [n for n in nodegroups if n]


def _allowed_pools_only(spec: CampaignSpec, nodegroups: tuple[str, ...]) -> CampaignSpec:
    """The spec without pools on node groups this deployment may not touch (named apart, not as AccessDenied)."""
    allowed = _allowed(nodegroups)
    keep = [p for p in spec.pools if p.provider != "managed-nodegroup" or not p.nodegroup or p.nodegroup in allowed]
    return spec if len(keep) == len(spec.pools) else spec.model_copy(update={"pools": keep})


def deployment_preflight(spec: CampaignSpec, nodegroups: tuple[str, ...], cluster: str, eks: Any) -> list[str]:
    """What this deployment itself must allow, checked before anything is scaled: the spec's node groups
    are among those the stack may scale (``benchctl:nodegroups``), and, outside Auto Mode, the EKS Pod
    Identity Agent add-on is installed (the load Jobs get their S3 credentials through it)."""
    problems = []
    allowed = _allowed(nodegroups)
    for pool in spec.pools:
        if pool.provider == "managed-nodegroup" and pool.nodegroup and pool.nodegroup not in allowed:
            problems.append(
                f"pool {pool.name}: node group {pool.nodegroup!r} is not one this deployment may scale "
                f"(CDK context benchctl:nodegroups = {allowed}); add it there and deploy again, or use one of those")
    if not any(p.provider == "auto-mode" for p in spec.pools):
        try:
            eks.describe_addon(clusterName=cluster, addonName=POD_IDENTITY_ADDON)
        except Exception as err:
            if str(getattr(err, "response", {}).get("Error", {}).get("Code")) == "ResourceNotFoundException":
                problems.append(
                    f"cluster {cluster}: the EKS add-on {POD_IDENTITY_ADDON} is not installed; the load Jobs get "
                    "their S3 credentials through EKS Pod Identity (aws eks create-addon --cluster-name "
                    f"{cluster} --addon-name {POD_IDENTITY_ADDON})")
            # any other answer (no permission, an API that cannot say): the Jobs' own uploads would tell
    return problems


def with_load_image(spec: CampaignSpec, load_image: str) -> CampaignSpec:
    """``spec`` with ``kubernetes.aiperf_image`` set to the deployment's load image where it names none."""
    if spec.kubernetes.aiperf_image or not load_image:
        return spec
    return spec.model_copy(update={"kubernetes": spec.kubernetes.model_copy(update={"aiperf_image": load_image})})


class EksPreflight:
    """``PreflightPort`` on AWS: what the deployment allows, then the cluster (:func:`preflight`)."""

    def __init__(self, kube: Any, session: Any, identity: Any, *, cluster: str, nodegroups: tuple[str, ...],
                 load_image: str, campaign_id: str, run_uri: str, lake_uri: str) -> None:
        self.kube, self.session, self.cluster, self.identity = kube, session, cluster, identity
        self.nodegroups, self.load_image, self.campaign_id = nodegroups, load_image, campaign_id
        self.where = {"run_uri": run_uri, "lake_uri": lake_uri, "region": session.region_name or ""}

    def check(self, spec: CampaignSpec) -> list[str]:
        from benchctl.aws import capacity_checks
        from benchctl.aws.quotas import preflight_problems

        eks = self.session.client("eks")
        allowed = _allowed_pools_only(spec, self.nodegroups)
        return (deployment_preflight(spec, self.nodegroups, self.cluster, eks)
                + preflight_problems(allowed, self.session, self.cluster)  # EC2 vCPU quotas of the GPU pools
                # each GPU pool's zone offers its type; its reservation or block can give the plan's nodes
                + capacity_checks.preflight_problems(allowed, self.session, self.cluster)
                + preflight(with_load_image(_allowed_pools_only(spec, self.nodegroups), self.load_image), self.kube(),
                            eks=eks, cluster_name=self.cluster, campaign_id=self.campaign_id, identity=self.identity,
                            **self.where))
