"""Placement as kube-scheduler does it: can every order in which an experiment's worker pods are placed on
its planned nodes place them all?

kube-scheduler takes one pending pod at a time and binds it to any node that passes its filters; it never
moves a bound pod to make room (no backtracking), and its scores (the default spreading, a *preferred*
affinity) only choose among the nodes that pass. A plan is safe when no such sequence of choices ends with
a pod that fits nowhere. The filters modelled (the only ones our worker pods meet on their own nodes):

* the pod's pool: its ``nodeSelector`` (node group or NodePool) pins it to that pool's nodes;
* resources: ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` requests within a node's allocatable;
* required inter-pod (anti-)affinity with ``topologyKey: kubernetes.io/hostname`` (InterPodAffinity,
  kubernetes ``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go``): a node holding a pod that
  matches one of the incoming pod's anti-affinity terms is refused, and so is a node holding a pod whose
  own anti-affinity term matches the incoming pod (symmetric); an affinity term needs a node holding a pod
  that matches all the pod's affinity terms, except when no pod in the cluster matches them yet and the
  pod matches its own terms ("the first pod in a series"): then any node will do.

:func:`find_deadlock` explores every order and every feasible node choice (pods of one shape, and nodes
holding the same pods, are interchangeable, so it stays small) and returns a sequence that ends stuck.
:func:`worker_pods` is the rule set our renderer applies (``benchctl.aws.k8s.render`` asks
:func:`efa_share`, through ``efa.efa_per_worker``, and :func:`keeps_role_together`), :func:`nodes_needed` the fewest nodes per pool with
which no order deadlocks, and :func:`placement_problems` what the spec check refuses.

Pure: standard library and benchctl's spec types only; nothing here knows Kubernetes' API objects (the
adapter ``benchctl.aws.k8s.placement`` reads the rendered manifests into these shapes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from benchctl.spec.deployment import Experiment, PoolSpec, WorkerGroup
    from benchctl.spec.model import CampaignSpec

Labels = frozenset[tuple[str, str]]
MAX_STATES = 20_000  # distinct placements explored before giving up (the examples need a few hundred)


@dataclass(frozen=True)
class PodShape:
    """One kind of pod (a component's replicas are identical): what the scheduler's filters read."""

    name: str  # for messages, e.g. the component "Prefill"
    pool: str
    gpus: int
    efa: int
    labels: Labels
    affinity: tuple[Labels, ...] = ()  # required podAffinity terms (matchLabels), hostname topology
    anti_affinity: tuple[Labels, ...] = ()  # required podAntiAffinity terms (matchLabels), hostname topology


@dataclass(frozen=True)
class NodeShape:
    """A pool's node as the scheduler sees it: allocatable GPUs and EFA interfaces."""

    gpus: int
    efa: int


class PlacementTooComplex(ValueError):
    """More distinct placements than :data:`MAX_STATES`: the check cannot say either way."""


def _matches(term: Labels, labels: Labels) -> bool:
    return term <= labels


def find_deadlock(pods: Sequence[tuple[PodShape, int]], nodes: Mapping[str, tuple[NodeShape, int]]) -> list[str] | None:
    """A sequence of placements (``"Prefill -> p4d/0"``, ending in ``"stuck: ..."``) after which a pod
    fits on no node, or None when every order kube-scheduler may choose places every pod.

    ``pods``: (shape, how many); ``nodes``: pool -> (node shape, how many nodes)."""
    shapes = [s for s, n in pods if n > 0]
    counts = [n for _, n in pods if n > 0]
    k = len(shapes)
    pools = sorted(nodes)
    for s in shapes:
        if s.pool not in nodes:
            return [f"stuck: {s.name} (pool {s.pool} has no planned nodes)"]
    # static relations between shapes
    anti = [[any(_matches(t, shapes[j].labels) for t in shapes[i].anti_affinity)
             or any(_matches(t, shapes[i].labels) for t in shapes[j].anti_affinity) for j in range(k)] for i in range(k)]
    aff_match = [[bool(shapes[i].affinity) and all(_matches(t, shapes[j].labels) for t in shapes[i].affinity)
                  for j in range(k)] for i in range(k)]
    self_match = [aff_match[i][i] for i in range(k)]
    empty = tuple(0 for _ in range(k))
    start = {p: tuple(empty for _ in range(nodes[p][1])) for p in pools}
    seen: set[tuple[tuple[tuple[int, ...], ...], ...]] = set()

    def fits(i: int, node: tuple[int, ...], shape: NodeShape, placed: list[int]) -> bool:
        s = shapes[i]
        if sum(c * shapes[j].gpus for j, c in enumerate(node)) + s.gpus > shape.gpus:
            return False
        if sum(c * shapes[j].efa for j, c in enumerate(node)) + s.efa > shape.efa:
            return False
        if any(c and anti[i][j] for j, c in enumerate(node)):
            return False
        if s.affinity:
            here = any(c and aff_match[i][j] for j, c in enumerate(node))
            anywhere = any(placed[j] and aff_match[i][j] for j in range(k))
            if not here and (anywhere or not self_match[i]):
                return False
        return True

    def walk(state: dict[str, tuple[tuple[int, ...], ...]], path: list[str]) -> list[str] | None:
        key = tuple(tuple(sorted(state[p])) for p in pools)
        if key in seen:
            return None
        seen.add(key)
        if len(seen) > MAX_STATES:
            raise PlacementTooComplex(f"more than {MAX_STATES} distinct placements")
        placed = [sum(node[j] for p in pools for node in state[p]) for j in range(k)]
        moves = []
        for i in range(k):
            if placed[i] >= counts[i]:
                continue
            pool = shapes[i].pool
            tried: set[tuple[int, ...]] = set()
            for idx, node in enumerate(state[pool]):
                if node in tried:
                    continue
                tried.add(node)
                if fits(i, node, nodes[pool][0], placed):
                    moves.append((i, idx))
        left = [f"{counts[i] - placed[i]} x {shapes[i].name}" for i in range(k) if placed[i] < counts[i]]
        if left and not moves:
            return [*path, "stuck: " + ", ".join(left) + " fit on no node"]
        for i, idx in moves:
            pool = shapes[i].pool
            grown = list(state[pool][idx])
            grown[i] += 1
            nxt = dict(state)
            nxt[pool] = (*state[pool][:idx], tuple(grown), *state[pool][idx + 1:])
            found = walk(nxt, [*path, f"{shapes[i].name} -> {pool}/{idx}"])
            if found is not None:
                return found
        return None

    return walk(start, [])


# ------------------------------------------------------------------------------ our rules (what we render)


def worker_efa(pool: PoolSpec, exp: Experiment, group: WorkerGroup) -> int:
    """EFA interfaces one worker pod requests: disaggregated only (the KV crosses pods), its share of the
    node's by GPUs (p4d, 4 interfaces for 8 GPUs: 2 for a TP=4 worker; Dynamo's p5 recipe: 16 of 32 for
    TP=4), at least 1; 0 without EFA."""
    return efa_share(pool, group.tensor_parallel) if exp.mode == "disaggregated" else 0


def slots(pool: PoolSpec, group: WorkerGroup) -> int:
    """What one worker pod takes of its node: its GPUs; on a CPU pool (mocker workers) one of the node's
    ``pods_per_node``."""
    return group.tensor_parallel if pool.gpus_per_node else 1


def node_slots(pool: PoolSpec) -> int:
    """What a node of the pool holds: its GPUs, or on a CPU pool its ``pods_per_node``."""
    return pool.gpus_per_node or pool.pods_per_node or 1


def efa_share(pool: PoolSpec, gpus: int) -> int:
    """A pod's share of its node's EFA interfaces by GPUs, at least 1; 0 on a pool without EFA."""
    n = pool.efa_interfaces()
    return max(1, n * gpus // pool.gpus_per_node) if n and pool.gpus_per_node else 0


def keeps_role_together(pools: Mapping[str, PoolSpec], exp: Experiment, role: str) -> bool:
    """Whether the role's pods carry a REQUIRED podAffinity to each other (hostname): where prefill and
    decode may not share a node (EFA, required anti-affinity) and the whole role fits one node of its one
    pool. Then the first of them picks a node and the rest follow it, so the default spreading cannot
    scatter them over nodes the other role then cannot use."""
    groups = [g for g in exp.workers if g.role == role]
    if exp.mode != "disaggregated" or len({g.pool for g in groups}) != 1:
        return False
    pool = pools[groups[0].pool]
    efa = [worker_efa(pool, exp, g) for g in groups]
    return (all(efa) and sum(g.replicas * g.tensor_parallel for g in groups) <= pool.gpus_per_node
            and sum(g.replicas * e for g, e in zip(groups, efa, strict=True)) <= pool.efa_interfaces())


def worker_pods(pools: Mapping[str, PoolSpec], exp: Experiment) -> list[tuple[PodShape, int]]:
    """The experiment's worker pods with the rules the renderer gives them: required anti-affinity to
    the other role where a pod uses EFA (EFA does not work within a node), required affinity to its own
    role where :func:`keeps_role_together`."""
    out = []
    for i, g in enumerate(exp.workers):
        pool = pools[g.pool]
        efa = worker_efa(pool, exp, g)
        other = {"prefill": "decode", "decode": "prefill"}.get(g.role)
        anti = (frozenset({("role", other)}),) if efa and other else ()
        aff = (frozenset({("role", g.role)}),) if keeps_role_together(pools, exp, g.role) else ()
        out.append((PodShape(f"{g.role}[{i}] (TP={g.tensor_parallel})", g.pool, slots(pool, g), efa,
                             frozenset({("role", g.role), ("group", str(i))}), aff, anti), g.replicas))
    return out


@lru_cache(maxsize=1024)
def _fewest(pods: tuple[tuple[PodShape, int], ...], node: NodeShape) -> tuple[int, tuple[str, ...] | None, bool]:
    """The fewest nodes of ``node`` on which no order deadlocks (one pool's pods), the deadlock that remains
    at the most that can help, if any, and whether the count is proven the fewest. Where the orders are too
    many to explore, the count that is safe in any order: a node per pod, but one per role kept together
    (while pods remain, a node without any is left for each), not proven the fewest."""
    gpus = sum(s.gpus * n for s, n in pods)
    efa = sum(s.efa * n for s, n in pods)
    low = max(1, math.ceil(gpus / node.gpus), math.ceil(efa / node.efa) if node.efa else 1)
    safe = len({s.affinity for s, _ in pods if s.affinity}) + sum(n for s, n in pods if not s.affinity)
    top = max(low, safe)
    pool = pods[0][0].pool
    stuck: list[str] | None = None
    for n in range(low, top + 1):
        try:
            stuck = find_deadlock(pods, {pool: (node, n)})
        except PlacementTooComplex:
            return top, None, False
        if stuck is None:
            return n, None, True
    return top, tuple(stuck or ()), True


def pool_placement(pools: Mapping[str, PoolSpec],
                   exp: Experiment) -> dict[str, tuple[int, tuple[str, ...] | None, bool]]:
    """Per pool the experiment uses: (fewest safe nodes, the deadlock left even with one node per pod, whether
    that count is proven the fewest)."""
    pods = worker_pods(pools, exp)
    out = {}
    for name in sorted({s.pool for s, _ in pods}):
        pool = pools[name]
        mine = tuple(p for p in pods if p[0].pool == name)
        out[name] = _fewest(mine, NodeShape(node_slots(pool), pool.efa_interfaces()))
    return out


def nodes_needed(pools: Mapping[str, PoolSpec], exp: Experiment) -> dict[str, int]:
    """Nodes per pool: the fewest with which every order kube-scheduler may place the workers in places
    them all (prefill and decode counted apart where they may not share a node)."""
    return {name: n for name, (n, _, _) in pool_placement(pools, exp).items()}


def placement_problems(spec: CampaignSpec) -> list[str]:
    """What the spec check refuses: an experiment whose workers no node count can place safely, or whose
    safe node count exceeds the pool's ``max_nodes``."""
    pools = {p.name: p for p in spec.pools}
    problems = []
    for i, exp in enumerate(spec.experiments):
        if any(g.pool not in pools or slots(pools[g.pool], g) > node_slots(pools[g.pool]) for g in exp.workers):
            continue  # reported by the spec's own checks
        for name, (n, stuck, proven) in pool_placement(pools, exp).items():
            pool = pools[name]
            roles = ", ".join(f"{g.role} {g.replicas} x TP={g.tensor_parallel}" for g in exp.workers if g.pool == name)
            where = f"experiments[{i}].workers: experiment {exp.name!r}: its workers on pool {name!r} ({roles})"
            if stuck:
                problems.append(
                    f"{where} can deadlock on any number of {pool.gpus_per_node}-GPU nodes (kube-scheduler places "
                    f"one pod at a time and never moves one: {'; '.join(stuck)}); use one worker size per role")
            elif n > pool.max_nodes:
                k = next(j for j, p in enumerate(spec.pools) if p.name == name)
                need = (f"need {n} nodes" if proven else
                        f"need at most {n} nodes (more orders than the check explores, {MAX_STATES:,}: fewer may "
                        "do, but could not be proven)")
                problems.append(
                    f"{where} {need} so that every order kube-scheduler may place them in succeeds "
                    f"(prefill and decode never share a node over EFA, and a role that does not fit one node may "
                    f"be spread over as many nodes as it has pods), but pools[{k}].max_nodes is {pool.max_nodes}: "
                    f"raise it to {n}, or size each role to fit one node (fewer replicas or tensor_parallel = "
                    f"gpus_per_node)")
    return problems


def feasible(spec: CampaignSpec, source: str = "<spec>") -> CampaignSpec:
    """The spec, if every experiment can be placed safely within its pools (:func:`placement_problems`) and every
    ``concurrency: auto`` search can reach its edge (:func:`benchctl.planning.reach.search_problems`); else
    ``SpecError`` with one line per problem. A planning check, not the spec's own: ``benchctl validate``, the
    local runner, ``benchctl start`` and the Plan state run it after the spec validates."""
    from benchctl.errors import SpecError
    from benchctl.planning.reach import search_problems

    problems = placement_problems(spec) + search_problems(spec)
    if problems:
        raise SpecError(source, problems)
    return spec


def load_placeable_spec(path: str | Path) -> CampaignSpec:
    """A spec file, validated (``benchctl.spec.model.load_spec``) and then placed (:func:`feasible`)."""
    from benchctl.spec.model import load_spec

    return feasible(load_spec(path), str(path))
