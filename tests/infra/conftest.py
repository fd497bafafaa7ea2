"""One synthesis per configuration per test session (each takes seconds), shared by every infra test:
``default_out`` is cdk.json's context; ``templates`` the "full" one, which also sets a schedule, a
notification e-mail and a VPC placement (all off unless set) so that their resources are checked too.
Synthesis is offline and without Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]
FULL = {**CONTEXT,
        "benchctl:schedule": {"expression": "cron(0 3 ? * SUN *)", "spec_key": "specs/seed-plan.yaml",
                              "timezone": "Europe/Berlin"},
        "benchctl:notify_email": "bench-team@example.com",
        "benchctl:vpc_id": "vpc-0123456789abcdef0",
        "benchctl:subnet_ids": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]}
RS, CP = "benchctl-dev-results", "benchctl-dev-control-plane"


def synth(out: Path, context: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDK_OUTDIR": str(out), "JSII_SILENCE_WARNING_DEPRECATED_NODE": "1"}
    env.pop("CDK_CONTEXT_JSON", None)
    if context is not None:
        env["CDK_CONTEXT_JSON"] = json.dumps(context)
    return subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def load_templates(out: Path) -> dict[str, dict[str, Any]]:
    return {p.name.removesuffix(".template.json"): json.loads(p.read_text()) for p in out.glob("*.template.json")}


@pytest.fixture(scope="session")
def default_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cdk.out")
    res = synth(out)
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="session")
def full_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cdk.out.full")
    res = synth(out, FULL)
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="session")
def templates(full_out: Path) -> dict[str, dict[str, Any]]:
    return {**load_templates(full_out), "_out": {"dir": str(full_out)}}


@pytest.fixture(scope="session")
def default_templates(default_out: Path) -> dict[str, dict[str, Any]]:
    return load_templates(default_out)
