"""``benchctl doctor``'s stop-path and scaling-verb lines (benchctl.aws.doctor_stop) against the deployment in moto
(tests/unit/test_doctor.py's ``account``, with the stop path the stack creates: tests/fakes/stop_path_world.py):
each line passes on the healthy deployment and fails, naming the fix, when its part is broken."""

from __future__ import annotations

import json
from typing import Any

import boto3

from benchctl.aws import doctor_stop
from tests.unit.test_doctor import ACCOUNT, BUCKET, account  # noqa: F401 (the fixture)


def _lines(account: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    functions = {v.removesuffix("FunctionArn"): a for v, a in account["arns"].items()}
    return {c.name: c for c in doctor_stop.checks(account["session"], account["arn"], functions)}


def test_the_stop_path_and_the_scaling_verbs_pass_on_a_healthy_deployment(account):  # noqa: F811
    lines = _lines(account)
    assert [c.line() for c in lines.values() if not c.ok] == []
    assert "matches ABORTED, TIMED_OUT, FAILED" in lines["stop rule"].detail
    # the synthetic execution does not exist: Teardown described it (states:DescribeExecution allowed, the
    # campaign machine's ARN in its environment) and refused the event, tearing nothing down
    assert "ExecutionDoesNotExist" in lines["stop path"].detail and "nothing to do" in lines["stop path"].detail
    assert {"Pools scaling verbs", "Teardown scaling verbs", "Sweep scaling verbs"} <= set(lines)
    assert "eks:UpdateNodegroupConfig" in lines["Pools scaling verbs"].detail
    # the synthetic event wrote nothing: no run record, no stop claim of the campaign that does not exist
    assert boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="runs/doctor-stop-").get("KeyCount") == 0


def test_a_disabled_rule_or_one_without_failed_fails_the_stop_rule_line(account):  # noqa: F811
    events = boto3.client("events")
    events.disable_rule(Name="stopped-campaign")
    assert not _lines(account)["stop rule"].ok
    events.enable_rule(Name="stopped-campaign")
    rule = events.describe_rule(Name="stopped-campaign")
    pattern = json.loads(rule["EventPattern"])
    pattern["detail"]["status"] = ["ABORTED", "TIMED_OUT"]  # a stack from before FAILED was in the rule
    events.put_rule(Name="stopped-campaign", EventPattern=json.dumps(pattern), State="ENABLED")
    line = _lines(account)["stop rule"]
    assert not line.ok and "does not match FAILED" in line.detail
    events.disable_rule(Name="stopped-campaign-status")
    events.put_rule(Name="stopped-campaign", EventPattern=rule["EventPattern"], State="ENABLED")
    assert not _lines(account)["stop path failure rule"].ok


def test_an_undelivered_stop_event_in_the_dead_letter_queue_fails_its_line(account):  # noqa: F811
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName="benchctl-stopped-dlq")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"detail": {"status": "ABORTED"}}))
    line = _lines(account)["stop dead-letter queue"]
    assert not line.ok and "holds 1 stop event" in line.detail and "benchctl sweep" in line.detail


def test_a_teardown_function_that_fails_on_the_synthetic_event_fails_the_stop_path(account):  # noqa: F811
    account["invoker"].crash.add(account["arns"]["TeardownFunctionArn"])
    line = _lines(account)["stop path"]
    assert not line.ok and "segmentation fault" in line.detail


def test_a_role_without_the_scaling_grant_fails_its_scaling_verbs_naming_the_action(account):  # noqa: F811
    iam = boto3.client("iam")
    iam.put_role_policy(RoleName="fn", PolicyName="nodegroups", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["eks:DescribeNodegroup", "eks:DescribeUpdate"],
             "Resource": f"arn:aws:eks:us-east-1:{ACCOUNT}:nodegroup/*"}]}))
    line = _lines(account)["Pools scaling verbs"]
    assert not line.ok and "eks:UpdateNodegroupConfig on gpu-ng: implicitDeny" in line.detail
    assert "eks:DescribeNodegroup" not in line.detail.split("refuses:")[1].split("(")[0]
