"""The platform's network (``stacks.platform``): a new VPC in the zones ``benchctl:gpu_capacity`` names (else CDK's
first two), with flow logs of rejected traffic, or the VPC and subnets ``benchctl:vpc_id``/``subnet_ids`` give.
"""

from __future__ import annotations

from typing import Any, cast

from aws_cdk import CfnCondition, Fn, RemovalPolicy, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.config import Config


def _zones(scope: Construct, config: Config) -> list[str]:
    """The Availability Zones of a new VPC: those ``benchctl:gpu_capacity`` names, in order, and with one named a
    second that differs from it (EKS wants subnets in two zones): the Region's first zone unless that is the one
    named, else its second, decided by a condition at deploy. None named: CDK's default (the first two)."""
    named = list(dict.fromkeys(cap.zone for cap in config.gpu_capacity.values() if cap.zone))
    if len(named) != 1:
        return named
    first, second = Fn.select(0, Fn.get_azs()), Fn.select(1, Fn.get_azs())
    is_first = CfnCondition(scope, "GpuZoneIsFirst", expression=Fn.condition_equals(first, named[0]))
    return [named[0], Fn.condition_if(is_first.logical_id, second, first).to_string()]

def new_network(scope: Construct, config: Config) -> tuple[ec2.IVpc, list[ec2.ISubnet], dict[str, ec2.ISubnet]]:
    """The platform's VPC (``benchctl:vpc_id``'s, or a new one with flow logs), its private subnets, and the subnet
    of each zone ``benchctl:gpu_capacity`` names (a new VPC's; none in a given one)."""
    if config.vpc_id:
        return (*given_network(scope, config), {})
    zones = _zones(scope, config)
    where: dict[str, Any] = {"availability_zones": zones} if zones else {"max_azs": 2}
    vpc = ec2.Vpc(scope, "Vpc", **where, nat_gateways=1, subnet_configuration=[
        ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
        ec2.SubnetConfiguration(name="nodes", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=19)])
    flow_logs = logs.LogGroup(scope, "VpcFlowLogs", retention=logs.RetentionDays.ONE_MONTH,
                              removal_policy=RemovalPolicy.DESTROY)
    vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs),
                     traffic_type=ec2.FlowLogTrafficType.REJECT)
    for subnet in [*vpc.public_subnets, *vpc.private_subnets]:
        if not Token.is_unresolved(subnet.availability_zone):  # a zone benchctl:gpu_capacity names, on purpose:
            # the reservation's (cfn-lint W3010 "avoid hardcoding availability zones" warns of it)
            cast(ec2.CfnSubnet, subnet.node.default_child).add_metadata(
                "cfn-lint", {"config": {"ignore_checks": ["W3010"]}})
    # the private subnets follow the VPC's zones in order: the named zones' come first
    zone_subnets = {z: vpc.private_subnets[i] for i, z in enumerate(zones) if not Token.is_unresolved(z)}
    return vpc, list(vpc.private_subnets), zone_subnets

def given_network(scope: Construct, config: Config) -> tuple[ec2.IVpc, list[ec2.ISubnet]]:
    """The VPC and subnets ``benchctl:vpc_id``/``subnet_ids`` name (an existing cluster may have none)."""
    c = config
    if not c.vpc_id:
        return None, []  # type: ignore[return-value]  # existing cluster, model storage skipped
    vpc = ec2.Vpc.from_vpc_attributes(scope, "GivenVpc", vpc_id=c.vpc_id,
                                      availability_zones=[f"az{i}" for i in range(len(c.subnet_ids))],
                                      private_subnet_ids=list(c.subnet_ids))
    return vpc, [ec2.Subnet.from_subnet_id(scope, f"GivenSubnet{i}", s) for i, s in enumerate(c.subnet_ids)]
