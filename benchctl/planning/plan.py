"""Planning: expand a campaign spec into experiments x steps with deterministic ids and estimates.

Pure: no subprocess, no AWS, no Kubernetes, no file I/O. Plans are plain JSON-able dataclasses.
Same spec ⇒ same plan (ids, order, estimates).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from benchctl.planning import capacity, placement, tune
from benchctl.planning.cache_state import step_seed
from benchctl.planning.node_price import node_price
from benchctl.planning.units import deployment_units
from benchctl.spec.deployment import Experiment
from benchctl.spec.model import CampaignSpec, spec_hash
from benchctl.spec.workloads import ConcurrencySweep, MultiTurn, PrefixCache, SequenceDistribution

# Stated assumptions for estimates (seconds). AWS figures are typical for GPU node groups with a
# ~60 GB model on a shared volume; local figures are for the mocker on this kind of machine.
OVERHEADS = {
    "aws": {"capacity": 600.0, "ready": 900.0, "smoke": 30.0, "teardown": 180.0, "step_setup": 20.0},
    "local": {"capacity": 0.0, "ready": 12.0, "smoke": 2.0, "teardown": 2.0, "step_setup": 8.0},
}
# A pool the experiment before kept warm has its nodes already: CheckCapacity waits for one that went away (its node
# group replacing it) at most this long, not timeouts.capacity_s (benchctl.campaign.pools; the history counts it)
WARM_CAPACITY_S = 600.0
# Request-count steps need a time guess: TTFT + OSL x ITL per request (ms), a conservative GPU figure; the
# experiment's twin replaces it where one is given (seconds per request at concurrency, ISL, OSL: benchctl.forecast.twin)
EST_TTFT_MS = 200.0
EST_ITL_MS = 20.0
PROBE_PREFIX = "s"  # a probe step's variant in the plan ("s1"...): in the lake, "c<load>" once its load is chosen
GUESS = f"guess: {EST_TTFT_MS:g} ms + OSL x {EST_ITL_MS:g} ms per request"
RequestTimer = Callable[[int, float, float], float]


@dataclass(frozen=True)
class StepPlan:
    step_id: str
    index: int
    workload: str
    kind: str
    repeat: int
    seed: int
    concurrency: int | None
    isl: int | None  # None when lengths vary per request (sequence distribution)
    osl: int | None
    duration_s: float | None
    request_count: int | None
    est_s: float
    # what distinguishes this step within its workload: "c16" (concurrency), "zipf" (distribution),
    # "p25" (prefix ratio %); equal across experiments, so comparisons join on (workload, variant)
    variant: str = ""
    # kind-specific parameters (JSON): turns, conversations, distribution, ranges, prefix ratio, ...
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def probe(self) -> int | None:
        """A search probe's number (1...) within its repeat (its load is chosen at run time), else None."""
        k = self.params.get("probe")
        return int(k) if k is not None else None


@dataclass(frozen=True)
class ExperimentPlan:
    index: int
    name: str
    mode: str
    router: str
    gpus: int
    nodes: dict[str, int]  # pool name -> nodes needed
    steps: list[StepPlan]
    est_s: float
    est_node_hours: dict[str, float] = field(default_factory=dict)
    kv_offload: bool = False
    base: str | None = None  # feature ladder: the experiment this one changes
    feature: str | None = None  # ... and the one feature it changes
    # pools the NEXT experiment also uses: kept warm at its end instead of restored and booted again
    handover: dict[str, int] = field(default_factory=dict)
    serving_engine: str = "vllm"  # vllm, mocker on CPU nodes (SIMULATED), or cpu: the local CPU engine (SIMULATED)
    step_timing: str = GUESS  # how request-count steps were timed: the guess, or the twin (its label)
    tune: dict[str, Any] = field(default_factory=dict)  # the tune phase (benchctl.planning.tune.Run.tune); {}: none
    # design.deployments: this entry is deployment ``deployment`` (from 1) of ``deployments`` of ``experiment`` (the
    # name the lake's ``experiment`` column carries; "" = ``name``); ``name`` is then the deployment's own (the run
    # store's key, the DGD's name, the lake's ``deployment`` column: benchctl.spec.design.unit_name)
    experiment: str = ""
    deployment: int = 1
    deployments: int = 1

    @property
    def lake_name(self) -> str:
        """The experiment this entry deploys, as the lake and the comparisons name it."""
        return self.experiment or self.name

    @property
    def repeats(self) -> list[int]:
        """The repeats this deployment runs (numbered over the experiment's deployments)."""
        return sorted({s.repeat for s in self.steps})


@dataclass(frozen=True)
class CampaignPlan:
    plan_id: str
    spec_name: str
    spec_hash: str
    engine: str
    experiments: list[ExperimentPlan]
    est_s: float
    est_gpu_hours: float
    est_usd: float | None
    budget_problems: list[str]
    # the budget the guard holds the campaign to when the spec sets no budget.max_usd: the deployment's
    # max_usd_per_campaign (benchctl.planning.ceilings), set by Plan where ceilings apply; None: no such budget
    max_usd: float | None = None
    # the design (benchctl.spec.design): deployments per experiment, repeats on each, the order's rule and seed, and
    # the rounds as run (the experiments' names, one list per round); {}: a plan from before deployments
    design: dict[str, Any] = field(default_factory=dict)
    # how each pool not bought On-Demand is bought (benchctl.planning.capacity.purchase_text); []: all On-Demand
    capacity: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def step(self, experiment: str, step_id: str) -> StepPlan:
        exp = self.experiment(experiment)
        for s in exp.steps:
            if s.step_id == step_id:
                return s
        raise KeyError(f"step {step_id!r} is not in experiment {experiment!r}")

    def experiment(self, name: str) -> ExperimentPlan:
        """The plan's entry ``name`` (an experiment's deployment, or a pilot)."""
        for e in self.experiments:
            if e.name == name:
                return e
        raise KeyError(f"experiment {name!r} is not in the plan")

    def deployments_of(self, experiment: str) -> list[ExperimentPlan]:
        """Every deployment of the lake's ``experiment``, in run order."""
        return [e for e in self.experiments if e.lake_name == experiment]

    def unit_of_step(self, experiment: str, step_id: str) -> ExperimentPlan:
        """The deployment of the lake's ``experiment`` that runs ``step_id`` (KeyError when none does)."""
        for e in self.deployments_of(experiment):
            if any(s.step_id == step_id for s in e.steps):
                return e
        raise KeyError(f"step {step_id!r} of experiment {experiment!r} is in no deployment of the plan")

    @staticmethod
    def from_json(data: dict[str, Any]) -> CampaignPlan:
        exps = [
            ExperimentPlan(**{**e, "steps": [StepPlan(**s) for s in e["steps"]]})
            for e in data["experiments"]
        ]
        return CampaignPlan(**{**data, "experiments": exps})


def nodes_needed(spec: CampaignSpec, exp: Experiment) -> dict[str, int]:
    """Nodes per pool: the fewest on which every order kube-scheduler may place the experiment's workers
    in places them all, under the placement rules we render (``benchctl.planning.placement``)."""
    return placement.nodes_needed({p.name: p for p in spec.pools}, exp)


def _request_s(osl: float) -> float:
    """A conservative per-request time: TTFT + OSL x ITL (GPU figures above)."""
    return (EST_TTFT_MS + osl * EST_ITL_MS) / 1000.0


def _count_estimate(request_count: int, concurrency: int, isl: float, osl: float,
                    timer: RequestTimer | None = None) -> float:
    """A request-count step's load time: the guess per request in ceil(requests / concurrency) rounds, or, on
    the twin, requests / (concurrency / its per-request time in that closed loop)."""
    if timer is not None:
        return request_count * timer(concurrency, isl, osl) / concurrency
    return math.ceil(request_count / concurrency) * _request_s(osl)


def _ratio_label(ratio: float) -> str:
    return f"p{ratio * 100:g}".replace(".", "_")


def _workload_steps(w: Any, seed: int, timer: RequestTimer | None = None) -> list[tuple[str, dict[str, Any], float]]:
    """(variant, fields, load seconds) of one repeat of one workload, in run order."""
    out: list[tuple[str, dict[str, Any], float]] = []
    params: dict[str, Any]
    if isinstance(w, ConcurrencySweep):
        for c in w.fixed_loads():
            est = (w.duration_s if w.duration_s is not None
                   else _count_estimate(w.request_count or 0, c, w.isl, w.osl, timer))
            out.append((f"c{c}", {"concurrency": c, "isl": w.isl, "osl": w.osl, "duration_s": w.duration_s,
                                  "request_count": w.request_count, "params": {}}, float(est)))
        search = w.search_settings()
        if search is not None:  # the probes: their loads are chosen at run time (benchctl.analysis.search)
            probe_s = float(search.duration_s or w.duration_s or 0.0)
            for k in range(1, search.max_probes + 1):
                out.append((f"{PROBE_PREFIX}{k}", {"concurrency": None, "isl": w.isl, "osl": w.osl,
                                                   "duration_s": probe_s, "request_count": None,
                                                   "params": {"probe": k, "search": search.model_dump()}}, probe_s))
    elif isinstance(w, MultiTurn):
        if w.duration_s is not None:
            est = w.duration_s
        else:
            turn_s = _request_s(w.osl) if timer is None else timer(w.conversations, w.isl, w.osl)
            per_turn = turn_s + w.turn_delay_ms / 1000.0
            est = math.ceil((w.request_count or 0) / w.conversations) * per_turn
        params = {"turns": w.turns, "conversations": w.conversations, "turn_delay_ms": w.turn_delay_ms,
                  "dataset_conversations": w.dataset_conversations or _dataset_conversations(w)}
        out.append((f"c{w.conversations}", {"concurrency": w.conversations, "isl": w.isl, "osl": w.osl,
                                             "duration_s": w.duration_s, "request_count": w.request_count,
                                             "params": params}, float(est)))
    elif isinstance(w, SequenceDistribution):
        mid_osl = sum(w.osl_range) / 2
        for dist in w.distributions:
            params = {"distribution": dist, "isl_range": list(w.isl_range), "osl_range": list(w.osl_range),
                      "zipf_exponent": w.zipf_exponent, "lognormal_sigma": w.lognormal_sigma,
                      "dataset": f"{w.name}-{dist}-s{seed}.jsonl"}
            out.append((dist, {"concurrency": w.concurrency, "isl": None, "osl": None, "duration_s": None,
                               "request_count": w.requests, "params": params},
                        _count_estimate(w.requests, w.concurrency, sum(w.isl_range) / 2, mid_osl, timer)))
    elif isinstance(w, PrefixCache):
        for ratio in w.ratios:
            label = _ratio_label(ratio)
            params = {"prefix_ratio": ratio, "block_size": w.block_size, "duplication": w.duplication,
                      "prefix_tokens": w.prefix_tokens, "dataset": f"{w.name}-{label}-s{seed}.jsonl"}
            out.append((label, {"concurrency": w.concurrency, "isl": w.isl, "osl": w.osl, "duration_s": None,
                                "request_count": w.requests, "params": params},
                        _count_estimate(w.requests, w.concurrency, w.isl, w.osl, timer)))
    else:  # pragma: no cover - the spec's union is closed
        raise ValueError(f"workload kind {getattr(w, 'kind', w)!r} has no plan")
    return out


def _dataset_conversations(w: MultiTurn) -> int:
    """AIPerf's --conversation-num: it generates that many conversations AND stops after sending them.

    Request-bound: exactly the whole conversations asked for. Duration-bound: enough that the duration
    ends the step first and no conversation is sent twice (a resent one would hit the cache).
    """
    if w.request_count is not None:
        return w.request_count // w.turns
    # duration-bound: a generous upper bound on conversations finished in the step
    per_conversation_s = w.turns * (_request_s(w.osl) / 10.0 + w.turn_delay_ms / 1000.0)
    return max(w.conversations, math.ceil((w.duration_s or 0) / max(per_conversation_s, 0.05) * w.conversations))


def expand_steps(spec: CampaignSpec, engine: str, timer: RequestTimer | None = None) -> list[StepPlan]:
    steps: list[StepPlan] = []
    setup = OVERHEADS[engine]["step_setup"]
    for w in spec.workloads:
        for repeat in range(spec.total_repeats):
            seed = spec.repeat_seed(repeat)
            for variant, f, est in _workload_steps(w, seed, timer):
                steps.append(
                    StepPlan(
                        step_id=f"{w.name}-{variant}-r{repeat}",
                        index=len(steps),
                        workload=w.name,
                        kind=w.kind,
                        repeat=repeat,
                        seed=step_seed(w.kind, seed, len(steps)),
                        concurrency=f["concurrency"],
                        isl=f["isl"],
                        osl=f["osl"],
                        duration_s=f["duration_s"],
                        request_count=f["request_count"],
                        est_s=round(est + setup, 1),
                        variant=variant,
                        params=f["params"],
                    )
                )
    return steps


def plan_campaign(spec: CampaignSpec, engine: str = "local", timers: Mapping[str, RequestTimer] | None = None,
                  ranker: tune.Ranker | None = None, start: datetime | float | None = None) -> CampaignPlan:
    """The plan; ``timers`` (experiment -> its twin's seconds per request, :class:`benchctl.forecast.twin.StepTimer`) time
    its request-count steps; ``ranker`` ranks the tune candidates (:mod:`benchctl.planning.tune`: pilots first);
    ``start`` (a datetime or epoch seconds: the Plan state's clock) places the plan in time, so that a pool's
    Capacity Block is checked against its start and end (:func:`benchctl.planning.capacity.window_problems`;
    without it, only against its length)."""
    if engine not in OVERHEADS:
        raise ValueError(f"engine {engine!r} is not one of {sorted(OVERHEADS)}")
    over = OVERHEADS[engine]
    h = spec_hash(spec)
    steps = expand_steps(spec, engine)
    warmup_s = spec.warmup.request_count * (EST_TTFT_MS + 32 * EST_ITL_MS) / 1000.0 if spec.warmup.request_count else 0
    experiments: list[ExperimentPlan] = []
    total_s = 0.0
    gpu_hours = 0.0
    usd = 0.0
    priced = True
    units, design = deployment_units(spec, tune.runs(spec, ranker))
    all_nodes = [u.run.nodes for u in units]
    fresh = spec.design.fresh_nodes
    for i, u in enumerate(units):
        exp, nodes, tuning, loads = u.run.exp, u.run.nodes, u.run.tune, u.run.loads
        timer = (timers or {}).get(exp.name)
        exp_steps = steps if timer is None else expand_steps(spec, engine, timer)
        exp_steps = [s for s in exp_steps if s.repeat in u.repeats]
        if loads is not None:  # a tune pilot: one request-count load per concurrency
            exp_steps = [StepPlan(**f, est_s=round(over["step_setup"] + _count_estimate(f["request_count"], f[
                "concurrency"], f["isl"], f["osl"], timer), 1)) for f in tune.pilot_step_fields(spec, loads)]
        following = all_nodes[i + 1] if i + 1 < len(all_nodes) else {}
        # design.fresh_nodes: a pool is restored after each deployment of an experiment (the next may land on other
        # nodes); pilots still hand over to each other
        handover = {} if fresh and u.deployments > 1 else {pool: n for pool, n in nodes.items() if pool in following}
        # no capacity wait: the one before handed every pool over
        warm = i > 0 and bool(nodes) and all(pool in experiments[-1].handover for pool in nodes)
        est = (0.0 if warm else over["capacity"]) + over["ready"] + over["smoke"] + warmup_s + sum(s.est_s for s in exp_steps)
        est += over["teardown"]
        node_hours = {pool: n * est / 3600.0 for pool, n in nodes.items()}
        for pool, nh in node_hours.items():
            p = spec.pool(pool)
            gpu_hours += nh * p.gpus_per_node
            price = node_price(spec, pool)  # instance, root volume, Auto Mode fee (benchctl.planning.node_price)
            if price is None:
                priced = False
            else:
                usd += nh * price
        total_s += est
        experiments.append(
            ExperimentPlan(
                index=i,
                name=u.name,
                mode=exp.mode,
                router=exp.router,
                gpus=exp.gpus(),
                nodes=nodes,
                steps=exp_steps,
                est_s=round(est, 1),
                est_node_hours={k: round(v, 4) for k, v in node_hours.items()},
                kv_offload=exp.kv_offload is not None,
                handover=handover,
                base=exp.base,
                feature=exp.feature,
                serving_engine=("cpu" if exp.engine == "vllm" and all(spec.pool(g.pool).local_cpu for g in exp.workers)
                                else exp.engine),
                step_timing=GUESS if timer is None else str(getattr(timer, "label", "the twin")),
                tune=tuning,
                experiment=exp.name if u.name != exp.name else "",
                deployment=u.deployment,
                deployments=u.deployments,
            )
        )
    usd += spec.pricing.eks_cluster_usd_per_hour * total_s / 3600.0
    usd += sum(capacity.block_idle_usd(spec, experiments).values())  # a block is paid for its whole window
    est_usd = round(usd, 2) if priced else None
    problems: list[str] = []
    when = datetime.fromtimestamp(start, UTC) if isinstance(start, int | float) else start
    problems += capacity.window_problems(spec, experiments, when)
    if spec.budget.max_hours is not None and total_s / 3600.0 > spec.budget.max_hours:
        problems.append(
            f"budget.max_hours: estimated {total_s / 3600.0:.2f} h exceeds {spec.budget.max_hours} h"
        )
    if spec.budget.max_usd is not None:
        if est_usd is None:
            problems.append("budget.max_usd: set, but pricing.instances lacks a price for some pool")
        elif est_usd > spec.budget.max_usd:
            problems.append(f"budget.max_usd: estimated ${est_usd:.2f} exceeds ${spec.budget.max_usd:.2f}")
    return CampaignPlan(
        plan_id=f"{spec.name}-{h[:10]}",
        spec_name=spec.name,
        spec_hash=h,
        engine=engine,
        experiments=experiments,
        est_s=round(total_s, 1),
        est_gpu_hours=round(gpu_hours, 4),
        est_usd=est_usd,
        budget_problems=problems,
        design=design,
        capacity=[capacity.purchase_text(p) for p in spec.pools if p.capacity.purchase != capacity.ON_DEMAND],
    )


def design_text(plan: CampaignPlan) -> str:
    """'design: 2 deployments x 1 repeat per experiment, randomized (order seed 42): agg--d1, disagg--d1 |
    disagg--d2, agg--d2; the deployments' start-up and teardown est. 12 min' (what the plan runs in which order)."""
    d = plan.design
    if not d:
        return ""
    entries = [e for e in plan.experiments if "arm" not in e.tune]
    rounds = " | ".join(", ".join(e.name for e in entries if e.deployment == k)
                        for k in range(1, int(d["deployments"]) + 1))
    startup = sum(e.est_s - sum(s.est_s for s in e.steps) for e in entries)
    return (f"design: {d['deployments']} deployment(s) x {d['repeats_per_deployment']} repeat(s) per experiment, "
            f"{d['order']} order (seed {d['order_seed']}): {rounds}; the deployments' start-up and teardown est. "
            f"{startup / 60:.1f} min" + ("; pools restored between deployments (fresh nodes)" if d["fresh_nodes"] else ""))


def format_plan(plan: CampaignPlan) -> str:
    lines = [
        f"plan {plan.plan_id} (engine {plan.engine}): {len(plan.experiments)} experiments, "
        f"est. {plan.est_s / 60:.1f} min, {plan.est_gpu_hours:.2f} GPU-h"
        + (f", ${plan.est_usd:.2f}" if plan.est_usd is not None else ", cost unpriced"),
    ]
    if plan.design:
        lines.append("  " + design_text(plan))
    lines += [f"  capacity: {text}" for text in plan.capacity]
    for e in plan.experiments:
        nodes = ", ".join(f"{p} x{n}" for p, n in e.nodes.items())
        ladder = f" [ladder: {e.base} + {e.feature}]" if e.base else ""
        ladder += (f" [keeps {', '.join(sorted(e.handover))} warm for the next]" if e.handover else "") + tune.note(e.tune)
        offload = ", KV offload" if e.kv_offload else ""
        deployed = f" (deployment {e.deployment} of {e.deployments} of {e.lake_name})" if e.deployments > 1 else ""
        lines.append(
            f"  [{e.index + 1}] {e.name}{deployed}: {e.mode}, router {e.router}{offload}, "
            + (f"{e.gpus} GPUs on {nodes}; " if e.serving_engine == "vllm" else
               f"Dynamo's vLLM worker on vLLM's CPU build, {nodes} (SIMULATED (CPU engine)); "
               if e.serving_engine == "cpu" else
               f"Dynamo mocker workers standing for {e.gpus} GPUs, on CPU nodes {nodes} (SIMULATED); ") +
            f"{len(e.steps)} steps, est. {e.est_s / 60:.1f} min{ladder}; request-count steps timed by "
            f"{e.step_timing}"
        )
        for s in e.steps:
            stop = f"{s.duration_s:g} s" if s.duration_s is not None else f"{s.request_count} requests"
            lengths = (f"isl={s.isl} osl={s.osl}" if s.isl is not None else
                       f"isl={s.params['isl_range'][0]}-{s.params['isl_range'][1]} "
                       f"osl={s.params['osl_range'][0]}-{s.params['osl_range'][1]}")
            extra = "".join(f" {k}={s.params[k]}" for k in ("turns", "prefix_ratio") if k in s.params)
            load = f"c={s.concurrency}" if s.concurrency is not None else f"probe {s.params['probe']}"
            lines.append(f"      {s.step_id:<36} {load} {lengths}{extra} {stop} seed={s.seed} est. {s.est_s:g} s")
    for p in plan.budget_problems:
        lines.append(f"  REFUSED {p}")
    return "\n".join(lines)
