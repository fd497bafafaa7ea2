"""The stop path's reader of Step Functions: the campaign state machine's ARN from a function's environment
(``BENCHCTL_CAMPAIGN_MACHINE_ARN``, ``benchctl.aws.env``) and boto3's ``stepfunctions`` client, whose
``describe_execution`` (Step Functions API reference, DescribeExecution: ``executionArn``, ``stateMachineArn``,
``name``, ``status`` RUNNING | SUCCEEDED | FAILED | TIMED_OUT | ABORTED | PENDING_REDRIVE, ``input``, ``stopDate``;
errors ExecutionDoesNotExist, InvalidArn) is what ``benchctl.campaign.stopped`` verifies a stop event against.
The only place the stop path imports boto3. May import the foundation and the core."""

from __future__ import annotations

from collections.abc import Mapping

from benchctl.aws.env import VARIABLES, LambdaEnv
from benchctl.campaign.stopped import StopVerifier


def stop_verifier_from_env(env: Mapping[str, str]) -> StopVerifier:
    """The campaign state machine's ARN as the stack set it (``LambdaEnv``), and a Step Functions client of this
    function's Region. ValueError naming the variable when it is not set: no stop can be verified without it."""
    import boto3

    config = LambdaEnv.from_env(env)
    machine = config.campaign_machine_arn
    if not machine:
        raise ValueError(f"this function's environment has no {VARIABLES['campaign_machine_arn']} (the campaign "
                         "state machine's ARN; the control-plane stack sets it): no stop event can be verified")
    return StopVerifier(machine_arn=machine, executions=boto3.client("stepfunctions"))
