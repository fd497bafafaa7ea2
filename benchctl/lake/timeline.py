"""The campaign timeline's vocabulary: every event, what its detail holds, and which events pair up.

One definition, as :mod:`benchctl.lake.schema` is for the lake's tables: the writers (``benchctl.campaign``,
the sweeper) record events only through :func:`row` (an unknown event or detail field is refused), and
the readers (``benchctl.planning.costs``, the report's timeline figure) name events and phases only through this
module. A timeline row is one ``timeline`` table row: ``campaign_id``, ``experiment`` (or
:data:`CAMPAIGN` for campaign-level events), ``event``, ``at`` (UTC, ISO text), ``pool`` and
``detail_json``.

To add an event: define it here with its details, write it with :func:`row` where it happens, and, if
it starts or ends a phase, add the :class:`Phase`; readers then see it with no other change.
May import only the standard library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

CAMPAIGN = "_campaign"  # the experiment partition value of campaign-level events


@dataclass(frozen=True)
class Event:
    """One kind of timeline event. ``details``: the fields its ``detail_json`` may hold (None: whatever
    the port that produced it reports, e.g. a smoke test's result). ``key``: what tells two events of the
    same kind within one experiment apart (the pool, the step), so that recording it again (a redelivered
    task) replaces the same row instead of adding one."""

    name: str
    description: str
    details: tuple[str, ...] | None = ()
    key: str | None = None
    scope: str = "experiment"  # whose event it is: "experiment", "campaign" (CAMPAIGN) or "any"


PLANNED = Event("planned", "the Plan state wrote the run manifest", ("steps",), scope="campaign")
SCALE_REQUESTED = Event("scale_requested", "a pool was asked to hold the experiment's nodes (prior size recorded)",
                        ("nodes", "previous", "simulated"), key="pool")
NODES_READY = Event("nodes_ready", "the pool's nodes are ready", ("nodes", "simulated"), key="pool")
DEPLOY_APPLIED = Event("deploy_applied", "the deployment was started/applied (speed: the mocker's seeded speed factor "
                       "of this deployment, design.twin_spread_pct)", ("mode", "router", "groups", "speed"))
READY = Event("ready", "the deployment answers (with what it runs: the precision each worker's engine logged; "
              "on EKS: image digests, model prefetch, the engine's packages, the Kubernetes version, the workers' "
              "nodes' GPU drivers; the local CPU engine: its label and what differs from EKS)",
              ("startup_s", "images", "model_prefetch", "precision", "engine_packages", "kubernetes", "gpu_drivers",
               "worker_engine", "cpu_engine_changes"))
SMOKE_OK = Event("smoke_ok", "the smoke requests succeeded (detail: the smoke port's result)", None)
QUALITY_SCORED = Event("quality_scored", "the output-quality questions were answered and scored (benchctl.analysis.quality); "
                       "gate: passed | failed | not applied (SIMULATED)",
                       ("questions", "correct", "score", "score_low", "score_high", "min_score", "simulated", "gate",
                        "kind", "temperature", "top_p", "sampling_seed", "thinking", "max_tokens"))
NETWORK_OBSERVED = Event("network_observed", "how the deployment's workers are placed and move KV, as observed "
                         "(worker logs, nodes): CNI, zones, MTU, placement, the transfer backend actually used",
                         None)
LOAD_START = Event("load_start", "a load (a step or the warm-up) was launched", ("step_id",), key="step_id")
LOAD_END = Event("load_end", "a load exited", ("step_id", "exit_code"), key="step_id")
LOAD_STOPPED = Event("load_stopped", "a load was stopped (abort path)", ("step_id",), key="step_id")
INGESTED = Event("ingested", "a step's artifacts are in the lake (overloaded: a sweep step whose every request failed: "
                 "a measured miss that ends the sweep's escalation)", ("step_id", "status", "requests", "overloaded"),
                 key="step_id")
BUDGET_EXCEEDED = Event("budget_exceeded", "the budget guard refused the next step", ("step_id", "reason"),
                        key="step_id")
TEARDOWN_START = Event("teardown_start", "the experiment's teardown began")
TEARDOWN_DONE = Event("teardown_done", "everything of the experiment is gone, its pools restored or handed over")
POOL_HANDED_OVER = Event("pool_handed_over", "a pool was kept warm for the next experiment",
                         ("nodes", "simulated"), key="pool")
POOL_RESTORED = Event("pool_restored", "a pool is back at its recorded size", ("restored_to", "simulated"),
                      key="pool")
EXPERIMENT_FAILED = Event("failed", "the experiment failed and was torn down", ("error", "cause"))
CLEANUP_ERROR = Event("cleanup_error", "one cleanup item failed while the others went on",
                      ("item", "error", "cause"), key="n", scope="any")
CLEANUP_FAILED = Event("cleanup_failed", "a cleanup state failed too (the lake keeps the first failure)",
                       ("error", "cause"), scope="campaign")
SUCCEEDED = Event("succeeded", "the campaign ended well", scope="campaign")
FAILED = Event("failed", "the campaign failed (after teardown)", ("error", "cause", "state"), scope="campaign")
ABORTED = Event("aborted", "the campaign was aborted (after teardown)", ("error", "cause", "state"),
                scope="campaign")
STOPPED = Event("stopped", "the campaign's execution was stopped from outside (Stop execution, or its timeout), "
                "then torn down by the stopped-campaign state machine", ("error", "cause", "state"), scope="campaign")
RECEIPT = Event("teardown_receipt", "one resource the experiment created or changed, read back after its teardown "
                "(benchctl.campaign.receipt): the action taken, its state now, and for a pool when billing ended",
                ("kind", "name", "action", "recorded", "now", "state", "why", "billing", "read_at", "pid"),
                key="item", scope="any")
SWEPT = Event("swept", "the sweeper tore down what the campaign left", ("experiments",), scope="campaign")

EVENTS: tuple[Event, ...] = (
    PLANNED, SCALE_REQUESTED, NODES_READY, DEPLOY_APPLIED, READY, SMOKE_OK, QUALITY_SCORED, NETWORK_OBSERVED,
    LOAD_START, LOAD_END, LOAD_STOPPED,
    INGESTED, BUDGET_EXCEEDED, TEARDOWN_START, TEARDOWN_DONE, POOL_HANDED_OVER, POOL_RESTORED, EXPERIMENT_FAILED,
    CLEANUP_ERROR, CLEANUP_FAILED, SUCCEEDED, FAILED, ABORTED, STOPPED, RECEIPT, SWEPT,
)
# the campaign-level event that ends a campaign, by its final status
CAMPAIGN_END: dict[str, Event] = {"succeeded": SUCCEEDED, "failed": FAILED, "aborted": ABORTED, "stopped": STOPPED}


@dataclass(frozen=True)
class Phase:
    """A span between two events of one experiment (the report draws it; costs count some of them).
    ``key``: the field both ends share when several run in one experiment (``pool`` column or a detail)."""

    name: str
    start: Event
    end: Event
    key: str | None = None


PHASES: tuple[Phase, ...] = (
    Phase("capacity", SCALE_REQUESTED, NODES_READY, "pool"),
    Phase("deploy", DEPLOY_APPLIED, READY),
    Phase("smoke", READY, SMOKE_OK),
    Phase("load", LOAD_START, LOAD_END, "step_id"),
    Phase("teardown", TEARDOWN_START, TEARDOWN_DONE),
)
LOAD_ENDS: tuple[Event, ...] = (LOAD_END, LOAD_STOPPED)  # a load window ends with either
POOL_HELD = (SCALE_REQUESTED, POOL_RESTORED)  # a pool is paid for from one to the other (costs)
POINTS: tuple[Event, ...] = (POOL_RESTORED, POOL_HANDED_OVER)  # drawn as points, not spans
POOL_EVENTS: tuple[Event, ...] = (SCALE_REQUESTED, POOL_HANDED_OVER, POOL_RESTORED)  # what a pool costs (costs)


def row(campaign_id: str, experiment: str, event: Event, at: str, *, pool: str = "", deployment: str | None = None,
        **detail: Any) -> dict[str, Any]:
    """One ``timeline`` row; ValueError for an event this module does not define, a campaign-level event
    recorded for an experiment (or the reverse), or a detail field the event does not hold. ``deployment``: which
    deployment of the experiment (``benchctl.spec.design``; the plan entry's name), None for the campaign's."""
    if event not in EVENTS:
        raise ValueError(f"timeline event {event.name!r} is not one of timeline.EVENTS")
    if event.scope != "any" and (event.scope == "campaign") != (experiment == CAMPAIGN):
        where = "the campaign" if event.scope == "campaign" else "an experiment"
        raise ValueError(f"timeline event {event.name!r} belongs to {where}, not to {experiment!r}")
    if event.details is not None:
        unknown = sorted(set(detail) - set(event.details))
        if unknown:
            raise ValueError(f"timeline event {event.name!r}: unknown detail field(s) {unknown}; "
                             f"valid: {list(event.details)}")
    return {
        "campaign_id": campaign_id,
        "experiment": experiment,
        "event": event.name,
        "at": at,
        "pool": pool or None,
        "detail_json": json.dumps(detail, sort_keys=True, default=str) if detail else None,
        "deployment": deployment,
    }


def part_name(event: Event, key: str = "", deployment: str = "") -> str:
    """The lake part (file) name of an event: one per event, or per event and key (idempotent rewrites); within
    the experiment's partition, prefixed by the deployment when it is not the experiment's only one."""
    name = f"{event.name}-{key}" if key else event.name
    return (f"{deployment}.{name}" if deployment else name).replace("/", "_")


def detail(r: dict[str, Any]) -> dict[str, Any]:
    """A timeline row's detail as a dict (``detail_json`` text, or an already parsed ``detail``)."""
    raw = r.get("detail_json")
    if raw is None:
        raw = r.get("detail")
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw:
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def is_event(r: dict[str, Any], *events: Event) -> bool:
    """Whether a timeline row records one of ``events``."""
    return r.get("event") in {e.name for e in events}
