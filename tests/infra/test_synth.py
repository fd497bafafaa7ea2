"""CDK synthesis, offline and without Docker: one shared synth per configuration, then the templates.

The default configuration is cdk.json's; the "full" one adds a schedule and a notification e-mail
(both off unless set) so that their resources can be checked too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchctl import schema
from benchctl.query import view_sql_files
from lambdas import FUNCTIONS

pytestmark = pytest.mark.infra
ROOT = Path(__file__).resolve().parents[2]
CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]
FULL = {**CONTEXT, "benchctl:schedule": {"expression": "cron(0 3 ? * SUN *)", "spec_key": "specs/seed-plan.yaml",
                                         "timezone": "Europe/Berlin"},
        "benchctl:notify_email": "bench-team@example.com"}


def synth(out: Path, context: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CDK_OUTDIR": str(out), "JSII_SILENCE_WARNING_DEPRECATED_NODE": "1"}
    env.pop("CDK_CONTEXT_JSON", None)
    if context is not None:
        env["CDK_CONTEXT_JSON"] = json.dumps(context)
    return subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def _load(out: Path) -> dict[str, dict[str, Any]]:
    return {p.name.removesuffix(".template.json"): json.loads(p.read_text()) for p in out.glob("*.template.json")}


@pytest.fixture(scope="module")
def default_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cdk.out")
    res = synth(out)
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("cdk.out.full")
    res = synth(out, FULL)
    assert res.returncode == 0, res.stderr
    return {**_load(out), "_out": {"dir": str(out)}}


def _resources(t: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in t["Resources"].items() if v["Type"] == kind}


def _one(t: dict[str, Any], kind: str) -> dict[str, Any]:
    (r,) = _resources(t, kind).values()
    return r["Properties"]


RS, CP = "benchctl-dev-results", "benchctl-dev-control-plane"


# ------------------------------------------------------------------------------------- state machine


def test_state_machine_is_the_asl_file_with_substitutions(templates):
    cp = templates[CP]
    props = _one(cp, "AWS::StepFunctions::StateMachine")
    text = props["DefinitionString"]
    asl = json.loads((ROOT / "state_machines" / "campaign.asl.json").read_text())
    assert json.loads(text) == asl  # the very file
    subs = props["DefinitionSubstitutions"]
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(subs) == set(FUNCTIONS)  # none unresolved
    fns = _resources(cp, "AWS::Lambda::Function")
    for var, ref in subs.items():
        assert ref["Fn::GetAtt"][0] in fns, var  # every Task's Lambda exists
    assert len(fns) == len(FUNCTIONS) + 1  # + the sweeper, outside the state machine
    assert {f["Properties"]["Handler"] for f in fns.values()} == {*FUNCTIONS.values(), "lambdas.sweep.handler"}
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] == "ALL"


def test_functions_have_powertools_pandas_and_deps_layers(templates):
    for fn in _resources(templates[CP], "AWS::Lambda::Function").values():
        p = fn["Properties"]
        layers = json.dumps(p["Layers"])
        assert CONTEXT["benchctl:powertools_layer_arn"] in layers
        assert CONTEXT["benchctl:sdk_pandas_layer_arn"] in layers
        assert p["TracingConfig"] == {"Mode": "Active"} and p["Runtime"] == "python3.11"
        assert p["Environment"]["Variables"]["BENCHCTL_CLUSTER"] == CONTEXT["benchctl:cluster_name"]


def test_code_asset_ships_no_local_engine_tests_or_venv(default_out):
    assets = json.loads((default_out / "benchctl-dev-control-plane.assets.json").read_text())["files"]
    dirs = [default_out / a["source"]["path"] for a in assets.values() if a["source"].get("packaging") == "zip"]
    code = next(d for d in dirs if (d / "lambdas").is_dir())
    shipped = {str(p.relative_to(code)) for p in code.rglob("*")}
    assert "benchctl/campaign.py" in shipped and "state_machines/campaign.asl.json" in shipped
    for banned in ("benchctl/local", "tests", ".venv", "examples", "build", "stacks"):
        assert not any(s == banned or s.startswith(banned + "/") for s in shipped), banned
    layer = next(d for d in dirs if (d / "python" / "yaml").is_dir())
    assert layer  # PyYAML packaged from build/lambda-layer, no Docker involved


def test_the_load_image_is_built_from_the_repo_with_aiperf_0_13_0_and_given_to_every_function(default_out):
    # Given synth without Docker: the image is an asset (built and pushed by `cdk deploy`), its folder copied
    assets = json.loads((default_out / "benchctl-dev-control-plane.assets.json").read_text())["dockerImages"]
    (image,) = assets.values()
    assert image["source"]["platform"] == "linux/amd64"
    dockerfile = (default_out / image["source"]["directory"] / "Dockerfile").read_text()
    assert dockerfile == (ROOT / "stacks" / "images" / "load" / "Dockerfile").read_text()
    from benchctl.aiperf_args import AIPERF_VERSION

    assert f"ARG AIPERF_VERSION={AIPERF_VERSION}" in dockerfile
    # Then every function knows the pushed image as the default load image
    template = json.loads((default_out / "benchctl-dev-control-plane.template.json").read_text())
    tag = image["destinations"][next(iter(image["destinations"]))]["imageTag"]
    for fn in _resources(template, "AWS::Lambda::Function").values():
        uri = json.dumps(fn["Properties"]["Environment"]["Variables"]["BENCHCTL_LOAD_IMAGE"])
        assert tag in uri and "container-assets" in uri


# --------------------------------------------------------------------------------------------- results


def test_results_bucket_is_protected_with_a_raw_lifecycle(templates):
    rs = templates[RS]
    lake = next(b for k, b in _resources(rs, "AWS::S3::Bucket").items() if k.startswith("Lake"))
    props = lake["Properties"]
    assert props["VersioningConfiguration"]["Status"] == "Enabled"
    assert props["PublicAccessBlockConfiguration"] == dict.fromkeys(("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"), True)
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"}
    assert lake["DeletionPolicy"] == "Retain"
    assert "LoggingConfiguration" in props
    rules = {r["Id"]: r for r in props["LifecycleConfiguration"]["Rules"]}
    raw = rules["archive-raw-artifacts"]
    assert raw["Prefix"] == "lake/raw/" and "ExpirationInDays" not in raw  # archived, never deleted
    assert raw["Transitions"][0]["TransitionInDays"] == CONTEXT["benchctl:raw_archive_days"]
    policies = json.dumps(_resources(rs, "AWS::S3::BucketPolicy"))
    assert '"aws:SecureTransport": "false"' in policies


def test_glue_tables_are_the_schema_module(templates):
    rs = templates[RS]
    tables = {t["Properties"]["TableInput"]["Name"]: t["Properties"]["TableInput"]
              for t in _resources(rs, "AWS::Glue::Table").values()}
    assert set(tables) == set(schema.table_names())
    for name, t in tables.items():
        cols = schema.glue_columns(name)
        assert t["StorageDescriptor"]["Columns"] == [{"Name": c["name"], "Type": c["type"]} for c in cols["columns"]]
        assert t["PartitionKeys"] == [{"Name": c["name"], "Type": c["type"]} for c in cols["partition_keys"]]
        assert "ParquetHiveSerDe" in t["StorageDescriptor"]["SerdeInfo"]["SerializationLibrary"]
        assert json.dumps(t["StorageDescriptor"]["Location"]).endswith(f'/lake/{name}/"]]}}')


def test_athena_workgroup_enforced_with_a_scan_limit_and_one_view_query_per_file(templates):
    rs = templates[RS]
    wg = _one(rs, "AWS::Athena::WorkGroup")
    conf = wg["WorkGroupConfiguration"]
    assert conf["EnforceWorkGroupConfiguration"] is True
    assert conf["BytesScannedCutoffPerQuery"] == CONTEXT["benchctl:athena_bytes_scanned_cutoff"]
    assert "athena-results/" in json.dumps(conf["ResultConfiguration"]["OutputLocation"])
    queries = {q["Properties"]["Name"].removeprefix("benchctl "): q["Properties"]["QueryString"]
               for q in _resources(rs, "AWS::Athena::NamedQuery").values()}
    files = view_sql_files()
    assert set(queries) == set(files)
    for view, path in files.items():
        assert queries[view] == f"CREATE OR REPLACE VIEW {view} AS\n" + path.read_text().strip()


# ------------------------------------------------------------------------------------------ start, notify


def test_schedule_is_off_unless_set(default_out, templates):
    assert not _resources(_load(default_out)[CP], "AWS::Scheduler::Schedule")
    s = _one(templates[CP], "AWS::Scheduler::Schedule")
    assert s["ScheduleExpression"] == "cron(0 3 ? * SUN *)" and s["ScheduleExpressionTimezone"] == "Europe/Berlin"
    target = s["Target"]
    assert target["Arn"] == {"Ref": next(iter(_resources(templates[CP], "AWS::StepFunctions::StateMachine")))}
    assert "specs/seed-plan.yaml" in json.dumps(target["Input"])
    role = next(r for k, r in _resources(templates[CP], "AWS::IAM::Policy").items() if k.startswith("ScheduleRole"))
    (stmt,) = role["Properties"]["PolicyDocument"]["Statement"]
    assert stmt["Action"] == "states:StartExecution" and "Ref" in stmt["Resource"]


def test_the_sweeper_runs_on_a_schedule_and_may_only_read_executions(templates):
    cp = templates[CP]
    rule = next(r["Properties"] for k, r in _resources(cp, "AWS::Events::Rule").items() if k.startswith("SweepSchedule"))
    assert rule["ScheduleExpression"] == CONTEXT["benchctl:sweep_schedule"]
    actions = {a for rid, s in _statements(cp) if rid.startswith("SweepRole") for a in _as_list(s["Action"])}
    assert "states:DescribeExecution" in actions and not any(a.startswith("states:Start") for a in actions)
    assert "dynamodb:PutItem" not in actions  # it releases locks, never takes them


def test_execution_status_rule_notifies_an_encrypted_topic(templates):
    cp = templates[CP]
    rule = next(r["Properties"] for k, r in _resources(cp, "AWS::Events::Rule").items()
                if k.startswith("CampaignStatusRule"))
    pattern = rule["EventPattern"]
    assert pattern["source"] == ["aws.states"]
    assert pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert set(pattern["detail"]["status"]) == {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}
    topic_id = next(iter(_resources(cp, "AWS::SNS::Topic")))
    assert rule["Targets"][0]["Arn"] == {"Ref": topic_id}
    message = json.dumps(rule["Targets"][0]["InputTransformer"])
    assert "/reports/<detail-name>/report.html" in message  # the notification links the campaign's report
    assert "KmsMasterKeyId" in _one(cp, "AWS::SNS::Topic")
    assert _one(cp, "AWS::SNS::Subscription")["Endpoint"] == "bench-team@example.com"


# ----------------------------------------------------------------------------------------- least privilege


def _statements(t: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for rid, r in t["Resources"].items():
        if r["Type"] == "AWS::IAM::Policy":
            out += [(rid, s) for s in r["Properties"]["PolicyDocument"]["Statement"]]
        if r["Type"] == "AWS::IAM::Role":
            for pol in r["Properties"].get("Policies", []):
                out += [(rid, s) for s in pol["PolicyDocument"]["Statement"]]
    return out


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


# Actions that support no resource-level permissions, so IAM only accepts Resource "*" for them:
# X-Ray segments, the Price List, and the CloudWatch Logs vended-log delivery Step Functions logging uses.
RESOURCELESS = re.compile(r"^(xray:Put\w+|xray:GetSampling\w+|pricing:GetProducts|logs:\w*LogDeliver\w*|"
                          r"logs:PutResourcePolicy|logs:DescribeResourcePolicies|logs:DescribeLogGroups)$")


def test_no_wildcard_action_on_wildcard_resource(templates):
    for name in (RS, CP):
        for rid, s in _statements(templates[name]):
            actions = _as_list(s["Action"])
            resources = _as_list(s.get("Resource", []))
            assert not any(a == "*" or a.endswith(":*") for a in actions), (rid, s)
            if "*" in resources:
                assert all(RESOURCELESS.match(a) for a in actions), (rid, s)
    roles = _resources(templates[CP], "AWS::IAM::Role")
    assert not any(r["Properties"].get("ManagedPolicyArns") for r in roles.values())


def test_only_pool_functions_scale_node_groups_and_only_the_configured_ones(templates):
    scaling = {rid.split("Role")[0] for rid, s in _statements(templates[CP])
               if "eks:UpdateNodegroupConfig" in _as_list(s["Action"])}
    assert scaling == {"Pools", "Teardown", "Sweep"}
    for _rid, s in _statements(templates[CP]):
        if "eks:UpdateNodegroupConfig" in _as_list(s["Action"]):
            text = json.dumps(s["Resource"])
            for ng in CONTEXT["benchctl:nodegroups"]:
                assert f"nodegroup/{CONTEXT['benchctl:cluster_name']}/{ng}/*" in text
    athena = {rid.split("Role")[0] for rid, s in _statements(templates[CP])
              if any(a.startswith("athena:") for a in _as_list(s["Action"]))}
    assert athena == {"Report"}


def test_pool_locks_table_and_who_may_take_or_release_a_lock(templates):
    cp = templates[CP]
    table = _one(cp, "AWS::DynamoDB::Table")
    assert table["KeySchema"] == [{"AttributeName": "pool", "KeyType": "HASH"}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    puts = {rid.split("Role")[0] for rid, s in _statements(cp) if "dynamodb:PutItem" in _as_list(s["Action"])}
    deletes = {rid.split("Role")[0] for rid, s in _statements(cp) if "dynamodb:DeleteItem" in _as_list(s["Action"])}
    assert puts == {"Plan"} and deletes == {"Plan", "Teardown", "Report", "Sweep"}
    for fn in _resources(cp, "AWS::Lambda::Function").values():
        assert "BENCHCTL_LOCK_TABLE" in fn["Properties"]["Environment"]["Variables"]


def test_load_jobs_may_only_touch_the_raw_prefix_through_pod_identity(templates):
    cp = templates[CP]
    assoc = _one(cp, "AWS::EKS::PodIdentityAssociation")
    assert (assoc["ClusterName"], assoc["Namespace"], assoc["ServiceAccount"]) == (
        CONTEXT["benchctl:cluster_name"], CONTEXT["benchctl:namespace"], CONTEXT["benchctl:load_service_account"])
    role_id = assoc["RoleArn"]["Fn::GetAtt"][0]
    trust = cp["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert {p for st in trust for p in _as_list(st["Principal"]["Service"])} == {"pods.eks.amazonaws.com"}
    stmts = [st for rid, st in _statements(cp) if rid.startswith("LoadJobRole")]
    assert {a for st in stmts for a in _as_list(st["Action"])} == {"s3:PutObject", "s3:GetObject"}
    assert all("/lake/raw/*" in json.dumps(st["Resource"]) for st in stmts)


# --------------------------------------------------------------------------------------- nag, cfn-lint


def test_cdk_nag_reports_no_unsuppressed_error_and_every_suppression_has_a_reason(templates):
    out = Path(templates["_out"]["dir"])
    for name in (RS, CP):
        meta = json.loads((out / f"{name}.metadata.json").read_text())
        errors = [e["data"] for entries in meta.values() for e in entries
                  if e["type"] == "aws:cdk:error" and "AwsSolutions-" in str(e["data"])]
        assert errors == [], errors
        (report_file,) = out.glob(f"AwsSolutions-*{name}-NagReport.csv")
        report = report_file.read_text()
        assert "Compliant" in report  # the pack ran
        assert "Non-Compliant" not in report
        for r in templates[name]["Resources"].values():
            for sup in r.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", []):
                assert len(sup["reason"]) >= 30, sup


def test_cfn_lint_passes(templates):
    out = Path(templates["_out"]["dir"])
    files = [str(out / f"{n}.template.json") for n in (RS, CP)]
    # W3005: CDK writes DependsOn next to GetAtt for role policies; W3045: the access-log bucket's
    # LogDeliveryWrite ACL, which S3 server access logging requires
    cfn_lint = str(Path(sys.executable).parent / "cfn-lint")
    res = subprocess.run([cfn_lint, "--ignore-checks", "W3005", "W3045", "--", *files],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr


# ------------------------------------------------------------------------------------------ bad context


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"benchctl:cluster_name": None}, "missing CDK context 'benchctl:cluster_name' (an EKS cluster name): set it "
                                          "in cdk.json under \"context\" or pass -c benchctl:cluster_name="),
        ({"benchctl:schedule": {"expression": "every sunday", "spec_key": "specs/x.yaml"}},
         "CDK context 'benchctl:schedule.expression': 'every sunday' is not an EventBridge Scheduler expression"),
        ({"benchctl:schedule": {"expression": "rate(1 day)", "spec_key": "s3://elsewhere/x.yaml"}},
         "CDK context 'benchctl:schedule.spec_key'"),
        ({"benchctl:sdk_pandas_layer_arn": "AWSSDKPandas"},
         "CDK context 'benchctl:sdk_pandas_layer_arn': 'AWSSDKPandas' is not a Lambda layer version ARN"),
    ],
)
def test_bad_context_fails_synth_naming_the_key(tmp_path, change, expected):
    res = synth(tmp_path, {**CONTEXT, **change})
    assert res.returncode == 2
    assert expected in res.stderr
    assert not list(tmp_path.glob("*.template.json"))
