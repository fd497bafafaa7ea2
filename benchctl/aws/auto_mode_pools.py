"""EKS Auto Mode pools (``AutoModePools``, the PoolPort adapter for ``provider: auto-mode``): one Karpenter NodePool
per pool, labelled with the campaign, sized for the experiment's nodes (``render_nodepool`` turns nodes into the GPU
limit Karpenter counts), replaced (PUT) when a later experiment needs another size and deleted on restore; a NodePool
of the same name without our campaign label is refused and left alone. Its nodes launch for the workers' pending pods
(after Deploy), so a NodeClaim that cannot launch for capacity is read while the deployment waits
(``raise_if_unobtainable``). An adapter: may import the core, ``benchctl.aws.k8s`` and ``benchctl.aws.pool_nodes``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping

from benchctl.aws.k8s.client import ApiError, Conflict, KubeClient, NotFound
from benchctl.aws.pool_nodes import (
    CAMPAIGN_LABEL,
    JSON,
    NODEPOOL_LABEL,
    POOL_LABEL,
    BeforeChange,
    KubeSource,
    LaunchProblem,
    PoolScalingFailed,
    _check_nodes,
    _LazyKube,
    _pool_spec,
    launch_zone,
    nodeclaim_problem,
)
from benchctl.errors import CapacityUnavailable, NotReadyYet
from benchctl.spec.deployment import PoolSpec

# ---------------------------------------------------------------- EKS Auto Mode

# Whether AutoModePools.ready reads our NodePool's NodeClaims (``list nodeclaims.karpenter.sh``, granted to the Pools
# function's ClusterRole in stacks/kubernetes/benchctl-rbac.yaml and listed in ``benchctl.aws.verbs.FUNCTION_VERBS``,
# which the RBAC test holds against each other): a test may turn it off to see the wait without it.
READ_NODECLAIMS = True


class AutoModePools:
    """Pools on EKS Auto Mode: one Karpenter NodePool per pool, created and deleted by us.

    ``render_nodepool(pool, nodes)`` renders the NodePool holding ``nodes`` nodes of the pool (its GPU
    limit is nodes x gpus_per_node: ``benchctl.aws.k8s.render.render_nodepool``).
    """

    provider = "auto-mode"

    def __init__(self, cluster_name: str, pool_specs: Mapping[str, PoolSpec], campaign_id: str, *,
                 kube: KubeSource, render_nodepool: Callable[[str, int], JSON],
                 watch_launches: bool | None = None) -> None:
        self.cluster_name = cluster_name
        self.pool_specs = dict(pool_specs)
        self.campaign_id = campaign_id
        self.render_nodepool = render_nodepool
        self.watch_launches = READ_NODECLAIMS if watch_launches is None else watch_launches

        def no_kube() -> KubeClient:
            raise ValueError("AutoModePools needs a KubeClient (or a callable returning one)")

        self.kube = _LazyKube(kube, no_kube)

    def _ours(self, obj: JSON) -> bool:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(CAMPAIGN_LABEL) == self.campaign_id

    def scale(self, pool: str, nodes: int, owner: str, *, before_change: BeforeChange = None) -> JSON:
        spec = _pool_spec(self.pool_specs, pool, self.provider)
        _check_nodes(spec, nodes)
        obj = copy.deepcopy(self.render_nodepool(pool, nodes))
        if obj.get("kind") != "NodePool" or obj.get("apiVersion") != "karpenter.sh/v1":
            raise ValueError(f"pool {pool!r}: render_nodepool returned {obj.get('apiVersion')}/{obj.get('kind')}, "
                             "expected karpenter.sh/v1 NodePool")
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise ValueError(f"pool {pool!r}: the rendered NodePool has no metadata.name")
        meta.setdefault("labels", {}).update({CAMPAIGN_LABEL: self.campaign_id, POOL_LABEL: pool})
        kube = self.kube()
        created = True
        if before_change is not None:  # recorded first: a crash after the create still gets it deleted
            before_change({"pool": pool, "provider": self.provider, "cluster": self.cluster_name, "nodepool": name,
                           "campaign_id": self.campaign_id, "requested": nodes, "previous": None,
                           "owner": owner, "simulated": False})
        try:
            kube.create(obj)
        except Conflict:
            created = False
            existing = kube.get("karpenter.sh/v1", "NodePool", name)
            if not self._ours(existing):
                owner_label = ((existing.get("metadata") or {}).get("labels") or {}).get(CAMPAIGN_LABEL)
                raise ValueError(f"pool {pool!r}: NodePool {name!r} already exists and is not this campaign's "
                                 f"({CAMPAIGN_LABEL}={owner_label!r}, want {self.campaign_id!r}); refusing to "
                                 "touch it") from None
            if existing["metadata"].get("deletionTimestamp"):
                raise NotReadyYet(f"pool {pool!r}: NodePool {name!r} of this campaign is still being deleted") from None
            if existing.get("spec") != obj.get("spec"):  # ours, from an earlier experiment: make it what we need
                meta["resourceVersion"] = existing["metadata"]["resourceVersion"]
                kube.replace(obj)
        return {
            "pool": pool,
            "provider": self.provider,
            "cluster": self.cluster_name,
            "nodepool": name,
            "campaign_id": self.campaign_id,
            "requested": nodes,
            "gpus_per_node": spec.gpus_per_node,
            "previous": None,
            "created": created,
            "owner": owner,
            "simulated": False,
        }

    def ready(self, record: JSON) -> bool:
        """Our NodePool is accepted (its ``Ready`` condition is True).

        Not "N GPU nodes are up": Karpenter launches nodes only for pending pods, so on Auto Mode the
        nodes arrive when the deployment's workers are scheduled, and the deployment's readiness wait
        (``timeouts.ready_s``) covers their start-up. Waiting for nodes here would wait forever.
        """
        try:
            pool = self.kube().get("karpenter.sh/v1", "NodePool", record["nodepool"])
        except NotFound:
            raise PoolScalingFailed(f"NodePool {record['nodepool']} disappeared while waiting for it") from None
        if self.watch_launches:
            self.raise_if_unobtainable(record)
        conditions = {c.get("type"): c.get("status") for c in (pool.get("status") or {}).get("conditions") or []}
        return conditions.get("Ready") == "True"

    def raise_if_unobtainable(self, record: JSON) -> None:
        """CapacityUnavailable when a NodeClaim of our NodePool (``karpenter.sh/nodepool``) reports
        ``Launched=False`` for a capacity reason (``pool_nodes.nodeclaim_problem``). Callable whenever the NodePool's
        nodes are awaited: on Auto Mode they are launched for the workers' pending pods, after Deploy.

        Karpenter deletes a NodeClaim whose launch failed with an InsufficientCapacityError and says so only in a
        Warning Event (kubernetes-sigs/karpenter pkg/controllers/nodeclaim/lifecycle/launch.go); that case is
        bounded by the deployment's readiness deadline. A cluster whose RBAC does not let this function list
        NodeClaims (HTTP 403) is not judged here either."""
        name = record["nodepool"]
        try:
            claims = self.kube().list("karpenter.sh/v1", "NodeClaim", label_selector=f"{NODEPOOL_LABEL}={name}")
        except ApiError as err:
            if getattr(err, "status", None) in (403, 404):  # no RBAC grant, or no NodeClaim API (not Auto Mode)
                return
            raise
        problem: LaunchProblem | None = nodeclaim_problem(claims)
        if problem is None:
            return
        pool = record["pool"]
        spec = self.pool_specs.get(pool)
        launched = sum(1 for c in claims for cond in (c.get("status") or {}).get("conditions") or []
                       if cond.get("type") == "Launched" and cond.get("status") == "True")
        raise CapacityUnavailable(pool, instance_type=spec.instance_type if spec is not None else "unknown type",
                                  zone=launch_zone(problem, spec, [], "a zone of the NodeClass's subnets"),
                                  code=problem.code, launched=launched, requested=int(record["requested"]),
                                  detail=f"{problem.source}: {problem.message}",
                                  where=f"NodePool {name} of cluster {self.cluster_name}")

    def restore(self, record: JSON) -> JSON:
        """Delete our NodePool (Karpenter drains its nodes); already gone is fine; never others'."""
        name = record["nodepool"]
        kube = self.kube()
        try:
            existing = kube.get("karpenter.sh/v1", "NodePool", name)
        except NotFound:
            return {"deleted": name, "already_gone": True}
        if not self._ours(existing):
            return {"deleted": None, "kept": name, "note": f"NodePool {name} is not this campaign's; left alone"}
        kube.delete("karpenter.sh/v1", "NodePool", name)
        return {"deleted": name}

    def observe(self, record: JSON) -> JSON:
        """Read our NodePool back (the teardown receipt): gone, or still there (being deleted or not), and the
        nodes Karpenter still runs for it (``karpenter.sh/nodepool``): billed until there are none."""
        name = record["nodepool"]
        kube = self.kube()
        nodes = len(kube.list("v1", "Node", label_selector=f"{NODEPOOL_LABEL}={name}"))
        billing = "ended" if nodes == 0 else f"still billing: {nodes} node(s) of NodePool {name} up"
        try:
            existing = kube.get("karpenter.sh/v1", "NodePool", name)
        except NotFound:
            return {"kind": "NodePool", "name": name, "state": "gone", "now": None, "nodes": nodes, "billing": billing,
                    "why": ""}
        meta = existing.get("metadata") or {}
        why = ("being deleted (Karpenter drains its nodes)" if meta.get("deletionTimestamp")
               else "not this campaign's: left alone" if not self._ours(existing) else "not deleted")
        return {"kind": "NodePool", "name": name, "state": "still there", "now": {"deleting": bool(
            meta.get("deletionTimestamp"))}, "nodes": nodes, "billing": billing, "why": why}


