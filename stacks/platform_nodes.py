"""The managed node groups of a new platform (``benchctl:platform=new``, capacity ``nodegroups``):

* ``benchctl-cpu`` (:data:`CPU_NODEGROUP`): one node of ``benchctl:cpu_instance_type`` for the platform's
  pods and the load Jobs (the EKS standard AL2023 AMI, every subnet);
* one GPU group per ``benchctl:nodegroups`` name: the accelerated AL2023 NVIDIA AMI, a launch template with
  every EFA interface the type has, in a cluster placement group, one subnet, IMDS one hop; 0 nodes until a
  campaign scales it, at most ``ceilings.max_nodes_per_pool``;
* the rehearsal's CPU group (:data:`REHEARSAL_SPEC`'s node-group pool, ``benchctl-rehearsal``): the standard
  AMI, no placement group, every subnet, a root volume for the Dynamo runtime image its mocker workers pull;
  0 nodes until the rehearsal scales it. Its name, instance type and size come from the rehearsal example
  itself, so that the spec a user runs first finds it (``benchctl doctor`` says so).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks

from benchctl.spec.model import PoolSpec, load_spec
from stacks.cluster_objects import ROOT
from stacks.config import Config, ConfigError

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


def make_nodegroups(scope: Any, cluster: eks.Cluster, config: Config, subnets: list[ec2.ISubnet]) -> list[Any]:
    """The CPU group, the GPU groups and the rehearsal's group on ``cluster``; returns the CPU group (what the
    platform's pods need first). The groups the functions may scale are ``config.nodegroups`` and the
    rehearsal's (:func:`rehearsal_nodegroup`)."""
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
    # one subnet (AZ) for the GPU groups: a cluster placement group is in one AZ, EFA traffic stays in it
    gpu_subnet = ec2.SubnetSelection(subnets=subnets[:1])
    for name in c.nodegroups:
        itype = c.gpu_instance_types[name]
        cid = "".join(p.capitalize() for p in name.split("-"))
        pg = ec2.CfnPlacementGroup(scope, f"{cid}Placement", strategy="cluster")
        efa = EFA_INTERFACES.get(itype, 0)
        data: dict[str, Any] = {
            "placement": ec2.CfnLaunchTemplate.PlacementProperty(group_name=pg.ref),
            "metadata_options": ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_tokens="required", http_put_response_hop_limit=GPU_IMDS_HOP_LIMIT),
            "block_device_mappings": [ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
                device_name="/dev/xvda", ebs=ec2.CfnLaunchTemplate.EbsProperty(
                    volume_size=GPU_ROOT_GIB, volume_type="gp3", encrypted=True, delete_on_termination=True))],
        }
        if efa:  # EKS: interfaces in the template must name the cluster security group themselves
            data["network_interfaces"] = [ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
                device_index=0 if i == 0 else 1, network_card_index=i, interface_type="efa",
                groups=[cluster.cluster_security_group_id], delete_on_termination=True) for i in range(efa)]
        lt = ec2.CfnLaunchTemplate(scope, f"{cid}LaunchTemplate", launch_template_data=ec2.CfnLaunchTemplate.
                                   LaunchTemplateDataProperty(**data))
        cluster.add_nodegroup_capacity(
            f"{cid}Nodes", nodegroup_name=name, instance_types=[ec2.InstanceType(itype)],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA, min_size=0, desired_size=0,
            max_size=c.ceilings.max_nodes_per_pool, subnets=gpu_subnet,
            launch_template_spec=eks.LaunchTemplateSpec(id=lt.ref, version=lt.attr_latest_version_number),
            labels={"benchctl.io/pool": name, "benchctl.io/efa": str(efa > 0).lower()})
    return [cpu]
