"""The fabric check: whether a disaggregated experiment moved its KV the way its spec asked, by what carried
it, not only by what was instantiated. From the timeline's ``network_observed`` (``benchctl.aws.eks.EksServing
.network``: the NIXL backends each worker logged instantiating; ``benchctl.local.serving.LocalServing.network``:
the transfer model each mocker worker logged) and the transfers' measured bandwidth (``v_kv_transfer``):

* a worker that logged another backend than the spec's: the experiment is invalid (left out of every verdict);
* a worker that logged several backends, or none, or a transfer path whose fastest measured step moved the KV
  at a bandwidth outside the spec's path (EFA's range when the spec asks LIBFABRIC over EFA), or no measured
  transfer at all: unverified; an answer built on it is "inconclusive (transfer path unverified)";
* as specified: every worker logged exactly the spec's backend, and the bandwidth is in its path's range.

The ranges (docs/FACTS.md "Disaggregation over EFA"): Dynamo's disaggregation guide puts NIXL LIBFABRIC over
EFA at about 9.6 GB/s and its silent fallback to UCX over TCP at about 1 GB/s (and a whole disaggregated TTFT at
~37 ms over EFA against 90-100 s over TCP on p5). The line between them is their geometric middle, 3.1 GB/s,
checked on the fastest step (small transfers are latency-bound and read slower than the path).
Pure: the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from benchctl.analysis.verdicts import num_text

AS_SPECIFIED, DIFFERS, NOT_OBSERVED, NOT_APPLICABLE = "as specified", "differs", "not observed", "not applicable"

EFA_GBPS, TCP_GBPS = 9.6, 1.0  # NIXL LIBFABRIC over EFA / UCX over TCP (Dynamo's disaggregation guide)
EFA_MIN_GBPS = math.sqrt(EFA_GBPS * TCP_GBPS)  # 3.1 GB/s: below it, the KV moved at TCP's speed
EFA_BACKENDS = frozenset({"LIBFABRIC"})


@dataclass(frozen=True)
class Fabric:
    experiment: str
    status: str  # AS_SPECIFIED | DIFFERS | NOT_OBSERVED (unverified) | NOT_APPLICABLE
    expected: str
    observed: str

    @property
    def valid(self) -> bool:
        return self.status != DIFFERS

    @property
    def verified(self) -> bool:
        return self.status in (AS_SPECIFIED, NOT_APPLICABLE)

    def text(self) -> str:
        if self.status == DIFFERS:
            return (f"{self.experiment} is invalid: its observed KV transfer ({self.observed}) is not the spec's "
                    f"({self.expected})")
        if self.status == NOT_OBSERVED:
            return f"{self.experiment}: KV transfer path unverified ({self.observed}; the spec asks {self.expected})"
        return f"{self.experiment}: KV transfer {self.status} ({self.observed})"


def _close(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    except (TypeError, ValueError):
        return False


def fabric_check(experiment: dict[str, Any], network: dict[str, Any] | None,
                 measured_gbps: Iterable[float] = ()) -> Fabric:
    """Whether a disaggregated experiment moved its KV the way its spec asked (module docstring), from the
    timeline's ``network_observed`` detail and the bandwidth of each step's measured transfers."""
    name = str(experiment.get("experiment"))
    if experiment.get("mode") != "disaggregated":
        return Fabric(name, NOT_APPLICABLE, "no transfer (aggregated)", "-")
    backend, bw, bpt = (experiment.get("nixl_backend"), experiment.get("kv_transfer_bandwidth_gbps"),
                        experiment.get("kv_bytes_per_token"))
    if not network or network.get("error"):
        why = (network or {}).get("error") or "no network_observed event"
        return Fabric(name, NOT_OBSERVED, f"NIXL {backend}", str(why))
    if network.get("engine") == "local":
        return _local(name, network, bw, bpt)
    expected = f"NIXL {backend}"
    logged: dict[str, list[str]] = {pod: [str(b) for b in (found or [])]
                                    for pod, found in (network.get("nixl_backends") or {}).items()}
    real = {pod: sorted({b for b in found if b.isidentifier() and b.isupper()}) for pod, found in logged.items()}
    bad = {pod: found for pod, found in real.items() if found and backend not in found}
    if bad:
        return Fabric(name, DIFFERS, expected, "; ".join(f"{pod}: {', '.join(b)}" for pod, b in sorted(bad.items())))
    silent = sorted(pod for pod, found in real.items() if not found)
    if not real or silent:
        return Fabric(name, NOT_OBSERVED, expected, f"no backend logged by {', '.join(silent) or 'any worker'}")
    several = {pod: found for pod, found in real.items() if len(found) > 1}
    if several:
        return Fabric(name, NOT_OBSERVED, expected, "several backends logged, so which one carried the KV is not "
                      "known: " + "; ".join(f"{pod}: {', '.join(b)}" for pod, b in sorted(several.items())))
    return _by_use(name, expected, backend, measured_gbps)


def _by_use(name: str, expected: str, backend: Any, measured_gbps: Iterable[float]) -> Fabric:
    """The backend each worker logged is the spec's: now whether the KV moved at its path's speed."""
    speeds = [float(g) for g in measured_gbps if g is not None and math.isfinite(float(g)) and float(g) > 0]
    if not speeds:
        return Fabric(name, NOT_OBSERVED, expected, f"{backend} instantiated by every worker, but no transfer was "
                      "measured (no vllm:nixl_xfer_time_seconds / vllm:nixl_bytes_transferred in the steps)")
    fastest = max(speeds)
    if str(backend) in EFA_BACKENDS and fastest < EFA_MIN_GBPS:
        return Fabric(name, NOT_OBSERVED, f"{expected} over EFA (about {EFA_GBPS:g} GB/s)",
                      f"{backend} instantiated, but the fastest step moved its KV at {num_text(fastest)} GB/s: "
                      f"TCP's range (about {TCP_GBPS:g} GB/s; EFA's from {num_text(EFA_MIN_GBPS)} GB/s)")
    return Fabric(name, AS_SPECIFIED, expected, f"{backend}, up to {num_text(fastest)} GB/s measured")


def _local(name: str, network: dict[str, Any], bw: Any, bpt: Any) -> Fabric:
    """Locally: every worker's logged transfer model carries the bandwidth (and KV bytes per token) the spec
    derived; the model is what moves the simulated KV, so a matching model is the path by use."""
    expected = f"the mocker's transfer model at {num_text(bw)} GB/s, {bpt} B/token"
    modelled = {w: m for w, m in (network.get("transfer_modelled") or {}).items()
                if isinstance(m, dict) and m.get("kv_transfer_bandwidth") is not None}
    if not modelled:
        return Fabric(name, NOT_OBSERVED, expected, "no worker logged a transfer model")
    wrong = {w: m for w, m in modelled.items() if not _close(m.get("kv_transfer_bandwidth"), bw) or (
        bpt is not None and m.get("kv_transfer_bytes_per_token") is not None
        and not _close(m.get("kv_transfer_bytes_per_token"), bpt))}
    seen = "; ".join(f"{w}: {m.get('kv_transfer_bandwidth')} GB/s, {m.get('kv_transfer_bytes_per_token')} B/token"
                     for w, m in sorted((wrong or modelled).items()))
    return Fabric(name, DIFFERS if wrong else AS_SPECIFIED, expected, seen)
