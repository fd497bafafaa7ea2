"""What each function's role may do beyond the lake and the run store, and how it runs: the rows the control
plane stack (``stacks/control_plane.py``) grants and configures each function from. Plain data, no CDK, so
that what reads the rows (the doctor's test of ``benchctl.aws.selftest.KUBERNETES_FUNCTIONS``) needs no CDK."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FunctionNeeds:
    """What one function's role may do beyond the lake and the run store, and how it runs."""

    kubernetes: bool = False  # calls the cluster's API: describes the cluster, has an access entry, the VPC placement
    nodegroups: bool = False  # describes and updates the configured node groups (scales pools, restores them)
    locks: tuple[str, ...] = ()  # DynamoDB actions on the pool-lock table
    specs: bool = False  # reads (and lists) specs/: an execution's spec_uri
    preflight: bool = False  # reads the Pod Identity Agent add-on, the node groups, the EC2 quotas (QUOTA_ACTIONS)
    report: bool = False  # Athena in the workgroup, the views' DDL in Glue, the results and report prefixes
    task_tokens: bool = False  # answers a callback state's task token itself (AwaitLoadEnd, when the end is in)
    lake_tables_only: bool = False  # writes only lake tables (not raw evidence) and the run store's load records
    # the load runners' hand-over (runner/<campaign>/: requests, tokens, ends): "write" reads and writes it
    # (Load), "read" reads it (Teardown and the sweeper stop a running load and read its end record)
    handover: str = ""
    # the campaign's runner identity (benchctl.aws.runner_identity): "create" makes its Pod Identity association
    # (iam:PassRole of the load Job role only) and removes it, "remove" only removes it
    runner_identity: str = ""
    # reads the campaign state machine's executions (states:DescribeExecution): a stop event is verified against
    # Step Functions before anything is torn down (benchctl.campaign.stopped)
    stop_events: bool = False
    timeout_minutes: int = 5
    memory_mb: int = 512


_RELEASE = ("dynamodb:GetItem", "dynamodb:DeleteItem")
FUNCTION_NEEDS: dict[str, FunctionNeeds] = {  # one row per handler of lambdas.FUNCTIONS
    "Plan": FunctionNeeds(kubernetes=True, locks=(*_RELEASE, "dynamodb:PutItem"), specs=True, preflight=True,
                          runner_identity="create"),
    "Pools": FunctionNeeds(kubernetes=True, nodegroups=True),
    "Serving": FunctionNeeds(kubernetes=True),
    "Load": FunctionNeeds(kubernetes=True, task_tokens=True, handover="write", runner_identity="create"),  # the doctor's runner Job
    "Ingest": FunctionNeeds(lake_tables_only=True, memory_mb=1024),  # parses what load pods wrote
    # Teardown takes a lock again (PutItem) only in the stopped-campaign machine's second pass (benchctl.campaign.stopped)
    "Teardown": FunctionNeeds(kubernetes=True, nodegroups=True, locks=(*_RELEASE, "dynamodb:PutItem"), runner_identity="remove",
                              handover="read", stop_events=True),
    "Report": FunctionNeeds(locks=_RELEASE, report=True, timeout_minutes=15, memory_mb=1024, runner_identity="remove"),
}
# what the preflight reads of the account's EC2 vCPU quotas and capacity (benchctl.aws.quotas), all read-only
QUOTA_ACTIONS = ("servicequotas:GetServiceQuota", "servicequotas:GetAWSDefaultServiceQuota",
                 "ec2:DescribeInstanceTypes", "ec2:DescribeInstances", "ec2:DescribeCapacityReservations",
                 "ec2:DescribeLaunchTemplateVersions",
                 # the zone offerings and node group subnets of the capacity check (benchctl.aws.capacity_checks)
                 "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeSubnets")
CEILINGS_FUNCTIONS = ("Plan", "Pools")  # BENCHCTL_CEILINGS (benchctl.planning.ceilings): Plan and ScalePools refuse past them
K8S_FUNCTIONS = {name for name, needs in FUNCTION_NEEDS.items() if needs.kubernetes}  # + the sweeper
