"""CDK synthesis, offline and without Docker: the templates of the shared synths (tests/infra/conftest.py).

The default configuration is cdk.json's; the "full" one adds a schedule, a notification e-mail and a
VPC placement (all off unless set) so that their resources can be checked too.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchctl.analysis.views import view_sql_files
from benchctl.constants import RUNNER_INPUTS_LISTING
from benchctl.lake import schema
from lambdas import FUNCTIONS
from tests.infra.cfn_resolve import Resolver
from tests.infra.conftest import CONTEXT, CP, FULL, ROOT, RS, load_templates, synth

pytestmark = pytest.mark.infra


def _load(out: Path) -> dict[str, dict[str, Any]]:
    return load_templates(out)


def _resources(t: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in t["Resources"].items() if v["Type"] == kind}


def _one(t: dict[str, Any], kind: str) -> dict[str, Any]:
    (r,) = _resources(t, kind).values()
    return r["Properties"]





# ------------------------------------------------------------------------------------- state machine


def _campaign_machine(cp: dict[str, Any]) -> dict[str, Any]:
    """The campaign state machine's properties (beside it: the stopped-campaign state machine)."""
    (props,) = [r["Properties"] for k, r in _resources(cp, "AWS::StepFunctions::StateMachine").items()
                if k.startswith("Campaign")]
    return props


def test_state_machine_is_the_asl_file_with_substitutions(templates):
    cp = templates[CP]
    props = _campaign_machine(cp)
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
    # every event, without inputs and outputs: an AwaitLoadEnd's input holds the task token that answers it
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    # the 48 h timeout is in the definition itself (CDK applies timeout= only to chain definitions)
    assert json.loads(text)["TimeoutSeconds"] == 48 * 3600 and "TimeoutSeconds" not in props
    # logs under /aws/vendedlogs/states/ (no log resource policy per group), named apart per stack instance
    (group,) = [r["Properties"] for k, r in _resources(cp, "AWS::Logs::LogGroup").items() if k.startswith("CampaignLogs")]
    name = json.dumps(group["LogGroupName"])
    assert '"/aws/vendedlogs/states/benchctl-dev-campaign-"' in name and "AWS::StackId" in name


def test_functions_run_python313_with_layers_resolved_for_the_deploy_region(templates):
    from stacks import layers
    from tests.infra.cfn_resolve import Resolver

    cp = templates[CP]
    deps = next(k for k in _resources(cp, "AWS::Lambda::LayerVersion") if k.startswith("Deps"))
    assert _one(cp, "AWS::Lambda::LayerVersion")["CompatibleRuntimes"] == ["python3.13"]
    for fn in _resources(cp, "AWS::Lambda::Function").values():
        p = fn["Properties"]
        assert p["TracingConfig"] == {"Mode": "Active"} and p["Runtime"] == "python3.13"
        assert p["Environment"]["Variables"]["BENCHCTL_CLUSTER"] == CONTEXT["benchctl:cluster_name"]
        powertools, pandas, ours = p["Layers"]  # our layer last: its boto3 overwrites nothing of theirs but wins
        assert ours == {"Ref": deps}
        for region in ("us-east-1", "eu-central-2", "me-central-1"):  # resolved per Region, as CloudFormation would
            r = Resolver({CP: cp}, region=region)
            assert r.resolve(powertools, CP) == layers.powertools_layer_arn("aws", region)
            assert r.resolve(pandas, CP) == layers.SDK_PANDAS_LAYER_ARNS[region]
    assert cp["Mappings"]["SdkPandasLayer"] == {k: {"arn": v} for k, v in layers.SDK_PANDAS_LAYER_ARNS.items()}
    # any other Region stops the deployment before anything is created, naming the Regions that work
    (assertion,) = cp["Rules"]["LayerRegions"]["Assertions"]
    assert assertion["Assert"] == {"Fn::Contains": [layers.regions(), {"Ref": "AWS::Region"}]}
    assert "us-east-1" in assertion["AssertDescription"] and "benchctl:sdk_pandas_layer_arn" in assertion["AssertDescription"]


def test_a_given_layer_arn_must_be_for_the_runtime_and_is_checked_against_the_deploy_region(tmp_path):
    arn = "arn:aws:lambda:eu-west-1:336392948345:layer:AWSSDKPandas-Python313:12"  # 3.16.1's
    res = synth(tmp_path, {**CONTEXT, "benchctl:sdk_pandas_layer_arn": arn})
    assert res.returncode == 0, res.stderr
    cp = load_templates(tmp_path)[CP]
    assert "SdkPandasLayer" not in cp.get("Mappings", {})
    (rule,) = [r for k, r in cp["Rules"].items() if k.startswith("LayerRegion") and k != "LayerRegions"]
    assert rule["Assertions"][0]["Assert"] == {"Fn::Equals": [{"Ref": "AWS::Region"}, "eu-west-1"]}
    assert arn in json.dumps(_resources(cp, "AWS::Lambda::Function"))


def test_synth_refuses_a_known_bad_pandas_layer_naming_why(tmp_path):
    """A layer version known to crash every lake write (AWS SDK for pandas 3.17.0) stops synth, before any
    deployment, naming the upstream issue and the pinned alternative."""
    arn = "arn:aws:lambda:eu-west-1:336392948345:layer:AWSSDKPandas-Python313:14"  # 3.17.0's
    res = synth(tmp_path, {**CONTEXT, "benchctl:sdk_pandas_layer_arn": arn})
    assert res.returncode != 0
    assert "benchctl:sdk_pandas_layer_arn" in res.stderr and "known-bad" in res.stderr, res.stderr[-2000:]
    assert "aws/aws-sdk-pandas#3393" in res.stderr and "3.16.0" in res.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_code_asset_is_the_code_alone_and_its_hash_ignores_the_rest_of_the_work_tree(default_out, tmp_path):
    import shutil

    import aws_cdk as cdk

    from stacks.control_plane import ASSET_EXCLUDES

    assets = json.loads((default_out / "benchctl-dev-control-plane.assets.json").read_text())["files"]
    dirs = [default_out / a["source"]["path"] for a in assets.values() if a["source"].get("packaging") == "zip"]
    code = next(d for d in dirs if (d / "lambdas").is_dir())
    shipped = {str(p.relative_to(code)) for p in code.rglob("*") if p.is_file()}
    assert {s.split("/")[0] for s in shipped} == {"benchctl", "lambdas", "state_machines", "sql"}
    assert "benchctl/campaign/__init__.py" in shipped and "state_machines/campaign.asl.json" in shipped
    assert "sql/views/v_pareto.sql" in shipped  # the Report function creates the views from these files
    assert not any(s.startswith("benchctl/local/") or "__pycache__" in s or s.endswith(".pyc") for s in shipped)
    # our layer (no Docker involved): exactly the pinned PyYAML and SDK of requirements-layer.txt, and it is
    # the asset the functions' own LayerVersion ships
    (layer,) = [d for d in dirs if (d / "python").is_dir() and d != code]
    dists = {p.name.lower() for p in (layer / "python").glob("*.dist-info")}
    pins = [line.split("==") for line in (ROOT / "requirements-layer.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    assert pins and all(f"{name.lower()}-{version}.dist-info" in dists for name, version in pins), (pins, dists)
    (deps,) = [r for k, r in _resources(load_templates(default_out)[CP], "AWS::Lambda::LayerVersion").items()
               if k.startswith("Deps")]
    assert layer.name in json.dumps(deps) or layer.name.removeprefix("asset.") in json.dumps(deps)
    # what a test run or an editable install leaves in the tree does not change the asset's hash
    fingerprint = cdk.FileSystem.fingerprint(str(ROOT), exclude=ASSET_EXCLUDES, ignore_mode=cdk.IgnoreMode.GLOB)
    assert code.name == f"asset.{fingerprint}"
    junk = [ROOT / ".hypothesis" / "examples" / "benchctl-junk", ROOT / "benchctl.egg-info" / "benchctl-junk",
            ROOT / "dashboards" / "benchctl-junk.json", ROOT / "benchctl" / "__pycache__" / "benchctl-junk.pyc"]
    made = []
    try:
        for j in junk:
            if not j.parent.exists():
                made.append(j.parent)
            j.parent.mkdir(parents=True, exist_ok=True)
            j.write_text("junk")
        assert cdk.FileSystem.fingerprint(str(ROOT), exclude=ASSET_EXCLUDES,
                                          ignore_mode=cdk.IgnoreMode.GLOB) == fingerprint
    finally:
        for j in junk:
            j.unlink(missing_ok=True)
        for d in made:
            shutil.rmtree(d, ignore_errors=True)


def test_the_load_image_is_built_from_the_repo_with_aiperf_0_13_0_and_given_to_every_function(default_out):
    # Given synth without Docker: the image is an asset (built and pushed by `cdk deploy`), its folder copied
    assets = json.loads((default_out / "benchctl-dev-control-plane.assets.json").read_text())["dockerImages"]
    (image,) = assets.values()
    assert image["source"]["platform"] == "linux/amd64"
    dockerfile = (default_out / image["source"]["directory"] / "Dockerfile").read_text()
    assert dockerfile == (ROOT / "stacks" / "images" / "load" / "Dockerfile").read_text()
    from benchctl.planning.aiperf_args import AIPERF_VERSION

    assert f"ARG AIPERF_VERSION={AIPERF_VERSION}" in dockerfile
    # the build gets the deployment's base (a tag alone is refused by the build unless accepted explicitly) and
    # the hash-pinned requirements beside the Dockerfile (tests/unit/test_load_image.py holds both)
    assert image["source"]["dockerBuildArgs"] == {"BASE_IMAGE": "python:3.11-slim-bookworm", "ALLOW_TAG_BASE": "0"}
    folder = default_out / image["source"]["directory"]
    for name in ("requirements.txt", "check_base.sh"):
        assert (folder / name).read_text() == (ROOT / "stacks" / "images" / "load" / name).read_text()
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
    # an overwritten or deleted object's old version (raw evidence's too) is kept a year; no shorter rule overlaps
    assert rules["expire-old-versions"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 365}
    assert "Prefix" not in rules["expire-old-versions"]
    assert [r["Id"] for r in rules.values() if "NoncurrentVersionExpiration" in r] == ["expire-old-versions"]
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
    # deleted with the stack (results stay in the retained bucket), so a redeploy after a destroy can create it
    (wg_res,) = _resources(rs, "AWS::Athena::WorkGroup").values()
    assert wg_res.get("DeletionPolicy", "Delete") == "Delete" and wg["RecursiveDeleteOption"] is True
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
    assert target["Arn"] == {"Ref": next(k for k in _resources(templates[CP], "AWS::StepFunctions::StateMachine")
                                         if k.startswith("Campaign"))}
    assert "specs/seed-plan.yaml" in json.dumps(target["Input"])
    role = next(r for k, r in _resources(templates[CP], "AWS::IAM::Policy").items() if k.startswith("ScheduleRole"))
    (stmt,) = role["Properties"]["PolicyDocument"]["Statement"]
    assert stmt["Action"] == "states:StartExecution" and "Ref" in stmt["Resource"]
    # the schedule is in a group of its own, and only EventBridge Scheduler of this account's schedules in that
    # group may assume the role (confused deputy; not the account's shared "default" group)
    assert not _resources(_load(default_out)[CP], "AWS::Scheduler::ScheduleGroup")
    group = _one(templates[CP], "AWS::Scheduler::ScheduleGroup")["Name"]
    assert group == "benchctl-dev-campaign" and s["GroupName"] == group
    trust = next(r for k, r in _resources(templates[CP], "AWS::IAM::Role").items() if k.startswith("ScheduleRole"))
    (tst,) = trust["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert tst["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert tst["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    source = Resolver({k: v for k, v in templates.items() if not k.startswith("_")}).resolve(
        tst["Condition"]["ArnEquals"]["aws:SourceArn"], CP)
    assert source.endswith(f":schedule-group/{group}") and "default" not in source


def test_the_sweeper_runs_on_a_schedule_and_may_only_read_executions(templates):
    cp = templates[CP]
    rule = next(r["Properties"] for k, r in _resources(cp, "AWS::Events::Rule").items() if k.startswith("SweepSchedule"))
    assert rule["ScheduleExpression"] == CONTEXT["benchctl:sweep_schedule"]
    actions = {a for rid, s in _statements(cp) if rid.startswith("SweepRole") for a in _as_list(s["Action"])}
    assert "states:DescribeExecution" in actions and not any(a.startswith("states:Start") for a in actions)
    assert "dynamodb:PutItem" not in actions  # it releases locks, never takes them


def test_a_failing_sweep_raises_an_alarm_on_the_status_topic(templates):
    cp = templates[CP]
    (alarm,) = [r["Properties"] for r in _resources(cp, "AWS::CloudWatch::Alarm").values()
                if r["Properties"]["AlarmName"] == "benchctl-dev-sweep-failed"]  # the stop path's: test_stop_path_synth
    sweeper = next(k for k, r in _resources(cp, "AWS::Lambda::Function").items()
                   if r["Properties"]["Handler"] == "lambdas.sweep.handler")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == ("AWS/Lambda", "Errors", "Sum")
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": sweeper}}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"], alarm["EvaluationPeriods"]) == (
        1, "GreaterThanOrEqualToThreshold", 1)
    topic_id = next(iter(_resources(cp, "AWS::SNS::Topic")))
    assert alarm["AlarmActions"] == [{"Ref": topic_id}]
    # CloudWatch may publish (and use the topic's key) for this alarm of this account only
    assert alarm["AlarmName"] == "benchctl-dev-sweep-failed"
    (pub,) = [st for st in _one(cp, "AWS::SNS::TopicPolicy")["PolicyDocument"]["Statement"]
              if st.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} and "sweep-failed" in json.dumps(st)]
    source = Resolver({k: v for k, v in templates.items() if not k.startswith("_")}).resolve(
        pub["Condition"]["ArnLike"]["aws:SourceArn"], CP)
    assert pub["Action"] == "sns:Publish" and re.fullmatch(r"arn:aws:cloudwatch:[a-z0-9-]+:\d{12}:alarm:"
                                                           r"benchctl-dev-sweep-failed", source), source
    assert pub["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    (kst,) = [st for st in _one(cp, "AWS::KMS::Key")["KeyPolicy"]["Statement"]
              if st.get("Principal") == {"Service": "cloudwatch.amazonaws.com"} and "sweep-failed" in json.dumps(st)]
    assert kst["Condition"] == pub["Condition"]


def test_execution_status_rule_notifies_an_encrypted_topic(templates):
    cp = templates[CP]
    rule = next(r["Properties"] for k, r in _resources(cp, "AWS::Events::Rule").items()
                if k.startswith("CampaignStatusRule"))
    pattern = rule["EventPattern"]
    assert pattern["source"] == ["aws.states"]
    assert pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert set(pattern["detail"]["status"]) == {"SUCCEEDED", "FAILED"}  # a stopped one: the stopped-campaign machine
    topic_id = next(iter(_resources(cp, "AWS::SNS::Topic")))
    assert rule["Targets"][0]["Arn"] == {"Ref": topic_id}
    message = json.dumps(rule["Targets"][0]["InputTransformer"])
    assert "/reports/<detail-name>/report.html" in message  # the notification links the campaign's report
    assert "KmsMasterKeyId" in _one(cp, "AWS::SNS::Topic")
    assert _one(cp, "AWS::SNS::Subscription")["Endpoint"] == "bench-team@example.com"
    # only this rule of this account may publish, and use the topic's key (aws:SourceArn/SourceAccount)
    rule_arn = "rule/benchctl-dev-campaign-status"
    assert rule["Name"] == "benchctl-dev-campaign-status"
    (pub,) = [st for st in _one(cp, "AWS::SNS::TopicPolicy")["PolicyDocument"]["Statement"]
              if st["Effect"] == "Allow" and st["Principal"] == {"Service": "events.amazonaws.com"}
              and rule_arn in json.dumps(st)]  # the stop path's own rule: test_stop_path_synth
    assert pub["Principal"] == {"Service": "events.amazonaws.com"} and pub["Action"] == "sns:Publish"
    assert rule_arn in json.dumps(pub["Condition"]["ArnEquals"]["aws:SourceArn"])
    key = _one(cp, "AWS::KMS::Key")["KeyPolicy"]["Statement"]
    events_stmts = [s for s in key if s.get("Principal") == {"Service": "events.amazonaws.com"}
                    and "stopped-campaign-status" not in json.dumps(s)]  # that rule's: test_stop_path_synth
    assert len(events_stmts) == 1 and rule_arn in json.dumps(events_stmts[0]["Condition"])
    assert events_stmts[0]["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}


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
# X-Ray segments, the Price List, the CloudWatch Logs vended-log delivery Step Functions logging uses, and the
# answers to a task token (the token names the task).
RESOURCELESS = re.compile(r"^(xray:Put\w+|xray:GetSampling\w+|logs:\w*LogDeliver\w*|"
                          r"logs:PutResourcePolicy|logs:DescribeResourcePolicies|logs:DescribeLogGroups|"
                          r"states:SendTask(Success|Heartbeat|Failure)|"
                          # the preflight's quota and capacity reads (stacks/control_plane.py QUOTA_ACTIONS)
                          r"servicequotas:Get(AWSDefault)?ServiceQuota|"
                          r"ec2:Describe(InstanceTypes|Instances|CapacityReservations|LaunchTemplateVersions|InstanceTypeOfferings|"
                          r"Subnets))$")


def test_the_quota_reads_really_support_no_resource_level_permissions():
    """The preflight's reads (QUOTA_ACTIONS), held to the service authorization reference as parliament 1.6.4
    ships it: none names a resource type, so Resource "*" is the only grant IAM accepts for them."""
    import parliament

    from stacks.function_needs import QUOTA_ACTIONS

    defs = json.loads((Path(parliament.__file__).parent / "iam_definition.json").read_text())
    for action in QUOTA_ACTIONS:
        prefix, name = action.split(":")
        service = next(s for s in defs if s["prefix"] == prefix)
        (priv,) = [p for p in service["privileges"] if p["privilege"] == name]
        assert [r["resource_type"] for r in priv["resource_types"]] == [""], action
        assert RESOURCELESS.match(action), action


def test_the_task_token_answers_really_support_no_resource_level_permissions():
    """Held to the service authorization reference as parliament 1.6.4 ships it: SendTask* name no
    resource type, so Resource "*" is the only grant IAM accepts for them."""
    import parliament

    defs = json.loads((Path(parliament.__file__).parent / "iam_definition.json").read_text())
    states = next(s for s in defs if s["prefix"] == "states")
    for action in ("SendTaskSuccess", "SendTaskHeartbeat", "SendTaskFailure"):
        (priv,) = [p for p in states["privileges"] if p["privilege"] == action]
        assert [r["resource_type"] for r in priv["resource_types"]] == [""], action


def test_no_wildcard_action_on_wildcard_resource(templates, default_templates):
    for name in (RS, CP):
        for rid, s in _statements(templates[name]):
            actions = _as_list(s["Action"])
            resources = _as_list(s.get("Resource", []))
            assert not any(a == "*" or a.endswith(":*") for a in actions), (rid, s)
            if "*" in resources:
                assert all(RESOURCELESS.match(a) for a in actions), (rid, s)
    # no managed policy, except the one Lambda needs in a VPC, on the functions placed there
    vpc_policy = "service-role/AWSLambdaVPCAccessExecutionRole"
    for tmpl, in_vpc in ((default_templates[CP], False), (templates[CP], True)):
        for rid, r in _resources(tmpl, "AWS::IAM::Role").items():
            managed = json.dumps(r["Properties"].get("ManagedPolicyArns", []))
            k8s = rid.split("Role")[0] in {"Plan", "Pools", "Serving", "Load", "Teardown", "Sweep"}
            assert (vpc_policy in managed) == (in_vpc and k8s), rid
            assert managed.count("arn:") == (1 if in_vpc and k8s else 0), (rid, managed)


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
    assert puts == {"Plan", "Teardown"} and deletes  # Teardown: the stopped-campaign machine's second pass == {"Plan", "Teardown", "Report", "Sweep"}
    for fn in _resources(cp, "AWS::Lambda::Function").values():
        assert "BENCHCTL_LOCK_TABLE" in fn["Properties"]["Environment"]["Variables"]


def test_load_jobs_reach_only_their_own_campaigns_keys_through_pod_identity(templates):
    """The load Job role: no association of its own in the template (each campaign makes one for its own service
    account: benchctl.aws.runner_identity); trusted only by EKS Pod Identity of this account, cluster and
    namespace; every object it names is the session's service account's (the campaign id): the raw area's
    objects and inputs listing, the hand-over's reads, and only end records for writing."""
    cp = templates[CP]
    resolve = Resolver({k: v for k, v in templates.items() if not k.startswith("_")})
    assert not [r for r in cp["Resources"].values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"]
    (role_id,) = [rid for rid, r in cp["Resources"].items() if r["Type"] == "AWS::IAM::Role"
                  and "pods.eks.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])]
    trust = resolve.resolve(cp["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"], CP)["Statement"]
    cluster_arn = f"arn:aws:eks:us-east-1:123456789012:cluster/{CONTEXT['benchctl:cluster_name']}"
    assert sorted(a for st in trust for a in _as_list(st["Action"])) == ["sts:AssumeRole", "sts:TagSession"]
    for st in trust:
        assert _as_list(st["Principal"]["Service"]) == ["pods.eks.amazonaws.com"]
        assert st["Condition"] == {"StringEquals": {
            "aws:SourceAccount": "123456789012", "aws:RequestTag/eks-cluster-arn": cluster_arn,
            "aws:RequestTag/kubernetes-namespace": CONTEXT["benchctl:namespace"]}}
    sa = "${aws:PrincipalTag/kubernetes-service-account}"
    stmts = [resolve.resolve(st, CP) for rid, st in _statements(cp) if rid.startswith("LoadJobRole")]
    answers = {"states:SendTaskHeartbeat", "states:SendTaskSuccess", "states:SendTaskFailure"}
    grants = {(tuple(sorted(_as_list(st["Action"]))), json.dumps(st["Resource"]), json.dumps(st.get("Condition")))
              for st in stmts}
    bucket = next(st["Resource"] for st in stmts if _as_list(st["Action"]) == ["s3:ListBucket"])
    assert re.fullmatch(r"arn:aws:s3:::[a-z0-9.-]+", bucket), bucket
    assert grants == {
        (("s3:GetObject", "s3:PutObject"), json.dumps(f"{bucket}/lake/raw/campaign_id={sa}/*"), "null"),
        (("s3:ListBucket",), json.dumps(bucket), json.dumps({"StringLike": {"s3:prefix": [
            RUNNER_INPUTS_LISTING.replace("campaign_id=*", f"campaign_id={sa}")]}})),
        (("s3:GetObject",), json.dumps(f"{bucket}/runner/{sa}/*"), "null"),
        (("s3:PutObject",), json.dumps(f"{bucket}/runner/{sa}/*/end.json"), "null"),
        (tuple(sorted(answers)), json.dumps("*"), "null")}
    # of the functions, only Load answers task tokens (AwaitLoadEnd, when the step already ended)
    answering = {rid.split("Role")[0] for rid, s in _statements(cp) if "states:SendTaskSuccess" in _as_list(s["Action"])}
    assert answering == {"Load", "LoadJob"}
    # only Plan and Load (the doctor) make a campaign's association, passing this role and no other
    passing = {rid.split("Role")[0]: resolve.resolve(s["Resource"], CP) for rid, s in _statements(cp)
               if "iam:PassRole" in _as_list(s["Action"])}
    assert set(passing) == {"Plan", "Load"}
    assert all(r == resolve.resolve({"Fn::GetAtt": [role_id, "Arn"]}, CP) for r in passing.values())


def test_no_function_may_delete_an_object(templates, default_templates):
    for t in (templates[CP], default_templates[CP]):
        deleting = {(rid, a) for rid, st in _statements(t) for a in _as_list(st["Action"])
                    if st.get("Effect", "Allow") == "Allow" and re.match(r"s3:(\*|Delete)", a)}
        assert deleting == set()


def test_ingest_writes_only_lake_tables_and_the_load_and_failure_records(templates):
    resolve = Resolver({k: v for k, v in templates.items() if not k.startswith("_")}).resolve
    acts = _actions_of(templates[CP], "Ingest")
    puts = {resolve(r, CP).split(":::", 1)[1].split("/", 1)[1] for res, _ in acts["s3:PutObject"] for r in _as_list(res)}
    assert puts == {*(f"lake/{t}/*" for t in schema.table_names()), "runs/*/loads/*", "runs/*/failure.json",
                    "runs/_doctor/Ingest/*"}  # `benchctl doctor`'s probe (no campaign id starts with "_")
    assert "lake/raw/*" not in puts and "raw" not in schema.table_names()  # raw evidence is the load pods'
    gets = {resolve(r, CP).split("/", 1)[1] for res, _ in acts["s3:GetObject"] for r in _as_list(res)}
    assert gets == {"lake/*", "runs/*"}
    # every other function still writes the whole lake and run store (Plan its claim, pools their records)
    plan_puts = {resolve(r, CP).split("/", 1)[1] for res, _ in _actions_of(templates[CP], "Plan")["s3:PutObject"]
                 for r in _as_list(res)}
    assert {"lake/*", "runs/*"} <= plan_puts


def _actions_of(t: dict[str, Any], role: str) -> dict[str, list[Any]]:
    """action -> the statements' resources (and conditions) granting it, for one role."""
    out: dict[str, list[Any]] = {}
    for rid, s in _statements(t):
        if rid.startswith(role + "Role"):
            for a in _as_list(s["Action"]):
                out.setdefault(a, []).append((s.get("Resource"), s.get("Condition")))
    return out


def test_iam_grants_what_the_service_authorization_reference_requires(templates):
    cp = templates[CP]
    cluster = f"cluster/{CONTEXT['benchctl:cluster_name']}"
    for role in ("Pools", "Teardown", "Sweep"):  # DescribeUpdate is authorized on the cluster ARN
        (res, _), = _actions_of(cp, role)["eks:DescribeUpdate"]
        assert cluster in json.dumps(res), role
    assert not any(a.startswith("pricing:") for _, s in _statements(cp) for a in _as_list(s["Action"]))
    plan = _actions_of(cp, "Plan")
    # a mistyped spec_uri then reads as "no such spec" (S3 answers 404, not 403, to who may list)
    assert any("specs/" in json.dumps(c) for _, c in plan["s3:ListBucket"])
    assert "eks-pod-identity-agent" in json.dumps(plan["eks:DescribeAddon"])  # the preflight's add-on check
    report = _actions_of(cp, "Report")
    for action in ("s3:ListBucket", "s3:ListBucketMultipartUploads", "s3:ListMultipartUploadParts",
                   "s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:GetBucketLocation"):
        assert action in report, action  # what Athena needs on the query result location
    assert any("athena-results/" in json.dumps(c) for _, c in report["s3:ListBucket"])


K8S_ROLES = {"Plan", "Pools", "Serving", "Load", "Teardown", "Sweep"}


def test_access_entries_put_each_role_that_calls_kubernetes_in_its_own_rbac_group(templates):
    import yaml

    cp = templates[CP]
    rbac = list(yaml.safe_load_all((ROOT / "stacks" / "kubernetes" / "benchctl-rbac.yaml").read_text()))
    bound = {s["name"] for d in rbac if d and d["kind"].endswith("Binding") for s in d["subjects"] if s["kind"] == "Group"}
    entries = _resources(cp, "AWS::EKS::AccessEntry")
    by_role = {e["Properties"]["PrincipalArn"]["Fn::GetAtt"][0].split("Role")[0]: e["Properties"]
               for e in entries.values()}
    assert set(by_role) == K8S_ROLES and len(entries) == len(K8S_ROLES)
    # one group each, bound by the RBAC file, no two roles sharing one
    assert {role: p["KubernetesGroups"] for role, p in by_role.items()} == {
        role: [f"benchctl-{role.lower()}"] for role in K8S_ROLES}
    assert {g for p in by_role.values() for g in p["KubernetesGroups"]} == bound
    for p in by_role.values():
        assert p["ClusterName"] == CONTEXT["benchctl:cluster_name"]
        assert p["Type"] == "STANDARD" and "AccessPolicies" not in p  # rights: the RBAC file's roles only
    # every role's ARN is an output (for access entries made by hand, or other tools)
    roles = {k.split("Role")[0] for k in _resources(cp, "AWS::IAM::Role") if k.split("Role")[0] in {*K8S_ROLES, "Ingest", "Report"}}
    assert {k.removesuffix("RoleArn") for k in cp["Outputs"] if k.endswith("RoleArn")} == roles


def test_access_entries_can_be_left_to_the_cluster_admin(tmp_path):
    res = synth(tmp_path, {**CONTEXT, "benchctl:create_access_entries": "false"})  # as -c passes it: text
    assert res.returncode == 0, res.stderr
    assert not _resources(load_templates(tmp_path)[CP], "AWS::EKS::AccessEntry")


def test_vpc_placement_puts_exactly_the_kubernetes_callers_in_the_given_subnets(templates, default_templates):
    cp = templates[CP]
    sg = next(iter(_resources(cp, "AWS::EC2::SecurityGroup")))
    for rid, fn in _resources(cp, "AWS::Lambda::Function").items():
        vpc = fn["Properties"].get("VpcConfig")
        if rid.split("Function")[0] in K8S_ROLES:
            assert vpc["SubnetIds"] == FULL["benchctl:subnet_ids"], rid
            assert vpc["SecurityGroupIds"] == [{"Fn::GetAtt": [sg, "GroupId"]}], rid
        else:
            assert vpc is None, rid
    assert _one(cp, "AWS::EC2::SecurityGroup")["VpcId"] == FULL["benchctl:vpc_id"]
    assert "FunctionsSecurityGroupId" in cp["Outputs"]
    assert not any("VpcConfig" in f["Properties"] for f in _resources(default_templates[CP], "AWS::Lambda::Function").values())


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
         "CDK context 'benchctl:sdk_pandas_layer_arn': 'AWSSDKPandas' is not valid; valid: an AWS SDK for pandas "
         "Python313 layer version ARN"),
        ({"benchctl:sdk_pandas_layer_arn": "arn:aws:lambda:us-east-1:336392948345:layer:AWSSDKPandas-Python311:20"},
         "is not a layer for the functions' runtime python3.13 x86_64"),
        ({"benchctl:raw_archive_dayz": 30}, "unknown CDK context key(s) ['benchctl:raw_archive_dayz']; valid keys: "
                                            "benchctl:env_name, "),
        ({"benchctl:raw_archive_days": 0}, "CDK context 'benchctl:raw_archive_days': 0 is not valid; valid: an "
                                           "integer 1..36500"),
        ({"benchctl:raw_archive_days": "ninety"}, "'benchctl:raw_archive_days': 'ninety' is not valid"),
        ({"benchctl:athena_bytes_scanned_cutoff": "1024"}, "'benchctl:athena_bytes_scanned_cutoff': 1024 is not "
                                                           "valid; valid: an integer 10485760..1099511627776"),
        ({"benchctl:vpc_id": "vpc-0123456789abcdef0"}, "'benchctl:vpc_id' and 'benchctl:subnet_ids' go together"),
        ({"benchctl:create_access_entries": "maybe"}, "'benchctl:create_access_entries': 'maybe' is not valid"),
        ({"benchctl:load_base_image": "python:3.11 ; curl x"}, "'benchctl:load_base_image': 'python:3.11 ; curl x' "
                                                               "is not valid; valid: the base image"),
        ({"benchctl:load_base_image_tag_ok": "yes"}, "'benchctl:load_base_image_tag_ok': 'yes' is not valid"),
    ],
)
def test_bad_context_fails_synth_naming_the_key(tmp_path, change, expected):
    res = synth(tmp_path, {**CONTEXT, **change})
    assert res.returncode == 2
    assert expected in res.stderr
    assert not list(tmp_path.glob("*.template.json"))


def test_a_prebuilt_load_image_needs_no_docker_at_deploy(tmp_path):
    """benchctl:load_image: the stack uses that image and builds none (no Docker on the deploying machine)."""
    from tests.infra.conftest import CONTEXT, synth

    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/benchctl-load:0.13.0"
    res = synth(tmp_path, {**CONTEXT, "benchctl:load_image": image})
    assert res.returncode == 0, res.stderr
    assert not json.loads((tmp_path / "benchctl-dev-control-plane.assets.json").read_text()).get("dockerImages")
    template = json.loads((tmp_path / "benchctl-dev-control-plane.template.json").read_text())
    for fn in _resources(template, "AWS::Lambda::Function").values():
        assert fn["Properties"]["Environment"]["Variables"]["BENCHCTL_LOAD_IMAGE"] == image
    bad = synth(tmp_path / "bad", {**CONTEXT, "benchctl:load_image": "python"})
    assert bad.returncode != 0 and "benchctl:load_image" in bad.stderr and "tag or digest" in bad.stderr


def test_every_function_gets_exactly_the_variables_of_the_lambda_env_model_and_each_is_read(templates):
    """No variable set but never read, none read but never set: the stack sets ``LambdaEnv.to_env()`` (and
    what Lambda and Powertools read themselves), the runtime reads every field of the model."""
    import ast
    import dataclasses

    from benchctl.aws.env import VARIABLES, LambdaEnv
    from benchctl.planning.ceilings import ENV_VAR

    powertools_own = {"POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"}
    for name, fn in _resources(templates[CP], "AWS::Lambda::Function").items():
        got = set(fn["Properties"]["Environment"]["Variables"])
        ceilings = {ENV_VAR} if name.startswith(("PlanFunction", "PoolsFunction")) else set()  # read by from_env
        assert ceilings <= got, (name, got)
        assert got - powertools_own - ceilings == set(VARIABLES.values()), (name, got ^ set(VARIABLES.values()))
    # every field is read by the AWS engine or the runtime (log_level: by Powertools' Logger itself)
    read: set[str] = set()
    for path in [*(ROOT / "benchctl" / "aws").rglob("*.py"), *(ROOT / "lambdas").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in {
                    "env", "config", "self.env"}:
                read.add(node.attr)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "env":
                read.add(node.attr)
    fields = {f.name for f in dataclasses.fields(LambdaEnv)}
    assert fields - {"log_level"} <= read, f"fields never read: {sorted(fields - {'log_level'} - read)}"


def test_the_deployment_ceilings_are_recorded_on_the_plan_and_pools_functions_only(templates):
    """cdk.json's ``benchctl:ceilings``, exactly, on the two functions that refuse specs past them; what the
    runtime parses from that variable is the same ceilings the CLI reads from cdk.json."""
    from benchctl.planning import ceilings

    want = ceilings.from_context_file(ROOT / "cdk.json")
    seen = []
    for name, fn in _resources(templates[CP], "AWS::Lambda::Function").items():
        variables = fn["Properties"]["Environment"]["Variables"]
        if ceilings.ENV_VAR in variables:
            seen.append(name)
            assert ceilings.from_env(variables) == want
    assert sorted(n.split("Function")[0] for n in seen) == ["Plan", "Pools"]


def test_malformed_ceilings_stop_synth_naming_the_key(tmp_path):
    bad = synth(tmp_path / "bad", {**CONTEXT, "benchctl:ceilings": {"instance_types": {"p4d.24xlarge": 0}}})
    assert bad.returncode != 0 and "benchctl:ceilings" in bad.stderr and "instance_types" in bad.stderr


def test_a_stopped_execution_starts_the_stopped_campaign_machine_with_a_dead_letter_queue(templates):
    """Stop execution and the execution's timeout run no state of the campaign: a rule on exactly this state
    machine's ABORTED and TIMED_OUT events starts the stopped-campaign machine with the event (at once; a
    delivery that fails lands in an encrypted dead-letter queue), and that machine may invoke only the Teardown
    and Report functions and publish only to the status topic."""
    cp = templates[CP]
    machines = _resources(cp, "AWS::StepFunctions::StateMachine")
    campaign = next(k for k in machines if k.startswith("Campaign"))
    stopped = next(k for k in machines if k.startswith("StoppedCampaign"))
    rule = next(r["Properties"] for k, r in _resources(cp, "AWS::Events::Rule").items()
                if k.startswith("StoppedCampaignRule"))
    assert rule["EventPattern"] == {"source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"],
                                    "detail": {"stateMachineArn": [{"Ref": campaign}], "status": ["ABORTED", "TIMED_OUT", "FAILED"]}}
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Ref": stopped} and "Input" not in target and "InputTransformer" not in target
    dlq = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    queue = _resources(cp, "AWS::SQS::Queue")[dlq]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 8
    props = machines[stopped]["Properties"]
    asl = json.loads((ROOT / "state_machines" / "stopped.asl.json").read_text())
    assert json.loads(props["DefinitionString"]) == asl  # the very file
    subs = props["DefinitionSubstitutions"]
    assert set(subs) == {"TeardownFunctionArn", "ReportFunctionArn", "StatusTopicArn", "ReportsUri"}
    fns = _resources(cp, "AWS::Lambda::Function")
    assert {fns[subs[v]["Fn::GetAtt"][0]]["Properties"]["Handler"] for v in ("TeardownFunctionArn", "ReportFunctionArn")
            } == {"lambdas.teardown.handler", "lambdas.report.handler"}
    role = props["RoleArn"]["Fn::GetAtt"][0]
    policy = next(p["Properties"]["PolicyDocument"] for p in _resources(cp, "AWS::IAM::Policy").values()
                  if {"Ref": role} in p["Properties"]["Roles"])
    actions = {a for st in policy["Statement"] for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}
    assert {"lambda:InvokeFunction", "sns:Publish"} <= actions
    assert not {a for a in actions if a.startswith(("states:", "eks:", "s3:", "iam:"))}  # only through the functions
    assert props["TracingConfiguration"] == {"Enabled": True}


def test_the_stopped_campaign_roles_reach_exactly_the_teardown_and_report_functions_and_the_topic(templates):
    """IAM's decision (tests/fakes/moto_iam.evaluate) over the synthesized policies: the rule's role may start
    only the stopped-campaign machine (never the campaign machine: an event cannot start a campaign), and that
    machine's role may invoke only the Teardown and Report functions (any version) and publish only to the
    status topic."""
    from tests.fakes.moto_iam import evaluate, role_documents

    cp = templates[CP]
    r = Resolver({k: v for k, v in templates.items() if not k.startswith("_")})
    machines = _resources(cp, "AWS::StepFunctions::StateMachine")
    arn = {k: r.resolve({"Ref": k}, CP) for k in machines}
    stopped = next(k for k in machines if k.startswith("StoppedCampaign"))
    campaign = next(k for k in machines if k.startswith("Campaign"))
    rule = next(v["Properties"] for k, v in _resources(cp, "AWS::Events::Rule").items()
                if k.startswith("StoppedCampaignRule"))
    rule_role = rule["Targets"][0]["RoleArn"]["Fn::GetAtt"][0]
    docs = role_documents(templates, CP, rule_role)
    assert evaluate(docs, "states:StartExecution", arn[stopped], {}) == "Allow"
    assert evaluate(docs, "states:StartExecution", arn[campaign], {}) is None
    trust = cp["Resources"][rule_role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "events.amazonaws.com"}]
    docs = role_documents(templates, CP, machines[stopped]["Properties"]["RoleArn"]["Fn::GetAtt"][0])
    fns = {f["Properties"]["Handler"]: r.resolve({"Fn::GetAtt": [k, "Arn"]}, CP)
           for k, f in _resources(cp, "AWS::Lambda::Function").items()}
    for handler, fn in fns.items():
        want = "Allow" if handler in ("lambdas.teardown.handler", "lambdas.report.handler") else None
        assert evaluate(docs, "lambda:InvokeFunction", fn, {}) == want, handler
        assert evaluate(docs, "lambda:InvokeFunction", fn + ":7", {}) == want, handler
    topic = r.resolve({"Ref": next(iter(_resources(cp, "AWS::SNS::Topic")))}, CP)
    assert evaluate(docs, "sns:Publish", topic, {}) == "Allow"
    assert evaluate(docs, "sns:Publish", topic + "-other", {}) is None
    for action in ("s3:GetObject", "eks:UpdateNodegroupConfig", "states:StartExecution", "iam:PassRole"):
        assert evaluate(docs, action, "*", {}) is None, action
