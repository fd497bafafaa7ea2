"""The run state's records: one typed JSON object each, with its ``to_json``/``from_json``; their keys and the
facade that reads and writes them are :mod:`benchctl.campaign.runstate`'s."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    pass


JSON = dict[str, Any]


R = TypeVar("R")


class _Record:
    def to_json(self) -> JSON:
        return _json(self)


def _from(cls: type[R], data: JSON) -> R:
    """A record from its JSON: the fields it knows (an older or newer writer's extra keys are ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def _json(rec: Any, *, drop_none: tuple[str, ...] = ()) -> JSON:
    return {k: v for k, v in dataclasses.asdict(rec).items() if not (v is None and k in drop_none)}


@dataclass
class PoolsRecord(_Record):
    """What ScalePools did to each pool of one experiment. ``records``: one per pool, what the pool port
    returned (``pool``, ``previous``, ``requested``, ``simulated`` and the adapter's own fields), written
    with ``pending: True`` BEFORE the pool changes; ``complete`` once every pool was asked. Teardown adds
    ``restored`` (pool, size now) and ``handed_over`` (pool -> previous size, nodes) as it goes."""

    records: list[JSON]
    requested_at: float
    complete: bool = True
    restored: list[JSON] = field(default_factory=list)
    handed_over: dict[str, JSON] = field(default_factory=dict)

    @staticmethod
    def from_json(data: JSON) -> PoolsRecord:
        rec = _from(PoolsRecord, data)
        rec.restored = list(rec.restored or [])
        rec.handed_over = dict(rec.handed_over or {})
        return rec

    @property
    def interrupted(self) -> bool:
        """A change was cut short: not every pool asked, or one recorded while it changed."""
        return not self.complete or any(r.get("pending") for r in self.records)

    def restored_pools(self) -> set[str]:
        return {r["pool"] for r in self.restored}


@dataclass
class DeploymentRecord:
    """The experiment's deployment: the serving port's ``state`` (pending, ``campaign.serving.record_intent``,
    before the port creates anything: ScalePools' ``prepare``, Deploy), when it was deployed, and its
    teardown: ``removed``, ``deleted_at``, ``left`` (still there when the wait ran out) and ``torn_down``."""

    state: JSON
    deployed_at: float
    removed: JSON | None = None
    deleted_at: float | None = None
    torn_down: bool = False
    left: list[str] | None = None

    @staticmethod
    def from_json(data: JSON) -> DeploymentRecord:
        return _from(DeploymentRecord, data)

    def to_json(self) -> JSON:
        return _json(self, drop_none=("removed", "deleted_at", "left"))

    @property
    def pending(self) -> bool:
        return bool(self.state.get("pending"))


@dataclass
class SmokeRecord:
    """The smoke test: the smoke port's ``state`` and, once it succeeded, its ``result``."""

    state: JSON
    started_at: float
    result: JSON | None = None
    ended_at: float | None = None

    @staticmethod
    def from_json(data: JSON) -> SmokeRecord:
        return _from(SmokeRecord, data)

    def to_json(self) -> JSON:
        return _json(self, drop_none=("result", "ended_at"))


@dataclass
class LoadRecord:
    """One load (a step, or the warm-up): the load port's ``state`` (``{"skipped": True}``: no warm-up), argv,
    estimate, artifact location, dataset (name, uri, sha256, meta, type), metrics endpoints (URL -> source), when
    first seen running, its end (``ended``, ``exit_code``: None when unknown, ``ended_at``, ``stopped``, the pods'
    ``logs``), its rows' ``ingest_status`` (None: not ingested yet) and, once ingested, ``slo``: its requests and those
    that succeeded within every SLO bound the spec set (``{"n": .., "good": ..}``, v_step_stats' n_requests and
    n_good; what the SLO-edge search and the tuning phase read) and ``cache_state``: the KV cache state a prefix-cache or
    multi-turn step starts from (``benchctl.planning.cache_state``)."""

    state: JSON
    launched_at: float
    argv: list[str] | None = None
    est_s: float | None = None
    artifact_dir: str | None = None
    dataset: JSON | None = None
    metrics_sources: dict[str, str] | None = None
    running_at: float | None = None
    ended: bool = False
    exit_code: int | None = None
    ended_at: float | None = None
    stopped: bool = False
    logs: JSON | None = None
    ingest_status: str | None = None
    slo: dict[str, int] | None = None
    concurrency: int | None = None  # a search probe's load, chosen at its launch (the plan's step has none)
    search: JSON | None = None  # a probe's decision (benchctl.analysis.search.Next: load, why, bracket)
    cache_state: str | None = None
    client_bound: bool | None = None  # the load generator fell behind (benchctl.lake.client_load; None: not known)
    overloaded: bool | None = None  # a sweep step whose every request failed: a measured miss (ingest_step)

    @staticmethod
    def from_json(data: JSON) -> LoadRecord:
        rec = _from(LoadRecord, {k: v for k, v in data.items() if k != "ended"})
        rec.ended = "exit_code" in data  # a load that ended has an exit code, possibly null
        return rec

    def to_json(self) -> JSON:
        out = _json(self, drop_none=("argv", "est_s", "artifact_dir", "dataset", "metrics_sources", "running_at",
                                     "ended_at", "logs", "ingest_status", "slo",
                                     "concurrency", "search", "cache_state", "client_bound", "overloaded"))
        out.pop("ended")
        for key, keep in (("exit_code", self.ended), ("stopped", self.stopped)):
            out.pop(key) if not keep else None
        return out

    @property
    def skipped(self) -> bool:
        return bool(self.state.get("skipped"))

    @property
    def running(self) -> bool:
        return not self.skipped and not self.ended


@dataclass
class CampaignRecord:
    """The campaign as the lake's ``campaigns`` row is written from it."""

    campaign_id: str
    status: str = "running"
    execution: str | None = None
    spec_hash: str | None = None
    spec_name: str | None = None
    model: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    versions: JSON = field(default_factory=dict)
    pricing: JSON = field(default_factory=dict)
    failed_state: str | None = None
    error: str | None = None
    cause: str | None = None

    @staticmethod
    def from_json(data: JSON) -> CampaignRecord:
        return _from(CampaignRecord, {"campaign_id": "", **data})

    def to_json(self) -> JSON:
        return _json(self, drop_none=("execution", "spec_hash", "spec_name", "model", "ended_at", "failed_state",
                                      "error", "cause"))


@dataclass
class FailureRecord(_Record):
    """The first failing state of the campaign (the Catch payload names the error, not the state)."""

    state: str | None
    error: str
    message: str
    at: str | None = None

    @staticmethod
    def from_json(data: JSON) -> FailureRecord:
        return _from(FailureRecord, {"state": None, "error": "", "message": "", **data})


@dataclass
class AbortRecord(_Record):
    """An abort was asked for: the next task's guard fails with ``Aborted`` (cleanup tasks go on)."""

    reason: str
    during: str = ""

    @staticmethod
    def from_json(data: JSON) -> AbortRecord:
        return _from(AbortRecord, {"reason": "abort requested", **data})


@dataclass
class RunnerRecord(_Record):
    """The local runner's process (pid and start time: a reused pid is not the runner)."""

    pid: int
    start_time: int | None
    started: str

    @staticmethod
    def from_json(data: JSON) -> RunnerRecord:
        return RunnerRecord(pid=int(data["pid"]), start_time=data.get("start_time"), started=str(data.get("started")))


@dataclass
class ResultRecord(_Record):
    """How a local execution ended (written by the runner when it returns)."""

    status: str
    error: str | None
    cause: str | None
    elapsed_s: float

    @staticmethod
    def from_json(data: JSON) -> ResultRecord:
        return _from(ResultRecord, {"error": None, "cause": None, "elapsed_s": 0.0, **data})
