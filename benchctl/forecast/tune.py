"""The tune phase's prediction: each candidate configuration's predicted SLO edge, and the candidates ranked by it.

A candidate's predicted edge is the highest concurrency at which aiconfigurator's closed-loop figures
(:func:`benchctl.forecast.predict._predict_step`, its TTFT with the queue and its ITL) are within the spec's SLO
(:func:`benchctl.forecast.predict.within_slo`): the campaign's own SLO-edge search run on the prediction
(:func:`benchctl.analysis.search.run`: doubling from concurrency 1 until the SLO is missed, then bisection) until
the edge is known to within 10 % (about a dozen estimates, ~1-2 s each the first time, cached
in-process). Its predicted goodput is the requests/s it completes at that edge (output tokens/s over OSL). The
ranking: what fits the GPUs' memory first, then the highest edge, then the highest goodput, then the arm's own
layout. This is the :data:`benchctl.planning.tune.Ranker` the command line and the local engine wire in; the
AWS Plan function has no aiconfigurator (its layers do not carry it), so there the candidates are not predicted
and the plan says so (run ``benchctl plan`` for the predicted ranking).

What Dynamo's profiler (``dynamo.profiler``) and AIConfigurator do for a DynamoGraphDeploymentRequest is the
same kind of search (aiconfigurator's ``cli default`` enumerates parallel layouts per role within the GPU
budget, rates each from its performance tables and keeps the best under the TTFT/TPOT targets; the profiler
then sweeps the chosen prefill and decode engines on the cluster); here the ranking picks which to pilot, and the
pilots' measurements decide.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from benchctl.analysis.search import run
from benchctl.forecast.edge import Unrated, predicted_measure
from benchctl.forecast.predict import _layout, _predict_step, frontend_floor_ms, source
from benchctl.planning.tune import Candidate, tune_workload
from benchctl.spec.deployment import Experiment
from benchctl.spec.model import CampaignSpec

MAX_CONCURRENCY = 4096  # the spec's largest concurrency
RESOLUTION = 1.10  # the edge is known to within 10 %


def predicted_edge(spec: CampaignSpec, exp: Experiment, isl: int, osl: int) -> dict[str, Any]:
    """``exp``'s predicted SLO edge (``edge``: the highest concurrency predicted within the SLO; 0: not even one
    request; None: not predicted), ``goodput`` (requests/s there), ``fits`` (memory) and a ``note``."""
    lay = _layout(spec, exp)
    model = spec.served_weights(exp).name
    floor = frontend_floor_ms(spec)
    seen: dict[int, dict[str, Any]] = {}

    def at(c: int) -> dict[str, Any]:
        if c not in seen:
            seen[c] = _predict_step(model, exp, lay, c, isl, osl, spec.slo, floor)
        return seen[c]

    first = at(1)
    if first["within_slo"] is None:
        return {"edge": None, "goodput": None, "fits": first["fits_memory"], "note": f"not predicted: {first['note']}"}
    fits = first["fits_memory"]
    if not first["within_slo"]:
        return {"edge": 0, "goodput": 0.0, "fits": fits, "note": "outside the SLO even at concurrency 1"}
    # the campaign's own search over the prediction (benchctl.analysis.search): ramp x2 from 1, then bisect
    measure = predicted_measure(at)
    try:
        _, last = run(measure, [measure(1)], target=0.9, confidence=0.975, resolution=RESOLUTION - 1.0,
                      max_probes=64, max_load=MAX_CONCURRENCY)
    except Unrated as why:
        return {"edge": None, "goodput": None, "fits": fits, "note": f"not predicted: {why}"}
    lo, hi = last.within or 1, last.past
    r = at(lo)
    goodput = (r["predicted_output_tokens_per_s"] or 0.0) / osl
    bound = f"missed at c={hi}" if hi is not None else f"within up to the largest load, {MAX_CONCURRENCY}"
    return {"edge": lo, "goodput": goodput, "fits": fits,
            "note": f"predicted edge c={lo} ({bound}; TTFT {r['predicted_ttft_ms']:.0f} ms, ITL "
                    f"{r['predicted_itl_ms']:.1f} ms there; {len(seen)} estimates)"}


def rank(spec: CampaignSpec, arm: Experiment, cands: list[Candidate]) -> list[Candidate]:
    """The candidates with their predictions, best first (module doc)."""
    w = tune_workload(spec)
    out = []
    for c in cands:
        p = predicted_edge(spec, arm.model_copy(update={"workers": list(c.workers)}), w.isl, w.osl)
        out.append(replace(c, predicted_edge=p["edge"], predicted_goodput=p["goodput"], fits=p["fits"],
                           note=f"{p['note']} [{source()}, ISL {w.isl} / OSL {w.osl}]"))
    return sorted(out, key=order)


def order(c: Candidate) -> tuple[bool, int, float, bool]:
    return (c.fits is False, -(c.predicted_edge if c.predicted_edge is not None else -1),
            -(c.predicted_goodput or 0.0), not c.given)
