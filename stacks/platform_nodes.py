"""The managed node groups of a new platform (``benchctl:platform=new``, capacity ``nodegroups``):

* ``benchctl-cpu`` (:data:`CPU_NODEGROUP`): one node of ``benchctl:cpu_instance_type`` for the platform's
  pods and the load Jobs (the EKS standard AL2023 AMI, every subnet);
* one GPU group per ``benchctl:nodegroups`` name: the accelerated AL2023 NVIDIA AMI, a launch template with
  every EFA interface the type has, in a cluster placement group (its name a CfnOutput, ``<Group>PlacementGroup``,
  so that an ODCR can be made in it), one subnet, IMDS one hop, tainted ``nvidia.com/gpu`` (NoSchedule: only pods
  that tolerate it, the GPU workers and the GPU DaemonSets, land there); 0 nodes until a campaign scales it, at
  most ``ceilings.max_nodes_per_pool``. Its capacity (``benchctl:gpu_capacity``, :func:`gpu_subnet`,
  :func:`capacity_launch_data`): the subnet named, or the subnet of the zone named, else the first subnet; and
  On-Demand, a targeted On-Demand Capacity Reservation, or a Capacity Block for ML;
* the rehearsal's CPU group (:data:`REHEARSAL_SPEC`'s node-group pool, ``benchctl-rehearsal``): the standard
  AMI, no placement group, every subnet, a root volume for the Dynamo runtime image its mocker workers pull;
  0 nodes until the rehearsal scales it. Its name, instance type and size come from the rehearsal example
  itself, so that the spec a user runs first finds it (``benchctl doctor`` says so).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

from benchctl.spec.model import PoolSpec, load_spec
from stacks.cluster_objects import ROOT
from stacks.config import Config, ConfigError
from stacks.gpu_capacity import GpuCapacity

# EFA interfaces per instance type, one per network card (EC2 user guide, "Supported instance types" for
# EFA; p4d.24xlarge: 4 network cards, g6e.12xlarge: 1): a launch template gets one efa interface per card
EFA_INTERFACES = {"p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32, "g6e.12xlarge": 1,
                  "g6e.24xlarge": 2, "g6e.48xlarge": 4, "g6e.8xlarge": 1, "g6e.16xlarge": 1}
GPU_ROOT_GIB = 200  # the Dynamo vLLM runtime image alone is ~20 GB compressed; room for two versions and logs
CPU_ROOT_GIB = 100
# the rehearsal's mocker workers run the same Dynamo runtime image as the GPU workers (over 12 GB compressed)
REHEARSAL_ROOT_GIB = 100
# IMDS: one hop on GPU nodes (no pod there needs it; host-network DaemonSets are one hop away): no pod takes the node
# role. The CPU groups keep EKS's default: the EFS CSI controller there reads its region from IMDS (aws-efs-csi-driver #362)
GPU_IMDS_HOP_LIMIT = 1
CPU_NODEGROUP = "benchctl-cpu"
REHEARSAL_SPEC = "examples/aws-rehearsal.yaml"  # the rehearsal (docs/howto/rehearsal.md) the platform makes room for
# the taint of every GPU node (EKS node group taints, key nvidia.com/gpu, effect NO_SCHEDULE): the GPU workers and the
# NVIDIA/EFA device plugins and DCGM exporter tolerate it; the Frontend, load Jobs and platform pods do not
GPU_TAINT_KEY = "nvidia.com/gpu"


def gpu_subnet(name: str, config: Config, subnets: list[ec2.ISubnet],
               zone_subnets: dict[str, ec2.ISubnet]) -> ec2.ISubnet:
    """The one subnet of GPU group ``name``: ``benchctl:gpu_capacity``'s subnet_id (one of benchctl:subnet_ids,
    which ``subnets`` holds in that order), or the subnet the stack's VPC made in its zone (``zone_subnets``: an
    environment-agnostic stack cannot look a zone up, so the VPC is made in the named zones, stacks/platform.py),
    else the first subnet (a cluster placement group is in one zone; EFA traffic stays in it)."""
    cap = config.gpu_capacity.get(name) or GpuCapacity()
    if cap.subnet_id:
        return subnets[list(config.subnet_ids).index(cap.subnet_id)]
    if cap.zone:
        if cap.zone not in zone_subnets:  # stacks.config refuses a zone with a given VPC; this is a wiring bug
            raise ConfigError(f"benchctl:gpu_capacity.{name}.zone {cap.zone!r}: the VPC has no subnet made in it "
                              f"(zones made: {sorted(zone_subnets)})")
        return zone_subnets[cap.zone]
    return subnets[0]


def capacity_launch_data(cap: GpuCapacity, instance_type: str) -> dict[str, Any]:
    """The launch template data a purchase option adds (EKS user guide, "Manage compute for AI/ML workloads on
    Amazon EKS with node groups": a Capacity Block needs ``InstanceMarketOptions.MarketType: capacity-block``,
    ``CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId`` and the block's
    ``InstanceType`` in the template; EC2 user guide, "Launch instances into an existing Capacity Reservation": a
    targeted ODCR is named by the same target). On-Demand adds nothing."""
    if cap.purchase == "on-demand":
        return {}
    data: dict[str, Any] = {"capacity_reservation_specification": ec2.CfnLaunchTemplate.
                            CapacityReservationSpecificationProperty(capacity_reservation_target=ec2.CfnLaunchTemplate.
                                                                     CapacityReservationTargetProperty(
                                                                         capacity_reservation_id=cap.reservation_id))}
    if cap.purchase == "capacity-block":
        data["instance_market_options"] = ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(
            market_type="capacity-block")
        data["instance_type"] = instance_type  # the node group then names none (EKS: not in both places)
    return data


def rehearsal_pool() -> PoolSpec:
    """The rehearsal example's CPU pool on a managed node group: what the platform makes for it."""
    spec = load_spec(ROOT / REHEARSAL_SPEC)
    pools = [p for p in spec.pools if p.provider == "managed-nodegroup" and p.gpus_per_node == 0 and p.nodegroup]
    if len(pools) != 1:
        raise ConfigError(f"{REHEARSAL_SPEC}: expected one CPU pool on a managed node group, found "
                          f"{[p.name for p in pools]}")
    return pools[0]


def rehearsal_nodegroup() -> str:
    return str(rehearsal_pool().nodegroup)


def make_nodegroups(scope: Any, cluster: eks.Cluster, config: Config, subnets: list[ec2.ISubnet],
                    zone_subnets: dict[str, ec2.ISubnet] | None = None) -> list[Any]:
    """The CPU group, the GPU groups and the rehearsal's group on ``cluster``; returns the CPU group (what the
    platform's pods need first). The groups the functions may scale are ``config.nodegroups`` and the
    rehearsal's (:func:`rehearsal_nodegroup`).

    A GPU group on a Capacity Block (EKS user guide, "Manage compute for AI/ML workloads on Amazon EKS with node
    groups", managed node groups): a custom launch template with the market type, the reservation target and the
    instance type; capacity type ``CAPACITY_BLOCK``; only the subnet of the block's zone; created at desired size 0
    (before the block is active launches fail) and kept at 0 when updated, as the page asks; the EKS accelerated
    AMI (``AL2023_x86_64_NVIDIA``; the AMI's platform must be the block's, Linux/UNIX); EKS itself adds a scheduled
    scale-in to 0 forty minutes before the block ends. No placement group: instances of a block are already placed
    together (EC2 user guide, "Work with Capacity Blocks": "no need to use a cluster placement group"). A targeted
    ODCR keeps the placement group: make the reservation in it (its name is an output; EC2 user guide, "Placement
    group rules and limitations", recommends reserving capacity explicitly in a cluster placement group)."""
    c = config
    cpu = cluster.add_nodegroup_capacity(
        "CpuNodes", nodegroup_name=CPU_NODEGROUP, instance_types=[ec2.InstanceType(c.cpu_instance_type)],
        ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD, min_size=1, desired_size=1, max_size=2,
        disk_size=CPU_ROOT_GIB, subnets=ec2.SubnetSelection(subnets=subnets),
        labels={"benchctl.io/pool": "cpu"})
    rehearsal = rehearsal_pool()
    if rehearsal.nodegroup in c.nodegroups or rehearsal.nodegroup == CPU_NODEGROUP:
        raise ConfigError(f"benchctl:nodegroups: {rehearsal.nodegroup!r} is the rehearsal's CPU node group "
                          f"({REHEARSAL_SPEC}), which the platform makes itself; name the GPU groups only")
    cluster.add_nodegroup_capacity(
        "RehearsalNodes", nodegroup_name=rehearsal.nodegroup, instance_types=[ec2.InstanceType(rehearsal.instance_type)],
        ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD, min_size=0, desired_size=0,
        max_size=max(1, rehearsal.max_nodes or 1), disk_size=REHEARSAL_ROOT_GIB,
        subnets=ec2.SubnetSelection(subnets=subnets), labels={"benchctl.io/pool": rehearsal.name})
    for name in c.nodegroups:
        itype = c.gpu_instance_types[name]
        cap = c.gpu_capacity.get(name) or GpuCapacity()
        cid = "".join(p.capitalize() for p in name.split("-"))
        efa = EFA_INTERFACES.get(itype, 0)
        data: dict[str, Any] = {
            **capacity_launch_data(cap, itype),
            "metadata_options": ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_tokens="required", http_put_response_hop_limit=GPU_IMDS_HOP_LIMIT),
            "block_device_mappings": [ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                device_name="/dev/xvda", ebs=ec2.CfnLaunchTemplate.EbsProperty(
                    volume_size=GPU_ROOT_GIB, volume_type="gp3", encrypted=True, delete_on_termination=True))],
        }
        if cap.purchase != "capacity-block":
            # its name is CloudFormation's (Ref): GroupName is in the CloudFormation reference now, but not in
            # aws-cdk-lib's CfnPlacementGroup nor cfn-lint's schema here; the output gives it to the ODCR
            pg = ec2.CfnPlacementGroup(scope, f"{cid}Placement", strategy="cluster")
            data["placement"] = ec2.CfnLaunchTemplate.PlacementProperty(group_name=pg.ref)
            CfnOutput(scope, f"{cid}PlacementGroup", value=pg.ref,
                      description=f"the cluster placement group of node group {name}: make its ODCR in it")
        if efa:  # EKS: interfaces in the template must name the cluster security group themselves
            data["network_interfaces"] = [ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                device_index=0 if i == 0 else 1, network_card_index=i, interface_type="efa",
                groups=[cluster.cluster_security_group_id], delete_on_termination=True) for i in range(efa)]
        lt = ec2.CfnLaunchTemplate(scope, f"{cid}LaunchTemplate", launch_template_data=ec2.CfnLaunchTemplate.
                                   LaunchTemplateDataProperty(**data))
        block = cap.purchase == "capacity-block"
        cluster.add_nodegroup_capacity(
            f"{cid}Nodes", nodegroup_name=name, instance_types=None if block else [ec2.InstanceType(itype)],
            capacity_type=eks.CapacityType.CAPACITY_BLOCK if block else None,  # EKS's default: On-Demand
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA, min_size=0, desired_size=0,
            max_size=c.ceilings.max_nodes_per_pool,
            subnets=ec2.SubnetSelection(subnets=[gpu_subnet(name, c, subnets, zone_subnets or {})]),
            launch_template_spec=eks.LaunchTemplateSpec(id=lt.ref, version=lt.attr_latest_version_number),
            taints=[eks.TaintSpec(key=GPU_TAINT_KEY, effect=eks.TaintEffect.NO_SCHEDULE)],
            labels={"benchctl.io/pool": name, "benchctl.io/efa": str(efa > 0).lower()})
    return [cpu]
