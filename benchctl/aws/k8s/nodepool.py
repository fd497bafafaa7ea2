"""The GPU pools' Karpenter NodePools (EKS Auto Mode) and the DaemonSets that pre-pull a pool's images."""

from __future__ import annotations

import math
import shlex
from typing import Any

from benchctl.aws.k8s.capacity import node_capacity
from benchctl.aws.k8s.common import (
    GPU,
    NODEPOOL_API_VERSION,
    job_name,
    labels,
    meta,
    nodepool_name,
    scheduling,
)
from benchctl.aws.k8s.efa import (
    efa_image,
    efa_per_worker,
)
from benchctl.aws.k8s.jobs import container_security
from benchctl.campaign.ports import DeploymentTarget
from benchctl.planning.plan import plan_campaign
from benchctl.spec.deployment import PoolSpec
from benchctl.spec.model import CampaignSpec

JSON = dict[str, Any]


# A pre-pull container's user: nobody (65534), whatever the image's USER, under the runtime's default seccomp
# profile; with :func:`container_security`, Pod Security "restricted"
PREPULL_SECURITY = {"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"}}

# What a pre-pull container prints once, in the image it holds, before it sleeps: the engine's own package
# versions (the installed distributions' metadata: nothing is imported, no GPU is touched) and the image's CUDA
# (NVIDIA's CUDA base images set CUDA_VERSION), one line Serving reads back from the pod's log as the run's
# provenance (``benchctl.campaign.provenance``). Any failure prints nothing and the pull still holds.
ENGINE_PACKAGES_MARKER = "BENCHCTL_ENGINE_PACKAGES "
ENGINE_PACKAGES = ("ai-dynamo", "ai-dynamo-runtime", "vllm", "torch", "nixl", "nixl-cu12", "nixl-cu13")
ENGINE_PACKAGES_SCRIPT = (
    "import importlib.metadata as m, json, os\n"
    "out = {}\n"
    f"for name in {ENGINE_PACKAGES!r}:\n"
    "    try:\n"
    "        out[name] = m.version(name)\n"
    "    except Exception:\n"
    "        pass\n"
    "out['CUDA_VERSION'] = os.environ.get('CUDA_VERSION', '')\n"
    f"print({ENGINE_PACKAGES_MARKER!r} + json.dumps(out, sort_keys=True), flush=True)\n")
PREPULL_COMMAND = ["sh", "-c", f"python3 -c {shlex.quote(ENGINE_PACKAGES_SCRIPT)} || true; exec sleep infinity"]


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
    from benchctl.planning.plan import OVERHEADS

    plan = plan_campaign(spec, "aws")
    if not any(pool_name in e.handover for e in plan.experiments):
        return "60s"
    gap_s = OVERHEADS["aws"]["teardown"] + spec.timeouts.capacity_s + spec.timeouts.ready_s
    return f"{math.ceil(gap_s / 60)}m"


def prepull_pools(target: DeploymentTarget) -> list[str]:
    """The experiment's pools whose nodes a pre-pull DaemonSet can be pinned to (a node group or NodePool)."""
    pools = dict.fromkeys(g.pool for g in target.experiment.workers)
    return [p for p in pools if target.pool(p).provider in ("managed-nodegroup", "auto-mode")]


def prepull_images(target: DeploymentTarget, pool_name: str) -> list[str]:
    """The runtime images the experiment's workers on this pool run (the EFA image where they use EFA)."""
    exp, pool, k = target.experiment, target.pool(pool_name), target.kubernetes
    images = [efa_image(pool, k) if exp.mode == "disaggregated" and efa_per_worker(pool, g) else k.dynamo_image
              for g in exp.workers if g.pool == pool_name]
    return list(dict.fromkeys(images))


def render_prepull(target: DeploymentTarget, campaign_id: str, pool_name: str) -> JSON:
    """A DaemonSet on the pool's nodes (its node group or NodePool, tolerating the GPU taint) whose only
    work is to have the experiment's runtime images on each node as soon as it joins: the ~20 GB pull
    overlaps the other nodes' boot and the GPU device plugin's start instead of following Deploy. Created
    by ScalePools before the pool is scaled, deleted with the experiment (our labels). Its containers hold
    the images with ``sleep`` (no registry besides the runtime image's own), after printing the image's engine
    package versions once (:data:`ENGINE_PACKAGES_SCRIPT`), request no GPU and almost no CPU or memory, and
    mount no API token. They meet Pod Security "restricted" as ``nobody`` (:data:`PREPULL_SECURITY`): neither
    needs a user of the image's own, so no image's USER is assumed."""
    experiment = target.experiment.name
    lbl = labels(campaign_id, experiment, f"prepull-{pool_name}")
    small, most = {"cpu": "10m", "memory": "32Mi"}, {"cpu": "100m", "memory": "128Mi"}  # one python3 at start
    containers = [{"name": f"image-{i}", "image": image, "command": list(PREPULL_COMMAND),
                   "resources": {"requests": dict(small), "limits": dict(most)},
                   "securityContext": container_security()}
                  for i, image in enumerate(prepull_images(target, pool_name))]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(job_name(campaign_id, experiment, f"prepull-{pool_name}"), lbl, target.kubernetes.namespace),
        "spec": {
            "selector": {"matchLabels": dict(lbl)},
            "template": {"metadata": {"labels": dict(lbl)}, "spec": {
                **scheduling(campaign_id, target.pool(pool_name)), "automountServiceAccountToken": False,
                "securityContext": PREPULL_SECURITY,
                "terminationGracePeriodSeconds": 0, "containers": containers}},
        },
    }


# The NodeClass the platform makes for reservations (stacks.config.RESERVED_NODE_CLASS, from benchctl:gpu_capacity):
# its ``capacityReservationSelectorTerms`` name the reservation or Capacity Block. Auto Mode labels a node launched
# into a reservation its NodeClass selects ``karpenter.sh/capacity-type: reserved``, and uses a Capacity Block only
# through such a NodeClass (EKS user guide, "Control deployment of workloads into Capacity Reservations with EKS Auto
# Mode", https://docs.aws.amazon.com/eks/latest/userguide/auto-odcr.html). Auto Mode's built-in NodeClass
# (AUTO_MODE_DEFAULT_NODE_CLASS) cannot be changed, so it never selects one.
RESERVED_NODE_CLASS = "benchctl-reserved"
AUTO_MODE_DEFAULT_NODE_CLASS = "default"
ZONE_LABEL = "topology.kubernetes.io/zone"


def nodepool_node_class(spec: CampaignSpec, pool: PoolSpec) -> str:
    """The NodeClass a pool's NodePool names: the spec's ``kubernetes.node_class`` (the one the deployment's
    admission policy allows). A pool bought as a reservation or a Capacity Block needs a NodeClass that selects
    it: refused on Auto Mode's built-in ``default``, which selects none (its NodePool would never launch)."""
    k = spec.kubernetes
    if pool.capacity.purchase != "on-demand" and k.node_class == AUTO_MODE_DEFAULT_NODE_CLASS:
        raise ValueError(
            f"pools.{pool.name}.capacity.purchase {pool.capacity.purchase!r} on Auto Mode: kubernetes.node_class is "
            f"{k.node_class!r}, Auto Mode's built-in NodeClass, which selects no capacity reservation, so the pool's "
            f"NodePool (karpenter.sh/capacity-type reserved) could launch nothing; set kubernetes.node_class to the "
            f"NodeClass that selects {pool.capacity.reservation_id} ({RESERVED_NODE_CLASS!r}, which the platform makes "
            f"from benchctl:gpu_capacity)")
    return k.node_class


def nodepool_requirements(pool: PoolSpec) -> list[JSON]:
    """What a node of the pool must be (Karpenter v1 ``spec.template.spec.requirements``): its instance type; the
    capacity type ``on-demand``, or ``reserved`` for a reservation or a Capacity Block (so Karpenter never falls
    back to On-Demand outside it); and its zone when ``capacity.zone`` names one (the reservation's)."""
    reserved = pool.capacity.purchase != "on-demand"
    out: list[JSON] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [pool.instance_type]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved" if reserved else "on-demand"]},
    ]
    if pool.capacity.zone:
        out.append({"key": ZONE_LABEL, "operator": "In", "values": [pool.capacity.zone]})
    return out


def render_nodepool(spec: CampaignSpec, campaign_id: str, pool_name: str, nodes: int) -> JSON:
    """An EKS Auto Mode (Karpenter) ``NodePool`` for one pool, room for ``nodes`` nodes of its instance type.

    Karpenter counts a node's whole capacity against ``limits`` and never launches an instance type larger
    than what remains (FACTS "Karpenter"), so the limit is ``nodes x gpus_per_node`` GPUs: 1 node of p4d
    (8 GPUs) -> ``nvidia.com/gpu: "8"``, and those nodes' cpu and memory (``cpu: "96"``, ``memory: 1152Gi``;
    ``admission.NODE_CAPACITY``). ``WhenEmpty`` consolidation after :func:`consolidate_after`; a disruption
    budget forbids replacing drifted nodes (Auto Mode replaces nodes when their AMI or NodeClass changes),
    and the DGD's pods carry ``karpenter.sh/do-not-disrupt`` as well. Its nodes carry the GPU taint (only the
    pool's workers and pre-pull DaemonSets tolerate it); a pool bought as a reservation or a Capacity Block takes
    reserved capacity only, in its zone (:func:`nodepool_requirements`, :func:`nodepool_node_class`).
    """
    pool = spec.pool(pool_name)
    if nodes <= 0:
        raise ValueError(f"nodepool {pool_name}: nodes must be positive, got {nodes}")
    vcpus, memory_gib, _ = node_capacity(pool.instance_type)
    lbl = labels(campaign_id)
    return {
        "apiVersion": NODEPOOL_API_VERSION,
        "kind": "NodePool",
        "metadata": meta(nodepool_name(campaign_id, pool.name), lbl),
        "spec": {
            "template": {
                "metadata": {"labels": dict(lbl)},
                "spec": {
                    "nodeClassRef": {"group": "eks.amazonaws.com", "kind": "NodeClass",
                                     "name": nodepool_node_class(spec, pool)},
                    "requirements": nodepool_requirements(pool),
                    # every NodePool of ours, a CPU one included (the admission policy benchctl-nodepools
                    # refuses one without it): only our workers and pre-pull DaemonSets land on its nodes
                    "taints": [{"key": GPU, "effect": "NoSchedule"}],
                },
            },
            "limits": {"cpu": str(nodes * vcpus), "memory": f"{nodes * memory_gib}Gi", GPU: str(nodes * pool.gpus_per_node)},
            "disruption": {"consolidationPolicy": "WhenEmpty",
                           "consolidateAfter": consolidate_after(spec, pool.name),
                           # no node of ours replaced for drift (an AMI or NodeClass update) mid-campaign;
                           # empty ones are still removed (the default budget)
                           "budgets": [{"nodes": "0", "reasons": ["Drifted"]}]},
        },
    }
