"""Plan steps -> AIPerf 0.13 command lines: each workload maps to the options that implement it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.planning.aiperf_args import step_args, warmup_args
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import load_spec

ROOT = Path(__file__).resolve().parents[2]
PLAN = plan_campaign(load_spec(ROOT / "examples" / "seed-plan.yaml"), "aws")
STEPS = {s.step_id: s for e in PLAN.deployments_of(PLAN.experiments[0].lake_name) for s in e.steps}  # every deployment
KW = {"model": "Qwen/Qwen3-30B-A3B", "tokenizer": "Qwen/Qwen3-30B-A3B", "url": "http://127.0.0.1:8000",
      "artifact_dir": "/tmp/a"}


def opt(args: list[str], name: str) -> str:
    assert args.count(name) == 1, f"{name} must appear exactly once in {args}"
    return args[args.index(name) + 1]


def test_every_step_streams_with_fixed_seed_and_ignore_eos() -> None:
    for step in STEPS.values():
        args = step_args(step, **KW, input_file="/tmp/d.jsonl")
        assert args[0] == "profile" and "--streaming" in args
        assert opt(args, "--random-seed") == str(step.seed)
        assert json.loads(opt(args, "--extra-inputs")) == {"ignore_eos": True}
        assert opt(args, "--concurrency") == str(step.concurrency)


def test_sweep_step_fixed_lengths_for_its_duration() -> None:
    args = step_args(STEPS["concurrency-sweep-c32-r1"], **KW)
    assert (opt(args, "--isl"), opt(args, "--osl"), opt(args, "--isl-stddev")) == ("1024", "512", "0")
    assert opt(args, "--benchmark-duration") == "120" and "--input-file" not in args


def test_multi_turn_step_uses_aiperf_conversations() -> None:
    step = STEPS["multi-turn-c8-r0"]
    args = step_args(step, **KW)
    assert opt(args, "--conversation-turn-mean") == "5" and opt(args, "--conversation-turn-stddev") == "0"
    assert int(opt(args, "--conversation-num")) == step.params["dataset_conversations"] >= 8
    assert opt(args, "--concurrency") == "8" and opt(args, "--benchmark-duration") == "300"
    assert (opt(args, "--isl"), opt(args, "--osl")) == ("512", "256")


@pytest.mark.parametrize("step_id", ["sequence-distribution-lognormal-r2", "prefix-cache-p75-r0"])
def test_dataset_steps_send_our_file_line_by_line(step_id: str) -> None:
    step = STEPS[step_id]
    args = step_args(step, **KW, input_file="/data/x.jsonl")
    assert opt(args, "--input-file") == "/data/x.jsonl"
    assert opt(args, "--custom-dataset-type") == "mooncake_trace"
    assert opt(args, "--dataset-sampling-strategy") == "sequential"
    assert opt(args, "--request-count") == str(step.request_count)
    assert "--isl" not in args and "--benchmark-duration" not in args
    if step.kind == "prefix_cache":
        assert opt(args, "--isl-block-size") == "64"
    with pytest.raises(ValueError, match="needs its generated input_file"):
        step_args(step, **KW)


def test_worker_metrics_urls_are_scraped_too() -> None:
    args = step_args(STEPS["concurrency-sweep-c1-r0"], **KW,
                     metrics_urls=["http://127.0.0.1:8000/metrics", "http://127.0.0.1:9001/metrics"])
    assert args[args.index("--server-metrics") + 1:] == ["http://127.0.0.1:9001/metrics"]


def test_a_pinned_tokenizer_revision_is_passed_on() -> None:
    args = step_args(STEPS["concurrency-sweep-c1-r0"], **KW, tokenizer_revision="ad44e777")
    assert opt(args, "--tokenizer") == "Qwen/Qwen3-30B-A3B" and opt(args, "--tokenizer-revision") == "ad44e777"
    warm = warmup_args(**KW, request_count=8, concurrency=4, isl=128, osl=16, seed=42, tokenizer_revision="ad44e777")
    assert opt(warm, "--tokenizer-revision") == "ad44e777"
    assert "--tokenizer-revision" not in step_args(STEPS["concurrency-sweep-c1-r0"], **KW)  # local: a directory


def test_warmup_never_scrapes_server_metrics() -> None:
    args = warmup_args(**KW, request_count=8, concurrency=4, isl=128, osl=16, seed=42)
    assert "--no-server-metrics" in args and opt(args, "--request-count") == "8"


def test_slo_goes_to_aiperf_goodput_too() -> None:
    step = STEPS["concurrency-sweep-c1-r0"]
    args = step_args(step, **KW, slo={"ttft_ms": 2000.0, "itl_ms": 50.0})
    assert opt(args, "--goodput") == "time_to_first_token:2000 inter_token_latency:50"
    assert opt(step_args(step, **KW, slo={"ttft_ms": 300.0, "itl_ms": None}), "--goodput") == "time_to_first_token:300"
    assert "--goodput" not in step_args(step, **KW, slo={"ttft_ms": None, "itl_ms": None})
