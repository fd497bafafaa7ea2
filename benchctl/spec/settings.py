"""Settings of a spec: a pool's network (EFA, NIXL backend), the cluster it runs in on AWS (images, volumes,
namespace) and the campaign-wide service level, warm-up, smoke test, pricing, budget, timeouts,
sampling and the output-quality gate (:class:`benchctl.spec.model.CampaignSpec` holds one of each). Pure:
pydantic and the standard library only.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

from benchctl.spec.base import Name, Strict
from benchctl.spec.bounds import (
    MAX_CAMPAIGN_HOURS,
    MAX_REQUESTS,
    MAX_SEED_31,
    MAX_SLO_MS,
    MAX_STEP_SECONDS,
    MAX_USD,
    MAX_USD_PER_HOUR,
    MAX_WAIT_SECONDS,
    MAX_WEIGHTS_GB,
)
from benchctl.spec.fields import (
    CpuQuantity,
    HfRepoId,
    HfRevision,
    ImageReference,
    InClusterUrl,
    K8sObjectName,
    MemoryQuantity,
    Text,
)

# EFA interfaces of an instance type, for a pool whose network asks for EFA without a count. p4d.24xlarge /
# p4de.24xlarge: 4 (FACTS "Held to the platforms' own rules"); p5.48xlarge: 32 (Dynamo's AWS p5 recipe gives
# each TP=4 pod 16, i.e. 4 per GPU). Other types: give network.efa_interfaces.
EFA_INTERFACES: dict[str, int] = {"p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32}
# The prefill -> decode bandwidth the local mocker models for a transfer path (GB/s), when the experiment's
# mocker.kv_transfer_bandwidth is not set (FACTS "Disaggregation over EFA": NIXL over EFA with LIBFABRIC about
# 9.6 GB/s; UCX, which then runs over TCP, about 1 GB/s).
PATH_BANDWIDTH_GBPS: dict[str, float] = {"LIBFABRIC+EFA": 9.6, "UCX": 1.0}


class PoolNetwork(Strict):
    """How a pool's workers move KV cache to each other (disaggregated experiments): EFA interfaces, the
    NIXL backend and the EFA-enabled runtime image. Without EFA NIXL uses UCX, which runs over TCP between
    pods (Dynamo's disaggregation guide: orders of magnitude slower); LIBFABRIC must be named or NIXL stays on
    UCX even with EFA (FACTS "Disaggregation over EFA")."""

    efa: bool = Field(default=False, description="give the workers EFA interfaces (vpc.amazonaws.com/efa)")
    efa_interfaces: int | None = Field(
        default=None, gt=0, le=64,
        description="EFA interfaces per node (default: the instance type's, known for p4d/p4de/p5)")
    nixl_backend: Literal["UCX", "LIBFABRIC"] = Field(
        default="UCX", description="NIXL backend of the workers' NixlConnector (LIBFABRIC needs efa)")
    efa_image: ImageReference | None = Field(
        default=None, min_length=1,
        description="EFA-enabled Dynamo runtime image of the workers (default: kubernetes.dynamo_image with "
                    "'-efa' appended to its tag, as NVIDIA publishes them since 1.3.0; 1.6.1-efa is not "
                    "confirmed on a registry: check before a run)")

    @model_validator(mode="after")
    def _backend_needs_efa(self) -> PoolNetwork:
        if self.nixl_backend == "LIBFABRIC" and not self.efa:
            raise ValueError("nixl_backend LIBFABRIC runs over EFA; set efa: true, or use nixl_backend UCX")
        if self.efa_interfaces is not None and not self.efa:
            raise ValueError("efa_interfaces given without efa: true")
        return self


class Checkpoint(Strict):
    """Weights an experiment's workers load instead of ``model``'s, served under ``model.name``: another precision
    of the same model (the same architecture and tokenizer), e.g. the BF16 control of an FP8 checkpoint on the same
    GPUs. AIPerf, the quality questions and the tokenizer stay the campaign model's; the worker logs the precision
    it actually ran (the ready event's ``precision``)."""

    name: HfRepoId = Field(description="the weights' Hugging Face repository, e.g. Qwen/Qwen3-30B-A3B")
    revision: HfRevision | None = Field(
        default=None,
        description="its commit: required when the experiment runs on EKS (the workers serve its snapshot directory "
                    "from the model volume, which the model prefetch fills too)")
    weights_gb: float | None = Field(default=None, gt=0, le=MAX_WEIGHTS_GB, description="its weights on the GPUs, GB (as model.weights_gb)")


class Slo(Strict):
    """Per-request service level: goodput is the share of requests meeting every bound that is set."""

    ttft_ms: float | None = Field(default=None, gt=0, le=MAX_SLO_MS, description="time to first token bound")
    itl_ms: float | None = Field(default=None, gt=0, le=MAX_SLO_MS, description="mean inter-token latency bound")


class WarmUp(Strict):
    request_count: int = Field(default=0, ge=0, le=MAX_REQUESTS, description="warm-up requests, excluded from results")


class SmokeTest(Strict):
    requests: int = Field(default=3, gt=0, le=50)
    max_tokens: int = Field(default=8, gt=0, le=256)


class PoolPrice(Strict):
    usd_per_hour: float = Field(ge=0, le=MAX_USD_PER_HOUR)


class Pricing(Strict):
    source: Annotated[str, Text(200)] = Field(default="spec", description="where the prices come from")
    as_of: Annotated[str, Text(64)] | None = Field(default=None, description="date the prices were read")
    instances: dict[str, PoolPrice] = Field(default_factory=dict, description="instance type -> price")
    eks_cluster_usd_per_hour: float = Field(default=0.10, ge=0, le=MAX_USD_PER_HOUR)
    # EBS gp3 storage, us-east-1 list price (https://aws.amazon.com/ebs/pricing/, read 2026-11-01)
    ebs_gp3_usd_per_gb_month: float = Field(default=0.08, ge=0, le=100, description="the nodes' root volumes (gp3)")
    auto_mode_fee_usd_per_hour: dict[str, Annotated[float, Field(ge=0, le=MAX_USD_PER_HOUR)]] = Field(
        default_factory=dict, description="instance type -> EKS Auto Mode's management fee per instance-hour "
        "(https://aws.amazon.com/eks/pricing/); an Auto Mode pool whose type has none is named unpriced in the costs")


class Budget(Strict):
    max_usd: float | None = Field(default=None, gt=0, le=MAX_USD)
    max_hours: float | None = Field(default=None, gt=0, le=MAX_CAMPAIGN_HOURS)


class Timeouts(Strict):
    capacity_s: float = Field(default=1800, gt=0, le=MAX_WAIT_SECONDS)
    ready_s: float = Field(default=1800, gt=0, le=MAX_STEP_SECONDS)
    load_grace_s: float = Field(default=600, ge=0, le=MAX_STEP_SECONDS, description="allowed beyond a step's estimate")
    smoke_s: float = Field(default=300, gt=0, le=3600, description="for the smoke requests to finish")
    teardown_s: float = Field(default=240, ge=0, le=3600,
                              description="waited for a deleted deployment's pods to be gone before pools are restored")


class Sampling(Strict):
    """The sampling settings every request carries (Qwen3's generation_config otherwise fills unset fields)."""

    temperature: float = Field(default=0.7, ge=0, le=2)
    top_p: float = Field(default=0.8, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, description="per-request sampling seed (default: spec seed)")


class Quality(Strict):
    """The output-quality gate after the smoke test (``benchctl.analysis.quality``)."""

    kind: Literal["arithmetic", "multistep"] = Field(
        default="arithmetic",
        description="the question set: 'arithmetic' (one operation: that the model answers at all) or 'multistep' "
                    "(three operations over 2- to 4-digit numbers: hard enough for a precision loss to show; set a "
                    "min_score a working model passes, e.g. 0.2)")
    questions: int = Field(default=20, gt=0, le=300, description="questions with known answers (the score's "
                           "95 % Wilson interval narrows with more: about +-0.07 at 200 and a score of 0.5); at "
                           "most 300: the AWS smoke Job carries them in one environment variable, which Linux "
                           "caps at 128 KiB")
    seed: int = Field(default=15, ge=0, le=MAX_SEED_31, description="the question set's seed (same seed, same questions)")
    min_score: float = Field(default=0.9, ge=0, le=1,
                             description="correct share below which the experiment fails before load (real "
                                         "models only: on the local mocker the score is SIMULATED and not gated)")
    max_tokens: int | None = Field(default=None, gt=0, le=32768,
                                   description="per answer (default with thinking off: 64, 512 for 'multistep'; 4096 "
                                               "with it on)")


_SEMVER_CORE = r"(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})\.(0|[1-9][0-9]{0,3})"


def image_tag_version(image: str) -> str | None:
    """``MAJOR.MINOR.PATCH`` of an image reference's tag (``repo:1.6.1``, ``repo:v1.6.1-efa``,
    ``repo:1.6.1@sha256:…``), or None when it has no tag (digest only) or the tag is not a version."""
    ref = image.split("@", 1)[0]
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:  # no tag: the colon belonged to a registry port
        return None
    m = re.match(rf"^v?({_SEMVER_CORE})([-+][0-9A-Za-z.-]+)?\Z", tag)
    return m.group(1) if m else None


class Kubernetes(Strict):
    """Where and with what the AWS engine runs an experiment in the cluster (ignored locally).

    Images are part of what is measured: pin them (a tag, or better a digest); the digests actually
    run are read back from the pods and recorded with the campaign.
    """

    namespace: Name = "dynamo-bench"
    dynamo_image: ImageReference = Field(default="nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", min_length=1)
    dynamo_runtime_version: str | None = Field(
        default=None, pattern=rf"^{_SEMVER_CORE}$",
        description="the Dynamo runtime version in dynamo_image (MAJOR.MINOR.PATCH), rendered as each "
                    "component's runtimeVersionOverride; required when the image has no version tag (e.g. "
                    "pinned by digest only): Dynamo's admission webhook refuses such an image otherwise")
    aiperf_image: ImageReference | None = Field(
        default=None, min_length=1,
        description="image with `aiperf` 0.13.0 (and python3); unset: the deployment's load image "
                    "(BENCHCTL_LOAD_IMAGE), built by the control-plane stack from stacks/images/load/Dockerfile")
    uploader_image: ImageReference = Field(default="public.ecr.aws/aws-cli/aws-cli:2.22.0", min_length=1,
                                description="copies a Job's artifacts to the results bucket (AWS CLI v2)")
    node_class: K8sObjectName = Field(default="default",
                            description="EKS Auto Mode NodeClass (eks.amazonaws.com) of our NodePools")
    min_gpu_driver: int = Field(
        default=580, gt=0, le=9999,
        description="NVIDIA driver major version the Dynamo image needs (1.6 images: CUDA 13.0, driver 580+); "
                    "checked on GPU nodes that report it (GPU feature discovery labels)")
    hf_token_secret: K8sObjectName = Field(default="hf-token", description="Secret with key HF_TOKEN")
    model_pvc: K8sObjectName = Field(default="model-cache", description="PVC holding the HF model cache")
    load_cpu: CpuQuantity = Field(default="8", description="CPU request/limit of an AIPerf Job (not the bottleneck)")
    load_memory: MemoryQuantity = Field(default="16Gi")
    mocker_cpu: CpuQuantity = Field(default="2", description="CPU request/limit of a mocker worker (engine: mocker)")
    mocker_memory: MemoryQuantity = Field(default="4Gi", description="memory request/limit of a mocker worker")
    shared_memory: MemoryQuantity = Field(default="16Gi", description="/dev/shm of each worker")
    prefetch_model: bool = Field(default=False, description="fill the model volume once per campaign, timed apart")
    prefetch_image: ImageReference = Field(
        default="python:3.11-slim-bookworm", min_length=1,
        description="the model prefetch's image: a slim Python (the default load image's base) into which the Job "
                    "installs a pinned huggingface_hub, as Dynamo's model-caching guide does; not the runtime image")
    dcgm_exporter_urls: list[InClusterUrl] = Field(
        default_factory=list, max_length=64,
        description="NVIDIA DCGM exporter /metrics URLs (port 9400; e.g. the GPU operator's Service "
                    "http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics) scraped with every step's server "
                    "metrics: GPU utilisation, memory, power per step in the lake (v_stage_queues); only in-cluster "
                    "Service URLs (benchctl.spec.fields: never an IP literal such as the instance metadata address)")

    @property
    def dynamo_version(self) -> str:
        """The Dynamo version the campaign runs: ``dynamo_runtime_version``, else the image's tag (one of them is
        required, below)."""
        return self.dynamo_runtime_version or image_tag_version(self.dynamo_image) or ""

    @model_validator(mode="after")
    def _runtime_version(self) -> Kubernetes:
        if self.dynamo_runtime_version is None and image_tag_version(self.dynamo_image) is None:
            raise ValueError(
                f"kubernetes.dynamo_runtime_version: required because kubernetes.dynamo_image "
                f"{self.dynamo_image!r} has no MAJOR.MINOR.PATCH tag (Dynamo's admission webhook refuses such an "
                "image unless each component sets runtimeVersionOverride); give the image's Dynamo version, "
                "e.g. 1.6.1")
        return self
