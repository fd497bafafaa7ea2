"""Made-up campaigns written as real lake files: experiments, comparisons, steps with their request records,
costs and the timeline's network observations, through the lake writer (benchctl.local.lake, with the schema's
own row checks), so that the real views (benchctl.local.query) and the report read them as they read a run.

A step's figures are drawn around the means a test gives, with a seeded relative noise per repeat, so that
the spread over repeats is real; its requests carry TTFT/ITL values around the step's, with the share meeting
the SLO the test asks for (the goodput ratio v_step_stats computes from them).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchctl.analysis.verdicts import Settings
from benchctl.lake import timeline
from benchctl.local.lake import LocalLake

SLO_TTFT_MS, SLO_ITL_MS = 1000.0, 100.0
MEASURED = ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "request_latency_p50_ms", "output_tokens_per_s")
DEFAULTS = Settings()


def comparison_row(cid: str, name: str, baseline: str, treatment: str, questions: str, differs: str = "mode,workers",
                   index: int = 0, settings: Settings = DEFAULTS) -> dict[str, Any]:
    return {"campaign_id": cid, "comparison": name, "comparison_index": index, "baseline": baseline,
            "treatment": treatment, "questions": questions, "differs": differs, "source": "spec",
            "confidence": settings.confidence, "practical_threshold_pct": settings.practical_threshold_pct,
            "max_error_rate": settings.max_error_rate, "slo_attainment": settings.slo_attainment,
            "min_samples_p99": settings.min_samples_p99, "transfer_share_pct": settings.transfer_share_pct,
            "queue_threshold": settings.queue_threshold, "deployment_spread_pct": settings.deployment_spread_pct}


@dataclass
class Campaign:
    root: Path
    cid: str = "camp-s"
    simulated: bool = True
    noise: float = 0.01  # relative sd of every figure across repeats
    seed: int = 7
    settings: Settings = DEFAULTS  # every comparison's, unless compare() is given its own
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self.add("campaigns", {"campaign_id": self.cid, "spec_name": "made-up", "engine": "local" if self.simulated
                               else "aws", "simulated": self.simulated, "status": "succeeded",
                               "model": "Qwen/Qwen3-30B-A3B"})

    def add(self, table: str, *rows: dict[str, Any]) -> None:
        self.rows.setdefault(table, []).extend(rows)

    def experiment(self, name: str, mode: str, *, gpus: int = 8, router: str = "kv", kv_offload: bool = False,
                   nixl_backend: str = "LIBFABRIC", bandwidth: float = 9.6, price: float = 21.96,
                   gpu_kind: str = "A100-40GB", nodes: int = 1) -> None:
        disagg = mode == "disaggregated"
        self.add("experiments", {
            "campaign_id": self.cid, "experiment": name, "experiment_index": len(self.rows.get("experiments", [])),
            "mode": mode, "router": router, "kv_offload": kv_offload, "gpus": gpus,
            "nixl_backend": nixl_backend if disagg else None, "kv_transfer_bandwidth_gbps": bandwidth if disagg else None,
            "kv_transfer_path": "LIBFABRIC+EFA" if disagg else None, "kv_bytes_per_token": 98304})
        self.add("costs", {"campaign_id": self.cid, "experiment": name, "pool": "gpu", "gpu_kind": gpu_kind,
                           "instance_type": "p4d.24xlarge", "nodes": nodes, "node_hours": 0.5, "gpu_hours": 4.0,
                           "price_per_node_hour_usd": price, "price_source": "test", "cost_usd": price * 0.5,
                           "simulated": self.simulated, "fees_json": json.dumps({"gpus_per_node": 8})})

    def compare(self, name: str, baseline: str, treatment: str, questions: str, differs: str = "mode,workers",
                settings: Settings | None = None) -> None:
        self.add("comparisons", comparison_row(self.cid, name, baseline, treatment, questions, differs,
                                               len(self.rows.get("comparisons", [])), settings or self.settings))

    def _draw(self, mean: float) -> float:
        return mean * (1.0 + self._rng.gauss(0.0, self.noise))

    def step(self, experiment: str, mode: str, kind: str, step_id: str, repeat: int, *, n_requests: int = 40,
             attainment: float = 1.0, errors: int = 0, status: str = "succeeded", request_ttft_ms: float | None = None,
             **means: Any) -> dict[str, Any]:
        """One step: its settings and figures (those AIPerf measures, :data:`MEASURED`, drawn with noise around the
        given mean) and ``n_requests`` request records, ``errors`` of them failed, ``attainment`` of the rest
        within the SLO (at the step's TTFT p50 and ITL p50, or at ``request_ttft_ms``)."""
        figures = {k: self._draw(v) if k in MEASURED else v for k, v in means.items()}
        ttft, itl = figures.get("ttft_p50_ms", 100.0), figures.get("itl_p50_ms", 10.0)
        ttft = ttft if request_ttft_ms is None else request_ttft_ms
        step = {"campaign_id": self.cid, "experiment": experiment, "mode": mode, "workload": kind.replace("_", "-"),
                "workload_kind": kind, "step_id": step_id, "step_index": len(self.rows.get("steps", [])),
                "repeat": repeat, "random_seed": 42 + repeat, "status": status,
                "request_count": n_requests - errors, "error_count": errors,
                "benchmark_duration_s": 60.0, "slo_ttft_ms": SLO_TTFT_MS, "slo_itl_ms": SLO_ITL_MS, **figures}
        self.add("steps", step)
        ok = n_requests - errors
        good = round(ok * attainment)
        for i in range(n_requests):
            failed = i >= ok
            meets = i < good
            self.add("requests", {
                "campaign_id": self.cid, "experiment": experiment, "step_id": step_id, "repeat": repeat,
                "request_index": i, "isl": figures.get("isl"), "osl": figures.get("osl"),
                "ttft_ms": ttft if meets else SLO_TTFT_MS * 2, "itl_ms": itl if meets else SLO_ITL_MS * 2,
                "error_type": "HTTPError" if failed else None, "error_code": 500 if failed else None})
        return step

    def sweep(self, experiment: str, mode: str, repeats: int, loads: dict[int, dict[str, Any]], *,
              isl: int = 1024, osl: int = 128, n_requests: int = 40, gbps: float = 9.6) -> None:
        """A concurrency sweep: per load, the figures' means (and optionally ``attainment``, ``errors``,
        ``kv_transfer_ms``: the transfer time as the prefill workers' NIXL histogram reports it, moving the KV at
        ``gbps``)."""
        for r in range(repeats):
            for c, given in loads.items():
                means = dict(given)
                extra = {k: means.pop(k) for k in ("attainment", "errors", "status") if k in means}
                xfer = means.pop("kv_transfer_ms", None)
                sid = f"sweep-i{isl}-c{c}-r{r}"
                self.step(experiment, mode, "concurrency_sweep", sid, r, n_requests=n_requests, concurrency=c,
                          isl=isl, osl=osl, variant=f"c{c}", output_tokens_per_s=means.pop("output_tokens_per_s", 1000.0),
                          **means, **extra)
                if xfer is not None:  # one NIXL transfer per request, at the path's bandwidth
                    value = self._draw(float(xfer)) / 1000.0 * n_requests
                    self.metric(experiment, sid, r, "vllm:nixl_xfer_time_seconds", "sum", value)
                    self.metric(experiment, sid, r, "vllm:nixl_xfer_time_seconds", "count", float(n_requests))
                    self.metric(experiment, sid, r, "vllm:nixl_bytes_transferred", "sum", value * gbps * 1e9)
                    self.metric(experiment, sid, r, "vllm:nixl_bytes_transferred", "count", float(n_requests))

    def metric(self, experiment: str, step_id: str, repeat: int, metric: str, stat: str, value: float,
               source: str = "decode/w-0", **labels: str) -> None:
        self.add("server_metrics", {"campaign_id": self.cid, "experiment": experiment, "step_id": step_id,
                                    "repeat": repeat, "source": source, "metric": metric, "stat": stat,
                                    "value": value, "labels_json": json.dumps(labels) if labels else None})

    def cache(self, experiment: str, mode: str, step_id: str, repeat: int, hit_rate: float, *,
              input_tokens: float = 10000.0, offload_blocks: float | None = None, preemptions: float | None = None
              ) -> None:
        """The server's cache figures of a step, on every meter a view may read them from, as each engine
        exports them: the frontend's cached tokens (aggregated), the KV router's selected prefix (both modes,
        ``phase`` aggregated or prefill: the mocker's one meter), and vLLM's own prefix cache counters on the
        workers that compute prefill (``worker/…`` aggregated, ``prefill/…`` disaggregated)."""
        cached = hit_rate * input_tokens
        self.metric(experiment, step_id, repeat, "dynamo_frontend_input_sequence_tokens", "sum", input_tokens,
                    source="frontend")
        if mode == "aggregated":
            self.metric(experiment, step_id, repeat, "dynamo_frontend_cached_tokens", "sum", cached, source="frontend")
        self.metric(experiment, step_id, repeat, "dynamo_component_router_kv_selected_cached_prefix_tokens",
                    "total", cached, source="frontend", phase="aggregated" if mode == "aggregated" else "prefill")
        worker = "worker/w-0" if mode == "aggregated" else "prefill/w-0"
        self.metric(experiment, step_id, repeat, "vllm:prefix_cache_queries", "total", input_tokens, source=worker)
        self.metric(experiment, step_id, repeat, "vllm:prefix_cache_hits", "total", cached, source=worker)
        if offload_blocks is not None:
            self.metric(experiment, step_id, repeat, "kvbm_offload_blocks_d2h", "total", offload_blocks)
        if preemptions is not None:
            self.metric(experiment, step_id, repeat, "vllm:num_preemptions", "total", preemptions)

    def network(self, experiment: str, **detail: Any) -> None:
        self.add("timeline", timeline.row(self.cid, experiment, timeline.NETWORK_OBSERVED,
                                          "2026-12-01T10:00:00+00:00", **detail))

    def modelled(self, experiment: str, bandwidth: float = 9.6, bytes_per_token: int = 98304) -> None:
        """What LocalServing.network records: each mocker worker's transfer model (the local path by use)."""
        self.network(experiment, engine="local", transfer_modelled={
            f"{experiment}/{role}/w-0": {"kv_transfer_bandwidth": bandwidth, "kv_transfer_bytes_per_token": bytes_per_token}
            for role in ("prefill", "decode")})

    def eks_backends(self, experiment: str, *backends: str) -> None:
        """What EksServing.network records: the NIXL backend each prefill/decode pod logged instantiating."""
        self.network(experiment, engine="eks", nixl_backends={f"{experiment}-w{i}": [b] for i, b in enumerate(backends)},
                     transfer_backend=", ".join(sorted(set(backends))))

    def write(self) -> LocalLake:
        lake = LocalLake(self.root)
        for table, rows in self.rows.items():
            lake.write(table, rows, part_name=table)
        return lake
