"""One source for what Prometheus scrapes (benchctl/monitors.py): the platform's monitors on EKS and a local run's
prometheus.yml and targets; and the pure parts of the dashboard tier (recorded expositions, Grafana's
substitutions). The tier itself, on a real Prometheus and a real campaign: tests/e2e/test_dashboards_live.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from benchctl import dashboards as dq
from benchctl import monitors
from benchctl.cli.main import main
from benchctl.local import scrape
from stacks import platform_manifests as pm
from stacks import platform_values as pv
from tests import prometheus_harness as ph
from tests.unit.test_platform_values import MANAGED

COMPONENTS = [
    {"name": "dispatch-hold", "role": "dispatch-hold", "ports": {}},
    {"name": "frontend", "role": "frontend", "http_port": 20001},
    {"name": "prefill-0", "role": "prefill", "system_port": 20002, "bootstrap_port": 20003},
    {"name": "decode-0", "role": "decode", "system_port": 20004},
]


def test_the_local_config_has_the_platforms_scrape_jobs_and_promtool_accepts_it(tmp_path: Path) -> None:
    run = tmp_path / "campaigns" / "c1"
    scrape.write_targets(run, "disagg", "dynamo-bench", COMPONENTS)
    cfg_path = scrape.prometheus_dir(run) / scrape.CONFIG
    res = subprocess.run(["promtool", "check", "config", str(cfg_path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = {j["job_name"]: j for j in yaml.safe_load(cfg_path.read_text())["scrape_configs"]}
    # the prometheus-operator's names: podMonitor/<namespace>/<name>/<endpoint>, serviceMonitor/...
    assert list(jobs) == ["podMonitor/dynamo-system/dynamo-frontend/0", "podMonitor/dynamo-system/dynamo-worker/0",
                          "podMonitor/dynamo-bench/benchctl-kvbm/0", "serviceMonitor/monitoring/dcgm-exporter/0"]
    assert [j["scrape_interval"] for j in jobs.values()] == ["5s", "5s", "15s", "15s"]
    assert [j["honor_labels"] for j in jobs.values()] == [True, False, False, False]
    assert [j["relabel_configs"][0]["replacement"] for j in jobs.values()] == [
        "dynamo-system/dynamo-frontend", "dynamo-system/dynamo-worker", "dynamo-bench/benchctl-kvbm", "dcgm-exporter"]


def test_a_deployments_processes_are_labelled_as_the_operator_labels_their_pods(tmp_path: Path) -> None:
    run = tmp_path / "run"
    written = scrape.write_targets(run, "disagg", "dynamo-bench", COMPONENTS)
    assert sorted(p.parent.name for p in written) == ["dynamo-frontend", "dynamo-worker"]  # no local KVBM exporter
    fe = json.loads((scrape.targets_dir(run) / "dynamo-frontend" / "disagg.json").read_text())
    assert fe == [{"targets": ["127.0.0.1:20001"], "labels": {
        "namespace": "dynamo-bench", "pod": "disagg-frontend", "container": "main", "endpoint": "http"}}]
    workers = json.loads((scrape.targets_dir(run) / "dynamo-worker" / "disagg.json").read_text())
    assert [(w["targets"], w["labels"]["pod"], w["labels"]["dynamo_component_type"]) for w in workers] == [
        (["127.0.0.1:20002"], "disagg-prefill-0", "prefill"), (["127.0.0.1:20004"], "disagg-decode-0", "decode")]
    scrape.remove_targets(run, "disagg")  # at teardown: never a scrape of a port a later deployment reuses
    assert not list(scrape.targets_dir(run).rglob("*.json"))
    assert (scrape.prometheus_dir(run) / scrape.CONFIG).exists()


def test_the_cluster_and_the_local_config_read_the_same_monitor_records() -> None:
    kvbm = pm.kvbm_pod_monitor(MANAGED)
    ep = kvbm["spec"]["podMetricsEndpoints"][0]
    assert (kvbm["metadata"]["name"], ep["port"], ep["path"], ep["interval"]) == (
        monitors.KVBM.name, monitors.KVBM.port, monitors.KVBM.path, MANAGED.scrape_interval)
    assert ep["relabelings"][0]["replacement"].endswith(f":{monitors.KVBM_METRICS_PORT}")
    assert kvbm["spec"]["selector"]["matchExpressions"][0]["values"] == list(monitors.KVBM.roles)
    assert pv.CHARTS["dynamo-platform"].namespace == monitors.DYNAMO_PLATFORM_NAMESPACE
    assert pv.CHARTS["dcgm-exporter"].namespace == monitors.MONITORING_NAMESPACE
    assert pv.DEFAULT_SCRAPE_INTERVAL == monitors.DEFAULT_SCRAPE_INTERVAL
    assert pv.chart_values("dcgm-exporter", MANAGED)["serviceMonitor"]["interval"] == MANAGED.scrape_interval


def test_a_recorded_exposition_grows_its_counters_and_keeps_its_gauges() -> None:
    text = ("# TYPE c counter\nc 3\n# TYPE g gauge\ng{a=\"x\"} 0.5\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 4\nh_sum 1.5\nh_count 4\n# TYPE v:t_total counter\nv:t_total 7\n")
    three = ph.grown(text, 3)
    assert "c 9.0" in three and 'g{a="x"} 0.5' in three and "v:t_total 21.0" in three
    assert 'h_bucket{le="1"} 6.0' in three and 'h_bucket{le="+Inf"} 12.0' in three and "h_count 12.0" in three


def test_grafana_substitutions_as_its_prometheus_datasource_makes_them() -> None:
    assert dq.format_multi(["Qwen/Qwen3-0.6B"]) == r"Qwen/Qwen3-0\\.6B"
    assert dq.format_multi(["a", "b(c)"]) == r"(a|b\\(c\\))"
    expr = dq.substitute('rate(x{ns=~"$namespace", m=~"${model}"}[$__rate_interval])',
                         {"namespace": "(a|b)", "model": "m"}, dq.macros(0, 200))
    assert expr == 'rate(x{ns=~"(a|b)", m=~"m"}[60s])'
    assert dq.substitute("increase(x[$__range])", {}, dq.macros(100, 400)) == "increase(x[300s])"


def test_a_panels_unit_override_by_legend_is_the_unit_its_query_is_held_to() -> None:
    dash = dq.load(dq.DASHBOARDS / "dynamo-platform.json")
    units = {(t.panel_id, t.ref): t.unit for t in dq.targets("dynamo-platform.json", dash)}
    assert units[(14, "A")] == "percentunit"  # cached / input tokens: a share
    assert units[(14, "B")] == "short"  # cached tokens per request: its own axis
    assert sum(1 for name in ("dynamo-platform.json", "kvbm.json", "gpu-dcgm.json", "benchctl-results.json")
               for _ in dq.targets(name, dq.load(dq.DASHBOARDS / name))) == 86


@pytest.mark.parametrize(("args", "says"), [
    (["--prometheus", "ftp://x"], "an http(s) URL"),
    (["--prometheus", "http://127.0.0.1:1", "--var", "namespace"], "NAME=VALUE"),
    (["--prometheus", "http://127.0.0.1:1", "--start", "10"], "--start and --end go together"),
    (["--prometheus", "http://127.0.0.1:1", "--start", "10", "--end", "5"], "is not before --end"),
    (["--prometheus", "http://127.0.0.1:1", "--since", "0"], "above 0"),
    (["--prometheus", "http://127.0.0.1:1"], "cannot reach its HTTP API"),  # a closed loopback port
])
def test_the_dashboards_command_refuses_bad_input_with_exit_2_naming_it(args: list[str], says: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboards", *args]) == 2
    assert says in capsys.readouterr().err


def test_the_dashboards_command_names_a_dashboard_file_that_is_not_json(tmp_path: Path, monkeypatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    monkeypatch.setattr(dq.HttpPrometheus, "get", lambda self, path, **p: {"status": "success", "data": {}})
    assert main(["dashboards", "--prometheus", "http://127.0.0.1:1", "--dashboard", str(bad)]) == 2
    assert f"{bad}: not a dashboard JSON model" in capsys.readouterr().err
