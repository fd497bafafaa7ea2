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

Not ready because the nodes cannot be had ends the wait at once (``CapacityUnavailable``: type, zone, the EC2/EKS
code, how many launched of how many) instead of waiting out ``timeouts.capacity_s``: a node group's health issues
(``nodegroup.health.issues``, e.g. AsgInstanceLaunchFailures carrying EC2's InsufficientInstanceCapacity) and, on
Auto Mode, our NodePool's NodeClaims whose ``Launched`` condition is False for a capacity reason
(``benchctl.aws.pool_nodes`` says which codes end the wait and why; ``AutoModePools`` is in ``benchctl.aws.auto_mode_pools``).

moto note: moto's EKS does not implement ``describe_update``; the tests answer that one call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from benchctl.aws.auto_mode_pools import AutoModePools
from benchctl.aws.k8s.client import KubeClient
from benchctl.aws.pool_nodes import (
    JSON,
    NODEGROUP_LABEL,
    SCALING_KEYS,
    STALE_ISSUE_GRACE_S,
    BeforeChange,
    KubeSource,
    PoolScalingFailed,
    _check_nodes,
    _error_code,
    _LazyKube,
    _pool_spec,
    issue_key,
    launch_zone,
    nodegroup_problem,
    ready_gpu_nodes,
)
from benchctl.errors import CapacityUnavailable, NotReadyYet
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
            # what the group already reported before we asked (a DEGRADED group keeps its old issue): judged later
            "issues_before": [issue_key(i) for i in (ng.get("health") or {}).get("issues") or []],
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
        """The requested nodes are up (see the module's docstring); CapacityUnavailable (or PoolScalingFailed for a
        broken node group) when the group's health says they will not come."""
        pool, nodegroup = record["pool"], record["nodegroup"]
        ng = self._describe(pool, nodegroup)
        if ng is None:
            raise PoolScalingFailed(f"pool {pool!r}: node group {nodegroup!r} disappeared from cluster "
                                    f"{self.cluster_name!r} while scaling")
        self._raise_if_unobtainable(record, ng)
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

    def _raise_if_unobtainable(self, record: JSON, ng: JSON) -> None:
        """CapacityUnavailable / PoolScalingFailed when the node group reports a capacity or launch failure while
        fewer nodes than requested are up. An issue the group already had before our request counts only after
        STALE_ISSUE_GRACE_S (a successful scale-out clears it; one that stays means this launch failed too)."""
        if (ng.get("health") or {}).get("issues") in (None, []):
            return
        pool, nodegroup = record["pool"], record["nodegroup"]
        stale_ok = self.clock() - float(record.get("requested_at") or 0) < STALE_ISSUE_GRACE_S
        problem = nodegroup_problem(ng, known_before=record.get("issues_before") or [], stale_ok=stale_ok)
        if problem is None:
            return
        nodes = self.kube().list("v1", "Node", label_selector=f"{NODEGROUP_LABEL}={nodegroup}")
        requested = int(record["requested"])
        if len(nodes) >= requested:
            return  # the nodes are there (an issue about others, or cleared on the next describe)
        spec = self.pool_specs.get(pool)
        instance_type = (spec.instance_type if spec is not None
                         else ",".join(ng.get("instanceTypes") or []) or "unknown type")
        zone = launch_zone(problem, spec, nodes, f"a zone of the node group's subnets {', '.join(ng.get('subnets') or [])}")
        if not problem.capacity:
            raise PoolScalingFailed(f"pool {pool!r}: node group {nodegroup!r} cannot launch nodes ({problem.source}: "
                                    f"{problem.message}); {len(nodes)} of {requested} {instance_type} node(s) up in "
                                    f"{zone}. Fix the node group (its launch template, subnets, IAM role) in the "
                                    "platform stack; the teardown restores its size")
        raise CapacityUnavailable(pool, instance_type=instance_type, zone=zone, code=problem.code, launched=len(nodes),
                                  requested=requested, detail=f"{problem.source}: {problem.message}",
                                  where=f"node group {nodegroup} of cluster {self.cluster_name}")

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

    def launches(self, record: JSON) -> None:
        adapter = self._adapter(record["pool"], record.get("provider"))
        if getattr(adapter, "watch_launches", False):  # Auto Mode: its nodes come for the workers' pending pods
            adapter.raise_if_unobtainable(record)

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
