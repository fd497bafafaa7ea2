"""What each allowed instance type holds (vCPUs, memory, GPUs, EFA interfaces): the admission allow-list's
ceilings (benchctl.aws.k8s.admission) and a NodePool's limits (benchctl.aws.k8s.nodepool) read it. Pure data."""

from __future__ import annotations

# vCPUs, memory (GiB) and GPUs of the instance types an Auto Mode pool may use: a NodePool's cpu and memory
# limits are nodes x these (Karpenter counts a node's whole capacity against its NodePool's limits). From
# the EC2 instance type pages (Accelerated computing: P4, P5, G6e; General purpose: M7i).
NODE_CAPACITY: dict[str, tuple[int, int, int]] = {
    "p4d.24xlarge": (96, 1152, 8),
    "p4de.24xlarge": (96, 1152, 8),
    "p5.48xlarge": (192, 2048, 8),
    "p5e.48xlarge": (192, 2048, 8),
    "p5en.48xlarge": (192, 2048, 8),
    "g6e.12xlarge": (48, 384, 4),
    "g6e.48xlarge": (192, 1536, 8),
    "m7i.2xlarge": (8, 32, 0),
}


# EFA interfaces of each instance type (the EC2 pages' "EFA" column; 0: none): a worker pod may ask at most the
# largest allowed node's
EFA_INTERFACES: dict[str, int] = {"p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32, "p5e.48xlarge": 32,
                                  "p5en.48xlarge": 16, "g6e.12xlarge": 1, "g6e.48xlarge": 4, "m7i.2xlarge": 0}


def node_capacity(instance_type: str) -> tuple[int, int, int]:
    """(vCPUs, memory GiB, GPUs) of ``instance_type``; a clear error for a type the table does not know."""
    try:
        return NODE_CAPACITY[instance_type]
    except KeyError:
        raise ValueError(f"instance type {instance_type!r}: its vCPUs and memory are not known (an Auto Mode "
                         f"NodePool's cpu and memory limits need them); known: {', '.join(sorted(NODE_CAPACITY))}"
                         ) from None
