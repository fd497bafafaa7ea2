"""The oldest ``aws-cdk-lib`` that requirements-dev.txt admits synthesizes the whole app: the stacks' imports and
calls held to the lower bound's own API, not only to the version this machine happens to have (aws-cdk-lib 2.239.0
has no stable ``aws_eks_v2``; 2.240.0 no ``KubernetesVersion.V1_35``: both would fail only at a user's
``cdk deploy``). scripts/setup.sh installs that release into ``build/``; it goes in front of the project's own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.conftest import CONTEXT, CP, ROOT, load_templates
from tests.infra.test_platform_stack import VARIANTS

pytestmark = pytest.mark.infra


def lower_bound() -> str:
    """The ``aws-cdk-lib>=X`` of requirements-dev.txt (refused when there is none: an unbounded range admits a
    release without the modules the stacks import)."""
    text = (ROOT / "requirements-dev.txt").read_text()
    m = re.search(r"^aws-cdk-lib>=(\d+\.\d+(?:\.\d+)?),<3\b", text, re.M)
    assert m, "requirements-dev.txt: aws-cdk-lib needs a lower bound (aws-cdk-lib>=X,<3)"
    return m[1] if m[1].count(".") == 2 else m[1] + ".0"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_lowest_admitted_aws_cdk_lib_synthesizes_the_app_with_each_platform(tmp_path: Path, variant: str) -> None:
    version = lower_bound()
    target = ROOT / "build" / f"aws-cdk-lib-{version}"
    assert (target / "aws_cdk" / "aws_eks_v2").is_dir(), f"{target} is missing: run scripts/setup.sh (it installs it)"
    env = {**os.environ, "PYTHONPATH": str(target), "CDK_OUTDIR": str(tmp_path),
           "JSII_SILENCE_WARNING_DEPRECATED_NODE": "1",
           "CDK_CONTEXT_JSON": json.dumps({**CONTEXT, **VARIANTS[variant]})}
    probe = subprocess.run([sys.executable, "-c", "import aws_cdk, importlib.metadata as m; "
                            "print(m.version('aws-cdk-lib'), aws_cdk.__file__)"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert probe.stdout.split()[:2] == [version, str(target / "aws_cdk" / "__init__.py")], probe.stdout + probe.stderr
    res = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    templates = load_templates(tmp_path)
    assert {CP, "benchctl-dev-platform"} <= set(templates)
    clusters = [r for r in templates["benchctl-dev-platform"]["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"]
    assert len(clusters) == (0 if VARIANTS[variant]["benchctl:platform"] == "existing" else 1)
