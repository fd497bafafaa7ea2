"""The sweeper on AWS (a scheduled Lambda): campaigns are found by what they left, not by a list.

Candidates: every campaign id on an object carrying our ``benchctl.io/campaign`` label in the cluster
(DynamoGraphDeployments, Jobs, pre-pull DaemonSets and runner service accounts in the namespace, NodePools; read from the lists,
never by a GET per object, which RBAC does not grant for DaemonSets) and every holder of a pool lock. Objects are
selected by our own labels only, never by ``app.kubernetes.io/managed-by`` (which others may set or
overwrite).
A campaign is running when the execution recorded in its run store (``campaign.json``) is RUNNING;
with no recorded execution it is left alone (never guess), but for one kind that has no run record by design:
``benchctl doctor``'s own runner identity (campaign id ``doctor-…``), which the doctor removes itself when it
ends, is ended once every object of it is older than :data:`DOCTOR_TTL_S` (a doctor killed mid-run left it: its
service account and its Pod Identity association with the load Job role). Each campaign that is not running is torn
down from its run-store records (``benchctl.campaign.sweep``), then any object still carrying its label is
deleted.

The watchdog (the same function every few minutes, event ``{"watchdog": true}``: ``stacks/control_plane_ops.py``)
looks only at the holders of pool locks, and at nothing at all while no lock is held (one Scan of the lock
table). A holder whose execution ended more than :data:`WATCHDOG_GRACE_S` ago (its status-change event should
have started the stopped-campaign machine by then; Step Functions delivers those events best-effort) is torn
down as the hourly sweep would, once the watchdog holds the campaign's stop claim (``RunState.claim_stop``,
create-only): a stop that the stopped-campaign machine claimed is left to it, so one stop runs one teardown.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import Any

from benchctl.aws.k8s.client import KubeClient, NotFound
from benchctl.aws.k8s.common import LABEL_CAMPAIGN
from benchctl.aws.selftest import DOCTOR
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import JSON, Providers
from benchctl.campaign.runstate import RunState
from benchctl.campaign.sweep import sweep

DOCTOR_TTL_S = 3600  # the doctor's runner Job check ends within minutes (its --job-timeout); an hour is abandoned
DOCTOR_PREFIX = f"{DOCTOR}-"  # benchctl.aws.selftest names its runner identity's campaign doctor-<UTC time>
WATCHDOG_GRACE_S = 300  # an ended execution's own stopped-campaign machine claims its campaign within seconds
WATCHDOG = "benchctl-sweeper-watchdog"  # the watchdog's name in a stop claim

KINDS = (("nvidia.com/v1beta1", "DynamoGraphDeployment", True), ("batch/v1", "Job", True),
         ("apps/v1", "DaemonSet", True), ("v1", "ServiceAccount", True),  # a campaign's runner identity
         ("karpenter.sh/v1", "NodePool", False))


def _listed(kube: KubeClient, namespace: str, campaign_id: str | None) -> list[tuple[str, str, JSON, str | None]]:
    """(api_version, kind, object as listed, namespace) of our objects, optionally of one campaign only."""
    sel = f"{LABEL_CAMPAIGN}={campaign_id}" if campaign_id else LABEL_CAMPAIGN  # ours: the label exists
    out = []
    for api_version, kind, namespaced in KINDS:
        ns = namespace if namespaced else None
        try:
            objs = kube.list(api_version, kind, ns, sel)
        except NotFound:  # e.g. no Karpenter CRD on a cluster without Auto Mode
            continue
        out += [(api_version, kind, o, ns) for o in objs]
    return out


def labelled(kube: KubeClient, namespace: str, campaign_id: str | None = None, *,
             deleting: bool = True) -> list[tuple[str, str, str, str | None]]:
    """(api_version, kind, name, namespace) of our objects, optionally of one campaign only; without
    ``deleting``, not those already being deleted (they linger until their dependents are gone)."""
    return [(v, kind, o["metadata"]["name"], ns) for v, kind, o, ns in _listed(kube, namespace, campaign_id)
            if deleting or not o["metadata"].get("deletionTimestamp")]


def campaign_ids(kube: KubeClient, namespace: str) -> set[str]:
    """The campaign label of every object of ours, read from the lists themselves (no GET per object:
    RBAC grants DaemonSets only list)."""
    return {str(o["metadata"]["labels"][LABEL_CAMPAIGN]) for _, _, o, _ in _listed(kube, namespace, None)
            if (o["metadata"].get("labels") or {}).get(LABEL_CAMPAIGN)}


def abandoned_doctor(kube: KubeClient, namespace: str, campaign_id: str, now: float) -> bool:
    """Whether ``campaign_id`` is a ``benchctl doctor`` runner identity whose every labelled object is older than
    :data:`DOCTOR_TTL_S` (a doctor that ended removed it; one killed mid-run did not)."""
    if not campaign_id.startswith(DOCTOR_PREFIX):
        return False
    stamps = [datetime.fromisoformat(str(o["metadata"]["creationTimestamp"]).replace("Z", "+00:00")).timestamp()
              for _, _, o, _ in _listed(kube, namespace, campaign_id) if o["metadata"].get("creationTimestamp")]
    return bool(stamps) and now - max(stamps) > DOCTOR_TTL_S


def watchdog_verdict(record_execution: str | None, execution: JSON | None, now: float) -> str | None:
    """Why the watchdog leaves a lock holder alone (None: its execution ended long enough ago to tear it down).
    ``execution``: DescribeExecution's answer (None: the execution does not exist)."""
    if not record_execution:
        return "left alone: no execution recorded (the hourly sweep decides)"
    if execution is None:
        return None
    if execution.get("status") == "RUNNING":
        return "left alone: still running"
    stop = execution.get("stopDate")
    ended = stop.timestamp() if isinstance(stop, datetime) else float(stop) if isinstance(stop, int | float) else None
    if ended is not None and now - ended < WATCHDOG_GRACE_S:
        return f"left alone: ended {execution.get('status')} {now - ended:.0f} s ago (its stopped-campaign machine first)"
    return None


def aws_sweep(env: dict[str, str] | None = None, *, session: Any = None, kube: KubeClient | None = None,
              dry_run: bool = False, clock: Any = time.time, watchdog: bool = False) -> list[dict[str, Any]]:
    """The sweep of every campaign found by what it left (hourly), or with ``watchdog`` of the pool locks'
    holders only (every few minutes; nothing but one Scan while no lock is held)."""
    import boto3

    from benchctl.aws.eks_token import kube_for_cluster
    from benchctl.aws.env import LambdaEnv
    from benchctl.aws.providers import AwsEngine, split_s3_uri
    from benchctl.aws.s3 import S3RunStore

    config = LambdaEnv.from_env(os.environ if env is None else env)
    session = session or boto3.session.Session()
    holders: set[str] = set()
    if config.lock_table:
        ddb = session.client("dynamodb")
        for page in ddb.get_paginator("scan").paginate(TableName=config.lock_table):
            holders.update(i["campaign_id"]["S"] for i in page.get("Items", []) if "campaign_id" in i)
    if watchdog and not holders:
        return []
    kube = kube or kube_for_cluster(config.cluster, session)
    namespace = config.namespace
    engine = AwsEngine(config, session=session)
    runs_uri, lake_uri = engine.runs_uri, engine.lake_uri
    ids = set(holders) if watchdog else campaign_ids(kube, namespace) | holders
    sfn = session.client("stepfunctions")

    def store(cid: str) -> S3RunStore:
        bucket, prefix = split_s3_uri(f"{runs_uri}/{cid}")
        return S3RunStore(bucket, prefix, session=session)

    def is_running(cid: str) -> bool:
        record = RunState(store(cid)).campaign()
        execution = record.execution if record is not None else None
        if not execution:  # unknown: never tear down what we cannot prove has ended, but an abandoned doctor's
            return record is not None or not abandoned_doctor(kube, namespace, cid, clock())  # runner identity
        try:
            return bool(sfn.describe_execution(executionArn=execution)["status"] == "RUNNING")
        except sfn.exceptions.ExecutionDoesNotExist:
            return False

    why: dict[str, str] = {}

    def watchdog_running(cid: str) -> bool:
        """Left alone unless its execution ended over WATCHDOG_GRACE_S ago and the watchdog took its stop claim."""
        state = RunState(store(cid))
        record = state.campaign()
        execution = record.execution if record is not None else None
        desc = None
        if execution:
            try:
                desc = sfn.describe_execution(executionArn=execution)
            except sfn.exceptions.ExecutionDoesNotExist:
                desc = None
        verdict = watchdog_verdict(execution, desc, clock())
        if verdict is None and not dry_run:
            at = datetime.fromtimestamp(clock(), UTC).isoformat(timespec="seconds")
            held = state.claim_stop(WATCHDOG, at, str((desc or {}).get("status") or "GONE"))
            if held is not None:
                verdict = f"left alone: its teardown was claimed by {held.get('claimant')} at {held.get('claimed_at')}"
        if verdict is not None:
            why[cid] = verdict
        return verdict is not None

    def providers_for(cid: str) -> tuple[Providers, Ctx]:
        ctx = Ctx(campaign_id=cid, run_uri=f"{runs_uri}/{cid}", lake_uri=lake_uri, poll_seconds=30, fail_at=None)
        return engine.providers(ctx), ctx

    def delete_labelled(cid: str) -> list[str]:
        deleted = []
        for api_version, kind, name, ns in labelled(kube, namespace, cid, deleting=False):
            if kube.delete(api_version, kind, name, ns):
                deleted.append(f"{kind}/{name}")
        return deleted

    report = sweep(ids, providers_for, watchdog_running if watchdog else is_running, dry_run=dry_run,
                   extra=delete_labelled)
    return [{**line, "action": why[line["campaign_id"]]} if line["campaign_id"] in why else line for line in report]
