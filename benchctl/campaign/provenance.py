"""The run record's provenance: what a campaign ran on, field by field, as the ``campaigns`` lake row's columns
and the report's provenance table. Every field is text and never blank: a value, or "not applicable: why" (the
local engine has no cluster, no GPU, no vLLM), or "not read: why" / "not known: why".

Where each value comes from (``versions`` is the campaign record's ``versions`` JSON):

* the engine's own packages (Dynamo, vLLM, torch, NIXL) and the image's CUDA: on EKS, what each runtime image's
  pre-pull container printed on the experiment's nodes (``versions.experiments.<e>.engine_packages``:
  ``benchctl.aws.engine_provenance``); locally, the Dynamo package the mocker runs from;
* the Kubernetes version the API server reported and the NVIDIA drivers of the workers' nodes (EKS);
* ``server_metrics_interval_s``: how often AIPerf scraped the workers' metrics into the lake (its default,
  :data:`AIPERF_SERVER_METRICS_INTERVAL_S`; benchctl does not change it);
* ``prometheus_scrape_interval`` and ``dashboards_sha256``: the platform's Prometheus and the dashboards it
  provisions (``versions.platform``, from the platform stack through the functions' environment), or locally
  the dashboards this checkout ships;
* ``nixl_registration``: what NIXL registers for the prefill -> decode KV transfer, from what the campaign
  rendered (vLLM's NixlConnector with the default ``kv_buffer_device``: the GPU's KV cache memory itself; the
  backend and, over EFA, device RDMA).

Pure: the standard library and the spec model only.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

# AIPerf 0.13.0's Environment.SERVER_METRICS.COLLECTION_INTERVAL default (AIPERF_SERVER_METRICS_COLLECTION_INTERVAL,
# not set by benchctl); held to the installed AIPerf by tests/unit/test_provenance.py
AIPERF_SERVER_METRICS_INTERVAL_S = 0.333
FIELDS: dict[str, str] = {
    "dynamo_version": "the ai-dynamo package the workers ran",
    "vllm_version": "the vLLM package of the workers' image",
    "torch_version": "the torch package of the workers' image",
    "cuda_version": "the CUDA of the workers' image (its CUDA_VERSION)",
    "nixl_version": "the NIXL package of the workers' image",
    "kubernetes_version": "the cluster's Kubernetes version, as its API server reports it",
    "gpu_driver": "the NVIDIA driver of the workers' nodes (GPU feature discovery's labels)",
    "server_metrics_interval_s": "how often AIPerf scraped the workers' metrics into the lake",
    "prometheus_scrape_interval": "the platform Prometheus' scrape interval (what the dashboards show)",
    "dashboards_sha256": "the content hash of the dashboards provisioned (dashboards/*.json)",
    "nixl_registration": "what NIXL registers for the prefill -> decode KV transfer",
    "worker_engine": "what served the requests: vLLM on GPUs, or what stood for it (SIMULATED)",
}
ENGINE_FIELDS = {"dynamo_version": ("ai-dynamo",), "vllm_version": ("vllm",), "torch_version": ("torch",),
                 "cuda_version": ("CUDA_VERSION",), "nixl_version": ("nixl", "nixl-cu12", "nixl-cu13")}


def dashboards_sha256(directory: Path) -> str:
    """sha256 over the dashboards' file names and bytes, in name order (what Grafana is given)."""
    h = hashlib.sha256()
    for f in sorted(directory.glob("*.json")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _distinct(values: dict[str, str]) -> str:
    """One value, or each with where it was found when they differ."""
    found = sorted(set(values.values()))
    if len(found) == 1:
        return found[0]
    return "; ".join(f"{v} ({', '.join(sorted(k for k, x in values.items() if x == v))})" for v in found)


def _engine(experiments: JSON, names: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for exp, rec in sorted(experiments.items()):
        for image, packages in sorted(((rec or {}).get("engine_packages") or {}).items()):
            if not isinstance(packages, dict):
                continue
            value = next((str(packages[n]) for n in names if packages.get(n)), None)
            if value:
                out[f"{exp}: {image}"] = value
    return out


def _nixl_registration(spec: Any) -> str:
    parts = []
    for exp in spec.experiments:
        if exp.mode != "disaggregated":
            continue
        if exp.engine != "vllm":
            parts.append(f"{exp.name}: not applicable (the mocker models the transfer, no NIXL)")
            continue
        t = spec.transfer(exp)
        rdma = ", FI_EFA_USE_DEVICE_RDMA=1: GPUDirect RDMA over EFA" if t.get("path") == "LIBFABRIC+EFA" else ""
        parts.append(f"{exp.name}: NixlConnector, kv_buffer_device cuda (the GPU KV cache registered with NIXL), "
                     f"backend {t.get('nixl_backend')}{rdma}")
    return "; ".join(parts) if parts else "not applicable: no disaggregated experiment (no KV transfer)"


def provenance(versions: JSON, spec: Any, engine: str) -> dict[str, str]:
    """Every :data:`FIELDS` value of a campaign (see the module doc); ``engine``: local | aws."""
    versions = versions or {}
    experiments = versions.get("experiments") or {}
    platform = versions.get("platform") or {}
    out: dict[str, str] = {}
    local = engine == "local"
    found_any = any((r or {}).get("engine_packages") for r in experiments.values())
    for field, names in ENGINE_FIELDS.items():
        found = _engine(experiments, names)
        if found:
            out[field] = _distinct(found)
        elif local and field == "dynamo_version" and versions.get("ai-dynamo"):
            out[field] = f"{versions['ai-dynamo']} (the mocker workers' package)"
        elif local:
            out[field] = ("not applicable: the local engine runs Dynamo's mocker workers (no vLLM, torch, CUDA or NIXL)"
                          if not found_any else "not applicable: the CPU engine (no CUDA, no NIXL)")
        elif experiments:
            out[field] = "not read: no pre-pull container printed it (an image without it, or its log was gone)"
        else:
            out[field] = "not read: no experiment became ready"
    kube = {e: str(r.get("kubernetes")) for e, r in experiments.items() if (r or {}).get("kubernetes")}
    out["kubernetes_version"] = ("not applicable: local processes, no cluster" if local else
                                 _distinct(kube) if kube else "not read: no experiment became ready")
    drivers = {node: str(v) for r in experiments.values() if isinstance((r or {}).get("gpu_drivers"), dict)
               for node, v in r["gpu_drivers"].items() if node != "error"}
    gpu_pools = [p for p in spec.pools if p.gpus_per_node > 0] if spec is not None else []
    out["gpu_driver"] = ("not applicable: no GPU (local processes)" if local else
                         _distinct(drivers) if drivers else
                         "not applicable: CPU pools only" if spec is not None and not gpu_pools else
                         "not read: no worker node reported one")
    out["server_metrics_interval_s"] = f"{AIPERF_SERVER_METRICS_INTERVAL_S:g} (AIPerf's default)"
    out["prometheus_scrape_interval"] = (
        "not applicable: no Prometheus locally (AIPerf scrapes the workers itself)" if local else
        str(platform["scrape_interval"]) if platform.get("scrape_interval") else
        "not known: the cluster's own Prometheus (no benchctl platform stack)")
    out["dashboards_sha256"] = str(versions.get("dashboards_sha256") or platform.get("dashboards_sha256") or
                                   "not known: no benchctl platform stack provisioned dashboards")
    out["nixl_registration"] = (
        "not applicable: the local engine's mocker workers model the KV transfer (no NIXL)" if local and not found_any
        else "not applicable: the CPU engine runs aggregated experiments only (no NIXL)" if local else
        _nixl_registration(spec) if spec is not None else "not known: no spec")
    out["worker_engine"] = _worker_engine(experiments, spec, local)
    return out


def _worker_engine(experiments: JSON, spec: Any, local: bool) -> str:
    """What the experiments' serving port said ran (``versions.experiments.<e>.worker_engine``, the local CPU
    engine's label), else what the spec asked for."""
    said = {e: str(r["worker_engine"]) for e, r in experiments.items() if (r or {}).get("worker_engine")}
    if said:
        return _distinct(said)
    if local:
        return "Dynamo mocker workers (SIMULATED)"
    if spec is None:
        return "not known: no spec"
    mocker = any(e.engine == "mocker" for e in spec.experiments)
    return "Dynamo mocker workers on CPU nodes (SIMULATED)" if mocker else "vLLM (Dynamo's vLLM worker) on GPUs"
