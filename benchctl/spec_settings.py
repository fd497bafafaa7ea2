"""Settings of a spec: a pool's network (EFA, NIXL backend) and the campaign-wide service level, warm-up, smoke test, pricing, budget, timeouts,
sampling and the output-quality gate (:class:`benchctl.spec.CampaignSpec` holds one of each). Pure:
pydantic and the standard library only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from benchctl.spec_base import Strict

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
    efa_image: str | None = Field(
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


class Slo(Strict):
    """Per-request service level: goodput is the share of requests meeting every bound that is set."""

    ttft_ms: float | None = Field(default=None, gt=0, description="time to first token bound")
    itl_ms: float | None = Field(default=None, gt=0, description="mean inter-token latency bound")


class WarmUp(Strict):
    request_count: int = Field(default=0, ge=0, description="warm-up requests, excluded from results")


class SmokeTest(Strict):
    requests: int = Field(default=3, gt=0, le=50)
    max_tokens: int = Field(default=8, gt=0, le=256)


class PoolPrice(Strict):
    usd_per_hour: float = Field(ge=0)


class Pricing(Strict):
    source: str = Field(default="spec", description="where the prices come from")
    as_of: str | None = Field(default=None, description="date the prices were read")
    instances: dict[str, PoolPrice] = Field(default_factory=dict, description="instance type -> price")
    eks_cluster_usd_per_hour: float = Field(default=0.10, ge=0)


class Budget(Strict):
    max_usd: float | None = Field(default=None, gt=0)
    max_hours: float | None = Field(default=None, gt=0)


class Timeouts(Strict):
    capacity_s: float = Field(default=1800, gt=0)
    ready_s: float = Field(default=1800, gt=0)
    load_grace_s: float = Field(default=600, ge=0, description="allowed beyond a step's estimate")
    smoke_s: float = Field(default=300, gt=0, le=3600, description="for the smoke requests to finish")
    teardown_s: float = Field(default=240, ge=0, le=3600,
                              description="waited for a deleted deployment's pods to be gone before pools are restored")


class Sampling(Strict):
    """The sampling settings every request carries (Qwen3's generation_config otherwise fills unset fields)."""

    temperature: float = Field(default=0.7, ge=0, le=2)
    top_p: float = Field(default=0.8, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1, description="per-request sampling seed (default: spec seed)")


class Quality(Strict):
    """The output-quality gate after the smoke test (``benchctl.quality``)."""

    questions: int = Field(default=20, gt=0, le=200, description="arithmetic questions with known answers")
    seed: int = Field(default=15, ge=0, description="the question set's seed (same seed, same questions)")
    min_score: float = Field(default=0.9, ge=0, le=1,
                             description="correct share below which the experiment fails before load (real "
                                         "models only: on the local mocker the score is SIMULATED and not gated)")
    max_tokens: int | None = Field(default=None, gt=0, le=32768,
                                   description="per answer (default: 64 with thinking off, 4096 with it on)")
