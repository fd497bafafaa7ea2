"""The tune phase at run time: which configuration a tuned arm runs at, chosen from its pilots' measurements.

The plan runs every tuned arm's pilots before the arms (:mod:`benchctl.planning.tune`). At the arm's ScalePools
(its first state; the pilots' last steps are ingested by then) :func:`choose` reads each pilot's load records
(``LoadRecord.slo``: requests, and those within every SLO bound) and picks, once (a redelivered event reads the
recorded choice): a pilot's **measured edge** is the highest load up to which every load's attainment is shown
to reach ``comparison.slo_attainment`` (the Wilson lower bound at ``comparison.confidence``,
:func:`benchctl.analysis.inference.wilson`); the highest edge wins; among those tied at it, the arm's own layout, then
the better prediction (one pilot run's goodput at one load is its noise, not a difference). The choice is kept in the run state and one
``tuning`` row per candidate searched (predicted and measured figures, chosen, why) goes to the lake; the arm's
``experiments`` row is rewritten with the chosen workers. Everything that builds or reads an experiment at run
time asks :func:`experiment_of`: a pilot is its arm with the candidate's workers, a tuned arm has its chosen ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchctl.analysis.inference import wilson
from benchctl.campaign.base import JSON, experiment_row
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.lake.schema import json_text
from benchctl.planning.plan import ExperimentPlan
from benchctl.planning.units import entry_experiment
from benchctl.spec.deployment import Experiment, WorkerGroup


@dataclass(frozen=True)
class Measured:
    """A pilot's loads as measured: (concurrency, requests, requests within the SLO, seconds of load)."""

    loads: list[tuple[int, int, int, float | None]]


def measured_edge(m: Measured, target: float, confidence: float) -> tuple[int, float | None, list[JSON]]:
    """(edge, goodput there in requests/s, each load's figures): the highest load up to which every load's Wilson
    lower bound reaches ``target`` (0: not even the lowest)."""
    edge, goodput, out = 0, None, []
    failed = False
    for c, n, good, seconds in sorted(m.loads):
        low = wilson(good, n, confidence)[0] if n else 0.0
        ok = n > 0 and low >= target
        out.append({"concurrency": c, "n": n, "good": good, "wilson_low": round(low, 4), "within": ok})
        if ok and not failed:
            edge, goodput = c, (good / seconds if seconds else None)
        failed = failed or not ok
    return edge, goodput, out


def ranking(candidates: list[JSON], measured: dict[str, Measured], target: float, confidence: float) -> list[JSON]:
    """The searched candidates (plan order: best predicted first) with their measured figures, best first; the
    first is the choice (``chosen``, ``why``). Candidates not piloted keep their prediction and rank last."""
    rows = []
    for rank_predicted, c in enumerate(candidates):
        m = measured.get(c.get("pilot") or "")
        edge, goodput, loads = measured_edge(m, target, confidence) if m is not None else (None, None, [])
        rows.append({**c, "rank_predicted": rank_predicted, "measured_edge": edge, "measured_goodput": goodput,
                     "measured_loads": loads})
    # a tie at the measured edge is not broken by one pilot run's goodput at one load below every edge (that is the
    # run's noise): the arm's own layout stays where it ties, else the better prediction
    piloted = sorted((r for r in rows if r["measured_edge"] is not None),
                     key=lambda r: (-r["measured_edge"], not r["given"], r["rank_predicted"]))
    rest = [r for r in rows if r["measured_edge"] is None]
    out = [{**r, "chosen": False, "why": ""} for r in piloted + rest]
    if not piloted:
        own = next(i for i, r in enumerate(out) if r["given"])
        out[own] = {**out[own], "chosen": True, "why": "no pilot was measured: the arm runs as written"}
        return out
    best = out[0]
    ties = [r for r in out[1:] if r["measured_edge"] == best["measured_edge"]]
    why = f"the highest load within the SLO ({best['measured_edge']} concurrent requests"
    if best["measured_edge"] == 0:
        why = "no pilot held the SLO at any load: the best prediction among them"
    elif ties and best["given"]:
        why += (f"; tied at the pilots' load resolution with {', '.join(t['label'] for t in ties)}: the arm's own layout "
                "is kept, as no pilot measured better)")
    elif ties:
        why += (f"; tied at the pilots' load resolution with {', '.join(t['label'] for t in ties)}: the better "
                "prediction of them, not one run's goodput)")
    else:
        why += ")"
    out[0] = {**best, "chosen": True, "why": why}
    return out


def _measured(p: Providers, pilot: str) -> Measured:
    plan = p.state.plan()
    loads = []
    for s in plan.experiment(pilot).steps:
        rec = p.state.load(pilot, s.step_id)
        if rec is None or rec.slo is None or s.concurrency is None:
            continue
        start = rec.running_at or rec.launched_at
        seconds = (rec.ended_at - start) if rec.ended_at and start and rec.ended_at > start else None
        loads.append((s.concurrency, int(rec.slo.get("n", 0)), int(rec.slo.get("good", 0)), seconds))
    return Measured(loads)


def choose(p: Providers, ctx: Ctx, entry: str) -> JSON | None:
    """The tuned arm's choice, made once from its pilots' measurements and recorded (None: ``entry`` is no
    deployment of a tuned arm); every deployment of the arm runs the same choice."""
    got = p.state.plan().experiment(entry)
    info, arm = got.tune, got.lake_name
    if "searched" not in info:
        return None
    done = p.state.tuning(arm)
    if done is not None:
        return done
    spec = p.state.spec()
    measured = {c["pilot"]: _measured(p, c["pilot"]) for c in info["candidates"] if c.get("pilot")}
    ranked = ranking(info["candidates"], measured, spec.comparison.slo_attainment, spec.comparison.confidence)
    chosen = ranked[0]
    choice = {"arm": arm, "label": chosen["label"], "workers": chosen["workers"], "why": chosen["why"],
              "searched": info["searched"], "piloted": len(measured), "candidates": ranked}
    p.state.save_tuning(arm, choice)
    p.lake.write("tuning", [tuning_row(ctx.campaign_id, arm, r) for r in ranked], part_name=f"tuning-{arm}")
    p.lake.write("experiments", [experiment_row(ctx.campaign_id, i, experiment_of(p, e.name), spec)
                                 for i, e in enumerate(spec.experiments)], part_name="experiment")
    return choice


def tuning_row(campaign_id: str, arm: str, r: JSON) -> JSON:
    workers = [WorkerGroup(**g) for g in r["workers"]]
    return {"campaign_id": campaign_id, "experiment": arm, "candidate": r["label"], "pilot": r.get("pilot"),
            "given": bool(r["given"]), "gpus": sum(g.replicas * g.tensor_parallel for g in workers),
            "workers_json": json_text(r["workers"]), "predicted_edge": r.get("predicted_edge"),
            "predicted_goodput_rps": r.get("predicted_goodput"), "fits_memory": r.get("fits"),
            "measured_edge": r["measured_edge"], "measured_goodput_rps": r["measured_goodput"],
            "measured_loads_json": json_text(r["measured_loads"]) if r["measured_loads"] else None,
            "chosen": bool(r["chosen"]), "why": r["why"] or None, "note": r.get("note") or None}


def experiment_of(p: Providers, name: str) -> Experiment:
    """The experiment as it runs (module doc): the spec's, a pilot's, or a tuned arm's at its chosen workers.
    ``name``: a plan entry (one deployment of an experiment, ``benchctl.spec.design``, is named after it: the
    experiment it returns carries that name, the DGD's) or the spec's experiment."""
    spec = p.state.spec()
    info: dict[str, Any] = {}
    base = name
    if p.state.has_plan():
        plan = p.state.plan()
        entry: ExperimentPlan | None
        try:
            entry = plan.experiment(name)
        except KeyError:  # the spec's name of an experiment deployed several times: its first deployment's
            entry = next(iter(plan.deployments_of(name)), None)
        if entry is not None:
            info, base = entry.tune, entry.lake_name
    if "arm" in info and entry is not None:
        return entry_experiment(spec, entry)
    exp = spec.experiment(base)
    choice = p.state.tuning(base) if "searched" in info else None
    if choice is not None:
        exp = exp.model_copy(update={"workers": [WorkerGroup(**g) for g in choice["workers"]]})
    return exp if base == name else exp.model_copy(update={"name": name})
