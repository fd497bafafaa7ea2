"""The platform stack's charts and manifests (stacks/platform_values.py), held to upstream.

- Chart values: each chart's values are checked against that chart's own defaults at the pinned version, vendored
  in stacks/platform_charts/ (none of the five ships a values.schema.json); a key the chart does not have, or a
  value of another type, is refused naming its path. The vendored files are the copies their README records.
- Manifests: every object the platform applies passes the campaign's strict validation (Kubernetes' own schema
  through kubernetes-validate for built-in kinds, the vendored prometheus-operator CRD for PodMonitors, ObjectMeta).
- What they mean: the dashboards are exactly dashboards/, the download Job is the campaign's prefetch of the pinned
  commit, no Service is exposed outside the cluster, the names are the campaign's, the monitors select what the
  campaign renders, and the provenance records every installed chart.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from benchctl.aws.k8s.common import (
    HF_TOKEN_KEY,
    KVBM_METRICS_PORT,
    hf_token_volume,
    model_snapshot_dir,
    model_volume,
)
from benchctl.aws.k8s.prefetch import render_prefetch_job
from benchctl.aws.k8s.render import render_dgd
from benchctl.spec.deployment import ModelSpec
from benchctl.spec.model import Kubernetes, image_tag_version, load_spec
from stacks import platform_manifests as pm
from stacks import platform_values as pv
from tests import crd_schemas
from tests.aws_checks import ROOT, job_problems

REVISION = "0123456789abcdef0123456789abcdef01234567"
MODEL = ModelSpec(name="Qwen/Qwen3-30B-A3B", revision=REVISION)
MANAGED = pv.PlatformSettings(cluster_name="bench", region="us-east-1", model=MODEL, efs_file_system_id="fs-0abc",
                              gpu_nodegroups=("p4d-a", "g6e-b"))
# efs_file_system_id as CDK passes it before deploy: a token string
AUTO = pv.PlatformSettings(cluster_name="bench", region="us-east-1", model=MODEL,
                           efs_file_system_id="${Token[TOKEN.123]}", auto_mode=True)
SETTINGS = {"managed": MANAGED, "auto-mode": AUTO}


def _get(values: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        values = values[part]
    return values


def _set(values: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(values)
    *parents, last = path.split(".")
    node = out
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return out


# ------------------------------------------------------------------------------------------ chart values


@pytest.mark.parametrize("which", sorted(SETTINGS))
def test_every_installed_charts_values_validate_against_its_pinned_reference(which: str) -> None:
    s = SETTINGS[which]
    keys = pv.charts_to_install(s)
    assert keys == [k for k in pv.INSTALL_ORDER if which == "managed" or not pv.CHARTS[k].skip_on_auto_mode]
    for key in keys:
        values = pv.chart_values(key, s)
        assert values and pv.values_problems(key, values) == [], key


# (chart, a path the chart does not have, a path it has with another type than we give)
MUTATIONS = [
    ("kube-prometheus-stack", "grafana.sidecar.dashboards.lable", "prometheus.prometheusSpec.podMonitorSelectorNilUsesHelmValues"),
    ("dcgm-exporter", "serviceMonitor.intervall", "service.port"),
    ("nvidia-device-plugin", "devicePlugin.enable", "gfd.enabled"),
    ("aws-efa-k8s-device-plugin", "image.digest", "securityContext.privileged"),
    ("dynamo-platform", "dynamo-operator.dynamo.metrics.podMonitors", "global.nats.install"),
]


@pytest.mark.parametrize(("key", "unknown", "typed"), MUTATIONS)
def test_a_path_the_chart_lacks_or_a_wrong_type_is_refused_naming_the_path(key: str, unknown: str, typed: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    good = pv.chart_values(key, MANAGED)
    parent, _, leaf = unknown.rpartition(".")
    problems = pv.values_problems(key, _set(good, unknown, "x"))
    assert len(problems) == 1 and problems[0].startswith(f"{parent}:") and repr(leaf) in problems[0], problems
    problems = pv.values_problems(key, _set(good, typed, "not-of-that-type"))
    assert len(problems) == 1 and problems[0].startswith(f"{typed}:"), problems
    # chart_values itself refuses, naming the chart, its version and the path
    monkeypatch.setitem(pv._VALUES, key, lambda s: _set(good, unknown, "x"))
    with pytest.raises(pv.PlatformValuesError, match=rf"{key} {pv.CHARTS[key].version}: {parent}:"):
        pv.chart_values(key, MANAGED)


def test_the_vendored_references_are_the_recorded_upstream_copies() -> None:
    readme = (pv.CHARTS_DIR / "README.md").read_text()
    files = {rel for pin in pv.CHARTS.values() for rel in (pin.reference, *(r for _, r in pin.subcharts))}
    assert len(files) == 6
    for rel in sorted(files):
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{rel}`"))
        digest = hashlib.sha256((pv.CHARTS_DIR / rel).read_bytes()).hexdigest()
        assert f"`{digest}`" in row, f"{rel} differs from the copy README.md records"
    for pin in pv.CHARTS.values():
        assert pin.reference.split("/")[:2] == [pin.chart, pin.version]
        # no chart ships its own schema at the pinned version: the defaults are the reference
        assert not (pv.CHARTS_DIR / pin.reference).with_name("values.schema.json").exists()


def test_the_dynamo_chart_is_the_release_every_example_runs_and_needs_no_etcd_or_nats() -> None:
    pin = pv.CHARTS["dynamo-platform"]
    versions = set()
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        k = load_spec(path).kubernetes
        versions.add(k.dynamo_runtime_version or image_tag_version(k.dynamo_image))
    assert versions == {pin.version} == {pin.app_version} == {"1.6.1"}
    values = pv.chart_values("dynamo-platform", MANAGED)
    assert _get(values, "global.nats.install") is False and _get(values, "global.etcd.install") is False
    assert "natsAddr" not in values["dynamo-operator"] and "etcdAddr" not in values["dynamo-operator"]
    assert _get(values, "dynamo-operator.upgradeCRD") is True  # the operator applies the release's CRDs
    assert _get(values, "dynamo-operator.controllerManager.manager.image.tag") == pin.version
    assert _get(values, "dynamo-operator.dynamo.metrics.prometheusEndpoint") == pv.prometheus_url()


def test_no_service_is_exposed_outside_the_cluster() -> None:
    def exposed(node: Any, path: str = "") -> list[str]:
        """Paths of a Service type outside ClusterIP in the effective values, unless its section is disabled."""
        if not isinstance(node, dict) or node.get("enabled") is False:
            return []
        out = [f"{path}.type".lstrip(".") for k, v in node.items() if k == "type" and v in ("LoadBalancer", "NodePort")]
        return out + [p for k, v in node.items() for p in exposed(v, f"{path}.{k}")]

    for key in pv.charts_to_install(MANAGED):
        # what Helm renders with: the chart's defaults (subcharts' included) merged with ours
        effective = pv._merge(pv.reference_defaults(key), pv.chart_values(key, MANAGED))
        assert exposed(effective) == [], key
    kps = pv.chart_values("kube-prometheus-stack", MANAGED)
    assert _get(kps, "prometheus.service.type") == _get(kps, "grafana.service.type") == "ClusterIP"
    assert _get(kps, "alertmanager.enabled") is False
    assert _get(pv.chart_values("dcgm-exporter", MANAGED), "service.type") == "ClusterIP"
    # nor a volume that could outlive the stack: Prometheus on an emptyDir, Grafana without persistence
    effective = pv._merge(pv.reference_defaults("kube-prometheus-stack"), kps)
    assert _get(effective, "prometheus.prometheusSpec.storageSpec") == {}
    assert _get(effective, "grafana.persistence.enabled") is False
    # the check can fail: kube-prometheus-stack's external Thanos Service is a LoadBalancer once enabled
    thanos = _set(kps, "prometheus.thanosServiceExternal.enabled", True)
    assert exposed(pv._merge(pv.reference_defaults("kube-prometheus-stack"), thanos)) == [
        "prometheus.thanosServiceExternal.type"]


def test_the_scrape_interval_is_set_and_recorded() -> None:
    fast = pv.PlatformSettings(cluster_name="c", region="r", model=MODEL, efs_file_system_id="fs-1",
                               scrape_interval="5s")
    kps = pv.chart_values("kube-prometheus-stack", fast)
    assert _get(kps, "prometheus.prometheusSpec.scrapeInterval") == "5s"
    assert _get(pv.chart_values("dcgm-exporter", fast), "serviceMonitor.interval") == "5s"
    prov = pm.platform_provenance(fast)
    assert prov["scrape_interval"] == "5s" and prov["dynamo_pod_monitor_interval"] == "5s"
    with pytest.raises(pv.PlatformValuesError, match="scrape_interval: '15 seconds'"):
        pv.PlatformSettings(cluster_name="c", region="r", model=MODEL, efs_file_system_id="fs-1",
                            scrape_interval="15 seconds")


# ------------------------------------------------------------------------------------------ manifests

_CLUSTER_SCOPED = {"Namespace", "StorageClass"}


def manifest_problems(obj: dict[str, Any]) -> list[str]:
    """The campaign's strict validation: a vendored CRD for its kinds, else Kubernetes' own schema (strict)."""
    if obj["kind"] in crd_schemas.FILES:
        return crd_schemas.problems(obj)
    return job_problems(obj) + crd_schemas.object_meta_problems(obj, namespaced=obj["kind"] not in _CLUSTER_SCOPED)


@pytest.mark.parametrize("which", sorted(SETTINGS))
def test_every_platform_manifest_passes_strict_validation(which: str) -> None:
    manifests = pm.platform_manifests(SETTINGS[which])
    kinds = [m["kind"] for m in manifests]
    assert kinds[:4] == ["Namespace", "StorageClass", "PersistentVolumeClaim", "Job"]
    assert kinds.count("ConfigMap") == len(pm.dashboard_files()) and kinds.count("PodMonitor") == 1
    for m in manifests:
        assert manifest_problems(m) == [], (m["kind"], m["metadata"]["name"])


@pytest.mark.parametrize(("kind", "path", "value", "problem"), [
    ("PersistentVolumeClaim", "spec.accessMode", ["ReadWriteMany"],  # a field Kubernetes does not have
     "spec: Additional properties are not allowed ('accessMode' was unexpected)"),
    ("StorageClass", "reclaimPolicy", 1, "reclaimPolicy: 1 is not of type 'string'"),
    ("PodMonitor", "spec.podMetricsEndpoints", [{"port": "system", "intervall": "5s"}],
     "spec.podMetricsEndpoints.0: Additional properties are not allowed ('intervall' was unexpected)"),
    ("PodMonitor", "metadata.labels", {"benchctl.io/role": "not a label value"},
     "metadata.labels.benchctl.io/role: 'not a label value' is not a label value"),
])
def test_the_manifest_validation_refuses_what_the_api_server_would(kind: str, path: str, value: Any,
                                                                   problem: str) -> None:
    obj = next(m for m in pm.platform_manifests(MANAGED) if m["kind"] == kind)
    problems = manifest_problems(_set(obj, path, value))
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_the_dashboard_configmaps_hold_exactly_our_dashboards_as_the_grafana_sidecar_loads_them() -> None:
    kps = pv.chart_values("kube-prometheus-stack", MANAGED)
    sidecar = _get(kps, "grafana.sidecar.dashboards")
    cms = pm.dashboard_configmaps(MANAGED)
    files = {p.name: p for p in (ROOT / "dashboards").glob("*.json")}
    assert len(files) == 4
    held = {}
    for cm in cms:
        assert cm["metadata"]["labels"][sidecar["label"]] == sidecar["labelValue"]
        assert cm["metadata"]["annotations"][sidecar["folderAnnotation"]] == pv.DASHBOARD_FOLDER
        assert cm["metadata"]["namespace"] == pv.CHARTS["kube-prometheus-stack"].namespace
        (name, text), = cm["data"].items()
        held[name] = json.loads(text)
    assert sidecar["enabled"] is True and sidecar["searchNamespace"] == "ALL"
    assert held == {name: json.loads(p.read_text()) for name, p in files.items()}
    # applied with kubectl apply (client-side), each object is copied into its last-applied-configuration
    # annotation, and an object's annotations may total 256 KiB (apimachinery TotalAnnotationSizeLimitB)
    assert max(len(json.dumps(cm, separators=(",", ":"))) for cm in cms) < 256 * 1024


def test_the_download_job_is_the_campaigns_prefetch_of_the_pinned_commit() -> None:
    job = pm.model_download_job(MANAGED)
    k = Kubernetes()
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["MODEL"] == MODEL.name and env["REVISION"] == REVISION
    assert env["SNAPSHOT"] == model_snapshot_dir(MODEL) and REVISION in env["SNAPSHOT"]
    assert "PATTERNS" not in env  # the weights too
    # the campaign's names: its claim, its token secret (as a read-only file, key HF_TOKEN), its namespace
    assert model_volume(k) in pod["volumes"] and hf_token_volume(k) in pod["volumes"]
    assert hf_token_volume(k)["secret"]["items"][0]["key"] == HF_TOKEN_KEY
    assert job["metadata"]["namespace"] == k.namespace
    # the same code as the campaign's prefetch, kept off the GPU node groups
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "eks.amazonaws.com/nodegroup", "operator": "NotIn", "values": ["g6e-b", "p4d-a"]} \
        in terms[0]["matchExpressions"]
    prefetch = render_prefetch_job(MODEL, k, pv.PLATFORM_ID, pools=pm._gpu_pools(MANAGED))
    name = job["metadata"].pop("name")  # the prefetch's, then a hash of its spec (a changed download: a new Job)
    assert name.startswith(prefetch["metadata"].pop("name") + "-") and job == prefetch
    with pytest.raises(pv.PlatformValuesError, match=r"model\.revision"):
        pm.model_download_job(pv.PlatformSettings(cluster_name="c", region="r", model=ModelSpec(name=MODEL.name),
                                                  efs_file_system_id="fs-1"))


def test_the_names_are_the_campaigns() -> None:
    spec = load_spec(ROOT / "examples" / "seed-plan.yaml")
    s = pv.settings_from_spec(spec, cluster_name="c", region="r", efs_file_system_id="fs-1")
    k = spec.kubernetes
    by_kind = {m["kind"]: m for m in pm.platform_manifests(s)}
    assert by_kind["Namespace"]["metadata"]["name"] == k.namespace
    claim = by_kind["PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == model_volume(k)["persistentVolumeClaim"]["claimName"]
    assert claim["metadata"]["namespace"] == k.namespace and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == by_kind["StorageClass"]["metadata"]["name"]
    assert by_kind["StorageClass"]["provisioner"] == "efs.csi.aws.com"
    assert by_kind["StorageClass"]["parameters"]["fileSystemId"] == "fs-1"
    assert hf_token_volume(k) in by_kind["Job"]["spec"]["template"]["spec"]["volumes"]
    assert s.model == spec.model and s.gpu_nodegroups == tuple(sorted({p.nodegroup for p in spec.pools}))
    # the DCGM exporter's Service is a URL a spec accepts (kubernetes.dcgm_exporter_urls)
    assert Kubernetes(dcgm_exporter_urls=[pv.dcgm_exporter_url()]).dcgm_exporter_urls == [pv.dcgm_exporter_url()]


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions, all ANDed) against a pod's labels."""
    ok = all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    for e in selector.get("matchExpressions", []):
        op, key, values = e["operator"], e["key"], e.get("values", [])
        if op == "In":
            ok = ok and labels.get(key) in values
        elif op == "NotIn":
            ok = ok and labels.get(key) not in values
        elif op == "Exists":
            ok = ok and key in labels
        else:
            assert op == "DoesNotExist", op
            ok = ok and key not in labels
    return ok


def test_the_monitors_select_the_pods_the_campaign_renders() -> None:
    spec = load_spec(ROOT / "examples" / "auto-mode.yaml")
    monitor = pm.kvbm_pod_monitor(pv.settings_from_spec(spec, cluster_name="c", region="r", efs_file_system_id="f"))
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [spec.kubernetes.namespace]}
    kvbm_pods = other_pods = 0
    for exp in spec.experiments:
        dgd = render_dgd(spec, "cid-1", exp.name)
        for comp in dgd["spec"]["components"]:
            tmpl = comp["podTemplate"]
            # Dynamo's own PodMonitors (dynamo-frontend, dynamo-worker) select the labels its operator derives:
            # nvidia.com/dynamo-component-type from the component type, nvidia.com/metrics-enabled unless the
            # annotation nvidia.com/enable-metrics is "false"
            assert comp["type"] in ("frontend", "worker", "prefill", "decode")
            assert tmpl["metadata"].get("annotations", {}).get("nvidia.com/enable-metrics") != "false"
            env = {e["name"]: e.get("value") for c in tmpl["spec"]["containers"] for e in c.get("env", [])}
            selected = _matches(monitor["spec"]["selector"], tmpl["metadata"]["labels"])
            if env.get("DYN_KVBM_METRICS") == "true":
                assert selected, (exp.name, comp["name"])
                kvbm_pods += 1
            elif comp["type"] in ("frontend", "decode"):
                assert not selected, (exp.name, comp["name"])
                other_pods += 1
    assert kvbm_pods and other_pods
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["relabelings"][0]["replacement"].endswith(f":{KVBM_METRICS_PORT}")
    assert endpoint["port"] == "system"  # one target per pod: the worker's named system port, rewritten


# ------------------------------------------------------------------------------------------ provenance


def test_the_provenance_records_every_installed_chart_and_what_was_skipped() -> None:
    s = pv.PlatformSettings(cluster_name="c", region="r", model=MODEL, efs_file_system_id="fs-1",
                            skip_charts=frozenset({"nvidia-device-plugin"}))
    prov = pm.platform_provenance(s)
    assert list(prov["charts"]) == [k for k in pv.INSTALL_ORDER if k != "nvidia-device-plugin"]
    assert prov["skipped_charts"] == ["nvidia-device-plugin"]
    for key, rec in prov["charts"].items():
        values = pv.chart_values(key, s)
        assert rec["version"] == pv.CHARTS[key].version and rec["chart"] == pv.CHARTS[key].chart
        assert rec["values_sha256"] == pv.values_hash(values) and rec["values"] == values
    assert prov["model"] == {"name": MODEL.name, "revision": REVISION, "claim": s.model_pvc,
                             "storage_class": pv.STORAGE_CLASS}
    assert "aws-efs-csi-driver" in prov["eks_addons"]
    json.dumps(prov)  # recordable as is
    auto = pm.platform_provenance(AUTO)
    assert set(auto["skipped_charts"]) == {"nvidia-device-plugin", "aws-efa-k8s-device-plugin"}
    with pytest.raises(pv.PlatformValuesError, match=r"skip_charts: \['grafana'\]"):
        pv.charts_to_install(pv.PlatformSettings(cluster_name="c", region="r", model=MODEL, efs_file_system_id="f",
                                                 skip_charts=frozenset({"grafana"})))


def test_the_helm_releases_are_the_pinned_charts_in_the_plans_order() -> None:
    releases = pv.helm_releases(MANAGED)
    assert [r["chart"] for r in releases] == [pv.CHARTS[k].chart for k in pv.charts_to_install(MANAGED)]
    order = [r["chart"] for r in releases]
    # device plugins (GPU check), then monitoring, then Dynamo (its PodMonitors need the monitoring CRDs)
    assert order.index("kube-prometheus-stack") < order.index("dynamo-platform") == len(order) - 1
    for r in releases:
        pin = pv.CHARTS[r["chart"]]
        assert (r["repository"], r["version"], r["release"], r["namespace"]) == (
            pin.repository, pin.version, pin.release, pin.namespace)
        assert r["values"] == pv.chart_values(pin.key, MANAGED)
