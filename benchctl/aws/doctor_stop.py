"""``benchctl doctor``'s lines for the stop path and the scaling verbs (chained by ``benchctl.aws.doctor.checks``).

The stop path (``stacks/control_plane_ops.py``, ``benchctl.campaign.stopped``), proven without stopping anything:

* ``stop rule``: the EventBridge rule on the campaign state machine's ABORTED, TIMED_OUT and FAILED events is
  ENABLED and targets the stopped-campaign state machine, with a dead-letter queue;
* ``stop path failure rule``: the rule on that machine's own FAILED/TIMED_OUT/ABORTED endings is ENABLED;
* ``stop dead-letter queue``: it holds no message (each one is a stopped campaign nothing tore down);
* ``stop path``: the Teardown function, invoked as ResolveStopped invokes it with a synthetic status-change event of
  a campaign that does not exist, answers "nothing to do" (its code, its layers, its environment's campaign machine
  ARN and its ``states:DescribeExecution`` right work: the execution is described, found not to exist and the
  event refused; it writes nothing: no run record, no claim).

The scaling verbs: IAM's policy simulator (``iam:SimulatePrincipalPolicy``, IAM API reference) asked, for the role of
each function that scales or restores node groups (Pools, Teardown, the sweeper), whether it may
``eks:DescribeNodegroup``, ``eks:UpdateNodegroupConfig`` and ``eks:DescribeUpdate`` on each configured node group
(``BENCHCTL_NODEGROUPS``): what ``benchctl.aws.pools`` calls. The simulator evaluates the role's identity policies
(and permissions boundary); an SCP of the organization is not seen by it, which the line says.

May import ``benchctl.aws`` and the core; boto3 only through the session given.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from benchctl.aws.doctor_check import Check, lambda_client

JSON = dict[str, Any]
SOURCE, DETAIL_TYPE = "aws.states", "Step Functions Execution Status Change"
STOP_STATUSES = ("ABORTED", "TIMED_OUT", "FAILED")  # stacks.control_plane_grants.STOPPED_STATUSES
# what benchctl.aws.pools calls on a managed node group (scale, read back, wait for the update)
SCALING_ACTIONS = ("eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "eks:DescribeUpdate")
SCALING_FUNCTIONS = ("Pools", "Teardown", "Sweep")


def _rules(events: Any) -> list[JSON]:
    out: list[JSON] = []
    for page in events.get_paginator("list_rules").paginate():
        out += page.get("Rules", [])
    return out


def _pattern(rule: JSON) -> JSON:
    try:
        data = json.loads(rule.get("EventPattern") or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _watches(rule: JSON, machine_arn: str) -> list[str]:
    """The statuses a rule matches of ``machine_arn``'s status-change events ([] when it does not watch it)."""
    pattern = _pattern(rule)
    detail = pattern.get("detail") or {}
    if SOURCE not in (pattern.get("source") or []) or machine_arn not in (detail.get("stateMachineArn") or []):
        return []
    return [str(s) for s in detail.get("status") or []]


def synthetic_stop_event(state_machine_arn: str, campaign_id: str) -> JSON:
    """The status-change event EventBridge delivers for an execution of ``state_machine_arn`` named ``campaign_id``
    that was stopped (Step Functions developer guide, "Step Functions Execution Status Change")."""
    execution = state_machine_arn.replace(":stateMachine:", ":execution:") + f":{campaign_id}"
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    return {"version": "0", "source": SOURCE, "detail-type": DETAIL_TYPE, "resources": [execution],
            "detail": {"executionArn": execution, "stateMachineArn": state_machine_arn, "name": campaign_id,
                       "status": "ABORTED", "startDate": now_ms, "stopDate": now_ms,
                       "input": json.dumps({"spec_uri": "s3://benchctl-doctor/none.yaml", "campaign_id": campaign_id}),
                       "inputDetails": {"included": True}}}


def stop_path_checks(session: Any, state_machine_arn: str, functions: dict[str, str]) -> Iterator[Check]:
    events = session.client("events")
    rules = _rules(events)
    stop = [r for r in rules if set(_watches(r, state_machine_arn)) & set(STOP_STATUSES)]
    if not stop:
        yield Check("stop rule", False, f"no EventBridge rule starts the teardown of a stopped execution of "
                    f"{state_machine_arn} (the control-plane stack's StoppedCampaignRule): redeploy the stack")
        return
    rule = stop[0]
    statuses = _watches(rule, state_machine_arn)
    targets = events.list_targets_by_rule(Rule=rule["Name"]).get("Targets", [])
    machine = next((t for t in targets if ":stateMachine:" in t.get("Arn", "")), None)
    missing = sorted(set(STOP_STATUSES) - set(statuses))
    ok = rule.get("State") == "ENABLED" and machine is not None and not missing
    yield Check("stop rule", ok, f"{rule['Name']} is {rule.get('State')}, matches {', '.join(statuses)}"
                + (f"; does not match {', '.join(missing)} (an older stack: redeploy)" if missing else "")
                + (f", starts {machine['Arn']}" if machine else "; targets no state machine"))
    if machine is not None:
        own = [r for r in rules if set(_watches(r, machine["Arn"])) & {"FAILED", "TIMED_OUT", "ABORTED"}]
        yield Check("stop path failure rule", bool(own) and all(r.get("State") == "ENABLED" for r in own),
                    f"{own[0]['Name']} is {own[0].get('State')}: the stopped-campaign machine's own failures reach "
                    "the status topic" if own else f"no rule announces a failure of {machine['Arn']} itself: redeploy "
                    "the control-plane stack (StoppedCampaignStatusRule)")
        dlq = (machine.get("DeadLetterConfig") or {}).get("Arn", "")
        yield from _dead_letters(session, dlq)
    if "Teardown" in functions:
        yield _resolve_nothing(session, state_machine_arn, functions["Teardown"])


def _dead_letters(session: Any, queue_arn: str) -> Iterator[Check]:
    if not queue_arn:
        yield Check("stop dead-letter queue", False, "the stop rule's target has no dead-letter queue: an event "
                    "EventBridge cannot deliver is then lost silently; redeploy the control-plane stack")
        return
    sqs = session.client("sqs")
    _, _, _, _, account, name = queue_arn.split(":", 5)
    url = sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    held = int(attrs.get("ApproximateNumberOfMessages", 0)) + int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0))
    yield Check("stop dead-letter queue", held == 0,
                f"{name} is empty" if held == 0 else
                f"{name} holds {held} stop event(s) nothing delivered: each names a stopped campaign that may still "
                "hold GPUs; run benchctl sweep, then read and delete the messages")


def _resolve_nothing(session: Any, state_machine_arn: str, teardown_arn: str) -> Check:
    campaign_id = "doctor-stop-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    payload = {"action": "stopped", "state": "ResolveStopped", "claimant": "benchctl-doctor",
               "event": synthetic_stop_event(state_machine_arn, campaign_id)}
    try:
        resp = lambda_client(session).invoke(FunctionName=teardown_arn, Payload=json.dumps(payload).encode())
        body = resp["Payload"].read()
        answer = json.loads(body) if body else None
    except Exception as err:  # the invocation itself (permissions, throttling)
        return Check("stop path", False, f"could not invoke {teardown_arn}: {type(err).__name__}: {err}")
    if resp.get("FunctionError") or not isinstance(answer, dict):
        return Check("stop path", False, f"ResolveStopped ({teardown_arn}) failed on a synthetic stopped event: "
                     f"{str(answer)[:400]}")
    ok = answer.get("todo") is False and "nothing to do" in str(answer.get("why"))
    return Check("stop path", ok, f"ResolveStopped on a stopped execution of campaign {campaign_id} (none exists) "
                 f"answered: {answer.get('why')}" + ("" if ok else " (expected: nothing to do)"))


def scaling_verb_checks(session: Any, functions: dict[str, str]) -> Iterator[Check]:
    lam, iam, eks = session.client("lambda"), session.client("iam"), session.client("eks")
    for name in SCALING_FUNCTIONS:
        if name not in functions:
            continue
        conf = lam.get_function_configuration(FunctionName=functions[name])
        env = (conf.get("Environment") or {}).get("Variables") or {}
        cluster = env.get("BENCHCTL_CLUSTER", "")
        groups = [g for g in env.get("BENCHCTL_NODEGROUPS", "").split(",") if g]
        if not groups:
            yield Check(f"{name} scaling verbs", True, "no managed node group configured (BENCHCTL_NODEGROUPS)")
            continue
        denied, arns = [], []
        for group in groups:
            try:
                arn = eks.describe_nodegroup(clusterName=cluster, nodegroupName=group)["nodegroup"]["nodegroupArn"]
            except Exception as err:
                denied.append(f"node group {group} of cluster {cluster!r} not readable ({type(err).__name__})")
                continue
            arns.append(arn)
            results = iam.simulate_principal_policy(PolicySourceArn=conf["Role"], ActionNames=list(SCALING_ACTIONS),
                                                    ResourceArns=[arn])["EvaluationResults"]
            denied += [f"{r['EvalActionName']} on {group}: {r['EvalDecision']}" for r in results
                       if r.get("EvalDecision") != "allowed"]
        yield Check(f"{name} scaling verbs", not denied,
                    f"{conf['Role'].rsplit('/', 1)[-1]} may {', '.join(SCALING_ACTIONS)} on {', '.join(groups)} "
                    "(IAM policy simulation; an organization's SCPs are not simulated)" if not denied else
                    "IAM policy simulation of its role refuses: " + "; ".join(denied)
                    + " (the control-plane stack grants these on the configured node groups: redeploy it with "
                    "benchctl:nodegroups naming them)")


def checks(session: Any, state_machine_arn: str, functions: dict[str, str]) -> Iterator[Check]:
    """The stop path's lines, then the scaling verbs'."""
    yield from stop_path_checks(session, state_machine_arn, functions)
    yield from scaling_verb_checks(session, functions)
