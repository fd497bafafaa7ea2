"""What runs beside the campaigns: the sweeper and its watchdog, the notifications of a campaign's end, the teardown
of a stopped execution's campaign (with an alarm on its dead-letter queue and a notification when that machine
itself fails), the sweep alarm and the schedule."""

from __future__ import annotations

from typing import cast

from aws_cdk import CfnOutput, Duration, Fn, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from cdk_nag import NagSuppressions

from benchctl.campaign import asl
from benchctl.constants import (
    REPORTS_PREFIX,
    report_key,
)
from stacks.config import Config
from stacks.control_plane_grants import (
    EXECUTION_STATUSES,
    RUNTIME,
    RUNTIME_REASON,
    STOPPED_MACHINE_FAILURES,
    STOPPED_STATUSES,
    ControlPlaneGrants,
    _grant_handover,
    _TopicTarget,
    _wildcard_reason,
)
from stacks.results import ResultsStack

# how often the sweeper's watchdog asks Step Functions whether each pool lock's execution still runs (a lost
# stopped-execution event is then caught within minutes, not at the hourly sweep); with no lock held it reads
# the lock table only (benchctl.aws.sweep.aws_sweep, watchdog=True)
WATCHDOG_SCHEDULE = "rate(5 minutes)"


class ControlPlaneOperations(ControlPlaneGrants):
    """The ControlPlaneStack's operations (its base class)."""

    def _sweeper(self, config: Config, results: ResultsStack, code: lambda_.Code, layers: list[lambda_.ILayerVersion],
                 env: dict[str, str], cluster_arn: str, nodegroup_arns: list[str]) -> None:
        """A scheduled function that tears down what ended campaigns left (``benchctl.aws.sweep``)."""
        log_group = logs.LogGroup(self, "SweepLogs", retention=logs.RetentionDays.ONE_YEAR,
                                  removal_policy=RemovalPolicy.RETAIN)
        role = iam.Role(self, "SweepRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description="benchctl sweeper: tear down campaigns whose execution ended")
        role.add_to_policy(iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]))
        self._grant_lake(role, results)
        _grant_handover(role, results.bucket, write=False)  # a running load's end record, read when stopping it
        role.add_to_policy(iam.PolicyStatement(actions=["dynamodb:Scan", "dynamodb:GetItem", "dynamodb:DeleteItem"],
                                               resources=[self.lock_table.table_arn]))
        role.add_to_policy(iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[
            f"arn:{self.partition}:states:{self.region}:{self.account}:execution:"
            f"{self.state_machine.state_machine_name}:*"]))
        role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster_arn]))
        if nodegroup_arns:
            self._grant_nodegroups(role, cluster_arn, nodegroup_arns)
        self._grant_runner_identity(role, config, cluster_arn, create=False)
        self.sweep_role = role
        self.sweep_function = lambda_.Function(
            self, "SweepFunction", runtime=RUNTIME, handler="lambdas.sweep.handler",
            code=code, layers=layers, role=role, log_group=log_group, timeout=Duration.minutes(15),
            memory_size=512, tracing=lambda_.Tracing.ACTIVE,
            environment=env, **self._placement(True, role))
        NagSuppressions.add_resource_suppressions(self.sweep_function, [RUNTIME_REASON])
        NagSuppressions.add_resource_suppressions(role, [
            _wildcard_reason("lake/* and runs/* objects", "Glue tables of this database", "Pod Identity associations of the cluster", "executions of this "
                             "state machine", "node-group update ids"),
            {"id": "AwsSolutions-IAM5", "reason": "X-Ray PutTraceSegments/PutTelemetryRecords support no "
             "resource-level permissions", "appliesTo": ["Resource::*"]},
            *self._vpc_suppressions(True),
        ], apply_to_children=True)
        self.roles["Sweep"] = role
        events.Rule(self, "SweepSchedule", description="benchctl sweeper: ended campaigns' leftovers",
                    schedule=events.Schedule.expression(config.sweep_schedule),
                    targets=[targets.LambdaFunction(self.sweep_function)])
        self.watchdog_rule = events.Rule(
            self, "SweepWatchdogSchedule", schedule=events.Schedule.expression(WATCHDOG_SCHEDULE),
            description="benchctl sweeper's watchdog: while a pool lock is held, whether its campaign's execution "
                        "still runs (one whose stopped-execution event was lost is torn down within minutes)",
            targets=[targets.LambdaFunction(self.sweep_function,
                                            event=events.RuleTargetInput.from_object({"watchdog": True}))])

    def _notifications(self, config: Config, results: ResultsStack) -> None:
        # the rule's name is fixed so that the key and topic policies can name it (aws:SourceArn) without a
        # reference cycle (rule -> topic -> key)
        rule_name = f"benchctl-{config.env_name}-campaign-status"
        rule_arn = f"arn:{self.partition}:events:{self.region}:{self.account}:rule/{rule_name}"
        self.topic_key = key = kms.Key(self, "TopicKey", enable_key_rotation=True, removal_policy=RemovalPolicy.RETAIN,
                      description="benchctl campaign notifications")
        key.add_to_resource_policy(iam.PolicyStatement(  # EventBridge publishing to the encrypted topic
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], principals=[iam.ServicePrincipal("events.amazonaws.com")],
            resources=["*"], conditions={"StringEquals": {"aws:SourceAccount": self.account},
                                         "ArnLike": {"aws:SourceArn": rule_arn}}))
        self.topic = sns.Topic(self, "CampaignStatus", master_key=key, enforce_ssl=True,
                               display_name="benchctl campaign status")
        if config.notify_email:
            self.topic.add_subscription(subs.EmailSubscription(config.notify_email))
        message = events.RuleTargetInput.from_text(
            f"benchctl campaign {events.EventField.from_path('$.detail.name')} ended: "
            f"{events.EventField.from_path('$.detail.status')}. Report: s3://{results.bucket.bucket_name}/"
            f"{report_key(events.EventField.from_path('$.detail.name'))} (written at every "
            f"ending the state machine reaches: how it ended, the teardown receipt, what completed). "
            f"Execution: {events.EventField.from_path('$.detail.executionArn')}")
        self.status_rule = events.Rule(
            self,
            "CampaignStatusRule",
            rule_name=rule_name,
            description="benchctl campaign executions that ended (succeeded, failed; a stopped one is announced "
                        "by the stopped-campaign state machine once torn down)",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={"stateMachineArn": [self.state_machine.state_machine_arn], "status": EXECUTION_STATUSES},
            ),
            targets=[cast(events.IRuleTarget, _TopicTarget(self.topic, message, rule_arn, self.account))],
        )
        CfnOutput(self, "StatusTopicArn", value=self.topic.topic_arn)

    def _stopped_campaigns(self, config: Config, results: ResultsStack) -> None:
        """An execution stopped from outside (Stop execution, or its timeout), or ended FAILED by an error no Catch
        takes, runs no state of its own: the rule on its status change starts the stopped-campaign state machine (``state_machines/stopped.asl.json``,
        ``benchctl.campaign.stopped``) at once with the event, which tears exactly that campaign down with the
        failure path's own functions (Teardown, Report) and announces it on the status topic. A delivery that
        fails after EventBridge's retries lands in a dead-letter queue (the hourly sweeper still ends the
        campaign)."""
        functions = {var: self.functions[var] for var in ("TeardownFunctionArn", "ReportFunctionArn")}
        self.stopped_machine = machine = self._state_machine(
            "StoppedCampaign", config, "stopped", asl.text(asl.STOPPED_ASL_PATH),
            {**{var: fn.function_arn for var, fn in functions.items()}, "StatusTopicArn": self.topic.topic_arn,
             "ReportsUri": f"s3://{results.bucket.bucket_name}/{REPORTS_PREFIX}"})
        for fn in functions.values():
            fn.grant_invoke(machine)
        self.topic.grant_publish(machine)
        self.topic_key.grant(machine, "kms:Decrypt", "kms:GenerateDataKey*")  # the topic is encrypted with it
        NagSuppressions.add_resource_suppressions(machine, [
            {"id": "AwsSolutions-IAM5", "reason": "Step Functions needs lambda:InvokeFunction on each "
             "function's versions (ARN:*), kms:GenerateDataKey* on the topic's key, and log delivery/X-Ray actions "
             "that support no resource ARNs", "appliesTo": [{"regex": "/^(Resource|Action)::.*$/"}]},
        ], apply_to_children=True)
        self.stopped_dlq = dlq = sqs.Queue(
            self, "StoppedCampaignDeadLetters", encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
            retention_period=Duration.days(14))
        NagSuppressions.add_resource_suppressions(dlq, [
            {"id": "AwsSolutions-SQS3", "reason": "this queue IS the dead-letter queue of the stopped-campaign "
             "rule's target (EventBridge deliveries that failed)"}])
        self.stopped_rule = events.Rule(
            self, "StoppedCampaignRule",
            description="benchctl campaign executions that ended without their own teardown (Stop execution, "
                        "timeout, FAILED by an uncatchable error): tear the campaign down at once",
            event_pattern=events.EventPattern(
                source=["aws.states"], detail_type=["Step Functions Execution Status Change"],
                detail={"stateMachineArn": [self.state_machine.state_machine_arn], "status": STOPPED_STATUSES}),
            targets=[targets.SfnStateMachine(machine, dead_letter_queue=dlq, retry_attempts=8,
                                             max_event_age=Duration.hours(2))],
        )
        CfnOutput(self, "StoppedCampaignStateMachineArn", value=machine.state_machine_arn)
        self._stopped_path_alarms(config, machine, dlq)

    def _stopped_path_alarms(self, config: Config, machine: sfn.StateMachine, dlq: sqs.Queue) -> None:
        """The stop path's own failures, to the status topic: an event EventBridge could not deliver to the
        stopped-campaign machine (a message in its dead-letter queue: an alarm on
        ``ApproximateNumberOfMessagesVisible`` > 0, the SQS metric CloudWatch publishes every minute for an active
        queue), and that machine's own executions ending FAILED, TIMED_OUT or ABORTED (a second rule on its
        status-change events). Their names are fixed so that the topic and key policies can name them
        (aws:SourceArn) without a reference cycle."""
        self.stopped_dlq_alarm = self._topic_alarm(
            "StoppedCampaignDeadLetterAlarm", f"benchctl-{config.env_name}-stopped-campaign-undelivered",
            "benchctl: a stopped campaign execution's event could not start the stopped-campaign state machine (it "
            "is in the dead-letter queue): its campaign may still hold GPUs; run benchctl sweep",
            dlq.metric_approximate_number_of_messages_visible(period=Duration.minutes(1), statistic="Maximum"),
            0, cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD)
        rule_name = f"benchctl-{config.env_name}-stopped-campaign-status"
        rule_arn = f"arn:{self.partition}:events:{self.region}:{self.account}:rule/{rule_name}"
        self.topic_key.add_to_resource_policy(iam.PolicyStatement(  # EventBridge publishing to the encrypted topic
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], principals=[iam.ServicePrincipal("events.amazonaws.com")],
            resources=["*"], conditions={"StringEquals": {"aws:SourceAccount": self.account},
                                         "ArnLike": {"aws:SourceArn": rule_arn}}))
        message = events.RuleTargetInput.from_text(
            f"benchctl: the stopped-campaign state machine's execution {events.EventField.from_path('$.detail.name')} "
            f"ended {events.EventField.from_path('$.detail.status')}: the stopped campaign it was tearing down may "
            f"still hold GPUs; run benchctl sweep. Execution: {events.EventField.from_path('$.detail.executionArn')}")
        self.stopped_status_rule = events.Rule(
            self, "StoppedCampaignStatusRule", rule_name=rule_name,
            description="benchctl stopped-campaign state machine executions that failed, timed out or were stopped",
            event_pattern=events.EventPattern(
                source=["aws.states"], detail_type=["Step Functions Execution Status Change"],
                detail={"stateMachineArn": [machine.state_machine_arn], "status": STOPPED_MACHINE_FAILURES}),
            targets=[cast(events.IRuleTarget, _TopicTarget(self.topic, message, rule_arn, self.account))])

    def _state_machine(self, cid: str, config: Config, log_name: str, definition: str,
                       substitutions: dict[str, str]) -> sfn.StateMachine:
        """A state machine of this stack: ``definition`` (an ASL file's text, its timeout its own TimeoutSeconds:
        CDK applies timeout= only to chain definitions) with its substitutions, traced, logging every event but
        without input and output (they carry task tokens, an AwaitLoadEnd's $$.Task.Token, which answer a step:
        Step Functions developer guide, "Log levels"). Its log group is under /aws/vendedlogs/ (Step Functions'
        log delivery then needs no per-group resource policy, whose size is limited), named with the stack's own
        id so that a redeploy after a destroy (the group is retained) does not collide with the old group."""
        sm_logs = logs.LogGroup(
            self, f"{cid}Logs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=RemovalPolicy.RETAIN,
            log_group_name=Fn.join("", [f"/aws/vendedlogs/states/benchctl-{config.env_name}-{log_name}-",
                                        Fn.select(2, Fn.split("/", self.stack_id))]))
        return sfn.StateMachine(
            self, cid, definition_body=sfn.DefinitionBody.from_string(definition),
            definition_substitutions=substitutions, tracing_enabled=True,
            logs=sfn.LogOptions(destination=sm_logs, level=sfn.LogLevel.ALL, include_execution_data=False))

    def _sweep_alarm(self, config: Config) -> None:
        """An alarm on the sweeper's errors, to the status topic: it raises (SweepIncomplete) after sweeping
        every other campaign when one campaign's cleanup raised, so that campaign's GPUs get a person. Its
        name is fixed so that the topic and key policies can name it (aws:SourceArn) without a reference
        cycle (alarm -> topic -> key -> alarm)."""
        self._topic_alarm(
            "SweepFailedAlarm", f"benchctl-{config.env_name}-sweep-failed", "benchctl sweeper: a campaign's cleanup "
            "raised (the other campaigns were swept); its log names the campaign and the error",
            self.sweep_function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
            1, cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD)

    def _topic_alarm(self, cid: str, alarm_name: str, description: str, metric: cloudwatch.IMetric, threshold: float,
                     comparison: cloudwatch.ComparisonOperator) -> cloudwatch.Alarm:
        """An alarm (one period; no data is not breaching) that publishes to the status topic, the topic and its
        key admitting CloudWatch for this alarm alone (aws:SourceArn, by the alarm's fixed name)."""
        alarm_arn = f"arn:{self.partition}:cloudwatch:{self.region}:{self.account}:alarm:{alarm_name}"
        alarm = cloudwatch.Alarm(
            self, cid, alarm_name=alarm_name, alarm_description=description, metric=metric, threshold=threshold,
            evaluation_periods=1, comparison_operator=comparison, treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        conditions = {"StringEquals": {"aws:SourceAccount": self.account}, "ArnLike": {"aws:SourceArn": alarm_arn}}
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            actions=["sns:Publish"], principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            resources=[self.topic.topic_arn], conditions=conditions))
        self.topic_key.add_to_resource_policy(iam.PolicyStatement(  # CloudWatch publishing to the encrypted topic
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            resources=["*"], conditions=conditions))
        return alarm

    def _schedule(self, config: Config, results: ResultsStack) -> None:
        assert config.schedule is not None
        sched = config.schedule
        spec_uri = f"s3://{results.bucket.bucket_name}/{sched.spec_key}"
        # a schedule group of its own (not the account's shared "default"): the role trusts only its schedules
        group = scheduler.CfnScheduleGroup(self, "CampaignScheduleGroup", name=f"benchctl-{config.env_name}-campaign")
        group_arn = f"arn:{self.partition}:scheduler:{self.region}:{self.account}:schedule-group/{group.name}"
        role = iam.Role(self, "ScheduleRole", assumed_by=iam.ServicePrincipal(
            "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": self.account},
                                                   "ArnEquals": {"aws:SourceArn": group_arn}}),
                        description="benchctl schedule: may only start the campaign state machine")
        role.add_to_policy(iam.PolicyStatement(actions=["states:StartExecution"],
                                               resources=[self.state_machine.state_machine_arn]))
        self.schedule = scheduler.CfnSchedule(
            self,
            "CampaignSchedule",
            description=f"starts a benchctl campaign of {sched.spec_key}",
            group_name=group.name,
            schedule_expression=sched.expression,
            schedule_expression_timezone=sched.timezone,
            flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
            state="ENABLED",
            target=scheduler.CfnSchedule.TargetProperty(
                arn=self.state_machine.state_machine_arn,
                role_arn=role.role_arn,
                input=self.to_json_string({"spec_uri": spec_uri, "poll_seconds": sched.poll_seconds}),
                retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(maximum_retry_attempts=0),
            ),
        )
