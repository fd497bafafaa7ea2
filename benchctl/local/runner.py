"""Wiring of the local engine: the providers (real Dynamo + AIPerf processes, local lake and pool)
and ``run_campaign``, which validates, plans, executes the ASL and returns where results are.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchctl.campaign import Ctx, Providers, new_campaign_id
from benchctl.errors import SpecError
from benchctl.local.engine import Interrupts, Progress, RunResult, execute, task_states
from benchctl.local.pool import LocalPool
from benchctl.locks import FileLocks
from benchctl.plan import plan_campaign
from benchctl.query import REPORT_VIEWS
from benchctl.runstore import LocalRunStore, atomic_write_text
from benchctl.spec import load_spec, spec_hash


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("aiperf", "ai-dynamo", "ai-dynamo-runtime", "benchctl", "moto", "duckdb", "pyarrow"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def report_views(lake: Path, campaign_id: str, out_dir: Path) -> dict[str, int]:
    """Compute this campaign's comparison views; write each as CSV and JSON into out_dir."""
    from benchctl.lake import check_path_value
    from benchctl.query import QueryEngine, format_result

    check_path_value("campaign_id", campaign_id)  # path-safe characters only: safe to quote
    engine = QueryEngine(lake)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for view in [*REPORT_VIEWS, "v_step_stats", "v_step_cache"]:
        cols, rows = engine.run(f"SELECT * FROM {view} WHERE campaign_id = '{campaign_id}'")  # noqa: S608
        (out_dir / f"{view}.csv").write_text(format_result(cols, rows, "csv"), encoding="utf-8")
        (out_dir / f"{view}.json").write_text(format_result(cols, rows, "json"), encoding="utf-8")
        counts[view] = len(rows)
    from benchctl.report import write_report

    write_report(lake, campaign_id, out_dir / "report.html", "html")  # the one file a person opens
    return counts


class LocalProviders:
    """Builds the providers of one local campaign (one instance per run)."""

    def __init__(self, run_dir: Path, lake: Path, notify: Callable[[str], None] | None = None) -> None:
        from benchctl.lake import LocalLake
        from benchctl.local import modeldir
        from benchctl.local.load import LocalLoad
        from benchctl.local.serving import LocalServing, smoke_test

        modeldir.ensure_model_dir()
        self.run_dir = run_dir
        self.lake_root = lake
        self.pool = LocalPool()
        self.serving = LocalServing(run_dir)
        self.load = LocalLoad()
        self.lake = LocalLake(lake)
        self.tokenizer = modeldir.TOKENIZER_NAME
        self._smoke = smoke_test
        self.versions = versions()
        self.locks = FileLocks(run_dir.parent.parent / "locks", notify=notify)  # <workspace>/locks: shared

    def smoke(self, state: dict[str, Any], n: int, max_tokens: int) -> dict[str, Any]:
        return self._smoke(state["url"], state["model"], n=n, max_tokens=max_tokens)

    def report(self, campaign_id: str) -> dict[str, int]:
        return report_views(self.lake_root, campaign_id, self.run_dir / "report")

    def __call__(self, ctx: Ctx) -> Providers:
        return Providers(
            engine="local",
            store=LocalRunStore(Path(ctx.run_uri)),
            pools=self.pool,
            serving=self.serving,
            load=self.load,
            lake=self.lake,
            tokenizer=self.tokenizer,
            smoke=self.smoke,
            report=self.report,
            versions=self.versions,
            locks=self.locks,
        )


def prepare(spec_path: Path, out: Path, campaign_id: str | None = None) -> tuple[str, Path, Path]:
    """Validate and plan before anything starts; keep the spec (raw and normalised) with the run."""
    text = spec_path.read_bytes()
    spec = load_spec(spec_path)
    plan = plan_campaign(spec, "local")
    if plan.budget_problems:
        raise SpecError(str(spec_path), plan.budget_problems)
    cid = campaign_id or new_campaign_id(spec.name)
    run_dir = out / "campaigns" / cid
    if run_dir.exists():
        raise FileExistsError(f"{run_dir} already exists: choose another --campaign-id")
    lake = out / "lake"
    run_dir.mkdir(parents=True)
    lake.mkdir(parents=True, exist_ok=True)
    (run_dir / f"spec.source{spec_path.suffix or '.yaml'}").write_bytes(text)
    store = LocalRunStore(run_dir)
    store.write_json("spec.json", spec.model_dump(mode="json"))
    store.write_json("spec_meta.json", {"source": str(spec_path), "spec_hash": spec_hash(spec)})
    return cid, run_dir, lake


def write_predictions(run_dir: Path, lake: Path, campaign_id: str, progress: Progress) -> int:
    """aiconfigurator's GPU predictions for the sweep steps, into the lake's ``predictions`` table, so
    the report can put predicted (GPU) beside measured (here: simulated) figures. Best effort: a
    missing or failing predictor is noted, never fatal.

    Predictions are deterministic for the same spec and aiconfigurator version, so they are kept in
    ``<workspace>/cache/predictions/<key>.json`` and reused (a repeated `make smoke` skips seconds of
    estimates)."""
    import hashlib

    from benchctl.lake import LocalLake

    try:
        from benchctl.predict import predict_plan, source
    except ImportError as err:
        progress.note(f"no predictions: {err}")
        return 0
    store = LocalRunStore(run_dir)
    spec = load_spec_from_store(store)
    key = hashlib.sha256(f"{spec_hash(spec)} {source()}".encode()).hexdigest()[:24]
    cached = run_dir.parent.parent / "cache" / "predictions" / f"{key}.json"
    try:
        rows = [{**r, "campaign_id": campaign_id} for r in json.loads(cached.read_text(encoding="utf-8"))]
    except (FileNotFoundError, ValueError, TypeError):
        try:
            rows = predict_plan(spec, plan_campaign(spec, "local"), campaign_id)
        except Exception as err:  # a prediction is a bonus: the campaign must not fail for it
            progress.note(f"no predictions: aiconfigurator failed: {type(err).__name__}: {err}")
            return 0
        atomic_write_text(cached, json.dumps(rows, default=str))
    if rows:
        LocalLake(lake).write("predictions", rows, part_name="predictions")
        progress.note(f"predictions: {len(rows)} sweep steps rated by aiconfigurator (PREDICTED for the pool's GPU)")
    return len(rows)


def load_spec_from_store(store: LocalRunStore) -> Any:
    from benchctl.spec import parse_spec

    return parse_spec(store.read_json("spec.json"), f"{store.uri}/spec.json")


def campaign_running(run_dir: Path) -> bool:
    """A local campaign runs while its runner process (``runner.json``: pid and start time) lives and
    no result was written."""
    from benchctl.local import processes

    if (run_dir / "result.json").exists():
        return False
    try:
        runner = json.loads((run_dir / "runner.json").read_text(encoding="utf-8"))
        pid = int(runner["pid"])
    except (FileNotFoundError, KeyError, ValueError, TypeError):
        return False
    started = processes.live_start_time(pid)
    if started is None:
        return False
    if isinstance(runner.get("start_time"), int):
        return started == runner["start_time"]  # the same process, not a reused pid
    cmdline = Path(f"/proc/{pid}/cmdline")  # a record without a start time: judge by the command line
    return not cmdline.exists() or b"benchctl" in cmdline.read_bytes() or b"pytest" in cmdline.read_bytes()


def sweep_workspace(out: Path, *, dry_run: bool = False) -> list[dict[str, Any]]:
    """`benchctl sweep`: tear down what dead local campaigns of this workspace left behind."""
    from benchctl.sweep import sweep

    campaigns = out / "campaigns"
    ids = [d.name for d in campaigns.iterdir() if d.is_dir()] if campaigns.is_dir() else []

    def providers_for(cid: str) -> tuple[Providers, Ctx]:
        run_dir = campaigns / cid
        ctx = Ctx(campaign_id=cid, run_uri=str(run_dir), lake_uri=str(out / "lake"), poll_seconds=1, fail_at=None)
        return LocalProviders(run_dir, out / "lake")(ctx), ctx

    return sweep(ids, providers_for, lambda cid: campaign_running(campaigns / cid), dry_run=dry_run)


def run_campaign(
    spec_path: Path,
    out: Path,
    *,
    campaign_id: str | None = None,
    fail_at: str | None = None,
    poll_seconds: int = 1,
    progress: Progress | None = None,
) -> RunResult:
    """Validate, plan, predict and run one local campaign; interrupts (SIGINT/SIGTERM/SIGHUP) are
    honoured from the first line on: one before the execution starts makes its Plan end ``aborted``."""
    from benchctl.local import processes

    if fail_at is not None and fail_at not in task_states():
        raise ValueError(f"--fail-at {fail_at!r} is not a Task state of the campaign ASL; valid: {task_states()}")
    with Interrupts() as interrupts:
        cid, run_dir, lake = prepare(spec_path, out, campaign_id)
        progress = progress or Progress()
        if not interrupts.count:
            write_predictions(run_dir, lake, cid, progress)
        progress.note(f"campaign {cid}: run state in {run_dir}, results in {lake}")
        providers = LocalProviders(run_dir, lake, notify=progress.note)
        atomic_write_text(run_dir / "runner.json", json.dumps(  # what `benchctl sweep` checks for liveness
            {"pid": os.getpid(), "start_time": processes.proc_start_time(os.getpid()),
             "started": datetime.now(UTC).isoformat()}))
        try:
            result = execute(
                campaign_id=cid, run_dir=run_dir, lake=lake, providers=providers, poll_seconds=poll_seconds,
                fail_at=fail_at, progress=progress, on_force_stop=processes.stop_all_started,
                interrupts=interrupts,
            )
        finally:
            leftovers = processes.stop_all_started()
            if leftovers:
                progress.note(f"safety net stopped {len(leftovers)} leftover process(es): "
                              + ", ".join(r["name"] for r in leftovers))
        atomic_write_text(run_dir / "result.json", json.dumps(
            {"status": result.status, "error": result.error, "cause": result.cause,
             "elapsed_s": round(result.elapsed_s, 2)}, indent=2))
    return result
