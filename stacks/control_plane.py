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
  add-on; Pools and Teardown describe/update the configured node groups of the one cluster; Teardown
  describes the campaign state machine's executions (a stop event verified before any teardown: the machine's
  name is fixed, ``benchctl-<env>-campaign``, so its ARN reaches the functions without a reference cycle); the
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

import yaml
from aws_cdk import CfnMapping, CfnOutput, CfnRule, Duration, Fn, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from cdk_nag import NagSuppressions
from constructs import Construct

from benchctl.aws.env import LambdaEnv
from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.campaign import asl
from benchctl.constants import (
    LAKE_PREFIX,
    LOCK_KEY_ATTRIBUTE,
    LOCK_TTL_ATTRIBUTE,
    RUNS_PREFIX,
    SPECS_PREFIX,
)
from benchctl.planning import ceilings
from lambdas import FUNCTIONS
from stacks import layers as managed
from stacks.config import Config, ConfigError
from stacks.control_plane_grants import RUNTIME, RUNTIME_REASON, _wildcard_reason, campaign_machine_name
from stacks.control_plane_ops import ControlPlaneOperations
from stacks.function_needs import (
    CEILINGS_FUNCTIONS,
    FUNCTION_NEEDS,
    K8S_FUNCTIONS,
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

assert RUNTIME.name == managed.RUNTIME


def rbac_groups(path: Path = RBAC_FILE) -> list[str]:
    """The Kubernetes groups the RBAC file binds (each function's access entry joins its own)."""
    groups = [s["name"] for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc
              and doc.get("kind") in ("ClusterRoleBinding", "RoleBinding")
              for s in doc.get("subjects") or [] if s.get("kind") == "Group"]
    if not groups:
        raise ConfigError(f"{path}: no binding to a Kubernetes group; the access entries need one")
    return sorted(set(groups))


class ControlPlaneStack(ControlPlaneOperations):
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
            load_role_arn=self.load_job_role.role_arn, log_level="INFO", platform_json=config.platform_provenance,
            campaign_machine_arn=f"arn:{self.partition}:states:{self.region}:{self.account}:stateMachine:"
                                 f"{campaign_machine_name(config)}")
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
                                 "node-group update ids", "the add-on's id",
                                 "executions of the campaign state machine (Teardown: a stop event verified)"),
                {"id": "AwsSolutions-IAM5", "reason": "X-Ray PutTraceSegments/PutTelemetryRecords"
                 + (" and states:SendTaskSuccess" if needs.task_tokens else "") + " support no "
                 "resource-level permissions", "appliesTo": ["Resource::*"]},
                *self._vpc_suppressions(needs.kubernetes),
            ], apply_to_children=True)
            self.functions[var] = fn
            self.roles[name] = role

        self.state_machine = self._state_machine(
            "Campaign", config, "campaign", asl.text(),
            {var: fn.function_arn for var, fn in self.functions.items()})
        # its name fixed, as the functions' environment (BENCHCTL_CAMPAIGN_MACHINE_ARN) and Teardown's role name it
        cast(sfn.CfnStateMachine, self.state_machine.node.default_child).state_machine_name = campaign_machine_name(config)
        for fn in self.functions.values():
            fn.grant_invoke(self.state_machine)
        NagSuppressions.add_resource_suppressions(self.state_machine, [
            {"id": "AwsSolutions-IAM5", "reason": "Step Functions needs lambda:InvokeFunction on each "
             "function's versions (ARN:*) and log delivery/X-Ray actions that support no resource ARNs",
             "appliesTo": [{"regex": "/^Resource::.*$/"}]},
        ], apply_to_children=True)

        self._sweeper(config, results, code, layers, env, cluster_arn, nodegroup_arns)
        self._notifications(config, results)
        self._stopped_campaigns(config, results)
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


