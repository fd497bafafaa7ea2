"""The CLI as a person runs it: ``python -m benchctl.cli.main`` in a process of its own, its exit code and what it
prints (0, or 2 with one line per problem and never a traceback). Real processes: the integration tier."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_bad_input import SMOKE, _starts_with_a_field_path

ROOT = Path(__file__).resolve().parents[2]


def _validate(tmp_path: Path, name: str, content: bytes) -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_bytes(content)
    return subprocess.run([sys.executable, "-m", "benchctl.cli.main", "validate", str(path)], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)


def _dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True).encode()


CLI_CASES = {
    "valid": _dump(SMOKE),
    "wrong-types-and-unknown": _dump({**SMOKE, "repeats": "three", "seed": -5, "pools": [{**SMOKE["pools"][0],
                                      "gpus_per_node": 10**30, "zöne": "ü"}]}),
    "missing-required": _dump({k: v for k, v in SMOKE.items() if k not in ("model", "workloads")}),
    "not-yaml": b"name: [unclosed\n  - {",
    "not-utf8": b"name: smoke\xff\xfe\n",
    "top-level-list": b"- 1\n- 2\n",
    "empty": b"",
}


@pytest.mark.parametrize("case", [*CLI_CASES, "ladder-base-list"])
def test_cli_validate_exits_0_or_2_never_a_traceback(tmp_path: Path, case: str) -> None:
    content = CLI_CASES[case] if case in CLI_CASES else _dump({**SMOKE, "experiments": [
        *SMOKE["experiments"], {"name": "rung", "base": ["agg"], "change": {"router": "round-robin"}}]})
    res = _validate(tmp_path, f"{case}.yaml", content)
    assert res.returncode in (0, 2), (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    assert (res.returncode == 0) == (case == "valid"), res.stderr
    if res.returncode == 2:
        lines = res.stderr.splitlines()
        assert lines[0].startswith("benchctl: invalid spec "), lines
        problems = [line.removeprefix("  ") for line in lines[1:]]
        if case == "not-yaml":  # PyYAML's message spans lines: known issue, test_every_problem_is_one_line
            problems = problems[:1]
        assert problems and all(p.split(": ", 1)[0] and ": " in p for p in problems), problems
        doc = yaml.safe_load(content) if case not in ("not-yaml", "not-utf8") else {}
        assert all(_starts_with_a_field_path(p, doc if isinstance(doc, dict) else {}) for p in problems), problems


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "benchctl.cli.main", *args], capture_output=True, text=True, cwd=ROOT)


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


def test_cli_plan_json_and_budget_exit(tmp_path):
    res = subprocess.run([sys.executable, "-m", "benchctl.cli.main", "plan", "examples/seed-plan.yaml", "--json"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["plan_id"].startswith("seed-plan-")
    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    data["budget"] = {"max_hours": 0.5}
    f = tmp_path / "b.yaml"
    f.write_text(yaml.safe_dump(data))
    res = subprocess.run([sys.executable, "-m", "benchctl.cli.main", "plan", str(f), "--engine", "aws"],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "budget.max_hours" in res.stderr


def test_cli_validate_exits_2_on_a_bad_ratio(tmp_path):
    data = copy.deepcopy(SMOKE)
    next(w for w in data["workloads"] if w["kind"] == "prefix_cache")["ratios"] = [0, 2]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    res = run_cli("validate", str(bad))
    assert res.returncode == 2
    assert "workloads[3].ratios[1]: 2 is invalid" in res.stderr
