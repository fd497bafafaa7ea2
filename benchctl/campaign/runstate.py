"""The run state: what a campaign keeps between handler invocations, as typed records behind one facade.

:class:`RunState` owns every run-store key (nothing else in benchctl names one) and parses the spec and
the plan at most once per invocation. Its records, one JSON object each (the store: a directory locally,
an S3 prefix on AWS)::

    claim.json                         the execution owning the campaign id (created once: ``campaign.claim``)
    stop_claim.json                    who tears a stopped execution's campaign down (created once: ``stopped``)
    spec.json, spec_meta.json          the validated spec, and its source URI and text (Plan)
    plan.json                          the deterministic plan (Plan)
    preflight.json                     the engine's prerequisites were all there (Plan)
    campaign.json                      CampaignRecord: status, times, versions, pricing, the failure
    failure.json                       FailureRecord: the FIRST failing state (the lake keeps it)
    abort.json                         AbortRecord: an abort was requested (Ctrl-C, the runner)
    pools/<experiment>.json            PoolsRecord: each pool's prior size, recorded before it changed
    deployments/<experiment>.json      DeploymentRecord: the serving port's state, deletion, teardown
    smoke/<experiment>.json            SmokeRecord: the smoke port's state and result
    loads/<experiment>/<step>.json     LoadRecord: the load port's state, argv, dataset, exit code
    runner.json, result.json           the local runner's process and result (the sweeper reads them)

Adapter states inside the records (``state``: what a port returned) stay the port's own JSON. To add a
record: a dataclass with ``to_json``/``from_json`` in :mod:`benchctl.campaign.records`, its key here, a getter and a saver on
:class:`RunState`. May import the standard library and the core (spec, plan).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchctl.campaign.store import RunStore
    from benchctl.planning.plan import CampaignPlan
    from benchctl.spec.model import CampaignSpec
from benchctl.campaign.records import (
    JSON,
    AbortRecord,
    CampaignRecord,
    DeploymentRecord,
    FailureRecord,
    LoadRecord,
    PoolsRecord,
    ResultRecord,
    RunnerRecord,
    SmokeRecord,
)

WARMUP = "warmup"  # the step id of an experiment's warm-up load

_SPEC, _SPEC_META, _PLAN, _PREFLIGHT, _CLAIM = "spec.json", "spec_meta.json", "plan.json", "preflight.json", "claim.json"
_CAMPAIGN, _FAILURE, _ABORT, _RUNNER, _RESULT = "campaign.json", "failure.json", "abort.json", "runner.json", "result.json"


def _pools_key(experiment: str) -> str:
    return f"pools/{experiment}.json"


def _deployment_key(experiment: str) -> str:
    return f"deployments/{experiment}.json"


def _tuning_key(experiment: str) -> str:
    return f"tuning/{experiment}.json"


def _smoke_key(experiment: str) -> str:
    return f"smoke/{experiment}.json"


def _load_key(experiment: str, step_id: str) -> str:
    return f"loads/{experiment}/{step_id}.json"


def _pool_events_key(experiment: str) -> str:
    return f"pool_events/{experiment}.json"


def runner_key(experiment: str, step_id: str = "", name: str = "") -> str:
    """A key of the AWS runner hand-over store (not the run store: ``constants.runner_prefix``): ``request.json``
    (LaunchLoad), ``token.json`` (AwaitLoadEnd), ``end.json`` (the runner, its only write). No step: the prefix."""
    return f"{experiment}/" + (f"{step_id}/{name}" if step_id else "")


# --------------------------------------------------------------------------------------------- records


# ---------------------------------------------------------------------------------------------- facade


class RunState:
    """Every record of one campaign's run store. Spec and plan are parsed once and kept."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._spec: CampaignSpec | None = None
        self._plan: CampaignPlan | None = None

    @property
    def uri(self) -> str:
        return self.store.uri

    def where(self, what: str) -> str:
        """Where a record lives, for messages (``<store uri>/<key>``)."""
        keys = {"spec": _SPEC, "plan": _PLAN, "campaign": _CAMPAIGN, "failure": _FAILURE}
        return f"{self.store.uri}/{keys.get(what, what)}"

    # ------------------------------------------------------------------------------ spec and plan

    def has_spec(self) -> bool:
        return self._spec is not None or self.store.exists(_SPEC)

    def spec(self) -> CampaignSpec:
        """The campaign's spec (the Plan state stores it); parsed once."""
        if self._spec is None:
            from benchctl.spec.model import parse_spec

            data = self.store.read_json(_SPEC)
            if data is None:
                raise FileNotFoundError(f"{self.where('spec')} is missing: the Plan state writes it")
            self._spec = parse_spec(data, self.where("spec"))
        return self._spec

    def keep_spec(self, spec: CampaignSpec, *, source: str, text: str) -> None:
        """Store the validated spec, with its source URI and text as given."""
        self.store.write_json(_SPEC_META, {"source": source, "source_text": text})
        self.store.write_json(_SPEC, spec.model_dump(mode="json"))
        self._spec = spec

    def has_plan(self) -> bool:
        return self._plan is not None or self.store.exists(_PLAN)

    def plan(self) -> CampaignPlan:
        """The campaign's plan (the Plan state stores it); read once."""
        if self._plan is None:
            from benchctl.planning.plan import CampaignPlan

            data = self.store.read_json(_PLAN)
            if data is None:
                raise FileNotFoundError(f"{self.where('plan')} is missing: the Plan state writes it")
            self._plan = CampaignPlan.from_json(data)
        return self._plan

    def keep_plan(self, plan: CampaignPlan) -> None:
        """Store the plan unless the same spec's plan is there already (a redelivered Plan)."""
        existing = self.store.read_json(_PLAN)
        if existing is None or existing.get("spec_hash") != plan.spec_hash:
            self.store.write_json(_PLAN, plan.to_json())
        self._plan = plan

    def experiment_names(self) -> list[str]:
        """The planned experiments in order; [] before Plan (cleanup paths must not need a plan)."""
        if self._plan is not None:
            return [e.name for e in self._plan.experiments]
        data = self.store.read_json(_PLAN) or {}
        return [e["name"] for e in data.get("experiments", [])]

    def _step_ids(self, experiment: str) -> list[str] | None:
        if self._plan is not None:
            return next(([s.step_id for s in e.steps] for e in self._plan.experiments if e.name == experiment), [])
        data = self.store.read_json(_PLAN)
        if data is None:
            return None
        return next(([s["step_id"] for s in e["steps"]] for e in data["experiments"] if e["name"] == experiment), [])

    # ----------------------------------------------------------------------------------- preflight

    def preflight_done(self) -> bool:
        return self.store.exists(_PREFLIGHT)

    def mark_preflight(self, at: str) -> None:
        self.store.write_json(_PREFLIGHT, {"ok": True, "at": at})

    # ------------------------------------------------------------------------------------ campaign

    def claim(self, execution: str, at: str) -> JSON | None:
        """Create ``claim.json`` for ``execution``, create-only: None when created, else the claim already there."""
        return self.store.create_json(_CLAIM, {"execution": execution, "claimed_at": at})

    def claim_stop(self, claimant: str, at: str, status: str) -> JSON | None:
        """Create ``stop_claim.json`` for ``claimant`` (the stopped-campaign execution, or the sweeper's watchdog)
        tearing down an execution that ended ``status``, create-only: None when created, else the claim there."""
        return self.store.create_json("stop_claim.json", {"claimant": claimant, "claimed_at": at, "status": status})

    def claimed(self) -> bool:
        return self.store.exists(_CLAIM)

    def campaign(self) -> CampaignRecord | None:
        data = self.store.read_json(_CAMPAIGN)
        return None if data is None else CampaignRecord.from_json(data)

    def save_campaign(self, rec: CampaignRecord) -> None:
        self.store.write_json(_CAMPAIGN, rec.to_json())

    def failure(self) -> FailureRecord | None:
        data = self.store.read_json(_FAILURE)
        return None if data is None else FailureRecord.from_json(data)

    def record_failure(self, rec: FailureRecord) -> bool:
        """Keep the FIRST failure only; False when one was kept already."""
        if self.store.exists(_FAILURE):
            return False
        self.store.write_json(_FAILURE, rec.to_json())
        return True

    def abort(self) -> AbortRecord | None:
        """The abort request, if one was made (``exists`` first: most tasks find none, at one request)."""
        if not self.store.exists(_ABORT):
            return None
        return AbortRecord.from_json(self.store.read_json(_ABORT) or {})

    def request_abort(self, reason: str, during: str = "") -> None:
        self.store.write_json(_ABORT, AbortRecord(reason, during.strip()).to_json())

    # -------------------------------------------------------------------------------- experiments

    def pools(self, experiment: str) -> PoolsRecord | None:
        data = self.store.read_json(_pools_key(experiment))
        return None if data is None else PoolsRecord.from_json(data)

    def save_pools(self, experiment: str, rec: PoolsRecord) -> None:
        self.store.write_json(_pools_key(experiment), rec.to_json())

    def has_pools(self, experiment: str) -> bool:
        return self.store.exists(_pools_key(experiment))

    def record_pool_event(self, experiment: str, key: str, row: JSON) -> None:
        """Keep a pool's timeline row (scaled, handed over, restored) beside the experiment's pools, so the
        budget guard reads one small object per experiment instead of the whole timeline table."""
        data = self.store.read_json(_pool_events_key(experiment)) or {"rows": {}}
        data["rows"][key] = row
        self.store.write_json(_pool_events_key(experiment), data)

    def pool_events(self) -> list[JSON]:
        """Every planned experiment's pool rows (see :meth:`record_pool_event`), in no particular order."""
        rows: list[JSON] = []
        for experiment in self.experiment_names():
            rows += list(((self.store.read_json(_pool_events_key(experiment)) or {}).get("rows") or {}).values())
        return rows

    def deployment(self, experiment: str) -> DeploymentRecord | None:
        data = self.store.read_json(_deployment_key(experiment))
        return None if data is None else DeploymentRecord.from_json(data)

    def save_deployment(self, experiment: str, rec: DeploymentRecord) -> None:
        self.store.write_json(_deployment_key(experiment), rec.to_json())

    def has_deployment(self, experiment: str) -> bool:
        return self.store.exists(_deployment_key(experiment))

    def tuning(self, experiment: str) -> JSON | None:
        """A tuned arm's choice (``benchctl.campaign.tuning``): its workers, the candidates measured, why."""
        return self.store.read_json(_tuning_key(experiment))

    def save_tuning(self, experiment: str, choice: JSON) -> None:
        self.store.write_json(_tuning_key(experiment), choice)

    def smoke(self, experiment: str) -> SmokeRecord | None:
        data = self.store.read_json(_smoke_key(experiment))
        return None if data is None else SmokeRecord.from_json(data)

    def save_smoke(self, experiment: str, rec: SmokeRecord) -> None:
        self.store.write_json(_smoke_key(experiment), rec.to_json())

    def has_smoke(self, experiment: str) -> bool:
        return self.store.exists(_smoke_key(experiment))

    def load(self, experiment: str, step_id: str) -> LoadRecord | None:
        data = self.store.read_json(_load_key(experiment, step_id))
        return None if data is None else LoadRecord.from_json(data)

    def save_load(self, experiment: str, step_id: str, rec: LoadRecord) -> None:
        self.store.write_json(_load_key(experiment, step_id), rec.to_json())

    def has_load(self, experiment: str, step_id: str) -> bool:
        return self.store.exists(_load_key(experiment, step_id))

    def load_steps(self, experiment: str) -> list[str]:
        """Step ids of the experiment's loads (the warm-up and every planned step), named from the plan
        rather than listed, so the cleanup path does not depend on listing the store (no plan: listed)."""
        steps = self._step_ids(experiment)
        if steps is None:
            prefix = _load_key(experiment, "").removesuffix(".json")
            return [k.removeprefix(prefix).removesuffix(".json") for k in self.store.keys(prefix.rstrip("/"))]
        return [WARMUP, *steps]

    def loads(self, experiment: str) -> list[tuple[str, LoadRecord]]:
        """(step id, record) of each of the experiment's loads that was launched."""
        recs = [(step_id, self.load(experiment, step_id)) for step_id in self.load_steps(experiment)]
        return [(step_id, rec) for step_id, rec in recs if rec is not None]

    def touched(self, experiment: str) -> bool:
        """Whether the experiment created anything: scaled, deployed or loaded."""
        return (self.has_pools(experiment) or self.has_deployment(experiment)
                or any(self.has_load(experiment, s) for s in self.load_steps(experiment)))

    # ------------------------------------------------------------------------------ local runner

    def runner(self) -> RunnerRecord | None:
        data = self.store.read_json(_RUNNER)
        try:
            return None if data is None else RunnerRecord.from_json(data)
        except (KeyError, TypeError, ValueError):
            return None

    def save_runner(self, rec: RunnerRecord) -> None:
        self.store.write_json(_RUNNER, rec.to_json())

    def result(self) -> ResultRecord | None:
        data = self.store.read_json(_RESULT)
        return None if data is None else ResultRecord.from_json(data)

    def save_result(self, rec: ResultRecord) -> None:
        self.store.write_json(_RESULT, rec.to_json())
