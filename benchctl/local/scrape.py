"""The platform's scrape jobs for a local run (``benchctl.monitors``): ``<run>/prometheus/prometheus.yml`` and,
while a deployment is up, its processes as file-discovery targets under ``<run>/prometheus/targets/<monitor>/``.

Nothing here starts a Prometheus: a person who wants the dashboards of ``dashboards/`` on a local campaign runs
``prometheus --config.file <run>/prometheus/prometheus.yml --web.listen-address 127.0.0.1:9090`` beside it; the
dashboard tier of the tests does exactly that. A deployment's targets are written once its processes are
started and removed at its teardown, so a Prometheus never scrapes a port a later deployment may reuse.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import yaml

from benchctl.atomic import atomic_write
from benchctl.monitors import DEFAULT_SCRAPE_INTERVAL, JSON, MONITORS, local_targets, prometheus_config

CONFIG = "prometheus.yml"


def prometheus_dir(run_dir: Path) -> Path:
    return run_dir / "prometheus"


def targets_dir(run_dir: Path) -> Path:
    return prometheus_dir(run_dir) / "targets"


def config_text(run_dir: Path, namespace: str, platform_interval: str = DEFAULT_SCRAPE_INTERVAL) -> str:
    head = ("# The platform's scrape jobs (benchctl/monitors.py) over this run's local processes: "
            "prometheus --config.file <this file>\n")
    cfg = prometheus_config(str(targets_dir(run_dir).resolve()), namespace, platform_interval)
    return head + yaml.safe_dump(cfg, sort_keys=False)


def write_targets(run_dir: Path, deployment: str, namespace: str, components: list[JSON]) -> list[Path]:
    """The run's ``prometheus.yml`` (once) and this deployment's targets, one file per monitor it has targets
    for; returns the target files written."""
    cfg = prometheus_dir(run_dir) / CONFIG
    if not cfg.exists():
        atomic_write(cfg, config_text(run_dir, namespace))
    written = []
    for monitor, entries in local_targets(deployment, namespace, components).items():
        path = targets_dir(run_dir) / monitor / f"{deployment}.json"
        atomic_write(path, json.dumps(entries, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


def remove_targets(run_dir: Path, deployment: str) -> None:
    for m in MONITORS:
        with contextlib.suppress(FileNotFoundError):
            (targets_dir(run_dir) / m.name / f"{deployment}.json").unlink()
