"""What every campaign operation shares: the task it is given, the guard before it, the timeline it writes,
the campaign record, and cleanup that a failing item cannot take down."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from benchctl import logtext
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.campaign.provenance import provenance
from benchctl.campaign.records import CampaignRecord, FailureRecord
from benchctl.errors import Aborted, CampaignIdInUse, CampaignNotRunning, InjectedFailure, NotReadyYet
from benchctl.lake import timeline
from benchctl.lake.schema import json_text
from benchctl.spec.deployment import Experiment
from benchctl.spec.model import CampaignSpec

JSON = dict[str, Any]


@dataclass(frozen=True)
class Task:
    """One task of the state machine, as its event names it (``Parameters.Payload`` in the ASL): the
    experiment and step it is about, the Catch payload of a failure path (``error``), and, for the entry
    states, the execution's input and id."""

    experiment: str | None = None
    step: str | None = None
    state: str | None = None
    error: JSON | None = None
    execution: str | None = None
    input: JSON | None = None
    action: str = ""
    token: str | None = None  # a callback state's task token ($$.Task.Token)
    ending: str | None = None  # ReportFailure: how the campaign ended (failed | untorn)

    @staticmethod
    def parse(event: JSON) -> Task:
        if not isinstance(event, dict):
            raise ValueError(f"task event: expected an object, got {type(event).__name__}")
        error = event.get("error")
        return Task(experiment=event.get("experiment"), step=event.get("step"), state=event.get("state"),
                    error=error if isinstance(error, dict) else ({"Error": "Unknown", "Cause": str(error)}
                                                                 if error is not None else None),
                    execution=event.get("execution"), input=event.get("input"), action=str(event.get("action") or ""),
                    token=event.get("task_token"), ending=event.get("ending"))

    @property
    def exp(self) -> str:
        """The experiment this task is about (ValueError when the event names none)."""
        if not self.experiment:
            raise ValueError(f"task {self.action or self.state}: the event names no 'experiment'")
        return self.experiment

    @property
    def step_id(self) -> str:
        if not self.step:
            raise ValueError(f"task {self.action or self.state}: the event names no 'step'")
        return self.step


OperationFn = Callable[[Providers, Ctx, Task], JSON]


@dataclass(frozen=True)
class Operation:
    """A campaign operation as a handler dispatches it. ``cleanup``: part of a teardown path, so it runs
    even after an abort was requested. ``without_context``: the answer of an entry state whose execution
    input is too broken to build a campaign context from (nothing can be recorded then). ``claims``: an entry
    state, which first claims the campaign id for its execution (:func:`claim`)."""

    run: OperationFn
    cleanup: bool = False
    without_context: Callable[[Task], JSON] | None = None
    claims: bool = False  # an entry state: claims the campaign id for its execution before anything else


def now_iso(clock: Callable[[], float] = time.time) -> str:
    return datetime.fromtimestamp(clock(), UTC).isoformat(timespec="milliseconds")


def guard(p: Providers, state: str | None, fail_at: str | None, *, cleanup: bool = False) -> None:
    """Entry check of every task: injected failures (rehearsals) and a requested abort."""
    if fail_at and state == fail_at:
        raise InjectedFailure(f"failure injected at state {state} (--fail-at)")
    if not cleanup:
        abort = p.state.abort()
        if abort is not None:
            raise Aborted(f"campaign aborted before {state}: {abort.reason}")


def claim(p: Providers, ctx: Ctx, task: Task) -> None:
    """The entry states' first act: claim ``ctx.campaign_id`` for this execution (``claim.json``, a create-only
    write: of two executions claiming at once, one wins). Another execution's id raises
    :class:`CampaignIdInUse` before anything of that campaign is written (its spec, locks, pool records and
    failure record stay as they are); a redelivery of the same execution goes on. A campaign record naming
    another execution (a campaign from before claims existed) is refused by reading only."""
    me = task.execution or ""
    record = p.state.campaign()
    owner = me if record is None else record.execution or ""
    if owner == me:
        held = p.state.claim(me, now_iso(p.clock))
        owner = me if held is None else str(held.get("execution") or "")
    if owner != me:
        raise CampaignIdInUse(f"campaign id {ctx.campaign_id!r} belongs to execution {owner or '(unnamed)'}; this "
                              f"execution ({me or 'unnamed'}) touched nothing of it: start with a new campaign id")


def lake_names(p: Providers, unit: str) -> tuple[str, str | None]:
    """``(experiment, deployment)`` as the lake names a plan entry: one deployment of an experiment
    (``benchctl.spec.design``) is recorded under its experiment with its own name as the deployment; a pilot, or an
    experiment deployed once, under its own name for both; the campaign (or a name before the plan) as given, with
    no deployment."""
    if unit == timeline.CAMPAIGN or not p.state.has_plan():
        return unit, None
    try:
        entry = p.state.plan().experiment(unit)
    except KeyError:
        return unit, None
    return entry.lake_name, entry.name


def record_event(p: Providers, campaign_id: str, experiment: str, event: timeline.Event, *, key: str = "",
                 pool: str = "", **detail: Any) -> None:
    """Record one timeline event of a plan entry ``experiment`` (or the campaign), idempotent per
    entry/event/key: the same lake part is rewritten."""
    lake_experiment, deployment = lake_names(p, experiment)
    row = timeline.row(campaign_id, lake_experiment, event, now_iso(p.clock), pool=pool, deployment=deployment,
                       **detail)
    if event in timeline.POOL_EVENTS:  # the budget guard's input, kept small in the run store as well
        p.state.record_pool_event(experiment, timeline.part_name(event, key), row)
    prefix = deployment if deployment and deployment != lake_experiment else ""
    p.lake.write("timeline", [row], part_name=timeline.part_name(event, key, prefix))


def simulated(p: Providers, experiment: str | None = None) -> bool:
    """Whether the figures are the Dynamo mocker's timing model, not a GPU's: the local engine always runs the
    mocker; on EKS, an experiment with ``engine: mocker`` (the campaign, when any of its experiments)."""
    if p.engine == "local":
        return True
    if not p.state.has_spec():
        return False
    spec = p.state.spec()
    # a tune pilot is no experiment of the spec: the campaign's (one engine per campaign, the spec's rule)
    exps = [e for e in spec.experiments if e.name == experiment] or spec.experiments
    return any(e.engine == "mocker" for e in exps)


def write_campaign(p: Providers, ctx: Ctx, status: str, *, failed_state: str | None = None,
                   error: str | None = None, cause: str | None = None) -> None:
    """The campaign's status, in its run-state record and as its lake row."""
    rec = p.state.campaign() or CampaignRecord(campaign_id=ctx.campaign_id)
    rec.status = status
    for name, value in (("failed_state", failed_state), ("error", error), ("cause", cause)):
        if value is not None:
            setattr(rec, name, value)
    if status != "running" and rec.ended_at is None:
        rec.ended_at = now_iso(p.clock)
    p.state.save_campaign(rec)
    row = {
        "campaign_id": ctx.campaign_id,
        "spec_hash": rec.spec_hash,
        "spec_name": rec.spec_name,
        "model": rec.model,
        "engine": p.engine,
        "simulated": simulated(p),
        "status": status,
        "started_at": rec.started_at,
        "ended_at": rec.ended_at,
        "failed_state": rec.failed_state,
        "error": rec.error,
        "cause": rec.cause,
        "versions_json": json.dumps(rec.versions or {}, sort_keys=True),
        "pricing_json": json.dumps(rec.pricing or {}, sort_keys=True),
        "lake_uri": ctx.lake_uri,
        **provenance(rec.versions or {}, _spec_or_none(p), p.engine),  # never blank (benchctl.campaign.provenance)
    }
    p.lake.write("campaigns", [row], part_name="campaign")


def _spec_or_none(p: Providers) -> Any:
    """The campaign's spec when its run state holds one (a campaign refused at Plan may have none)."""
    try:
        return p.state.spec()
    except Exception:  # no spec stored yet, or unreadable: the provenance says "not known"
        return None


def record_failure(p: Providers, state: str | None, exc: BaseException) -> None:
    """Remember the first failing state (the Catch payload names the error, not the state)."""
    if isinstance(exc, NotReadyYet):
        return
    p.state.record_failure(FailureRecord(state=state, error=type(exc).__name__, message=logtext.readable(str(exc)),
                                         at=now_iso(p.clock)))


def error_of(error: Any) -> tuple[str, str]:
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
    return name, logtext.readable(str(cause)) or name


class Cleanup:
    """Runs every cleanup item even when one of them raises: a bug or outage in one item (say, the lake)
    must not leave GPUs scaled or processes running. The first error is re-raised at the end (the
    state's Retry/Catch sees the cause); the others are recorded in the timeline. ``NotReadyYet``
    (a node group busy with another update) is not an error: it asks the state to retry later."""

    def __init__(self, p: Providers, ctx: Ctx, experiment: str) -> None:
        self.p, self.ctx, self.experiment = p, ctx, experiment
        self.errors: list[tuple[str, Exception]] = []

    def attempt(self, item: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self.errors.append((item, exc))
            return None

    def event(self, event: timeline.Event, *, key: str = "", pool: str = "", **detail: Any) -> None:
        """Record a timeline event as one more item (the lake may be what fails)."""
        self.attempt("timeline", record_event, self.p, self.ctx.campaign_id, self.experiment, event, key=key,
                     pool=pool, **detail)

    def failed(self, item_prefix: str) -> bool:
        return any(item.startswith(item_prefix) for item, _ in self.errors)

    def finish(self) -> None:
        if not self.errors:
            return
        for n, (item, exc) in enumerate(self.errors):
            if n == 0 or isinstance(exc, NotReadyYet):
                continue
            with contextlib.suppress(Exception):  # the lake may be what fails; the first error is raised below
                record_event(self.p, self.ctx.campaign_id, self.experiment, timeline.CLEANUP_ERROR, key=f"{n}",
                             item=item, error=type(exc).__name__, cause=str(exc))
        item, first = self.errors[0]
        if len(self.errors) > 1 and not isinstance(first, NotReadyYet):
            first.args = (f"{first} (cleanup item {item!r}; {len(self.errors) - 1} more cleanup error(s) "
                          "recorded in the timeline)",)
        raise first


def write_costs(p: Providers, ctx: Ctx) -> list[JSON]:
    """The campaign's cost rows (experiment x pool, from its timeline and steps) into ``costs``."""
    from benchctl.planning.costs import cost_rows

    if not (p.state.has_spec() and p.state.has_plan()):
        return []
    rows: list[JSON] = cost_rows(ctx.campaign_id, p.state.spec(), p.state.plan(),
                                 p.lake.read_table("timeline", ctx.campaign_id),
                                 p.lake.read_table("steps", ctx.campaign_id), simulated=simulated(p))
    p.lake.write("costs", rows, part_name="costs")
    return rows


def experiment_row(campaign_id: str, index: int, e: Experiment, spec: CampaignSpec | None = None) -> JSON:
    """The experiment's ``experiments`` row; with the ``spec``, also how its KV moves (``CampaignSpec.transfer``:
    the declared path, the bandwidth the local mocker models and its source) and the pools' networks."""
    transfer = spec.transfer(e) if spec is not None else {}
    network = ({g.pool: spec.pool(g.pool).network.model_dump(mode="json") for g in e.workers}
               if spec is not None else None)
    return {
        "nixl_backend": transfer.get("nixl_backend"),
        "kv_transfer_path": transfer.get("path"),
        "kv_transfer_bandwidth_gbps": transfer.get("kv_transfer_bandwidth_gbps"),
        "kv_bytes_per_token": transfer.get("kv_bytes_per_token"),
        "network_json": json_text({"pools": network, **transfer}) if spec is not None else None,
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


def require_running(p: Providers, state: str) -> None:
    """Raise :class:`CampaignNotRunning` unless the campaign's run record is ``running`` (no record: a campaign
    whose Plan has not written it, which nothing can have stopped)."""
    rec = p.state.campaign()
    if rec is not None and rec.status != "running":
        raise CampaignNotRunning(
            f"{state}: campaign {rec.campaign_id} is {rec.status!r}, not 'running' (run record "
            f"{p.state.where('campaign')}): an execution stopped meanwhile, or redriven after its campaign ended, "
            "scales and deploys nothing. Start a new campaign instead of redriving this execution")
