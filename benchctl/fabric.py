"""The fabric check: whether a disaggregated experiment moved its KV the way its spec asked, from what the
timeline's ``network_observed`` recorded (``benchctl.aws.eks.EksServing.network``: the NIXL backend each worker
logged instantiating; ``benchctl.local.serving.LocalServing.network``: the transfer model each mocker worker
logged). A silent fallback (NIXL on UCX/TCP where the spec asks LIBFABRIC over EFA) would otherwise be reported
as the transfer's cost: such an experiment is invalid, left out of every verdict and named.
Pure: the standard library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from benchctl.verdicts import num_text

AS_SPECIFIED, DIFFERS, NOT_OBSERVED, NOT_APPLICABLE = "as specified", "differs", "not observed", "not applicable"


@dataclass(frozen=True)
class Fabric:
    experiment: str
    status: str  # AS_SPECIFIED | DIFFERS | NOT_OBSERVED | NOT_APPLICABLE
    expected: str
    observed: str

    @property
    def valid(self) -> bool:
        return self.status != DIFFERS

    def text(self) -> str:
        if self.status == DIFFERS:
            return (f"{self.experiment} is invalid: its observed KV transfer ({self.observed}) is not the spec's "
                    f"({self.expected})")
        if self.status == NOT_OBSERVED:
            return f"{self.experiment}: KV transfer not verified ({self.observed}; the spec asks {self.expected})"
        return f"{self.experiment}: KV transfer {self.status} ({self.observed})"


def _close(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-6)
    except (TypeError, ValueError):
        return False


def fabric_check(experiment: dict[str, Any], network: dict[str, Any] | None) -> Fabric:
    """Whether a disaggregated experiment moved its KV the way its spec asked, from the timeline's
    ``network_observed`` detail. On EKS: every prefill/decode worker must have logged instantiating the NIXL
    backend the spec names (``nixl_backends``); locally: every worker's logged transfer model must carry the
    bandwidth (and KV bytes per token) the spec derived (``transfer_modelled``). A worker that logged another
    backend or model makes the experiment invalid; one that logged nothing leaves it "not observed"."""
    name = str(experiment.get("experiment"))
    if experiment.get("mode") != "disaggregated":
        return Fabric(name, NOT_APPLICABLE, "no transfer (aggregated)", "-")
    backend, bw, bpt = (experiment.get("nixl_backend"), experiment.get("kv_transfer_bandwidth_gbps"),
                        experiment.get("kv_bytes_per_token"))
    if not network or network.get("error"):
        why = (network or {}).get("error") or "no network_observed event"
        return Fabric(name, NOT_OBSERVED, f"NIXL {backend}", str(why))
    if network.get("engine") == "local":
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
    expected = f"NIXL {backend}"
    logged: dict[str, list[str]] = {pod: [str(b) for b in (found or [])]
                                    for pod, found in (network.get("nixl_backends") or {}).items()}
    real = {pod: [b for b in found if b.isidentifier() and b.isupper()] for pod, found in logged.items()}
    bad = {pod: found for pod, found in real.items() if found and backend not in found}
    silent = sorted(pod for pod, found in real.items() if not found)
    if bad:
        return Fabric(name, DIFFERS, expected, "; ".join(f"{pod}: {', '.join(b)}" for pod, b in sorted(bad.items())))
    if not real or silent:
        return Fabric(name, NOT_OBSERVED, expected, f"no backend logged by {', '.join(silent) or 'any worker'}")
    return Fabric(name, AS_SPECIFIED, expected, ", ".join(sorted({b for found in real.values() for b in found})))
