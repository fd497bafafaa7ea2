"""The Kubernetes objects the platform stack applies beside its charts: the namespace, the EFS storage class and model
claim, the model download Job, the Grafana dashboards' ConfigMaps, the KVBM PodMonitor, Auto Mode's reserved NodeClass;
and the platform's provenance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchctl.aws.k8s.common import (
    KVBM_METRICS_PORT,
    LABEL_CAMPAIGN,
    LABEL_MANAGED,
    LABEL_ROLE,
    MANAGED_BY,
    WORKER_SYSTEM_PORT,
)
from benchctl.monitors import KVBM
from stacks.platform_values import (
    CHARTS,
    DASHBOARD_FOLDER,
    DASHBOARD_FOLDER_ANNOTATION,
    DASHBOARD_LABEL,
    DASHBOARD_LABEL_VALUE,
    DASHBOARDS_DIR,
    DYNAMO_POD_MONITOR_INTERVAL,
    EKS_ADDONS,
    JSON,
    MODEL_CLAIM_SIZE,
    PLATFORM_ID,
    STORAGE_CLASS,
    PlatformSettings,
    PlatformValuesError,
    chart_values,
    charts_to_install,
    values_hash,
)


def _meta(name: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> JSON:
    meta: JSON = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {LABEL_MANAGED: MANAGED_BY, "benchctl.io/component": "platform", **(labels or {})}
    return meta


def reserved_node_class(name: str, *, role: str, subnet_ids: list[str], security_group_id: str,
                        reservation_id: str) -> JSON:
    """An EKS Auto Mode NodeClass (``eks.amazonaws.com/v1``) whose nodes come from one capacity reservation, an ODCR
    or a Capacity Block (EKS user guide, "Control deployment of workloads into Capacity Reservations with EKS Auto
    Mode": ``capacityReservationSelectorTerms`` by ``id``; nodes launched from it are labelled
    ``karpenter.sh/capacity-type: reserved``, and a Capacity Block is used only when a NodeClass selects it). With
    these terms on any NodeClass, Auto Mode stops launching into open ODCRs for every NodeClass of the cluster. A
    NodeClass other than ``default`` names its node role, subnets and security groups itself ("Create a Node
    Class"): the Auto Mode node role, the reservation zone's subnets, the cluster security group. A NodePool that
    must run only on the reservation requires ``karpenter.sh/capacity-type`` ``In [reserved]``."""
    return {
        "apiVersion": "eks.amazonaws.com/v1", "kind": "NodeClass", "metadata": _meta(name),
        "spec": {"role": role,
                 "subnetSelectorTerms": [{"id": s} for s in subnet_ids],
                 "securityGroupSelectorTerms": [{"id": security_group_id}],
                 "capacityReservationSelectorTerms": [{"id": reservation_id}]},
    }


def namespace_manifest(s: PlatformSettings) -> JSON:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(s.namespace)}


def storage_class_manifest(s: PlatformSettings) -> JSON:
    """EFS through the EFS CSI driver's dynamic provisioning (``provisioningMode: efs-ap``: one access point per
    volume under ``basePath``; kubernetes-sigs/aws-efs-csi-driver docs/parameters.md). Access points always
    enforce one POSIX identity, so the prefetch Job (which writes as its image's user) and the workers (which
    read as theirs) meet the same owner. ``reclaimPolicy`` is ``s.model_reclaim_policy``: ``Retain`` keeps the
    downloaded weights when the claim goes (the file system's own retention is the stack's stated choice)."""
    return {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": _meta(STORAGE_CLASS),
        "provisioner": "efs.csi.aws.com",
        "parameters": {"provisioningMode": "efs-ap", "fileSystemId": s.efs_file_system_id,
                       "directoryPerms": "755", "basePath": "/benchctl"},
        "reclaimPolicy": s.model_reclaim_policy,
        "volumeBindingMode": "Immediate",
    }


def model_claim_manifest(s: PlatformSettings) -> JSON:
    """The ReadWriteMany claim the campaigns mount (``kubernetes.model_pvc``): workers of one experiment run on
    several nodes at once."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _meta(s.model_pvc, s.namespace),
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": STORAGE_CLASS,
                 "resources": {"requests": {"storage": MODEL_CLAIM_SIZE}}},
    }


def model_download_job(s: PlatformSettings) -> JSON:
    """The one-time download of the pinned revision onto the claim: exactly the campaign's prefetch Job
    (:func:`benchctl.aws.k8s.prefetch.render_prefetch_job`: token from the campaign's secret as a read-only file,
    pinned huggingface_hub, fails unless the snapshot of that commit is where the workers serve it from), with
    :data:`PLATFORM_ID` in place of a campaign id, off the GPU node groups. Its name ends in a hash of its spec:
    a Job's pod template is immutable, so a changed download (another revision, image, node group) is a new Job
    beside the finished one (which its TTL removes), not a replace that the API server refuses ("field is
    immutable") and that would roll the platform's update back."""
    import hashlib

    from benchctl.aws.k8s.prefetch import render_prefetch_job

    if not s.model.revision:
        raise PlatformValuesError("model.revision: the platform downloads a pinned commit; give the 40-hex commit")
    job = render_prefetch_job(s.model, s.kubernetes(), PLATFORM_ID, pools=_gpu_pools(s))
    digest = hashlib.sha256(json.dumps(job["spec"], sort_keys=True).encode()).hexdigest()[:10]
    job["metadata"]["name"] = f"{job['metadata']['name']}-{digest}"
    return job


def _gpu_pools(s: PlatformSettings) -> list[Any]:
    """The GPU node groups as the campaign's pools, for its rule that keeps a CPU pod off them (and off any node
    labelled with GPUs): :func:`benchctl.aws.k8s.jobs.off_gpu_pools`."""
    from benchctl.spec.deployment import PoolSpec

    return [PoolSpec(name=f"gpu-{i}", instance_type="gpu", gpus_per_node=1, gpu_kind="gpu",
                     provider="managed-nodegroup", nodegroup=ng) for i, ng in enumerate(s.gpu_nodegroups)]


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def dashboard_configmaps(s: PlatformSettings) -> list[JSON]:
    """One ConfigMap per dashboard of ``dashboards/``, as the Grafana sidecar of kube-prometheus-stack loads them:
    labelled ``grafana_dashboard: "1"``, in the monitoring namespace, folder by annotation. The data is the file's
    text unchanged."""
    ns = CHARTS["kube-prometheus-stack"].namespace
    out = []
    for path in dashboard_files():
        cm: JSON = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": _meta(f"benchctl-dashboard-{path.stem}", ns, {DASHBOARD_LABEL: DASHBOARD_LABEL_VALUE}),
              "data": {path.name: path.read_text()}}
        cm["metadata"]["annotations"] = {DASHBOARD_FOLDER_ANNOTATION: DASHBOARD_FOLDER}
        out.append(cm)
    return out


def kvbm_pod_monitor(s: PlatformSettings) -> JSON:
    """KVBM's exporter (``DYN_KVBM_METRICS=true``, port 6880) on the campaign's worker and prefill pods (our
    ``benchctl.io/role`` label; every campaign pod also carries ``benchctl.io/campaign``). The port is not a named
    container port: keep the worker's ``system`` port target (one per pod, 9090, which the operator names) and
    rewrite its address to 6880, as Dynamo's own dynamo-router PodMonitor does for 9090. Rendered from
    :data:`benchctl.monitors.KVBM`, which a local run's Prometheus configuration is written from too."""
    m = KVBM
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": m.kind,
        "metadata": _meta(m.name, s.namespace),
        "spec": {
            "namespaceSelector": {"matchNames": [s.namespace]},
            "selector": {"matchExpressions": [
                {"key": LABEL_ROLE, "operator": "In", "values": list(m.roles)},
                {"key": LABEL_CAMPAIGN, "operator": "Exists"}]},
            "podMetricsEndpoints": [{
                "port": m.port,
                "path": m.path,
                "interval": m.scrape_interval(s.scrape_interval),
                "relabelings": [{
                    "action": "replace", "sourceLabels": ["__address__"], "regex": r"([^:]+)(?::\d+)?",
                    "replacement": f"${{1}}:{m.port_override}", "targetLabel": "__address__"}],
            }],
        },
    }


def platform_manifests(s: PlatformSettings) -> list[JSON]:
    """Every Kubernetes object the platform stack applies (charts aside), in apply order. The download Job needs
    the token Secret (``hf_token_secret``, key ``HF_TOKEN``, filled from ``hf_secret_arn``) and the EFS CSI driver
    first; the dashboards and the PodMonitor need kube-prometheus-stack (its CRDs). The results dashboard
    (``benchctl-results.json``) queries Athena: it shows data once Grafana has the ``grafana-athena-datasource``
    plugin and a datasource for the lake, which this module does not configure."""
    out = [namespace_manifest(s), storage_class_manifest(s), model_claim_manifest(s), model_download_job(s)]
    if "kube-prometheus-stack" in charts_to_install(s):
        out += dashboard_configmaps(s)
        out.append(kvbm_pod_monitor(s))
    return out


def monitoring_provenance(s: PlatformSettings) -> str:
    """What the control plane records of the platform's monitoring in every campaign (BENCHCTL_PLATFORM_JSON):
    Prometheus' scrape interval and the provisioned dashboards' content hash; "{}" without the chart."""
    from benchctl.campaign.provenance import dashboards_sha256

    if "kube-prometheus-stack" not in charts_to_install(s):
        return "{}"
    return json.dumps({"scrape_interval": s.scrape_interval, "dashboards_sha256": dashboards_sha256(DASHBOARDS_DIR)},
                      sort_keys=True, separators=(",", ":"))


def platform_provenance(s: PlatformSettings) -> JSON:
    """What a campaign records as the platform it ran on: each installed chart (repository, name, version,
    release, namespace, values and their sha256), the EKS add-ons, the scrape intervals, the model download."""
    charts = {}
    for key in charts_to_install(s):
        pin, values = CHARTS[key], chart_values(key, s)
        charts[key] = {"repository": pin.repository, "chart": pin.chart, "version": pin.version,
                       "app_version": pin.app_version, "release": pin.release, "namespace": pin.namespace,
                       "values_sha256": values_hash(values), "values": values, "source": pin.source}
    return {
        "cluster_name": s.cluster_name, "region": s.region, "auto_mode": s.auto_mode,
        "charts": charts,
        "skipped_charts": sorted(set(CHARTS) - set(charts)),
        "eks_addons": sorted(EKS_ADDONS),
        "scrape_interval": s.scrape_interval,
        "dynamo_pod_monitor_interval": DYNAMO_POD_MONITOR_INTERVAL,
        "model": {"name": s.model.name, "revision": s.model.revision, "claim": s.model_pvc,
                  "storage_class": STORAGE_CLASS},
        "hf_token": {"kubernetes_secret": s.hf_token_secret, "secrets_manager_arn": s.hf_secret_arn},
        "worker_metrics_port": WORKER_SYSTEM_PORT, "kvbm_metrics_port": KVBM_METRICS_PORT,
    }
