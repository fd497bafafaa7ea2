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


def test_only_teardown_may_describe_the_campaign_machines_executions_and_knows_its_arn(templates):
    """ResolveStopped verifies a stop event with DescribeExecution (benchctl.campaign.stopped): the campaign state
    machine has a fixed name, every function's BENCHCTL_CAMPAIGN_MACHINE_ARN is that machine's ARN, and Teardown's
    role (alone of the functions') may DescribeExecution on that machine's executions only (Step Functions'
    service authorization reference: DescribeExecution's resource is the execution ARN)."""
    from tests.fakes.moto_iam import function_roles, role_documents

    cp = templates[CP]
    r = Resolver({k: v for k, v in templates.items() if not k.startswith("_")})
    (campaign,) = [v["Properties"] for k, v in _resources(cp, "AWS::StepFunctions::StateMachine").items()
                   if k.startswith("Campaign")]
    name = campaign["StateMachineName"]
    assert name == "benchctl-dev-campaign"
    machine_arn = f"arn:aws:states:us-east-1:123456789012:stateMachine:{name}"
    envs = {f["Properties"]["Handler"]: r.resolve(f["Properties"]["Environment"]["Variables"], CP)
            for f in _resources(cp, "AWS::Lambda::Function").values()}
    assert {h: e.get("BENCHCTL_CAMPAIGN_MACHINE_ARN") for h, e in envs.items() if not h.startswith("lambdas.sweep")} \
        == {h: machine_arn.replace("us-east-1", r.resolve({"Ref": "AWS::Region"}, CP)).replace(
            "123456789012", r.resolve({"Ref": "AWS::AccountId"}, CP)) for h in envs if not h.startswith("lambdas.sweep")}
    roles = function_roles(templates, CP)
    describing = {}
    for handler, rid in roles.items():
        if handler == "runner" or handler.startswith("lambdas.sweep"):
            continue
        resources = [res for doc in role_documents(templates, CP, rid) for st in doc["Statement"]
                     if "states:DescribeExecution" in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
                     for res in ([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"])]
        if resources:
            describing[handler] = resources
    assert list(describing) == ["lambdas.teardown.handler"], describing
    (resource,) = describing["lambdas.teardown.handler"]
    assert resource.endswith(f":execution:{name}:*") and ":states:" in resource, resource
