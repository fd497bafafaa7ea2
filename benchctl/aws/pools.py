"""EKS compute pools: the PoolPort adapters of the AWS engine.

* ``ManagedNodeGroupPools`` scales the managed node group named in a pool's spec with
  ``update_nodegroup_config`` and puts back exactly the recorded previous scaling config on restore.
  It never shrinks what is there (min/desired/max only go up while a campaign holds the pool) and
  never touches any other node group.
* ``AutoModePools`` (EKS Auto Mode, Karpenter) creates one NodePool per pool, labelled with the
  campaign, sized for the experiment's NODES (``render_nodepool`` turns nodes into the GPU limit
  Karpenter counts), replaces it (PUT) when a later experiment needs another size, and deletes it on
  restore; a NodePool of the same name without our campaign label is refused and left alone.

Ready means more than ACTIVE: ``requested`` nodes of the pool are Ready, schedulable and advertise
``nvidia.com/gpu`` >= the pool's ``gpus_per_node`` (device plugin up), and none of them reports an NVIDIA
driver older than the Dynamo image needs (GPU feature discovery's label, where present).

moto note: moto's EKS does not implement ``describe_update``; the tests answer that one call.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from typing import Any

from benchctl.aws.k8s.client import Conflict, KubeClient, NotFound
from benchctl.aws.pool_nodes import (
    CAMPAIGN_LABEL,
    JSON,
    NODEGROUP_LABEL,
    NODEPOOL_LABEL,
    POOL_LABEL,
    SCALING_KEYS,
    BeforeChange,
    KubeSource,
    PoolScalingFailed,
    _check_nodes,
    _error_code,
    _LazyKube,
    _pool_spec,
    ready_gpu_nodes,
)
from benchctl.errors import NotReadyYet
from benchctl.spec.deployment import PoolSpec
from benchctl.spec.model import CampaignSpec

# ---------------------------------------------------------------- managed node groups


class ManagedNodeGroupPools:
    """Pools backed by existing EKS managed node groups (``PoolSpec.nodegroup``)."""

    provider = "managed-nodegroup"

    def __init__(self, cluster_name: str, pool_specs: Mapping[str, PoolSpec], *, session: Any = None,
                 kube: KubeSource = None, clock: Callable[[], float] = time.time,
                 min_gpu_driver: int | None = None) -> None:
        self.cluster_name = cluster_name
        self.pool_specs = dict(pool_specs)
        self.clock = clock
        self.min_gpu_driver = min_gpu_driver
        self._session = session
        self._eks: Any = None

        def default_kube() -> KubeClient:
            from benchctl.aws.eks_token import kube_for_cluster

            return kube_for_cluster(cluster_name, self._get_session(), clock=clock)

        self.kube = _LazyKube(kube, default_kube)

    def _get_session(self) -> Any:
        if self._session is None:
            import boto3

            self._session = boto3.Session()
        return self._session

    @property
    def eks(self) -> Any:
        if self._eks is None:
            self._eks = self._get_session().client("eks")
        return self._eks

    def _nodegroup(self, pool: str) -> tuple[PoolSpec, str]:
        spec = _pool_spec(self.pool_specs, pool, self.provider)
        if not spec.nodegroup:
            raise ValueError(f"pool {pool!r}: provider managed-nodegroup needs 'nodegroup' (the EKS node group name)")
        return spec, spec.nodegroup

    def _describe(self, pool: str, nodegroup: str) -> JSON | None:
        try:
            return dict(self.eks.describe_nodegroup(clusterName=self.cluster_name, nodegroupName=nodegroup)["nodegroup"])
        except Exception as err:
            if _error_code(err) == "ResourceNotFoundException":
                return None
            raise

    @staticmethod
    def _scaling(ng: JSON) -> JSON:
        cfg = ng.get("scalingConfig") or {}
        return {k: int(cfg.get(k, 0)) for k in SCALING_KEYS}

    def scale(self, pool: str, nodes: int, owner: str, *, before_change: BeforeChange = None) -> JSON:
        """Scale the pool's node group to hold ``nodes``; ``before_change(record)`` is called with the
        record (``previous`` included) BEFORE the node group is changed, so a crash in between still
        leaves what to restore."""
        spec, nodegroup = self._nodegroup(pool)
        _check_nodes(spec, nodes)
        ng = self._describe(pool, nodegroup)
        if ng is None:
            raise ValueError(f"pool {pool!r}: node group {nodegroup!r} does not exist in cluster "
                             f"{self.cluster_name!r}; refusing to scale")
        previous = self._scaling(ng)
        # hold at least `nodes`; never shrink what is there (someone else may be using it)
        target = {
            "minSize": max(previous["minSize"], nodes),
            "maxSize": max(previous["maxSize"], nodes),
            "desiredSize": max(previous["desiredSize"], nodes),
        }
        record: JSON = {
            "pool": pool,
            "provider": self.provider,
            "cluster": self.cluster_name,
            "nodegroup": nodegroup,
            "previous": previous,
            "target": target,
            "requested": nodes,
            "gpus_per_node": spec.gpus_per_node,
            "update_id": None,
            "owner": owner,
            "requested_at": self.clock(),
            "simulated": False,
        }
        if target != previous:
            if before_change is not None:
                before_change(record)
            try:
                update = self.eks.update_nodegroup_config(
                    clusterName=self.cluster_name, nodegroupName=nodegroup, scalingConfig=target)["update"]
            except Exception as err:
                if _error_code(err) == "ResourceInUseException":  # e.g. the previous experiment's restore
                    raise NotReadyYet(f"pool {pool!r}: node group {nodegroup!r} has another update in "
                                      f"progress; scaling is retried: {err}") from None
                raise
            record["update_id"] = update.get("id")
        return record

    def ready(self, record: JSON) -> bool:
        pool, nodegroup = record["pool"], record["nodegroup"]
        ng = self._describe(pool, nodegroup)
        if ng is None:
            raise PoolScalingFailed(f"pool {pool!r}: node group {nodegroup!r} disappeared from cluster "
                                    f"{self.cluster_name!r} while scaling")
        if ng.get("status") != "ACTIVE":
            return False
        if record.get("update_id"):
            update = self.eks.describe_update(name=self.cluster_name, nodegroupName=nodegroup,
                                              updateId=record["update_id"])["update"]
            status = update.get("status")
            if status in ("Failed", "Cancelled"):
                raise PoolScalingFailed(f"pool {pool!r}: update {record['update_id']} of node group "
                                        f"{nodegroup!r} {status}: {update.get('errors')}")
            if status != "Successful":
                return False
        gpus = int(record.get("gpus_per_node") or self.pool_specs[pool].gpus_per_node)
        nodes = ready_gpu_nodes(self.kube(), f"{NODEGROUP_LABEL}={nodegroup}", gpus, self.min_gpu_driver)
        return len(nodes) >= int(record["requested"])

    def restore(self, record: JSON) -> JSON:
        """Put back exactly ``record["previous"]``; no call when the node group already has it."""
        pool, nodegroup = record["pool"], record["nodegroup"]
        _, ours = self._nodegroup(pool)
        if nodegroup != ours:
            raise ValueError(f"pool {pool!r}: record names node group {nodegroup!r} but the spec names "
                             f"{ours!r}; refusing to touch it")
        previous = {k: int(record["previous"][k]) for k in SCALING_KEYS}
        ng = self._describe(pool, nodegroup)
        if ng is None:
            return {"nodegroup": nodegroup, "scalingConfig": None, "updated": False,
                    "note": f"node group no longer exists in cluster {self.cluster_name}"}
        if self._scaling(ng) == previous:
            return {"nodegroup": nodegroup, "scalingConfig": previous, "updated": False}
        try:
            update = self.eks.update_nodegroup_config(
                clusterName=self.cluster_name, nodegroupName=nodegroup, scalingConfig=previous)["update"]
        except Exception as err:
            if _error_code(err) == "ResourceInUseException":  # our scale-up is still in progress
                raise NotReadyYet(f"pool {pool!r}: node group {nodegroup!r} is busy with another update; "
                                  f"restore to {previous} must be retried") from None
            raise
        return {"nodegroup": nodegroup, "scalingConfig": previous, "updated": True, "update_id": update.get("id")}

    def observe(self, record: JSON) -> JSON:
        """Read the node group back (the teardown receipt): its scaling now against the recorded one, and
        its nodes (``eks.amazonaws.com/nodegroup``) against the recorded desired size (the nodes this
        campaign added are billed until they are gone)."""
        pool, nodegroup = record["pool"], record["nodegroup"]
        previous = {k: int(record["previous"][k]) for k in SCALING_KEYS}
        ng = self._describe(pool, nodegroup)
        if ng is None:
            return {"kind": "node group", "name": nodegroup, "state": "gone", "now": None, "nodes": 0,
                    "billing": "ended", "why": f"node group no longer exists in cluster {self.cluster_name}"}
        now = self._scaling(ng)
        nodes = len(self.kube().list("v1", "Node", label_selector=f"{NODEGROUP_LABEL}={nodegroup}"))
        added = int(record.get("requested") or 0) > previous["desiredSize"]
        billing = ("none added" if not added else "ended" if nodes <= previous["desiredSize"]
                   else f"still billing: {nodes} node(s) up, recorded desired size {previous['desiredSize']}")
        ok = now == previous
        return {"kind": "node group", "name": nodegroup, "state": "restored" if ok else "still there",
                "now": now, "nodes": nodes, "billing": billing,
                "why": "" if ok else f"scaling {now} is not the recorded {previous} (another update, or the "
                                     "restore did not run)"}


# ---------------------------------------------------------------- EKS Auto Mode


class AutoModePools:
    """Pools on EKS Auto Mode: one Karpenter NodePool per pool, created and deleted by us.

    ``render_nodepool(pool, nodes)`` renders the NodePool holding ``nodes`` nodes of the pool (its GPU
    limit is nodes x gpus_per_node: ``benchctl.aws.k8s.render.render_nodepool``).
    """

    provider = "auto-mode"

    def __init__(self, cluster_name: str, pool_specs: Mapping[str, PoolSpec], campaign_id: str, *,
                 kube: KubeSource, render_nodepool: Callable[[str, int], JSON]) -> None:
        self.cluster_name = cluster_name
        self.pool_specs = dict(pool_specs)
        self.campaign_id = campaign_id
        self.render_nodepool = render_nodepool

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
        conditions = {c.get("type"): c.get("status") for c in (pool.get("status") or {}).get("conditions") or []}
        return conditions.get("Ready") == "True"

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


# ---------------------------------------------------------------- one PoolPort for a campaign


class EksPools:
    """The campaign's PoolPort on AWS: dispatches each pool to the adapter of its provider."""

    provider = "eks"

    def __init__(self, pool_specs: Mapping[str, PoolSpec], adapters: Mapping[str, Any]) -> None:
        self.pool_specs = dict(pool_specs)
        self.adapters = dict(adapters)

    def _adapter(self, pool: str, provider: str | None = None) -> Any:
        if provider is None:
            spec = self.pool_specs.get(pool)
            if spec is None:
                raise ValueError(f"pool {pool!r} is not in the spec's pools; valid: {sorted(self.pool_specs)}")
            provider = spec.provider
        adapter = self.adapters.get(provider)
        if adapter is None:
            raise ValueError(f"pool {pool!r}: provider {provider!r} cannot be scaled on EKS here; "
                             f"available: {sorted(self.adapters)}")
        return adapter

    def scale(self, pool: str, nodes: int, owner: str, *, before_change: BeforeChange = None) -> JSON:
        return dict(self._adapter(pool).scale(pool, nodes, owner, before_change=before_change))

    def ready(self, record: JSON) -> bool:
        return bool(self._adapter(record["pool"], record.get("provider")).ready(record))

    def restore(self, record: JSON) -> JSON:
        return dict(self._adapter(record["pool"], record.get("provider")).restore(record))

    def observe(self, record: JSON) -> JSON:
        return dict(self._adapter(record["pool"], record.get("provider")).observe(record))


def pools_for(spec: CampaignSpec, campaign_id: str, *, cluster_name: str, session: Any = None,
              kube: KubeSource = None, clock: Callable[[], float] = time.time) -> EksPools:
    """The PoolPort for ``spec`` on cluster ``cluster_name``: managed node groups, and Auto Mode NodePools
    rendered from the spec (``render_nodepool(spec, campaign_id, pool, nodes)``). One KubeClient (built
    lazily from describe_cluster + a presigned token unless given) is shared by both adapters."""
    from benchctl.aws.k8s.nodepool import render_nodepool

    pool_specs = {p.name: p for p in spec.pools}

    def default_kube() -> KubeClient:
        from benchctl.aws.eks_token import kube_for_cluster

        return kube_for_cluster(cluster_name, session, clock=clock)

    shared = _LazyKube(kube, default_kube)
    adapters: dict[str, Any] = {
        "managed-nodegroup": ManagedNodeGroupPools(cluster_name, pool_specs, session=session, kube=shared,
                                                   clock=clock, min_gpu_driver=spec.kubernetes.min_gpu_driver),
        "auto-mode": AutoModePools(cluster_name, pool_specs, campaign_id, kube=shared,
                                   render_nodepool=lambda pool, nodes: render_nodepool(spec, campaign_id, pool, nodes)),
    }
    return EksPools(pool_specs, adapters)
