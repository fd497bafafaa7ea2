"""The evidence the report's Answers judge: each comparison the campaign recorded (the ``comparisons`` table)
with its settings, the valid steps of both its sides (``v_comparison_steps``) grouped into points with one
value per repeat, and what is left out and why: steps that failed or exceeded the error-rate threshold,
disaggregated experiments whose observed KV-transfer backend is not the spec's (``benchctl.verdicts``'
fabric check over the timeline's ``network_observed``). Pure: the standard library and the core.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from benchctl.fabric import NOT_APPLICABLE, NOT_OBSERVED, Fabric, fabric_check
from benchctl.report.data import ReportData, Rows, fmt_value, num
from benchctl.verdicts import INCONCLUSIVE, Compared, Sample, Settings, num_text

BASELINE, TREATMENT = "baseline", "treatment"
NOT_MEASURED = "not measured"
DIRECTIONAL = "directional"


@dataclass
class Answer:
    key: str
    kind: str  # "question" | "hypothesis"
    title: str
    evidence: str  # what answers it (views)
    verdict: str
    figures: list[tuple[str, str]] = field(default_factory=list)  # (what, value)
    samples: str = ""
    status: str = NOT_MEASURED  # DIRECTIONAL | INCONCLUSIVE | NOT_MEASURED
    method: str = ""  # how it was judged (confidence, threshold, ...)
    excluded: list[str] = field(default_factory=list)  # what was left out (or kept unverified), and why

    @property
    def measured(self) -> bool:
        return not self.verdict.startswith(NOT_MEASURED)


def fnum(v: float | None, unit: str = "") -> str:
    return num_text(v, unit)


def status_of(compared: list[Compared]) -> str:
    return DIRECTIONAL if any(c.directional for c in compared) else INCONCLUSIVE


def not_measured(a: Answer, why: str, excluded: list[str]) -> Answer:
    a.verdict, a.status = f"{NOT_MEASURED}: {why}", NOT_MEASURED
    a.excluded = excluded
    return a


def finish(a: Answer, parts: list[str], compared: list[Compared], left: list[str], samples: list[str], *,
           status: str | None = None) -> Answer:
    """The answer's verdict from its parts (one per comparison and input), its status (``status``, else from the
    compared figures), what was left out and the samples; "not measured" when no part measured anything."""
    a.verdict = " | ".join(parts)
    a.status = status or status_of(compared)
    if not compared and all(p.split(": ", 1)[-1].startswith(NOT_MEASURED) for p in parts):
        a.verdict, a.status = f"{NOT_MEASURED}: " + (a.verdict or "no comparison had the steps to answer it"), \
            NOT_MEASURED
    a.excluded += left
    a.samples = " | ".join(samples)
    return a


def samples_text(ev: Evidence, pair: Pair, kind: str) -> str:
    nb = len({r.get("repeat") for r in ev.rows(pair, BASELINE, kind)})
    nt = len({r.get("repeat") for r in ev.rows(pair, TREATMENT, kind)})
    reqs = [int(n) for side in (BASELINE, TREATMENT) for r in ev.rows(pair, side, kind)
            if (n := num(r.get("n_samples"))) is not None]
    span = f"; requests per step {min(reqs)}-{max(reqs)}" if reqs else ""
    return (f"{pair.label}: repeats {pair.baseline} {nb}, {pair.treatment} {nt} (the smaller, {min(nb, nt)}, bounds the "
            f"evidence){span}")


def sweep_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r.get("workload"), r.get("isl"), r.get("osl"), r.get("concurrency"))


def by_input(points: dict[Any, dict[str, list[dict[str, Any]]]]) -> dict[tuple[Any, ...], list[Any]]:
    """Sweep points grouped per (workload, ISL, OSL): the loads of one input length."""
    out: dict[tuple[Any, ...], list[Any]] = {}
    for key in points:
        out.setdefault(key[:3], []).append(key)
    return out


def input_label(k: tuple[Any, ...]) -> str:
    return f"{k[0]} ISL {fmt_value(k[1])}/OSL {fmt_value(k[2])}"




@dataclass
class Pair:
    """One recorded comparison."""

    name: str
    baseline: str
    treatment: str
    questions: tuple[str, ...]
    differs: tuple[str, ...]
    source: str
    settings: Settings
    fabric: list[Fabric] = field(default_factory=list)  # its disaggregated sides

    @property
    def valid(self) -> bool:
        return all(f.valid for f in self.fabric)

    @property
    def label(self) -> str:
        return f"{self.treatment} vs {self.baseline}"

    def experiment(self, side: str) -> str:
        return self.baseline if side == BASELINE else self.treatment


@dataclass
class Evidence:
    pairs: list[Pair]
    steps: list[dict[str, Any]]  # v_comparison_steps rows of the campaign
    views: dict[str, Rows]
    fabric: dict[str, Fabric]

    def for_question(self, q: str) -> tuple[list[Pair], list[str]]:
        """The valid comparisons answering ``q``, and one line per comparison left out (and why)."""
        asked = [p for p in self.pairs if q in p.questions]
        left = [f"comparison {p.name} ({p.label}) excluded: " + "; ".join(f.text() for f in p.fabric if not f.valid)
                for p in asked if not p.valid]
        unverified = [f"comparison {p.name} kept, unverified: {f.text()}" for p in asked if p.valid for f in p.fabric
                      if f.status == NOT_OBSERVED]
        return [p for p in asked if p.valid], left + unverified

    def rows(self, pair: Pair, side: str, kind: str | None = None, *, valid: bool = True) -> list[dict[str, Any]]:
        return [r for r in self.steps if r.get("comparison") == pair.name and r.get("side") == side
                and (kind is None or r.get("workload_kind") == kind) and bool(r.get("valid")) == valid]

    def invalid_steps(self, pair: Pair, kind: str | None = None) -> list[str]:
        """'experiment/step_id: why' for every step of the comparison left out."""
        def why(r: dict[str, Any]) -> str:
            rate, limit = num(r.get("error_rate")), num(r.get("max_error_rate"))
            if r.get("status") == "succeeded" and rate is not None and limit is not None and rate > limit:
                return f"error rate {round(rate, 4):g} above max_error_rate {limit:g}"
            return str(r.get("invalid_reason") or "invalid")

        return sorted({f"{r.get('experiment')}/{r.get('step_id')}: {why(r)}"
                       for side in (BASELINE, TREATMENT) for r in self.rows(pair, side, kind, valid=False)})

    def points(self, pair: Pair, kind: str, key: Callable[[dict[str, Any]], Hashable]
               ) -> dict[Any, dict[str, list[dict[str, Any]]]]:
        """Valid rows of both sides grouped by ``key`` (e.g. workload, ISL, concurrency), sorted by key."""
        out: dict[Any, dict[str, list[dict[str, Any]]]] = {}
        for side in (BASELINE, TREATMENT):
            for r in self.rows(pair, side, kind):
                out.setdefault(key(r), {BASELINE: [], TREATMENT: []})[side].append(r)
        return dict(sorted(out.items(), key=lambda kv: tuple(_sortable(v) for v in _as_tuple(kv[0]))))

    def view(self, name: str) -> Rows:
        return self.views.get(name) or Rows([], [])


def _as_tuple(k: Any) -> tuple[Any, ...]:
    return k if isinstance(k, tuple) else (k,)


def _sortable(v: Any) -> tuple[int, Any]:
    n = num(v)
    return (0, n) if n is not None else (1, str(v))


def per_repeat(rows: list[dict[str, Any]], column: str) -> Sample:
    """One value per repeat (the mean of that repeat's steps), and the fewest requests behind any step."""
    by: dict[Any, list[float]] = {}
    for r in rows:
        v = num(r.get(column))
        if v is not None:
            by.setdefault(r.get("repeat"), []).append(v)
    values = tuple(sum(v) / len(v) for _, v in sorted(by.items(), key=lambda kv: _sortable(kv[0])))
    reqs = [int(n) for r in rows if (n := num(r.get("n_samples"))) is not None]
    return Sample(values, min(reqs) if reqs else None)


def evidence_of(data: ReportData) -> Evidence:
    """The comparisons of the report's campaign, with the fabric check of every disaggregated side."""
    network = {str(n.get("experiment")): n for n in data.network}  # the last observation of each experiment
    fabric = {str(e.get("experiment")): fabric_check(e, network.get(str(e.get("experiment"))))
              for e in data.experiment_rows}
    pairs = []
    for c in data.comparisons:
        sides = (str(c.get("baseline")), str(c.get("treatment")))
        pairs.append(Pair(
            name=str(c.get("comparison")), baseline=sides[0], treatment=sides[1],
            questions=tuple(q for q in str(c.get("questions") or "").split(",") if q),
            differs=tuple(d for d in str(c.get("differs") or "").split(",") if d), source=str(c.get("source") or ""),
            settings=Settings.from_row(c), fabric=[fabric[e] for e in sides if e in fabric and fabric[e].status != NOT_APPLICABLE]))
    return Evidence(pairs, data.comparison_steps, data.views, fabric)


def sweep_points(ev: Evidence, pair: Pair, a: Answer, parts: list[str], samples: list[str]) -> Any:
    """The pair's valid concurrency-sweep points (``Evidence.points`` by ``sweep_key``), noting on ``a`` the steps
    left out and in ``samples`` what they rest on; None (and the line saying so in ``parts``) without any."""
    pts = ev.points(pair, "concurrency_sweep", sweep_key)
    if not pts:
        parts.append(f"{pair.label}: {NOT_MEASURED} (no valid concurrency-sweep step on both sides)")
        return None
    samples.append(samples_text(ev, pair, "concurrency_sweep"))
    a.excluded += ev.invalid_steps(pair, "concurrency_sweep")
    return pts
