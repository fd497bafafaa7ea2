"""The evidence the report's Answers judge: each comparison the campaign recorded (the ``comparisons`` table)
with its settings, the steps of both its sides (``v_comparison_steps``) as points with one observation per
repeat (:mod:`benchctl.analysis.effects`), and what is left out and why: latency percentiles of steps that failed or
exceeded the error-rate threshold (goodput and SLO attainment count every attempted step), disaggregated
experiments whose KV transfer was not the spec's (:mod:`benchctl.analysis.fabric`), comparisons a question cannot use.
Also the design the intervals rest on (deployments per mode, their order, pairing).
Pure: the standard library and the core.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchctl.analysis.effects import Block, Compared, Family, Obs, adjust, confidence_text, describe
from benchctl.analysis.fabric import NOT_APPLICABLE, Fabric, fabric_check
from benchctl.analysis.regimes import Attainment
from benchctl.analysis.verdicts import INCONCLUSIVE, Settings, num_text
from benchctl.lake import timeline
from benchctl.report.data import ReportData, Rows, fmt_value, num
from benchctl.report.levels import client_checked, detectable

BASELINE, TREATMENT = "baseline", "treatment"
NOT_MEASURED = "not measured"
DIRECTIONAL = "directional"
UNVERIFIED = "inconclusive (transfer path unverified)"


@dataclass(frozen=True)
class Shown:
    """One compared figure at one point, as the answer's table and forest plot show it: ``where`` the comparison
    (and input), ``point`` the load or variant."""

    where: str
    point: str
    c: Compared
    pair: Pair | None = None


@dataclass
class Answer:
    key: str
    kind: str  # "question" | "hypothesis"
    title: str
    evidence: str  # what answers it (views)
    verdict: str
    figures: list[tuple[str, str]] = field(default_factory=list)  # (what, value): what is not a compared figure
    effects: list[Shown] = field(default_factory=list)  # every compared figure, numeric (table, forest plot)
    regimes: list[tuple[Pair, Any]] = field(default_factory=list)  # SLO limits compared (RegimeComparison)
    samples: str = ""
    status: str = NOT_MEASURED  # DIRECTIONAL | INCONCLUSIVE | NOT_MEASURED
    method: str = ""  # how it was judged: figures, family, adjustment, design
    excluded: list[str] = field(default_factory=list)  # what was left out (or kept unverified), and why
    tests: list[Any] = field(default_factory=list)  # the family's primary tests (Compared, RegimeComparison, ...)
    family: Family | None = None
    mde: str = ""  # the smallest effect it could have seen (evidence.detectable)

    @property
    def measured(self) -> bool:
        return not self.verdict.startswith(NOT_MEASURED)


def fnum(v: float | None, unit: str = "") -> str:
    return num_text(v, unit)


def not_measured(a: Answer, why: str, excluded: list[str]) -> Answer:
    a.verdict, a.status = f"{NOT_MEASURED}: {why}", NOT_MEASURED
    a.excluded = excluded
    return a


def judge(a: Answer, pairs: Sequence[Pair], family: list[Any], shown_only: Sequence[Compared]) -> Settings:
    """The answer's family judged by Holm's step-down (:func:`benchctl.analysis.effects.adjust`), its descriptive figures
    given their unadjusted intervals; the settings it was judged by (the campaign's, on every comparison row)."""
    settings = pairs[0].settings if pairs else Settings()
    a.family = adjust(family, settings)
    describe(shown_only, settings)
    a.tests = family
    a.mde = detectable(family, settings)
    return settings


def finish(a: Answer, parts: list[str], left: list[str], samples: list[str], *, decided: bool) -> Answer:
    """The answer's verdict from its parts (one per comparison and input), its status (directional only when a
    test its text shows was decided), what was left out and the samples; "not measured" when no part measured
    anything."""
    a.verdict = " | ".join(parts)
    a.status = DIRECTIONAL if decided else INCONCLUSIVE
    if not decided and a.mde:  # inconclusive is not "no difference": what the campaign could have seen
        a.verdict += f" | not a finding of no difference: {a.mde}; a smaller effect could not have been seen"
    if a.mde and a.method:
        a.method += f"; {a.mde}"
    if not a.tests and all(p.split(": ", 1)[-1].startswith(NOT_MEASURED) for p in parts):
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
    """Sweep points grouped per (workload, ISL, OSL): the loads of one input length, lightest first."""
    out: dict[tuple[Any, ...], list[Any]] = {}
    for key in points:
        out.setdefault(key[:3], []).append(key)
    return {k: sorted(v, key=lambda key: float(key[3])) for k, v in out.items()}


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
    def verified(self) -> bool:
        """Every disaggregated side's transfer path is shown to be the spec's (by what carried the KV)."""
        return all(f.verified for f in self.fabric)

    def unverified_text(self) -> str:
        return "; ".join(f.text() for f in self.fabric if not f.verified)

    @property
    def label(self) -> str:
        return f"{self.treatment} vs {self.baseline}"

    def experiment(self, side: str) -> str:
        return self.baseline if side == BASELINE else self.treatment


def _kinds_differ(pair: Pair) -> bool:
    return "gpu_kinds" in pair.differs


SAME_KINDS = ("q4", "h1")  # a gap between GPU kinds is not the transfer's: these need the same kinds


@dataclass
class Evidence:
    pairs: list[Pair]
    steps: list[dict[str, Any]]  # v_comparison_steps rows of the campaign
    views: dict[str, Rows]
    fabric: dict[str, Fabric]
    deployments: dict[str, int] = field(default_factory=dict)  # experiment -> deployments made (deploy_applied)
    order: list[str] = field(default_factory=list)  # experiments in the order they were deployed
    order_units: list[tuple[str, str]] = field(default_factory=list)  # (experiment, its deployment) in that order

    def for_question(self, q: str) -> tuple[list[Pair], list[str]]:
        """The comparisons answering ``q`` (unverified ones included: their parts say so), and one line per
        comparison left out (and why)."""
        asked = [p for p in self.pairs if q in p.questions]
        left = [f"comparison {p.name} ({p.label}) excluded: " + "; ".join(f.text() for f in p.fabric if not f.valid)
                for p in asked if not p.valid]
        kinds = [p for p in asked if p.valid and q in SAME_KINDS and _kinds_differ(p)]
        left += [f"comparison {p.name} ({p.label}) not used for {q.upper()}: its sides run on different GPU kinds, so "
                 "a TTFT gap is not the transfer's (needs the same kinds)" for p in kinds]
        unverified = [f"comparison {p.name}: {UNVERIFIED}: {p.unverified_text()}" for p in asked
                      if p.valid and p not in kinds and not p.verified]
        return [p for p in asked if p.valid and p not in kinds], left + unverified

    def rows(self, pair: Pair, side: str, kind: str | None = None, *, valid: bool | None = True
             ) -> list[dict[str, Any]]:
        """The steps of one side (``valid``: True only valid ones, False only invalid ones, None every step)."""
        return [r for r in self.steps if r.get("comparison") == pair.name and r.get("side") == side
                and (kind is None or r.get("workload_kind") == kind)
                and (valid is None or bool(r.get("valid")) == valid)]

    def invalid_steps(self, pair: Pair, kind: str | None = None) -> list[str]:
        """'experiment/step_id: why' for every step whose latency percentiles are left out."""
        def why(r: dict[str, Any]) -> str:
            if r.get("client_bound"):
                return str(r["invalid_reason"])
            rate, limit = num(r.get("error_rate")), num(r.get("max_error_rate"))
            if r.get("status") == "succeeded" and rate is not None and limit is not None and rate > limit:
                return (f"error rate {round(rate, 4):g} above max_error_rate {limit:g} (its latency percentiles are left "
                        "out; its goodput and SLO attainment count)")
            return str(r.get("invalid_reason") or "invalid")

        out = sorted({f"{r.get('experiment')}/{r.get('step_id')}: {why(r)}"
                      for side in (BASELINE, TREATMENT) for r in self.rows(pair, side, kind, valid=False)})
        confound = self.client_confound(pair, kind)
        return out + ([confound] if confound else [])

    def client_confound(self, pair: Pair, kind: str | None = None) -> str:
        """A line when the load generator fell behind at different points on the two sides (a difference between
        the modes' runs that is the client's, not the server's), '' otherwise."""
        where = {side: sorted({f"{r.get('variant')}" for r in self.rows(pair, side, kind, valid=None)
                               if r.get("client_bound")}) for side in (BASELINE, TREATMENT)}
        if where[BASELINE] == where[TREATMENT]:
            return ""
        said = "; ".join(f"{pair.experiment(side)} at {', '.join(v) or 'no point'}" for side, v in where.items())
        return (f"comparison {pair.name}: the load generator fell behind at different points on the two sides ({said}): "
                "those steps are left out, so the sides rest on different repeats there")
    def points(self, pair: Pair, kind: str, key: Callable[[dict[str, Any]], Hashable], *, valid: bool | None = True
               ) -> dict[Any, dict[str, list[dict[str, Any]]]]:
        """Rows of both sides grouped by ``key`` (e.g. workload, ISL, concurrency), sorted by key."""
        out: dict[Any, dict[str, list[dict[str, Any]]]] = {}
        for side in (BASELINE, TREATMENT):
            for r in self.rows(pair, side, kind, valid=valid):
                if valid is None and not r.get("attempted"):
                    continue
                out.setdefault(key(r), {BASELINE: [], TREATMENT: []})[side].append(r)
        return dict(sorted(out.items(), key=lambda kv: tuple(_sortable(v) for v in _as_tuple(kv[0]))))

    def view(self, name: str) -> Rows:
        return self.views.get(name) or Rows([], [])

    def allocation_note(self, pair: Pair) -> str:
        """'' when both sides paid for as many GPUs, else what each paid for (v_cost_efficiency: the nodes one
        deployment held and their GPUs): the same GPU total of workers is then not the same bill."""
        cost = {str(r.get("experiment")): r for r in self.view("v_cost_efficiency").rows}
        got = [(e, num((cost.get(e) or {}).get("gpus_allocated")), num((cost.get(e) or {}).get("nodes")))
               for e in (pair.baseline, pair.treatment)]
        if any(g is None for _, g, _ in got) or got[0][1] == got[1][1]:
            return ""
        said = ", ".join(f"{e} {g:g} GPUs on {n:g} node(s)" for e, g, n in got if g is not None and n is not None)
        return (f"the sides pay for different allocations ({said}): the same GPU total of workers, not the same "
                "bill; $/1M and goodput per $/h carry the difference")

    def run_order(self, pair: Pair) -> list[str]:
        """The pair's deployments in the order they ran (each deployment's own name: agg--d1, disagg--d1, ...)."""
        return [u for e, u in self.order_units if e in (pair.baseline, pair.treatment)]

    def design(self, pair: Pair, blocks: Sequence[Block]) -> str:
        """How the intervals relate to the mode effect: deployments per experiment, their order, the pairing, and
        the variance components of the primary figures (what each level contributed)."""
        paired = [b.paired for b in blocks if b.effects]
        pairing = ("paired by repeat (both sides ran the same repeats with the same seed and generated dataset)"
                   if paired and all(paired) else
                   "unpaired (Welch; paired only where both sides ran the same generated dataset per repeat)"
                   if paired and not any(paired) else
                   "paired by repeat where both sides ran the same generated dataset, else unpaired" if paired else "")
        n = {e: self.deployments.get(e, 1) for e in (pair.baseline, pair.treatment)}
        seq = self.run_order(pair) or [e for e in self.order if e in n]
        order = ", ".join(seq) if seq else f"{pair.baseline} and {pair.treatment}"
        spread = pair.settings.deployment_spread_pct
        if all(v <= 1 for v in n.values()):
            design = (f"one deployment per experiment, run in the order {order}: the repeats share their side's pods, so "
                      "a difference between two deployments of one configuration is not in their spread; "
                      + (f"a between-deployment spread of {spread:g} % is assumed for it (comparison."
                         "deployment_spread_pct) and added to each side's variance: deploy each experiment twice or "
                         "more (design.deployments) to measure it" if spread > 0 else
                         "comparison.deployment_spread_pct is 0: the intervals are conditional on that one deployment "
                         "per side (a difference between two deployments of the same configuration, or a drift over "
                         "the campaign's time, is not in them)"))
        else:
            design = (f"{pair.baseline} deployed {n[pair.baseline]} times and {pair.treatment} {n[pair.treatment]} times, "
                      f"in the order {order}: each mode effect judged on the deployments' means, its variance between "
                      "deployments measured (never below comparison.deployment_spread_pct "
                      f"{spread:g} %) with the deployments' degrees of freedom")
        primary = [b for b in blocks if b.effects and any(c.primary for c in b.effects)]
        components = "; ".join(f"{b.figure.label}: {t}" for b in primary if (t := b.components_text()))
        return "; ".join(x for x in (pairing, design, f"variance components ({components})" if components else "") if x)


def _as_tuple(k: Any) -> tuple[Any, ...]:
    return k if isinstance(k, tuple) else (k,)


def _sortable(v: Any) -> tuple[int, Any]:
    n = num(v)
    return (0, n) if n is not None else (1, str(v))


def pair_key(r: dict[str, Any]) -> tuple[Any, ...]:
    """What pairs a step with the other side's: the same repeat, seed and generated dataset (the same requests,
    lengths included). A step without a dataset file (AIPerf's synthetic prompts of fixed lengths: the seed
    changes only which tokens, not how long) pairs with nothing: its repeats are analysed unpaired."""
    if r.get("random_seed") is None or not r.get("dataset_sha256"):
        return ()
    return (r.get("repeat"), r.get("random_seed"), r.get("dataset_sha256"))


def observations(rows: list[dict[str, Any]], column: str, *, exposure: Callable[[dict[str, Any]], float | None]
                 | None = None, default: Callable[[dict[str, Any]], float | None] | None = None) -> tuple[Obs, ...]:
    """One observation per repeat (the mean of that repeat's steps): its pairing key, exposure and requests.
    ``default``: the value of a row without one (e.g. a failed step's goodput: 0)."""
    by: dict[Any, list[tuple[float, dict[str, Any]]]] = {}
    for r in rows:
        v = num(r.get(column))
        if v is None and default is not None:
            v = default(r)
        if v is not None:
            by.setdefault(r.get("repeat"), []).append((v, r))
    out = []
    for _, got in sorted(by.items(), key=lambda kv: _sortable(kv[0])):
        values = [v for v, _ in got]
        first = got[0][1]
        exp = [e for _, r in got if exposure is not None and (e := exposure(r)) is not None]
        reqs = [int(n) for _, r in got if (n := num(r.get("n_samples"))) is not None]
        out.append(Obs(sum(values) / len(values), pair_key(first) if len(got) == 1 else (),
                       sum(exp) / len(exp) if exp else None, min(reqs) if reqs else None,
                       str(first.get("deployment") or first.get("experiment") or "") or None))
    return tuple(out)


def duration(r: dict[str, Any]) -> float | None:
    return num(r.get("benchmark_duration_s"))


def failed_goodput(r: dict[str, Any]) -> float | None:
    """A step that ran its load but ended without AIPerf's summary (every request failed): none met the SLO."""
    if r.get("attempted") and r.get("status") != "succeeded" and has_slo([r]):
        return 0.0
    return None


def attainment(rows: list[dict[str, Any]], load: float) -> Attainment:
    """One load of one side, pooled over its attempted steps (requests, those within the SLO, errors)."""
    good = total = errors = 0.0
    failed = 0
    runs = []
    for r in rows:
        n = num(r.get("n_requests")) or 0.0
        if r.get("status") != "succeeded" and not n:
            failed += 1
            continue
        g = num(r.get("n_good")) or 0.0
        total += n
        good += g
        errors += n - (num(r.get("n_ok")) or 0.0)
        if n > 0:
            runs.append((g, n, str(r.get("deployment") or r.get("experiment") or "")))
    return Attainment(load, good, total, errors, failed, len({r.get("repeat") for r in rows}), tuple(runs))


def has_slo(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("slo_ttft_ms") is not None or r.get("slo_itl_ms") is not None for r in rows)


def evidence_of(data: ReportData) -> Evidence:
    """The comparisons of the report's campaign, with the fabric check of every disaggregated side."""
    network = {str(n.get("experiment")): n for n in data.network}  # the last observation of each experiment
    speeds: dict[str, list[float]] = {}
    for r in data.views.get("v_kv_transfer", Rows([], [])).rows:
        g = num(r.get("kv_transfer_gbps"))
        if g is not None and str(r.get("kv_transfer_source") or "").startswith("measured"):
            speeds.setdefault(str(r.get("experiment")), []).append(g)
    fabric = {str(e.get("experiment")): fabric_check(e, network.get(str(e.get("experiment"))),
                                                     speeds.get(str(e.get("experiment")), []))
              for e in data.experiment_rows}
    pairs = []
    for c in data.comparisons:
        sides = (str(c.get("baseline")), str(c.get("treatment")))
        pairs.append(Pair(
            name=str(c.get("comparison")), baseline=sides[0], treatment=sides[1],
            questions=tuple(q for q in str(c.get("questions") or "").split(",") if q),
            differs=tuple(d for d in str(c.get("differs") or "").split(",") if d), source=str(c.get("source") or ""),
            settings=Settings.from_row(c),
            fabric=[fabric[e] for e in sides if e in fabric and fabric[e].status != NOT_APPLICABLE]))
    deployments: dict[str, int] = {}
    order: list[str] = []
    units: list[tuple[str, str]] = []
    for ev in sorted((e for e in data.timeline if timeline.is_event(e, timeline.DEPLOY_APPLIED)),
                     key=lambda e: str(e.get("at"))):
        exp = str(ev.get("experiment"))
        deployments[exp] = deployments.get(exp, 0) + 1
        order.append(exp)
        units.append((exp, str(ev.get("deployment") or exp)))
    for exp in {str(r.get("experiment")) for r in data.comparison_steps}:  # a lake without deploy events says it too
        seen = {r.get("deployment") for r in data.comparison_steps if str(r.get("experiment")) == exp
                and r.get("deployment")}
        deployments[exp] = max(deployments.get(exp, 1), len(seen))
    if not order:
        order = list(data.experiments)
    return Evidence(pairs, [client_checked(r) for r in data.comparison_steps], data.views, fabric, deployments, order,
                    units)


def sweep_points(ev: Evidence, pair: Pair, a: Answer, parts: list[str], samples: list[str], *,
                 valid: bool | None = None) -> Any:
    """The pair's concurrency-sweep points (``Evidence.points`` by ``sweep_key``; every attempted step unless
    ``valid``), noting on ``a`` the steps whose percentiles are left out and in ``samples`` what they rest on;
    None (and the line saying so in ``parts``) without any."""
    pts = ev.points(pair, "concurrency_sweep", sweep_key, valid=valid)
    if not any(v[BASELINE] and v[TREATMENT] for v in pts.values()):
        parts.append(f"{pair.label}: {NOT_MEASURED} (no concurrency-sweep step on both sides)")
        return None
    samples.append(samples_text(ev, pair, "concurrency_sweep"))
    a.excluded += ev.invalid_steps(pair, "concurrency_sweep")
    return pts


def valid_only(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("valid")]


def shown(c: Compared) -> bool:
    """A point with a value on both sides (else it says nothing, not even descriptively)."""
    return bool(c.base.n and c.treat.n)


def method_text(settings: Any, declared: str, family: Any, primary_blocks: list[Any], design: str,
                extra: str = "") -> str:
    """The answer's method line: what was declared, the family and its adjustment, the shared rules, how the
    variances were estimated, the design the intervals rest on."""
    priors = sorted({b.prior.text() for b in primary_blocks if b.effects})
    return "; ".join(x for x in (
        f"primary figures, declared before the data: {declared}; every other figure is descriptive (an unadjusted "
        f"{confidence_text(settings.confidence)} interval, no verdict)",
        family.text() if family is not None else "",
        settings.describe(),
        "variances of the primary figures: " + "; ".join(priors)
        + " (Smyth's empirical Bayes over each figure's points; Welch-Satterthwaite degrees of freedom)" if priors else "",
        f"design: {design}" if design else "", extra) if x)
