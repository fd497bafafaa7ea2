"""The control plane's grants: each function's role gets what its row of FUNCTION_NEEDS says (the lake, the report,
the node groups, the runner identity), the load Job's role, and the placement of a function in the VPC."""

from __future__ import annotations

from typing import Any

import jsii
from aws_cdk import Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from cdk_nag import NagSuppressions

from benchctl.aws.selftest import DOCTOR_PREFIX
from benchctl.constants import (
    ATHENA_PREFIX,
    LAKE_PREFIX,
    POD_IDENTITY_ADDON,
    REPORTS_PREFIX,
    RUNNER_INPUTS_LISTING,
    RUNNER_PREFIX,
    RUNS_PREFIX,
    SPECS_PREFIX,
)
from benchctl.lake import schema
from stacks.config import Config
from stacks.function_needs import (
    QUOTA_ACTIONS,
    FunctionNeeds,
)
from stacks.results import ResultsStack

RUNTIME = lambda_.Runtime.PYTHON_3_13
RUNTIME_REASON = {
    "id": "AwsSolutions-L1",
    "reason": "python3.13 (Amazon Linux 2023, deprecation 2029-06-30) on purpose: the newest runtime whose "
              "interpreter the Lambda-environment test runs the functions in on this project's machines "
              "(tests/infra/test_lambda_environment.py), with the managed layers pinned for it in stacks/layers.py",
}
# the endings the status rule announces; a stopped execution's (Stop execution, its timeout) are announced by the
# stopped-campaign state machine once it has torn the campaign down (benchctl.campaign.stopped)
EXECUTION_STATUSES = ["SUCCEEDED", "FAILED"]
# the endings that start the stopped-campaign state machine: a stop, a timeout, and FAILED (States.Runtime,
# States.DataLimitExceeded and the 25,000-event history limit end an execution FAILED without running its own
# failure path: Step Functions developer guide, "Handling errors in Step Functions workflows"); a FAILED one whose
# failure path ran has a run record that is no longer running, which the machine leaves alone
STOPPED_STATUSES = ["ABORTED", "TIMED_OUT", "FAILED"]
# the endings of the stopped-campaign machine's own executions that the status topic announces
STOPPED_MACHINE_FAILURES = ["FAILED", "TIMED_OUT", "ABORTED"]


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


def campaign_machine_name(config: Config) -> str:
    """The campaign state machine's name, fixed so that a function's environment and role can name it (its ARN,
    its executions) without a reference cycle (state machine -> function -> role policy -> state machine)."""
    return f"benchctl-{config.env_name}-campaign"


def _wildcard_reason(*what: str) -> dict[str, object]:
    return {
        "id": "AwsSolutions-IAM5",
        "reason": "object keys, Glue tables/partitions and node-group update ids are created at run time; "
                  "each wildcard is confined to this stack's bucket prefix, database, workgroup or "
                  "configured node groups: " + ", ".join(what),
        "appliesTo": [{"regex": "/^Resource::.*$/"}],
    }


def _grant_handover(role: iam.Role, bucket: Any, *, write: bool) -> None:
    """The load runners' hand-over (``runner/``): read (and with ``write``, write); a missing key reads as
    missing only to a caller that may list it (S3RunStore._absent)."""
    role.add_to_policy(iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"] if write else ["s3:GetObject"],
                                           resources=[bucket.arn_for_objects(f"{RUNNER_PREFIX}/*")]))
    role.add_to_policy(iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn],
                                           conditions={"StringLike": {"s3:prefix": [f"{RUNNER_PREFIX}/*"]}}))


class ControlPlaneGrants(Stack):
    """The ControlPlaneStack's grants (its base class)."""

    # set by ControlPlaneStack.__init__
    functions: dict[str, lambda_.Function]
    lock_table: dynamodb.Table
    load_job_role: iam.Role
    roles: dict[str, iam.Role]
    state_machine: sfn.StateMachine
    vpc_placement: dict[str, Any]

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
        if needs.stop_events:  # DescribeExecution of the campaign state machine's executions only (by its fixed name)
            role.add_to_policy(iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[
                f"arn:{self.partition}:states:{self.region}:{self.account}:execution:"
                f"{campaign_machine_name(config)}:*"]))

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

    def _placement(self, in_vpc: bool, role: iam.Role) -> dict[str, Any]:
        """Function keyword arguments for the VPC placement (none outside it). A function in a VPC needs the
        network-interface actions; CDK does not add them to a role it is given, so they come here, as AWS's
        own managed policy for exactly that (AWSLambdaVPCAccessExecutionRole)."""
        if not (in_vpc and self.vpc_placement):
            return {}
        role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name(
            "service-role/AWSLambdaVPCAccessExecutionRole"))
        return self.vpc_placement

    def _vpc_suppressions(self, in_vpc: bool) -> list[dict[str, Any]]:
        if not (in_vpc and self.vpc_placement):
            return []
        return [{"id": "AwsSolutions-IAM4", "reason": "AWSLambdaVPCAccessExecutionRole, which Lambda needs in a "
                 "VPC: the network-interface actions (ec2:CreateNetworkInterface and co.) support no resource "
                 "scoping", "appliesTo": ["Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                                          "AWSLambdaVPCAccessExecutionRole"]}]
