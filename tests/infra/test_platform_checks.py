"""AWS's own rules, applied to what `cdk deploy` would send: the States Language (statelint, the checker
that knows that ``States.ALL`` stands alone in the last retrier) on the state machine definition as
deployed, and parliament (which knows each IAM action's resource types and condition keys) on every
policy document of both templates. A finding fails the test unless it is one of the named false
positives below, each with its reason; an entry that no longer matches anything fails too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.infra.cfn_resolve import Resolver, policy_documents
from tests.infra.conftest import CP, ROOT, RS

pytestmark = pytest.mark.infra
STATELINT = ROOT / "scripts" / "node" / "node_modules" / ".bin" / "statelint"


def _statelint(path: Path) -> subprocess.CompletedProcess[str]:
    assert STATELINT.is_file(), f"{STATELINT} is missing: run scripts/setup.sh (it installs @wmfs/statelint)"
    return subprocess.run([str(STATELINT), str(path)], capture_output=True, text=True, timeout=120)


def deployed_definition(templates: dict[str, Any], machine: str = "Campaign") -> dict[str, Any]:
    """The definition Step Functions receives: DefinitionString with DefinitionSubstitutions applied (of the
    state machine whose logical id starts with ``machine``)."""
    (sm,) = [r["Properties"] for lid, r in templates[CP]["Resources"].items()
             if r["Type"] == "AWS::StepFunctions::StateMachine" and lid.startswith(machine)]
    r = Resolver({k: v for k, v in templates.items() if not k.startswith("_")})
    text = r.resolve(sm["DefinitionString"], CP)
    for var, value in sm["DefinitionSubstitutions"].items():
        text = text.replace("${" + var + "}", r.resolve(value, CP))
    assert "${" not in text
    definition: dict[str, Any] = json.loads(text)
    return definition


def test_statelint_finds_nothing_in_the_deployed_definition(templates, tmp_path):
    definition = deployed_definition(templates)
    assert definition["TimeoutSeconds"] == 48 * 3600
    assert "arn:aws:lambda:us-east-1:123456789012:function:" in json.dumps(definition)
    path = tmp_path / "deployed.asl.json"
    path.write_text(json.dumps(definition, indent=2))
    res = _statelint(path)
    assert res.returncode == 0 and res.stdout.strip() == "" and res.stderr.strip() == "", res.stdout + res.stderr


def test_statelint_finds_nothing_in_the_stopped_campaign_definition(templates, tmp_path):
    definition = deployed_definition(templates, "StoppedCampaign")
    text = json.dumps(definition)
    assert "arn:aws:lambda:us-east-1:123456789012:function:" in text and "arn:aws:sns:" in text
    assert "s3://bucket-" in text  # the reports' place in the results bucket, in its notification
    path = tmp_path / "stopped.asl.json"
    path.write_text(json.dumps(definition, indent=2))
    res = _statelint(path)
    assert res.returncode == 0 and res.stdout.strip() == "" and res.stderr.strip() == "", res.stdout + res.stderr


def test_statelint_knows_the_rule_that_broke_the_deployment(tmp_path):
    """The check is live: a retrier list with States.ALL first (the four the issue found) is refused."""
    asl = {"StartAt": "T", "States": {"T": {
        "Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "End": True,
        "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 2},
                  {"ErrorEquals": ["Lambda.ServiceException"], "MaxAttempts": 3}]}}}
    path = tmp_path / "bad.asl.json"
    path.write_text(json.dumps(asl))
    res = _statelint(path)
    assert res.returncode != 0
    assert "States.ALL can only appear in the last element, and by itself" in res.stdout + res.stderr


# ---------------------------------------------------------------------------------------------- parliament

_PASS_LOAD_ROLE = ("a campaign's EKS Pod Identity association with the load Job role (CreatePodIdentityAssociation "
                   "needs iam:PassRole of the role it associates); granted on the load Job role's ARN alone, so no "
                   "other role can be handed to a pod (benchctl.aws.runner_identity).")

# (template, logical id prefix, issue, what it concerns) -> why it is not a problem
FALSE_POSITIVES: dict[tuple[str, str, str, str], str] = {
    (CP, "CampaignRoleDefaultPolicy", "PERMISSIONS_MANAGEMENT_ACTIONS", "logs:putresourcepolicy"):
        "Step Functions execution logging: AWS's documented role policy for logging to CloudWatch Logs "
        "includes logs:PutResourcePolicy (log delivery; CDK's LogOptions generates it). Our log group is under "
        "/aws/vendedlogs/ so no per-group resource policy has to be written.",
    (CP, "StoppedCampaignRoleDefaultPolicy", "PERMISSIONS_MANAGEMENT_ACTIONS", "logs:putresourcepolicy"):
        "the stopped-campaign state machine's execution logging, as the campaign state machine's (above)",
    (CP, "SweepRoleDefaultPolicy", "RESOURCE_MISMATCH", "states:DescribeExecution"):
        "DescribeExecution is authorized on Standard (execution:) and Express (express:) execution ARNs; "
        "parliament wants the Express form too, but the campaign state machine is a Standard one, so only its "
        "execution ARNs are named.",
    (CP, "TeardownRoleDefaultPolicy", "RESOURCE_MISMATCH", "states:DescribeExecution"):
        "Teardown describes the execution a stop event names before it tears anything down (the event is verified, "
        "benchctl.campaign.stopped); the campaign state machine is a Standard one, so only its execution: ARNs are "
        "named, as for the sweeper (above).",
    (CP, "LoadJobRoleDefaultPolicy", "RESOURCE_MISMATCH", "arn:*:s3:::*/*"):
        "the load Job role names its objects by the policy variable ${aws:PrincipalTag/kubernetes-service-account} "
        "(IAM User Guide, 'IAM policy elements: Variables and tags': variables may stand in a Resource ARN); "
        "parliament splits the ARN at the variable's ':' and misreads it: the same statements with a campaign id "
        "in its place pass (checked by test_parliament_misreads_only_the_policy_variable).",
    (CP, "PlanRoleDefaultPolicy", "PERMISSIONS_MANAGEMENT_ACTIONS", "iam:passrole"):
        f"Plan's preflight makes: {_PASS_LOAD_ROLE}",
    (CP, "LoadRoleDefaultPolicy", "PERMISSIONS_MANAGEMENT_ACTIONS", "iam:passrole"):
        f"the doctor's runner Job check makes: {_PASS_LOAD_ROLE}",
    (CP, "TopicKey", "PERMISSIONS_MANAGEMENT_ACTIONS", "kms"):
        "the key policy's first statement is KMS's default key policy (the account root may administer the "
        "key, so that IAM can govern it); without it the key could become unmanageable (KMS docs, 'Default key "
        "policy').",
    (CP, "TopicKey", "RESOURCE_STAR", "kms"):
        "in a key policy Resource \"*\" means this key (KMS docs); the EventBridge statement is further "
        "limited by aws:SourceAccount and aws:SourceArn (the status rule).",
}


def _lint(doc: dict[str, Any], what: str, lid: str) -> list[Any]:
    from parliament import analyze_policy_string

    if what == "trust":
        # parliament reads identity-policy grammar; a trust policy has no Resource (the role itself is the
        # resource), so give it the role: its actions and conditions are then checked like any other. The
        # community auditors stay off here: they judge what an identity may do (sts:AssumeRole there is a
        # "credentials exposure"), which is not what a trust policy says.
        doc = {**doc, "Statement": [{**s, "Resource": f"arn:aws:iam::123456789012:role/{lid}"}
                                    for s in doc["Statement"]]}
    return list(analyze_policy_string(json.dumps(doc), include_community_auditors=what != "trust").findings)


def _key(template: str, lid: str, f: Any) -> tuple[str, str, str, str] | None:
    text = json.dumps({"detail": f.detail, "location": f.location}).lower()
    for (t, prefix, issue, concerns), _ in FALSE_POSITIVES.items():
        if t == template and lid.startswith(prefix) and f.issue == issue and concerns.lower() in text:
            return (t, prefix, issue, concerns)
    return None


def test_parliament_over_every_policy_document_of_both_templates(templates):
    docs = policy_documents({k: v for k, v in templates.items() if not k.startswith("_")})
    kinds = {(t, what) for t, _, what, _ in docs}
    assert {(CP, "identity"), (CP, "trust"), (CP, "resource"), (RS, "resource")} <= kinds
    assert len(docs) >= 20
    unexplained, used = [], set()
    for template, lid, what, doc in docs:
        for f in _lint(doc, what, lid):
            key = _key(template, lid, f)
            if key is None:
                unexplained.append((template, lid, what, f.issue, f.detail))
            else:
                used.add(key)
    assert unexplained == [], json.dumps(unexplained, indent=1, default=str)
    assert set(FALSE_POSITIVES) == used, f"stale false positives: {set(FALSE_POSITIVES) - used}"


def test_parliament_misreads_only_the_policy_variable(templates):
    """The load Job role's RESOURCE_MISMATCH is the policy variable's alone: with a campaign id in its place
    parliament finds nothing in that document."""
    from parliament import analyze_policy_string

    docs = policy_documents({k: v for k, v in templates.items() if not k.startswith("_")})
    (doc,) = [d for t, lid, what, d in docs if lid.startswith("LoadJobRoleDefaultPolicy")]
    text = json.dumps(doc)
    assert "${aws:PrincipalTag/kubernetes-service-account}" in text
    text = text.replace("${aws:PrincipalTag/kubernetes-service-account}", "seed-plan-20261201-101500")
    assert list(analyze_policy_string(text).findings) == []


def test_parliament_knows_the_resource_types_the_issue_found_wrong():
    """The check is live: DescribeUpdate granted on node groups only (what the stack had) is flagged."""
    doc = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "eks:DescribeUpdate",
                                                    "Resource": "arn:aws:eks:us-east-1:123456789012:nodegroup/c/ng/*"}]}
    assert [f.issue for f in _lint(doc, "identity", "x")] == ["RESOURCE_MISMATCH"]
