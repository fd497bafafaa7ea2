"""The plan's entries: one per deployment of each experiment, in the design's order (``benchctl.spec.design``),
after the tune phase's pilots; and the experiment each entry deploys. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from benchctl.planning import tune
from benchctl.spec.deployment import Experiment
from benchctl.spec.design import rounds, unit_name
from benchctl.spec.model import CampaignSpec


class Entry(Protocol):
    """What :func:`entry_experiment` reads of a plan entry (``benchctl.planning.plan.ExperimentPlan``)."""

    @property
    def name(self) -> str: ...
    @property
    def tune(self) -> dict[str, Any]: ...
    @property
    def lake_name(self) -> str: ...


@dataclass(frozen=True)
class Unit:
    """One entry of the plan in run order: a tune pilot, or one deployment of an experiment (``name``: its own,
    :func:`benchctl.spec.design.unit_name`), with the repeats it runs."""

    run: tune.Run
    name: str
    deployment: int
    deployments: int
    repeats: tuple[int, ...]


def deployment_units(spec: CampaignSpec, runs: list[tune.Run]) -> tuple[list[Unit], dict[str, Any]]:
    """The plan's entries in run order (pilots first, then each round of deployments: every experiment once, in
    the design's order) and the design as the plan records it."""
    d = spec.design
    seed = d.order_seed if d.order_seed is not None else spec.seed
    pilots = [r for r in runs if r.loads is not None]
    arms = {r.exp.name: r for r in runs if r.loads is None}
    every = tuple(range(spec.total_repeats))
    units = [Unit(r, r.exp.name, 1, 1, (0,)) for r in pilots]
    order = rounds(list(arms), d, seed)
    for k, names in enumerate(order, start=1):
        repeats = tuple(r for r in every if spec.deployment_of(r) == k)
        for name in names:
            r = arms[name]
            units.append(Unit(r, unit_name(name, k, d.deployments, [g.role for g in r.exp.workers]), k,
                              d.deployments, repeats))
    design = {"deployments": d.deployments, "repeats_per_deployment": spec.repeats, "order": d.order,
              "order_seed": seed, "fresh_nodes": d.fresh_nodes, "rounds": order}
    return units, design


def entry_experiment(spec: CampaignSpec, entry: Entry) -> Experiment:
    """The experiment a plan entry deploys, as written (before a tuned arm's choice, which the run state holds:
    ``benchctl.campaign.tuning.experiment_of``): a pilot's arm at its candidate's workers, or the spec's experiment,
    named after the entry (one deployment of it: the DGD's name)."""
    info = entry.tune
    if "arm" in info:
        from benchctl.spec.deployment import WorkerGroup

        workers = [WorkerGroup(**g) for g in info["candidate"]["workers"]]
        return spec.experiment(info["arm"]).model_copy(
            update={"name": entry.name, "workers": workers, "base": None, "change": None})
    exp = spec.experiment(entry.lake_name)
    return exp if entry.name == exp.name else exp.model_copy(update={"name": entry.name})
