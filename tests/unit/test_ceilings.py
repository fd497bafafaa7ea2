"""The deployment's ceilings (``benchctl.planning.ceilings``): parsed from CDK context and held to what cdk.json ships, the
pure check naming ceiling / path / value / allowed, the Plan and ScalePools handlers refusing on AWS (moto) with
``CeilingExceeded``, and the budget a spec without one gets."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from benchctl.planning import ceilings
from benchctl.planning.ceilings import DEFAULTS, CeilingsError, Problem
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import parse_spec
from tests.unit.test_aws_start import BUCKET, _eks_smoke_spec, _objects, _scaling, aws, cluster  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SEED = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text(encoding="utf-8"))


def test_cdk_json_ships_exactly_the_defaults() -> None:
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    assert context[ceilings.CONTEXT_KEY] == DEFAULTS
    assert ceilings.from_context_file(ROOT / "cdk.json") == ceilings.default()


@pytest.mark.parametrize(("raw", "key"), [
    ({"max_gpus": 8}, "unknown key(s) ['max_gpus']"),
    ({"instance_types": {"p4d.24xlarge": 0}}, "instance_types"),
    ({"instance_types": {"p4d.24xlarge": -1}}, "instance_types"),
    ({"instance_types": {}}, "instance_types"),
    ({"image_repositories": ["nvcr.io/nvidia/ai-dynamo:1.6.1"]}, "image_repositories"),  # a prefix has no tag
    ({"image_repositories": []}, "image_repositories"),
    ({"max_nodes_per_pool": 0}, "max_nodes_per_pool"),
    ({"max_usd_per_campaign": 0}, "max_usd_per_campaign"),
    ({"max_timeouts_s": {"capacity_s": 60}}, "max_timeouts_s"),  # every kind, or none
    ({"max_history_events": 25_000}, "max_history_events"),  # no margin below the quota
    ({"require_image_digest": "yes"}, "require_image_digest"),
    ("[1, 2]", "expected an object"),
])
def test_malformed_ceilings_are_refused_naming_the_key(raw: Any, key: str) -> None:
    with pytest.raises(CeilingsError, match=r"benchctl:ceilings") as err:
        ceilings.parse(raw)
    assert key in str(err.value)


def test_cdk_synth_configuration_refuses_malformed_ceilings_naming_the_context_key() -> None:
    from stacks.config import ConfigError, load

    base = json.loads((ROOT / "cdk.json").read_text())["context"]
    assert load(None, base).ceilings == ceilings.default()  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"'benchctl:ceilings.max_history_events': 99999"):
        load(None, {**base, "benchctl:ceilings": {"max_history_events": 99999}})  # type: ignore[arg-type]
    # -c passes JSON text
    c = load(None, {**base, "benchctl:ceilings": '{"max_nodes_per_pool": 2}'})  # type: ignore[arg-type]
    assert c.ceilings.max_nodes_per_pool == 2 and c.ceilings.instance_types == DEFAULTS["instance_types"]


@pytest.mark.parametrize(("name", "normal"), [
    ("python", "docker.io/library/python"),
    ("evil/python", "docker.io/evil/python"),
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime", "nvcr.io/nvidia/ai-dynamo/vllm-runtime"),
    ("localhost/x", "localhost/x"),
    ("registry:5000/x", "registry:5000/x"),
])
def test_repositories_are_normalised_as_the_container_runtime_resolves_them(name: str, normal: str) -> None:
    assert ceilings.normalise_repository(name) == normal


DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(("image", "allowed"), [
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", True),
    (f"nvcr.io/nvidia/ai-dynamo/vllm-runtime@{DIGEST}", True),
    (f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1@{DIGEST}", True),
    ("python:3.11-slim-bookworm", True),
    ("docker.io/library/python:3.11", True),
    ("nvcr.io/nvidia/ai-dynamo:1.6.1", True),  # the prefix itself
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime", False),  # neither tag nor digest
    ("nvcr.io/nvidia/ai-dynamo-x/vllm-runtime:1.6.1", False),  # not '/'-bounded
    ("nvcr.io/nvidia/vllm-runtime:1.6.1", False),
    ("NVCR.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", False),  # another spelling of the registry
    ("evil/python:3.11", False),
    ("nvcr.io/nvidia/ai-dynamo/../x:1", False),
    ("nvcr.io/nvidia/ai-dynamo/x:1 ; rm -rf /", False),
    ("nvcr.io/nvidia/ai-dynamo/x@sha256:abc", False),
])
def test_image_references_are_allowed_only_under_the_repositories(image: str, allowed: bool) -> None:
    p = ceilings.image_problem("kubernetes.dynamo_image", image, ceilings.default())
    assert (p is None) == allowed, p
    if p is not None:
        assert p.ceiling == "image_repositories" and p.path == "kubernetes.dynamo_image" and p.value == image


def test_a_problem_names_the_ceiling_the_path_the_value_and_what_is_allowed() -> None:
    spec = copy.deepcopy(SEED)
    spec["pricing"]["instances"]["p4d.24xlarge"]["usd_per_hour"] = 0
    s = parse_spec(spec)
    (p,) = ceilings.check(s, plan_campaign(s, "aws"), ceilings.default())
    assert p == Problem("instance_types", "pricing.instances.p4d.24xlarge.usd_per_hour", 0.0,
                        "at least its list price $21.96/h")
    assert p.line() == ("ceiling instance_types: pricing.instances.p4d.24xlarge.usd_per_hour = 0.0; "
                        "allowed: at least its list price $21.96/h")
    # a price above list is the spec's to give (e.g. a region that costs more)
    spec["pricing"]["instances"]["p4d.24xlarge"]["usd_per_hour"] = 30
    s = parse_spec(spec)
    assert ceilings.check(s, plan_campaign(s, "aws"), ceilings.default()) == []


def test_the_history_ceiling_is_the_worst_case_at_the_poll_and_only_where_a_poll_is_given() -> None:
    from benchctl.planning.history import history_estimate

    s = parse_spec(copy.deepcopy(SEED))
    plan = plan_campaign(s, "aws")
    assert history_estimate(s, plan, 15).worst > 20_000 > history_estimate(s, plan, 15).expected
    (p,) = ceilings.check(s, plan, ceilings.default(), 15)
    assert p.ceiling == "max_history_events" and p.value == history_estimate(s, plan, 15).worst
    assert ceilings.check(s, plan, ceilings.default(), 30) == []
    assert ceilings.check(s, plan, ceilings.default(), None) == []  # the local engine: no quota


def test_a_spec_without_a_budget_gets_the_ceiling_as_its_budget_which_the_guard_names() -> None:
    from benchctl.planning.budget import budget_problem

    spec = copy.deepcopy(SEED)
    spec.pop("budget")
    s = parse_spec(spec)
    c = ceilings.parse({"max_usd_per_campaign": 100})
    assert c.budget_usd(s) == 100 and ceilings.default().budget_usd(parse_spec(SEED)) == 1300
    plan = plan_campaign(s, "aws")
    assert budget_problem(s, plan, [], set(), "2026-01-01T00:00:00+00:00") is None  # no budget: no guard
    plan = dataclasses.replace(plan, max_usd=c.budget_usd(s))
    problem = budget_problem(s, plan, [], set(), "2026-01-01T00:00:00+00:00")
    assert problem is not None and problem.startswith("ceiling max_usd_per_campaign (the spec sets no budget.max_usd)")
    assert "exceeds $100.00" in problem


def test_functions_read_the_recorded_ceilings_and_default_to_the_built_in_ones(monkeypatch) -> None:
    from benchctl.aws.providers import engine_from_env

    env = {"BENCHCTL_RUNS_URI": "s3://b/runs", "BENCHCTL_LAKE_URI": "s3://b/lake"}
    assert engine_from_env(env).ceilings == ceilings.default()
    recorded = {**env, ceilings.ENV_VAR: json.dumps({"max_nodes_per_pool": 2})}
    assert engine_from_env(recorded).ceilings.max_nodes_per_pool == 2  # type: ignore[union-attr]
    with pytest.raises(CeilingsError, match="BENCHCTL_CEILINGS"):
        engine_from_env({**env, ceilings.ENV_VAR: "{not json"})


def test_cli_context_file_is_the_projects_cdk_json_unless_given(tmp_path: Path, capsys) -> None:
    from benchctl.cli.main import main

    assert ceilings.resolve(None, {}) == ceilings.from_context_file(ROOT / "cdk.json")
    strict = tmp_path / "cdk.json"
    strict.write_text(json.dumps({"context": {ceilings.CONTEXT_KEY: {"instance_types": {"g6e.12xlarge": 10.49}}}}))
    assert ceilings.resolve(None, {"BENCHCTL_CONTEXT_FILE": str(strict)}).instance_types == {"g6e.12xlarge": 10.49}
    assert main(["validate", str(ROOT / "examples" / "seed-plan.yaml"), "--context-file", str(strict)]) == 2
    assert "ceiling instance_types: pools[0].instance_type = 'p4d.24xlarge'" in capsys.readouterr().err
    assert main(["validate", str(ROOT / "examples" / "seed-plan.yaml"), "--context-file", str(tmp_path / "no")]) == 2
    assert "no such file" in capsys.readouterr().err


# ------------------------------------------------------------------------------ the Lambda handlers on AWS


def test_plan_handler_refuses_a_spec_past_the_recorded_ceilings_before_anything(aws, cluster, monkeypatch):  # noqa: F811
    from lambdas import plan as plan_handler
    from lambdas._runtime import use_engine

    use_engine(None)
    monkeypatch.setenv(ceilings.ENV_VAR, json.dumps({"max_usd_per_campaign": 5}))
    boto3.client("s3").put_object(Bucket=BUCKET, Key="specs/smoke.yaml", Body=_eks_smoke_spec())
    with pytest.raises(Exception, match=r"ceiling max_usd_per_campaign: \(plan\) estimated cost") as err:
        plan_handler.handler({"action": "plan", "state": "Plan", "execution": "arn:x:execution:campaign:c-9",
                              "input": {"spec_uri": f"s3://{BUCKET}/specs/smoke.yaml", "poll_seconds": 30}})
    assert type(err.value).__name__ == "CeilingExceeded"  # Lambda's errorType: the name the ASL sees
    assert _scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 0}
    assert not [k for k in _objects() if k.startswith("runs/c-9/plan")]
    assert not [b for _, _, b in cluster.bodies if b.get("kind") == "Job"]  # not even the preflight's


def test_scale_pools_refuses_when_the_ceilings_were_lowered_after_plan(aws, cluster, monkeypatch):  # noqa: F811
    from lambdas import plan as plan_handler
    from lambdas import pools as pools_handler
    from lambdas._runtime import use_engine

    use_engine(None)
    boto3.client("s3").put_object(Bucket=BUCKET, Key="specs/smoke.yaml", Body=_eks_smoke_spec())
    ctx = plan_handler.handler({"action": "plan", "state": "Plan", "execution": "arn:x:execution:campaign:c-8",
                                "input": {"spec_uri": f"s3://{BUCKET}/specs/smoke.yaml"}})["ctx"]
    plan = json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key="runs/c-8/plan.json")["Body"].read())
    assert plan["max_usd"] == 1500  # smoke.yaml sets no budget.max_usd: the ceiling is its budget
    monkeypatch.setenv(ceilings.ENV_VAR, json.dumps({"instance_types": {"g6e.12xlarge": 10.49}}))
    with pytest.raises(Exception, match=r"ceiling instance_types: pools\[0\].instance_type = 'p4d.24xlarge'") as err:
        pools_handler.handler({"action": "scale", "state": "ScalePools", "ctx": ctx, "experiment": "agg"})
    assert type(err.value).__name__ == "CeilingExceeded"
    assert _scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 0}  # nothing scaled
