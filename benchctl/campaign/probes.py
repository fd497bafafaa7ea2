"""A sweep's search probes at LaunchLoad: the load each probe runs, chosen from what the experiment measured.

The first repeat searches (:func:`benchctl.analysis.search.next_load` over every load of the sweep measured so
far in that repeat, fixed points included: the steps before the probe are ingested first where they are not yet,
which IngestPreviousStep would do one step later); every later repeat runs the first repeat's probe loads again,
in the same order, so that each located load has as many repeats as the fixed points and the report's
verdicts judge them alike. A probe the search does not need (located, or past its budget line) is recorded as
skipped: no load runs, nothing is spent, the ASL's Map goes on (CheckLoad finds it done). A step whose load
generator fell behind (client-bound: ``benchctl.lake.client_load``) measured less than its load: the search never
chooses a probe from it, and once it fell behind twice at or above a load, nor that load or above again
(:func:`out_of_reach`). The search allows for the run-to-run spread of attainment (``search.run_spread``).
"""

from __future__ import annotations

from benchctl.analysis.search import Measured, Next, bound_level, next_load
from benchctl.campaign.base import JSON
from benchctl.campaign.context import Ctx
from benchctl.campaign.ingest import ingest_step
from benchctl.campaign.ports import Providers
from benchctl.errors import LoadFailed
from benchctl.planning.plan import StepPlan


def probe_load(p: Providers, ctx: Ctx, experiment: str, step: StepPlan) -> Next:
    """The load of probe ``step`` (``Next.load`` None: skip it) and why."""
    k = step.probe
    assert k is not None, f"step {step.step_id} is not a search probe"
    plan = p.state.plan()
    steps = plan.experiment(experiment).steps
    if step.repeat > 0:  # the first repeat ran in the experiment's first deployment (design.deployments)
        lake_name = plan.experiment(experiment).lake_name
        every = [s for e in plan.deployments_of(lake_name) for s in e.steps]
        first = next((s for s in every if s.workload == step.workload and s.repeat == 0 and s.probe == k), None)
        owner = plan.unit_of_step(lake_name, first.step_id).name if first is not None else experiment
        rec = p.state.load(owner, first.step_id) if first is not None else None
        if rec is None:
            raise RuntimeError(f"probe {step.step_id} of {experiment}: the first repeat's probe {k} is not recorded")
        if rec.concurrency is None:
            return Next(None, f"the first repeat's probe {k} did not run ({(rec.search or {}).get('why', '?')})",
                        None, None)
        return Next(rec.concurrency, f"the first repeat's probe {k} again, at c={rec.concurrency}", None, None)
    search = step.params["search"]
    spec = p.state.spec()
    points: list[Measured] = []
    behind: list[int] = []  # loads the load generator could not issue: the search stays below the lightest of them
    for s in steps:
        if s.workload != step.workload or s.repeat != 0 or s.index >= step.index:
            continue
        rec = p.state.load(experiment, s.step_id)
        if rec is None or rec.skipped:
            continue
        failed = False
        if rec.ended and not rec.stopped and rec.ingest_status is None:
            try:
                ingest_step(p, ctx, experiment, s.step_id)
            except LoadFailed:  # recorded as failed: a miss here; IngestPreviousStep fails the experiment next
                failed = True
            rec = p.state.load(experiment, s.step_id) or rec
        failed = failed or rec.ingest_status == "failed"
        load = rec.concurrency or s.concurrency
        if rec.client_bound and not failed:  # the load generator fell behind: not a measurement of this load
            if load is not None:
                behind.append(int(load))
            continue
        if load is not None and failed:
            points.append(Measured(int(load), 0, 0, failed=True))
        elif load is not None and rec.slo is not None:
            points.append(Measured(int(load), int(rec.slo["good"]), int(rec.slo["n"])))
    previous = next((s for s in steps if s.workload == step.workload and s.repeat == 0 and s.probe == k - 1), None)
    if previous is not None:
        prec = p.state.load(experiment, previous.step_id)
        if prec is not None and prec.skipped:  # the search stopped: every later probe is skipped too
            return Next(None, f"the search stopped before probe {k - 1}: {(prec.search or {}).get('why', '?')}",
                        None, None)
    reach, most = out_of_reach(behind), int(search["max_concurrency"])
    ceiling = most if reach is None else max(1, min(most, reach - 1))
    decision = next_load(points, target=spec.comparison.slo_attainment,
                         confidence=bound_level(spec.comparison.confidence), resolution=float(search["resolution"]),
                         start=search.get("start"), max_load=ceiling, spread=float(search.get("run_spread") or 0.0))
    return client_capped(decision, reach, most)


def out_of_reach(behind: list[int]) -> int | None:
    """The lightest load X at which, or above which, the load generator fell behind twice (``behind``: the loads of
    the client-bound steps so far): the client's reach ends below X. Once is not enough: a neighbour's burst can
    make one step client-bound, and the same load then measures well; twice, a probe there is spent on nothing."""
    return min((x for x in set(behind) if sum(1 for b in behind if b >= x) >= 2), default=None)


def client_capped(decision: Next, reach: int | None, max_load: int) -> Next:
    """``decision`` with the client's reach said: the search never probes ``reach`` or above again, and a search
    that stops at that ceiling says it is the client's, not the server's."""
    if decision.load is not None or reach is None or reach - 1 >= max_load or decision.located:
        return decision
    return Next(None, f"{decision.why}; the load generator fell behind twice at or above c={reach} (client-bound), so "
                      f"loads from c={reach} on cannot be measured with this client", decision.within, decision.past)


def skipped_probe(decision: Next) -> JSON:
    return {"skipped": True, "why": decision.why}
