"""The rendered DynamoGraphDeployment read as kube-scheduler reads its pods, for ``benchctl.planning.placement``.

The placement check must hold what we SEND, not a second copy of the rules: :func:`deployment_pods` takes
each component's ``podTemplate`` (its labels, ``nodeSelector``, GPU/EFA requests and required pod
(anti-)affinity) as the operator stamps it onto every replica's pod, and :func:`planned_nodes` the plan's
nodes per pool with what each node offers. A scheduling rule the check does not model (another topology,
``matchExpressions``, node affinity) is an error here, so it cannot be skipped silently.

Pure: standard library and benchctl only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchctl.aws.k8s.common import GPU, scheduling
from benchctl.aws.k8s.render import EFA_RESOURCE
from benchctl.planning.placement import Labels, NodeShape, PodShape, node_slots
from benchctl.spec.deployment import PoolSpec

JSON = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"


def _terms(kind: str, affinity: JSON, where: str) -> tuple[Labels, ...]:
    out = []
    for term in (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []:
        sel = term.get("labelSelector") or {}
        if term.get("topologyKey") != HOSTNAME or set(sel) - {"matchLabels"} or set(term) - {"labelSelector",
                                                                                                "topologyKey"}:
            raise ValueError(f"{where}: required {kind} term {term} is not modelled by the placement check "
                             f"(only matchLabels with topologyKey {HOSTNAME})")
        out.append(frozenset((sel.get("matchLabels") or {}).items()))
    return tuple(out)


def deployment_pods(dgd: JSON, pools: Sequence[PoolSpec], campaign_id: str) -> list[tuple[PodShape, int]]:
    """(pod shape, replicas) of every component whose pods go to a pool's nodes (its ``nodeSelector``): GPU
    workers by their GPU requests, mocker workers on a CPU pool one of its nodes' ``pods_per_node`` each."""
    by_selector = {tuple(sorted((scheduling(campaign_id, p).get("nodeSelector") or {}).items())): p.name
                   for p in pools}
    cpu_pools = {p.name for p in pools if not p.gpus_per_node}
    out = []
    for comp in dgd["spec"]["components"]:
        tmpl = comp["podTemplate"]
        spec = tmpl.get("spec") or {}
        where = f"{dgd['metadata']['name']} component {comp['name']}"
        requests: dict[str, int] = {}
        for c in spec.get("containers") or []:
            for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
                if k in (GPU, EFA_RESOURCE):
                    requests[k] = requests.get(k, 0) + int(v)
        selector = tuple(sorted((spec.get("nodeSelector") or {}).items()))
        if by_selector.get(selector) in cpu_pools:
            requests[GPU] = 1  # a mocker worker: one slot of its CPU node
        if not requests.get(GPU):
            continue  # no GPU: not a worker (the frontend runs on the CPU nodes, without the GPU toleration)
        if selector not in by_selector:
            raise ValueError(f"{where}: nodeSelector {dict(selector)} names none of the pools {sorted(by_selector.values())}")
        affinity = spec.get("affinity") or {}
        if set(affinity) - {"podAffinity", "podAntiAffinity"}:
            raise ValueError(f"{where}: affinity {sorted(affinity)} is not modelled by the placement check")
        out.append((PodShape(comp["name"], by_selector[selector], requests[GPU], requests.get(EFA_RESOURCE, 0),
                             frozenset(((tmpl.get("metadata") or {}).get("labels") or {}).items()),
                             _terms("podAffinity", affinity, where), _terms("podAntiAffinity", affinity, where)),
                    int(comp.get("replicas", 1))))
    return out


def planned_nodes(pools: Sequence[PoolSpec], nodes: Mapping[str, int]) -> dict[str, tuple[NodeShape, int]]:
    """pool -> (what one node offers: its GPUs and, where the pool has EFA, its interfaces; how many)."""
    by_name = {p.name: p for p in pools}
    return {name: (NodeShape(node_slots(by_name[name]), by_name[name].efa_interfaces()), n)
            for name, n in nodes.items()}
