"""Spec validation: one line per problem naming the field path, the bad value and what is valid."""

import copy
import json
from pathlib import Path

import pytest
import yaml

from benchctl.cli import main as cli
from benchctl.errors import SpecError
from benchctl.spec.model import load_spec, parse_spec, spec_hash

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())


def problems(mutate) -> list[str]:
    data = copy.deepcopy(SMOKE)
    mutate(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data, "t.yaml")
    return err.value.problems


def test_examples_validate():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        spec = load_spec(path)
        assert spec.experiments and spec.workloads
        assert spec.model.revision and len(spec.model.revision) == 40  # pinned to a commit


@pytest.mark.parametrize(("image", "version"), [
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", "1.6.1"),
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:v1.6.1-efa", "1.6.1"),
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1@sha256:" + "a" * 64, "1.6.1"),
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "a" * 64, None),
    ("registry.local:5000/vllm-runtime", None),
    ("registry.local:5000/vllm-runtime:latest", None),
    ("vllm-runtime:1.6", None),
])
def test_image_tag_version(image, version):
    from benchctl.spec.model import image_tag_version

    assert image_tag_version(image) == version


def test_a_dynamo_image_without_a_version_tag_needs_its_runtime_version():
    digest = "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "b" * 64
    def pin(d, **k):  # the smoke pool's EFA image cannot be derived from a digest: given too
        d["pools"][0]["network"]["efa_image"] = digest
        d.setdefault("kubernetes", {}).update(dynamo_image=digest, **k)

    assert problems(pin) == [
        f"kubernetes.dynamo_runtime_version: required because kubernetes.dynamo_image {digest!r} has no "
        "MAJOR.MINOR.PATCH tag (Dynamo's admission webhook refuses such an image unless each component sets "
        "runtimeVersionOverride); give the image's Dynamo version, e.g. 1.6.1"]
    bad = problems(lambda d: pin(d, dynamo_runtime_version="1.6"))
    assert len(bad) == 1 and bad[0].startswith("kubernetes.dynamo_runtime_version: \"1.6\" is invalid")
    data = copy.deepcopy(SMOKE)
    pin(data, dynamo_runtime_version="1.6.1")
    assert parse_spec(data).kubernetes.dynamo_runtime_version == "1.6.1"


def test_bad_mode_names_path_value_and_valid_choices():
    lines = problems(lambda d: d["experiments"][1].update(mode="split"))
    assert len(lines) == 1
    assert lines[0].startswith("experiments[1].mode:")
    assert "'split'" in lines[0] or '"split"' in lines[0]
    assert "aggregated" in lines[0] and "disaggregated" in lines[0]


def test_several_problems_each_on_its_own_line():
    def mutate(d):
        d["experiments"][0]["workers"][0]["replicas"] = 0
        d["workloads"][0]["concurrency"] = [1, "x"]
        d["bogus"] = 1

    lines = problems(mutate)
    assert any(line.startswith("experiments[0].workers[0].replicas:") for line in lines)
    assert any(line.startswith("workloads[0].concurrency[1]:") for line in lines)
    assert any(line.startswith("bogus:") and "unknown field" in line for line in lines)
    assert len(lines) == 3


def test_unknown_pool_lists_valid_pools():
    lines = problems(lambda d: d["experiments"][0]["workers"][0].update(pool="nope"))
    assert lines == ["experiments[0].workers[0].pool: 'nope' is not a pool; valid: ['gpu-a100']"]


def test_roles_must_match_mode():
    lines = problems(lambda d: d["experiments"][1]["workers"].pop())
    assert any("disaggregated experiment needs role 'prefill' and role 'decode'" in line for line in lines)


def test_tp_larger_than_node_and_context_overflow():
    def mutate(d):
        d["experiments"][0]["workers"][0]["tensor_parallel"] = 16
        d["workloads"][0]["osl"] = 50000

    lines = problems(mutate)
    assert any("tensor_parallel: 16 exceeds pool 'gpu-a100' gpus_per_node 8" in line for line in lines)
    assert any("exceeds model.max_context" in line for line in lines)


def test_duration_or_request_count_exactly_one():
    lines = problems(lambda d: d["workloads"][0].update(request_count=10))
    assert any("exactly one of duration_s or request_count" in line for line in lines)


def test_hash_is_stable_and_meaningful():
    a = parse_spec(copy.deepcopy(SMOKE))
    b = parse_spec(copy.deepcopy(SMOKE))
    assert spec_hash(a) == spec_hash(b)
    changed = copy.deepcopy(SMOKE)
    changed["workloads"][0]["osl"] = 33
    assert spec_hash(parse_spec(changed)) != spec_hash(a)


# ------------------------------------------------------------------ the four workloads' parameters


def _workload(data, kind):
    return next(w for w in data["workloads"] if w["kind"] == kind)


def test_smoke_has_all_four_workloads():
    assert sorted(w["kind"] for w in SMOKE["workloads"]) == [
        "concurrency_sweep", "multi_turn", "prefix_cache", "sequence_distribution"]


@pytest.mark.parametrize(
    ("kind", "change", "expected"),
    [
        ("prefix_cache", {"ratios": [0, 1.5]}, "workloads[3].ratios[1]: 1.5 is invalid: Input should be less than or equal to 1"),
        ("prefix_cache", {"ratios": [-0.25]}, "workloads[3].ratios[0]: -0.25 is invalid: Input should be greater than or equal to 0"),
        ("sequence_distribution", {"isl_range": [4096, 128]}, "workloads[2].isl_range: range [4096, 128] is reversed; give [low, high]"),
        ("sequence_distribution", {"distributions": ["zipf", "pareto"]}, "workloads[2].distributions[1]: \"pareto\" is invalid: Input should be 'uniform', 'zipf' or 'lognormal'"),
        ("sequence_distribution", {"osl_range": [64, 50000]}, "workloads[2]: osl 50000 exceeds model.max_context 40960"),
        ("concurrency_sweep", {"osl": 41000}, "workloads[0]: osl 41000 exceeds model.max_context 40960"),
        ("multi_turn", {"turns": 24, "isl": 2000}, "workloads[1]: longest turn (all turns' history) 48368 + osl 16 exceeds model.max_context 40960"),
        ("multi_turn", {"duration_s": 10}, "workloads[1]: give exactly one of duration_s or request_count"),
        ("multi_turn", {"request_count": 25}, "workloads[1]: request_count 25 must be a multiple of turns 3"),
        ("prefix_cache", {"kind": "prefix_caching"}, "workloads[3]: "),
    ],
)
def test_bad_workload_parameters_are_named(kind, change, expected):
    lines = problems(lambda d: _workload(d, kind).update(change))
    assert any(line.startswith(expected) for line in lines), lines


def test_unknown_workload_kind_lists_the_valid_kinds():
    lines = problems(lambda d: _workload(d, "prefix_cache").update(kind="prefix_caching"))
    assert len(lines) == 1 and "prefix_caching" in lines[0]
    for kind in ("concurrency_sweep", "multi_turn", "sequence_distribution", "prefix_cache"):
        assert kind in lines[0]


# ------------------------------------------------------------------------------- feature ladder


LADDER = ROOT / "examples" / "feature-ladder.yaml"


def test_ladder_rungs_inherit_the_base_and_change_one_feature():
    spec = load_spec(LADDER)
    by = {e.name: e for e in spec.experiments}
    assert (by["agg-kv"].mode, by["agg-kv"].router, by["agg-kv"].feature) == ("aggregated", "kv", "router")
    assert by["agg-kv"].workers == by["agg"].workers
    assert (by["disagg-kv"].mode, by["disagg-kv"].router, by["disagg-kv"].feature) == ("disaggregated", "kv", "mode")
    assert by["disagg-kv"].gpus() == by["agg"].gpus()
    off = by["disagg-kv-off"]
    assert off.feature == "kv_offload" and off.kv_offload is not None and off.kv_offload.cpu_cache_gb == 4
    assert (off.mode, off.router, off.workers) == (by["disagg-kv"].mode, "kv", by["disagg-kv"].workers)


LADDER_DATA = yaml.safe_load(LADDER.read_text())


@pytest.mark.parametrize(
    ("rung", "expected"),
    [
        ({"name": "x", "base": "agg", "change": {"router": "kv", "kv_offload": {}}},
         "experiments[5].change: changes ['router', 'kv_offload']; a ladder rung changes exactly one of"),
        ({"name": "x", "base": "nope", "change": {"router": "kv"}},
         "experiments[5].base: 'nope' is not an earlier experiment; valid: ['agg', 'agg-kv', 'disagg-kv', 'disagg-kv-off', 'disagg-kv-ssd']"),
        ({"name": "x", "base": "agg", "change": {"router": "round-robin"}},
         "experiments[5].change.router: equals the base's value; nothing changes"),
        ({"name": "x", "base": "agg", "change": {"tensor_parallel": 2}},
         "experiments[5].change: ['tensor_parallel'] cannot be changed on a ladder"),
        ({"name": "x", "base": "agg", "change": {"router": "kv"}, "mode": "disaggregated"},
         "experiments[5]: ['mode'] differ from the base 'agg'; a rung inherits every field but the one under"),
        ({"name": "x", "base": "agg"}, "experiments[5].change: required with base"),
    ],
)
def test_bad_ladder_rungs_are_refused(rung, expected):
    data = copy.deepcopy(LADDER_DATA)
    data["experiments"].append(rung)
    with pytest.raises(SpecError) as err:
        parse_spec(data, "ladder.yaml")
    assert any(line.startswith(expected) for line in err.value.problems), err.value.problems


@pytest.mark.parametrize("name", ["smoke.yaml", "seed-plan.yaml", "feature-ladder.yaml"])
def test_normalised_spec_parses_back_to_itself(name):
    # the Plan state stores spec.model_dump() as spec.json and every later state parses it again
    spec = load_spec(ROOT / "examples" / name)
    again = parse_spec(json.loads(json.dumps(spec.model_dump(mode="json"))), "spec.json")
    assert again == spec and spec_hash(again) == spec_hash(spec)


def test_seed_policy_fixed_reuses_the_seed():
    data = copy.deepcopy(SMOKE)
    data.update(repeats=3, seed_policy="fixed")
    assert {parse_spec(data).repeat_seed(r) for r in range(3)} == {42}
    data["seed_policy"] = "per-repeat"
    assert [parse_spec(data).repeat_seed(r) for r in range(3)] == [42, 43, 44]


def _on_eks(data: dict) -> None:
    for pool in data["pools"]:
        pool.update(provider="managed-nodegroup", nodegroup="gpu-a100")


@pytest.mark.parametrize("revision", [None, "main", "v1.0", "ad44e777", "AD44E777BCD18FA416D9DA3BD8F70D33EBB85D39"])
def test_pools_on_eks_need_the_model_revision_as_a_full_commit_hash(revision):
    """The workers serve the hub cache's snapshot directory, which is named by its commit only (a branch or
    tag is a ref to one): a spec with pools on EKS is refused at validation without a full commit."""
    def mutate(data):
        _on_eks(data)
        data["model"]["revision"] = revision

    (line,) = [p for p in problems(mutate) if p.startswith("model.revision")]
    assert f"model.revision: {revision!r} must be a full 40-character commit hash" in line
    assert "['gpu-a100'] run on EKS" in line and "snapshots/<commit>" in line
    local = copy.deepcopy(SMOKE)  # the local engine serves its own generated model directory
    local["model"]["revision"] = revision
    assert parse_spec(local).model.revision == revision


def test_an_experiment_whose_deployment_name_dynamos_webhook_would_refuse_is_refused_on_eks(tmp_path, capsys):
    """Dynamo's webhook refuses a DGD whose name (bc-<experiment>-<campaign hash>) plus a lowercased component
    name is over 45 characters: with two prefill groups (component `prefill-0`, 9 characters) an experiment
    name of 24 characters fits, 25 is refused naming the experiment and the limit; locally nothing is deployed."""
    def split(name):
        def mutate(data):
            _on_eks(data)
            exp = data["experiments"][1]
            exp["name"] = name
            exp["workers"] = [{"role": "prefill", "pool": "gpu-a100", "replicas": 1, "tensor_parallel": 2},
                              {"role": "prefill", "pool": "gpu-a100", "replicas": 1, "tensor_parallel": 2},
                              {"role": "decode", "pool": "gpu-a100", "replicas": 1, "tensor_parallel": 4}]
        return mutate

    (line,) = problems(split("d" * 25))
    assert line.startswith(f"experiments[1].name: {'d' * 25!r} (25 characters) is too long to deploy on EKS")
    assert "component 'prefill-0' (9) make 46, over the 45 characters" in line
    assert line.endswith("give this experiment a name of at most 24 characters")
    bad = copy.deepcopy(SMOKE)
    split("d" * 25)(bad)
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(bad))
    assert cli.main(["validate", str(tmp_path / "long.yaml")]) == 2  # bad input: exit 2, the line as above
    assert f"experiments[1].name: {'d' * 25!r} (25 characters) is too long to deploy on EKS" in capsys.readouterr().err
    fits = copy.deepcopy(SMOKE)
    split("d" * 24)(fits)
    assert parse_spec(fits).experiments[1].name == "d" * 24
    local = copy.deepcopy(SMOKE)
    split("d" * 25)(local)
    for pool in local["pools"]:
        pool.update(provider="local", nodegroup=None)
    assert parse_spec(local).experiments[1].name == "d" * 25
