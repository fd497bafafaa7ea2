"""``design:``: how often each experiment is deployed and in which order (part of the spec; pure: pydantic and the
standard library only).

A GPU campaign varies at more levels than its repeats: a fresh deployment of the same configuration lands on other
nodes, other clocks, another EFA placement, another KV-cache size after memory profiling, and every repeat on it
shares that offset. One deployment per experiment confounds that offset with the mode (Kalibera & Jones,
"Rigorous Benchmarking in Reasonable Time", ISMM 2013: replicate at the highest level that varies). So:

* ``deployments``: fresh deployments of each experiment (new pods, new workers; with ``fresh_nodes`` the pools
  restored in between so that nodes can change); ``repeats`` run on each (so an experiment runs ``deployments x
  repeats`` repeats, the repeats of deployment k numbered ``(k - 1) x repeats ... k x repeats - 1``);
* ``order``: the deployments run in rounds, each round every experiment once: ``randomized`` (the default) draws
  each odd round's order from ``order_seed`` (default: the spec's ``seed``) and runs the even round after it in the
  reverse order (A B | B A: counterbalanced, so that a drift over the campaign's time loads neither mode; and the
  first experiment is no longer always the same one); ``as-written`` runs every round in the spec's order.

The analysis then estimates the variance between deployments apart from that between repeats
(:mod:`benchctl.analysis.effects`); with one deployment per experiment it assumes
``comparison.deployment_spread_pct`` for it, and says so.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Any, Literal

from pydantic import Field

from benchctl.spec.base import Strict
from benchctl.spec.names import dgd_name_problem

MAX_DEPLOYMENTS = 8
MAX_RUNS_PER_EXPERIMENT = 40  # deployments x repeats


class Design(Strict):
    """How many times each experiment is deployed, and in which order the deployments run."""

    deployments: int = Field(default=1, ge=1, le=MAX_DEPLOYMENTS, description="fresh deployments of each experiment "
                             "(new pods and workers); `repeats` run on each. With one, the verdicts assume "
                             "comparison.deployment_spread_pct between deployments; with two or more they measure it")
    order: Literal["randomized", "as-written"] = Field(
        default="randomized", description="randomized: each odd round of deployments (every experiment once) in an "
        "order drawn from order_seed, each even round in the reverse of the round before (A B | B A); as-written: "
        "every round in the spec's order")
    order_seed: int | None = Field(default=None, ge=0, le=2**62, description="the seed of the randomized order "
                                   "(default: the spec's seed); recorded in the plan")
    fresh_nodes: bool = Field(default=False, description="restore the pools between deployments (no warm hand-over), so "
                              "that a later deployment may land on other nodes; each deployment then waits for "
                              "capacity, which the plan prices")
    twin_spread_pct: float = Field(default=0.0, ge=0, le=50, description="the mocker's own deployment-to-deployment "
                                   "spread (SIMULATED): each deployment's workers run at a speed drawn from "
                                   "exp(N(0, pct/100)), seeded by the order seed and the deployment's name, so that a "
                                   "local A/A campaign exercises the design end to end; 0 (default): every deployment "
                                   "alike. The report states it")


def twin_speed(design: Design, seed: int, unit: str) -> float:
    """The mocker speed factor of one deployment (``twin_spread_pct``; 1 when off): seeded, so a rerun draws the
    same."""
    if design.twin_spread_pct <= 0:
        return 1.0
    rng = random.Random(f"benchctl-twin-{seed}-{unit}")  # noqa: S311 - a simulated spread, not a secret
    return round(math.exp(rng.gauss(0.0, math.log1p(design.twin_spread_pct / 100.0))), 4)


def unit_name(experiment: str, deployment: int, deployments: int, roles: list[str] | None = None) -> str:
    """The name of one deployment of ``experiment`` (``deployment`` from 1 of ``deployments``): the experiment's own
    name with one deployment, else ``<experiment>--d<k>``, shortened (the experiment cut, with a hash) where Dynamo's
    webhook or the spec's 40 characters would refuse it. The run store, the DGD and the lake's ``deployment`` column
    carry it."""
    if deployments <= 1:
        return experiment
    tail = f"--d{deployment}"
    name = experiment + tail
    if len(name) <= 40 and (roles is None or dgd_name_problem(name, roles) is None):
        return name
    digest = hashlib.sha1(experiment.encode(), usedforsecurity=False).hexdigest()[:4]
    short = f"-{digest}-d{deployment}"
    return experiment[: 20 - len(short)].rstrip("-") + short


def rounds(names: list[str], design: Design, seed: int) -> list[list[str]]:
    """The experiments' run order, one list per round of deployments (``design.deployments`` rounds)."""
    out: list[list[str]] = []
    rng = random.Random(f"benchctl-order-{seed}")  # noqa: S311 - an experimental design's order, not a secret
    for k in range(design.deployments):
        if design.order == "as-written":
            out.append(list(names))
        elif k % 2 == 1:
            out.append(list(reversed(out[-1])))
        else:
            drawn = list(names)
            rng.shuffle(drawn)
            out.append(drawn)
    return out


def design_problems(spec: Any) -> list[str]:
    """The cross-checks of ``design:`` against the rest of the spec (``benchctl.spec.model.CampaignSpec``)."""
    d: Design = spec.design
    repeats: int = spec.repeats
    problems = []
    if d.deployments * repeats > MAX_RUNS_PER_EXPERIMENT:
        problems.append(f"design.deployments: {d.deployments} deployments x repeats {repeats} = "
                        f"{d.deployments * repeats} repeats per experiment; at most {MAX_RUNS_PER_EXPERIMENT}")
    if d.deployments > 1:
        names = {e.name for e in spec.experiments}
        for e in spec.experiments:
            for k in range(1, d.deployments + 1):
                unit = unit_name(e.name, k, d.deployments, [g.role for g in e.workers])
                if unit in names:
                    problems.append(f"design.deployments: deployment {k} of experiment {e.name!r} would be named "
                                    f"{unit!r}, the name of another experiment; rename that experiment")
    return problems
