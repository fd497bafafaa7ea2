"""The stop path of a deployment in moto, as the control-plane stack creates it, for ``benchctl doctor``'s tests:
the stopped-campaign state machine, the rule on the campaign machine's ABORTED/TIMED_OUT/FAILED events that starts
it (with its dead-letter queue), the rule on that machine's own failures, and the scaling grants of the function
role on the node groups. Plus IAM's policy simulator, which moto does not implement: SimulatePrincipalPolicy is
answered from the role's own inline and attached policies with IAM's evaluation (``tests.fakes.moto_iam.evaluate``:
explicit Deny over Allow, implicit deny; IAM API reference, SimulatePrincipalPolicy: ``EvalDecision`` is
``allowed``, ``explicitDeny`` or ``implicitDeny``)."""

from __future__ import annotations

import json
from typing import Any

from benchctl.campaign import asl

STOP_STATUSES = ["ABORTED", "TIMED_OUT", "FAILED"]
SCALING = ["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "eks:DescribeUpdate"]


def role_policies(iam: Any, role_name: str) -> list[dict[str, Any]]:
    """Every identity policy document of a role in moto's IAM: inline and attached (default versions)."""
    docs = []
    for name in iam.list_role_policies(RoleName=role_name)["PolicyNames"]:
        doc = iam.get_role_policy(RoleName=role_name, PolicyName=name)["PolicyDocument"]
        docs.append(json.loads(doc) if isinstance(doc, str) else doc)
    for att in iam.list_attached_role_policies(RoleName=role_name)["AttachedPolicies"]:
        pol = iam.get_policy(PolicyArn=att["PolicyArn"])["Policy"]
        doc = iam.get_policy_version(PolicyArn=att["PolicyArn"], VersionId=pol["DefaultVersionId"])[
            "PolicyVersion"]["Document"]
        docs.append(json.loads(doc) if isinstance(doc, str) else doc)
    return docs


def simulator(session: Any) -> Any:
    """A ``before-call.iam.SimulatePrincipalPolicy`` handler answering as IAM's simulator would."""
    from tests.fakes.moto_iam import evaluate

    def answer(params: Any, **_: Any) -> Any:
        from urllib.parse import parse_qs

        from botocore.awsrequest import AWSResponse

        body = params["body"]
        form = body if isinstance(body, dict) else {
            k: v[0] for k, v in parse_qs(body if isinstance(body, str) else body.decode()).items()}
        role = str(form["PolicySourceArn"]).rsplit("/", 1)[-1]
        docs = role_policies(session.client("iam"), role)
        actions = [str(v) for k, v in sorted(form.items()) if k.startswith("ActionNames.member.")]
        resources = [str(v) for k, v in sorted(form.items()) if k.startswith("ResourceArns.member.")] or ["*"]
        results = [{"EvalActionName": action, "EvalResourceName": resource,
                    "EvalDecision": {"Allow": "allowed", "Deny": "explicitDeny", None: "implicitDeny"}[
                        evaluate(docs, action, resource, {})]}
                   for action in actions for resource in resources]
        return AWSResponse(params["url"], 200, {}, None), {"EvaluationResults": results, "IsTruncated": False}

    return answer


def install(session: Any, campaign_arn: str, function_arns: dict[str, str], *, role: str = "fn",
            cluster: str = "", nodegroups: tuple[str, ...] = ()) -> dict[str, Any]:
    """The stack's stop path and scaling grants in moto, the simulator on ``session``; returns their names."""
    sqs, events, sfn, iam = (session.client(s) for s in ("sqs", "events", "stepfunctions", "iam"))
    queue = sqs.create_queue(QueueName="benchctl-stopped-dlq")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    definition = asl.substitute({"TeardownFunctionArn": function_arns["TeardownFunctionArn"],
                                 "ReportFunctionArn": function_arns["ReportFunctionArn"],
                                 "StatusTopicArn": "arn:aws:sns:us-east-1:123456789012:status",
                                 "ReportsUri": "s3://bucket/reports"}, asl.STOPPED_ASL_PATH)
    stopped = sfn.create_state_machine(name="stopped", definition=definition,
                                       roleArn="arn:aws:iam::123456789012:role/sfn")["stateMachineArn"]
    pattern = {"source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"]}
    events.put_rule(Name="stopped-campaign", EventPattern=json.dumps(
        {**pattern, "detail": {"stateMachineArn": [campaign_arn], "status": STOP_STATUSES}}), State="ENABLED")
    events.put_targets(Rule="stopped-campaign", Targets=[{
        "Id": "t", "Arn": stopped, "RoleArn": "arn:aws:iam::123456789012:role/events",
        "DeadLetterConfig": {"Arn": queue_arn}, "RetryPolicy": {"MaximumRetryAttempts": 8}}])
    events.put_rule(Name="stopped-campaign-status", EventPattern=json.dumps(
        {**pattern, "detail": {"stateMachineArn": [stopped], "status": ["FAILED", "TIMED_OUT", "ABORTED"]}}),
        State="ENABLED")
    eks = session.client("eks")
    arns = [eks.describe_nodegroup(clusterName=cluster, nodegroupName=g)["nodegroup"]["nodegroupArn"] for g in nodegroups]
    if arns:
        iam.put_role_policy(RoleName=role, PolicyName="nodegroups", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": SCALING, "Resource": arns}]}))
    session.events.register("before-call.iam.SimulatePrincipalPolicy", simulator(session))
    return {"queue": queue, "stopped": stopped, "rule": "stopped-campaign", "status_rule": "stopped-campaign-status",
            "nodegroup_arns": arns}
