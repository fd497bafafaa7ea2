"""IngestStep: one step's kept raw AIPerf artifacts into lake rows (atomic, idempotent)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from benchctl import timeline
from benchctl.campaign.base import JSON, Task, record_event
from benchctl.context import Ctx
from benchctl.errors import LoadFailed
from benchctl.ports import Providers


def ingest_step(p: Providers, ctx: Ctx, task: Task) -> JSON:
    from benchctl.ingest import StepContext, ingest_artifacts

    experiment, step_id = task.exp, task.step_id
    step = p.state.plan().step(experiment, step_id)
    spec = p.state.spec()
    exp = spec.experiment(experiment)
    rec = p.state.load(experiment, step_id)
    dataset = (rec.dataset if rec is not None else None) or {}
    meta = dataset.get("meta") or {}
    fields = {
        "variant": step.variant,
        "distribution": step.params.get("distribution"),
        "prefix_ratio": step.params.get("prefix_ratio"),
        "prefix_ratio_actual": meta.get("prefix_ratio_actual"),
        "turns": step.params.get("turns"),
        "dataset_sha256": dataset.get("sha256"),
        "dataset_uri": dataset.get("uri"),
        "slo_ttft_ms": spec.slo.ttft_ms,
        "slo_itl_ms": spec.slo.itl_ms,
    }
    sctx = StepContext(
        campaign_id=ctx.campaign_id,
        experiment=experiment,
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
                                  sources=(rec.metrics_sources if rec is not None else None) or None)
    for table, rows in result.tables().items():
        p.lake.write(table, rows, part_name=step_id)
    status = result.steps[0]["status"] if result.steps else "failed"
    record_event(p, ctx.campaign_id, experiment, timeline.INGESTED, key=step_id, step_id=step_id, status=status,
                 requests=len(result.requests))
    if status != "succeeded":
        raise LoadFailed(
            f"step {step_id} of {experiment}: AIPerf exit {rec.exit_code if rec is not None else None}, "
            f"{result.steps[0].get('error_count') if result.steps else '?'} errors; recorded as failed"
        )
    return {"status": status, "requests": len(result.requests)}


def _requested_lengths(raw_dir: Path, dataset: JSON) -> tuple[tuple[int, int], ...] | None:
    """(input, output) lengths the step's kept dataset asked for, line by line (read back from raw)."""
    from benchctl.datasets import parse_dataset

    if not dataset.get("name"):
        return None
    path = raw_dir / "inputs" / dataset["name"]
    lines = parse_dataset(path.read_bytes(), dataset["uri"])
    return tuple((int(x["input_length"]), int(x["output_length"])) for x in lines)
