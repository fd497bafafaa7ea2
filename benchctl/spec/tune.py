"""``tune:``: each arm at its best configuration before the comparison (part of the spec; pure: pydantic and the
standard library only).

Off (the default, ``tune: off``): every experiment runs as written and the report says the comparison is of
the given configurations. On: for each tuned experiment (an "arm"), the plan searches the layouts of its GPU
total (aggregated: TP and replicas; disaggregated: prefill and decode replicas and TP per role) that its pools
can place, ranks them by aiconfigurator's predicted SLO edge (``benchctl.forecast.tune``), pilots the best
``pilots`` of them (the arm's own layout always among them) with short request-count loads at the tune
workload's ISL/OSL, and runs the arm at the layout whose pilot held the SLO at the highest load
(``benchctl.campaign.tuning``). Pilots are ordinary experiments of the plan, before the arms: priced by it and
held to the budget like every step.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from benchctl.spec.base import Name, Strict

OFF_WORDS = (False, "off", None)
ON_WORDS = (True, "on")


class Tune(Strict):
    """How the tune phase searches and pilots each arm's configurations."""

    pilots: int = Field(default=3, ge=1, le=8, description="configurations piloted per arm (the best predicted, "
                        "the arm's own always among them)")
    workload: Name | None = Field(default=None, description="the concurrency_sweep whose ISL/OSL the pilots load at "
                                  "(default: the spec's first concurrency_sweep)")
    pilot_requests: int = Field(default=64, ge=8, le=5000, description="requests per pilot load (at least two "
                                "waves of its concurrency are sent)")
    loads: list[Annotated[int, Field(gt=0, le=4096)]] | None = Field(
        default=None, min_length=1, max_length=8,
        description="the concurrencies every pilot is measured at (default: the tune workload's, up to twice "
                    "the best predicted edge of the arm's pilots)")
    experiments: list[Name] | None = Field(default=None, min_length=1, max_length=32, description="the arms tuned (default: every "
                                           "experiment that is not a ladder rung)")
    max_candidates: int = Field(default=16, ge=1, le=64, description="configurations searched by prediction per arm "
                                "(the enumeration's first, the arm's own first)")

    @field_validator("loads")
    @classmethod
    def _unique(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"loads values must be unique, got {v}")
        return None if v is None else sorted(v)


def tune_value(v: Any) -> Any:
    """``tune:``'s spellings: off/false/null -> None (off), on/true -> the defaults, a mapping -> as given."""
    if any(v is w for w in OFF_WORDS if not isinstance(w, str)) or v == "off":
        return None
    if any(v is w for w in ON_WORDS if not isinstance(w, str)) or v == "on":
        return {}
    return v


def tune_problems(spec: Any) -> list[str]:
    """The cross-checks of a ``tune:`` block against the rest of the spec."""
    t: Tune | None = spec.tune
    if t is None:
        return []
    problems: list[str] = []
    sweeps = [w.name for w in spec.workloads if w.kind == "concurrency_sweep"]
    if t.workload is None and not sweeps:
        problems.append("tune.workload: the pilots load at a concurrency_sweep's ISL/OSL; the spec has none")
    elif t.workload is not None and t.workload not in sweeps:
        problems.append(f"tune.workload: {t.workload!r} is not a concurrency_sweep workload; valid: {sweeps}")
    names = [e.name for e in spec.experiments]
    seen: set[str] = set()
    for i, arm in enumerate(t.experiments or []):
        if arm not in names:
            problems.append(f"tune.experiments[{i}]: {arm!r} is not an experiment; valid: {names}")
        elif arm in seen:
            problems.append(f"tune.experiments[{i}]: {arm!r} is named twice; each arm is tuned once: name each "
                            "experiment at most once")
        seen.add(arm)
    if spec.slo.ttft_ms is None and spec.slo.itl_ms is None:
        problems.append("tune: the search ranks configurations by the load they hold within the SLO; set slo.ttft_ms "
                        "and/or slo.itl_ms")
    return problems
