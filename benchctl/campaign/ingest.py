"""IngestPreviousStep / IngestLastStep: one step's kept raw AIPerf artifacts into lake rows (atomic, idempotent).

Ingestion is off the critical path: a step's rows are written while the next step of its experiment loads
(IngestPreviousStep, right after that step's launch), and the experiment's last step after its Map
(IngestLastStep). The guarantees are those of ingesting at once: a step is ingested exactly once (its rows
and its ``ingested`` event are keyed by the step; a redelivered task rewrites the same objects), and a step
recorded as failed fails the experiment (its teardown runs first), one step later than the step itself.

On a failed step's path (IngestAfterFailure, after StopLoadAfterFailure stopped its load) every step of the
experiment whose load ended on its own and whose rows are not in the lake yet is ingested: a failure between
a step's end and its ingestion (the next step's LaunchLoad refused by the budget guard, an abort) never
loses a completed step.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path

from benchctl.campaign.base import JSON, Task, lake_names, record_event
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.campaign.tuning import experiment_of
from benchctl.errors import LoadFailed
from benchctl.lake import client_load, timeline


def ingest_previous(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """IngestPreviousStep: the step before ``task.step`` in its experiment's plan (nothing for the first)."""
    experiment = task.exp
    steps = [s.step_id for s in p.state.plan().experiment(experiment).steps]
    if task.step_id not in steps:
        raise ValueError(f"task {task.state}: step {task.step_id!r} is not a step of {experiment!r}")
    at = steps.index(task.step_id)
    if at == 0:
        return {"step": None}
    rec = p.state.load(experiment, steps[at - 1])
    if rec is not None and rec.ingest_status == "succeeded":  # a search probe's launch ingested it already
        return {"step": steps[at - 1], "status": "succeeded", "requests": None}
    return {"step": steps[at - 1], **ingest_step(p, ctx, experiment, steps[at - 1])}


def ingest_last(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """IngestLastStep: the experiment's last step (after its Map; nothing for an experiment without steps)."""
    experiment = task.exp
    steps = p.state.plan().experiment(experiment).steps
    if not steps:
        return {"step": None}
    return {"step": steps[-1].step_id, **ingest_step(p, ctx, experiment, steps[-1].step_id)}


def ingest_after_failure(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """IngestAfterFailure: each step of ``task``'s experiment, up to the failed one, that ended on its own
    (not stopped) and is not ingested yet. Never raises: the step fails anyway (its Fail state follows);
    a step that cannot be ingested is recorded as such and the next is tried."""
    experiment = task.exp
    steps = [s.step_id for s in p.state.plan().experiment(experiment).steps]
    upto = steps.index(task.step_id) + 1 if task.step_id in steps else len(steps)
    done: JSON = {}
    errors: JSON = {}
    for step_id in steps[:upto]:
        rec = p.state.load(experiment, step_id)
        if rec is None or not rec.ended or rec.stopped or rec.ingest_status is not None:
            continue
        try:
            done[step_id] = ingest_step(p, ctx, experiment, step_id)["status"]
        except LoadFailed:  # ingested, its rows say it failed
            done[step_id] = "failed"
        except Exception as err:  # recorded; the next step is tried
            errors[step_id] = f"{type(err).__name__}: {err}"
            with contextlib.suppress(Exception):  # the lake may be what fails
                record_event(p, ctx.campaign_id, experiment, timeline.CLEANUP_ERROR, key=f"ingest-{step_id}",
                             item=f"ingest {step_id}", error=type(err).__name__, cause=str(err))
    return {"steps": done, "errors": errors}


def ingest_step(p: Providers, ctx: Ctx, experiment: str, step_id: str) -> JSON:
    """One step's raw artifacts into lake rows; raises ``LoadFailed`` when the step is recorded as failed."""
    from benchctl.lake.ingest import StepContext, ingest_artifacts

    rec = p.state.load(experiment, step_id)
    if rec is not None and rec.skipped:  # a search probe the search did not need: no load, no rows
        return {"status": "skipped", "requests": 0}
    if rec is None or not rec.ended:
        raise RuntimeError(f"step {step_id} of {experiment}: its load is not recorded as ended; nothing to ingest")
    step = p.state.plan().step(experiment, step_id)
    if rec.concurrency is not None:  # a search probe: the load it ran
        step = replace(step, concurrency=rec.concurrency, variant=f"c{rec.concurrency}")
    spec = p.state.spec()
    exp = experiment_of(p, experiment)
    dataset = rec.dataset or {}
    meta = dataset.get("meta") or {}
    fields = {
        "variant": step.variant,
        "distribution": step.params.get("distribution"),
        "prefix_ratio": step.params.get("prefix_ratio"),
        "prefix_ratio_actual": meta.get("prefix_ratio_actual"),
        "prefix_token_share": meta.get("shared_token_share"),
        "achievable_hit_rate": meta.get("achievable_hit_rate"),
        "cache_state": rec.cache_state,
        "turns": step.params.get("turns"),
        "dataset_sha256": dataset.get("sha256"),
        "dataset_uri": dataset.get("uri"),
        "slo_ttft_ms": spec.slo.ttft_ms,
        "slo_itl_ms": spec.slo.itl_ms,
        "search_probe": step.probe,
        "search_json": json.dumps(rec.search, sort_keys=True) if rec.search else None,
    }
    lake_experiment, deployment = lake_names(p, experiment)
    fields["deployment"] = deployment or lake_experiment
    sctx = StepContext(
        campaign_id=ctx.campaign_id,
        experiment=lake_experiment,
        mode=exp.mode,
        workload=step.workload,
        step_id=step_id,
        step_index=step.index,
        repeat=step.repeat,
        concurrency=step.concurrency,
        isl=step.isl,
        osl=step.osl,
        random_seed=step.seed,
        artifact_uri=p.lake.raw_uri(ctx.campaign_id, experiment, step_id),
        workload_kind=step.kind,
        step_fields=fields,
    )
    with p.lake.raw_local(ctx.campaign_id, experiment, step_id) as local_dir:
        requested = _requested_lengths(local_dir, dataset)
        result = ingest_artifacts(local_dir, replace(sctx, requested_lengths=requested),
                                  sources=rec.metrics_sources or None)
    for table, rows in result.tables().items():
        p.lake.write(table, rows, part_name=step_id)
    status = result.steps[0]["status"] if result.steps else "failed"
    rec.ingest_status = status
    rec.slo = slo_counts(result.requests, spec.slo.ttft_ms, spec.slo.itl_ms)
    rec.client_bound = client_load.verdict(result.steps[0])[0] if result.steps else None
    # overload is a measurement, not an ending: a sweep step whose every request failed (the deployment answered
    # none at this load) is a certain miss of the SLO that ends this sweep's escalation in this repeat
    # (load.launch_step skips its higher loads); the experiment and the campaign go on
    rec.overloaded = (status != "succeeded" and step.kind == "concurrency_sweep" and bool(result.requests)
                      and all(r.get("error_type") is not None or r.get("error_code") is not None
                              for r in result.requests)) or None
    p.state.save_load(experiment, step_id, rec)
    record_event(p, ctx.campaign_id, experiment, timeline.INGESTED, key=step_id, step_id=step_id, status=status,
                 requests=len(result.requests), overloaded=bool(rec.overloaded))
    if rec.overloaded:
        return {"status": status, "requests": len(result.requests), "overloaded": True}
    if status != "succeeded":
        raise LoadFailed(
            f"step {step_id} of {experiment}: AIPerf exit {rec.exit_code}, "
            f"{result.steps[0].get('error_count') if result.steps else '?'} errors; recorded as failed"
        )
    return {"status": status, "requests": len(result.requests)}


def slo_counts(requests: list[JSON], ttft_ms: float | None, itl_ms: float | None) -> dict[str, int]:
    """The step's requests and those that succeeded within every SLO bound set (v_step_stats' ``n_requests``
    and ``n_good``, the same rule: no error, not cancelled, TTFT and mean ITL within their bounds)."""
    good = 0
    for r in requests:
        if r.get("error_type") is not None or r.get("error_code") is not None or r.get("was_cancelled"):
            continue
        ttft, itl = r.get("ttft_ms"), r.get("itl_ms")
        if ttft_ms is not None and (ttft is None or ttft > ttft_ms):
            continue
        if itl_ms is not None and (itl is None or itl > itl_ms):
            continue
        good += 1
    return {"n": len(requests), "good": good}


def _requested_lengths(raw_dir: Path, dataset: JSON) -> tuple[tuple[int, int], ...] | None:
    """(input, output) lengths the step's kept dataset asked for, line by line (read back from raw)."""
    from benchctl.planning.datasets import parse_dataset

    if not dataset.get("name"):
        return None
    path = raw_dir / "inputs" / dataset["name"]
    lines = parse_dataset(path.read_bytes(), dataset["uri"])
    return tuple((int(x["input_length"]), int(x["output_length"])) for x in lines)
