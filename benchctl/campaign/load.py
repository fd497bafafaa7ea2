"""LaunchWarmUp/CheckWarmUp, LaunchLoad/CheckLoad and StopLoadAfterFailure: the load generator's runs, each
with the dataset it sends kept first, and the budget guard before every step."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace

from benchctl.campaign.base import JSON, Task, error_of, record_event
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import LoadRequest, Providers
from benchctl.campaign.probes import probe_load
from benchctl.campaign.records import LoadRecord
from benchctl.campaign.runstate import WARMUP
from benchctl.campaign.serving import deployment
from benchctl.campaign.spend import await_timeout_s, budget_guard
from benchctl.errors import BudgetExceeded, DeadlineExceeded, LoadFailed
from benchctl.lake import timeline
from benchctl.planning import aiperf_args
from benchctl.planning.cache_state import HASH_ID_SPAN, cache_state
from benchctl.planning.datasets import Dataset, prefix_dataset, sequence_dataset
from benchctl.planning.plan import StepPlan
from benchctl.spec.model import CampaignSpec

# AwaitLoadEnd's heartbeat bound (its ``HeartbeatSecondsPath``) while the load runs: the engine answers or
# heartbeats well within it (the AWS runner Job every 20 s). A load that does not run yet (its runner pod
# waits for a node: ``LoadPort.pending``) adds ``timeouts.capacity_s``, the longest wait for capacity.
AWAIT_HEARTBEAT_S = 300


def step_dataset(step: StepPlan) -> Dataset | None:
    """The dataset a step sends (generated from its seed: same plan, same bytes), or None."""
    prm = step.params
    if step.kind == "sequence_distribution":
        return sequence_dataset(
            prm["dataset"], prm["distribution"], step.request_count or 0, tuple(prm["isl_range"]),
            tuple(prm["osl_range"]), step.seed, zipf_exponent=prm["zipf_exponent"],
            lognormal_sigma=prm["lognormal_sigma"],
        )
    if step.kind == "prefix_cache":
        assert step.isl is not None and step.osl is not None
        return prefix_dataset(
            prm["dataset"], prm["prefix_ratio"], step.request_count or 0, step.isl, step.osl,
            prm["block_size"], step.seed, id_base=step.index * HASH_ID_SPAN,
            duplication=prm.get("duplication", "tokens"), prefix_tokens=prm.get("prefix_tokens"),
        )
    return None


def _tokenizer(p: Providers, spec: CampaignSpec) -> tuple[str, str | None]:
    """AIPerf's (--tokenizer, --tokenizer-revision): the engine's tokenizer as is, or (AWS) the model's own
    at its pinned revision, read offline from the prefetched model volume."""
    return (p.tokenizer, None) if p.tokenizer else (spec.model.name, spec.model.revision)


def _launch(p: Providers, ctx: Ctx, experiment: str, step_id: str, argv_for: Callable[[JSON, str], list[str]],
            est_s: float, rec: LoadRecord | None = None, group: tuple[str, tuple[str, ...], float] | None = None) -> JSON:
    existing = p.state.load(experiment, step_id)
    if existing is not None:
        return {"job": existing.state.get("job_id"), "reused": True}
    artifact_uri = p.lake.raw_uri(ctx.campaign_id, experiment, step_id)
    d = deployment(p, experiment)
    argv = argv_for(d.state, artifact_uri)
    rec = rec or LoadRecord(state={}, launched_at=0.0)
    name, steps, group_est = group or (step_id, (step_id,), est_s)
    request = LoadRequest(campaign_id=ctx.campaign_id, experiment=experiment, step_id=step_id, argv=tuple(argv),
                          artifact_uri=artifact_uri, input_uri=(rec.dataset or {}).get("uri"), est_s=est_s,
                          group=name, group_steps=steps, group_est_s=group_est)
    rec.state = p.load.launch(request)
    rec.argv, rec.launched_at, rec.est_s, rec.artifact_dir = argv, p.clock(), est_s, artifact_uri
    rec.running_at = None if p.load.pending(rec.state) else rec.launched_at
    p.state.save_load(experiment, step_id, rec)
    record_event(p, ctx.campaign_id, experiment, timeline.LOAD_START, key=step_id, step_id=step_id)
    return {"job": request.job_id, "reused": False}


def launch_warmup(p: Providers, ctx: Ctx, task: Task) -> JSON:
    experiment = task.exp
    spec = p.state.spec()
    if spec.warmup.request_count == 0:
        p.state.save_load(experiment, WARMUP, LoadRecord(state={"skipped": True}, launched_at=p.clock()))
        return {"job": None, "skipped": True}
    # synthetic prompts (never a step's dataset, so no step's prefix is cached by the warm-up) at the
    # campaign's highest concurrency and the first workload's shortest input length
    steps = p.state.plan().experiment(experiment).steps
    conc = max(s.concurrency or 1 for s in steps)
    isl, osl = spec.workloads[0].max_lengths()
    first = steps[0]
    isl = first.isl or first.params.get("isl_range", [isl])[0]
    tokenizer, revision = _tokenizer(p, spec)

    def argv_for(dstate: JSON, artifact_dir: str) -> list[str]:
        return aiperf_args.warmup_args(
            model=spec.model.name, tokenizer=tokenizer, url=dstate["url"], artifact_dir=artifact_dir,
            request_count=spec.warmup.request_count, concurrency=conc, isl=isl, osl=min(osl, 64),
            seed=spec.seed, tokenizer_revision=revision, sampling=spec.sampling_fields(), thinking=spec.thinking,
        )

    return _launch(p, ctx, experiment, WARMUP, argv_for, est_s=60.0 + spec.warmup.request_count)


def overloaded_below(p: Providers, experiment: str, step: StepPlan) -> tuple[str, int] | None:
    """(step id, load) of an earlier step of ``step``'s sweep and repeat that was overloaded (every request failed)
    at a load no higher than ``step``'s, or None (not a sweep step, or none was)."""
    if step.kind != "concurrency_sweep" or step.concurrency is None:
        return None
    for s in p.state.plan().experiment(experiment).steps:
        if s.index >= step.index or s.workload != step.workload or s.repeat != step.repeat:
            continue
        rec = p.state.load(experiment, s.step_id)
        load = (rec.concurrency or s.concurrency) if rec is not None else None
        if rec is not None and rec.overloaded and load is not None and load <= step.concurrency:
            return s.step_id, int(load)
    return None


def _urls(urls: dict[str, str]) -> list[str]:
    return [str(u) for u in urls.values()]


def launch_step(p: Providers, ctx: Ctx, task: Task) -> JSON:
    experiment, step_id = task.exp, task.step_id
    step = p.state.plan().step(experiment, step_id)
    spec = p.state.spec()
    launched = p.state.has_load(experiment, step_id)
    rec = LoadRecord(state={}, launched_at=0.0)
    if step.probe is not None:  # a search probe: its load is chosen now, from what the sweep measured
        kept = p.state.load(experiment, step_id)
        decision: JSON = (kept.search or {}) if kept is not None else probe_load(p, ctx, experiment, step).to_json()
        load = kept.concurrency if kept is not None else decision.get("load")
        if load is None:
            if kept is None:
                p.state.save_load(experiment, step_id, LoadRecord(state={"skipped": True}, launched_at=p.clock(),
                                                                  search=decision))
            return {"job": None, "skipped": True, "why": decision.get("why"),
                    "callback": p.callbacks is not None, "heartbeat_s": AWAIT_HEARTBEAT_S,
                    "timeout_s": AWAIT_HEARTBEAT_S}
        step = replace(step, concurrency=int(load), variant=f"c{load}")
        rec.concurrency, rec.search = int(load), decision
    past = None if launched else overloaded_below(p, experiment, step)
    if past is not None:  # overload is a measurement: no higher load of this sweep's repeat runs after it
        why = (f"the sweep's step {past[0]} at c={past[1]} answered no request (overloaded: a measured miss), so "
               f"c={step.concurrency} is past the SLO too and is not run")
        p.state.save_load(experiment, step_id, LoadRecord(state={"skipped": True}, launched_at=p.clock(),
                                                          search={**(rec.search or {}), "why": why},
                                                          concurrency=rec.concurrency))
        return {"job": None, "skipped": True, "why": why, "callback": p.callbacks is not None,
                "heartbeat_s": AWAIT_HEARTBEAT_S, "timeout_s": AWAIT_HEARTBEAT_S}
    if not launched:
        budget_guard(p, ctx, experiment, step_id)
    # the cache state the step starts from (benchctl.planning.cache_state): its prompts are its own
    rec.cache_state = cache_state(step.kind, step.index, step.seed)
    ds = step_dataset(step)
    if ds is not None and not launched:
        # the input is kept raw before anything runs: the hash in the lake names the exact bytes sent
        uri = p.lake.write_raw(ctx.campaign_id, experiment, step_id, ds.name, ds.data)
        rec.dataset = {"name": ds.name, "uri": uri, "sha256": ds.sha256, "meta": ds.meta,
                       "type": ds.custom_dataset_type}
    tokenizer, revision = _tokenizer(p, spec)

    def argv_for(dstate: JSON, artifact_dir: str) -> list[str]:
        # every worker's metrics endpoint, as the serving port knows it now (on EKS: the pods' addresses)
        sources = p.serving.metrics_urls(dstate)
        rec.metrics_sources = {str(u): str(name) for name, u in sources.items()}
        return aiperf_args.step_args(
            step, model=spec.model.name, tokenizer=tokenizer, url=dstate["url"], artifact_dir=artifact_dir,
            metrics_urls=_urls(sources), input_file=rec.dataset["uri"] if rec.dataset else None,
            slo=spec.slo.model_dump(), tokenizer_revision=revision, sampling=spec.sampling_fields(),
            thinking=spec.thinking,
        )

    # one load runner per workload of the experiment: its steps, in the plan's order; a probe (which may not run
    # at all) its own
    siblings = [s for s in p.state.plan().experiment(experiment).steps
                if s.workload == step.workload and s.probe is None]
    group = ((step.workload, tuple(s.step_id for s in siblings), sum(s.est_s for s in siblings))
             if step.probe is None else (step_id, (step_id,), step.est_s))
    out = _launch(p, ctx, experiment, step_id, argv_for, est_s=step.est_s, rec=rec, group=group)
    # the ASL waits for the load's end as an event (AwaitLoadEnd) when somebody answers task tokens; until the
    # load runs nobody heartbeats, so the bound then also covers its wait for capacity
    heartbeat = AWAIT_HEARTBEAT_S
    if p.callbacks is not None and (load := p.state.load(experiment, step_id)) is not None \
            and load.running_at is None and p.load.pending(load.state):
        heartbeat += int(spec.timeouts.capacity_s)
    return {**out, "callback": p.callbacks is not None, "heartbeat_s": heartbeat,
            "timeout_s": await_timeout_s(p, ctx, experiment, step_id, step.est_s)}


_SERVING_CHECK_S = 1.0  # how often the wake check looks at the serving side (each look reads its processes)


def load_wake(p: Providers, ctx: Ctx, experiment: str, step_id: str) -> Callable[[], str | None]:
    """The wake check of a step's load for the callbacks port: a reason for CheckLoad to look now (an abort
    was requested, the serving side died, the load ended, the deadline passed, the budget is exceeded), or None; a dead serving side
    raises ``ServingFailed`` (the relay wakes on that too). It never decides: CheckLoad does, as on every poll."""
    last_serving = [0.0]

    def wake() -> str | None:
        if p.state.abort() is not None:
            return "abort requested"
        rec = p.state.load(experiment, step_id)
        if rec is None or rec.ended or rec.skipped:
            return "load recorded as ended"
        look = p.clock() - last_serving[0] >= _SERVING_CHECK_S
        if look:
            last_serving[0] = p.clock()
            p.serving.check_alive(deployment(p, experiment).state)  # raises: a reason too
        if p.load.poll(rec.state) is not None:
            return "load ended"
        if p.clock() - (rec.running_at or rec.launched_at) > (rec.est_s or 0.0) + p.state.spec().timeouts.load_grace_s:
            return "deadline passed"
        if look:  # the budget too: CheckLoad then refuses (BudgetExceeded) and the experiment is torn down
            budget_guard(p, ctx, experiment, step_id, waiting=f"the load {step_id}")  # raises: a reason too
        return None

    return wake


def wake_reason(wake: Callable[[], str | None]) -> str | None:
    """What a wake check names: its reason, the exception it raised (named), or None (nothing to look at)."""
    try:
        return wake()
    except Exception as exc:  # the state after the callback raises it again, with its own name
        return f"{type(exc).__name__}: {exc}"


def await_load(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """AwaitLoadEnd: hand the task token and the step's wake check to the callbacks port; the state machine
    resumes (to CheckLoad) as soon as it answers. Idempotent: a token already watched is not watched twice."""
    experiment, step_id = task.exp, task.step_id
    if p.callbacks is None:
        raise RuntimeError(f"{task.state}: this engine answers no task tokens (LaunchLoad said callback: true?)")
    if not task.token:
        raise ValueError(f"task {task.state}: the event has no 'task_token' ($$.Task.Token)")
    if p.state.load(experiment, step_id) is None:
        raise FileNotFoundError(f"the load {step_id} of {experiment} is not recorded: the launch state did not run")
    watching = p.callbacks.watch(task.token, task.state or "AwaitLoadEnd", (experiment, step_id),
                                 load_wake(p, ctx, experiment, step_id))
    return {"watching": True, "again": not watching}


def _check(p: Providers, ctx: Ctx, experiment: str, step_id: str) -> JSON:
    """Done when the load generator exited. Serving death or a deadline fails the step."""
    rec = p.state.load(experiment, step_id)
    if rec is None:
        raise FileNotFoundError(f"the load {step_id} of {experiment} is not recorded: the launch state did not run")
    if rec.skipped:
        return {"done": True}
    if rec.ended:
        return {"done": True, "exit_code": rec.exit_code}
    d = deployment(p, experiment)
    p.serving.check_alive(d.state)  # raises ServingFailed naming the dead process
    code = p.load.poll(rec.state)
    if code is None:
        budget_guard(p, ctx, experiment, step_id if step_id != WARMUP else None, waiting=f"the load {step_id}")
        timeouts = p.state.spec().timeouts
        if rec.running_at is None:  # waiting for a node (or its images): bounded as every wait for capacity is
            waiting = p.load.pending(rec.state)
            if waiting:
                if p.clock() - rec.launched_at > timeouts.capacity_s:
                    raise DeadlineExceeded(f"load {step_id} of {experiment} not running after "
                                           f"{timeouts.capacity_s:.0f} s (timeouts.capacity_s): {waiting}")
                return {"done": False}
            rec.running_at = p.clock()  # its deadline counts from now
            p.state.save_load(experiment, step_id, rec)
        limit = (rec.est_s or 0.0) + timeouts.load_grace_s
        if p.clock() - rec.running_at > limit:
            raise DeadlineExceeded(f"load {step_id} of {experiment} still running after {limit:.0f} s")
        return {"done": False}
    rec.ended, rec.exit_code, rec.ended_at = True, code, p.clock()
    if code != 0:
        rec.logs = p.load.failure_logs(rec.state) or None  # on EKS: the pods' last log lines
    p.state.save_load(experiment, step_id, rec)
    record_event(p, ctx.campaign_id, experiment, timeline.LOAD_END, key=step_id, step_id=step_id, exit_code=code)
    if step_id == WARMUP and code != 0:
        raise LoadFailed(f"warm-up AIPerf exited {code}; see {rec.artifact_dir}")
    return {"done": True, "exit_code": code}


def check_load(p: Providers, ctx: Ctx, task: Task) -> JSON:
    return _check(p, ctx, task.exp, task.step_id)


def check_warmup(p: Providers, ctx: Ctx, task: Task) -> JSON:
    return _check(p, ctx, task.exp, WARMUP)


def stop_loads(p: Providers, ctx: Ctx, experiment: str, step_id: str | None = None) -> list[str]:
    """Abort path: stop this experiment's running load(s) first (one step, or all). Idempotent."""
    stopped = []
    steps = [step_id] if step_id else p.state.load_steps(experiment)
    for sid in steps:
        rec = p.state.load(experiment, sid)
        if rec is None or not rec.running:
            continue
        if rec.logs is None:  # before the stop takes the pods (and their logs) away; never instead of the stop
            with contextlib.suppress(Exception):
                rec.logs = p.load.failure_logs(rec.state) or None
        p.load.stop(rec.state)
        rec.ended, rec.exit_code, rec.stopped, rec.ended_at = True, p.load.poll(rec.state), True, p.clock()
        p.state.save_load(experiment, sid, rec)
        stopped.append(sid)
        record_event(p, ctx.campaign_id, experiment, timeline.LOAD_STOPPED, key=sid, step_id=sid)
    return stopped


def stop_load_after_failure(p: Providers, ctx: Ctx, task: Task) -> JSON:
    """StopLoadAfterFailure: the failed step's load stopped; the failure passed on."""
    stop_loads(p, ctx, task.exp, task.step_id)
    name, cause = error_of(task.error)
    if name in ("States.Timeout", "States.HeartbeatTimeout"):  # AwaitLoadEnd's bound: was it the budget's?
        try:
            budget_guard(p, ctx, task.exp, task.step_id, waiting=f"the load {task.step_id}")
        except BudgetExceeded as err:
            name, cause = "BudgetExceeded", str(err)
    return {"error": name, "cause": cause}
