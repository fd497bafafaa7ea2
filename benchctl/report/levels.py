"""What a campaign's evidence leaves out and what it could have seen, beside the verdicts
(:mod:`benchctl.report.evidence`): a step whose load generator fell behind is no measurement of its load, and each
answer's smallest detectable effect says what "inconclusive" rules out. Pure: the standard library and the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchctl.analysis import inference
from benchctl.analysis.effects import Compared
from benchctl.analysis.verdicts import Settings, num_text
from benchctl.lake import client_load

CLIENT_BOUND = "client-bound"


def client_checked(r: dict[str, Any]) -> dict[str, Any]:
    """A step whose load generator fell behind (``benchctl.lake.client_load.verdict``: too few requests issued on
    time, or AIPerf out of CPU) measured less than its nominal load: it counts for nothing at that load (no latency
    test, no SLO attainment, no goodput), and says why."""
    bound, why = client_load.verdict(r)
    if not bound:
        return r
    return {**r, "valid": False, "attempted": False, "client_bound": True,
            "invalid_reason": f"{CLIENT_BOUND}: the load generator fell behind ({why}), so the server did not see "
                              "the nominal load: left out of every test and regime"}


POWER_Z = 0.8416212335729143  # the standard normal's 80 % quantile: 80 % power


def detectable(family: Sequence[Any], settings: Settings) -> str:
    """What the answer could have seen: per primary figure, the smallest true effect that its test at a point would
    have found with 80 % power at the family's first Holm level (the practical threshold plus (t + z_0.8) standard
    errors; the median over the family's tests of that figure), or '' without a test with an interval."""
    tests = [c for c in family if isinstance(c, Compared) and c.se and c.df and c.p is not None]
    if not tests:
        return ""
    size = sum(1 for c in family if getattr(c, "p", None) is not None)
    first = settings.alpha / max(1, size)
    by: dict[str, list[float]] = {}
    for c in tests:
        q = inference.quantile(1.0 - first / 2.0, float(c.df or 1.0))
        by.setdefault(c.figure.label, []).append(c._shown(c.edges[1] + (q + POWER_Z) * float(c.se or 0.0)))
    said = []
    for label, xs in by.items():
        xs.sort()
        unit = next(c.shown_unit for c in tests if c.figure.label == label)
        said.append(f"{label} +/-{num_text(xs[len(xs) // 2], unit)}" + (f" (median over {len(xs)} tests)"
                                                                           if len(xs) > 1 else ""))
    return "the smallest effect its tests would have found with 80 % power, at the family's first level: " + "; ".join(said)
