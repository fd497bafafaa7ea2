"""The run record's provenance (benchctl.campaign.provenance): every field of the campaigns row filled, never
blank; on EKS from what the cluster reported (the pre-pull containers' engine packages, the API server's
version, the workers' nodes' drivers, the platform's monitoring); locally "not applicable" with why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchctl.aws.k8s.nodepool import ENGINE_PACKAGES_MARKER, ENGINE_PACKAGES_SCRIPT, PREPULL_COMMAND
from benchctl.campaign.provenance import (
    AIPERF_SERVER_METRICS_INTERVAL_S,
    FIELDS,
    dashboards_sha256,
    provenance,
)
from benchctl.lake.tables import TABLES
from benchctl.spec.model import load_spec

ROOT = Path(__file__).resolve().parents[2]
SEED = load_spec(ROOT / "examples" / "seed-plan.yaml")
SMOKE = load_spec(ROOT / "examples" / "smoke.yaml")


def test_every_field_is_a_column_of_the_campaigns_table():
    columns = dict(TABLES["campaigns"].columns)
    assert {f: columns.get(f) for f in FIELDS} == dict.fromkeys(FIELDS, "string")


def test_aiperf_scrapes_the_workers_at_the_interval_recorded():
    from aiperf.common.environment import Environment  # the installed AIPerf's own default

    assert Environment.SERVER_METRICS.COLLECTION_INTERVAL == AIPERF_SERVER_METRICS_INTERVAL_S


def test_the_prepull_script_prints_the_installed_engine_packages_in_one_line():
    """The very command the pre-pull container runs, run here (this environment holds ai-dynamo, no vLLM)."""
    from importlib.metadata import version

    shell = PREPULL_COMMAND[2].replace("exec sleep infinity", "true").replace("python3", sys.executable, 1)
    out = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, timeout=60, check=True).stdout
    (line,) = out.splitlines()
    packages = json.loads(line.removeprefix(ENGINE_PACKAGES_MARKER))
    assert packages["ai-dynamo"] == version("ai-dynamo") and "vllm" not in packages
    assert ENGINE_PACKAGES_SCRIPT in PREPULL_COMMAND[2].replace("'\"'\"'", "'")


def test_eks_fields_come_from_what_the_cluster_reported():
    versions = {
        "platform": {"scrape_interval": "15s", "dashboards_sha256": "ab" * 32},
        "experiments": {
            "agg": {"kubernetes": "v1.35.2-eks-abc", "gpu_drivers": {"ip-1": "580.95.05"},
                    "engine_packages": {"nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1": {
                        "ai-dynamo": "1.6.1", "vllm": "0.31.0", "torch": "2.13.0", "nixl-cu13": "1.4.1",
                        "CUDA_VERSION": "13.0.1"}}},
            "disagg": {"kubernetes": "v1.35.2-eks-abc", "gpu_drivers": {"ip-2": "580.95.05"},
                       "engine_packages": {"nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1-efa": {
                           "ai-dynamo": "1.6.1", "vllm": "0.31.0", "torch": "2.13.0", "nixl-cu13": "1.4.1",
                           "CUDA_VERSION": "13.0.1"}}},
        }}
    got = provenance(versions, SEED, "aws")
    assert got == {**got, "dynamo_version": "1.6.1", "vllm_version": "0.31.0", "torch_version": "2.13.0",
                   "cuda_version": "13.0.1", "nixl_version": "1.4.1", "kubernetes_version": "v1.35.2-eks-abc",
                   "gpu_driver": "580.95.05", "prometheus_scrape_interval": "15s", "dashboards_sha256": "ab" * 32}
    assert "backend LIBFABRIC, FI_EFA_USE_DEVICE_RDMA=1" in got["nixl_registration"]
    # a driver that differs between nodes is named with where
    versions["experiments"]["disagg"]["gpu_drivers"] = {"ip-2": "570.1"}
    assert provenance(versions, SEED, "aws")["gpu_driver"] == "570.1 (ip-2); 580.95.05 (ip-1)"
    # nothing reported: said so, never blank
    bare = provenance({"experiments": {"agg": {"images": {}}}}, SEED, "aws")
    assert all(bare[f] for f in FIELDS)
    assert bare["vllm_version"].startswith("not read:") and bare["prometheus_scrape_interval"].startswith("not known:")


def test_local_fields_say_what_does_not_apply_and_never_blank():
    got = provenance({"ai-dynamo": "1.6.1", "dashboards_sha256": dashboards_sha256(ROOT / "dashboards")}, SMOKE,
                     "local")
    assert all(got[f] for f in FIELDS)
    assert got["dynamo_version"] == "1.6.1 (the mocker workers' package)"
    assert got["vllm_version"].startswith("not applicable:") and got["gpu_driver"].startswith("not applicable:")
    # the smoke spec has a disaggregated experiment, but locally the mocker models the transfer: no NIXL
    assert got["nixl_registration"].startswith("not applicable: the local engine's mocker")
    assert got["dashboards_sha256"] == dashboards_sha256(ROOT / "dashboards") and len(got["dashboards_sha256"]) == 64


def test_the_dashboards_hash_changes_with_any_dashboard(tmp_path):
    for f in (ROOT / "dashboards").glob("*.json"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    before = dashboards_sha256(tmp_path)
    assert before == dashboards_sha256(ROOT / "dashboards")
    victim = sorted(tmp_path.glob("*.json"))[0]
    victim.write_text(victim.read_text().replace('"title"', '"title" ', 1))
    assert dashboards_sha256(tmp_path) != before
