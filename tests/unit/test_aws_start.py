"""AWS entry points under moto: `benchctl start`/`status`, and the Plan handler started without a ctx
(console, schedule) writing the run store and the lake on S3 like the local engine does locally."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws

from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.campaign.records import LoadRecord
from benchctl.campaign.runstate import RunState
from benchctl.cli.main import main
from tests import yaml_files
from tests.aws_checks import RBAC_FILE
from tests.fakes.ports import SAMPLES

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "bench-results"
ASL = (ROOT / "state_machines" / "campaign.asl.json").read_text()


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    for k in ("BENCHCTL_BUCKET", "BENCHCTL_STATE_MACHINE_ARN"):
        monkeypatch.delenv(k, raising=False)
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        sm = boto3.client("stepfunctions").create_state_machine(
            name="campaign", definition=ASL, roleArn="arn:aws:iam::123456789012:role/sfn")
        yield sm["stateMachineArn"]


@pytest.fixture
def cluster(aws, monkeypatch):
    """A moto EKS cluster with node group gpu-ng (0/4/0) and a fake Kubernetes API with the prerequisites."""
    from benchctl.aws.k8s.client import KubeClient
    from tests.fakes.eks_world import EFA_DEVICE_PLUGIN, runner_grants
    from tests.fakes.k8s_api import FakeKubeApi
    from tests.fakes.pod_identity import install_everywhere

    eks = boto3.client("eks")
    role = "arn:aws:iam::123456789012:role/eks"
    eks.create_cluster(name="bench", roleArn=role, resourcesVpcConfig={})
    eks.create_nodegroup(clusterName="bench", nodegroupName="gpu-ng", nodeRole=role, subnets=["s-1"],
                         scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 0})
    with FakeKubeApi() as api:
        for obj in ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dynamo-bench"}},
                    {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                     "metadata": {"name": "dynamographdeployments.nvidia.com"}},
                    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": "dynamo-bench"},
                     "data": {"HF_TOKEN": "aGY="}},
                    {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {"name": "model-cache", "namespace": "dynamo-bench"}},
                    EFA_DEVICE_PLUGIN,  # the smoke spec's p4d pool asks for EFA
                    runner_grants("dynamo-bench")):  # stacks/kubernetes/benchctl-identities.yaml's runner grants
            api.put(obj)
        # every call is authorized as the benchctl group by the RBAC file docs/howto/aws-existing-cluster.md has people apply
        # every function's group: the functions run here in one process, with one token
        api.enforce_rbac(yaml_files.load_all(RBAC_FILE), set(FUNCTION_GROUPS.values()))
        # the preflight's image-check Jobs pass (the Job controller's part)
        api.on_create("Job", lambda a, job: a.set_status("Job", "dynamo-bench", job["metadata"]["name"], {"succeeded": 1}))
        monkeypatch.setattr("benchctl.aws.eks_token.kube_for_cluster",
                            lambda name, session=None, **_: KubeClient(api.url, token=lambda: "test-token"))
        monkeypatch.setenv("BENCHCTL_LOAD_IMAGE", "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-assets:load")
        monkeypatch.setenv("BENCHCTL_CLUSTER", "bench")
        monkeypatch.setenv("BENCHCTL_LOAD_ROLE_ARN", "arn:aws:iam::123456789012:role/load-job")
        api.pod_identity = install_everywhere(monkeypatch, "bench")  # moto's EKS has no Pod Identity calls
        monkeypatch.setenv("BENCHCTL_NODEGROUPS", "gpu-ng")
        monkeypatch.setenv("BENCHCTL_RUNS_URI", f"s3://{BUCKET}/runs")
        monkeypatch.setenv("BENCHCTL_LAKE_URI", f"s3://{BUCKET}/lake")
        yield api


def _eks_smoke_spec() -> bytes:
    spec = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    spec["budget"]["max_hours"] = 3  # AWS overheads (node start-up, model load) exceed the local 1 h
    spec["pools"][0].update(provider="managed-nodegroup", nodegroup="gpu-ng")
    return yaml.safe_dump(spec).encode()


def _scaling() -> dict:
    return boto3.client("eks").describe_nodegroup(clusterName="bench", nodegroupName="gpu-ng")["nodegroup"]["scalingConfig"]


def _objects() -> list[str]:
    return [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_start_keeps_the_spec_and_starts_with_a_small_input(aws, capsys):
    rc = main(["start", "examples/seed-plan.yaml", "--bucket", BUCKET, "--state-machine-arn", aws,
               "--campaign-id", "seed-1"])
    out = capsys.readouterr().out
    assert rc == 0
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key="specs/seed-1.yaml")["Body"].read()
    assert body == (ROOT / "examples" / "seed-plan.yaml").read_bytes()  # the spec's own bytes
    (ex,) = boto3.client("stepfunctions").list_executions(stateMachineArn=aws)["executions"]
    assert ex["name"] == "seed-1"
    inp = json.loads(boto3.client("stepfunctions").describe_execution(executionArn=ex["executionArn"])["input"])
    assert inp == {"spec_uri": f"s3://{BUCKET}/specs/seed-1.yaml", "campaign_id": "seed-1", "poll_seconds": 30}
    assert f"#/v2/executions/details/{ex['executionArn']}" in out and "us-east-1.console.aws.amazon.com" in out
    assert main(["status", ex["executionArn"]]) == 0
    status = capsys.readouterr().out
    assert "RUNNING" in status and "seed-1" in status


def test_a_bad_spec_never_reaches_aws(aws, tmp_path, capsys):
    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    data["workloads"][3]["ratios"] = [0, 1.5]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    assert main(["start", str(bad), "--bucket", BUCKET, "--state-machine-arn", aws]) == 2
    assert "workloads[3].ratios[1]: 1.5 is invalid" in capsys.readouterr().err
    assert _objects() == []
    assert boto3.client("stepfunctions").list_executions(stateMachineArn=aws)["executions"] == []


def test_start_needs_a_state_machine_and_a_bucket(aws, capsys):
    assert main(["start", "examples/seed-plan.yaml", "--bucket", BUCKET]) == 2
    assert "pass --state-machine-arn or set BENCHCTL_STATE_MACHINE_ARN" in capsys.readouterr().err
    assert main(["start", "examples/seed-plan.yaml", "--state-machine-arn", aws]) == 2
    assert "pass --bucket or set BENCHCTL_BUCKET" in capsys.readouterr().err
    assert _objects() == []


def test_upload_only_stores_what_a_schedule_points_at(aws, capsys):
    assert main(["start", "examples/seed-plan.yaml", "--bucket", BUCKET, "--upload-only"]) == 0
    assert _objects() == ["specs/seed-plan.yaml"]
    assert '"spec_key": "specs/seed-plan.yaml"' in capsys.readouterr().out


def test_plan_on_aws_from_a_console_or_schedule_input(aws, cluster, capsys):
    from lambdas import plan as plan_handler
    from lambdas import pools as pools_handler
    from lambdas import teardown as teardown_handler
    from lambdas._runtime import use_engine

    use_engine(None)  # the AWS providers, built from the environment
    boto3.client("s3").put_object(Bucket=BUCKET, Key="specs/smoke.yaml", Body=_eks_smoke_spec())
    # the schedule's input: no ctx, no campaign id; the execution name becomes the campaign id
    execution = "arn:aws:states:us-east-1:123456789012:execution:campaign:weekly-2026-11-29"
    out = plan_handler.handler({"action": "plan", "state": "Plan", "execution": execution,
                                "input": {"spec_uri": f"s3://{BUCKET}/specs/smoke.yaml", "poll_seconds": 60}})
    ctx = out["ctx"]
    assert ctx == {"campaign_id": "weekly-2026-11-29", "run_uri": f"s3://{BUCKET}/runs/weekly-2026-11-29",
                   "lake_uri": f"s3://{BUCKET}/lake", "poll_seconds": 60, "fail_at": None}
    assert [e["name"] for e in out["experiments"]] == ["agg", "disagg"]
    keys = set(_objects())
    for k in ("spec.json", "plan.json", "campaign.json"):
        assert f"runs/weekly-2026-11-29/{k}" in keys
    assert "lake/campaigns/campaign_id=weekly-2026-11-29/campaign.parquet" in keys
    assert "lake/experiments/campaign_id=weekly-2026-11-29/experiment=disagg/experiment.parquet" in keys
    # the preflight proved the deployment's load image (the stack's BENCHCTL_LOAD_IMAGE) with a CPU Job
    images = [b["spec"]["template"]["spec"]["containers"][0]["image"] for m, _, b in cluster.bodies
              if b.get("kind") == "Job"]
    assert "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-assets:load" in images
    # ScalePools scales the named node group and records what it was; an abort restores exactly that
    capsys.readouterr()
    pools_handler.handler({"action": "scale", "state": "ScalePools", "ctx": ctx, "experiment": "agg"})
    assert _scaling() == {"minSize": 1, "maxSize": 4, "desiredSize": 1}
    teardown_handler.handler({"action": "campaign", "state": "AbortCampaign", "ctx": ctx,
                              "error": {"Error": "DeadlineExceeded", "Cause": "test"}})
    assert _scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 0}
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [(m["state"], m["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"]) for m in emf] == [
        ("ScalePools", "TaskSucceeded"), ("AbortCampaign", "TaskSucceeded")]


def test_plan_on_aws_stops_before_scaling_when_preflight_fails(aws, cluster):
    from lambdas import plan as plan_handler
    from lambdas._runtime import use_engine

    use_engine(None)
    cluster.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other", "namespace": "dynamo-bench"}})

    cluster.remove("Secret", "hf-token", "dynamo-bench")
    boto3.client("s3").put_object(Bucket=BUCKET, Key="specs/smoke.yaml", Body=_eks_smoke_spec())
    with pytest.raises(Exception, match=r"preflight: missing secret dynamo-bench/hf-token") as err:
        plan_handler.handler({"action": "plan", "state": "Plan", "execution": "arn:x:execution:campaign:c-2",
                              "input": {"spec_uri": f"s3://{BUCKET}/specs/smoke.yaml"}})
    assert type(err.value).__name__ == "PreflightFailed"
    assert _scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 0}
    assert not [k for k in _objects() if k.startswith("runs/c-2/plan")]


def test_ingest_on_aws_parses_raw_artifacts_from_s3_into_the_s3_lake(aws, cluster, tmp_path):
    from benchctl.aws.s3 import S3Lake, S3RunStore
    from benchctl.lake.ingest import StepContext, ingest_artifacts
    from lambdas import ingest as ingest_handler
    from lambdas import plan as plan_handler
    from lambdas._runtime import use_engine

    use_engine(None)
    boto3.client("s3").put_object(Bucket=BUCKET, Key="specs/s.yaml", Body=_eks_smoke_spec())
    ctx = plan_handler.handler({"action": "plan", "state": "Plan", "execution": "arn:x:execution:campaign:c-1",
                                "input": {"spec_uri": f"s3://{BUCKET}/specs/s.yaml"}})["ctx"]
    # Given a finished AIPerf step whose artifacts the Job left in the raw area on S3
    samples = SAMPLES
    art = tmp_path / "art"
    art.mkdir()
    (art / "profile_export_aiperf.json").write_bytes((samples / "profile_export_aiperf.json").read_bytes())
    head = (samples / "profile_export.head.jsonl").read_text().splitlines()
    profiling = []
    for i, line in enumerate(head):
        rec = json.loads(line)
        rec["metadata"].update(benchmark_phase="profiling", x_request_id=f"r{i}")
        profiling.append(json.dumps(rec))
    (art / "profile_export.jsonl").write_text("\n".join(head + profiling) + "\n")
    step = "concurrency-sweep-c4-r0"
    lake = S3Lake(BUCKET, "lake")
    raw = lake.raw_uri("c-1", "agg", step)
    for f in art.iterdir():
        boto3.client("s3").put_object(Bucket=BUCKET, Key=raw.removeprefix(f"s3://{BUCKET}/") + f.name,
                                      Body=f.read_bytes())
    RunState(S3RunStore(BUCKET, "runs/c-1")).save_load("agg", step, LoadRecord(state={}, launched_at=0.0, ended=True,
                                                                               exit_code=0))
    steps = [s.step_id for s in RunState(S3RunStore(BUCKET, "runs/c-1")).plan().experiment("agg").steps]
    # When the Ingest function runs on AWS, as the next step loads
    out = ingest_handler.handler({"action": "ingest_previous", "state": "IngestPreviousStep", "ctx": ctx,
                                  "experiment": "agg", "step": steps[steps.index(step) + 1]})
    # Then the S3 lake holds the rows a local ingest of the same artifacts gives, under the same keys
    assert out == {"step": step, "status": "succeeded", "requests": len(head)}
    local = ingest_artifacts(art, StepContext("c-1", "agg", "aggregated", "concurrency-sweep", step, 2, 0,
                                              concurrency=4, isl=256, osl=32, random_seed=42, artifact_uri=raw,
                                              workload_kind="concurrency_sweep"))
    (s3_step,) = lake.read_table("steps", "c-1")
    for col in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "output_tokens_per_s", "request_count", "artifact_uri"):
        assert s3_step[col] == local.steps[0][col], col
    assert sorted(r["x_request_id"] for r in lake.read_table("requests", "c-1")) == [f"r{i}" for i in range(len(head))]
    assert f"lake/steps/campaign_id=c-1/experiment=agg/{step}.parquet" in _objects()


def test_an_input_without_ctx_or_spec_uri_is_refused(aws, monkeypatch):
    from lambdas import plan as plan_handler
    from lambdas._runtime import use_engine

    monkeypatch.setenv("BENCHCTL_RUNS_URI", f"s3://{BUCKET}/runs")
    monkeypatch.setenv("BENCHCTL_LAKE_URI", f"s3://{BUCKET}/lake")
    use_engine(None)
    with pytest.raises(ValueError, match="execution input: give 'spec_uri'"):
        plan_handler.handler({"action": "plan", "state": "Plan", "input": {}, "execution": "x:y"})
    assert _objects() == []


def test_report_on_aws_creates_every_view_in_order_then_queries_the_campaign_and_writes_the_report(aws):
    from benchctl.analysis.views import REPORT_VIEWS, athena_view_ddl
    from benchctl.aws.athena import athena_report

    athena = boto3.client("athena")
    athena.create_work_group(Name="wg", Configuration={"ResultConfiguration": {"OutputLocation": f"s3://{BUCKET}/ar/"}})
    out = athena_report("camp-1", database="benchctl_dev", workgroup="wg", bucket=BUCKET, sleep=lambda s: None)
    assert set(REPORT_VIEWS) <= set(out) and out["report"] == f"s3://{BUCKET}/reports/camp-1/report.html"
    ids = athena.list_query_executions(WorkGroup="wg")["QueryExecutionIds"]
    sent = {athena.get_query_execution(QueryExecutionId=i)["QueryExecution"]["Query"] for i in ids}
    assert {d for _, d in athena_view_ddl()} <= sent
    assert {f"SELECT * FROM {v} WHERE campaign_id = 'camp-1'" for v in REPORT_VIEWS} <= sent
    # dependencies first: v_step_stats before every view that reads it
    order = [name for name, _ in athena_view_ddl()]
    assert order.index("v_step_stats") < order.index("v_step_cache") < order.index("v_prefix_cache")
    html = boto3.client("s3").get_object(Bucket=BUCKET, Key="reports/camp-1/report.html")["Body"].read().decode()
    assert html.startswith("<!DOCTYPE html>") and "camp-1" in html and "http://" not in html.split("<body", 1)[1]
    with pytest.raises(ValueError, match="cannot be a lake path segment"):
        athena_report("x'; DROP TABLE steps; --", database="d", workgroup="wg", sleep=lambda s: None)


def test_athena_rows_are_typed_from_the_column_metadata():
    from benchctl.aws.athena import _cell

    assert (_cell("42", "bigint"), _cell("1.5", "double"), _cell("true", "boolean"), _cell("x", "varchar"),
            _cell(None, "double")) == (42, 1.5, True, "x", None)


class _AthenaAtTheQueryPort:
    """An Athena stub at the query port: the views' Trino DDL is recorded (Athena would run it), every
    SELECT runs on DuckDB over a lake holding the same rows, and result locations are S3 URIs."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.ddl = engine, []

    def execute(self, sql: str) -> dict[str, Any]:
        self.ddl.append(sql)
        return {"State": "SUCCEEDED"}

    def run(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        return self.engine.run(sql)

    def location(self, sql: str) -> str:
        self.run(sql)
        return f"s3://{BUCKET}/ar/{abs(hash(sql))}.csv"


def test_the_aws_report_has_the_local_reports_sections_and_figures(aws, tmp_path: Path) -> None:
    # Given one campaign's rows, in a lake both reports read (Athena's SQL is the views' Trino text; the
    # stub runs DuckDB's, which tests/unit/test_views.py holds equal)
    from benchctl.aws.athena import athena_report
    from benchctl.local.query import QueryEngine
    from benchctl.local.report import render_report as local_report
    from tests.unit.test_report import FIGURES, TABLES, build_lake, section_html, sections

    lake = build_lake(tmp_path / "lake")
    local = local_report(lake.root, "camp-r", "html")
    # When the Report function's pipeline renders it on AWS through the query port
    with QueryEngine(lake.root, snapshot=True) as engine:  # the rows read once (test_lake_query holds them equal)
        stub = _AthenaAtTheQueryPort(engine)
        out = athena_report("camp-r", database="benchctl_dev", workgroup="wg", bucket=BUCKET, query=stub,
                            source=f"s3://{BUCKET}/lake")
    html = boto3.client("s3").get_object(Bucket=BUCKET, Key="reports/camp-r/report.html")["Body"].read().decode()
    # Then it holds the same sections in the same order, with the same tables and figures, and only the
    # source differs
    assert out["report"] == f"s3://{BUCKET}/reports/camp-r/report.html" and stub.ddl
    assert list(sections(html)) == list(sections(local))
    for sid in (*TABLES, *FIGURES):
        assert section_html(html, sid) == section_html(local, sid), sid
    assert f"s3://{BUCKET}/lake" in html and str(lake.root) in local
