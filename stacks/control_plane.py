"""Control-plane stack: one Lambda per handler, the campaign state machine from the ASL file, how runs
start (console, ``benchctl start``, an optional EventBridge Scheduler schedule) and who hears of
their end (an EventBridge rule on execution status changes -> an SNS topic).

* The state machine is ``state_machines/campaign.asl.json`` itself, each ``${...FunctionArn}``
  substituted by the deployed function, exactly as the local engine substitutes its in-process ones;
  execution logging (ALL, to a log group kept for a year) and X-Ray tracing are on.
* Least privilege: every function has its own role naming only what it uses. All write the lake and
  the run store (every state records timeline rows), so all may put objects under ``lake/`` and
  ``runs/`` and register Glue partitions of this database; beyond that: Plan reads ``specs/`` and the
  Price List; Pools and Teardown describe/update the configured node groups of the one cluster;
  Serving/Load/Teardown/Pools describe the cluster (endpoint + CA for the Kubernetes API; the token is
  a presigned ``sts:GetCallerIdentity``, which needs no IAM permission); Report runs Athena queries in
  the workgroup and creates the views in the database. Kubernetes rights come from the cluster's
  access entry for these roles (README), not from IAM.
* Packaging without Docker: the code asset is this directory minus the local engine, tests and
  tooling; Powertools (with pydantic) comes from its public layer, pandas/pyarrow/awswrangler from
  the AWS SDK for pandas layer (every function writes parquet rows), PyYAML from
  ``build/lambda-layer`` (built by ``scripts/setup.sh`` with pip's ``--platform``).
* The load image (``stacks/images/load``: AIPerf 0.13.0) is a container image asset: synth only hashes
  its folder (no Docker); ``cdk deploy`` builds and pushes it, and the functions get its URI as
  ``BENCHCTL_LOAD_IMAGE``, the AIPerf and smoke Jobs' image unless a spec names another.
"""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk import CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from aws_cdk import aws_stepfunctions as sfn
from cdk_nag import NagSuppressions
from constructs import Construct

from lambdas import FUNCTIONS
from stacks.config import Config, ConfigError
from stacks.results import ATHENA_PREFIX, LAKE_PREFIX, REPORTS_PREFIX, RUNS_PREFIX, SPECS_PREFIX, ResultsStack

ROOT = Path(__file__).resolve().parents[1]
LAMBDA_LAYER_DIR = ROOT / "build" / "lambda-layer"
LOAD_IMAGE_DIR = ROOT / "stacks" / "images" / "load"
ASSET_EXCLUDES = [
    ".venv", ".git", ".ci", "runs", "cdk.out", "build", "tests", "bench", "examples", "stacks", "scripts",
    "*.pyc", "__pycache__", ".*_cache", "benchctl/local", "*.md", "Makefile",
]
EKS_FUNCTIONS = {"Plan", "Pools", "Serving", "Load", "Teardown"}  # Plan: the preflight
NODEGROUP_FUNCTIONS = {"Pools", "Teardown"}
LOCK_FUNCTIONS = {"Plan", "Teardown", "Report"}
EXECUTION_STATUSES = ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]


def _wildcard_reason(*what: str) -> dict[str, object]:
    return {
        "id": "AwsSolutions-IAM5",
        "reason": "object keys, Glue tables/partitions and node-group update ids are created at run time; "
                  "each wildcard is confined to this stack's bucket prefix, database, workgroup or "
                  "configured node groups: " + ", ".join(what),
        "appliesTo": [{"regex": "/^Resource::.*$/"}],
    }


class ControlPlaneStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: Config, results: ResultsStack,
                 **kwargs: object) -> None:
        super().__init__(scope, construct_id, **kwargs)  # type: ignore[arg-type]
        if not (LAMBDA_LAYER_DIR / "python").is_dir():
            raise ConfigError(f"{LAMBDA_LAYER_DIR}/python is missing: run scripts/setup.sh (it builds the "
                              "Lambda dependency layer offline-ready, without Docker)")
        bucket = results.bucket
        layers = [
            lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", config.powertools_layer_arn),
            lambda_.LayerVersion.from_layer_version_arn(self, "SdkPandas", config.sdk_pandas_layer_arn),
            lambda_.LayerVersion(self, "Deps", code=lambda_.Code.from_asset(str(LAMBDA_LAYER_DIR)),
                                 compatible_runtimes=[lambda_.Runtime.PYTHON_3_11],
                                 description="PyYAML for reading YAML specs"),
        ]
        code = lambda_.Code.from_asset(str(ROOT), exclude=ASSET_EXCLUDES)
        cluster_arn = f"arn:{self.partition}:eks:{self.region}:{self.account}:cluster/{config.cluster_name}"
        nodegroup_arns = [
            f"arn:{self.partition}:eks:{self.region}:{self.account}:nodegroup/{config.cluster_name}/{ng}/*"
            for ng in config.nodegroups
        ]
        env = {
            "BENCHCTL_ENGINE": "aws",
            "BENCHCTL_BUCKET": bucket.bucket_name,
            "BENCHCTL_LAKE_URI": f"s3://{bucket.bucket_name}/{LAKE_PREFIX}",
            "BENCHCTL_RUNS_URI": f"s3://{bucket.bucket_name}/{RUNS_PREFIX}",
            "BENCHCTL_DATABASE": results.database_name,
            "BENCHCTL_WORKGROUP": results.workgroup_name,
            "BENCHCTL_CLUSTER": config.cluster_name,
            "BENCHCTL_NODEGROUPS": ",".join(config.nodegroups),
            "POWERTOOLS_SERVICE_NAME": "benchctl",
            "POWERTOOLS_METRICS_NAMESPACE": "benchctl",
            "POWERTOOLS_LOG_LEVEL": "INFO",
        }
        self.lock_table = dynamodb.Table(
            self, "PoolLocks",
            partition_key=dynamodb.Attribute(name="pool", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute="expires_at",
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True),
            removal_policy=RemovalPolicy.DESTROY,  # locks only: nothing to keep once the stack is gone
        )
        env["BENCHCTL_LOCK_TABLE"] = self.lock_table.table_name
        load_image = ecr_assets.DockerImageAsset(self, "LoadImage", directory=str(LOAD_IMAGE_DIR),
                                                 platform=ecr_assets.Platform.LINUX_AMD64)
        env["BENCHCTL_LOAD_IMAGE"] = load_image.image_uri
        self.functions: dict[str, lambda_.Function] = {}
        for var, handler in FUNCTIONS.items():
            name = var.removesuffix("FunctionArn")
            log_group = logs.LogGroup(self, f"{name}Logs", retention=logs.RetentionDays.ONE_YEAR,
                                      removal_policy=RemovalPolicy.RETAIN)
            role = iam.Role(self, f"{name}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                            description=f"benchctl {name} function: only what that state uses")
            role.add_to_policy(iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]))
            self._grant_lake(role, results)
            if name in LOCK_FUNCTIONS:  # Plan takes the pool locks; Report and the abort path release them
                actions = ["dynamodb:GetItem", "dynamodb:DeleteItem"] + (["dynamodb:PutItem"] if name == "Plan" else [])
                role.add_to_policy(iam.PolicyStatement(actions=actions, resources=[self.lock_table.table_arn]))
            if name == "Plan":
                role.add_to_policy(iam.PolicyStatement(
                    actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{SPECS_PREFIX}/*")]))
                role.add_to_policy(iam.PolicyStatement(actions=["pricing:GetProducts"], resources=["*"]))
            if name in EKS_FUNCTIONS:
                role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster_arn]))
            if name in NODEGROUP_FUNCTIONS and nodegroup_arns:
                role.add_to_policy(iam.PolicyStatement(
                    actions=["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "eks:DescribeUpdate"],
                    resources=nodegroup_arns))
            if name == "Plan" and nodegroup_arns:
                role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=nodegroup_arns))
            if name == "Report":
                role.add_to_policy(iam.PolicyStatement(
                    actions=["athena:StartQueryExecution", "athena:GetQueryExecution", "athena:GetQueryResults",
                             "athena:StopQueryExecution", "athena:GetWorkGroup"],
                    resources=[results.workgroup_arn()]))
                role.add_to_policy(iam.PolicyStatement(
                    actions=["glue:CreateTable", "glue:UpdateTable", "glue:GetTables", "glue:GetDatabase"],
                    resources=results.glue_arns()))
                role.add_to_policy(iam.PolicyStatement(
                    actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                    resources=[bucket.arn_for_objects(f"{ATHENA_PREFIX}/*"), bucket.arn_for_objects(f"{REPORTS_PREFIX}/*")]))
                role.add_to_policy(iam.PolicyStatement(actions=["s3:GetBucketLocation"], resources=[bucket.bucket_arn]))
            fn = lambda_.Function(
                self,
                f"{name}Function",
                runtime=lambda_.Runtime.PYTHON_3_11,
                architecture=lambda_.Architecture.X86_64,
                handler=handler,
                code=code,
                layers=layers,
                role=role,
                log_group=log_group,
                timeout=Duration.minutes(5 if name != "Report" else 15),
                memory_size=1024 if name in ("Ingest", "Report") else 512,
                tracing=lambda_.Tracing.ACTIVE,
                environment=env,
            )
            NagSuppressions.add_resource_suppressions(fn, [
                {"id": "AwsSolutions-L1", "reason": "pinned to Python 3.11 on purpose: the version the code is "
                 "tested on (CI) and the one the Powertools and SDK-for-pandas layer ARNs are built for"}])
            NagSuppressions.add_resource_suppressions(role, [
                _wildcard_reason("lake/* and runs/* objects", "Glue tables of this database",
                                 "node-group update ids"),
                {"id": "AwsSolutions-IAM5", "reason": "X-Ray PutTraceSegments/PutTelemetryRecords and "
                 "pricing:GetProducts support no resource-level permissions",
                 "appliesTo": ["Resource::*"]},
            ], apply_to_children=True)
            self.functions[var] = fn

        sm_logs = logs.LogGroup(self, "CampaignLogs", retention=logs.RetentionDays.ONE_YEAR,
                                removal_policy=RemovalPolicy.RETAIN)
        self.state_machine = sfn.StateMachine(
            self,
            "Campaign",
            definition_body=sfn.DefinitionBody.from_string(
                (ROOT / "state_machines" / "campaign.asl.json").read_text(encoding="utf-8")
            ),
            definition_substitutions={var: fn.function_arn for var, fn in self.functions.items()},
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=sm_logs, level=sfn.LogLevel.ALL, include_execution_data=True),
            timeout=Duration.hours(48),
        )
        for fn in self.functions.values():
            fn.grant_invoke(self.state_machine)
        NagSuppressions.add_resource_suppressions(self.state_machine, [
            {"id": "AwsSolutions-IAM5", "reason": "Step Functions needs lambda:InvokeFunction on each "
             "function's versions (ARN:*) and log delivery/X-Ray actions that support no resource ARNs",
             "appliesTo": [{"regex": "/^Resource::.*$/"}]},
        ], apply_to_children=True)

        self._sweeper(config, results, code, layers, env, cluster_arn, nodegroup_arns)
        self._load_job_identity(config, results)
        self._notifications(config, results)
        if config.schedule is not None:
            self._schedule(config, results)
        CfnOutput(self, "StateMachineArn", value=self.state_machine.state_machine_arn)
        CfnOutput(self, "ExampleStartInput", value=json.dumps(
            {"spec_uri": f"s3://<bucket>/{SPECS_PREFIX}/seed-plan.yaml", "poll_seconds": 30}))

    # ---------------------------------------------------------------------------------------------
    def _grant_lake(self, role: iam.Role, results: ResultsStack) -> None:
        bucket = results.bucket
        role.add_to_policy(iam.PolicyStatement(
            actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            resources=[bucket.arn_for_objects(f"{LAKE_PREFIX}/*"), bucket.arn_for_objects(f"{RUNS_PREFIX}/*")]))
        role.add_to_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{LAKE_PREFIX}/*", f"{RUNS_PREFIX}/*"]}}))
        role.add_to_policy(iam.PolicyStatement(
            actions=["glue:GetTable", "glue:GetPartition", "glue:GetPartitions", "glue:BatchCreatePartition",
                     "glue:CreatePartition", "glue:BatchGetPartition"],
            resources=results.glue_arns()))

    def _sweeper(self, config: Config, results: ResultsStack, code: lambda_.Code, layers: list[lambda_.ILayerVersion],
                 env: dict[str, str], cluster_arn: str, nodegroup_arns: list[str]) -> None:
        """A scheduled function that tears down what ended campaigns left (``benchctl.aws_sweep``)."""
        log_group = logs.LogGroup(self, "SweepLogs", retention=logs.RetentionDays.ONE_YEAR,
                                  removal_policy=RemovalPolicy.RETAIN)
        role = iam.Role(self, "SweepRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description="benchctl sweeper: tear down campaigns whose execution ended")
        role.add_to_policy(iam.PolicyStatement(
            actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]))
        self._grant_lake(role, results)
        role.add_to_policy(iam.PolicyStatement(actions=["dynamodb:Scan", "dynamodb:GetItem", "dynamodb:DeleteItem"],
                                               resources=[self.lock_table.table_arn]))
        role.add_to_policy(iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[
            f"arn:{self.partition}:states:{self.region}:{self.account}:execution:"
            f"{self.state_machine.state_machine_name}:*"]))
        role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster_arn]))
        if nodegroup_arns:
            role.add_to_policy(iam.PolicyStatement(
                actions=["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "eks:DescribeUpdate"],
                resources=nodegroup_arns))
        self.sweep_function = lambda_.Function(
            self, "SweepFunction", runtime=lambda_.Runtime.PYTHON_3_11, handler="lambdas.sweep.handler",
            code=code, layers=layers, role=role, log_group=log_group, timeout=Duration.minutes(15),
            memory_size=512, tracing=lambda_.Tracing.ACTIVE,
            environment={**env, "BENCHCTL_NAMESPACE": config.namespace})
        NagSuppressions.add_resource_suppressions(self.sweep_function, [
            {"id": "AwsSolutions-L1", "reason": "pinned to Python 3.11 on purpose: the version the code is "
             "tested on (CI) and the one the Powertools and SDK-for-pandas layer ARNs are built for"}])
        NagSuppressions.add_resource_suppressions(role, [
            _wildcard_reason("lake/* and runs/* objects", "Glue tables of this database", "executions of this "
                             "state machine", "node-group update ids"),
            {"id": "AwsSolutions-IAM5", "reason": "X-Ray PutTraceSegments/PutTelemetryRecords support no "
             "resource-level permissions", "appliesTo": ["Resource::*"]},
        ], apply_to_children=True)
        events.Rule(self, "SweepSchedule", description="benchctl sweeper: ended campaigns' leftovers",
                    schedule=events.Schedule.expression(config.sweep_schedule),
                    targets=[targets.LambdaFunction(self.sweep_function)])

    def _load_job_identity(self, config: Config, results: ResultsStack) -> None:
        """What the AIPerf Jobs in the cluster may do (EKS Pod Identity for their service account): read
        a step's generated inputs and write its artifacts, under the raw prefix, nothing else."""
        bucket = results.bucket
        role = iam.Role(self, "LoadJobRole", assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"),
                        description="benchctl AIPerf Jobs: upload a step's artifacts to the raw prefix")
        role.assume_role_policy.add_statements(iam.PolicyStatement(  # type: ignore[union-attr]
            actions=["sts:TagSession"], principals=[iam.ServicePrincipal("pods.eks.amazonaws.com")]))
        role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject", "s3:GetObject"],
                                               resources=[bucket.arn_for_objects(f"{LAKE_PREFIX}/raw/*")]))
        NagSuppressions.add_resource_suppressions(role, [_wildcard_reason("lake/raw/* objects of each step")],
                                                  apply_to_children=True)
        eks.CfnPodIdentityAssociation(self, "LoadJobIdentity", cluster_name=config.cluster_name,
                                      namespace=config.namespace, service_account=config.load_service_account,
                                      role_arn=role.role_arn)

    def _notifications(self, config: Config, results: ResultsStack) -> None:
        key = kms.Key(self, "TopicKey", enable_key_rotation=True, removal_policy=RemovalPolicy.RETAIN,
                      description="benchctl campaign notifications")
        key.grant_encrypt_decrypt(iam.ServicePrincipal("events.amazonaws.com"))
        self.topic = sns.Topic(self, "CampaignStatus", master_key=key, enforce_ssl=True,
                               display_name="benchctl campaign status")
        if config.notify_email:
            self.topic.add_subscription(subs.EmailSubscription(config.notify_email))
        self.status_rule = events.Rule(
            self,
            "CampaignStatusRule",
            description="benchctl campaign executions that ended (succeeded, failed, timed out, aborted)",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={"stateMachineArn": [self.state_machine.state_machine_arn], "status": EXECUTION_STATUSES},
            ),
            targets=[targets.SnsTopic(self.topic, message=events.RuleTargetInput.from_text(
                f"benchctl campaign {events.EventField.from_path('$.detail.name')} ended: "
                f"{events.EventField.from_path('$.detail.status')}. Report: s3://{results.bucket.bucket_name}/"
                f"{REPORTS_PREFIX}/{events.EventField.from_path('$.detail.name')}/report.html (written when the "
                f"Report state ran). Execution: {events.EventField.from_path('$.detail.executionArn')}"))],
        )
        CfnOutput(self, "StatusTopicArn", value=self.topic.topic_arn)

    def _schedule(self, config: Config, results: ResultsStack) -> None:
        assert config.schedule is not None
        sched = config.schedule
        spec_uri = f"s3://{results.bucket.bucket_name}/{sched.spec_key}"
        role = iam.Role(self, "ScheduleRole", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"),
                        description="benchctl schedule: may only start the campaign state machine")
        role.add_to_policy(iam.PolicyStatement(actions=["states:StartExecution"],
                                               resources=[self.state_machine.state_machine_arn]))
        self.schedule = scheduler.CfnSchedule(
            self,
            "CampaignSchedule",
            description=f"starts a benchctl campaign of {sched.spec_key}",
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
