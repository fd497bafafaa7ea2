"""The workloads a campaign runs on every experiment, one model per ``kind``: a concurrency sweep,
multi-turn conversations, sequence-length distributions and the prefix-cache ratios.

Part of the spec (:mod:`benchctl.spec.model` re-exports them); each knows the longest input and output it can
send (``max_lengths``), which the spec checks against the model's context. Pure: pydantic and the
standard library only.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from benchctl.spec.base import Name, Strict
from benchctl.spec.bounds import (
    MAX_CONTEXT,
    MAX_DATASET,
    MAX_LOGNORMAL_SIGMA,
    MAX_REQUESTS,
    MAX_STEP_SECONDS,
    MAX_ZIPF_EXPONENT,
)

Length = Annotated[int, Field(gt=0, le=MAX_CONTEXT)]  # tokens: no request is longer than the longest context


def _one_stop_rule(duration_s: float | None, request_count: int | None) -> None:
    if (duration_s is None) == (request_count is None):
        raise ValueError("give exactly one of duration_s or request_count")


def _unique(v: list[Any], what: str) -> list[Any]:
    if len(set(v)) != len(v):
        raise ValueError(f"{what} values must be unique, got {v}")
    return v


MAX_CONCURRENCY = 4096
MAX_LOADS = 64  # fixed loads per sweep


class SweepSearch(Strict):
    """Where the sweep leaves its SLO, located by the campaign itself: probe loads chosen one at a time from the
    attainment measured so far (``benchctl.analysis.search``) until the edge is bracketed within ``resolution``
    or ``max_probes`` probes ran (the search's budget line). The first repeat searches; every later repeat runs
    the same probe loads again, so each load has as many repeats as the fixed points."""

    resolution: float = Field(default=0.10, gt=0, le=1, description="the bracket [within, past) is located when "
                              "past <= within x (1 + resolution) (or they are 1 apart)")
    max_probes: int = Field(default=6, ge=1, le=16, description="probes per experiment and repeat at most: the "
                            "search's budget line, priced by the plan")
    start: int | None = Field(default=None, gt=0, le=MAX_CONCURRENCY, description="the first probe's load when no "
                              "fixed point of the sweep is measured yet (default 16; `benchctl predict` prints the "
                              "predicted edge to start from); later probes ramp x2 or bisect")
    max_concurrency: int = Field(default=MAX_CONCURRENCY, gt=0, le=MAX_CONCURRENCY,
                                 description="the highest load a probe may use")
    duration_s: float | None = Field(default=None, gt=0, le=MAX_STEP_SECONDS, description="seconds of load per probe (default: the "
                                     "sweep's duration_s)")
    run_spread: float = Field(default=0.3, ge=0, le=3, description="the run-to-run spread of a load's SLO attainment "
                              "(logit sd) the search allows for: a probe's requests share its run, so they are no "
                              "independent coin flips; 0.3-0.6 is what runs vary by; 0 trusts one run's requests")


    @model_validator(mode="after")
    def _start_within_max(self) -> SweepSearch:
        if self.start is not None and self.start > self.max_concurrency:
            raise ValueError(f"start {self.start} exceeds max_concurrency {self.max_concurrency}; valid: a first probe "
                             f"of 1..{self.max_concurrency} (or raise max_concurrency, at most {MAX_CONCURRENCY})")
        return self


class ConcurrencySweep(Strict):
    """The plan's concurrency sweep: one step per concurrency, fixed ISL/OSL; with ``search`` (or ``concurrency:
    auto``) also the probes that locate where it leaves the SLO."""

    kind: Literal["concurrency_sweep"] = "concurrency_sweep"
    name: Name = "concurrency-sweep"
    concurrency: list[Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)]] | Literal["auto"] = Field(
        description="the fixed loads (descriptive points, each run every repeat), or 'auto': only the search's "
                    "probes (search: defaults)")
    isl: int = Field(gt=0, le=MAX_CONTEXT)
    osl: int = Field(gt=0, le=MAX_CONTEXT)
    duration_s: float | None = Field(default=None, gt=0, le=MAX_STEP_SECONDS, description="seconds of load per step")
    request_count: int | None = Field(default=None, gt=0, le=MAX_REQUESTS, description="requests per step")
    search: SweepSearch | None = Field(default=None, description="locate the SLO edge with measured probes (needs "
                                       "an SLO; with concurrency 'auto' the defaults)")

    @field_validator("concurrency")
    @classmethod
    def _unique(cls, v: list[int] | str) -> list[int] | str:
        if isinstance(v, list) and not v:
            raise ValueError("give at least one load, or 'auto' (the search's probes only)")
        if isinstance(v, list) and len(v) > MAX_LOADS:
            raise ValueError(f"{len(v)} loads: at most {MAX_LOADS} (a sweep of more is many campaigns' worth)")
        return _unique(v, "concurrency") if isinstance(v, list) else v

    @model_validator(mode="after")
    def _stop(self) -> ConcurrencySweep:
        _one_stop_rule(self.duration_s, self.request_count)
        search = self.search_settings()
        if search is not None and search.duration_s is None and self.duration_s is None:
            raise ValueError("search: a request-count sweep's probes need search.duration_s (seconds of load per "
                             "probe: a probe's load is chosen at run time, so its length is fixed in seconds)")
        return self

    def fixed_loads(self) -> list[int]:
        """The fixed loads, in the spec's order (none with ``concurrency: auto``)."""
        return [] if self.concurrency == "auto" else list(self.concurrency)

    def search_settings(self) -> SweepSearch | None:
        """The search this sweep runs: its ``search`` block, the defaults with ``concurrency: auto``, else None."""
        return self.search or (SweepSearch() if self.concurrency == "auto" else None)

    def max_lengths(self) -> tuple[int, int]:
        return self.isl, self.osl


class MultiTurn(Strict):
    """Conversations whose history accumulates: each turn resends all earlier turns plus ``isl`` new tokens."""

    kind: Literal["multi_turn"] = "multi_turn"
    name: Name = "multi-turn"
    conversations: int = Field(gt=0, le=1024, description="concurrent conversations (AIPerf --concurrency)")
    turns: int = Field(gt=0, le=100, description="turns per conversation")
    isl: int = Field(gt=0, le=MAX_CONTEXT, description="new input tokens per turn")
    osl: int = Field(gt=0, le=MAX_CONTEXT)
    turn_delay_ms: float = Field(default=0.0, ge=0, le=600_000, description="think time between turns (at most 10 min)")
    duration_s: float | None = Field(default=None, gt=0, le=MAX_STEP_SECONDS)
    request_count: int | None = Field(default=None, gt=0, le=MAX_REQUESTS)
    dataset_conversations: int | None = Field(
        default=None, gt=0, le=MAX_DATASET, description="distinct conversations AIPerf generates (default: enough for the step)"
    )

    @model_validator(mode="after")
    def _stop(self) -> MultiTurn:
        _one_stop_rule(self.duration_s, self.request_count)
        if self.request_count is not None and self.request_count % self.turns:
            raise ValueError(
                f"request_count {self.request_count} must be a multiple of turns {self.turns} "
                f"(whole conversations; every request is one turn)"
            )
        return self

    def max_lengths(self) -> tuple[int, int]:
        # the last turn carries every earlier turn's input and output
        return self.turns * self.isl + (self.turns - 1) * self.osl, self.osl

    def working_set_tokens(self) -> float:
        """The tokens whose KV a server must keep for every next turn to find its history cached: each of the
        ``conversations`` in flight holds its history so far, on average ``(turns + 1) / 2`` turns of ``isl +
        osl`` (at its last turn ``turns`` of them). Less than this in the KV cache (GPU, plus CPU/disk with
        offload) and histories are evicted between turns and prefilled again."""
        return self.conversations * (self.turns + 1) / 2 * (self.isl + self.osl)


class SequenceDistribution(Strict):
    """Request lengths drawn from named distributions (datasets we generate with the spec's seed)."""

    kind: Literal["sequence_distribution"] = "sequence_distribution"
    name: Name = "sequence-distribution"
    distributions: list[Literal["uniform", "zipf", "lognormal"]] = Field(min_length=1)
    isl_range: tuple[Length, Length]
    osl_range: tuple[Length, Length]
    concurrency: int = Field(gt=0, le=4096)
    requests: int = Field(gt=0, le=MAX_DATASET, description="dataset lines = requests per step")
    zipf_exponent: float = Field(default=1.1, gt=0, le=MAX_ZIPF_EXPONENT)
    lognormal_sigma: float | None = Field(default=None, gt=0, le=MAX_LOGNORMAL_SIGMA, description="default ln(hi/lo)/4")

    @field_validator("distributions")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        return _unique(v, "distributions")

    @field_validator("isl_range", "osl_range")
    @classmethod
    def _ordered(cls, v: tuple[int, int]) -> tuple[int, int]:
        if v[0] > v[1]:
            raise ValueError(f"range [{v[0]}, {v[1]}] is reversed; give [low, high]")
        return v

    @model_validator(mode="after")
    def _lognormal_draws_land(self) -> SequenceDistribution:
        if "lognormal" not in self.distributions:
            return self
        for what, (lo, hi) in (("isl_range", self.isl_range), ("osl_range", self.osl_range)):
            sigma = self.lognormal_sigma if self.lognormal_sigma is not None else default_lognormal_sigma(lo, hi)
            share = lognormal_acceptance(lo, hi, sigma)
            if self.requests > share * MAX_LOGNORMAL_DRAWS:
                given = "lognormal_sigma" if self.lognormal_sigma is not None else "the default lognormal_sigma"
                draws = f"{self.requests / share:.3g}" if share > 0 else "endless"
                raise ValueError(
                    f"{given} {sigma:g} lands only {share:.2g} of the draws inside {what} [{lo}, {hi}] (the dataset "
                    f"redraws the rest): {draws} draws for {self.requests} requests, at most {MAX_LOGNORMAL_DRAWS:,}; "
                    f"valid for this range and requests: at most {max_lognormal_sigma(lo, hi, self.requests):.4g}, "
                    "or a wider range")
        return self

    def max_lengths(self) -> tuple[int, int]:
        return self.isl_range[1], self.osl_range[1]


# A lognormal length is drawn until it rounds into the range (benchctl.planning.datasets.sample_lengths): a dataset
# may take at most this many draws per side (about 5 s here), however narrow the range or wide the sigma.
MAX_LOGNORMAL_DRAWS = 10_000_000


def default_lognormal_sigma(lo: int, hi: int) -> float:
    """The sigma a lognormal dataset uses when the spec gives none (benchctl.planning.datasets, held equal by
    tests/unit/test_spec_bounds.py)."""
    return max(math.log(hi / lo) / 4.0, 1e-3) if hi > lo else 1e-3


def lognormal_acceptance(lo: int, hi: int, sigma: float) -> float:
    """The share of ``lognormvariate(mu, sigma)`` draws (mu: the log-midpoint of [lo, hi]) that round into [lo, hi]."""
    mu = 0.5 * (math.log(lo) + math.log(hi))

    def cdf(x: float) -> float:
        return 0.5 * (1.0 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2.0))))
    return cdf(hi + 0.5) - cdf(lo - 0.5)


def max_lognormal_sigma(lo: int, hi: int, requests: int) -> float:
    """The largest sigma (to 0.01 %) at which ``requests`` lengths in [lo, hi] take at most MAX_LOGNORMAL_DRAWS draws."""
    low, high = 1e-12, 1e3
    for _ in range(200):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if requests <= lognormal_acceptance(lo, hi, mid) * MAX_LOGNORMAL_DRAWS else (low, mid)
        if high / low < 1.0001:
            break
    return low


class PrefixCache(Strict):
    """Input prefix duplication, as the plan counts it (``duplication: requests``, the default): a ``ratio`` of
    the requests begins with one shared prefix of ``prefix_tokens`` tokens (default: half the ISL), the others
    share nothing; or (``duplication: tokens``) every request's first ``ratio`` of ISL is the shared prefix."""

    kind: Literal["prefix_cache"] = "prefix_cache"
    name: Name = "prefix-cache"
    ratios: list[Annotated[float, Field(ge=0, le=1)]] = Field(min_length=1, max_length=32)
    isl: int = Field(gt=0, le=MAX_CONTEXT)
    osl: int = Field(gt=0, le=MAX_CONTEXT)
    concurrency: int = Field(gt=0, le=4096)
    requests: int = Field(gt=0, le=MAX_DATASET, description="requests per ratio")
    block_size: int = Field(default=64, gt=0, le=4096, description="tokens per hash block (AIPerf --isl-block-size)")
    duplication: Literal["requests", "tokens"] = Field(
        default="requests", description="requests: the share of requests that contain the shared prefix (the plan's "
                                        "definition); tokens: the share of every request's tokens that is shared")
    prefix_tokens: int | None = Field(default=None, gt=0, le=MAX_CONTEXT, description="duplication requests: the shared prefix's "
                                      "length (default: half the ISL, to whole blocks)")

    @model_validator(mode="after")
    def _prefix_fits(self) -> PrefixCache:
        if self.prefix_tokens is not None and (self.duplication != "requests" or self.prefix_tokens > self.isl):
            raise ValueError(f"prefix_tokens {self.prefix_tokens}: only with duplication 'requests', and at most the "
                             f"isl {self.isl}")
        return self

    @field_validator("ratios")
    @classmethod
    def _unique(cls, v: list[float]) -> list[float]:
        return _unique(v, "ratios")

    def max_lengths(self) -> tuple[int, int]:
        return self.isl, self.osl


Workload = Annotated[
    ConcurrencySweep | MultiTurn | SequenceDistribution | PrefixCache, Field(discriminator="kind")
]
WORKLOAD_KINDS = ("concurrency_sweep", "multi_turn", "sequence_distribution", "prefix_cache")
