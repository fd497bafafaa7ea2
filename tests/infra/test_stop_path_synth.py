"""The stop path's own alarms in the synthesized control plane (``stacks/control_plane_ops.py``): the stopped-campaign
rule takes FAILED too, an alarm on its dead-letter queue and a rule on the stopped-campaign machine's own failures
notify the status topic (each allowed to publish by its own ARN only), and the sweeper's watchdog runs every few
minutes. Read from the shared "full" synthesis (tests/infra/conftest.py).

What is held against AWS's documents: the SQS metric ``ApproximateNumberOfMessagesVisible`` in namespace ``AWS/SQS``
with dimension ``QueueName`` (Amazon SQS developer guide, "Available CloudWatch metrics for Amazon SQS"); the Step
Functions status-change event (source ``aws.states``, detail-type "Step Functions Execution Status Change", detail
``stateMachineArn``/``status``; Step Functions developer guide, "Automating Step Functions event delivery with
EventBridge"); the end statuses FAILED, TIMED_OUT, ABORTED (Step Functions API reference, DescribeExecution)."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.cfn_resolve import Resolver
from tests.infra.conftest import CP


def _resources(t: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in t["Resources"].items() if v["Type"] == kind}


def _starting(t: dict[str, Any], kind: str, prefix: str) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, v["Properties"]) for k, v in _resources(t, kind).items() if k.startswith(prefix)]
    return found


def _may_publish(t: dict[str, Any], templates: dict[str, Any], service: str) -> set[str]:
    """The aws:SourceArn values the topic policy lets ``service`` publish for."""
    (policy,) = [v["Properties"] for v in _resources(t, "AWS::SNS::TopicPolicy").values()]
    r = Resolver({k: v for k, v in templates.items() if not k.startswith("_")})
    conditions = [st["Condition"] for st in policy["PolicyDocument"]["Statement"]
                  if st.get("Principal") == {"Service": service} and st["Action"] == "sns:Publish"]
    return {r.resolve((c.get("ArnLike") or c["ArnEquals"])["aws:SourceArn"], CP) for c in conditions}


def _key_allows(t: dict[str, Any], templates: dict[str, Any], service: str) -> set[str]:
    (key,) = [v["Properties"] for v in _resources(t, "AWS::KMS::Key").values()]
    r = Resolver({k: v for k, v in templates.items() if not k.startswith("_")})
    return {r.resolve(st["Condition"]["ArnLike"]["aws:SourceArn"], CP) for st in key["KeyPolicy"]["Statement"]
            if st.get("Principal") == {"Service": service}}


def test_the_stopped_campaign_rule_takes_failed_executions_too(templates):
    cp = templates[CP]
    campaign = next(k for k in _resources(cp, "AWS::StepFunctions::StateMachine") if k.startswith("Campaign"))
    _, rule = _starting(cp, "AWS::Events::Rule", "StoppedCampaignRule")
    assert rule["EventPattern"]["detail"] == {"stateMachineArn": [{"Ref": campaign}],
                                              "status": ["ABORTED", "TIMED_OUT", "FAILED"]}


def test_a_message_in_the_stopped_campaign_dead_letter_queue_raises_an_alarm_on_the_status_topic(templates):
    cp = templates[CP]
    _, rule = _starting(cp, "AWS::Events::Rule", "StoppedCampaignRule")
    dlq = rule["Targets"][0]["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    _, alarm = _starting(cp, "AWS::CloudWatch::Alarm", "StoppedCampaignDeadLetterAlarm")
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq, "QueueName"]}}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"], alarm["EvaluationPeriods"]) == (
        0, "GreaterThanThreshold", 1)
    assert alarm["TreatMissingData"] == "notBreaching"  # an idle queue publishes no data points
    topic = next(iter(_resources(cp, "AWS::SNS::Topic")))
    assert alarm["AlarmActions"] == [{"Ref": topic}]
    # CloudWatch may publish to the topic (and use its key) for this alarm by name
    name = alarm["AlarmName"]
    assert name == "benchctl-dev-stopped-campaign-undelivered"
    for allowed in (_may_publish(cp, templates, "cloudwatch.amazonaws.com"),
                    _key_allows(cp, templates, "cloudwatch.amazonaws.com")):
        assert any(a.endswith(f":alarm:{name}") for a in allowed), allowed


def test_the_stopped_campaign_machines_own_failure_notifies_the_status_topic(templates):
    cp = templates[CP]
    stopped = next(k for k in _resources(cp, "AWS::StepFunctions::StateMachine") if k.startswith("StoppedCampaign"))
    _, rule = _starting(cp, "AWS::Events::Rule", "StoppedCampaignStatusRule")
    assert rule["EventPattern"] == {
        "source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"],
        "detail": {"stateMachineArn": [{"Ref": stopped}], "status": ["FAILED", "TIMED_OUT", "ABORTED"]}}
    (target,) = rule["Targets"]
    topic = next(iter(_resources(cp, "AWS::SNS::Topic")))
    assert target["Arn"] == {"Ref": topic}
    text = json.dumps(target["InputTransformer"])
    assert "benchctl sweep" in text and "<detail-executionArn>" in text
    name = rule["Name"]
    assert name == "benchctl-dev-stopped-campaign-status"
    for allowed in (_may_publish(cp, templates, "events.amazonaws.com"),
                    _key_allows(cp, templates, "events.amazonaws.com")):
        assert any(a.endswith(f":rule/{name}") for a in allowed), allowed


def test_the_sweepers_watchdog_runs_every_five_minutes_with_its_own_input(templates):
    cp = templates[CP]
    _, rule = _starting(cp, "AWS::Events::Rule", "SweepWatchdogSchedule")
    assert rule["ScheduleExpression"] == "rate(5 minutes)"
    (target,) = rule["Targets"]
    sweeper = next(k for k, r in _resources(cp, "AWS::Lambda::Function").items()
                   if r["Properties"]["Handler"] == "lambdas.sweep.handler")
    assert target["Arn"] == {"Fn::GetAtt": [sweeper, "Arn"]}
    assert json.loads(target["Input"]) == {"watchdog": True}
