"""Shared by the tests that hold the AWS code path to the other side's definitions (the integration tier's
``aws_worlds`` fixture is built here: every example run as a whole campaign through the EKS adapters)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from benchctl.aws.k8s.admission import FUNCTION_GROUPS, admission_params, allow_list_from_ceilings
from benchctl.planning import ceilings
from tests import crd_schemas, yaml_files
from tests.fakes import eks_world
from tests.fakes.admission import Admission
from tests.fakes.eks_world import LOAD_IMAGE, TOKEN, World
from tests.fakes.k8s_api import FakeKubeApi

ROOT = Path(__file__).resolve().parents[1]
RBAC_FILE = ROOT / "stacks" / "kubernetes" / "benchctl-rbac.yaml"
ADMISSION_FILE = ROOT / "stacks" / "kubernetes" / "benchctl-admission.yaml"
IDENTITIES_FILE = ROOT / "stacks" / "kubernetes" / "benchctl-identities.yaml"  # the runner grants' policies
K8S_VERSION = "1.33"
FAILED_STEP = "concurrency-sweep-c1-r0"  # made to fail in every campaign: its log tails are collected


def job_problems(job: dict[str, Any]) -> list[str]:
    """Kubernetes' own schema of a built-in kind (Job, DaemonSet; kubernetes-validate's bundled OpenAPI, strict:
    unknown fields refused)."""
    try:
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        return [f"{'/'.join(map(str, err.absolute_path))}: {err.message[:300]}"]
    return []


@functools.cache
def admission() -> Admission:
    """The admission policies of stacks/kubernetes/benchctl-admission.yaml with the deployment's parameters
    (the default allow-list and this test deployment's load image registry, as docs/howto/aws-existing-cluster.md
    asks): one per process (its verdicts are a pure function of each request: they are kept)."""
    allow = allow_list_from_ceilings(ceilings.default(), load_image_registry=LOAD_IMAGE.split("/")[0] + "/")
    return Admission(yaml_files.load_all(ADMISSION_FILE), [admission_params(allow)])


def writer_group(path: str, obj: dict[str, Any]) -> str:
    """The group of the function that writes an object ``benchctl render`` makes at ``path``
    (stacks/kubernetes/benchctl-rbac.yaml): Pools the node pools, the image pre-pull and the model prefetch; Load
    the runner Jobs; Serving the deployment and its smoke Job."""
    if obj["kind"] in ("NodePool", "DaemonSet") or path.endswith("prefetch-job.yaml"):
        return FUNCTION_GROUPS["Pools"]
    return FUNCTION_GROUPS["Load"] if "/jobs/" in path else FUNCTION_GROUPS["Serving"]


@functools.cache
def cluster_admission() -> Admission:
    """Every admission policy a cluster applies: :func:`admission`'s and stacks/kubernetes/benchctl-identities.yaml's
    (which service account a Job may run as: the runner grants, read live from the API server's ConfigMap)."""
    allow = allow_list_from_ceilings(ceilings.default(), load_image_registry=LOAD_IMAGE.split("/")[0] + "/")
    return Admission(yaml_files.load_all(ADMISSION_FILE) + yaml_files.load_all(IDENTITIES_FILE),
                     [admission_params(allow)])


def upstream_api() -> FakeKubeApi:
    """The fake API server validating strictly like the real one (vendored CRDs, Kubernetes' Job schema),
    authorizing every request with stacks/kubernetes/benchctl-rbac.yaml as the calling function's group
    (``eks_world.FUNCTION_TOKENS``; the test token is in no group) and admitting every write through
    stacks/kubernetes/benchctl-admission.yaml and benchctl-identities.yaml (its runner grants stored empty)."""
    api = FakeKubeApi(TOKEN)
    api.validate_with("DynamoGraphDeployment", crd_schemas.problems)
    api.validate_with("NodePool", crd_schemas.problems)
    api.validate_with("Job", job_problems)
    api.validate_with("DaemonSet", job_problems)  # the same: Kubernetes' own schema, strict
    api.enforce_rbac(yaml_files.load_all(RBAC_FILE), groups=set())
    eks_world.function_tokens(api)
    api.enforce_admission(cluster_admission())
    api.put(eks_world.runner_grants(eks_world.NS))  # applied with the policies that read it, no grant yet
    return api


def run_aws_worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, World]:
    """Every example spec run as a whole campaign through the AWS code path (see tests/fakes/eks_world.py)."""
    out = {}
    for name, spec in eks_world.example_specs().items():
        with upstream_api() as api, eks_world.moto_eks(spec) as session:
            eks_world.cluster_prerequisites(api, spec)
            pods = eks_world.dynamo_operator(api)
            eks_world.job_controller(api, fail_steps=(FAILED_STEP,))
            eks_world.daemonset_controller(api)
            eks_world.karpenter(api)
            eks_world.gpu_nodes(api, spec)
            world = eks_world.run_campaign(spec, api, tmp_path_factory.mktemp(re.sub(r"\W", "_", name)), session,
                                           fail_steps=(FAILED_STEP,))
            world.pods = pods
            out[name] = world
    return out
