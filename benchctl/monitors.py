"""What Prometheus scrapes, on a cluster and on this machine: one source for both.

On EKS, kube-prometheus-stack's Prometheus scrapes four monitors, each turned into a scrape job by the
prometheus-operator:

* ``dynamo-frontend`` and ``dynamo-worker``: PodMonitors the ``dynamo-platform`` chart renders itself
  (``deploy/helm/charts/platform/components/operator/templates/prometheus.yaml``: ports ``http`` and
  ``system``, 5 s, the frontend with ``honorLabels``, the worker's ``dynamo_component_type`` from its pod label);
* ``benchctl-kvbm``: ours, KVBM's exporter (port 6880) on the campaign's worker and prefill pods
  (``stacks.platform_manifests.kvbm_pod_monitor`` renders it from :data:`KVBM`);
* ``dcgm-exporter``: the dcgm-exporter chart's ServiceMonitor (port ``metrics``).

The operator gives every target the labels the dashboards select on: ``namespace``, ``pod``, ``container``,
``endpoint`` (the port's name) and ``job`` (a PodMonitor's ``<namespace>/<name>``, a ServiceMonitor's Service
name); the job itself is named ``podMonitor/<namespace>/<name>/<endpoint index>``.

:func:`prometheus_config` writes the same jobs (names, intervals, paths, honour of labels, ``job`` label) for a
Prometheus on this machine, reading its targets from file-discovery files; :func:`local_targets` writes those
files for a local deployment's processes, with the labels the operator would give their pods. A local run keeps
both under ``<run>/prometheus/`` (``benchctl.local.scrape``): ``prometheus --config.file
<run>/prometheus/prometheus.yml`` then feeds the dashboards of ``dashboards/`` from a local campaign.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

# where the monitors live on the cluster (the charts' release namespaces; stacks/platform_values.py CHARTS)
DYNAMO_PLATFORM_NAMESPACE = "dynamo-system"
MONITORING_NAMESPACE = "monitoring"
DEFAULT_SCRAPE_INTERVAL = "15s"  # the platform's (kube-prometheus-stack's and our monitors') default
KVBM_METRICS_PORT = 6880  # KVBM's exporter with DYN_KVBM_METRICS=true (docs/FACTS.md "Dynamo on Kubernetes")
DYNAMO_POD_MONITOR_INTERVAL = "5s"  # the dynamo-platform chart's own PodMonitors
CONTAINER = "main"  # the container the operator names in a DGD pod; locally, the one process


@dataclass(frozen=True)
class Monitor:
    """One PodMonitor/ServiceMonitor endpoint as the prometheus-operator turns it into a scrape job."""

    kind: str  # PodMonitor | ServiceMonitor
    name: str
    namespace: str  # the monitor object's own namespace (its job name and, for a PodMonitor, its job label)
    port: str  # the named port the endpoint selects
    path: str
    interval: str | None  # None: the platform's scrape interval
    roles: tuple[str, ...]  # the Dynamo components it selects (none: not a Dynamo pod)
    honor_labels: bool = False
    port_override: int | None = None  # the address rewritten to this port (a relabeling), not the named port's
    role_label: str | None = None  # target label given the component's role (a relabeling from a pod label)

    def job_name(self) -> str:
        return f"{self.kind[0].lower()}{self.kind[1:]}/{self.namespace}/{self.name}/0"

    def job_label(self) -> str:
        return f"{self.namespace}/{self.name}" if self.kind == "PodMonitor" else self.name

    def scrape_interval(self, platform_interval: str) -> str:
        return self.interval or platform_interval


FRONTEND = Monitor("PodMonitor", "dynamo-frontend", DYNAMO_PLATFORM_NAMESPACE, "http", "/metrics",
                   DYNAMO_POD_MONITOR_INTERVAL, ("frontend",), honor_labels=True)
WORKER = Monitor("PodMonitor", "dynamo-worker", DYNAMO_PLATFORM_NAMESPACE, "system", "/metrics",
                 DYNAMO_POD_MONITOR_INTERVAL, ("worker", "prefill", "decode"), role_label="dynamo_component_type")
KVBM = Monitor("PodMonitor", "benchctl-kvbm", "", "system", "/metrics", None, ("worker", "prefill"),
               port_override=KVBM_METRICS_PORT)  # namespace: the campaign's (the monitor is created there)
DCGM = Monitor("ServiceMonitor", "dcgm-exporter", MONITORING_NAMESPACE, "metrics", "/metrics", None, ())
MONITORS = (FRONTEND, WORKER, KVBM, DCGM)


def _placed(m: Monitor, campaign_namespace: str) -> Monitor:
    return m if m.namespace else Monitor(**{**m.__dict__, "namespace": campaign_namespace})


def prometheus_config(targets_dir: str, campaign_namespace: str,
                      platform_interval: str = DEFAULT_SCRAPE_INTERVAL) -> JSON:
    """``prometheus.yml`` (as a dict) scraping what the platform's monitors scrape, its targets read from
    ``<targets_dir>/<monitor name>/*.json`` (Prometheus' file discovery, re-read on change)."""
    jobs = []
    for m in (_placed(m, campaign_namespace) for m in MONITORS):
        jobs.append({
            "job_name": m.job_name(),
            "scrape_interval": m.scrape_interval(platform_interval),
            "metrics_path": m.path,
            "honor_labels": m.honor_labels,
            "file_sd_configs": [{"files": [f"{targets_dir}/{m.name}/*.json"], "refresh_interval": "5s"}],
            "relabel_configs": [{"target_label": "job", "replacement": m.job_label(), "action": "replace"}],
        })
    return {"global": {"scrape_interval": platform_interval, "evaluation_interval": platform_interval},
            "scrape_configs": jobs}


def pod_name(deployment: str, component: str) -> str:
    """A local process's ``pod`` label: the deployment, then the component (``agg-worker-0``)."""
    return f"{deployment}-{component}"


def local_targets(deployment: str, namespace: str, components: list[JSON]) -> dict[str, list[JSON]]:
    """File-discovery entries by monitor name for one local deployment's ``components`` (``name``, ``role``,
    ``http_port`` or ``system_port``): what each monitor would select on the cluster, on 127.0.0.1, with the
    labels the operator gives a pod's target. KVBM has no local exporter (the mocker's host tier stands in for
    the offload, and exposes none of KVBM's metrics): nothing is written for it."""
    out: dict[str, list[JSON]] = {}
    for c in components:
        for m in (FRONTEND, WORKER):
            port = c.get("http_port") if m is FRONTEND else c.get("system_port")
            if c.get("role") not in m.roles or not port:
                continue
            labels = {"namespace": namespace, "pod": pod_name(deployment, c["name"]), "container": CONTAINER,
                      "endpoint": m.port}
            if m.role_label:
                labels[m.role_label] = c["role"]
            out.setdefault(m.name, []).append({"targets": [f"127.0.0.1:{port}"], "labels": labels})
    return out
