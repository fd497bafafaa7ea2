"""Workload step → ``aiperf profile`` arguments (AIPerf 0.13.0). Pure: standard library only.

The same argument list runs as a local subprocess and inside the Kubernetes Job on AWS.
Fixed settings for every configuration, as the plan demands: streaming (TTFT/ITL need it), chat
endpoint, ``ignore_eos`` so the requested OSL is produced, fixed ISL/OSL (stddev 0), a fixed seed, and the
campaign's sampling (temperature, top_p, seed) and thinking setting in every request body.

``--extra-inputs`` is ONE JSON object: AIPerf 0.13 parses a value starting with ``{`` as JSON and merges it into
every request body; its ``key:value`` form would send ``chat_template_kwargs`` as a string and numbers such as
``1e-3`` as strings (``aiperf/config/loader/parsing.py``, checked by calling it).
"""

from __future__ import annotations

import json
from typing import Any

from benchctl.planning.plan import StepPlan

AIPERF_VERSION = "0.13.0"


def extra_inputs(sampling: dict[str, Any] | None = None, thinking: bool | None = None) -> str:
    """The ``--extra-inputs`` JSON: ``ignore_eos``, the sampling fields and, when given, Qwen3's thinking switch
    (``chat_template_kwargs.enable_thinking``, which Dynamo's frontend hands to the chat template)."""
    body: dict[str, Any] = {"ignore_eos": True, **(sampling or {})}
    if thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


def _common(model: str, tokenizer: str, url: str, artifact_dir: str, seed: int,
            tokenizer_revision: str | None = None, sampling: dict[str, Any] | None = None,
            thinking: bool | None = None) -> list[str]:
    revision = ["--tokenizer-revision", tokenizer_revision] if tokenizer_revision else []
    return [
        "profile",
        "--model", model,
        "--tokenizer", tokenizer, *revision,
        "--url", url,
        "--endpoint-type", "chat",
        "--streaming",
        "--extra-inputs", extra_inputs(sampling, thinking),
        "--random-seed", str(seed),
        "--ui-type", "none",
        "--artifact-dir", artifact_dir,
    ]  # fmt: skip


def _stop_args(step: StepPlan, grace_s: float) -> list[str]:
    if step.duration_s is not None:
        return ["--benchmark-duration", f"{step.duration_s:g}", "--benchmark-grace-period", f"{grace_s:g}"]
    return ["--request-count", str(step.request_count)]


def step_args(
    step: StepPlan,
    *,
    model: str,
    tokenizer: str,
    url: str,
    artifact_dir: str,
    metrics_urls: list[str] | tuple[str, ...] = (),
    grace_s: float = 30.0,
    input_file: str | None = None,
    slo: dict[str, float | None] | None = None,
    tokenizer_revision: str | None = None,
    sampling: dict[str, Any] | None = None,
    thinking: bool | None = None,
) -> list[str]:
    """Arguments for one measured step (one workload variant, one repeat).

    ``input_file`` is the step's generated dataset (sequence distribution, prefix cache): a
    mooncake-trace JSONL sent line by line in file order (``--dataset-sampling-strategy sequential``),
    one request per line. ``slo`` (``ttft_ms``, ``itl_ms``) is also given to AIPerf as ``--goodput``, so
    its own good-request fraction stands next to the one the views compute from the requests.
    ``metrics_urls``: every worker's (and KVBM's) ``/metrics`` beside the frontend's, which AIPerf scrapes
    by itself (the ``--url``); ``tokenizer_revision``: the pinned revision of ``tokenizer``.
    """
    args = _common(model, tokenizer, url, artifact_dir, step.seed, tokenizer_revision, sampling, thinking)
    args += ["--concurrency", str(step.concurrency)]
    if step.kind == "concurrency_sweep":
        args += _fixed_lengths(step)
        args += _stop_args(step, grace_s)
    elif step.kind == "multi_turn":
        p = step.params
        args += _fixed_lengths(step)
        args += [
            "--conversation-num", str(p["dataset_conversations"]),
            "--conversation-turn-mean", str(p["turns"]), "--conversation-turn-stddev", "0",
            "--conversation-turn-delay-mean", f"{p['turn_delay_ms']:g}", "--conversation-turn-delay-stddev", "0",
        ]  # fmt: skip
        args += _stop_args(step, grace_s)
    elif step.kind in ("sequence_distribution", "prefix_cache"):
        if input_file is None:
            raise ValueError(f"step {step.step_id}: a {step.kind} step needs its generated input_file")
        args += [
            "--input-file", input_file,
            "--custom-dataset-type", "mooncake_trace",
            "--dataset-sampling-strategy", "sequential",
            "--request-count", str(step.request_count),
        ]  # fmt: skip
        if step.kind == "prefix_cache":
            args += ["--isl-block-size", str(step.params["block_size"])]
    else:
        raise ValueError(f"step {step.step_id}: workload kind {step.kind!r} has no AIPerf mapping")
    bounds = [f"{metric}:{(slo or {}).get(key):g}" for key, metric in
              (("ttft_ms", "time_to_first_token"), ("itl_ms", "inter_token_latency")) if (slo or {}).get(key)]
    if bounds:
        args += ["--goodput", " ".join(bounds)]
    extra = [u for u in metrics_urls if not u.startswith(url.rstrip("/") + "/metrics")]
    if extra:
        args += ["--server-metrics", *extra]
    return args


def _fixed_lengths(step: StepPlan) -> list[str]:
    return ["--isl", str(step.isl), "--isl-stddev", "0", "--osl", str(step.osl), "--osl-stddev", "0"]


def warmup_args(
    *,
    model: str,
    tokenizer: str,
    url: str,
    artifact_dir: str,
    request_count: int,
    concurrency: int,
    isl: int,
    osl: int,
    seed: int,
    tokenizer_revision: str | None = None,
    sampling: dict[str, Any] | None = None,
    thinking: bool | None = None,
) -> list[str]:
    """A short warm-up run (its artifacts are kept raw and never ingested into results)."""
    args = _common(model, tokenizer, url, artifact_dir, seed, tokenizer_revision, sampling, thinking)
    args += [
        "--concurrency", str(concurrency),
        "--isl", str(isl), "--isl-stddev", "0",
        "--osl", str(osl), "--osl-stddev", "0",
        "--request-count", str(request_count),
        "--no-server-metrics",
    ]  # fmt: skip
    return args
