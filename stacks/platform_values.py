"""What the optional platform stack installs, as data: pinned Helm charts, their values, the Kubernetes manifests
it applies, and the provenance a campaign records. Pure (standard library, PyYAML, jsonschema and benchctl): no
aws_cdk import, so tests and the CLI read it without synthesising anything.

API (``stacks/platform.py`` consumes it):

* :class:`ChartPin` and :data:`CHARTS` (key -> pin): Helm repository, chart, version, release, namespace and
  where the version and the values reference came from. :data:`INSTALL_ORDER` is the order the plan lists
  (GPU device plugins, monitoring, then Dynamo: the Dynamo chart creates its PodMonitors only when the
  prometheus-operator CRDs already exist). :data:`EKS_ADDONS` names what is an EKS add-on, not a chart: the
  EFS CSI driver and the Pod Identity Agent.
* :class:`PlatformSettings`: the cluster, namespace, model (name + pinned commit), the Kubernetes token secret
  and the Secrets Manager secret it is filled from, the EFS file system id (may be a CDK token string), region,
  Auto Mode, GPU node group names, and which charts to skip (``existing`` clusters).
  :func:`settings_from_spec` builds one from a campaign spec, so the names are the campaign's.
* :func:`helm_releases` (settings): each chart to install, in order, as CDK's ``HelmChart`` keyword arguments.
* :func:`charts_to_install` (keys, in order, for these settings), :func:`chart_values` (key, settings) -> the
  values dict, checked by :func:`values_problems` against the chart's own values reference at the pinned
  version (``stacks/platform_charts/<chart>/<version>/``; see its README for provenance): a chart's
  ``values.schema.json`` where it ships one, else its default ``values.yaml`` turned into a closed schema
  (every key path we set must exist there, with the default's type). None of the five charts ships a
  ``values.schema.json`` at the pinned version. A problem raises :class:`PlatformValuesError` naming the path.
* :func:`platform_manifests` (settings) -> the Kubernetes objects the stack applies: the benchmark namespace,
  the EFS StorageClass, the ReadWriteMany model claim, the one-time model download Job (the campaign's own
  prefetch rendering, :func:`benchctl.aws.k8s.prefetch.render_prefetch_job`), the Grafana dashboard ConfigMaps
  (our ``dashboards/`` JSON) and the KVBM PodMonitor.
* :func:`platform_provenance` (settings) -> every chart's name, version, values hash, and the scrape intervals:
  what a campaign records as the platform it ran on. :func:`dcgm_exporter_url` and :func:`prometheus_url` give
  the in-cluster Service URLs (a spec's ``kubernetes.dcgm_exporter_urls``; the Dynamo operator's
  ``prometheusEndpoint``).

Placement: GPU nodes carry the taint ``nvidia.com/gpu:NoSchedule``. The DaemonSets GPU nodes need (NVIDIA and EFA
device plugins, dcgm-exporter; the node exporter and the EFS CSI node plugin by their own defaults) tolerate it;
every other pod of the platform (Prometheus and its operator, Grafana, the Dynamo operator; kube-state-metrics and
the EFS CSI controller by their defaults) does not, and is kept on the CPU pool by a node affinity
(:func:`benchctl.aws.k8s.common.cpu_node_affinity`). :data:`PLACED_PODS` says where each chart's pods take theirs.

Scraping: Prometheus (kube-prometheus-stack) selects every PodMonitor and ServiceMonitor in the cluster
(``*SelectorNilUsesHelmValues: false``). The Dynamo frontend and workers are scraped by the PodMonitors the
``dynamo-platform`` chart itself renders (``dynamo-frontend``: port ``http``; ``dynamo-worker``: port ``system``;
5 s; ``deploy/helm/charts/platform/components/operator/templates/prometheus.yaml``), on the labels its operator
puts on every DGD pod: adding our own for the same ports would scrape each target twice and double every
``sum()`` of the dashboards. KVBM's exporter (port 6880, no named container port) is ours: a PodMonitor
selecting the campaign's worker and prefill pods by our ``benchctl.io/role`` label. DCGM: the dcgm-exporter
chart's own ServiceMonitor.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from benchctl import monitors
from benchctl.spec.deployment import ModelSpec
from benchctl.spec.model import Kubernetes
from benchctl.spec.settings import image_tag_version
from stacks import platform_placement as placement

JSON = dict[str, Any]

ROOT = Path(__file__).resolve().parents[1]
CHARTS_DIR = Path(__file__).resolve().parent / "platform_charts"
DASHBOARDS_DIR = ROOT / "dashboards"

_K8S_DEFAULTS = Kubernetes()
# The Dynamo release of the runtime images the campaigns run (the spec's default image tag): the platform chart
# and operator are pinned to the same release.
DYNAMO_RELEASE = image_tag_version(_K8S_DEFAULTS.dynamo_image) or "1.6.1"


class PlatformValuesError(ValueError):
    """Chart values or settings the chart (or the platform) would not accept; the message names the path."""


# ------------------------------------------------------------------------------------------------ pins


@dataclass(frozen=True)
class ChartPin:
    """One Helm chart the platform installs, pinned."""

    key: str
    repository: str  # the Helm repository (or OCI/tgz URL base) the chart is installed from
    chart: str
    version: str
    release: str
    namespace: str
    app_version: str
    source: str  # upstream git repository, path and tag/commit of the chart at this version
    reference: str  # the vendored values reference, relative to stacks/platform_charts/
    why: str  # why this chart (and this version)
    subcharts: tuple[tuple[str, str], ...] = ()  # (values key, vendored values.yaml of that subchart)
    skip_on_auto_mode: bool = False  # EKS Auto Mode builds it in


CHARTS: dict[str, ChartPin] = {
    "nvidia-device-plugin": ChartPin(
        key="nvidia-device-plugin", repository="https://nvidia.github.io/k8s-device-plugin",
        chart="nvidia-device-plugin", version="0.20.0", release="nvidia-device-plugin", namespace="kube-system",
        app_version="0.20.0",
        source="github.com/NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin at tag v0.20.0",
        reference="nvidia-device-plugin/0.20.0/values.yaml",
        why="advertises nvidia.com/gpu on managed GPU node groups (the EKS accelerated AL2023 AMI brings the "
            "driver and container toolkit, not the plugin); Auto Mode builds it in",
        skip_on_auto_mode=True),
    "aws-efa-k8s-device-plugin": ChartPin(
        key="aws-efa-k8s-device-plugin", repository="https://aws.github.io/eks-charts",
        chart="aws-efa-k8s-device-plugin", version="v0.5.30", release="aws-efa-k8s-device-plugin",
        namespace="kube-system", app_version="v0.5.20",
        source="github.com/aws/eks-charts stable/aws-efa-k8s-device-plugin at commit "
               "bfe91c4b9257c80f754ad4b3d6a9a3c239b2b8ec (2026-07-21; Chart.yaml version v0.5.30)",
        reference="aws-efa-k8s-device-plugin/v0.5.30/values.yaml",
        why="advertises vpc.amazonaws.com/efa (p4d.24xlarge: 4 interfaces) for disaggregated KV transfer over "
            "EFA; Auto Mode builds it in", skip_on_auto_mode=True),
    "kube-prometheus-stack": ChartPin(
        key="kube-prometheus-stack", repository="https://prometheus-community.github.io/helm-charts",
        chart="kube-prometheus-stack", version="88.5.3", release="kube-prometheus-stack", namespace="monitoring",
        app_version="v0.93.1",
        source="github.com/prometheus-community/helm-charts charts/kube-prometheus-stack at tag "
               "kube-prometheus-stack-88.5.3 (commit ea930baeebeba39f56d6b44e351f23b2a072a600, 2026-08-21)",
        reference="kube-prometheus-stack/88.5.3/values.yaml",
        why="Prometheus (prometheus-operator v0.93.1: the PodMonitor/ServiceMonitor CRDs) and Grafana, whose "
            "dashboard sidecar loads ConfigMaps labelled grafana_dashboard",
        subcharts=(("grafana", "grafana/12.11.1/values.yaml"),)),
    "dcgm-exporter": ChartPin(
        key="dcgm-exporter", repository="https://nvidia.github.io/dcgm-exporter/helm-charts",
        chart="dcgm-exporter", version="4.8.2", release="dcgm-exporter", namespace="monitoring",
        app_version="4.5.3-4.8.2",
        source="github.com/NVIDIA/dcgm-exporter deployment/ at tag 4.5.3-4.8.2 (commit "
               "691c92762eb551313c825f6efe4ceeee20982801, 2026-05-06)",
        reference="dcgm-exporter/4.8.2/values.yaml",
        why="NVIDIA's standalone exporter, not the GPU operator's: the nodes already have the driver and toolkit "
            "(accelerated AMI, Auto Mode), so the GPU operator would only add the exporter with a cluster-wide "
            "operator and its CRD; the standalone chart runs the same exporter on managed node groups and on Auto "
            "Mode (which builds in the device plugin but no exporter) and ships its own ServiceMonitor"),
    "dynamo-platform": ChartPin(
        key="dynamo-platform", repository="https://helm.ngc.nvidia.com/nvidia/ai-dynamo",
        chart="dynamo-platform", version=DYNAMO_RELEASE, release="dynamo-platform", namespace="dynamo-system",
        app_version=DYNAMO_RELEASE,
        source="github.com/ai-dynamo/dynamo deploy/helm/charts/platform (published as "
               "https://helm.ngc.nvidia.com/nvidia/ai-dynamo/charts/dynamo-platform-1.6.1.tgz); values reference: "
               "its README's Values table at 1.6.0 (commit 0398ccf253c2c9cb2b78acf6399fa8b92a8f55dc), the "
               "nearest copy that could be had",
        reference="dynamo-platform/1.6.1/values.documented.yaml",
        why="the Dynamo operator of the release the runtime images are (1.6.1); it applies its CRDs itself "
            "(upgradeCRD: the crd-apply init container; no separate dynamo-crds chart since 1.x); discovery "
            "through the Kubernetes API, request plane TCP, event plane ZMQ: no etcd, no NATS"),
}

# The plan's order: device plugins (GPU device check), monitoring, then Dynamo.
INSTALL_ORDER = ("nvidia-device-plugin", "aws-efa-k8s-device-plugin", "kube-prometheus-stack", "dcgm-exporter",
                 "dynamo-platform")

# Not charts: EKS managed add-ons (aws eks create-addon). Auto Mode builds in the Pod Identity Agent; the EFS CSI
# driver is an add-on in both modes (its controller's role through Pod Identity).
EKS_ADDONS = {
    "aws-efs-csi-driver": "the model volume's CSI driver (StorageClass provisioner efs.csi.aws.com); an EKS add-on, "
                          "not a chart",
    "eks-pod-identity-agent": "EKS Pod Identity for the load Jobs (and the EFS CSI controller); built into Auto Mode",
}

# ------------------------------------------------------------------------------------------------ settings

# Names the Kubernetes objects of the platform get; the campaign's (namespace, claim, secret) come from the spec
STORAGE_CLASS = "benchctl-efs"
PLATFORM_ID = "platform"  # stands in for a campaign id in the download Job's name and labels (not a campaign)
DEFAULT_SCRAPE_INTERVAL = monitors.DEFAULT_SCRAPE_INTERVAL
# the dynamo-platform chart's own PodMonitors (templates/prometheus.yaml)
DYNAMO_POD_MONITOR_INTERVAL = monitors.DYNAMO_POD_MONITOR_INTERVAL
MODEL_CLAIM_SIZE = "1Ti"  # EFS is elastic: the request is required by the API, not a limit
DASHBOARD_LABEL = "grafana_dashboard"  # kube-prometheus-stack's grafana.sidecar.dashboards.label
DASHBOARD_LABEL_VALUE = "1"  # ... and its labelValue
DASHBOARD_FOLDER = "benchctl"
DASHBOARD_FOLDER_ANNOTATION = "grafana_folder"


@dataclass(frozen=True)
class PlatformSettings:
    """What the platform is installed for. ``efs_file_system_id`` may be a CDK token string."""

    cluster_name: str
    region: str
    model: ModelSpec
    efs_file_system_id: str
    namespace: str = _K8S_DEFAULTS.namespace
    hf_token_secret: str = _K8S_DEFAULTS.hf_token_secret  # the Kubernetes Secret (key HF_TOKEN)
    hf_secret_arn: str | None = None  # the Secrets Manager secret the user fills, synced into hf_token_secret
    model_pvc: str = _K8S_DEFAULTS.model_pvc
    prefetch_image: str = _K8S_DEFAULTS.prefetch_image
    auto_mode: bool = False
    gpu_nodegroups: tuple[str, ...] = ()
    skip_charts: frozenset[str] = field(default_factory=frozenset)  # ``existing``: what the cluster already has
    scrape_interval: str = DEFAULT_SCRAPE_INTERVAL
    model_reclaim_policy: str = "Retain"  # the StorageClass's: Retain (keep the weights) or Delete

    def __post_init__(self) -> None:
        if self.model_reclaim_policy not in ("Retain", "Delete"):
            raise PlatformValuesError(f"model_reclaim_policy: {self.model_reclaim_policy!r} is not Retain or Delete")
        if not re.fullmatch(r"[1-9][0-9]*[smh]", self.scrape_interval):
            raise PlatformValuesError(f"scrape_interval: {self.scrape_interval!r} is not a Prometheus duration "
                                      "such as 15s, 1m")

    def kubernetes(self) -> Kubernetes:
        """The campaign's Kubernetes settings these names stand for (what the prefetch rendering takes)."""
        return Kubernetes(namespace=self.namespace, hf_token_secret=self.hf_token_secret, model_pvc=self.model_pvc,
                          prefetch_image=self.prefetch_image)


def settings_from_spec(spec: Any, *, cluster_name: str, region: str, efs_file_system_id: str, **kw: Any
                       ) -> PlatformSettings:
    """Platform settings with the names a campaign spec (``benchctl.spec.model.CampaignSpec``) uses."""
    k = spec.kubernetes
    nodegroups = tuple(sorted({p.nodegroup for p in spec.pools if p.provider == "managed-nodegroup" and p.nodegroup}))
    auto = any(p.provider == "auto-mode" for p in spec.pools)
    return PlatformSettings(cluster_name=cluster_name, region=region, model=spec.model,
                            efs_file_system_id=efs_file_system_id, namespace=k.namespace,
                            hf_token_secret=k.hf_token_secret, model_pvc=k.model_pvc, prefetch_image=k.prefetch_image,
                            auto_mode=kw.pop("auto_mode", auto), gpu_nodegroups=kw.pop("gpu_nodegroups", nodegroups),
                            **kw)


def charts_to_install(settings: PlatformSettings) -> list[str]:
    """The chart keys to install, in :data:`INSTALL_ORDER`: without what Auto Mode builds in or what
    ``skip_charts`` names (an unknown key there is an error)."""
    unknown = sorted(set(settings.skip_charts) - set(CHARTS))
    if unknown:
        raise PlatformValuesError(f"skip_charts: {unknown} are no charts of the platform (known: {sorted(CHARTS)})")
    return [k for k in INSTALL_ORDER if k not in settings.skip_charts
            and not (settings.auto_mode and CHARTS[k].skip_on_auto_mode)]


# ------------------------------------------------------------------------------------------- URLs and names


def _kps_fullname() -> str:
    """kube-prometheus-stack's ``kube-prometheus-stack.fullname`` helper (templates/_helpers.tpl) for our release
    and no override: the release name when it contains the chart name, cut to 26 characters."""
    pin = CHARTS["kube-prometheus-stack"]
    name = pin.release if pin.chart in pin.release else f"{pin.release}-{pin.chart}"
    return name[:26].rstrip("-")


def prometheus_url() -> str:
    """The Prometheus Service (``<fullname>-prometheus``, port 9090) in-cluster."""
    pin = CHARTS["kube-prometheus-stack"]
    return f"http://{_kps_fullname()}-prometheus.{pin.namespace}.svc.cluster.local:9090"


def dcgm_exporter_url() -> str:
    """The DCGM exporter's Service (the chart's fullname: the release, which contains the chart name; port 9400)
    as a spec's ``kubernetes.dcgm_exporter_urls`` entry takes it."""
    pin = CHARTS["dcgm-exporter"]
    return f"http://{pin.release}.{pin.namespace}.svc:9400/metrics"


# ------------------------------------------------------------------------------------------- chart values


def _values_nvidia_device_plugin(s: PlatformSettings) -> JSON:
    # the chart's default affinity needs node feature discovery labels (nfd is off by default): our GPU nodes
    return {"affinity": placement.gpu_node_affinity(s.gpu_nodegroups),
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}, dict(placement.GPU_TOLERATION)],
            "gfd": {"enabled": False}}


def _values_efa(s: PlatformSettings) -> JSON:
    # the chart's own node affinity keeps it to EFA-capable instance types (p4d.24xlarge and g6e are listed)
    return {"tolerations": [dict(placement.GPU_TOLERATION), dict(placement.EFA_TOLERATION)]}


def _values_kps(s: PlatformSettings) -> JSON:
    return {
        "alertmanager": {"enabled": False},  # nothing routes alerts in this stack
        "prometheusOperator": {"affinity": placement.cpu_node_affinity(s.gpu_nodegroups),
                               "admissionWebhooks": {"patch": {"affinity": placement.cpu_node_affinity(s.gpu_nodegroups)}}},
        # Prometheus keeps its series on an emptyDir (storageSpec left empty): no EBS volume outlives the stack;
        # on the CPU pool, no GPU pool's scale-in evicts it
        "prometheus": {
            "service": {"type": "ClusterIP"},
            "prometheusSpec": {
                "affinity": placement.cpu_node_affinity(s.gpu_nodegroups),
                "scrapeInterval": s.scrape_interval,
                "evaluationInterval": s.scrape_interval,
                # every PodMonitor/ServiceMonitor (the Dynamo chart's, ours, dcgm-exporter's), not only this release's
                "podMonitorSelectorNilUsesHelmValues": False,
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "retention": "15d",
            },
        },
        "grafana": {
            "affinity": placement.cpu_node_affinity(s.gpu_nodegroups),
            "service": {"type": "ClusterIP"},
            "sidecar": {"dashboards": {
                "enabled": True, "label": DASHBOARD_LABEL, "labelValue": DASHBOARD_LABEL_VALUE,
                "searchNamespace": "ALL", "folderAnnotation": DASHBOARD_FOLDER_ANNOTATION,
                "provider": {"foldersFromFilesStructure": True}}},
        },
    }


def _values_dcgm(s: PlatformSettings) -> JSON:
    return {
        "service": {"type": "ClusterIP"},
        "serviceMonitor": {"enabled": True, "interval": s.scrape_interval},
        "affinity": placement.gpu_node_affinity(s.gpu_nodegroups),
        "tolerations": [dict(placement.GPU_TOLERATION)],
        # the GPU -> pod mapping (the `pod` label docs/METRICS.md attributes a stage's GPU use by) is the
        # chart's default: the kubelet's pod-resources socket (kubeletPath)
    }


def _values_dynamo(s: PlatformSettings) -> JSON:
    return {
        "global": {
            "etcd": {"install": False},  # discovery through the Kubernetes API (the chart's default backend)
            "nats": {"install": False},  # request plane TCP, event plane ZMQ: no NATS
            "grove": {"install": False},  # single-node TP workers: no multinode orchestration
            "kai-scheduler": {"install": False},
        },
        "dynamo-operator": {
            "enabled": True,
            "upgradeCRD": True,  # the operator applies the release's CRDs (crd-apply init container)
            "controllerManager": {"affinity": placement.cpu_node_affinity(s.gpu_nodegroups), "manager": {"image": {"tag": DYNAMO_RELEASE}}},
            "dynamo": {"metrics": {"prometheusEndpoint": prometheus_url()}},
        },
    }


_VALUES = {
    "nvidia-device-plugin": _values_nvidia_device_plugin,
    "aws-efa-k8s-device-plugin": _values_efa,
    "kube-prometheus-stack": _values_kps,
    "dcgm-exporter": _values_dcgm,
    "dynamo-platform": _values_dynamo,
}


def chart_values(key: str, settings: PlatformSettings) -> JSON:
    """The values the platform installs chart ``key`` with, checked against the chart's own reference
    (:func:`values_problems`); raises :class:`PlatformValuesError` naming every bad path."""
    if key not in CHARTS:
        raise PlatformValuesError(f"chart {key!r}: not a chart of the platform (known: {sorted(CHARTS)})")
    values = _VALUES[key](settings)
    problems = values_problems(key, values)
    if problems:
        raise PlatformValuesError(f"chart {key} {CHARTS[key].version}: " + "; ".join(problems))
    return values


def helm_releases(settings: PlatformSettings) -> list[JSON]:
    """Each chart to install, in order, as the keyword arguments of CDK's ``aws_eks.HelmChart`` / ``Cluster.add_helm_chart``
    take them (``chart``, ``repository``, ``version``, ``release``, ``namespace``, ``create_namespace``, ``values``),
    values checked (:func:`chart_values`)."""
    out = []
    for key in charts_to_install(settings):
        pin = CHARTS[key]
        out.append({"chart": pin.chart, "repository": pin.repository, "version": pin.version, "release": pin.release,
                    "namespace": pin.namespace, "create_namespace": pin.namespace != "kube-system",
                    "values": chart_values(key, settings)})
    return out


# ------------------------------------------------------------------------------------------- values reference


def _schema_of_default(value: Any) -> JSON:
    """A closed JSON Schema of what a chart's default values admit: a mapping with keys admits only those keys
    (each by its default's type), an empty mapping any keys (nodeSelector, annotations), a list any items, a
    null default anything (the chart documents it without a type)."""
    if isinstance(value, dict):
        if not value:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": False,
                "properties": {k: _schema_of_default(v) for k, v in value.items()}}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        return {"type": "array"}
    return {}


def _reference_path(rel: str) -> Path:
    return CHARTS_DIR / rel


@cache
def reference_defaults(key: str) -> JSON:
    """The chart's default values at the pinned version (subcharts' defaults under their keys, overridden by
    the parent's, as Helm merges them)."""
    pin = CHARTS[key]
    out: JSON = yaml.safe_load(_reference_path(pin.reference).read_text()) or {}
    for sub_key, rel in pin.subcharts:
        sub = yaml.safe_load(_reference_path(rel).read_text()) or {}
        out[sub_key] = _merge(sub, out.get(sub_key) or {})
    return out


def _merge(base: JSON, over: JSON) -> JSON:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) and v else copy.deepcopy(v)
    return out


@cache
def _validator(key: str) -> jsonschema.Draft7Validator:
    pin = CHARTS[key]
    schema_file = _reference_path(pin.reference).with_name("values.schema.json")
    if schema_file.exists():  # the chart's own schema, when it ships one
        schema = json.loads(schema_file.read_text())
    else:
        schema = _schema_of_default(reference_defaults(key))
    return jsonschema.Draft7Validator(schema)


def values_problems(key: str, values: JSON) -> list[str]:
    """Every path of ``values`` chart ``key`` (at its pinned version) does not have, or has with another type."""
    out = []
    for e in sorted(_validator(key).iter_errors(values), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(map(str, e.absolute_path)) or "(values)"
        out.append(f"{path}: {e.message}")
    return out


def values_hash(values: JSON) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ------------------------------------------------------------------------------------------- provenance
