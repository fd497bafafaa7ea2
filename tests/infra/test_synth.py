"""CDK synthesis (one shared synth): the deployed state machine is the ASL file itself."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lambdas import FUNCTIONS

pytestmark = pytest.mark.infra
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    out = tmp_path_factory.mktemp("cdk.out")
    env = {**os.environ, "CDK_OUTDIR": str(out), "JSII_SILENCE_WARNING_DEPRECATED_NODE": "1"}
    res = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return {p.name.removesuffix(".template.json"): json.loads(p.read_text()) for p in out.glob("*.template.json")}


def _resources(t, kind):
    return {k: v for k, v in t["Resources"].items() if v["Type"] == kind}


def test_state_machine_is_the_asl_file_with_substitutions(templates):
    cp = templates["benchctl-dev-control-plane"]
    (sm,) = _resources(cp, "AWS::StepFunctions::StateMachine").values()
    props = sm["Properties"]
    text = props["DefinitionString"]
    asl = json.loads((ROOT / "state_machines" / "campaign.asl.json").read_text())
    assert json.loads(text) == asl  # the very file
    subs = props["DefinitionSubstitutions"]
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(subs) == set(FUNCTIONS)  # none unresolved
    fns = _resources(cp, "AWS::Lambda::Function")
    for var, ref in subs.items():
        assert ref["Fn::GetAtt"][0] in fns, var  # every Task's Lambda exists
    assert len(fns) == len(FUNCTIONS)
    handlers = {f["Properties"]["Handler"] for f in fns.values()}
    assert handlers == set(FUNCTIONS.values())


def test_results_bucket_is_protected(templates):
    rs = templates["benchctl-dev-results"]
    (bucket,) = _resources(rs, "AWS::S3::Bucket").values()
    props = bucket["Properties"]
    assert props["VersioningConfiguration"]["Status"] == "Enabled"
    assert props["PublicAccessBlockConfiguration"]["BlockPublicAcls"] is True
    assert bucket["DeletionPolicy"] == "Retain"
    policy = next(iter(_resources(rs, "AWS::S3::BucketPolicy").values()))
    assert "aws:SecureTransport" in json.dumps(policy)
