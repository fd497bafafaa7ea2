"""Wiring of the local engine: ``LocalEngine`` (the providers of a campaign: real Dynamo + AIPerf processes,
the local lake, run store, pool and file locks, one DuckDB engine per run for the report) and
``run_campaign``, which validates and plans the spec, starts the ASL with the input every engine starts
with (``benchctl.campaign.context``: the spec as a ``file://`` URI, the campaign id, the poll period) and returns
where the results are. ``sweep_workspace`` is `benchctl sweep`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from benchctl.atomic import atomic_write
from benchctl.campaign.context import Ctx, StartInput, check_campaign_id, new_campaign_id
from benchctl.campaign.ports import Providers
from benchctl.campaign.records import ResultRecord, RunnerRecord
from benchctl.campaign.runstate import RunState
from benchctl.errors import CeilingExceeded, SpecError
from benchctl.local import processes
from benchctl.local.engine import Interrupts, Progress, RunResult, execute
from benchctl.local.lake import CACHE_DIR, CAMPAIGNS_DIR, LAKE_DIR, LOCKS_DIR, LocalLake
from benchctl.local.locks import FileLocks
from benchctl.local.pool import LocalPool
from benchctl.local.query import QueryEngine
from benchctl.local.report import LocalReport
from benchctl.local.runstore import LocalRunStore
from benchctl.local.tuning import cached_ranker
from benchctl.planning.ceilings import Ceilings
from benchctl.planning.placement import load_placeable_spec
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import CampaignSpec, spec_hash
from benchctl.spec.text import read_capped


def versions() -> dict[str, object]:
    from importlib.metadata import PackageNotFoundError, version

    from benchctl.campaign.provenance import dashboards_sha256

    out: dict[str, object] = {}
    for pkg in ("aiperf", "ai-dynamo", "ai-dynamo-runtime", "benchctl", "moto", "duckdb", "pyarrow"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    dashboards = Path(__file__).resolve().parents[2] / "dashboards"  # what this checkout ships (and provisions)
    if dashboards.is_dir():
        out["dashboards_sha256"] = dashboards_sha256(dashboards)
    return out


def read_file_uri(uri: str) -> bytes:
    """The bytes of a ``file://`` URI (the local engine's spec URIs); FileNotFoundError naming it."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        raise ValueError(f"spec_uri {uri!r}: the local engine reads file:// URIs (give `benchctl run` a path)")
    path = Path(unquote(parts.path))
    try:
        with path.open("rb") as f:  # at most the spec size limit, as on S3
            return read_capped(f, uri, path.stat().st_size if path.is_file() else None)
    except FileNotFoundError:
        raise FileNotFoundError(f"{uri}: no such spec file") from None


class LocalEngine:
    """The local engine of one workspace (``benchctl run --out``): campaigns' run state under
    ``<workspace>/campaigns/<id>``, results in ``<workspace>/lake``, pool locks in ``<workspace>/locks``."""

    name = "local"

    def __init__(self, workspace: Path, notify: Callable[[str], None] | None = None,
                 ceilings: Ceilings | None = None) -> None:
        from benchctl.local import modeldir
        from benchctl.local.load import LocalLoad
        from benchctl.local.serving import LocalServing
        from benchctl.local.smoke import LocalSmoke

        modeldir.ensure_model_dir()
        self.workspace = Path(workspace).resolve()
        self.ceilings = ceilings  # the deployment's ceilings the Plan state holds specs to (None: none)
        self.runs_uri = str(self.workspace / CAMPAIGNS_DIR)
        self.lake_uri = str(self.workspace / LAKE_DIR)
        self.pool = LocalPool()
        self.load = LocalLoad(self.workspace / CACHE_DIR)  # the load runner's log goes there
        self.smoke = LocalSmoke()
        self.lake = LocalLake(self.lake_uri)
        self.tokenizer = modeldir.TOKENIZER_NAME
        self.versions = versions()
        self.locks = FileLocks(self.workspace / LOCKS_DIR, notify=notify)  # shared by the workspace's campaigns
        self._serving: dict[str, LocalServing] = {}
        self._query: QueryEngine | None = None
        self.report = LocalReport(Path(self.lake_uri), self.run_dir)

    def run_dir(self, campaign_id: str) -> Path:
        return Path(self.runs_uri) / campaign_id

    def query(self) -> QueryEngine:
        """The run's one DuckDB engine (the report's views, the report, what `benchctl run` prints)."""
        if self._query is None:
            self._query = QueryEngine(Path(self.lake_uri))
        return self._query

    def providers(self, ctx: Ctx) -> Providers:
        from benchctl.local.serving import LocalServing

        run_dir = Path(ctx.run_uri)
        serving = self._serving.setdefault(ctx.run_uri, LocalServing(run_dir, twin_store=self.workspace))
        return Providers(
            engine=self.name, state=RunState(LocalRunStore(run_dir)), pools=self.pool, serving=serving,
            load=self.load, smoke=self.smoke, lake=self.lake, read_uri=read_file_uri, tokenizer=self.tokenizer,
            report=self.report, locks=self.locks, versions=dict(self.versions), ceilings=self.ceilings,
            ranker=cached_ranker(self.workspace),
        )


def prepare(spec_path: Path, out: Path, campaign_id: str | None = None,
            ceilings: Ceilings | None = None) -> tuple[StartInput, CampaignSpec]:
    """Validate and plan before anything starts (a campaign id not in its normal form: ValueError; a bad spec,
    one over budget or past the ``ceilings``: SpecError; nothing made); the workspace's run directory of the
    campaign and the lake. The start input every engine starts with."""
    if campaign_id is not None:  # before anything is read or made: `../../x` must never become a path
        check_campaign_id(campaign_id, "--campaign-id")
    spec = load_placeable_spec(spec_path)
    plan = plan_campaign(spec, "local")
    if plan.budget_problems:
        raise SpecError(str(spec_path), plan.budget_problems)
    if ceilings is not None:  # the local engine has no history quota: no poll period to reckon it at
        from benchctl.planning import ceilings as ceiling_rules

        over = ceiling_rules.check(spec, plan, ceilings)
        if over:
            raise CeilingExceeded(str(spec_path), ceiling_rules.lines(over))
    from benchctl.local.twins import named_profile_problems

    problems = named_profile_problems(spec, out)  # a twin the spec names must be in the workspace's store
    if problems:
        raise SpecError(str(spec_path), problems)
    cid = campaign_id or new_campaign_id(spec.name)
    run_dir = out / CAMPAIGNS_DIR / cid
    if run_dir.exists():
        raise FileExistsError(f"{run_dir} already exists: choose another --campaign-id")
    run_dir.mkdir(parents=True)
    (out / LAKE_DIR).mkdir(parents=True, exist_ok=True)
    return StartInput(spec_uri=Path(spec_path).resolve().as_uri(), campaign_id=cid), spec


def write_predictions(spec: CampaignSpec, out: Path, campaign_id: str, progress: Progress) -> int:
    """aiconfigurator's GPU predictions for the sweep steps, into the lake's ``predictions`` table, so
    the report can put predicted (GPU) beside measured (here: simulated) figures. Best effort: a
    missing or failing predictor is noted, never fatal.

    Predictions are deterministic for the same spec and aiconfigurator version, so they are kept in
    ``<workspace>/cache/predictions/<key>.json`` and reused (a repeated `make smoke` skips seconds of
    estimates)."""
    try:
        from benchctl.forecast.predict import predict_plan, source
    except ImportError as err:
        progress.note(f"no predictions: {err}")
        return 0
    key = hashlib.sha256(f"{spec_hash(spec)} {source()}".encode()).hexdigest()[:24]
    cached = out / CACHE_DIR / "predictions" / f"{key}.json"
    try:
        rows = [{**r, "campaign_id": campaign_id} for r in json.loads(cached.read_text(encoding="utf-8"))]
    except (FileNotFoundError, ValueError, TypeError):
        try:
            rows = predict_plan(spec, plan_campaign(spec, "local"), campaign_id)
        except Exception as err:  # a prediction is a bonus: the campaign must not fail for it
            progress.note(f"no predictions: aiconfigurator failed: {type(err).__name__}: {err}")
            return 0
        atomic_write(cached, json.dumps(rows, default=str))
    if rows:
        LocalLake(out / LAKE_DIR).write("predictions", rows, part_name="predictions")
        progress.note(f"predictions: {len(rows)} sweep steps rated by aiconfigurator (PREDICTED for the pool's GPU)")
    return len(rows)


def campaign_running(run_dir: Path) -> bool:
    """A local campaign runs while its runner process (pid and start time) lives and no result was written."""
    state = RunState(LocalRunStore(run_dir))
    if state.result() is not None:
        return False
    runner = state.runner()
    if runner is None:
        return False
    started = processes.live_start_time(runner.pid)
    if started is None:
        return False
    if isinstance(runner.start_time, int):
        return started == runner.start_time  # the same process, not a reused pid
    cmdline = Path(f"/proc/{runner.pid}/cmdline")  # a record without a start time: judge by the command line
    return not cmdline.exists() or b"benchctl" in cmdline.read_bytes() or b"pytest" in cmdline.read_bytes()


def sweep_workspace(out: Path, *, dry_run: bool = False) -> list[dict[str, Any]]:
    """`benchctl sweep`: tear down what dead local campaigns of this workspace left behind."""
    from benchctl.campaign.sweep import sweep

    campaigns = out / CAMPAIGNS_DIR
    ids = [d.name for d in campaigns.iterdir() if d.is_dir()] if campaigns.is_dir() else []
    engine = LocalEngine(out)

    def providers_for(cid: str) -> tuple[Providers, Ctx]:
        ctx = Ctx(campaign_id=cid, run_uri=str(engine.run_dir(cid)), lake_uri=engine.lake_uri, poll_seconds=1,
                  fail_at=None)
        return engine.providers(ctx), ctx

    return sweep(ids, providers_for, lambda cid: campaign_running(campaigns / cid), dry_run=dry_run)


def run_campaign(
    spec_path: Path,
    out: Path,
    *,
    campaign_id: str | None = None,
    fail_at: str | None = None,
    poll_seconds: int = 1,
    progress: Progress | None = None,
    ceilings: Ceilings | None = None,
) -> RunResult:
    """Validate, plan, predict and run one local campaign; interrupts (SIGINT/SIGTERM/SIGHUP) are
    honoured from the first line on: one before the execution starts makes its Plan end ``aborted``."""
    from benchctl.campaign import asl

    if fail_at is not None and fail_at not in asl.task_states():
        raise ValueError(f"--fail-at {fail_at!r} is not a Task state of the campaign ASL; valid: {asl.task_states()}")
    if not 1 <= poll_seconds <= 3600:
        raise ValueError(f"--poll-seconds {poll_seconds}: must be 1..3600")
    with Interrupts() as interrupts:
        prepared, spec = prepare(spec_path, out, campaign_id, ceilings)
        cid = str(prepared.campaign_id)
        start = StartInput(spec_uri=prepared.spec_uri, campaign_id=cid, poll_seconds=poll_seconds, fail_at=fail_at)
        progress = progress or Progress()
        from benchctl.local.cpu_engine import any_cpu_engine

        if any_cpu_engine(spec.experiments, {p.name: p for p in spec.pools}):  # no GPU to predict, no mocker to time
            progress.note("the CPU engine: Dynamo's vLLM worker on vLLM's CPU build, a tiny random-weight model "
                          "(SIMULATED (CPU engine)); no GPU predictions, no twins")
        elif not interrupts.count:
            write_predictions(spec, out, cid, progress)
            if not interrupts.count:
                from benchctl.local.twins import write_twins

                write_twins(spec, out.resolve(), cid, progress)  # the mocker workers' timing, named before they start
        engine = LocalEngine(out, notify=progress.note, ceilings=ceilings)
        run_dir = engine.run_dir(cid)
        progress.note(f"campaign {cid}: run state in {run_dir}, results in {engine.lake_uri}")
        state = RunState(LocalRunStore(run_dir))
        state.save_runner(RunnerRecord(  # what `benchctl sweep` checks for liveness
            pid=os.getpid(), start_time=processes.proc_start_time(os.getpid()), started=datetime.now(UTC).isoformat()))
        try:
            if not interrupts.count:
                engine.load.prepare()  # the load runner warms up while the first experiment deploys
            result = execute(engine=engine, start=start, progress=progress,
                             on_force_stop=processes.stop_all_started, interrupts=interrupts)
        finally:
            engine.load.close()  # the load runner (if still up) and the dataset directory it gave AIPerf
            leftovers = processes.stop_all_started()
            if leftovers:
                progress.note(f"safety net stopped {len(leftovers)} leftover process(es): "
                              + ", ".join(r["name"] for r in leftovers))
        state.save_result(ResultRecord(status=result.status, error=result.error, cause=result.cause,
                                       elapsed_s=round(result.elapsed_s, 2)))
        result.query = engine.query
    return result
