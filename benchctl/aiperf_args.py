"""Workload step → ``aiperf profile`` arguments (AIPerf 0.13.0). Pure: standard library only.

The same argument list runs as a local subprocess and inside the Kubernetes Job on AWS.
Fixed settings for every configuration, as the plan demands: streaming (TTFT/ITL need it), chat
endpoint, ``ignore_eos`` so the requested OSL is produced, fixed ISL/OSL (stddev 0), a fixed seed.
"""

from __future__ import annotations

from benchctl.plan import StepPlan

AIPERF_VERSION = "0.13.0"


def _common(model: str, tokenizer: str, url: str, artifact_dir: str, seed: int) -> list[str]:
    return [
        "profile",
        "--model", model,
        "--tokenizer", tokenizer,
        "--url", url,
        "--endpoint-type", "chat",
        "--streaming",
        "--extra-inputs", "ignore_eos:true",
        "--random-seed", str(seed),
        "--ui-type", "none",
        "--artifact-dir", artifact_dir,
    ]  # fmt: skip


def step_args(
    step: StepPlan,
    *,
    model: str,
    tokenizer: str,
    url: str,
    artifact_dir: str,
    metrics_urls: list[str] | tuple[str, ...] = (),
    grace_s: float = 30.0,
) -> list[str]:
    """Arguments for one measured step (one concurrency level, one repeat)."""
    if step.kind != "concurrency_sweep":
        raise ValueError(f"step {step.step_id}: workload kind {step.kind!r} has no AIPerf mapping")
    args = _common(model, tokenizer, url, artifact_dir, step.seed)
    args += [
        "--concurrency", str(step.concurrency),
        "--isl", str(step.isl), "--isl-stddev", "0",
        "--osl", str(step.osl), "--osl-stddev", "0",
    ]  # fmt: skip
    if step.duration_s is not None:
        args += ["--benchmark-duration", f"{step.duration_s:g}", "--benchmark-grace-period", f"{grace_s:g}"]
    else:
        args += ["--request-count", str(step.request_count)]
    extra = [u for u in metrics_urls if not u.startswith(url.rstrip("/") + "/metrics")]
    if extra:
        args += ["--server-metrics", *extra]
    return args


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
) -> list[str]:
    """A short warm-up run (its artifacts are kept raw and never ingested into results)."""
    args = _common(model, tokenizer, url, artifact_dir, seed)
    args += [
        "--concurrency", str(concurrency),
        "--isl", str(isl), "--isl-stddev", "0",
        "--osl", str(osl), "--osl-stddev", "0",
        "--request-count", str(request_count),
        "--no-server-metrics",
    ]  # fmt: skip
    return args
