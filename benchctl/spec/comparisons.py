"""What a campaign compares with what: the spec's ``comparisons:`` (or the default pairing), validated against
the plan's questions, and the ``comparisons`` rows the Plan state writes so that the views carry each
comparison instead of pairing every aggregated experiment with every disaggregated one.

A comparison names a ``baseline`` and a ``treatment`` experiment; what differs between them (mode, router,
KV offload, GPU total, GPU kinds, worker layout) is derived from the two, and decides which of the plan's
questions it can answer (:func:`allowed_questions`):

* q1 (TTFT, ITL, throughput at the same GPU total): aggregated baseline, disaggregated treatment, the same
  GPU total and kinds, the same router and offload;
* q3 (prefix duplication vs hit rate in both modes), h3 (stage queues, aggregated beside): aggregated
  baseline, disaggregated treatment;
* q4, h1 (transfer overhead at light load): as q3, with the same GPU total and kinds, router and offload (a
  gap between GPU kinds is not the transfer's);
* q2 (does offload save money): only kv_offload differs, the treatment has it;
* h2 (recomputation with and without a feature): only the router (treatment: kv) or only kv_offload differs;
* h4 (heterogeneous GPUs pay off): the GPU kinds differ, router and offload do not.

Without ``comparisons:`` the default pairing (:func:`default_comparisons`): each disaggregated experiment
against the first aggregated one with the same router and offload and the same GPU total and kinds (a
disaggregated experiment over several GPU kinds: the first aggregated one on one of them, any total), and
each ladder rung against its base. Pure: pydantic and the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field

from benchctl.spec.base import Name, Strict
from benchctl.spec.deployment import Experiment, PoolSpec

QUESTIONS = ("q1", "q2", "q3", "q4", "h1", "h2", "h3", "h4")
Question = Literal["q1", "q2", "q3", "q4", "h1", "h2", "h3", "h4"]
# The spec's `comparison:` defaults (benchctl.analysis.verdicts.Settings uses them too).
DEFAULT_CONFIDENCE = 0.95
DEFAULT_PRACTICAL_THRESHOLD_PCT = 5.0
DEFAULT_MAX_ERROR_RATE = 0.01
DEFAULT_SLO_ATTAINMENT = 0.9
DEFAULT_MIN_SAMPLES_P99 = 100
DEFAULT_TRANSFER_SHARE_PCT = 50.0
DEFAULT_QUEUE_THRESHOLD = 1.0
DEFAULT_DEPLOYMENT_SPREAD_PCT = 5.0
DIFFERENCES = ("mode", "router", "kv_offload", "gpus", "gpu_kinds", "workers")


class ComparisonSettings(Strict):
    """How every comparison of the campaign is judged (``benchctl.analysis.verdicts``)."""

    confidence: float = Field(default=DEFAULT_CONFIDENCE, gt=0.5, lt=1,
                              description="family-wise: each answer's directions are all right with this probability (Holm's "
                                          "step-down over the answer's tests, alpha = 1 - confidence)")
    practical_threshold_pct: float = Field(
        default=DEFAULT_PRACTICAL_THRESHOLD_PCT, ge=0, le=100,
        description="a difference is directional only when its interval clears +/- this % of the baseline")
    max_error_rate: float = Field(default=DEFAULT_MAX_ERROR_RATE, ge=0, le=1,
                                  description="a step with a larger share of failed requests is invalid")
    slo_attainment: float = Field(default=DEFAULT_SLO_ATTAINMENT, gt=0, le=1,
                                  description="share of requests meeting the SLO for a load to be within it")
    min_samples_p99: int = Field(default=DEFAULT_MIN_SAMPLES_P99, ge=1, le=10_000_000,
                                 description="requests per step needed before a p99 is compared")
    transfer_share_pct: float = Field(
        default=DEFAULT_TRANSFER_SHARE_PCT, gt=0, le=100,
        description="Q4/H1: the KV transfer 'explains' a TTFT gap only when the lower bound of its share of the gap "
                    "exceeds this %")
    queue_threshold: float = Field(
        default=DEFAULT_QUEUE_THRESHOLD, ge=0, le=100_000,
        description="H3: a difference between the stages' waiting queues is directional only beyond this many "
                    "requests")
    deployment_spread_pct: float = Field(
        default=DEFAULT_DEPLOYMENT_SPREAD_PCT, ge=0, le=50,
        description="the spread (relative sd) of a figure between two fresh deployments of one configuration that "
                    "every verdict allows for at least: assumed with one deployment per experiment (design.deployments "
                    "1), the floor of the measured spread with more; 0 assumes deployments interchangeable")


class Comparison(Strict):
    name: Name
    baseline: Name = Field(description="the experiment compared against")
    treatment: Name = Field(description="the experiment whose difference is measured (treatment - baseline)")
    question: Question | Annotated[list[Question], Field(max_length=16)] | None = Field(
        default=None, description="the plan's question(s) it answers (default: every one its difference allows)")

    def asked(self) -> tuple[str, ...] | None:
        if self.question is None:
            return None
        return (self.question,) if isinstance(self.question, str) else tuple(dict.fromkeys(self.question))


class CampaignSpec(Protocol):
    """What the comparisons read of a campaign spec (``benchctl.spec.model.CampaignSpec``, which validates its
    comparisons with these functions: a protocol, so that this module does not import the model)."""

    @property
    def experiments(self) -> list[Experiment]: ...
    @property
    def comparisons(self) -> list[Comparison]: ...
    @property
    def comparison(self) -> ComparisonSettings: ...
    def pool(self, name: str) -> PoolSpec: ...
    def experiment(self, name: str) -> Experiment: ...


@dataclass(frozen=True)
class Resolved:
    """A comparison as recorded: its questions and what differs between its experiments."""

    name: str
    baseline: str
    treatment: str
    questions: tuple[str, ...]
    differs: tuple[str, ...]
    source: str  # "spec" | "default"


def _kinds(spec: CampaignSpec, e: Experiment) -> tuple[str, ...]:
    return tuple(sorted({spec.pool(g.pool).gpu_kind for g in e.workers}))


def _offload(e: Experiment) -> Any:
    return e.kv_offload.model_dump(mode="json") if e.kv_offload is not None else None


def differences(spec: CampaignSpec, base: Experiment, treat: Experiment) -> tuple[str, ...]:
    """What differs between two experiments, in :data:`DIFFERENCES` order."""
    pairs = {
        "mode": (base.mode, treat.mode), "router": (base.router, treat.router),
        "kv_offload": (_offload(base), _offload(treat)), "gpus": (base.gpus(), treat.gpus()),
        "gpu_kinds": (_kinds(spec, base), _kinds(spec, treat)),
        "workers": ([g.model_dump(mode="json") for g in base.workers], [g.model_dump(mode="json") for g in treat.workers]),
    }
    return tuple(k for k in DIFFERENCES if pairs[k][0] != pairs[k][1])


def _describe(spec: CampaignSpec, e: Experiment) -> str:
    return (f"{e.name!r} ({e.mode}, {e.gpus()} GPUs {'+'.join(_kinds(spec, e))}, router {e.router}, "
            f"{'offload' if e.kv_offload else 'no offload'})")


def allowed_questions(spec: CampaignSpec, base: Experiment, treat: Experiment) -> dict[str, str | None]:
    """Each question: None when the pair can answer it, else why not."""
    d = set(differences(spec, base, treat))
    agg_vs_disagg = base.mode == "aggregated" and treat.mode == "disaggregated"
    mode_why = None if agg_vs_disagg else "needs an aggregated baseline and a disaggregated treatment"

    def same(*what: str) -> str | None:
        bad = [w for w in what if w in d]
        return f"needs the same {', '.join(bad)} on both sides" if bad else None

    out: dict[str, str | None] = {
        "q1": mode_why or same("gpus", "gpu_kinds", "router", "kv_offload"),
        "q3": mode_why, "h3": mode_why,
        "q4": mode_why or same("gpus", "gpu_kinds", "router", "kv_offload"),
    }
    out["h1"] = out["q4"]
    if d != {"kv_offload"}:
        out["q2"] = "needs only kv_offload to differ"
    else:
        out["q2"] = None if treat.kv_offload is not None else "needs the offload on the treatment side"
    if d == {"router"}:
        out["h2"] = None if treat.router == "kv" else "needs the KV router on the treatment side"
    elif d == {"kv_offload"}:
        out["h2"] = out["q2"]
    else:
        out["h2"] = "needs only the router or only kv_offload to differ"
    out["h4"] = ("needs different GPU kinds on the two sides" if "gpu_kinds" not in d
                 else same("router", "kv_offload"))
    return {q: out[q] for q in QUESTIONS}


def comparison_problems(spec: CampaignSpec) -> list[str]:
    """One line per problem of the spec's ``comparisons`` (field path, what is wrong, what is valid)."""
    problems: list[str] = []
    names = [e.name for e in spec.experiments]
    seen_names: set[str] = set()
    seen_pairs: dict[tuple[str, str], str] = {}
    for i, c in enumerate(spec.comparisons):
        where, it = f"comparisons[{i}]", f"comparison {c.name!r}"
        if c.name in seen_names:
            problems.append(f"{where}.name: {c.name!r} is used twice; comparison names must be unique")
        seen_names.add(c.name)
        missing = [f"{where}.{k}: {v!r} is not an experiment ({it}); valid: {names}"
                   for k, v in (("baseline", c.baseline), ("treatment", c.treatment)) if v not in names]
        if missing:
            problems += missing
            continue
        if c.baseline == c.treatment:
            problems.append(f"{where}.treatment: {c.treatment!r} is also the baseline ({it}); compare two experiments")
            continue
        if (c.baseline, c.treatment) in seen_pairs:
            problems.append(f"{where}: {it} compares the same experiments as {seen_pairs[(c.baseline, c.treatment)]}")
        seen_pairs[(c.baseline, c.treatment)] = f"{where} ({c.name!r})"
        base, treat = spec.experiment(c.baseline), spec.experiment(c.treatment)
        allowed = allowed_questions(spec, base, treat)
        valid = [q for q, why in allowed.items() if why is None]
        asked = c.asked()
        for q in asked or ():
            if allowed[q] is not None:
                problems.append(
                    f"{where}.question: {q} ({it}) {allowed[q]}; baseline {_describe(spec, base)}, treatment "
                    f"{_describe(spec, treat)}; valid for this pair: {', '.join(valid) or 'none'}")
        if asked is None and not valid:
            problems.append(f"{where}: {it}: {_describe(spec, base)} and {_describe(spec, treat)} differ in "
                            f"{list(differences(spec, base, treat)) or 'nothing'}: no question of the plan is answered "
                            "by that difference (see docs/explanation/verdicts.md)")
    return problems


def default_comparisons(spec: CampaignSpec) -> list[Resolved]:
    """The pairing a spec without ``comparisons`` gets (docs/explanation/verdicts.md)."""
    out: dict[tuple[str, str], Resolved] = {}

    def add(base: Experiment, treat: Experiment) -> None:
        allowed = allowed_questions(spec, base, treat)
        qs = tuple(q for q, why in allowed.items() if why is None)
        if not qs:
            return
        key = (base.name, treat.name)
        old = out.get(key)
        merged = tuple(q for q in QUESTIONS if q in qs or (old is not None and q in old.questions))
        out[key] = Resolved(f"{treat.name}-vs-{base.name}", base.name, treat.name, merged,
                            differences(spec, base, treat), "default")

    aggs = [e for e in spec.experiments if e.mode == "aggregated"]
    for treat in spec.experiments:
        if treat.mode != "disaggregated":
            continue
        kinds = _kinds(spec, treat)
        alike = [b for b in aggs if b.router == treat.router and _offload(b) == _offload(treat)]
        same = [b for b in alike if b.gpus() == treat.gpus() and _kinds(spec, b) == kinds]
        hetero = [b for b in alike if len(kinds) > 1 and len(_kinds(spec, b)) == 1 and _kinds(spec, b)[0] in kinds]
        if same or hetero:
            add((same or hetero)[0], treat)
    for treat in spec.experiments:
        if treat.base is not None:
            add(spec.experiment(treat.base), treat)
    return list(out.values())


def resolved(spec: CampaignSpec) -> list[Resolved]:
    """The spec's comparisons with their questions (default: every question each allows), or the default
    pairing when it names none."""
    if not spec.comparisons:
        return default_comparisons(spec)
    out = []
    for c in spec.comparisons:
        base, treat = spec.experiment(c.baseline), spec.experiment(c.treatment)
        allowed = allowed_questions(spec, base, treat)
        qs = c.asked() or tuple(q for q, why in allowed.items() if why is None)
        out.append(Resolved(c.name, c.baseline, c.treatment, tuple(q for q in QUESTIONS if q in qs),
                            differences(spec, base, treat), "spec"))
    return out


def comparison_rows(campaign_id: str, spec: CampaignSpec) -> list[dict[str, Any]]:
    """The ``comparisons`` rows of a campaign (benchctl.lake.schema), written at Plan."""
    s = spec.comparison
    return [{"campaign_id": campaign_id, "comparison": r.name, "comparison_index": i, "baseline": r.baseline,
             "treatment": r.treatment, "questions": ",".join(r.questions), "differs": ",".join(r.differs),
             "source": r.source, "confidence": s.confidence, "practical_threshold_pct": s.practical_threshold_pct,
             "max_error_rate": s.max_error_rate, "slo_attainment": s.slo_attainment,
             "min_samples_p99": s.min_samples_p99, "transfer_share_pct": s.transfer_share_pct,
             "queue_threshold": s.queue_threshold, "deployment_spread_pct": s.deployment_spread_pct}
            for i, r in enumerate(resolved(spec))]


def format_comparisons(spec: CampaignSpec) -> str:
    """What ``benchctl plan`` says the campaign will compare (and so which of the plan's questions it answers)."""
    found = resolved(spec)
    if not found:
        return "comparisons: none (no pair of experiments answers a question of the plan)"
    lines = [f"comparisons ({'the spec' if spec.comparisons else 'default pairing'}):"]
    lines += [f"  {r.name}: {r.treatment} vs {r.baseline} (differs in {', '.join(r.differs) or 'nothing'}): "
              f"{', '.join(r.questions)}" for r in found]
    return "\n".join(lines)
