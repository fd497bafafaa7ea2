"""Deploy, CheckReady, SmokeTest and CheckSmoke: the experiment's deployment up, answering, and proven."""

from __future__ import annotations

from benchctl.analysis import quality
from benchctl.campaign.base import JSON, Task, lake_names, record_event, simulated
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import DeploymentRequest, DeploymentTarget, Providers, WorkerGroupSpec
from benchctl.campaign.records import DeploymentRecord, SmokeRecord
from benchctl.campaign.tuning import experiment_of
from benchctl.errors import DeadlineExceeded, QualityGateFailed, SmokeTestFailed
from benchctl.lake import timeline
from benchctl.spec.deployment import Experiment
from benchctl.spec.design import twin_speed
from benchctl.spec.model import CampaignSpec


def mocker_knobs(spec: CampaignSpec, exp: Experiment, speed: float = 1.0) -> JSON:
    """The local mocker's knobs; KV offload on sizes the mocker's host (CPU) block tier from its GB.

    Always the model's KV bytes per token (the mocker 1.6.1 computes its own from config.json's
    hidden_size / heads and ignores head_dim: half of Qwen3-30B-A3B's), and, disaggregated, a prefill ->
    decode bandwidth: the spec's, else the one of the pools' transfer path (``CampaignSpec.transfer``;
    without one the mocker models no transfer at all)."""
    knobs = {k: v for k, v in exp.mocker.model_dump().items() if v is not None and k != "twin"}  # twin: local engine
    knobs["kv_bytes_per_token"] = spec.model.kv_bytes_per_token
    if speed != 1.0:  # this deployment's own seeded speed (design.twin_spread_pct): SIMULATED, stated in the report
        knobs["speedup_ratio"] = float(knobs.get("speedup_ratio") or 1.0) * speed
    if exp.mode == "disaggregated":
        knobs["kv_transfer_bandwidth"] = spec.transfer(exp)["kv_transfer_bandwidth_gbps"]
    if exp.kv_offload is not None and "num_host_blocks" not in knobs:
        block_bytes = spec.model.kv_bytes_per_token * exp.mocker.block_size
        knobs["num_host_blocks"] = max(1, int(exp.kv_offload.cpu_cache_gb * 1e9 // block_bytes))
    return knobs


def deployment_request(spec: CampaignSpec, campaign_id: str, experiment: str,
                       exp: Experiment | None = None) -> DeploymentRequest:
    """Everything the serving port needs to deploy one experiment (``exp``: as it runs, ``tuning.experiment_of``;
    default the spec's), and its cluster target."""
    exp = exp or spec.experiment(experiment)
    seed = spec.design.order_seed if spec.design.order_seed is not None else spec.seed
    mocked = exp.engine == "mocker" or all(spec.pool(g.pool).provider == "local" for g in exp.workers)
    speed = twin_speed(spec.design, seed, experiment) if mocked else 1.0  # the mocker's workers only
    return DeploymentRequest(
        deployment_id=experiment,
        campaign_id=campaign_id,
        model_name=spec.model.name,
        mode=exp.mode,
        router=exp.router,
        groups=tuple(WorkerGroupSpec(g.role, g.replicas, g.tensor_parallel, g.pool) for g in exp.workers),
        labels={"benchctl/campaign": campaign_id, "benchctl/experiment": experiment},
        mocker=mocker_knobs(spec, exp, speed),
        kv_offload=exp.kv_offload.model_dump(mode="json") if exp.kv_offload else None,
        target=DeploymentTarget(experiment=exp, model=spec.model,
                                pools=tuple(spec.pool(name) for name in dict.fromkeys(g.pool for g in exp.workers)),
                                kubernetes=spec.kubernetes,
                                weights=spec.served_weights(exp) if exp.checkpoint is not None else None,
                                checkpoints=tuple(spec.checkpoints())),
    )


def record_intent(p: Providers, request: DeploymentRequest, *, prepared: bool = False) -> None:
    """Before the serving port creates anything of the experiment (``prepare`` at ScalePools, ``deploy``):
    a pending deployment record, so every failure path's teardown finds what it created even when Deploy
    never completed. It names where (the cluster target's namespace) and, ``prepared``, that only
    ScalePools' ``prepare`` ran (Deploy then still deploys)."""
    state: JSON = {"deployment_id": request.deployment_id, "pending": True}
    if request.target is not None:
        state["namespace"] = request.target.kubernetes.namespace
    if prepared:
        state["prepared"] = True
    p.state.save_deployment(request.deployment_id, DeploymentRecord(state=state, deployed_at=p.clock()))


def deploy(p: Providers, ctx: Ctx, task: Task) -> JSON:
    from benchctl.campaign.base import require_running

    require_running(p, task.state or "Deploy")  # a redriven or stopped execution deploys nothing
    experiment = task.exp
    existing = p.state.deployment(experiment)
    if existing is not None and not existing.state.get("prepared"):
        return {"deployment": existing.state.get("deployment_id"), "reused": True}
    request = deployment_request(p.state.spec(), ctx.campaign_id, experiment, experiment_of(p, experiment))
    # record intent first: a crash during deploy still leaves something for teardown to find
    record_intent(p, request)
    state = p.serving.deploy(request)
    p.state.save_deployment(experiment, DeploymentRecord(state=state, deployed_at=p.clock()))
    record_event(p, ctx.campaign_id, experiment, timeline.DEPLOY_APPLIED, mode=request.mode, router=request.router,
                 groups=[g.__dict__ for g in request.groups],
                 **({"speed": request.mocker["speedup_ratio"]} if "speedup_ratio" in request.mocker else {}))
    return {"deployment": state.get("deployment_id"), "reused": False}


def deployment(p: Providers, experiment: str) -> DeploymentRecord:
    """The experiment's deployment as Deploy recorded it (FileNotFoundError while it is not complete)."""
    d = p.state.deployment(experiment)
    if d is None or d.pending:
        raise FileNotFoundError(f"the deployment of {experiment} is not recorded: Deploy did not complete")
    return d


def check_ready(p: Providers, ctx: Ctx, task: Task) -> JSON:
    experiment = task.exp
    d = deployment(p, experiment)
    spec = p.state.spec()
    if p.serving.probe_ready(d.state):
        startup_s = p.clock() - d.deployed_at
        running = p.serving.versions(d.state)  # on EKS: the image digests the pods actually run
        if running:
            rec = p.state.campaign()
            if rec is not None:
                experiments = rec.versions.setdefault("experiments", {})
                experiments[experiment] = running
                p.state.save_campaign(rec)
        record_event(p, ctx.campaign_id, experiment, timeline.READY, startup_s=round(startup_s, 3), **running)
        record_event(p, ctx.campaign_id, experiment, timeline.NETWORK_OBSERVED, **network_of(p, d.state))
        return {"done": True}
    from benchctl.campaign.spend import budget_guard

    pools = p.state.pools(experiment)
    for r in pools.records if pools is not None else []:  # EKS Auto Mode: nodes launch for the pending workers
        p.pools.launches(r)
    budget_guard(p, ctx, experiment, None, waiting="readiness")
    if p.clock() - d.deployed_at > spec.timeouts.ready_s:
        raise DeadlineExceeded(f"deployment of {experiment} not Ready within timeouts.ready_s={spec.timeouts.ready_s}")
    return {"done": False}


def network_of(p: Providers, state: JSON) -> JSON:
    """The serving port's observation of the deployment's network; what could not be read is said so (it
    never fails the experiment: it is a record, not a check)."""
    try:
        return p.serving.network(state)
    except Exception as e:  # a record, not a check: the campaign goes on and the report says why it is missing
        return {"error": f"network provenance not observed: {type(e).__name__}: {e}"}


def smoke(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """Start the smoke requests (CheckSmoke waits for them). A redelivered event starts nothing twice."""
    experiment = task.exp
    if p.state.has_smoke(experiment):
        return {"started": True, "reused": True}
    d = deployment(p, experiment)
    spec = p.state.spec()
    started = p.smoke.start(d.state, spec.smoke.requests, spec.smoke.max_tokens, quality=quality.spec_requests(spec))
    p.state.save_smoke(experiment, SmokeRecord(state=started, started_at=p.clock()))
    return {"started": True, "reused": False}


def score_quality(p: Providers, ctx: Ctx, experiment: str, answers: JSON | None) -> JSON:
    """Score the quality answers, write them to the lake (``quality``: one row per question) and the
    timeline; the summary (no per-question items). The threshold applies to real models only: on the local
    engine and in a mocker experiment (the mocker answers random tokens) the gate runs and is labelled
    SIMULATED, not applied."""
    spec = p.state.spec()
    if answers is None:
        raise SmokeTestFailed(f"the quality questions of {experiment} did not run (the smoke port returned no "
                              "answers)")
    qs = quality.questions(spec.quality.questions, spec.quality.seed, spec.quality.kind)
    if qs and all((answers.get(q["id"]) or {}).get("error") for q in qs):
        first = (answers.get(qs[0]["id"]) or {}).get("error")
        raise SmokeTestFailed(f"every quality question to {experiment} failed; the first: {first}")
    result = quality.score(qs, answers, simulated=simulated(p, experiment), min_score=spec.quality.min_score)
    sampling = spec.sampling_fields()
    settings = {"temperature": sampling["temperature"], "top_p": sampling["top_p"],
                "sampling_seed": sampling["seed"], "thinking": spec.thinking, "kind": spec.quality.kind,
                "max_tokens": spec.quality.max_tokens or quality.default_max_tokens(spec.thinking, spec.quality.kind)}
    lake_experiment, deployment = lake_names(p, experiment)
    rows = [{"campaign_id": ctx.campaign_id, "experiment": lake_experiment, "question_id": item["id"],
             "question_index": i, "prompt": q["prompt"], "expected": item["expected"],
             "extracted": item["extracted"], "correct": item["ok"], "finish_reason": item["finish_reason"],
             "error": item["error"], "content_head": item["content_head"], "min_score": result["min_score"],
             "gate": result["gate"], "simulated": result["simulated"], "score_low": result["score_low"],
             "score_high": result["score_high"], **settings}
            for i, (q, item) in enumerate(zip(qs, result["items"], strict=True))]
    if deployment in (None, lake_experiment) or deployment == _first_deployment(p, lake_experiment):
        # the gate holds every deployment; the lake keeps the first one's answers (the same questions again are not
        # more evidence of the configuration's quality)
        p.lake.write("quality", rows, part_name="quality")
    summary = {k: v for k, v in result.items() if k != "items"}
    record_event(p, ctx.campaign_id, experiment, timeline.QUALITY_SCORED, **summary, **settings)
    return summary


def _first_deployment(p: Providers, experiment: str) -> str | None:
    got = p.state.plan().deployments_of(experiment) if p.state.has_plan() else []
    return got[0].name if got else None


def check_smoke(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """Done when the smoke requests succeeded; their failure, or no end within ``timeouts.smoke_s``,
    fails the experiment with the smoke pods' last log lines."""
    experiment = task.exp
    rec = p.state.smoke(experiment)
    if rec is None:
        raise FileNotFoundError(f"the smoke test of {experiment} is not recorded: the SmokeTest state did not run")
    if rec.result is None:
        code = p.smoke.poll(rec.state)
        limit = p.state.spec().timeouts.smoke_s
        if code is None and p.clock() - rec.started_at <= limit:
            return {"done": False}
        if code != 0:
            logs = p.smoke.failure_logs(rec.state)
            what = "failed" if code is not None else f"did not finish within timeouts.smoke_s={limit:g}"
            raise SmokeTestFailed(f"smoke test of {experiment} {what}; logs: "
                                  + ("; ".join(f"{k}: {str(v)[-400:]}" for k, v in logs.items()) or "none"))
        result = dict(p.smoke.result(rec.state))
        result["quality"] = score_quality(p, ctx, experiment, result.pop("quality_answers", None))
        rec.result = result
        rec.ended_at = p.clock()
        p.state.save_smoke(experiment, rec)
    q = rec.result.get("quality") or {}
    if q.get("gate") == "failed":  # also on a redelivered event: the experiment never goes on to load
        raise QualityGateFailed(
            f"quality gate of {experiment}: {q.get('correct')} of {q.get('questions')} questions right "
            f"(score {q.get('score'):.2f}) is below quality.min_score {q.get('min_score')}; see the lake's quality "
            "table for each answer")
    record_event(p, ctx.campaign_id, experiment, timeline.SMOKE_OK, **rec.result)
    return {"done": True}
