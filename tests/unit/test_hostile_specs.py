"""Hostile specs against the deployment's ceilings (``benchctl.planning.ceilings``, CDK context ``benchctl:ceilings``).

Each case is examples/seed-plan.yaml (within the ceilings cdk.json ships) with one hostile change: an image
from another registry (every image field), a price of 0 or below list, an unlisted instance type, too many
nodes, a budget over the cap or none with an estimate over it, a timeout of a day, a worst-case history past the
limit. Each goes through the real CLI (``validate``, ``plan``, ``render``): exit 2, one stderr line naming the
ceiling and the spec path, nothing on stdout before it for validate/render, and ``render`` writes no file.
The count of cases tried and refused is asserted in one test (``test_every_hostile_case_is_tried_and_refused``).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.cli.main import main
from benchctl.planning.ceilings import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text(encoding="utf-8"))
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
COMMANDS = ("validate", "plan", "render")

Spec = dict[str, Any]


def _set(path: str, value: Any) -> Callable[[Spec], None]:
    def change(spec: Spec) -> None:
        *parents, last = path.split(".")
        node = spec
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


def _price(usd_per_hour: float) -> Callable[[Spec], None]:
    def change(spec: Spec) -> None:
        spec["pricing"]["instances"]["p4d.24xlarge"] = {"usd_per_hour": usd_per_hour}
    return change


def _p5_times_64(spec: Spec) -> None:
    """The issue's case: 64 x p5.48xlarge at a price of 0."""
    spec["pools"][0].update(instance_type="p5.48xlarge", max_nodes=64, gpu_kind="H100-80GB")
    spec["pricing"]["instances"] = {"p5.48xlarge": {"usd_per_hour": 0}}
    for e in spec["experiments"]:
        for g in e["workers"]:
            g["replicas"] = 64 if e["mode"] == "aggregated" else 32
            g["tensor_parallel"] = 8


def _many_repeats_no_budget(spec: Spec) -> None:
    spec.pop("budget")
    spec["repeats"] = 8  # est. about $1220 (3 repeats: $481): over the $1000 cap that is then its budget


def _ceilings(**overrides: Any) -> dict[str, Any]:
    return {**copy.deepcopy(DEFAULTS), **overrides}


# (id, change of the seed spec, ceiling named, spec path named, context ceilings (None: cdk.json's), plan argv)
CASES: list[tuple[str, Callable[[Spec], None], str, str, dict[str, Any] | None, tuple[str, ...]]] = [
    ("dynamo-image-other-registry", _set("kubernetes.dynamo_image", "docker.io/evil/vllm-runtime:1.6.1"),
     "image_repositories", "kubernetes.dynamo_image", None, ()),
    ("dynamo-image-prefix-lookalike", _set("kubernetes.dynamo_image", "nvcr.io/nvidia/ai-dynamo-evil/vllm-runtime:1.6.1"),
     "image_repositories", "kubernetes.dynamo_image", None, ()),
    ("dynamo-image-registry-in-path", _set("kubernetes.dynamo_image", "evil.io/nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"),
     "image_repositories", "kubernetes.dynamo_image", None, ()),
    # dot segments (nvcr.io/nvidia/ai-dynamo/../../evil/x): refused by the spec's image reference rule first
    # (tests/unit/test_bad_input.py), before any ceiling
    ("aiperf-image-other-registry", _set("kubernetes.aiperf_image", "ghcr.io/evil/aiperf:0.13.0"),
     "image_repositories", "kubernetes.aiperf_image", None, ()),
    ("uploader-image-other-registry", _set("kubernetes.uploader_image", "evil.example.com/aws-cli:2.22.0"),
     "image_repositories", "kubernetes.uploader_image", None, ()),
    ("prefetch-image-hub-user", _set("kubernetes.prefetch_image", "evil/python:3.11-slim-bookworm"),
     "image_repositories", "kubernetes.prefetch_image", None, ()),
    ("efa-image-other-registry", _set("pools.0.network", {"efa": True, "efa_image": "quay.io/evil/efa:1.6.1-efa"}),
     "image_repositories", "pools[0].network.efa_image", None, ()),
    ("image-tag-when-digests-required", lambda s: None, "require_image_digest", "kubernetes.dynamo_image",
     _ceilings(require_image_digest=True), ()),
    ("price-zero", _price(0),
     "instance_types", "pricing.instances.p4d.24xlarge.usd_per_hour", None, ()),
    ("price-below-list", _price(10.0),
     "instance_types", "pricing.instances.p4d.24xlarge.usd_per_hour", None, ()),
    ("price-missing", _set("pricing.instances", {}), "instance_types", "pricing.instances.p4d.24xlarge", None, ()),
    ("instance-type-unlisted-p5-x64", _p5_times_64, "instance_types", "pools[0].instance_type", None, ()),
    ("pool-max-nodes-over-cap", _set("pools.0.max_nodes", 16), "max_nodes_per_pool", "pools[0].max_nodes", None, ()),
    ("plan-nodes-over-cap", lambda s: None, "max_nodes_per_pool", "experiments[0]: nodes of pool 'p4d'",
     _ceilings(max_nodes_per_pool=1), ()),
    ("budget-over-cap", _set("budget.max_usd", 5000), "max_usd_per_campaign", "budget.max_usd", None, ()),
    # an infinite budget or timeout, or one of 1e9 s, is refused by the spec's own bounds before any ceiling
    # (benchctl.spec.bounds; tests/unit/test_spec_bounds.py): the cases below stay within those bounds
    ("budget-missing-estimate-over-cap", _many_repeats_no_budget, "max_usd_per_campaign", "(plan) estimated cost",
     None, ()),
    ("timeout-capacity-1-day", _set("timeouts.capacity_s", 86_400), "max_timeouts_s", "timeouts.capacity_s", None, ()),
    ("timeout-ready-1-day", _set("timeouts.ready_s", 86_400), "max_timeouts_s", "timeouts.ready_s", None, ()),
    ("timeout-load-grace-1-day", _set("timeouts.load_grace_s", 86_400), "max_timeouts_s", "timeouts.load_grace_s",
     None, ()),
    # smoke_s and teardown_s: the schema caps them at 3600 s; a deployment may set a lower ceiling
    ("timeout-smoke-over-ceiling", _set("timeouts.smoke_s", 3600), "max_timeouts_s", "timeouts.smoke_s",
     _ceilings(max_timeouts_s={**DEFAULTS["max_timeouts_s"], "smoke_s": 600}), ()),
    ("timeout-teardown-over-ceiling", _set("timeouts.teardown_s", 3600), "max_timeouts_s", "timeouts.teardown_s",
     _ceilings(max_timeouts_s={**DEFAULTS["max_timeouts_s"], "teardown_s": 600}), ()),
    # the seed at a 5 s poll: 22,018 events if every wait runs to its deadline (the case)
    ("history-worst-case-5s-poll", lambda s: None, "max_history_events", "(plan) worst-case Step Functions history",
     _ceilings(history_poll_seconds=5), ("--engine", "aws", "--poll-seconds", "5")),
]


def _write(tmp_path: Path, spec: Spec, ceilings: dict[str, Any] | None) -> tuple[Path, list[str]]:
    path = tmp_path / "hostile.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    if ceilings is None:
        return path, []
    ctx = tmp_path / "cdk.json"
    ctx.write_text(json.dumps({"app": "x", "context": {"benchctl:ceilings": ceilings}}), encoding="utf-8")
    return path, ["--context-file", str(ctx)]


def _try(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, case: str,
         change: Callable[[Spec], None], ceiling: str, where: str, ceilings: dict[str, Any] | None,
         plan_argv: tuple[str, ...]) -> None:
    """One hostile case through one command: exit 2, the ceiling and the path named, nothing written."""
    spec = copy.deepcopy(SEED)
    change(spec)
    path, ctx = _write(tmp_path, spec, ceilings)
    out_dir = tmp_path / "manifests"
    argv = {"validate": ["validate", str(path)], "plan": ["plan", str(path), *plan_argv],
            "render": ["render", str(path), "--out", str(out_dir), "--campaign-id", "hostile-1"]}[command]
    code = main([*argv, *ctx])
    out, err = capsys.readouterr()
    assert code == 2, (case, out, err)
    assert "outside the deployment's ceilings" in err
    named = [line for line in err.splitlines() if line.strip().startswith(f"ceiling {ceiling}: {where}")]
    assert named, (case, err)
    if command != "plan":  # nothing before the refusal (plan prints the plan it refuses, as for a budget)
        assert out == ""
    assert not out_dir.exists()  # render wrote nothing, not even its directory


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_spec_is_refused_naming_the_ceiling(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                                                    case: tuple[Any, ...]) -> None:
    _try(tmp_path, capsys, command, *case)


def test_every_hostile_case_is_tried_and_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The suite's count, in one test (it holds under pytest-xdist too): every case through every command."""
    refused = 0
    for i, case in enumerate(CASES):
        for command in COMMANDS:
            where = tmp_path / f"{i}-{command}"
            where.mkdir()
            _try(where, capsys, command, *case)
            refused += 1
    assert refused == len(CASES) * len(COMMANDS) == 66
    print(f"\n{refused} hostile cases ({len(CASES)} specs x {len(COMMANDS)} commands) tried, {refused} refused")


def test_the_unchanged_seed_passes_with_the_same_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The control: every case above differs from this only in its hostile change."""
    path, _ = _write(tmp_path, copy.deepcopy(SEED), None)
    assert main(["validate", str(path)]) == 0
    assert main(["plan", str(path)]) == 0
    assert main(["render", str(path), "--out", str(tmp_path / "m"), "--campaign-id", "seed-1"]) == 0
    assert any((tmp_path / "m").rglob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_is_within_the_default_ceilings(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(example)]) == 0, capsys.readouterr().err
    assert main(["plan", str(example)]) == 0, capsys.readouterr().err
    # on AWS (at the default 30 s poll) too, the examples made for it; the local-only ones (pools on
    # provider local) may exceed their own budget with the AWS overheads, never the ceilings
    code = main(["plan", str(example), "--engine", "aws", "--no-edges"])  # edges: tests/integration/test_predict.py
    err = capsys.readouterr().err
    local_only = all(p.get("provider") == "local" for p in yaml.safe_load(example.read_text())["pools"])
    assert code == 0 or (local_only and "outside the deployment's ceilings" not in err), err


def test_run_and_start_refuse_before_anything_is_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = copy.deepcopy(SEED)
    spec["pricing"]["instances"]["p4d.24xlarge"] = {"usd_per_hour": 0}
    path, _ = _write(tmp_path, spec, None)
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 2
    assert "ceiling instance_types: pricing.instances.p4d.24xlarge.usd_per_hour = 0.0" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    # start refuses before any AWS call (no credentials are needed to be refused)
    assert main(["start", str(path), "--bucket", "b", "--state-machine-arn",
                 "arn:aws:states:us-east-1:123456789012:stateMachine:x"]) == 2
    assert "ceiling instance_types" in capsys.readouterr().err
