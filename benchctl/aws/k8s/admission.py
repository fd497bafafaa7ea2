"""What the API server itself lets the benchctl functions do: each function's Kubernetes group (RBAC,
stacks/kubernetes/benchctl-rbac.yaml; EKS access entries) and the parameters of the admission policies
(stacks/kubernetes/benchctl-admission.yaml): the deployment's allow-list, a ConfigMap the policies read.

The allow-list belongs to the deployment, not to a spec: :func:`admission_params` renders it, and
``python -m benchctl.aws.k8s.admission`` writes stacks/kubernetes/benchctl-admission-params.yaml from
:data:`DEFAULT_ALLOW_LIST`: the project's cdk.json ceilings (``benchctl:ceilings``, the ones the CLI, Plan and
ScalePools hold every spec to; a test holds the file to them). Changed ceilings: render the file again.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchctl.aws.k8s.admission_shapes import script_params
from benchctl.aws.k8s.capacity import EFA_INTERFACES, NODE_CAPACITY, node_capacity
from benchctl.aws.k8s.common import LABEL_MANAGED, MANAGED_BY
from benchctl.planning import ceilings as ceiling_rules
from benchctl.planning.ceilings import Ceilings

JSON = dict[str, Any]

# One Kubernetes group per function that calls the cluster (its role's EKS access entry joins it; the RBAC
# file binds each to its own rights). The admission policies match these groups.
FUNCTION_GROUPS: dict[str, str] = {
    "Plan": "benchctl-plan",
    "Pools": "benchctl-pools",
    "Serving": "benchctl-serving",
    "Load": "benchctl-load",
    "Teardown": "benchctl-teardown",
    "Sweep": "benchctl-sweep",
}
PARAMS_NAME = "benchctl-admission"
__all__ = ["EFA_INTERFACES", "NODE_CAPACITY", "node_capacity"]  # kept importable from here (benchctl.aws.k8s.capacity)

@dataclass(frozen=True)
class AdmissionAllowList:
    """The deployment's allow-list the admission policies enforce."""

    # an image is allowed when it starts with one of these; each ends in "/" (a registry or repository
    # path), ":" or "@" (one repository's tags or digests), so "nvcr.io/nvidia" cannot admit "nvcr.io/nvidiax"
    image_prefixes: tuple[str, ...]
    instance_types: tuple[str, ...]
    service_accounts: tuple[str, ...]
    # the images a privileged (EFA) prefill or decode worker may run: the Dynamo runtime's repositories only
    privileged_image_prefixes: tuple[str, ...] = ()
    max_nodes_per_pool: int = 8
    node_class: str = "default"
    namespace: str = "dynamo-bench"
    # the only Secret a pod may mount (the model prefetch's HF token) and the only claim (the model volume)
    hf_token_secret: str = "hf-token"  # noqa: S105 (a Secret's name, not a secret)
    model_claim: str = "model-cache"
    # bounds of what a spec could not reach: a Job's activeDeadlineSeconds, an emptyDir's sizeLimit, a worker's
    # /dev/shm
    max_job_seconds: int = 48 * 3600
    max_empty_dir: str = "4Ti"
    max_shared_memory: str = "64Gi"
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = [f"image prefix {p!r}: must end in '/', ':' or '@' (a registry, repository or one "
                    "repository's tags)" for p in (*self.image_prefixes, *self.privileged_image_prefixes)
                    if not p or p[-1] not in "/:@" or " " in p]
        problems += [f"privileged image prefix {p!r}: not under the allowed images" for p in self.privileged_image_prefixes
                     if not any(p.startswith(q) for q in self.image_prefixes)]
        problems += [f"instance type {t!r}: unknown" for t in self.instance_types if t not in NODE_CAPACITY]
        problems += [f"service account {s!r}: empty or with a space" for s in self.service_accounts if not s or " " in s]
        problems += [f"{what} {name!r}: not a Kubernetes object name" for what, name in
                     (("hf_token_secret", self.hf_token_secret), ("model_claim", self.model_claim))
                     if not name or " " in name or name != name.lower()]
        if self.max_nodes_per_pool < 1:
            problems.append(f"max_nodes_per_pool {self.max_nodes_per_pool}: must be at least 1")
        if problems:
            raise ValueError("admission allow-list: " + "; ".join(problems))

    def pod_ceilings(self) -> tuple[int, str, int, int]:
        """(cpu, memory, GPUs, EFA interfaces) one pod may ask: the largest allowed node's."""
        cpu, mem, gpus = (max(node_capacity(t)[i] for t in self.instance_types) for i in range(3))
        return cpu, f"{mem}Gi", gpus, max(EFA_INTERFACES.get(t, 0) for t in self.instance_types)

    def ceilings(self) -> tuple[int, str, int]:
        """(cpu, memory, GPUs) a NodePool may have: the largest allowed node times the node ceiling."""
        cpu, mem, gpus = (max(node_capacity(t)[i] for t in self.instance_types) * self.max_nodes_per_pool
                          for i in range(3))
        return cpu, f"{mem}Gi", gpus


def image_prefixes(repository: str) -> tuple[str, ...]:
    """The admission prefixes of one allowed repository of the ceilings (normalised as Docker does, e.g.
    ``docker.io/library/python``): the repository's tags and digests and the repositories under it, in every
    spelling a pod's image may use (a Docker Hub image also without ``docker.io/``, an official one also
    without ``library/``). Never a bare prefix, so ``nvcr.io/nvidia`` cannot admit ``nvcr.io/nvidiax``."""
    names = [repository]
    if repository.startswith("docker.io/"):
        short = repository.removeprefix("docker.io/")
        names.append(short)
        if short.startswith("library/"):  # `python:3.12` is docker.io/library/python; `python/x` is not under it
            return (*(f"{n}{c}" for n in names for c in "/:@"), *(short.removeprefix("library/") + c for c in ":@"))
    return tuple(f"{n}{c}" for n in names for c in "/:@")


# the Dynamo runtime images' repositories (NGC): the only images a privileged worker may run
DYNAMO_RUNTIME_REPOSITORIES = "nvcr.io/nvidia/ai-dynamo"


def allow_list_from_ceilings(ceilings: Ceilings, *, load_image_registry: str | None = None,
                             namespace: str = "dynamo-bench", node_class: str = "default",
                             service_accounts: tuple[str, ...] = (),
                             privileged_image_prefixes: tuple[str, ...] | None = None) -> AdmissionAllowList:
    """The allow-list from the deployment's ceilings (CDK context ``benchctl:ceilings``, the same the CLI, Plan
    and ScalePools hold specs to): the allowed image repositories, instance types and nodes per pool.
    ``load_image_registry`` (the stack's ECR registry, ``ACCOUNT.dkr.ecr.REGION.amazonaws.com/``) is added to
    the image prefixes. A privileged worker's image: by default, the allowed repositories under the Dynamo
    runtime's (an EFA image built elsewhere: name its repository's prefix in ``privileged_image_prefixes``)."""
    prefixes = tuple(p for repo in ceilings.image_repositories for p in image_prefixes(repo))
    if load_image_registry:
        prefixes += (load_image_registry,)
    if privileged_image_prefixes is None:
        privileged_image_prefixes = tuple(p for repo in ceilings.image_repositories
                                          if repo == DYNAMO_RUNTIME_REPOSITORIES
                                          or repo.startswith(DYNAMO_RUNTIME_REPOSITORIES + "/")
                                          for p in image_prefixes(repo))
    return AdmissionAllowList(image_prefixes=prefixes, instance_types=tuple(sorted(ceilings.instance_types)),
                              service_accounts=service_accounts, max_nodes_per_pool=ceilings.max_nodes_per_pool,
                              node_class=node_class, namespace=namespace,
                              privileged_image_prefixes=privileged_image_prefixes)


DEFAULT_ALLOW_LIST = allow_list_from_ceilings(ceiling_rules.resolve(None, {}))  # the project's cdk.json


def admission_params(allow: AdmissionAllowList = DEFAULT_ALLOW_LIST) -> JSON:
    """The ConfigMap the admission policies read (their ``paramRef``), in the benchmark namespace. Lists are
    space-separated (ConfigMap values are strings; the policies split them)."""
    cpu, memory, gpus = allow.ceilings()
    pod_cpu, pod_memory, pod_gpus, pod_efa = allow.pod_ceilings()
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": PARAMS_NAME, "namespace": allow.namespace, "labels": {LABEL_MANAGED: MANAGED_BY}},
        "data": {
            "imagePrefixes": " ".join(allow.image_prefixes),
            "privilegedImagePrefixes": " ".join(allow.privileged_image_prefixes),
            "serviceAccounts": " ".join(allow.service_accounts),
            "instanceTypes": " ".join(allow.instance_types),
            "maxCpu": str(cpu), "maxMemory": memory, "maxGpus": str(gpus),
            "nodeClass": allow.node_class,
            "hfTokenSecret": allow.hf_token_secret, "modelClaim": allow.model_claim,
            "maxPodCpu": str(pod_cpu), "maxPodMemory": pod_memory, "maxPodGpus": str(pod_gpus),
            "maxPodEfa": str(pod_efa), "maxReplicas": str(gpus), "maxJobSeconds": str(allow.max_job_seconds),
            "maxEmptyDir": allow.max_empty_dir, "maxSharedMemory": allow.max_shared_memory,
            # what the pods run, exactly (benchctl's own scripts: render this file again when they change)
            **script_params(),
        },
    }


PARAMS_HEADER = """\
# The deployment's allow-list the admission policies read (stacks/kubernetes/benchctl-admission.yaml).
# Rendered by `python -m benchctl.aws.k8s.admission` from cdk.json's benchctl:ceilings (DEFAULT_ALLOW_LIST);
# add your load image's registry (the stack's ECR, ACCOUNT.dkr.ecr.REGION.amazonaws.com/) to imagePrefixes
# before applying. Lists are space-separated. The functions' groups have no right to change this ConfigMap.
"""


def render_params_file(allow: AdmissionAllowList = DEFAULT_ALLOW_LIST) -> str:
    import yaml

    return PARAMS_HEADER + yaml.safe_dump(admission_params(allow), sort_keys=False, width=200)


if __name__ == "__main__":  # pragma: no cover (the file's contents are held by a test)
    sys.stdout.write(render_params_file())
