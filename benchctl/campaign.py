"""The campaign's operations, one function per state-machine task, written against ports.

Each function is what one Lambda handler calls: it reads the small state it needs from the run
store, acts through the ports (pools, serving, load, lake), records timeline events, and returns a
small JSON-able dict. No AWS, Kubernetes or subprocess imports here: those live in the adapters.
Every operation is idempotent: a redelivered event neither double-scales, double-deploys nor
duplicates rows.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from benchctl import aiperf_args
from benchctl.datasets import Dataset, prefix_dataset, sequence_dataset
from benchctl.errors import (
    Aborted,
    BudgetExceeded,
    DeadlineExceeded,
    InjectedFailure,
    LoadFailed,
    NotReadyYet,
    ScaleInterrupted,
    SmokeTestFailed,
    SpecError,
)
from benchctl.plan import CampaignPlan, StepPlan, plan_campaign
from benchctl.ports import DeploymentSpec, LoadPort, ServingPort, WorkerGroupSpec
from benchctl.runstore import RunStore
from benchctl.schema import json_text
from benchctl.spec import CampaignSpec, Experiment, parse_spec

JSON = dict[str, Any]
CAMPAIGN = "_campaign"  # experiment partition value of campaign-level timeline events


class PoolPort(Protocol):
    provider: str

    def scale(self, pool: str, nodes: int, owner: str, *, before_change: Any = None) -> JSON:
        """Scale ``pool`` to hold ``nodes``; call ``before_change(record)`` before changing anything."""
    def ready(self, record: JSON) -> bool: ...
    def restore(self, record: JSON) -> JSON: ...


class LakePort(Protocol):
    def write(self, table: str, rows: list[JSON], *, part_name: str) -> Any: ...
    def raw_dir(self, campaign_id: str, experiment: str, step_id: str) -> Path | str: ...
    def write_raw(self, campaign_id: str, experiment: str, step_id: str, name: str, data: bytes) -> str: ...
    def raw_local(self, campaign_id: str, experiment: str, step_id: str) -> AbstractContextManager[Path]: ...
    def read_table(self, table: str, campaign_id: str | None = None) -> list[JSON]: ...


@dataclass
class Providers:
    """The adapters one engine wires in (local processes, or EKS/S3 on AWS)."""

    engine: str
    store: RunStore
    pools: PoolPort
    serving: ServingPort
    load: LoadPort
    lake: LakePort
    tokenizer: str  # AIPerf's --tokenizer; "" = the model's own at model.revision (AWS: the prefetched volume)
    smoke: Any  # callable(state, n, max_tokens) -> dict
    report: Any = None  # callable(campaign_id) -> dict
    read_uri: Any = None  # callable(uri) -> bytes: a spec given by URI at start (AWS: s3://...)
    preflight: Any = None  # callable(spec) -> missing prerequisites (may raise NotReadyYet), before any scaling
    locks: Any = None  # benchctl.locks.Locks: one campaign per pool
    clock: Any = time.time
    versions: JSON = field(default_factory=dict)


def new_campaign_id(spec_name: str, now: datetime | None = None) -> str:
    """``<spec name>-<UTC yyyymmdd-hhmmss>``: readable, sortable, path- and execution-name-safe."""
    now = now or datetime.now(UTC)
    return re.sub(r"[^a-z0-9-]", "-", f"{spec_name}-{now:%Y%m%d-%H%M%S}")


def now_iso(clock: Any = time.time) -> str:
    return datetime.fromtimestamp(clock(), UTC).isoformat(timespec="milliseconds")


# ---------------------------------------------------------------- context and guards


@dataclass(frozen=True)
class Ctx:
    campaign_id: str
    run_uri: str
    lake_uri: str
    poll_seconds: int
    fail_at: str | None

    @staticmethod
    def parse(data: Any) -> Ctx:
        if not isinstance(data, dict):
            raise ValueError(f"event field 'ctx': expected an object, got {type(data).__name__}")
        missing = [k for k in ("campaign_id", "run_uri", "lake_uri") if not data.get(k)]
        if missing:
            raise ValueError(f"event field 'ctx': missing {missing}")
        return Ctx(
            campaign_id=str(data["campaign_id"]),
            run_uri=str(data["run_uri"]),
            lake_uri=str(data["lake_uri"]),
            poll_seconds=max(1, int(data.get("poll_seconds", 5))),
            fail_at=data.get("fail_at"),
        )

    def to_json(self) -> JSON:
        return {
            "campaign_id": self.campaign_id,
            "run_uri": self.run_uri,
            "lake_uri": self.lake_uri,
            "poll_seconds": self.poll_seconds,
            "fail_at": self.fail_at,
        }


def guard(p: Providers, state: str | None, fail_at: str | None, *, cleanup: bool = False) -> None:
    """Entry check of every task: injected failures (rehearsals) and a requested abort."""
    if fail_at and state == fail_at:
        raise InjectedFailure(f"failure injected at state {state} (--fail-at)")
    if not cleanup and p.store.exists("abort.json"):
        why = (p.store.read_json("abort.json") or {}).get("reason", "abort requested")
        raise Aborted(f"campaign aborted before {state}: {why}")


def _spec(p: Providers) -> CampaignSpec:
    data = p.store.read_json("spec.json")
    if data is None:
        raise FileNotFoundError(f"{p.store.uri}/spec.json is missing: the Plan state writes it")
    return parse_spec(data, f"{p.store.uri}/spec.json")


def _plan(p: Providers) -> CampaignPlan:
    data = p.store.read_json("plan.json")
    if data is None:
        raise FileNotFoundError(f"{p.store.uri}/plan.json is missing: the Plan state writes it")
    return CampaignPlan.from_json(data)


def timeline(p: Providers, campaign_id: str, experiment: str, event: str, *, key: str = "", pool: str = "",
             **detail: Any) -> None:
    """Record one timeline event (idempotent per experiment/event/key)."""
    row = {
        "campaign_id": campaign_id,
        "experiment": experiment,
        "event": event,
        "at": now_iso(p.clock),
        "pool": pool or None,
        "detail_json": json.dumps(detail, sort_keys=True, default=str) if detail else None,
    }
    part = f"{event}-{key}" if key else event
    p.lake.write("timeline", [row], part_name=part.replace("/", "_"))


def _campaign_row(p: Providers, ctx: Ctx, status: str, **extra: Any) -> None:
    campaign = p.store.read_json("campaign.json") or {}
    campaign.update({"status": status, **extra})
    if status != "running":
        campaign.setdefault("ended_at", now_iso(p.clock))
    p.store.write_json("campaign.json", campaign)
    row = {
        "campaign_id": ctx.campaign_id,
        "spec_hash": campaign.get("spec_hash"),
        "spec_name": campaign.get("spec_name"),
        "model": campaign.get("model"),
        "engine": p.engine,
        "simulated": p.engine == "local",
        "status": status,
        "started_at": campaign.get("started_at"),
        "ended_at": campaign.get("ended_at"),
        "failed_state": campaign.get("failed_state"),
        "error": campaign.get("error"),
        "cause": campaign.get("cause"),
        "versions_json": json.dumps(campaign.get("versions", {}), sort_keys=True),
        "pricing_json": json.dumps(campaign.get("pricing", {}), sort_keys=True),
        "lake_uri": ctx.lake_uri,
    }
    p.lake.write("campaigns", [row], part_name="campaign")


# ---------------------------------------------------------------- Plan


def start_ctx(inp: JSON, execution: str | None, env: dict[str, str]) -> JSON:
    """The campaign context of an execution started without one (console, schedule, ``benchctl start``).

    Input: ``{"spec_uri": "s3://...", "campaign_id"?: ..., "poll_seconds"?: ...}``. The campaign id is
    the given one, else the execution's name (unique per state machine); run state goes under
    ``BENCHCTL_RUNS_URI/<campaign_id>``, results to ``BENCHCTL_LAKE_URI``.
    """
    from benchctl.spec import safe_name

    if not inp.get("spec_uri"):
        raise ValueError("execution input: give 'spec_uri' (a campaign spec in the results bucket, e.g. "
                         "s3://<bucket>/specs/seed-plan.yaml) or start with `benchctl start SPEC`")
    missing = [k for k in ("BENCHCTL_RUNS_URI", "BENCHCTL_LAKE_URI") if not env.get(k)]
    if missing:
        raise ValueError(f"execution input has no 'ctx' and this engine has no {missing} to build one")
    cid = inp.get("campaign_id") or safe_name(str(execution or "").rsplit(":", 1)[-1])
    if not cid:
        raise ValueError("execution input: no 'campaign_id' and no execution name to take it from")
    poll = inp.get("poll_seconds", 30)
    if isinstance(poll, bool) or not isinstance(poll, int) or not 1 <= poll <= 3600:
        raise ValueError(f"execution input 'poll_seconds': {poll!r} must be an integer 1..3600")
    return Ctx(campaign_id=str(cid), run_uri=f"{env['BENCHCTL_RUNS_URI'].rstrip('/')}/{cid}",
               lake_uri=env["BENCHCTL_LAKE_URI"], poll_seconds=poll, fail_at=inp.get("fail_at")).to_json()


def _import_spec(p: Providers, uri: str) -> None:
    """Copy a spec given by URI into the run store (validated; the raw text is kept beside it)."""
    from benchctl.spec import parse_spec_text

    if p.read_uri is None:
        raise ValueError(f"spec_uri {uri}: this engine cannot read URIs; give the spec to `benchctl run`")
    raw = p.read_uri(uri)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(uri, [f"(file): not UTF-8 text ({err.reason} at byte {err.start})"]) from None
    spec = parse_spec_text(text, uri)
    p.store.write_json("spec_meta.json", {"source": uri, "source_text": text})
    p.store.write_json("spec.json", spec.model_dump(mode="json"))


def plan(p: Providers, event: JSON) -> JSON:
    """Validate the stored spec, expand the plan, refuse what exceeds the budget, write the manifest."""
    inp = event.get("input") or {}
    ctx = Ctx.parse(inp.get("ctx"))
    guard(p, event.get("state"), ctx.fail_at)
    if inp.get("spec_uri") and not p.store.exists("spec.json"):
        _import_spec(p, str(inp["spec_uri"]))
    spec = _spec(p)
    the_plan = plan_campaign(spec, p.engine)
    problems = list(the_plan.budget_problems)
    if p.engine == "aws":  # one Step Functions execution: its history quota and timeout (started from a console
        from benchctl.plan import aws_limits  # or schedule, nothing else checked them)

        problems += aws_limits(spec, the_plan, ctx.poll_seconds)[1]
    if problems:
        raise SpecError(f"{p.store.uri}/spec.json", problems)
    if p.preflight is not None and not p.store.exists("preflight.json"):
        # before anything is scaled: every missing prerequisite, by name (NotReadyYet while its image
        # checks still run: the state's Retry calls Plan again)
        missing = p.preflight(spec)
        if missing:
            from benchctl.errors import PreflightFailed

            raise PreflightFailed(missing)
        p.store.write_json("preflight.json", {"ok": True, "at": now_iso(p.clock)})
    if p.locks is not None:  # one campaign per pool; a second one fails here, before touching anything
        from benchctl.locks import lock_keys

        ttl = the_plan.est_s + spec.timeouts.capacity_s + spec.timeouts.ready_s + 3600 * (1 + len(spec.experiments))
        p.locks.acquire(lock_keys(spec), ctx.campaign_id, ttl)
    existing = p.store.read_json("plan.json")
    if existing is None or existing.get("spec_hash") != the_plan.spec_hash:
        p.store.write_json("plan.json", the_plan.to_json())
    if p.store.read_json("campaign.json") is None:
        p.store.write_json(
            "campaign.json",
            {
                "campaign_id": ctx.campaign_id,
                "execution": event.get("execution"),
                "spec_hash": the_plan.spec_hash,
                "spec_name": spec.name,
                "model": spec.model.name,
                "started_at": now_iso(p.clock),
                "versions": p.versions,
                "pricing": spec.pricing.model_dump(mode="json"),
                "status": "running",
            },
        )
    _campaign_row(p, ctx, "running")
    p.lake.write("experiments", [experiment_row(ctx.campaign_id, i, e) for i, e in enumerate(spec.experiments)],
                 part_name="experiment")
    timeline(p, ctx.campaign_id, CAMPAIGN, "planned", steps=sum(len(e.steps) for e in the_plan.experiments))
    return {
        "ctx": ctx.to_json(),
        "experiments": [
            {"index": e.index, "name": e.name, "steps": [s.step_id for s in e.steps]} for e in the_plan.experiments
        ],
    }


def experiment_row(campaign_id: str, index: int, e: Experiment) -> JSON:
    return {
        "campaign_id": campaign_id,
        "experiment": e.name,
        "experiment_index": index,
        "mode": e.mode,
        "router": e.router,
        "kv_offload": e.kv_offload is not None,
        "kv_offload_json": json_text(e.kv_offload.model_dump(mode="json")) if e.kv_offload else None,
        "gpus": e.gpus(),
        "workers_json": json_text([g.model_dump(mode="json") for g in e.workers]),
        "base_experiment": e.base,
        "changed_feature": e.feature,
        "mocker_json": json_text(e.mocker.model_dump(mode="json", exclude_none=True)),
    }


# ---------------------------------------------------------------- pools


def scale_pools(p: Providers, ctx: Ctx, experiment: str) -> JSON:
    """Scale each pool the experiment needs. The prior size is persisted BEFORE each change (the pool
    adapter calls back first), so a crash at any point leaves teardown what to restore."""
    key = f"pools/{experiment}.json"
    existing = p.store.read_json(key)
    if existing is not None:
        if existing.get("complete", True) and not any(r.get("pending") for r in existing["records"]):
            return {"pools": existing["records"], "reused": True}  # redelivered event: never scale twice
        raise ScaleInterrupted(
            f"ScalePools of {experiment} was interrupted mid-change ({key}); teardown restores the recorded "
            "sizes instead of scaling again on top of an unknown state")
    exp = _plan(p).experiment(experiment)
    records: list[JSON] = []

    def persist(pending: JSON | None = None, complete: bool = False) -> None:
        recs = records + ([{**pending, "pending": True}] if pending else [])
        p.store.write_json(key, {"records": recs, "requested_at": p.clock(), "complete": complete})

    adopted = _handed_over_to(p, experiment)

    def adopt(rec: JSON) -> JSON:
        """A warm pool from the previous experiment: its prior size is the one recorded before it."""
        if rec["pool"] in adopted:
            return {**rec, "previous": adopted[rec["pool"]]["previous"], "handed_from": adopted[rec["pool"]]["from"]}
        return rec

    persist()
    for pool, nodes in exp.nodes.items():
        try:
            rec = adopt(p.pools.scale(pool, nodes, owner=f"{ctx.campaign_id}/{experiment}",
                                      before_change=lambda r: persist(adopt(r))))
        except NotReadyYet:
            persist()  # nothing changed (e.g. the node group is still being restored): retry cleanly
            raise
        records.append(rec)
        persist()
        timeline(p, ctx.campaign_id, experiment, "scale_requested", key=pool, pool=pool,
                 nodes=nodes, previous=rec["previous"], simulated=rec.get("simulated", False))
    persist(complete=True)
    return {"pools": records, "reused": False}


def _handed_over_to(p: Providers, experiment: str) -> JSON:
    """Pools the experiment before this one (in plan order) kept warm for it: {pool: {previous, from}}."""
    plan = p.store.read_json("plan.json")
    names = [e["name"] for e in plan["experiments"]] if plan else []
    if experiment not in names or names.index(experiment) == 0:
        return {}
    before = names[names.index(experiment) - 1]
    handed = (p.store.read_json(f"pools/{before}.json") or {}).get("handed_over") or {}
    return {pool: {"previous": h["previous"], "from": before} for pool, h in handed.items()}


def check_capacity(p: Providers, ctx: Ctx, experiment: str) -> JSON:
    state = p.store.read_json(f"pools/{experiment}.json")
    if state is None:
        raise FileNotFoundError(f"pools/{experiment}.json missing: ScalePools did not run")
    spec = _spec(p)
    if all(p.pools.ready(r) for r in state["records"]):
        for r in state["records"]:
            timeline(p, ctx.campaign_id, experiment, "nodes_ready", key=r["pool"], pool=r["pool"],
                     nodes=r["requested"], simulated=r.get("simulated", False))
        return {"done": True}
    if p.clock() - state["requested_at"] > spec.timeouts.capacity_s:
        raise DeadlineExceeded(f"pools of {experiment} not ready within timeouts.capacity_s={spec.timeouts.capacity_s}")
    return {"done": False}


# ---------------------------------------------------------------- serving


def mocker_knobs(spec: CampaignSpec, exp: Experiment) -> JSON:
    """The local mocker's knobs; KV offload on sizes the mocker's host (CPU) block tier from its GB."""
    knobs = {k: v for k, v in exp.mocker.model_dump().items() if v is not None}
    if exp.kv_offload is not None and "num_host_blocks" not in knobs:
        block_bytes = spec.model.kv_bytes_per_token * exp.mocker.block_size
        knobs["num_host_blocks"] = max(1, int(exp.kv_offload.cpu_cache_gb * 1e9 // block_bytes))
    return knobs


def deployment_spec(spec: CampaignSpec, campaign_id: str, experiment: str) -> DeploymentSpec:
    exp = spec.experiment(experiment)
    return DeploymentSpec(
        deployment_id=f"{experiment}",
        model_name=spec.model.name,
        mode=exp.mode,
        router=exp.router,
        groups=tuple(WorkerGroupSpec(g.role, g.replicas, g.tensor_parallel, g.pool) for g in exp.workers),
        labels={"benchctl/campaign": campaign_id, "benchctl/experiment": experiment},
        mocker=mocker_knobs(spec, exp),
        kv_offload=exp.kv_offload.model_dump(mode="json") if exp.kv_offload else None,
    )


def deploy(p: Providers, ctx: Ctx, experiment: str) -> JSON:
    key = f"deployments/{experiment}.json"
    existing = p.store.read_json(key)
    if existing is not None:
        return {"deployment": existing["state"].get("deployment_id"), "reused": True}
    spec = _spec(p)
    dspec = deployment_spec(spec, ctx.campaign_id, experiment)
    # record intent first: a crash during deploy still leaves something for teardown to find
    p.store.write_json(key, {"state": {"deployment_id": dspec.deployment_id, "pending": True},
                             "deployed_at": p.clock()})
    state = p.serving.deploy(dspec)
    p.store.write_json(key, {"state": state, "deployed_at": p.clock()})
    timeline(p, ctx.campaign_id, experiment, "deploy_applied", mode=dspec.mode, router=dspec.router,
             groups=[g.__dict__ for g in dspec.groups])
    return {"deployment": state.get("deployment_id"), "reused": False}


def _deployment(p: Providers, experiment: str) -> JSON:
    d = p.store.read_json(f"deployments/{experiment}.json")
    if d is None or d["state"].get("pending"):
        raise FileNotFoundError(f"deployments/{experiment}.json missing: Deploy did not complete")
    return d


def check_ready(p: Providers, ctx: Ctx, experiment: str) -> JSON:
    d = _deployment(p, experiment)
    spec = _spec(p)
    if p.serving.probe_ready(d["state"]):
        startup_s = p.clock() - d["deployed_at"]
        running: JSON = {}
        if hasattr(p.serving, "versions"):  # on EKS: the image digests the pods actually run
            running = p.serving.versions(d["state"])
            campaign = p.store.read_json("campaign.json") or {}
            campaign.setdefault("versions", {}).setdefault("experiments", {})[experiment] = running
            p.store.write_json("campaign.json", campaign)
        timeline(p, ctx.campaign_id, experiment, "ready", startup_s=round(startup_s, 3), **running)
        return {"done": True}
    if p.clock() - d["deployed_at"] > spec.timeouts.ready_s:
        raise DeadlineExceeded(f"deployment of {experiment} not Ready within timeouts.ready_s={spec.timeouts.ready_s}")
    return {"done": False}


def _smoke_key(experiment: str) -> str:
    return f"smoke/{experiment}.json"


def smoke(p: Providers, ctx: Ctx, experiment: str) -> JSON:
    """Start the smoke requests (CheckSmoke waits for them). A smoke port with ``start``/``poll`` (EKS: a
    Job) is started and left running; a plain callable (the local engine: a few requests on loopback,
    seconds) runs now. A redelivered event starts nothing twice."""
    key = _smoke_key(experiment)
    if p.store.exists(key):
        return {"started": True, "reused": True}
    d = _deployment(p, experiment)
    spec = _spec(p)
    start = getattr(p.smoke, "start", None)
    if start is None:
        result = p.smoke(d["state"], spec.smoke.requests, spec.smoke.max_tokens)
        p.store.write_json(key, {"result": result, "started_at": p.clock()})
    else:
        p.store.write_json(key, {"state": start(d["state"], spec.smoke.requests, spec.smoke.max_tokens),
                                 "started_at": p.clock()})
    return {"started": True, "reused": False}


def check_smoke(p: Providers, ctx: Ctx, experiment: str) -> JSON:
    """Done when the smoke requests succeeded; their failure, or no end within ``timeouts.smoke_s``,
    fails the experiment with the smoke pods' last log lines."""
    key = _smoke_key(experiment)
    rec = p.store.read_json(key)
    if rec is None:
        raise FileNotFoundError(f"{key} missing: the SmokeTest state did not run")
    if "result" not in rec:
        code = p.smoke.poll(rec["state"])
        limit = _spec(p).timeouts.smoke_s
        if code is None and p.clock() - rec["started_at"] <= limit:
            return {"done": False}
        if code != 0:
            logs = p.smoke.failure_logs(rec["state"]) if hasattr(p.smoke, "failure_logs") else {}
            what = "failed" if code is not None else f"did not finish within timeouts.smoke_s={limit:g}"
            raise SmokeTestFailed(f"smoke test of {experiment} {what}; logs: "
                                  + ("; ".join(f"{k}: {str(v)[-400:]}" for k, v in logs.items()) or "none"))
        rec["result"] = {k: v for k, v in rec["state"].items() if k in ("requests", "max_tokens", "name")}
        rec["ended_at"] = p.clock()
        p.store.write_json(key, rec)
    timeline(p, ctx.campaign_id, experiment, "smoke_ok", **rec["result"])
    return {"done": True}


# ---------------------------------------------------------------- load


def _load_key(experiment: str, step_id: str) -> str:
    return f"loads/{experiment}/{step_id}.json"


def load_keys(p: Providers, experiment: str) -> list[str]:
    """Run-store keys of the experiment's loads (warm-up and every planned step), named from the plan
    rather than listed, so the cleanup path does not depend on listing the store."""
    plan = p.store.read_json("plan.json")
    if plan is None:
        return p.store.keys(f"loads/{experiment}")
    steps: list[JSON] = next((e["steps"] for e in plan["experiments"] if e["name"] == experiment), [])
    return [_load_key(experiment, s) for s in ["warmup", *(st["step_id"] for st in steps)]]


def _launch(p: Providers, ctx: Ctx, experiment: str, step_id: str, argv_for: Any, est_s: float,
            extra: JSON | None = None) -> JSON:
    key = _load_key(experiment, step_id)
    existing = p.store.read_json(key)
    if existing is not None:
        return {"job": existing["state"].get("job_id"), "reused": True}
    artifact_dir = p.lake.raw_dir(ctx.campaign_id, experiment, step_id)
    d = _deployment(p, experiment)
    argv = argv_for(d["state"], str(artifact_dir))
    job_id = f"{experiment}-{step_id}"
    state = p.load.launch(argv, str(artifact_dir), job_id)
    p.store.write_json(key, {"state": state, "argv": argv, "launched_at": p.clock(), "est_s": est_s,
                             "artifact_dir": str(artifact_dir), **(extra or {})})
    timeline(p, ctx.campaign_id, experiment, "load_start", key=step_id, step_id=step_id)
    return {"job": job_id, "reused": False}


def launch_warmup(p: Providers, ctx: Ctx, experiment: str) -> JSON:
    spec = _spec(p)
    if spec.warmup.request_count == 0:
        p.store.write_json(_load_key(experiment, "warmup"), {"state": {"skipped": True}, "launched_at": p.clock()})
        return {"job": None, "skipped": True}
    # synthetic prompts (never a step's dataset, so no step's prefix is cached by the warm-up) at the
    # campaign's highest concurrency and the first workload's shortest input length
    steps = _plan(p).experiment(experiment).steps
    conc = max(s.concurrency or 1 for s in steps)
    isl, osl = spec.workloads[0].max_lengths()
    first = steps[0]
    isl = first.isl or first.params.get("isl_range", [isl])[0]

    tokenizer, revision = _tokenizer(p, spec)

    def argv_for(dstate: JSON, artifact_dir: str) -> list[str]:
        return aiperf_args.warmup_args(
            model=spec.model.name, tokenizer=tokenizer, url=dstate["url"], artifact_dir=artifact_dir,
            request_count=spec.warmup.request_count, concurrency=conc, isl=isl, osl=min(osl, 64),
            seed=spec.seed, tokenizer_revision=revision,
        )

    return _launch(p, ctx, experiment, "warmup", argv_for, est_s=60.0 + spec.warmup.request_count)


def _urls(urls: Any) -> list[str]:
    if isinstance(urls, dict):
        return [str(u) for u in urls.values()]
    return [str(u) for u in urls or []]


def _sources(urls: Any) -> JSON:
    """{metrics URL: source name} (``server_metrics.source``) from a serving state's named endpoints."""
    return {str(u): str(name) for name, u in urls.items()} if isinstance(urls, dict) else {}


def _tokenizer(p: Providers, spec: CampaignSpec) -> tuple[str, str | None]:
    """AIPerf's (--tokenizer, --tokenizer-revision): the engine's tokenizer as is, or (AWS) the model's own
    at its pinned revision, read offline from the prefetched model volume."""
    return (p.tokenizer, None) if p.tokenizer else (spec.model.name, spec.model.revision)


# Hash ids of one step's prefix dataset live in [index * span, (index + 1) * span): disjoint per step,
# so no step's blocks are ever in the cache because of another step.
_HASH_ID_SPAN = 10_000_000


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
            prm["block_size"], step.seed, id_base=step.index * _HASH_ID_SPAN,
        )
    return None


def budget_guard(p: Providers, ctx: Ctx, experiment: str, step_id: str) -> None:
    """Before a step: accrued cost + the remaining estimate must stay within the budget, else abort."""
    from benchctl.costs import budget_problem

    spec, plan = _spec(p), _plan(p)
    if spec.budget.max_usd is None and spec.budget.max_hours is None:
        return
    done: set[tuple[str, str]] = set()
    for e in plan.experiments:
        for key in p.store.keys(f"loads/{e.name}"):
            rec = p.store.read_json(key) or {}
            if "exit_code" in rec and Path(key).stem != "warmup":
                done.add((e.name, Path(key).stem))
        dep = p.store.read_json(f"deployments/{e.name}.json") or {}
        if dep.get("torn_down"):
            done.update((e.name, s.step_id) for s in e.steps)  # a finished (or failed) experiment
    problem = budget_problem(spec, plan, p.lake.read_table("timeline", ctx.campaign_id), done, now_iso(p.clock))
    if problem:
        timeline(p, ctx.campaign_id, experiment, "budget_exceeded", key=step_id, step_id=step_id, reason=problem)
        raise BudgetExceeded(problem)


def launch_step(p: Providers, ctx: Ctx, experiment: str, step_id: str) -> JSON:
    step = _plan(p).step(experiment, step_id)
    spec = _spec(p)
    if not p.store.exists(_load_key(experiment, step_id)):
        budget_guard(p, ctx, experiment, step_id)
    extra: JSON = {}
    ds = step_dataset(step)
    if ds is not None and not p.store.exists(_load_key(experiment, step_id)):
        # the input is kept raw before anything runs: the hash in the lake names the exact bytes sent
        uri = p.lake.write_raw(ctx.campaign_id, experiment, step_id, ds.name, ds.data)
        extra["dataset"] = {"name": ds.name, "uri": uri, "sha256": ds.sha256, "meta": ds.meta,
                            "type": ds.custom_dataset_type}

    tokenizer, revision = _tokenizer(p, spec)

    def argv_for(dstate: JSON, artifact_dir: str) -> list[str]:
        # every worker's metrics endpoint, as the serving port knows it now (on EKS: the pods' addresses)
        sources = p.serving.metrics_urls(dstate) if hasattr(p.serving, "metrics_urls") else dstate.get("metrics_urls")
        extra["metrics_sources"] = _sources(sources)
        return aiperf_args.step_args(
            step, model=spec.model.name, tokenizer=tokenizer, url=dstate["url"], artifact_dir=artifact_dir,
            metrics_urls=_urls(sources),
            input_file=extra["dataset"]["uri"] if "dataset" in extra else None,
            slo=spec.slo.model_dump(), tokenizer_revision=revision,
        )

    return _launch(p, ctx, experiment, step_id, argv_for, est_s=step.est_s, extra=extra)


def check_load(p: Providers, ctx: Ctx, experiment: str, step_id: str) -> JSON:
    """Done when the load generator exited. Serving death or a deadline fails the step."""
    rec = p.store.read_json(_load_key(experiment, step_id))
    if rec is None:
        raise FileNotFoundError(f"{_load_key(experiment, step_id)} missing: the launch state did not run")
    if rec["state"].get("skipped"):
        return {"done": True}
    if "exit_code" in rec:
        return {"done": True, "exit_code": rec["exit_code"]}
    d = _deployment(p, experiment)
    p.serving.check_alive(d["state"])  # raises ServingFailed naming the dead process
    code = p.load.poll(rec["state"])
    if code is None:
        spec = _spec(p)
        limit = rec["est_s"] + spec.timeouts.load_grace_s
        if p.clock() - rec["launched_at"] > limit:
            raise DeadlineExceeded(f"load {step_id} of {experiment} still running after {limit:.0f} s")
        return {"done": False}
    rec["exit_code"] = code
    rec["ended_at"] = p.clock()
    if code != 0 and hasattr(p.load, "failure_logs"):  # on EKS: the pods' last log lines, kept with the record
        rec["logs"] = p.load.failure_logs(rec["state"])
    p.store.write_json(_load_key(experiment, step_id), rec)
    timeline(p, ctx.campaign_id, experiment, "load_end", key=step_id, step_id=step_id, exit_code=code)
    if step_id == "warmup" and code != 0:
        raise LoadFailed(f"warm-up AIPerf exited {code}; see {rec.get('artifact_dir')}")
    return {"done": True, "exit_code": code}


def stop_load(p: Providers, ctx: Ctx, experiment: str, step_id: str | None) -> list[str]:
    """Abort path: stop this experiment's running load(s) first. Idempotent."""
    stopped = []
    keys = [_load_key(experiment, step_id)] if step_id else load_keys(p, experiment)
    for key in keys:
        rec = p.store.read_json(key)
        if rec is None or rec["state"].get("skipped") or "exit_code" in rec:
            continue
        p.load.stop(rec["state"])
        rec["exit_code"] = p.load.poll(rec["state"])
        rec["stopped"] = True
        rec["ended_at"] = p.clock()
        p.store.write_json(key, rec)
        stopped.append(key)
        timeline(p, ctx.campaign_id, experiment, "load_stopped", key=Path(key).stem, step_id=Path(key).stem)
    return stopped


# ---------------------------------------------------------------- ingest


def ingest_step(p: Providers, ctx: Ctx, experiment: str, step_id: str) -> JSON:
    from benchctl.ingest import StepContext, ingest_artifacts

    step = _plan(p).step(experiment, step_id)
    spec = _spec(p)
    exp = spec.experiment(experiment)
    rec = p.store.read_json(_load_key(experiment, step_id)) or {}
    artifact_dir = p.lake.raw_dir(ctx.campaign_id, experiment, step_id)
    dataset = rec.get("dataset") or {}
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
        artifact_uri=str(artifact_dir),
        workload_kind=step.kind,
        step_fields=fields,
    )
    with p.lake.raw_local(ctx.campaign_id, experiment, step_id) as local_dir:
        requested = _requested_lengths(local_dir, dataset)
        result = ingest_artifacts(local_dir, replace(sctx, requested_lengths=requested),
                                  sources=rec.get("metrics_sources") or None)
    for table, rows in result.tables().items():
        p.lake.write(table, rows, part_name=step_id)
    status = result.steps[0]["status"] if result.steps else "failed"
    timeline(p, ctx.campaign_id, experiment, "ingested", key=step_id, step_id=step_id, status=status,
             requests=len(result.requests))
    if status != "succeeded":
        raise LoadFailed(
            f"step {step_id} of {experiment}: AIPerf exit {rec.get('exit_code')}, "
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


# ---------------------------------------------------------------- teardown, abort, report


def _error_of(error: Any) -> tuple[str, str]:
    """Normalise a Catch ``$.error`` ({Error, Cause}) into (error, readable cause)."""
    if not isinstance(error, dict):
        return ("Unknown", str(error))
    name = str(error.get("Error") or "Unknown")
    cause = error.get("Cause") or ""
    try:
        parsed = json.loads(cause)
        if isinstance(parsed, dict) and "errorMessage" in parsed:
            cause = parsed["errorMessage"]
    except (TypeError, ValueError):
        pass
    return name, str(cause) or name


class _Cleanup:
    """Runs every cleanup item even when one of them raises: a bug or outage in one item (say, the lake)
    must not leave GPUs scaled or processes running. The first error is re-raised at the end (the
    state's Retry/Catch sees the cause); the others are recorded in the timeline. ``NotReadyYet``
    (a node group busy with another update) is not an error: it asks the state to retry later."""

    def __init__(self, p: Providers, ctx: Ctx, experiment: str) -> None:
        self.p, self.ctx, self.experiment = p, ctx, experiment
        self.errors: list[tuple[str, Exception]] = []

    def attempt(self, item: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self.errors.append((item, exc))
            return None

    def failed(self, item_prefix: str) -> bool:
        return any(item.startswith(item_prefix) for item, _ in self.errors)

    def finish(self) -> None:
        if not self.errors:
            return
        for n, (item, exc) in enumerate(self.errors):
            if n == 0 or isinstance(exc, NotReadyYet):
                continue
            with contextlib.suppress(Exception):  # the lake may be what fails; the first error is raised below
                timeline(self.p, self.ctx.campaign_id, self.experiment, "cleanup_error", key=f"{n}",
                         item=item, error=type(exc).__name__, cause=str(exc))
        item, first = self.errors[0]
        if len(self.errors) > 1 and not isinstance(first, NotReadyYet):
            first.args = (f"{first} (cleanup item {item!r}; {len(self.errors) - 1} more cleanup error(s) "
                          "recorded in the timeline)",)
        raise first


def teardown_experiment(p: Providers, ctx: Ctx, experiment: str, *, handover: bool = False,
                        wait_gone: bool = False) -> JSON:
    """Stop load, remove the deployment, restore pools to their recorded sizes. Idempotent.

    Every item is attempted even when an earlier one fails (see ``_Cleanup``): the load is stopped
    first, then the deployment, then each pool, each on its own.

    ``handover`` (the normal end of an experiment only): pools the next experiment also uses
    (``ExperimentPlan.handover``) stay as they are, kept warm instead of drained and booted again; the
    next experiment adopts their recorded prior size, and whoever ends last restores it. Every failure
    path calls this without ``handover``, so it restores everything still unrestored.

    ``wait_gone`` (the state machine's teardown states): while the deleted deployment's objects and pods
    are still there (``serving.remaining``), return ``done: False`` instead of restoring the pools; the
    state machine waits ``poll_seconds`` and calls again, for at most ``timeouts.teardown_s`` after the
    deletion, then the pools are restored anyway and what was left is recorded. Nothing sleeps here."""
    done: JSON = {"experiment": experiment}
    c = _Cleanup(p, ctx, experiment)
    c.attempt("timeline", timeline, p, ctx.campaign_id, experiment, "teardown_start")
    done["loads_stopped"] = c.attempt("stop load", stop_load, p, ctx, experiment, None)
    left = c.attempt("deployment", _teardown_deployment, p, experiment, done, wait_gone)
    if left:  # the deployment is still going away: the pools wait (the state machine calls again)
        c.finish()
        return {**done, "done": False, "left": left}
    c.attempt("pools", _restore_pools, p, ctx, experiment, handover, done, c)
    if not c.errors:
        c.attempt("timeline", timeline, p, ctx.campaign_id, experiment, "teardown_done")
    c.finish()
    done["done"] = True
    return done


def _teardown_deployment(p: Providers, experiment: str, done: JSON, wait_gone: bool) -> list[str]:
    """Delete the deployment (once); what of it is still going away while the wait allows, else []."""
    dkey = f"deployments/{experiment}.json"
    d = p.store.read_json(dkey)
    if d is None or d.get("torn_down"):
        return []
    if "deleted_at" not in d:
        d["removed"] = p.serving.teardown(d["state"])
        d["deleted_at"] = p.clock()
        p.store.write_json(dkey, d)
    remaining = getattr(p.serving, "remaining", None)
    left = list(remaining(d["state"])) if wait_gone and remaining is not None else []
    if left:
        limit = _spec(p).timeouts.teardown_s if p.store.exists("spec.json") else 240.0
        if p.clock() - d["deleted_at"] < limit:
            return left
        d["left"] = left  # waited long enough: the pools go back anyway, and we say what stayed
    d["torn_down"] = True
    p.store.write_json(dkey, d)
    done["deployment"] = d["removed"]
    return []


def _restore_pools(p: Providers, ctx: Ctx, experiment: str, handover: bool, done: JSON, c: _Cleanup) -> None:
    pkey = f"pools/{experiment}.json"
    pools = p.store.read_json(pkey)
    if pools is None:
        return
    keep = _plan(p).experiment(experiment).handover if handover and p.store.exists("plan.json") else {}
    restored = list(pools.get("restored") or [])
    handed = dict(pools.get("handed_over") or {})
    done_pools = {x["pool"] for x in restored}
    for r in pools["records"]:
        if r["pool"] in done_pools:
            continue
        if r["pool"] in keep:  # the next experiment needs it: keep it warm, restore after the last user
            handed[r["pool"]] = {"previous": r["previous"], "nodes": r["requested"]}
            c.attempt("timeline", timeline, p, ctx.campaign_id, experiment, "pool_handed_over", key=r["pool"],
                      pool=r["pool"], nodes=r["requested"], simulated=r.get("simulated", False))
            continue
        now = c.attempt(f"pool {r['pool']}", p.pools.restore, r)
        if c.failed(f"pool {r['pool']}"):
            continue  # still recorded as unrestored: a retry, the abort path or the sweeper restores it
        restored.append({"pool": r["pool"], "now": now})
        handed.pop(r["pool"], None)
        c.attempt("timeline", timeline, p, ctx.campaign_id, experiment, "pool_restored", key=r["pool"],
                  pool=r["pool"], restored_to=now, simulated=r.get("simulated", False))
    pools["restored"] = restored
    pools["handed_over"] = handed
    p.store.write_json(pkey, pools)
    done["pools"] = restored
    if handed:
        done["handed_over"] = sorted(handed)


def unrestored_pools(p: Providers) -> dict[str, set[str]]:
    """{experiment: pools it scaled and nobody restored yet}. A pool handed over to the next experiment
    counts for the experiment that adopted it (which restores it), not for the one that handed it."""
    plan = p.store.read_json("plan.json") or {}
    names = [e["name"] for e in plan.get("experiments", [])]
    out: dict[str, set[str]] = {}
    for i, exp in enumerate(names):
        pools = p.store.read_json(f"pools/{exp}.json")
        if pools is None:
            continue
        restored = {r["pool"] for r in pools.get("restored") or []}
        nxt = (p.store.read_json(f"pools/{names[i + 1]}.json") or {}) if i + 1 < len(names) else {}
        adopted = {r["pool"] for r in nxt.get("records") or []}
        for r in pools.get("records") or []:
            if r["pool"] in restored or (r["pool"] in (pools.get("handed_over") or {}) and r["pool"] in adopted):
                continue
            out.setdefault(exp, set()).add(r["pool"])
    return out


def experiment_failed(p: Providers, ctx: Ctx, experiment: str, error: Any, *, wait_gone: bool = False) -> JSON:
    name, cause = _error_of(error)
    if not teardown_experiment(p, ctx, experiment, wait_gone=wait_gone)["done"]:
        return {"done": False, "error": name, "cause": cause}
    timeline(p, ctx.campaign_id, experiment, "failed", error=name, cause=cause)
    return {"done": True, "error": name, "cause": cause}


def release_locks(p: Providers, ctx: Ctx) -> list[str]:
    """Release this campaign's pool locks (only ours; nothing if none were taken). The lock of a pool
    this campaign scaled and could not restore is kept: another campaign would otherwise record the
    scaled size as its "previous" and never give those GPUs back. A retry, the sweeper or the lock's
    expiry releases it."""
    if p.locks is None or not p.store.exists("spec.json"):
        return []
    from benchctl.locks import lock_keys

    spec = _spec(p)
    stuck = set(lock_keys(spec, set().union(*unrestored_pools(p).values())))
    released: list[str] = p.locks.release([k for k in lock_keys(spec) if k not in stuck], ctx.campaign_id)
    return released


def mark_campaign(p: Providers, ctx: Ctx, status: str, **extra: Any) -> None:
    """Record the campaign's status (run store and lake), e.g. when the sweeper ended it."""
    _campaign_row(p, ctx, status, **extra)


def _touched(p: Providers, experiment: str) -> bool:
    """Whether the experiment created anything: scaled, deployed or loaded."""
    return (p.store.exists(f"pools/{experiment}.json") or p.store.exists(f"deployments/{experiment}.json")
            or any(p.store.exists(k) for k in load_keys(p, experiment)))


def abort_campaign(p: Providers, ctx: Ctx, error: Any, *, wait_gone: bool = False) -> JSON:
    """Tear down every experiment of this campaign (found in the run store) and record the failure.

    Every item is attempted even when another fails (``_Cleanup``): each experiment's teardown, the
    cost rows, the campaign record and the lock release. With ``wait_gone`` (the AbortCampaign state)
    it returns ``done: False`` while a deleted deployment is still going away (see
    ``teardown_experiment``); the failure is recorded once, when all is torn down."""
    name, cause = _error_of(error)
    c = _Cleanup(p, ctx, CAMPAIGN)
    plan = c.attempt("read plan", p.store.read_json, "plan.json")
    names = [e["name"] for e in plan["experiments"]] if plan else []
    waiting = []
    for exp in names:  # only experiments that created something
        if c.attempt(f"inspect {exp}", _touched, p, exp):
            torn = c.attempt(f"teardown {exp}", teardown_experiment, p, ctx, exp, wait_gone=wait_gone)
            if torn is not None and not torn["done"]:
                waiting.append(exp)
    if waiting:
        c.finish()
        return {"done": False, "error": name, "cause": cause, "waiting_for": waiting}
    failure = c.attempt("read failure", p.store.read_json, "failure.json") or {}
    status = "aborted" if name == "Aborted" or failure.get("error") == "Aborted" else "failed"
    if failure.get("error") and failure.get("error") != name:
        # the Catch payload is the LAST failure (e.g. a cleanup state that failed too); the lake
        # keeps the first one, which started it all, and names the later one in the timeline
        c.attempt("timeline", timeline, p, ctx.campaign_id, CAMPAIGN, "cleanup_failed", error=name, cause=cause)
        name, cause = str(failure["error"]), str(failure.get("message") or cause)
    c.attempt("costs", write_costs, p, ctx)  # what the failed campaign cost is part of its record
    c.attempt("campaign record", _campaign_row, p, ctx, status, failed_state=failure.get("state"), error=name,
              cause=cause)
    c.attempt("timeline", timeline, p, ctx.campaign_id, CAMPAIGN, status, error=name, cause=cause,
              state=failure.get("state"))
    c.attempt("locks", release_locks, p, ctx)
    c.finish()
    return {"done": True, "error": name, "cause": cause}


def plan_failed_without_ctx(event: JSON) -> JSON:
    name, cause = _error_of(event.get("error"))
    return {"error": name, "cause": cause}


def plan_failed(p: Providers, event: JSON) -> JSON:
    name, cause = _error_of(event.get("error"))
    inp = event.get("input") or {}
    try:
        ctx = Ctx.parse(inp.get("ctx"))
    except ValueError:
        return {"error": name, "cause": cause}
    c = _Cleanup(p, ctx, CAMPAIGN)
    if c.attempt("read campaign", p.store.read_json, "campaign.json") is None:
        c.attempt("campaign record", p.store.write_json, "campaign.json",
                  {"campaign_id": ctx.campaign_id, "started_at": now_iso(p.clock)})
    status = "aborted" if name == "Aborted" else "failed"
    c.attempt("campaign record", _campaign_row, p, ctx, status, failed_state="Plan", error=name, cause=cause)
    c.attempt("locks", release_locks, p, ctx)  # only ours: a LockHeld failure leaves the holder's locks alone
    c.finish()
    return {"error": name, "cause": cause}


def write_costs(p: Providers, ctx: Ctx) -> list[JSON]:
    """The campaign's cost rows (experiment x pool, from its timeline and steps) into ``costs``."""
    from benchctl.costs import cost_rows

    if not (p.store.exists("spec.json") and p.store.exists("plan.json")):
        return []
    rows: list[JSON] = cost_rows(ctx.campaign_id, _spec(p), _plan(p), p.lake.read_table("timeline", ctx.campaign_id),
                                 p.lake.read_table("steps", ctx.campaign_id), simulated=p.engine == "local")
    p.lake.write("costs", rows, part_name="costs")
    return rows


def report(p: Providers, ctx: Ctx) -> JSON:
    """The campaign's end: cost rows, its final status, then the views and the report (which show that
    status), then its locks. An abort requested while the last experiment was torn down is honoured
    here, before the campaign is called succeeded."""
    write_costs(p, ctx)
    guard(p, "Report", None)
    _campaign_row(p, ctx, "succeeded")
    timeline(p, ctx.campaign_id, CAMPAIGN, "succeeded")
    views = p.report(ctx.campaign_id) if p.report else {}
    release_locks(p, ctx)
    return {"views": sorted(views)}


def record_failure(p: Providers, state: str | None, exc: BaseException) -> None:
    """Remember the first failing state (the Catch payload names the error, not the state)."""
    if isinstance(exc, NotReadyYet) or p.store.exists("failure.json"):
        return
    p.store.write_json(
        "failure.json", {"state": state, "error": type(exc).__name__, "message": str(exc), "at": now_iso(p.clock)}
    )
