"""Control-plane stack: one Lambda per handler, the campaign state machine from the ASL file, how runs
start (console, ``benchctl start``, an optional EventBridge Scheduler schedule) and who hears of
their end (an EventBridge rule on execution status changes -> an SNS topic).

* The state machine is ``state_machines/campaign.asl.json`` itself, each ``${...FunctionArn}``
  substituted by the deployed function, exactly as the local engine substitutes its in-process ones;
  execution logging (ALL, without execution data: inputs and outputs carry task tokens; to a log group
  kept for a year) and X-Ray tracing are on.
* Least privilege: every function has its own role naming only what it uses, from one table
  (``FUNCTION_NEEDS``). All write the lake and the run store (every state records timeline rows), so all
  may put objects under ``lake/`` and ``runs/`` (none may delete one) and register Glue partitions of this
  database, except Ingest, which parses what load pods wrote: it puts only lake tables (not ``lake/raw/``)
  and the run store's load and first-failure records; beyond
  that: Plan reads and lists ``specs/`` and checks the cluster's node groups and Pod Identity Agent
  add-on; Pools and Teardown describe/update the configured node groups of the one cluster; the
  functions that call Kubernetes describe the cluster (endpoint + CA; the token is a presigned
  ``sts:GetCallerIdentity``, which needs no IAM permission); Plan takes the pool locks, Teardown and
  Report release them; Report runs Athena queries in the workgroup and creates the views; Plan (and Load,
  for the doctor's Job) associates a campaign's runner service account with the load Job role (EKS Pod
  Identity, passing that role only), Teardown, Report and the sweeper remove the association; only Load reads
  and writes the runner hand-over (``runner/``). The load Job role reaches one campaign's objects only: every
  one is named by its Pod Identity session's service account (``_load_job_role``). parliament lints every
  policy document (tests/infra).
* The sweeper (scheduled) raises after sweeping the others when one campaign's cleanup raised; an alarm
  on its errors (``SweepFailedAlarm``) notifies the status topic. The optional campaign schedule lives in a
  schedule group of its own, which its role's trust names (not the account's shared ``default``).
* Configuration: every function gets exactly the variables of ``benchctl.aws.env.LambdaEnv`` (the model
  the runtime parses); the bucket's prefixes are ``benchctl.constants``'. The Plan and Pools functions also
  get the deployment's ceilings (context ``benchctl:ceilings``) as ``BENCHCTL_CEILINGS``: recorded in the
  template, read by Plan and ScalePools, which refuse a spec past them (``benchctl.planning.ceilings``).
* Kubernetes rights: the stack creates an EKS access entry, in the Kubernetes group that
  ``stacks/kubernetes/benchctl-rbac.yaml`` binds, for exactly the roles that call Kubernetes
  (``kubernetes`` in ``FUNCTION_NEEDS``, and the sweeper), and outputs every role's ARN. With ``benchctl:vpc_id``/``subnet_ids`` those
  functions run in the given private subnets (for a cluster whose API endpoint is private).
* Runtime and layers (``stacks/layers.py``): python3.13; Powertools v3 and AWS SDK for pandas layers of
  pinned versions, their ARNs resolved for the Region the stack is deployed to (a Region without them
  stops the deployment at its first step, naming the Regions that have them); our own layer
  (``build/lambda-layer``, built by ``scripts/build_lambda.sh`` with pip's ``--platform``, no Docker)
  ships PyYAML and the boto3/botocore the code needs.
* The code asset is an allow-list (``benchctl`` without the local engine, ``lambdas``,
  ``state_machines``, ``sql``), so test caches or tooling never change its hash.
* The load image (``stacks/images/load``: AIPerf 0.13.0) is a container image asset: synth only hashes
  its folder (no Docker); ``cdk deploy`` builds and pushes it, and the functions get its URI as
  ``BENCHCTL_LOAD_IMAGE``, the AIPerf and smoke Jobs' image unless a spec names another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import jsii
import yaml
from aws_cdk import CfnMapping, CfnOutput, CfnRule, Duration, Fn, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
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

from benchctl.aws.env import LambdaEnv
from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.aws.selftest import DOCTOR_PREFIX
from benchctl.campaign import asl
from benchctl.constants import (
    ATHENA_PREFIX,
    LAKE_PREFIX,
    LOCK_KEY_ATTRIBUTE,
    LOCK_TTL_ATTRIBUTE,
    POD_IDENTITY_ADDON,
    REPORTS_PREFIX,
    RUNNER_INPUTS_LISTING,
    RUNNER_PREFIX,
    RUNS_PREFIX,
    SPECS_PREFIX,
    report_key,
)
from benchctl.lake import schema
from benchctl.planning import ceilings
from lambdas import FUNCTIONS
from stacks import layers as managed
from stacks.config import Config, ConfigError
from stacks.function_needs import (
    CEILINGS_FUNCTIONS,
    FUNCTION_NEEDS,
    K8S_FUNCTIONS,
    QUOTA_ACTIONS,
    FunctionNeeds,
)
from stacks.results import ResultsStack

ROOT = Path(__file__).resolve().parents[1]
LAMBDA_LAYER_DIR = ROOT / "build" / "lambda-layer"
RBAC_FILE = ROOT / "stacks" / "kubernetes" / "benchctl-rbac.yaml"
# the code asset: an allow-list, so nothing else in the work tree (caches, tooling, docs) ships or changes its hash
LOAD_IMAGE_DIR = ROOT / "stacks" / "images" / "load"
ASSET_EXCLUDES = [
    "*", ".*", "!benchctl", "!benchctl/**", "!lambdas", "!lambdas/**", "!state_machines",
    "!state_machines/campaign.asl.json", "!sql", "!sql/**", "benchctl/local", "**/__pycache__", "*.pyc",
    "*.egg-info",
]

EXECUTION_STATUSES = ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]
RUNTIME = lambda_.Runtime.PYTHON_3_13
assert RUNTIME.name == managed.RUNTIME
RUNTIME_REASON = {
    "id": "AwsSolutions-L1",
    "reason": "python3.13 (Amazon Linux 2023, deprecation 2029-06-30) on purpose: the newest runtime whose "
              "interpreter the Lambda-environment test runs the functions in on this project's machines "
              "(tests/infra/test_lambda_environment.py), with the managed layers pinned for it in stacks/layers.py",
}


def rbac_groups(path: Path = RBAC_FILE) -> list[str]:
    """The Kubernetes groups the RBAC file binds (each function's access entry joins its own)."""
    groups = [s["name"] for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc
              and doc.get("kind") in ("ClusterRoleBinding", "RoleBinding")
              for s in doc.get("subjects") or [] if s.get("kind") == "Group"]
    if not groups:
        raise ConfigError(f"{path}: no binding to a Kubernetes group; the access entries need one")
    return sorted(set(groups))


@jsii.implements(events.IRuleTarget)
class _TopicTarget:
    """An SNS topic as a rule target whose topic policy only lets this rule publish (aws:SourceArn), where
    CDK's own SnsTopic target would let any EventBridge rule of any account do so."""

    def __init__(self, topic: sns.Topic, message: events.RuleTargetInput, rule_arn: str, account: str) -> None:
        self.topic, self.message, self.rule_arn, self.account = topic, message, rule_arn, account

    def bind(self, rule: events.IRule, id: str | None = None) -> events.RuleTargetConfig:
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            actions=["sns:Publish"], principals=[iam.ServicePrincipal("events.amazonaws.com")],
            resources=[self.topic.topic_arn],
            conditions={"ArnEquals": {"aws:SourceArn": self.rule_arn},
                        "StringEquals": {"aws:SourceAccount": self.account}}))
        return events.RuleTargetConfig(arn=self.topic.topic_arn, input=self.message)


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
            lambda_.LayerVersion.from_layer_version_arn(self, "Powertools", self._powertools_arn(config)),
            lambda_.LayerVersion.from_layer_version_arn(self, "SdkPandas", self._sdk_pandas_arn(config)),
            lambda_.LayerVersion(self, "Deps", code=lambda_.Code.from_asset(str(LAMBDA_LAYER_DIR)),
                                 compatible_runtimes=[RUNTIME],
                                 description="benchctl: PyYAML and the boto3/botocore the code needs "
                                             "(requirements-layer.txt)"),
        ]
        self._check_region(config)
        code = lambda_.Code.from_asset(str(ROOT), exclude=ASSET_EXCLUDES)
        cluster_arn = f"arn:{self.partition}:eks:{self.region}:{self.account}:cluster/{config.cluster_name}"
        nodegroup_arns = [
            f"arn:{self.partition}:eks:{self.region}:{self.account}:nodegroup/{config.cluster_name}/{ng}/*"
            for ng in config.nodegroups
        ]
        self.vpc_placement = self._vpc(config)
        self.lock_table = dynamodb.Table(
            self, "PoolLocks",
            partition_key=dynamodb.Attribute(name=LOCK_KEY_ATTRIBUTE, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=LOCK_TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True),
            removal_policy=RemovalPolicy.DESTROY,  # locks only: nothing to keep once the stack is gone
        )
        if config.load_image:  # a prebuilt image (benchctl:load_image): nothing to build, no Docker at deploy
            load_image_uri = config.load_image
        else:
            load_image_uri = ecr_assets.DockerImageAsset(  # the build refuses a tag-only base unless told
                self, "LoadImage", directory=str(LOAD_IMAGE_DIR), platform=ecr_assets.Platform.LINUX_AMD64,
                build_args={"BASE_IMAGE": config.load_base_image,
                            "ALLOW_TAG_BASE": "1" if config.load_base_image_tag_ok else "0"}).image_uri
        self.load_job_role = self._load_job_role(config, results, cluster_arn)
        self.lambda_env = LambdaEnv(
            runs_uri=f"s3://{bucket.bucket_name}/{RUNS_PREFIX}", lake_uri=f"s3://{bucket.bucket_name}/{LAKE_PREFIX}",
            bucket=bucket.bucket_name, database=results.database_name, workgroup=results.workgroup_name,
            cluster=config.cluster_name, nodegroups=tuple(config.nodegroups), namespace=config.namespace,
            lock_table=self.lock_table.table_name, load_image=load_image_uri,
            load_role_arn=self.load_job_role.role_arn, log_level="INFO")
        env = self.lambda_env.to_env()
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        for var, handler in FUNCTIONS.items():
            name = var.removesuffix("FunctionArn")
            log_group = logs.LogGroup(self, f"{name}Logs", retention=logs.RetentionDays.ONE_YEAR,
                                      removal_policy=RemovalPolicy.RETAIN)
            role = iam.Role(self, f"{name}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                            description=f"benchctl {name} function: only what that state uses")
            role.add_to_policy(iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[log_group.log_group_arn]))
            needs = FUNCTION_NEEDS[name]
            self._grant_lake(role, results, tables_only=needs.lake_tables_only, name=name)
            self._grant_needs(role, needs, config, results, cluster_arn, nodegroup_arns)
            fn = lambda_.Function(
                self,
                f"{name}Function",
                runtime=RUNTIME,
                architecture=lambda_.Architecture.X86_64,
                handler=handler,
                code=code,
                layers=layers,
                role=role,
                log_group=log_group,
                timeout=Duration.minutes(needs.timeout_minutes),
                memory_size=needs.memory_mb,
                tracing=lambda_.Tracing.ACTIVE,
                # the deployment's ceilings, on the two functions that hold specs to them (Plan, ScalePools)
                environment={**env, **({ceilings.ENV_VAR: json.dumps(config.ceilings.to_json(), sort_keys=True,
                                                                       separators=(",", ":"))}
                                       if name in CEILINGS_FUNCTIONS else {})},
                **self._placement(needs.kubernetes, role),
            )
            NagSuppressions.add_resource_suppressions(fn, [RUNTIME_REASON])
            NagSuppressions.add_resource_suppressions(role, [
                _wildcard_reason("lake/* and runs/* objects", "runner/* objects (Load)", "Glue tables of this database",
                                 "node-group update ids", "the add-on's id"),
                {"id": "AwsSolutions-IAM5", "reason": "X-Ray PutTraceSegments/PutTelemetryRecords"
                 + (" and states:SendTaskSuccess" if needs.task_tokens else "") + " support no "
                 "resource-level permissions", "appliesTo": ["Resource::*"]},
                *self._vpc_suppressions(needs.kubernetes),
            ], apply_to_children=True)
            self.functions[var] = fn
            self.roles[name] = role

        # Under /aws/vendedlogs/ (Step Functions' log delivery then needs no per-group resource policy, whose
        # size is limited); the stack's own id in the name, so a redeploy after a destroy (the group is
        # retained) does not collide with the old group
        sm_logs = logs.LogGroup(
            self, "CampaignLogs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=RemovalPolicy.RETAIN,
            log_group_name=Fn.join("", [f"/aws/vendedlogs/states/benchctl-{config.env_name}-campaign-",
                                        Fn.select(2, Fn.split("/", self.stack_id))]))
        self.state_machine = sfn.StateMachine(
            self,
            "Campaign",
            definition_body=sfn.DefinitionBody.from_string(asl.text()),
            definition_substitutions={var: fn.function_arn for var, fn in self.functions.items()},
            tracing_enabled=True,
            # every event, but without its input and output: they carry task tokens (an AwaitLoadEnd's
            # $$.Task.Token), which answer a step (Step Functions developer guide, "Log levels")
            logs=sfn.LogOptions(destination=sm_logs, level=sfn.LogLevel.ALL, include_execution_data=False),
        )  # the 48 h timeout is the ASL's own TimeoutSeconds: CDK applies timeout= only to chain definitions
        for fn in self.functions.values():
            fn.grant_invoke(self.state_machine)
        NagSuppressions.add_resource_suppressions(self.state_machine, [
            {"id": "AwsSolutions-IAM5", "reason": "Step Functions needs lambda:InvokeFunction on each "
             "function's versions (ARN:*) and log delivery/X-Ray actions that support no resource ARNs",
             "appliesTo": [{"regex": "/^Resource::.*$/"}]},
        ], apply_to_children=True)

        self._sweeper(config, results, code, layers, env, cluster_arn, nodegroup_arns)
        self._notifications(config, results)
        self._sweep_alarm(config)
        if config.schedule is not None:
            self._schedule(config, results)
        self._access_entries(config)
        CfnOutput(self, "StateMachineArn", value=self.state_machine.state_machine_arn)
        for name, role in sorted(self.roles.items()):
            CfnOutput(self, f"{name}RoleArn", value=role.role_arn,
                      description=f"IAM role of the {name} function"
                      + (" (calls Kubernetes: has an access entry)" if name in self.k8s_roles else ""))
        CfnOutput(self, "ExampleStartInput", value=json.dumps(
            {"spec_uri": f"s3://<bucket>/{SPECS_PREFIX}/seed-plan.yaml", "poll_seconds": 30}))

    def _grant_needs(self, role: iam.Role, needs: FunctionNeeds, config: Config, results: ResultsStack,
                     cluster_arn: str, nodegroup_arns: list[str]) -> None:
        """A function's role: what its row of FUNCTION_NEEDS says, nothing else."""
        bucket = results.bucket
        if needs.locks:  # Plan takes the pool locks; Report and the abort path release them
            role.add_to_policy(iam.PolicyStatement(actions=list(needs.locks), resources=[self.lock_table.table_arn]))
        if needs.specs:
            role.add_to_policy(iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{SPECS_PREFIX}/*")]))
            role.add_to_policy(iam.PolicyStatement(  # so that a mistyped spec_uri reads as "no such spec"
                actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{SPECS_PREFIX}/", f"{SPECS_PREFIX}/*"]}}))
        if needs.preflight:  # the Pod Identity Agent add-on
            role.add_to_policy(iam.PolicyStatement(
                actions=["eks:DescribeAddon"], resources=[
                    f"arn:{self.partition}:eks:{self.region}:{self.account}:addon/{config.cluster_name}/"
                    f"{POD_IDENTITY_ADDON}/*"]))
        if needs.preflight:  # the GPU pools' EC2 vCPU quotas, current usage and capacity (benchctl.aws.quotas)
            role.add_to_policy(iam.PolicyStatement(actions=list(QUOTA_ACTIONS), resources=["*"]))
            NagSuppressions.add_resource_suppressions(role, [{
                "id": "AwsSolutions-IAM5", "appliesTo": ["Resource::*"],
                "reason": f"read-only {', '.join(QUOTA_ACTIONS)}: the EC2 Describe actions support no resource-level "
                          "permissions; the quota reads are granted on * as they name no resource of this stack"}],
                apply_to_children=True)
        if needs.kubernetes:
            role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster_arn]))
        if needs.nodegroups and nodegroup_arns:
            self._grant_nodegroups(role, cluster_arn, nodegroup_arns)
        if needs.preflight and nodegroup_arns:
            role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=nodegroup_arns))
        if needs.report:
            self._grant_report(role, results)
        if needs.task_tokens:  # SendTask* support no resource-level permissions (the token names the task)
            role.add_to_policy(iam.PolicyStatement(actions=["states:SendTaskSuccess"], resources=["*"]))
        if needs.handover:
            _grant_handover(role, bucket, write=needs.handover == "write")
        if needs.runner_identity:
            self._grant_runner_identity(role, config, cluster_arn, create=needs.runner_identity == "create")

    def _grant_runner_identity(self, role: iam.Role, config: Config, cluster_arn: str, *, create: bool) -> None:
        """A campaign's runner identity (benchctl.aws.runner_identity): list, describe and delete the Pod Identity
        associations of the cluster; with ``create``, create one and pass the load Job role (and no other role)
        to EKS Pod Identity."""
        association = (f"arn:{self.partition}:eks:{self.region}:{self.account}:podidentityassociation/"
                       f"{config.cluster_name}/*")
        role.add_to_policy(iam.PolicyStatement(actions=["eks:ListPodIdentityAssociations"], resources=[cluster_arn]))
        role.add_to_policy(iam.PolicyStatement(
            actions=["eks:DescribePodIdentityAssociation", "eks:DeletePodIdentityAssociation"], resources=[association]))
        if create:
            role.add_to_policy(iam.PolicyStatement(actions=["eks:CreatePodIdentityAssociation"],
                                                   resources=[cluster_arn]))
            role.add_to_policy(iam.PolicyStatement(actions=["iam:PassRole"], resources=[self.load_job_role.role_arn]))

    # ---------------------------------------------------------------------------------------------
    def _powertools_arn(self, config: Config) -> str:
        return config.powertools_layer_arn or managed.powertools_layer_arn(self.partition, self.region)

    def _sdk_pandas_arn(self, config: Config) -> str:
        if config.sdk_pandas_layer_arn:
            return config.sdk_pandas_layer_arn
        table = CfnMapping(self, "SdkPandasLayer", mapping={
            region: {"arn": arn} for region, arn in managed.SDK_PANDAS_LAYER_ARNS.items()})
        return table.find_in_map(self.region, "arn")

    def _check_region(self, config: Config) -> None:
        """The managed layers are Regional: deploying where they (or a given ARN) are not stops CloudFormation
        before anything is created, with a message naming the Regions that work."""
        given = [arn for arn in (config.powertools_layer_arn, config.sdk_pandas_layer_arn) if arn]
        if given:
            for i, arn in enumerate(given):
                CfnRule(self, f"LayerRegion{i}", assertions=[{
                    "assert": Fn.condition_equals(self.region, arn.split(":")[3]),
                    "assertDescription": f"layer {arn} is in {arn.split(':')[3]}; deploy the stack there or give "
                                         "benchctl:*_layer_arn of the deploy Region (or leave them unset)"}])
        if not config.sdk_pandas_layer_arn or not config.powertools_layer_arn:
            regions = managed.regions()
            CfnRule(self, "LayerRegions", assertions=[{
                "assert": Fn.condition_contains(regions, self.region),
                "assertDescription": f"the pinned Powertools {managed.POWERTOOLS_VERSION} and AWS SDK for pandas "
                                     f"{managed.SDK_PANDAS_VERSION} layers (stacks/layers.py) are published in: "
                                     f"{', '.join(regions)}; give benchctl:powertools_layer_arn and "
                                     "benchctl:sdk_pandas_layer_arn for another Region"}])

    def _placement(self, in_vpc: bool, role: iam.Role) -> dict[str, Any]:
        """Function keyword arguments for the VPC placement (none outside it). A function in a VPC needs the
        network-interface actions; CDK does not add them to a role it is given, so they come here, as AWS's
        own managed policy for exactly that (AWSLambdaVPCAccessExecutionRole)."""
        if not (in_vpc and self.vpc_placement):
            return {}
        role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(
            "service-role/AWSLambdaVPCAccessExecutionRole"))
        return self.vpc_placement

    def _vpc(self, config: Config) -> dict[str, Any]:
        """Placement of the functions that call Kubernetes: none, or the given VPC's private subnets (for a
        private-only cluster endpoint) with a security group of ours whose egress reaches it."""
        if not config.vpc_id:
            return {}
        subnets = [ec2.Subnet.from_subnet_id(self, f"Subnet{i}", sid) for i, sid in enumerate(config.subnet_ids)]
        vpc = ec2.Vpc.from_vpc_attributes(self, "Vpc", vpc_id=config.vpc_id,
                                          availability_zones=[f"az{i}" for i in range(len(subnets))],
                                          private_subnet_ids=list(config.subnet_ids))
        self.security_group = ec2.SecurityGroup(
            self, "FunctionsSecurityGroup", vpc=vpc, allow_all_outbound=True,
            description="benchctl functions that call the Kubernetes API of the cluster (allow 443 from this "
                        "group on the cluster security group)")
        CfnOutput(self, "FunctionsSecurityGroupId", value=self.security_group.security_group_id)
        return {"vpc": vpc, "vpc_subnets": ec2.SubnetSelection(subnets=subnets),
                "security_groups": [self.security_group]}

    def _vpc_suppressions(self, in_vpc: bool) -> list[dict[str, Any]]:
        if not (in_vpc and self.vpc_placement):
            return []
        return [{"id": "AwsSolutions-IAM4", "reason": "AWSLambdaVPCAccessExecutionRole, which Lambda needs in a "
                 "VPC: the network-interface actions (ec2:CreateNetworkInterface and co.) support no resource "
                 "scoping", "appliesTo": ["Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                                          "AWSLambdaVPCAccessExecutionRole"]}]

    def _grant_nodegroups(self, role: iam.Role, cluster_arn: str, nodegroup_arns: list[str]) -> None:
        role.add_to_policy(iam.PolicyStatement(
            actions=["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"], resources=nodegroup_arns))
        # DescribeUpdate is authorized on the cluster (service authorization reference), node group optional
        role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeUpdate"], resources=[cluster_arn, *nodegroup_arns]))

    def _grant_report(self, role: iam.Role, results: ResultsStack) -> None:
        bucket = results.bucket
        role.add_to_policy(iam.PolicyStatement(
            actions=["athena:StartQueryExecution", "athena:GetQueryExecution", "athena:GetQueryResults",
                     "athena:StopQueryExecution", "athena:GetWorkGroup"],
            resources=[results.workgroup_arn()]))
        role.add_to_policy(iam.PolicyStatement(
            actions=["glue:CreateTable", "glue:UpdateTable", "glue:GetTables", "glue:GetDatabase"],
            resources=results.glue_arns()))
        # Athena writes results with the caller's rights (its docs: the output location needs these)
        role.add_to_policy(iam.PolicyStatement(
            actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
            resources=[bucket.arn_for_objects(f"{ATHENA_PREFIX}/*"), bucket.arn_for_objects(f"{REPORTS_PREFIX}/*")]))
        role.add_to_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{ATHENA_PREFIX}/", f"{ATHENA_PREFIX}/*"]}}))
        # these two take no s3:prefix condition (service authorization reference)
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
                                               resources=[bucket.bucket_arn]))

    def _access_entries(self, config: Config) -> None:
        """An EKS access entry per role that calls Kubernetes, each in its own function's group
        (``FUNCTION_GROUPS``), which the RBAC file binds to that function's rights alone and the admission
        policies match (nothing else gets one). Needs the cluster's authentication mode API or
        API_AND_CONFIG_MAP."""
        self.k8s_roles = {n: r for n, r in self.roles.items() if n in K8S_FUNCTIONS}
        self.k8s_roles["Sweep"] = self.sweep_role
        if not config.create_access_entries:
            return
        bound = set(rbac_groups())
        for name, role in sorted(self.k8s_roles.items()):
            group = FUNCTION_GROUPS.get(name)
            if group is None or group not in bound:
                raise ConfigError(f"function {name}: its Kubernetes group {group!r} is not bound in {RBAC_FILE} "
                                  f"(bound: {', '.join(sorted(bound))})")
            eks.CfnAccessEntry(self, f"{name}AccessEntry", cluster_name=config.cluster_name,
                               principal_arn=role.role_arn, kubernetes_groups=[group], type="STANDARD")

    def _grant_lake(self, role: iam.Role, results: ResultsStack, *, tables_only: bool = False, name: str = "") -> None:
        """Read and write the lake and the run store (no s3:DeleteObject: no function deletes an object).
        ``tables_only`` (Ingest, which parses what load pods wrote): read both, but write only the lake's
        tables (not raw evidence) and, in the run store, the load records, the first-failure record and its
        own ``benchctl doctor`` scratch prefix (never a pool, claim, spec or campaign record)."""
        bucket = results.bucket
        everything = [bucket.arn_for_objects(f"{LAKE_PREFIX}/*"), bucket.arn_for_objects(f"{RUNS_PREFIX}/*")]
        writes = everything if not tables_only else [
            *(bucket.arn_for_objects(f"{LAKE_PREFIX}/{t}/*") for t in schema.table_names()),
            bucket.arn_for_objects(f"{RUNS_PREFIX}/*/loads/*"), bucket.arn_for_objects(f"{RUNS_PREFIX}/*/failure.json"),
            bucket.arn_for_objects(f"{RUNS_PREFIX}/{DOCTOR_PREFIX}/{name}/*")]  # the self-test's probe
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"], resources=everything))
        role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject", "s3:AbortMultipartUpload"], resources=writes))
        role.add_to_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{LAKE_PREFIX}/*", f"{RUNS_PREFIX}/*"]}}))
        role.add_to_policy(iam.PolicyStatement(
            actions=["glue:GetTable", "glue:GetPartition", "glue:GetPartitions", "glue:BatchCreatePartition",
                     "glue:CreatePartition", "glue:BatchGetPartition"],
            resources=results.glue_arns()))

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

    def _load_job_role(self, config: Config, results: ResultsStack, cluster_arn: str) -> iam.Role:
        """What a campaign's load runner Jobs may do (EKS Pod Identity; each campaign's own service account,
        named after the campaign and associated with this role by benchctl.aws.runner_identity at its Plan,
        removed at its end): every object is named by the session's ``kubernetes-service-account`` tag, which EKS
        Pod Identity sets (EKS user guide, pod-id-abac), so one campaign's runner reaches only its own: fetch a
        step's kept inputs (``aws s3 cp --recursive`` of its ``inputs/`` prefix: ListObjectsV2, listing only
        under the campaign's raw area, then GetObject) and upload its artifacts to the campaign's raw area; read
        a step's request and task token and write (only) its end record under ``runner/<campaign>/``; answer the
        step's task token (SendTask* support no resource-level permissions: the token names the task, and only
        the campaign's runner can read it). Its trust admits EKS Pod Identity for this account, cluster and
        namespace only (``aws:SourceAccount``, ``aws:RequestTag/eks-cluster-arn``, ``.../kubernetes-namespace``),
        with the session tags it needs (a session without them names no object)."""
        bucket = results.bucket
        sa = "${aws:PrincipalTag/kubernetes-service-account}"
        pods = iam.ServicePrincipal("pods.eks.amazonaws.com")
        trusted = {"StringEquals": {"aws:SourceAccount": self.account, "aws:RequestTag/eks-cluster-arn": cluster_arn,
                                    "aws:RequestTag/kubernetes-namespace": config.namespace}}
        role = iam.Role(self, "LoadJobRole", assumed_by=pods.with_conditions(trusted),
                        description="benchctl AIPerf Jobs: one campaign's step inputs, artifacts and hand-over, "
                                    "by the Pod Identity session's service account")
        role.assume_role_policy.add_statements(iam.PolicyStatement(  # type: ignore[union-attr]
            actions=["sts:TagSession"], principals=[pods], conditions=trusted))
        raw = f"{LAKE_PREFIX}/raw/campaign_id={sa}"
        role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject", "s3:GetObject"],
                                               resources=[bucket.arn_for_objects(f"{raw}/*")]))
        # listing is authorized on the bucket, narrowed by the prefix the request lists: only a step's inputs
        # of the campaign (without it the recursive copy's ListObjectsV2 is refused, and a missing key is 403)
        role.add_to_policy(iam.PolicyStatement(
            actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": [RUNNER_INPUTS_LISTING.replace("campaign_id=*",
                                                                                   f"campaign_id={sa}")]}}))
        role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject"],
                                               resources=[bucket.arn_for_objects(f"{RUNNER_PREFIX}/{sa}/*")]))
        role.add_to_policy(iam.PolicyStatement(actions=["s3:PutObject"],
                                               resources=[bucket.arn_for_objects(f"{RUNNER_PREFIX}/{sa}/*/end.json")]))
        role.add_to_policy(iam.PolicyStatement(
            actions=["states:SendTaskHeartbeat", "states:SendTaskSuccess", "states:SendTaskFailure"],
            resources=["*"]))
        NagSuppressions.add_resource_suppressions(role, [
            _wildcard_reason("lake/raw/campaign_id=<the session's service account>/* objects of each step",
                             "runner/<the session's service account>/* objects of each step"),
            {"id": "AwsSolutions-IAM5", "reason": "states:SendTaskHeartbeat/SendTaskSuccess/SendTaskFailure "
             "support no resource-level permissions (the task token names the task)", "appliesTo": ["Resource::*"]},
        ], apply_to_children=True)
        return role

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
            description="benchctl campaign executions that ended (succeeded, failed, timed out, aborted)",
            event_pattern=events.EventPattern(
                source=["aws.states"],
                detail_type=["Step Functions Execution Status Change"],
                detail={"stateMachineArn": [self.state_machine.state_machine_arn], "status": EXECUTION_STATUSES},
            ),
            targets=[cast(events.IRuleTarget, _TopicTarget(self.topic, message, rule_arn, self.account))],
        )
        CfnOutput(self, "StatusTopicArn", value=self.topic.topic_arn)

    def _sweep_alarm(self, config: Config) -> None:
        """An alarm on the sweeper's errors, to the status topic: it raises (SweepIncomplete) after sweeping
        every other campaign when one campaign's cleanup raised, so that campaign's GPUs get a person. Its
        name is fixed so that the topic and key policies can name it (aws:SourceArn) without a reference
        cycle (alarm -> topic -> key -> alarm)."""
        alarm_name = f"benchctl-{config.env_name}-sweep-failed"
        alarm_arn = f"arn:{self.partition}:cloudwatch:{self.region}:{self.account}:alarm:{alarm_name}"
        alarm = cloudwatch.Alarm(
            self, "SweepFailedAlarm", alarm_name=alarm_name, alarm_description="benchctl sweeper: a campaign's cleanup raised (the other "
            "campaigns were swept); its log names the campaign and the error",
            metric=self.sweep_function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
            threshold=1, evaluation_periods=1, comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        conditions = {"StringEquals": {"aws:SourceAccount": self.account}, "ArnLike": {"aws:SourceArn": alarm_arn}}
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            actions=["sns:Publish"], principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            resources=[self.topic.topic_arn], conditions=conditions))
        self.topic_key.add_to_resource_policy(iam.PolicyStatement(  # CloudWatch publishing to the encrypted topic
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            resources=["*"], conditions=conditions))

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


def _grant_handover(role: iam.Role, bucket: Any, *, write: bool) -> None:
    """The load runners' hand-over (``runner/``): read (and with ``write``, write); a missing key reads as
    missing only to a caller that may list it (S3RunStore._absent)."""
    role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"] if write else ["s3:GetObject"],
                                           resources=[bucket.arn_for_objects(f"{RUNNER_PREFIX}/*")]))
    role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
                                           conditions={"StringLike": {"s3:prefix": [f"{RUNNER_PREFIX}/*"]}}))
