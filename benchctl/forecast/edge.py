"""The SLO edge each sweep is predicted to have, and what locating it costs: the grid against the search.

For each experiment and concurrency-sweep workload, aiconfigurator's prediction (:mod:`benchctl.forecast.predict`,
one figure per load: within the SLO or past it) is run through the same search the campaign runs on measured
attainment (:func:`benchctl.analysis.search.run`): from the sweep's fixed loads first (what the campaign measures
first), then probes, until the edge is bracketed within the search's resolution. That gives

* the **grid's bracket**: the highest fixed load predicted within and the first past it (today's answer);
* the **predicted edge**: bracketed to the resolution (without a limit on probes);
* the **probes the campaign's search is expected to run** if the measured edge is where it is predicted (within
  its ``max_probes``, the budget line), and the GPU-hours of the grid's steps and of the search's probes
  (expected, and at most), side by side.

PREDICTED, not measured: where the GPUs are slower than aiconfigurator's data (the A100-40GB is), the measured edge
lies lower and the search takes its probes there. Deterministic; a sweep aiconfigurator cannot rate is reported
with its note and no figures.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from benchctl.analysis.search import Measured, bound_level, run
from benchctl.forecast.predict import _layout, _predict_step, frontend_floor_ms
from benchctl.planning.plan import CampaignPlan
from benchctl.spec.model import CampaignSpec
from benchctl.spec.workloads import ConcurrencySweep, SweepSearch

_N = 1000  # a predicted load's "requests": all within, or none (the Wilson bound then decides as the figure does)


class Unrated(Exception):
    """A load aiconfigurator cannot rate (its note is the message)."""


def _predict_at(model: str, exp: Any, lay: Any, isl: int, osl: int, slo: Any, floor: Any, c: int) -> dict[str, Any]:
    return _predict_step(model, exp, lay, c, isl, osl, slo, floor)


def predicted_measure(predict: Callable[[int], dict[str, Any]]) -> Callable[[int], Measured]:
    """A load's predicted figures (``within_slo``) as a measurement the search reads: every request within, or none
    (cached: the search asks a load at most once per run); a load aiconfigurator cannot rate raises."""
    cache: dict[int, dict[str, Any]] = {}

    def measure(c: int) -> Measured:
        fig = cache[c] if c in cache else cache.setdefault(c, predict(c))
        if fig["within_slo"] is None:
            raise Unrated(fig["note"])
        return Measured(c, _N if fig["within_slo"] else 0, _N)

    return measure


def predicted_edges(spec: CampaignSpec, plan: CampaignPlan) -> list[dict[str, Any]]:
    """One row per experiment x concurrency-sweep workload of ``plan``: the grid's and the search's brackets, the
    probes expected and the GPU-hours of each (see the module doc)."""
    rows: list[dict[str, Any]] = []
    floor = frontend_floor_ms(spec)
    target, conf = spec.comparison.slo_attainment, bound_level(spec.comparison.confidence)
    arms = {e.name for e in spec.experiments}
    for ep in plan.experiments:
        # a tune pilot: its loads are the tune phase's, not a sweep's; an experiment deployed several times
        # (design.deployments): once, over the steps of all its deployments
        if ep.lake_name not in arms or ep.deployment > 1:
            continue
        exp = spec.experiment(ep.lake_name)
        lay = _layout(spec, exp)
        model = spec.served_weights(exp).name
        for w in spec.workloads:
            if not isinstance(w, ConcurrencySweep):
                continue
            search = w.search_settings() or SweepSearch()
            measure = predicted_measure(partial(_predict_at, model, exp, lay, w.isl, w.osl, spec.slo, floor))

            steps = [s for d in plan.deployments_of(ep.lake_name) for s in d.steps if s.workload == w.name]
            grid_h = sum(s.est_s for s in steps if s.probe is None) * ep.gpus / 3600.0
            probe_h = sum(s.est_s for s in steps if s.probe is not None) * ep.gpus / 3600.0
            probes_per_repeat = max(1, sum(1 for s in steps if s.probe is not None and s.repeat == 0))
            row: dict[str, Any] = {"experiment": ep.lake_name, "mode": ep.mode, "workload": w.name, "isl": w.isl,
                                   "osl": w.osl, "resolution": search.resolution, "max_probes": search.max_probes,
                                   "searched": w.search_settings() is not None, "grid_gpu_hours": grid_h,
                                   "search_gpu_hours_max": probe_h, "note": None}
            try:
                fixed = [measure(c) for c in w.fixed_loads()]
                grid = run(measure, fixed, target=target, confidence=conf, resolution=search.resolution,
                           max_probes=0)[1]
                full = run(measure, fixed, target=target, confidence=conf, resolution=search.resolution,
                           max_probes=64, start=search.start, max_load=search.max_concurrency)
                budget = run(measure, fixed, target=target, confidence=conf, resolution=search.resolution,
                             max_probes=search.max_probes, start=search.start, max_load=search.max_concurrency)
            except Unrated as why:
                rows.append({**row, "note": str(why)})
                continue
            expected = len(budget[0])
            row.update({
                "grid_within": grid.within, "grid_past": grid.past,
                "edge_within": full[1].within, "edge_past": full[1].past, "edge_located": full[1].located,
                "probes_to_locate": len(full[0]), "expected_probes": expected,
                "located_within_budget": budget[1].located,
                "search_gpu_hours_expected": probe_h * expected / probes_per_repeat if row["searched"] else 0.0,
            })
            rows.append(row)
    return rows


def _bracket(lo: int | None, hi: int | None) -> str:
    if lo is None and hi is None:
        return "not located"
    ratio = f", {hi / lo:.2f}x" if lo and hi else ""
    return f"[c={lo if lo is not None else '<1'}, c={hi if hi is not None else '>max'}){ratio}"


def format_edges(rows: list[dict[str, Any]]) -> str:
    """The grid against the search, one line per experiment x sweep."""
    out = ["SLO edge per sweep, PREDICTED by aiconfigurator (not measured): the fixed grid's bracket [highest "
           "load within, first load past) against the search's, and the GPU-hours of each"]
    for r in rows:
        head = f"  {r['experiment']} ({r['mode']}) {r['workload']} ISL {r['isl']}/OSL {r['osl']}: "
        if r["note"]:
            out.append(head + f"not predicted ({r['note']})")
            continue
        grid = f"grid {_bracket(r['grid_within'], r['grid_past'])} for {r['grid_gpu_hours']:.2f} GPU-h"
        edge = _bracket(r["edge_within"], r["edge_past"])
        if r["searched"]:
            search = (f"search {edge} expected in {r['expected_probes']} of at most {r['max_probes']} probes per "
                      f"repeat, {r['search_gpu_hours_expected']:.2f} GPU-h (at most {r['search_gpu_hours_max']:.2f})"
                      + ("" if r["located_within_budget"] else
                         f"; NOT located to {r['resolution']:.0%} within max_probes"))
        else:
            search = (f"no search (a search block would locate {edge} in {r['probes_to_locate']} probes per "
                      "repeat)")
        out.append(head + grid + "; " + search)
    return "\n".join(out)
