"""Executions of a campaign state machine in moto's Step Functions, each ended the way a test needs it (RUNNING,
ABORTED, TIMED_OUT, FAILED): what the stop path's DescribeExecution reads (``benchctl.campaign.stopped``). moto
answers DescribeExecution as AWS does (``stateMachineArn``, ``name``, ``status``, ``input``, ``stopDate``; an
unknown execution raises ``ExecutionDoesNotExist``, a malformed ARN ``InvalidArn``), so a forged event is refused
by the same calls that would refuse it on AWS.

How each end is reached in moto's interpreter (execute_state_machine on): RUNNING holds on a task token nobody
answers (an SQS ``waitForTaskToken`` task); ABORTED is StopExecution during a Wait (the only state whose wait
moto ends on a stop: a test's ``record_asl_waits`` patch is lifted for those moments); TIMED_OUT is the token hold
under a one-second ``TimeoutSeconds``; FAILED is a Fail state."""

from __future__ import annotations

import json
import time
from typing import Any

from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

_MOTO_WAIT = WaitFunction._wait_interval  # moto's own: import this module before any test patches it
assert _MOTO_WAIT.__module__.startswith("moto."), f"WaitFunction._wait_interval was patched ({_MOTO_WAIT.__module__}) " \
    "before tests.fakes.campaign_executions was imported: import it at the top of the test module"
ENDS = ("RUNNING", "ABORTED", "TIMED_OUT", "FAILED")


def _definition(end: str, queue_url: str) -> dict[str, Any]:
    hold = {"Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
            "Parameters": {"QueueUrl": queue_url, "MessageBody": {"token.$": "$$.Task.Token"}}, "End": True}
    states = {"RUNNING": {"Hold": hold}, "TIMED_OUT": {"Hold": hold},
              "ABORTED": {"Hold": {"Type": "Wait", "Seconds": 86400, "End": True}},
              "FAILED": {"Hold": {"Type": "Fail", "Error": "CampaignBroke", "Cause": "a test's failed execution"}}}[end]
    return {"StartAt": "Hold", "TimeoutSeconds": 1 if end == "TIMED_OUT" else 86400, "States": states}


def campaign_execution(session: Any, machine_name: str, execution_name: str, end: str,
                       execution_input: dict[str, Any]) -> str:
    """Create the state machine ``machine_name`` (once; one end per machine in a world), start ``execution_name``
    with ``execution_input`` and bring it to ``end``; its ARN."""
    assert end in ENDS, end
    sfn, sqs = session.client("stepfunctions"), session.client("sqs")
    queue = sqs.create_queue(QueueName=f"hold-{machine_name}")["QueueUrl"]
    known = {m["name"]: m["stateMachineArn"] for m in sfn.list_state_machines()["stateMachines"]}
    machine = known.get(machine_name) or sfn.create_state_machine(
        name=machine_name, definition=json.dumps(_definition(end, queue)),
        roleArn="arn:aws:iam::123456789012:role/campaign")["stateMachineArn"]
    defined = json.loads(sfn.describe_state_machine(stateMachineArn=machine)["definition"])
    assert defined == _definition(end, queue), f"{machine_name} exists for another end than {end}"
    patched = WaitFunction.__dict__["_wait_interval"]
    WaitFunction._wait_interval = _MOTO_WAIT  # type: ignore[method-assign]
    try:
        arn = sfn.start_execution(stateMachineArn=machine, name=execution_name,
                                  input=json.dumps(execution_input))["executionArn"]
        deadline = time.monotonic() + 20
        while not any(e["type"] in ("WaitStateEntered", "TaskStateEntered", "FailStateEntered")
                      for e in sfn.get_execution_history(executionArn=arn)["events"]):
            assert time.monotonic() < deadline, "the campaign execution never reached its hold"
            time.sleep(0.05)
        if end == "ABORTED":
            sfn.stop_execution(executionArn=arn, error="Stopped", cause="a test stopped it")
        while (status := sfn.describe_execution(executionArn=arn)["status"]) != end:
            assert status == "RUNNING" and time.monotonic() < deadline, (status, end)
            time.sleep(0.05)
    finally:
        WaitFunction._wait_interval = patched  # type: ignore[method-assign]
    return str(arn)
