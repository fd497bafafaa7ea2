"""The tune phase in the plan (``tune:``, :mod:`benchctl.spec.tune`): each arm's candidate configurations, which
of them are piloted, and the pilots as ordinary experiments before the arms.

A candidate keeps the arm's GPU total, pools, mode, router and everything else; only its worker layout changes:
aggregated, TP in {1, 2, 4, 8, 16} dividing the total into replicas; disaggregated, prefill and decode replicas
(at least one each) and TP per role, the roles' GPUs adding up to the total. Kept: what the pools' node size
allows (TP at most the GPUs per node) and what placement proves can be placed within ``max_nodes``
(:func:`benchctl.planning.placement.pool_placement`, the rule the spec check holds experiments to). The
arm's own layout always comes first. Ranking is a :data:`Ranker`'s (aiconfigurator's predicted SLO edge,
:func:`benchctl.forecast.tune.rank`, wired in by the engine or the command line); without one the candidates
keep the enumeration's order and the plan says they were not predicted. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from benchctl.planning import placement
from benchctl.spec.deployment import Experiment, WorkerGroup
from benchctl.spec.model import CampaignSpec
from benchctl.spec.names import dgd_name_problem
from benchctl.spec.workloads import ConcurrencySweep

TP_CHOICES = (1, 2, 4, 8, 16)
PILOT_SEED = 1000  # a pilot's load i uses the spec's seed + PILOT_SEED + i
MAX_LOADS = 6  # pilot loads per arm by default (the tune workload's levels, up to twice the best predicted edge)
NOT_PREDICTED = "not predicted (no predictor here): the enumeration's order, the arm's own layout first"


@dataclass(frozen=True)
class Candidate:
    """One configuration of an arm: its worker layout and, once ranked, its predicted SLO edge (the highest
    concurrency predicted within the SLO) and goodput there (requests/s)."""

    arm: str
    label: str
    workers: tuple[WorkerGroup, ...]
    given: bool = False
    predicted_edge: int | None = None
    predicted_goodput: float | None = None
    fits: bool | None = None  # predicted to fit the GPUs' memory (None: not predicted)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "workers": [g.model_dump(mode="json") for g in self.workers]}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Candidate:
        return Candidate(**{**data, "workers": tuple(WorkerGroup(**g) for g in data["workers"])})


# (spec, arm, candidates) -> the candidates with predictions, best first
Ranker = Callable[[CampaignSpec, Experiment, list[Candidate]], list[Candidate]]


@dataclass(frozen=True)
class Run:
    """One experiment of the plan in run order: a pilot (``loads``: its request-count loads) or an experiment of
    the spec; ``nodes``: for a tuned arm, enough for every candidate; ``tune``: what the plan records of the
    search (a pilot: its candidate; an arm: every candidate searched)."""

    exp: Experiment
    nodes: dict[str, int]
    tune: dict[str, Any]
    loads: list[int] | None = None


def label(workers: tuple[WorkerGroup, ...] | list[WorkerGroup]) -> str:
    """``w4x4`` (4 workers at TP 4), ``p3x2-d1x2`` (3 prefill and 1 decode workers at TP 2)."""
    return "-".join(f"{g.role[0]}{g.replicas}x{g.tensor_parallel}" for g in workers)


def tuned_arms(spec: CampaignSpec) -> list[Experiment]:
    t = spec.tune
    if t is None:
        return []
    if t.experiments is not None:
        return [spec.experiment(n) for n in t.experiments]
    return [e for e in spec.experiments if e.base is None]


def tune_workload(spec: CampaignSpec) -> ConcurrencySweep:
    t = spec.tune
    sweeps = [w for w in spec.workloads if isinstance(w, ConcurrencySweep)]
    return next(w for w in sweeps if t is None or t.workload is None or w.name == t.workload)


def _tps(pool: Any) -> list[int]:
    per_node = pool.gpus_per_node or 8  # a CPU pool (the mocker on EKS) stands for 8-GPU nodes
    return [tp for tp in TP_CHOICES if tp <= per_node]


def layouts(spec: CampaignSpec, exp: Experiment) -> list[tuple[WorkerGroup, ...]]:
    """Every worker layout of ``exp``'s GPU total on its pools (the arm's own first), before placement."""
    total = exp.gpus()
    own = tuple(exp.workers)
    out: list[tuple[WorkerGroup, ...]] = [own]
    if exp.mode == "aggregated":
        pool = exp.workers[0].pool
        for tp in _tps(spec.pool(pool)):
            if total % tp == 0 and total // tp <= 64:
                out.append((WorkerGroup(role="worker", pool=pool, replicas=total // tp, tensor_parallel=tp),))
    else:
        pp = next(g.pool for g in exp.workers if g.role == "prefill")
        dp = next(g.pool for g in exp.workers if g.role == "decode")
        for ptp in _tps(spec.pool(pp)):
            for dtp in _tps(spec.pool(dp)):
                for p in range(1, total // ptp + 1):
                    rest = total - p * ptp
                    if rest > 0 and rest % dtp == 0 and p <= 64 and rest // dtp <= 64:
                        out.append((WorkerGroup(role="prefill", pool=pp, replicas=p, tensor_parallel=ptp),
                                    WorkerGroup(role="decode", pool=dp, replicas=rest // dtp, tensor_parallel=dtp)))
    seen: set[str] = set()
    unique = []
    for workers in out:
        key = label(workers) + "@" + ",".join(g.pool for g in workers)
        if key not in seen:
            seen.add(key)
            unique.append(workers)
    return unique


def placeable(spec: CampaignSpec, exp: Experiment) -> bool:
    """Whether placement proves ``exp``'s workers fit its pools' nodes within ``max_nodes``, deadlock-free."""
    pools = {p.name: p for p in spec.pools}
    if any(placement.slots(pools[g.pool], g) > placement.node_slots(pools[g.pool]) for g in exp.workers):
        return False
    return all(not stuck and n <= pools[name].max_nodes
               for name, (n, stuck, _) in placement.pool_placement(pools, exp).items())


def candidates(spec: CampaignSpec, exp: Experiment) -> list[Candidate]:
    """The arm's candidates: its layouts that can be placed, the arm's own first, at most ``tune.max_candidates``."""
    limit = spec.tune.max_candidates if spec.tune is not None else 1
    out = []
    for i, workers in enumerate(layouts(spec, exp)):
        if i == 0 or placeable(spec, exp.model_copy(update={"workers": list(workers)})):
            out.append(Candidate(exp.name, label(workers), workers, given=i == 0))
    return out[:limit]


def unranked(spec: CampaignSpec, exp: Experiment, cands: list[Candidate]) -> list[Candidate]:
    return [replace(c, note=NOT_PREDICTED) for c in cands]


def pilots(spec: CampaignSpec, ranked: list[Candidate]) -> list[Candidate]:
    """The best ``tune.pilots`` of the ranked candidates that may fit memory; the arm's own always among them."""
    n = spec.tune.pilots if spec.tune is not None else 1
    own = next(c for c in ranked if c.given)
    best = [c for c in ranked if not c.given and c.fits is not False][: n - 1]
    return [own, *best]


def pilot_name(arm: Experiment, cand: Candidate, index: int) -> str:
    """``<arm>--tune-<label>``; shorter (``<arm>-t<index>``, the arm cut with a hash) where Dynamo's webhook or the
    spec's 40 characters would refuse it."""
    roles: list[str] = [g.role for g in cand.workers]
    for name in (f"{arm.name}--tune-{cand.label}", f"{arm.name}-t{index}"):
        if len(name) <= 40 and dgd_name_problem(name, roles) is None:
            return name
    tail = f"-{hashlib.sha1(arm.name.encode(), usedforsecurity=False).hexdigest()[:4]}-t{index}"
    return arm.name[: 20 - len(tail)].rstrip("-") + tail


def _loads(spec: CampaignSpec, chosen: list[Candidate]) -> list[int]:
    t = spec.tune
    assert t is not None
    if t.loads is not None:
        return list(t.loads)
    edges = [c.predicted_edge for c in chosen if c.predicted_edge is not None]
    # the sweep's fixed loads; with concurrency: auto, loads around the best predicted edge (else 4 and 16)
    levels = sorted(tune_workload(spec).fixed_loads()) or (
        sorted({max(1, max(edges) // 2), max(edges), 2 * max(edges)}) if edges else [4, 16])
    if edges:
        best = max(edges)
        kept = [c for c in levels if c <= 2 * best] or levels[:1]
        above = [c for c in levels if c > 2 * best]
        levels = kept + above[:1]  # one level past twice the best edge: every pilot is seen leaving the SLO
        # near the predicted edge finer than a grid's doubling, so that the pilots' edges can differ there
        near = {max(1, round(best / math.sqrt(2.0))), best, round(best * math.sqrt(2.0))}
        levels = sorted(set(levels) | near)
        if len(levels) > MAX_LOADS:  # the ones nearest the predicted edge (by ratio)
            levels = sorted(sorted(levels, key=lambda c: abs(math.log(c / best)))[:MAX_LOADS])
        return levels
    return levels[-MAX_LOADS:]


def pilot_step_fields(spec: CampaignSpec, loads: list[int]) -> list[dict[str, Any]]:
    """A pilot's steps (the plan's StepPlan fields but the estimate): one request-count load per concurrency at the
    tune workload's ISL/OSL, at least ``tune.pilot_requests`` and two waves of the concurrency; each load its own
    seed (its own prompts: a load after another with the same prompts would hit the prefix cache the first one
    filled and measure no prefill at all)."""
    w, t = tune_workload(spec), spec.tune
    assert t is not None
    return [{"step_id": f"tune-c{c}", "index": i, "workload": w.name, "kind": w.kind, "repeat": 0,
             "seed": spec.repeat_seed(0) + PILOT_SEED + i, "concurrency": c, "isl": w.isl, "osl": w.osl, "duration_s": None,
             "request_count": max(t.pilot_requests, 2 * c), "variant": f"c{c}", "params": {"tune": True}}
            for i, c in enumerate(loads)]


def runs(spec: CampaignSpec, ranker: Ranker | None = None) -> list[Run]:
    """The plan's experiments in run order: every tuned arm's pilots first (arm by arm), then the spec's
    experiments; without ``tune`` exactly the spec's experiments."""
    pools = {p.name: p for p in spec.pools}
    arms = {e.name for e in tuned_arms(spec)}
    before: list[Run] = []
    after: list[Run] = []
    for exp in spec.experiments:
        nodes = placement.nodes_needed(pools, exp)
        if exp.name not in arms:
            after.append(Run(exp, nodes, {}))
            continue
        found = candidates(spec, exp)
        ranked = (ranker or unranked)(spec, exp, found)
        chosen = pilots(spec, ranked)
        loads = _loads(spec, chosen)
        names = {}
        for i, cand in enumerate(chosen):
            pexp = exp.model_copy(update={"name": pilot_name(exp, cand, i), "workers": list(cand.workers),
                                          "base": None, "change": None})
            names[cand.label] = pexp.name
            before.append(Run(pexp, placement.nodes_needed(pools, pexp),
                              {"arm": exp.name, "candidate": cand.to_json()}, loads))
        for cand in chosen:
            for pool, n in placement.nodes_needed(pools, exp.model_copy(update={"workers": list(cand.workers)})).items():
                nodes[pool] = max(nodes.get(pool, 0), n)
        after.append(Run(exp, nodes, {"searched": len(ranked), "loads": loads,
                                      "candidates": [{**c.to_json(), "pilot": names.get(c.label)} for c in ranked]}))
    return before + after


def note(info: dict[str, Any]) -> str:
    """What ``benchctl plan`` says of an experiment's part in the tune phase ("" for none)."""
    if "arm" in info:
        c = info["candidate"]
        edge = f", predicted edge c={c['predicted_edge']}" if c.get("predicted_edge") is not None else ""
        return f" [tune pilot of {info['arm']}: {c['label']}{edge}]"
    if "searched" in info:
        piloted = [c["label"] for c in info["candidates"] if c.get("pilot")]
        return (f" [tuned: runs at the best measured of {len(piloted)} pilots ({', '.join(piloted)}) among "
                f"{info['searched']} candidates]")
    return ""
