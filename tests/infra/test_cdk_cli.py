"""Configuration as CDK users expect: the CDK CLI (installed project-locally by scripts/setup.sh, the same
one `npx aws-cdk@2` runs) synthesizes with cdk.json's "app", which is this project's own interpreter, and
``-c benchctl:key=value`` reaches the stacks; a misspelled key stops it, naming the key and the valid ones.
No AWS account is contacted (environment-agnostic stacks; no lookups)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.infra.conftest import CP, ROOT, RS

pytestmark = pytest.mark.infra
CDK = ROOT / "scripts" / "node" / "node_modules" / ".bin" / "cdk"


def cdk(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    assert CDK.is_file(), f"{CDK} is missing: run scripts/setup.sh (it installs the CDK CLI project-locally)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDK_")}
    env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_ACCESS_KEY_ID": "none", "AWS_SECRET_ACCESS_KEY": "none",
                "AWS_DEFAULT_REGION": "us-east-1", "CDK_DISABLE_VERSION_CHECK": "1",
                "CDK_DISABLE_CLI_TELEMETRY": "true", "JSII_SILENCE_WARNING_DEPRECATED_NODE": "1"})
    return subprocess.run([str(CDK), "synth", "--no-notices", "--no-version-reporting", "--quiet", "-o", str(out),
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_cdk_json_runs_the_projects_interpreter():
    app = json.loads((ROOT / "cdk.json").read_text())["app"]
    assert app == ".venv/bin/python app.py"  # not the system python3, which lacks the dependencies


def test_context_given_with_dash_c_reaches_the_stacks(tmp_path):
    res = cdk("-c", "benchctl:raw_archive_days=45", "-c", "benchctl:nodegroups=gpu-x,gpu-y",
              "-c", "benchctl:create_access_entries=false", out=tmp_path)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rs = json.loads((tmp_path / f"{RS}.template.json").read_text())
    cp = json.loads((tmp_path / f"{CP}.template.json").read_text())
    assert '"TransitionInDays": 45' in json.dumps(rs)
    text = json.dumps(cp)
    assert "nodegroup/dynamo-bench/gpu-x/*" in text and "gpu-p4d" not in text  # cdk.json's value was replaced
    assert "AWS::EKS::AccessEntry" not in text


def test_a_misspelled_key_stops_the_cli_naming_it(tmp_path):
    res = cdk("-c", "benchctl:raw_archive_dayz=30", out=tmp_path)
    assert res.returncode != 0
    assert "unknown CDK context key(s) ['benchctl:raw_archive_dayz']" in res.stdout + res.stderr
    assert not list(tmp_path.glob("*.template.json"))
