"""The workloads a campaign runs on every experiment, one model per ``kind``: a concurrency sweep,
multi-turn conversations, sequence-length distributions and the prefix-cache ratios.

Part of the spec (:mod:`benchctl.spec.model` re-exports them); each knows the longest input and output it can
send (``max_lengths``), which the spec checks against the model's context. Pure: pydantic and the
standard library only.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from benchctl.spec.base import Name, Strict


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
    duration_s: float | None = Field(default=None, gt=0, description="seconds of load per probe (default: the "
                                     "sweep's duration_s)")
    run_spread: float = Field(default=0.3, ge=0, le=3, description="the run-to-run spread of a load's SLO attainment "
                              "(logit sd) the search allows for: a probe's requests share its run, so they are no "
                              "independent coin flips; 0.3-0.6 is what runs vary by; 0 trusts one run's requests")


class ConcurrencySweep(Strict):
    """The plan's concurrency sweep: one step per concurrency, fixed ISL/OSL; with ``search`` (or ``concurrency:
    auto``) also the probes that locate where it leaves the SLO."""

    kind: Literal["concurrency_sweep"] = "concurrency_sweep"
    name: Name = "concurrency-sweep"
    concurrency: list[Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)]] | Literal["auto"] = Field(
        description="the fixed loads (descriptive points, each run every repeat), or 'auto': only the search's "
                    "probes (search: defaults)")
    isl: int = Field(gt=0)
    osl: int = Field(gt=0)
    duration_s: float | None = Field(default=None, gt=0, description="seconds of load per step")
    request_count: int | None = Field(default=None, gt=0, description="requests per step")
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
    isl: int = Field(gt=0, description="new input tokens per turn")
    osl: int = Field(gt=0)
    turn_delay_ms: float = Field(default=0.0, ge=0, description="think time between turns")
    duration_s: float | None = Field(default=None, gt=0)
    request_count: int | None = Field(default=None, gt=0)
    dataset_conversations: int | None = Field(
        default=None, gt=0, description="distinct conversations AIPerf generates (default: enough for the step)"
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
    isl_range: tuple[Annotated[int, Field(gt=0)], Annotated[int, Field(gt=0)]]
    osl_range: tuple[Annotated[int, Field(gt=0)], Annotated[int, Field(gt=0)]]
    concurrency: int = Field(gt=0, le=4096)
    requests: int = Field(gt=0, le=100_000, description="dataset lines = requests per step")
    zipf_exponent: float = Field(default=1.1, gt=0)
    lognormal_sigma: float | None = Field(default=None, gt=0, description="default ln(hi/lo)/4")

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

    def max_lengths(self) -> tuple[int, int]:
        return self.isl_range[1], self.osl_range[1]


class PrefixCache(Strict):
    """Input prefix duplication, as the plan counts it (``duplication: requests``, the default): a ``ratio`` of
    the requests begins with one shared prefix of ``prefix_tokens`` tokens (default: half the ISL), the others
    share nothing; or (``duplication: tokens``) every request's first ``ratio`` of ISL is the shared prefix."""

    kind: Literal["prefix_cache"] = "prefix_cache"
    name: Name = "prefix-cache"
    ratios: list[Annotated[float, Field(ge=0, le=1)]] = Field(min_length=1, max_length=32)
    isl: int = Field(gt=0)
    osl: int = Field(gt=0)
    concurrency: int = Field(gt=0, le=4096)
    requests: int = Field(gt=0, le=100_000, description="requests per ratio")
    block_size: int = Field(default=64, gt=0, le=4096, description="tokens per hash block (AIPerf --isl-block-size)")
    duplication: Literal["requests", "tokens"] = Field(
        default="requests", description="requests: the share of requests that contain the shared prefix (the plan's "
                                        "definition); tokens: the share of every request's tokens that is shared")
    prefix_tokens: int | None = Field(default=None, gt=0, description="duplication requests: the shared prefix's "
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
