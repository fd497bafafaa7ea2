"""Spec validation: one line per problem naming the field path, the bad value and what is valid."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchctl.errors import SpecError
from benchctl.spec import load_spec, parse_spec, spec_hash

ROOT = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())


def problems(mutate) -> list[str]:
    data = copy.deepcopy(SMOKE)
    mutate(data)
    with pytest.raises(SpecError) as err:
        parse_spec(data, "t.yaml")
    return err.value.problems


def test_examples_validate():
    for name in ("smoke.yaml", "seed-plan.yaml"):
        spec = load_spec(ROOT / "examples" / name)
        assert spec.experiments and spec.workloads


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


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "benchctl.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_cli_validate_exit_codes(tmp_path):
    ok = run_cli("validate", "examples/smoke.yaml")
    assert ok.returncode == 0, ok.stderr
    bad = copy.deepcopy(SMOKE)
    bad["experiments"][0]["router"] = "random"
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(bad))
    res = run_cli("validate", str(f))
    assert res.returncode == 2
    assert "experiments[0].router:" in res.stderr and "round-robin" in res.stderr
    notyaml = tmp_path / "x.yaml"
    notyaml.write_text("name: [unclosed")
    assert run_cli("validate", str(notyaml)).returncode == 2
    missing = run_cli("validate", str(tmp_path / "none.yaml"))
    assert missing.returncode == 2 and "not found" in missing.stderr
