"""The AWS sweeper under moto (Step Functions, S3, EKS) with the fake Kubernetes API: a campaign whose
execution ended is torn down (node group restored, labelled objects deleted); a running one and other
people's objects are left alone."""

from __future__ import annotations

import json
import os

import boto3

from benchctl.aws.k8s.client import KubeClient
from benchctl.aws.k8s.common import job_name, labels
from benchctl.aws.s3 import S3RunStore
from benchctl.campaign.records import CampaignRecord
from benchctl.campaign.runstate import RunState
from tests.unit.test_aws_start import ASL, BUCKET, _eks_smoke_spec, _scaling, aws, cluster  # noqa: F401


def _campaign(sfn, sm_arn: str, cid: str, *, stop: bool) -> None:
    from benchctl import campaign
    from benchctl.campaign import Task
    from benchctl.campaign.context import Ctx
    from lambdas._runtime import current_engine, use_engine

    ex = sfn.start_execution(stateMachineArn=sm_arn, name=cid, input="{}")["executionArn"]
    if stop:
        sfn.stop_execution(executionArn=ex)
    use_engine(None)
    boto3.client("s3").put_object(Bucket=BUCKET, Key=f"specs/{cid}.yaml", Body=_eks_smoke_spec())
    ctx = Ctx(cid, f"s3://{BUCKET}/runs/{cid}", f"s3://{BUCKET}/lake", 30, None)
    p = current_engine().providers(ctx)
    campaign.plan(p, ctx, Task(state="Plan", execution=ex, input={"spec_uri": f"s3://{BUCKET}/specs/{cid}.yaml"}))
    campaign.scale_pools(p, ctx, Task("agg"))


def test_sweeper_tears_down_ended_campaigns_only(aws, cluster):  # noqa: F811
    from benchctl.aws.sweep import aws_sweep

    sfn = boto3.client("stepfunctions")
    # the dead campaign scaled the node group and deployed; the live one only deployed
    _campaign(sfn, aws, "dead-1", stop=True)
    assert _scaling()["desiredSize"] == 1
    kube = KubeClient(cluster.url, token=lambda: "test-token")
    for cid, name in (("dead-1", "bc-agg-dead"), ("live-1", "bc-agg-live")):
        cluster.put({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                     "metadata": {"name": name, "namespace": "dynamo-bench", "labels": labels(cid, "agg")}})
    cluster.put({"apiVersion": "batch/v1", "kind": "Job",
                 "metadata": {"name": "theirs", "namespace": "dynamo-bench", "labels": {"team": "x"}}})
    ex = sfn.start_execution(stateMachineArn=aws, name="live-1", input="{}")["executionArn"]
    RunState(S3RunStore(BUCKET, "runs/live-1")).save_campaign(CampaignRecord(campaign_id="live-1", execution=ex))
    env = {**os.environ, "BENCHCTL_NAMESPACE": "dynamo-bench"}

    dry = {r["campaign_id"]: r["action"] for r in aws_sweep(env, kube=kube, dry_run=True)}
    assert dry == {"dead-1": "would tear down", "live-1": "left alone: still running"}
    assert _scaling()["desiredSize"] == 1

    report = {r["campaign_id"]: r for r in aws_sweep(env, kube=kube)}
    assert report["dead-1"]["action"] == "swept"
    # the teardown from its records removes what it deployed and the image pre-pull its ScalePools started
    # on the pool (recorded before ScalePools created it); nothing labelled is left for the last resort
    assert report["dead-1"]["teardown"]["agg"]["deployment"] == {
        "jobs": [], "deployments": ["bc-agg-dead"], "prepull": [job_name("dead-1", "agg", "prepull-gpu-a100")]}
    assert report["dead-1"]["labelled_objects_deleted"] == []
    # its runner identity, made by its Plan, went with it: the association and the service account
    assert report["dead-1"]["identity_released"][-1] == "ServiceAccount/dead-1"
    assert cluster.pod_identity.associations == {} and cluster.stored("ServiceAccount", "dead-1", "dynamo-bench") is None
    assert report["live-1"]["action"] == "left alone: still running"
    assert _scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 0}
    assert cluster.stored("DynamoGraphDeployment", "bc-agg-live", "dynamo-bench") is not None
    assert cluster.stored("Job", "theirs", "dynamo-bench") is not None
    record = RunState(S3RunStore(BUCKET, "runs/dead-1")).campaign()
    assert record is not None and (record.status, record.error) == ("failed", "Swept")


def test_one_campaign_whose_sweep_raises_is_reported_and_the_others_are_still_swept(
        aws, cluster, monkeypatch, capsys):  # noqa: F811
    """Three ended campaigns; the first (in the sweeper's order) has a plan record that cannot be read. The
    other two are swept all the same (the node group restored, the labelled object deleted), the first is a
    ``failed`` line naming its error, and the invocation fails at the end (SweepIncomplete: the function's
    Errors metric, which the stack's SweepFailedAlarm watches) with a SweepFailed metric."""
    import json

    import pytest

    from lambdas import sweep as sweep_handler

    sfn = boto3.client("stepfunctions")
    _campaign(sfn, aws, "dead-1", stop=True)  # scaled the node group
    assert _scaling()["desiredSize"] == 1
    for cid in ("a-broken", "b-dead"):
        ex = sfn.start_execution(stateMachineArn=aws, name=cid, input="{}")["executionArn"]
        sfn.stop_execution(executionArn=ex)
        RunState(S3RunStore(BUCKET, f"runs/{cid}")).save_campaign(CampaignRecord(campaign_id=cid, execution=ex))
        cluster.put({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
                     "metadata": {"name": f"bc-agg-{cid}", "namespace": "dynamo-bench", "labels": labels(cid, "agg")}})
    boto3.client("s3").put_object(Bucket=BUCKET, Key="runs/a-broken/plan.json", Body=b'{"experiments": [')
    monkeypatch.setenv("BENCHCTL_NAMESPACE", "dynamo-bench")
    capsys.readouterr()

    with pytest.raises(sweep_handler.SweepIncomplete, match=r"1 of 3 campaigns not swept .*a-broken: JSONDecodeError"):
        sweep_handler.handler({})
    assert _scaling() == {"minSize": 0, "maxSize": 4, "desiredSize": 0}  # dead-1, after the broken one
    assert cluster.stored("DynamoGraphDeployment", "bc-agg-b-dead", "dynamo-bench") is None
    assert cluster.stored("DynamoGraphDeployment", "bc-agg-a-broken", "dynamo-bench") is not None
    for cid in ("dead-1", "b-dead"):
        record = RunState(S3RunStore(BUCKET, f"runs/{cid}")).campaign()
        assert record is not None and (record.status, record.error) == ("failed", "Swept"), cid
    out = capsys.readouterr().out
    metrics = [m["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"]
               for m in (json.loads(line) for line in out.splitlines() if '"_aws"' in line)]
    assert metrics == ["CampaignsSwept", "SweepFailed"]


def test_a_doctors_runner_identity_abandoned_for_an_hour_is_ended_and_a_fresh_one_left(aws, cluster):  # noqa: F811
    """A ``benchctl doctor`` killed mid-run leaves its runner identity (service account, Pod Identity association
    with the load Job role) and has no run record: once every object of it is older than an hour the sweeper
    removes it; a doctor's still running (younger) and a campaign with no record that is not a doctor's are
    left alone (never guess)."""
    from datetime import UTC, datetime, timedelta

    from benchctl.aws.runner_identity import RunnerIdentity
    from benchctl.aws.sweep import DOCTOR_TTL_S, aws_sweep

    kube = KubeClient(cluster.url, token=lambda: "test-token")
    eks = boto3.session.Session().client("eks")  # a session made after the fake Pod Identity calls were installed
    now = datetime(2026, 12, 5, 16, 0, tzinfo=UTC)
    for cid, age_s in (("doctor-20261205-140000", DOCTOR_TTL_S + 60), ("doctor-20261205-155500", 300),
                       ("unrecorded-1", DOCTOR_TTL_S * 5)):
        RunnerIdentity(lambda: kube, lambda: eks, cluster="bench", namespace="dynamo-bench",
                       role_arn=os.environ["BENCHCTL_LOAD_ROLE_ARN"], campaign_id=cid).ensure()
        sa = cluster.stored("ServiceAccount", cid, "dynamo-bench")
        sa["metadata"]["creationTimestamp"] = (now - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
        cluster.put(sa)
    env = {**os.environ, "BENCHCTL_NAMESPACE": "dynamo-bench"}
    report = {r["campaign_id"]: r for r in aws_sweep(env, kube=kube, clock=now.timestamp)}
    old = report["doctor-20261205-140000"]
    assert old["action"] == "swept" and old["identity_released"][-1] == "ServiceAccount/doctor-20261205-140000", old
    assert cluster.stored("ServiceAccount", "doctor-20261205-140000", "dynamo-bench") is None
    assert {a["serviceAccount"] for a in cluster.pod_identity.associations.values()} == {
        "doctor-20261205-155500", "unrecorded-1"}
    assert report["doctor-20261205-155500"]["action"] == "left alone: still running"
    assert report["unrecorded-1"]["action"] == "left alone: still running"
    assert cluster.stored("ServiceAccount", "unrecorded-1", "dynamo-bench") is not None


# ------------------------------------------------------------------------------------------------ the watchdog


def _lock_table(monkeypatch) -> None:
    """The control-plane stack's pool-lock table (key ``pool``) in moto's DynamoDB, named to every function."""
    from benchctl.constants import LOCK_KEY_ATTRIBUTE

    boto3.client("dynamodb").create_table(
        TableName="benchctl-locks", BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": LOCK_KEY_ATTRIBUTE, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": LOCK_KEY_ATTRIBUTE, "AttributeType": "S"}])
    monkeypatch.setenv("BENCHCTL_LOCK_TABLE", "benchctl-locks")
    monkeypatch.setenv("BENCHCTL_NAMESPACE", "dynamo-bench")


def test_the_watchdog_tears_down_a_lock_holder_whose_stop_event_was_lost(aws, cluster, monkeypatch):  # noqa: F811
    """A campaign stopped from outside whose status-change event never started the stopped-campaign machine
    (best-effort delivery): its pool lock is still held. Within the grace period the watchdog leaves it to that
    machine; after it, the watchdog claims the stop (create-only) and tears it down as the sweep does; a late
    event's machine then finds nothing to do."""
    import time

    from benchctl.aws.sweep import WATCHDOG, WATCHDOG_GRACE_S, aws_sweep
    from benchctl.campaign.stopped import resolve_stopped
    from lambdas._runtime import current_engine

    _lock_table(monkeypatch)
    sfn = boto3.client("stepfunctions")
    _campaign(sfn, aws, "dead-1", stop=True)
    assert _scaling()["desiredSize"] == 1
    assert boto3.client("dynamodb").scan(TableName="benchctl-locks")["Items"], "Plan took the pool lock"
    kube = KubeClient(cluster.url, token=lambda: "test-token")
    env = dict(os.environ)

    (early,) = aws_sweep(env, kube=kube, watchdog=True)
    assert early["action"].startswith("left alone: ended ABORTED") and _scaling()["desiredSize"] == 1, early
    (line,) = aws_sweep(env, kube=kube, watchdog=True, clock=lambda: time.time() + WATCHDOG_GRACE_S + 60)
    assert line["action"] == "swept", line
    assert _scaling()["desiredSize"] == 0
    assert boto3.client("dynamodb").scan(TableName="benchctl-locks")["Items"] == []
    claim = RunState(S3RunStore(BUCKET, "runs/dead-1")).store.read_json("stop_claim.json")
    assert claim is not None and claim["claimant"] == WATCHDOG and claim["status"] == "ABORTED"
    # the lost event, delivered late: its machine finds the watchdog's claim
    record = RunState(S3RunStore(BUCKET, "runs/dead-1")).campaign()
    assert record is not None and record.execution
    ex = sfn.describe_execution(executionArn=record.execution)
    event = {"source": "aws.states", "detail-type": "Step Functions Execution Status Change",
             "detail": {"executionArn": ex["executionArn"], "name": "dead-1", "status": "ABORTED",
                        "input": json.dumps({"spec_uri": f"s3://{BUCKET}/specs/dead-1.yaml"})}}
    from benchctl.aws.executions import stop_verifier_from_env

    out = resolve_stopped(current_engine(), event, "arn:aws:states:us-east-1:123456789012:execution:stopped:late",
                          verifier=stop_verifier_from_env({**os.environ, "BENCHCTL_CAMPAIGN_MACHINE_ARN": aws}))
    assert not out["todo"] and "ended already (failed)" in out["why"], out  # swept, and claimed by the watchdog


def test_the_watchdog_leaves_a_stop_its_machine_claimed_and_reads_nothing_while_no_lock_is_held(
        aws, cluster, monkeypatch):  # noqa: F811
    import time

    from benchctl.aws import eks_token
    from benchctl.aws.sweep import WATCHDOG_GRACE_S, aws_sweep

    _lock_table(monkeypatch)
    later = lambda: time.time() + WATCHDOG_GRACE_S + 60  # noqa: E731
    kube = KubeClient(cluster.url, token=lambda: "test-token")
    sfn = boto3.client("stepfunctions")
    _campaign(sfn, aws, "dead-1", stop=True)
    RunState(S3RunStore(BUCKET, "runs/dead-1")).claim_stop("arn:aws:states:::execution:stopped:first", "t", "ABORTED")
    (line,) = aws_sweep(dict(os.environ), kube=kube, watchdog=True, clock=later)
    assert line["action"] == "left alone: its teardown was claimed by arn:aws:states:::execution:stopped:first at t"
    assert _scaling()["desiredSize"] == 1
    boto3.client("dynamodb").delete_table(TableName="benchctl-locks")
    _lock_table(monkeypatch)  # empty: no lock held

    def no_cluster(*a, **kw):
        raise AssertionError("the watchdog reached for the cluster while no lock is held")

    monkeypatch.setattr(eks_token, "kube_for_cluster", no_cluster)
    assert aws_sweep(dict(os.environ), watchdog=True, clock=later) == []
