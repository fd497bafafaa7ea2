"""``--fail-at`` every Task state of the campaign ASL: the real state machine (moto's interpreter, the
``lambdas/`` handlers, ``benchctl.campaign``, LocalRunStore/LocalLake/LocalPool) with fake serving and
load (``tests/fakes/ports.py``). Each run must end FAILED through teardown, leave nothing running,
record the failure in the lake and keep what completed before it.

The states are enumerated from the ASL file (``task_states()``), so a new state cannot be forgotten:
a state reached on the normal path is failed directly; a state reached only on a failure path
(derived from the ASL too) is failed after a primary failure the fakes cause (a Plan preflight
refusal for the states behind Plan's Catch; otherwise the serving of the second experiment dying
while its step runs, as the e2e test does with SIGKILL). The test fails if the state was not reached.

Retry intervals of the ASL are recorded but not slept (moto's retrier sleeps with ``time.sleep``);
the number of attempts is still the ASL's.
"""

from __future__ import annotations

import io
import json
import types
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from benchctl.campaign import asl
from benchctl.campaign.context import StartInput
from benchctl.campaign.runstate import RunState
from benchctl.local.engine import Progress, RunResult, execute
from benchctl.local.runner import prepare
from benchctl.local.runstore import LocalRunStore
from tests.fakes.ports import FakeWorld

ROOT = Path(__file__).resolve().parents[2]
ASL = asl.load()
CID = "failat"


# ------------------------------------------------------------------------------------------ the ASL


def _attempts(state: str) -> int:
    """How often the ASL runs a state whose handler always fails with InjectedFailure."""
    for r in asl.state(state, ASL).get("Retry", []):  # the first retrier that matches is the one used
        if {"States.ALL", "InjectedFailure"} & set(r["ErrorEquals"]):
            return 1 + int(r.get("MaxAttempts", 3))
    return 1


STATES = asl.task_states(ASL)
NORMAL = asl.normal_path_states(ASL)
FAILURE_ONLY = [s for s in STATES if s not in NORMAL]
BEHIND_PLAN = asl.catch_targets(ASL["StartAt"], ASL)


def test_states_are_classified_from_the_asl() -> None:
    assert ASL["StartAt"] == "Plan" and STATES[0] == "Plan"
    # the failure-path-only states as of this writing; a new one is covered automatically below
    assert {"StopLoadAfterFailure", "TeardownAfterFailure", "AbortCampaign", "RecordPlanFailure"} <= set(FAILURE_ONLY)
    assert "RecordPlanFailure" in BEHIND_PLAN and "AbortCampaign" not in BEHIND_PLAN


# --------------------------------------------------------------------------------------- the run


class Recorder(Progress):
    """The engine's progress hook sees every handler invocation: keep (state, experiment, step)."""

    def __init__(self) -> None:
        super().__init__(out=io.StringIO())
        self.calls: list[tuple[str, str | None, str | None]] = []

    def show(self, event: dict[str, Any]) -> None:
        self.calls.append((event.get("state") or "?", event.get("experiment"), event.get("step")))
        super().show(event)

    def count(self, state: str) -> int:
        return sum(1 for s, _, _ in self.calls if s == state)


def tiny_spec(tmp_path: Path, concurrency: tuple[int, ...] = (1,)) -> Path:
    """examples/smoke.yaml cut down: both modes, one concurrency step of 4 requests, warm-up of 2."""
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8"))
    data["workloads"] = [
        {"kind": "concurrency_sweep", "name": "concurrency-sweep", "concurrency": list(concurrency), "isl": 256,
         "osl": 32, "request_count": 4}
    ]
    data["warmup"] = {"request_count": 2}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _local_report(out: Path, cid: str) -> dict[str, str]:
    """The local engine's own ``ReportPort``: views and report.html into ``<run dir>/report``."""
    from benchctl.local.report import LocalReport

    return LocalReport(out / "lake", lambda c: out / "campaigns" / c).write(cid)


def receipt(lake: Path) -> list[dict[str, Any]]:
    """The teardown receipt as the lake holds it: one row per resource, with its experiment."""
    return [{"experiment": r["experiment"], **json.loads(r["detail_json"])} for r in read_table(lake, "timeline")
            if r["event"] == "teardown_receipt"]


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, fail_at: str | None,
        world_kw: dict[str, Any] | None = None, report: bool = False,
        concurrency: tuple[int, ...] = (1,)) -> tuple[RunResult, FakeWorld, Recorder, list[float]]:
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    slept: list[float] = []
    monkeypatch.setattr(retrier_decl, "time", types.SimpleNamespace(sleep=slept.append))
    start, _ = prepare(tiny_spec(tmp_path, concurrency), tmp_path / "out", CID)
    if report:  # the local engine's own report: views and report.html into <run dir>/report
        world_kw = {**(world_kw or {}), "report": lambda cid: _local_report(tmp_path / "out", cid)}
    world = FakeWorld(tmp_path / "out" / "lake", **(world_kw or {}))
    rec = Recorder()
    result = execute(engine=world, start=StartInput(start.spec_uri, CID, poll_seconds=1, fail_at=fail_at),
                     progress=rec)
    return result, world, rec, slept


def read_table(lake: Path, table: str) -> list[dict[str, Any]]:
    rows = []
    for f in sorted((lake / table).rglob("*.parquet")) if (lake / table).is_dir() else []:
        if f.name.startswith("."):
            continue
        parts = dict(p.split("=", 1) for p in f.relative_to(lake / table).parts[:-1])
        rows += [{**r, **parts} for r in pq.read_table(f).to_pylist()]
    return rows


def raw_dir(lake: Path, experiment: str, step_id: str) -> Path:
    return lake / "raw" / f"campaign_id={CID}" / f"experiment={experiment}" / f"step_id={step_id}"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str | None, str | None]]:
    """The happy path with the fakes: it succeeds, and its order of invocations tells each fail-at
    run which steps completed before its state."""
    tmp = tmp_path_factory.mktemp("baseline")
    with pytest.MonkeyPatch.context() as mp:
        result, world, rec, slept = run(tmp, mp, fail_at=None)
    assert result.status == "SUCCEEDED", (result.error, result.cause, rec.out.getvalue())
    assert world.leftovers() == {"deployments": [], "prepared": [], "loads": [], "pools": []}
    assert slept == []  # nothing retried
    steps = read_table(tmp / "out" / "lake", "steps")
    assert sorted((s["experiment"], s["status"]) for s in steps) == [("agg", "succeeded"), ("disagg", "succeeded")]
    assert [c["status"] for c in read_table(tmp / "out" / "lake", "campaigns")] == ["succeeded"]
    # every Task state of the normal path ran, and only those
    assert {s for s, _, _ in rec.calls} == {s for s in STATES if s in NORMAL}
    return rec.calls


def test_the_fakes_run_the_campaign_to_success(baseline: list[tuple[str, str | None, str | None]]) -> None:
    assert baseline[0][0] == "Plan" and baseline[-1][0] == "Report"


def _completed_before(baseline: list[tuple[str, str | None, str | None]], state: str) -> set[tuple[str, str]]:
    """Steps ingested before ``state`` first runs on the happy path: IngestPreviousStep of a step ingests the
    step launched before it in its experiment, IngestLastStep the experiment's last launched step."""
    done: set[tuple[str, str]] = set()
    launched: dict[str, list[str]] = {}
    for s, exp, step in baseline:
        if s == state:
            break
        if s == "LaunchLoad" and exp and step and step not in launched.get(exp, []):
            launched.setdefault(exp, []).append(step)
        mine = launched.get(exp or "", [])
        if s == "IngestPreviousStep" and exp and step and mine.index(step) > 0:
            done.add((exp, mine[mine.index(step) - 1]))
        if s == "IngestLastStep" and exp and mine:
            done.add((exp, mine[-1]))
    return done


# ------------------------------------------------------------------------------------- per state


def _injection(state: str, baseline: list[tuple[str, str | None, str | None]]) -> tuple[str | None, dict[str, Any]]:
    """The primary failure that leads to ``state`` (None for a state on the normal path, failed directly) and
    the fakes' settings that cause it."""
    if state in FAILURE_ONLY and state in BEHIND_PLAN:
        return "Plan", {"preflight_missing": ["model volume claim 'model-cache' (fake preflight)"]}
    if state in FAILURE_ONLY:
        # the second experiment's serving dies while its step runs: CheckLoad fails (ServingFailed)
        step_id = next(st for s, exp, st in baseline if s == "LaunchLoad" and exp == "disagg")
        return "CheckLoad", {"kill_on_launch": {f"disagg-{step_id}": "disagg"}}
    return None, {}


FailedRun = tuple[RunResult, FakeWorld, Recorder, Path, "str | None"]


@pytest.fixture(scope="module")
def failed_run(tmp_path_factory: pytest.TempPathFactory,
               baseline: list[tuple[str, str | None, str | None]]) -> Any:
    """``failed_run(state)``: the run failing at ``state`` (with its primary failure, if any), made once per
    module: every test about that ending asserts on the same run (result, fakes, invocations, its directory).
    Runs inside the calling test, so the tier's autouse fixtures apply to it."""
    runs: dict[str, FailedRun] = {}

    def get(state: str) -> FailedRun:
        if state not in runs:
            primary, world_kw = _injection(state, baseline)
            tmp = tmp_path_factory.mktemp(f"failat-{state}")
            with pytest.MonkeyPatch.context() as mp:
                result, world, rec, _slept = run(tmp, mp, fail_at=state, world_kw=world_kw, report=True)
            runs[state] = (result, world, rec, tmp, primary)
        return runs[state]

    return get


# the failure-path states reached after a CheckLoad failure whose cleanup the second test below also holds
CLEANUP = [s for s in FAILURE_ONLY if s not in BEHIND_PLAN and s != "AbortCampaign"]
SHARED = {*CLEANUP, "CheckReady"}  # the states whose run more than one test asserts on


def _together(state: str, value: Any = None) -> Any:
    """The tests of one state's run are collected next to each other (``same_run``, tests/unit/conftest.py), so
    xdist's load scheduling, which hands each worker consecutive tests, nearly always gives them one worker and
    the run is made once; a test that lands elsewhere makes the same run itself."""
    value = state if value is None else value
    return pytest.param(value, marks=pytest.mark.same_run(f"failat-{state}")) if state in SHARED else value


@pytest.mark.parametrize("state", [_together(s) for s in STATES])
def test_fail_at_state_tears_down_and_records_the_failure(
    state: str, failed_run: Any, baseline: list[tuple[str, str | None, str | None]],
) -> None:
    result, world, rec, tmp, primary = failed_run(state)
    lake = tmp / "out" / "lake"
    run_dir = tmp / "out" / "campaigns" / CID
    log = rec.out.getvalue()

    # the state was reached and failed as often as its Retry allows; the execution ends FAILED
    assert rec.count(state) == _attempts(state), (state, rec.calls, log)
    assert result.status == "FAILED", (state, result.error, result.cause, log)
    assert f"failure injected at state {state}" in log

    # teardown ran: pools back at their sizes, every deployment torn down, no load left running
    assert world.leftovers() == {"deployments": [], "prepared": [], "loads": [], "pools": []}, (state, log)
    assert world.pool_sizes_now() == world.initial_sizes
    deployed = set(world.serving.deploy_calls)
    assert set(world.serving.teardown_calls) >= deployed
    events = {(r["experiment"], r["event"]) for r in read_table(lake, "timeline")}
    scaled = {exp for exp, ev in events if ev == "scale_requested"}
    for exp in scaled | deployed:
        assert (exp, "teardown_done") in events, (state, exp, events)
    for exp in scaled:  # restored, or kept warm for the next experiment (which then restores it)
        assert {(exp, "pool_restored"), (exp, "pool_handed_over")} & events, (state, exp, events)
    assert not scaled or any(ev == "pool_restored" for _, ev in events), events
    # a failure stops the campaign: no experiment after the failing one is started
    if primary is None and state not in ("Plan", "Report"):
        assert deployed <= {"agg"} and scaled <= {"agg"}, (state, deployed, scaled)

    # the first failure is kept in the run store, with its state
    failure = RunState(LocalRunStore(run_dir)).failure()
    assert failure is not None and failure.state == (primary or state)
    assert failure.error == {None: "InjectedFailure", "Plan": "PreflightFailed", "CheckLoad": "ServingFailed"}[primary]

    campaigns = read_table(lake, "campaigns")
    if state in ("AbortCampaign", "RecordPlanFailure"):
        # The state that records the failure is the one failing: the ASL ends in CampaignFailedUntorn
        # (Error AbortFailed, "run the sweeper"), and what it recorded before stays as it was.
        assert result.error == "AbortFailed", (result.error, result.cause)
        if state == "RecordPlanFailure":
            # Plan refused before writing anything, nothing was created; the report step records the ending
            assert [(c["status"], c["failed_state"]) for c in campaigns] == [("failed-untorn", "Plan")], campaigns
            assert world.serving.deploy_calls == [] and not scaled
        else:
            assert [c["status"] for c in campaigns] != ["succeeded"]
    else:
        # the failure (state, error, cause) is in the lake
        assert len(campaigns) == 1, campaigns
        row = campaigns[0]
        assert row["status"] == "failed", row
        assert row["failed_state"] == (primary or state), row
        assert row["error"] and row["cause"], row
        if primary is None:
            assert row["error"] == "InjectedFailure" and f"state {state}" in row["cause"], row
            assert result.error == "InjectedFailure"
        if primary != "Plan" and state != "Plan":  # RecordPlanFailure writes the campaign row only; the abort
            # path also a timeline event
            assert ("_campaign", "failed") in events

    # steps completed before the failure keep their rows and their raw artifacts
    expected = _completed_before(baseline, state) if primary is None else (
        set() if primary == "Plan" else {(e, s) for e, s in _completed_before(baseline, "Report") if e == "agg"})
    steps = read_table(lake, "steps")
    assert {(s["experiment"], s["step_id"]) for s in steps if s["status"] == "succeeded"} == expected, (state, steps)
    assert {(r["experiment"], r["step_id"]) for r in read_table(lake, "requests")} == expected
    for exp, step_id in expected:
        raw = raw_dir(lake, exp, step_id)
        assert (raw / "profile_export.jsonl").is_file() and (raw / "profile_export_aiperf.json").is_file()
    # a load that was launched keeps its raw artifacts too, ingested or not
    for job in world.load.launch_calls:
        exp, step_id = job.split("-", 1)
        assert (raw_dir(lake, exp, step_id) / "profile_export_aiperf.json").is_file(), job
    # every lake write was atomic: no temporary file left anywhere
    assert not [p for p in lake.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]

    # every ending has its report: how it ended, in which state and why, first; and the teardown receipt
    html = (run_dir / "report" / "report.html").read_text(encoding="utf-8")
    if state == "ReportFailure":  # the report step is what failed: the campaign still reached its failed end,
        # and the engine wrote the report after it, saying so in the timeline
        assert ("_campaign", "cleanup_error") in {(r["experiment"], r["event"]) for r in read_table(lake, "timeline")}
        assert "the report step did not write the report: writing it now" in log
    ending = "failed-untorn" if state in ("AbortCampaign", "RecordPlanFailure") else "failed"
    head = html[html.index('<section id="ending"'):html.index('<section id="recommendations"')]
    assert f'data-status="{ending}"' in head and f"in state {primary or state}" in head, head
    assert failure.error in head and "PARTIAL" in head, head
    # the receipt: every resource created, read back after teardown as gone or restored (or kept warm for the
    # next experiment, which then restores it), in the lake and in the report
    rows = receipt(lake)
    assert {r["experiment"] for r in rows} == scaled | deployed, rows
    for exp in deployed:
        assert any(r["experiment"] == exp and r["kind"] == "deployment" and r["state"] == "gone" for r in rows), rows
    for exp in scaled:
        pool_rows = [r for r in rows if r["experiment"] == exp and r["kind"].startswith("pool")]
        assert pool_rows and all(r["state"] in ("restored", "handed over") for r in pool_rows), pool_rows
    restored = [r for r in rows if r["state"] == "restored"]
    assert all(r["now"] == r["recorded"] and r["billing"] == f"ended by {r['read_at']}" for r in restored), restored
    assert all(r["state"] in ("gone", "restored", "handed over") for r in rows), rows
    assert 'data-receipt-complete="true"' in head and head.count("<tr>") == len(rows) + (1 if rows else 0), head


@pytest.mark.parametrize("state", [_together(s) for s in CLEANUP])
def test_failed_cleanup_keeps_the_root_cause_in_the_lake(state: str, failed_run: Any) -> None:
    """The second experiment's serving dies (CheckLoad fails), then the cleanup state itself fails."""
    result, world, _rec, tmp, primary = failed_run(state)
    step_id = next(job for job in world.kill_on_launch if job.startswith("disagg-")).removeprefix("disagg-")
    assert primary == "CheckLoad" and world.kill_on_launch == {f"disagg-{step_id}": "disagg"}, world.kill_on_launch
    assert result.status == "FAILED"
    (row,) = read_table(tmp / "out" / "lake", "campaigns")
    # one failure, described consistently: the state, error and cause of what went wrong first
    assert (row["status"], row["failed_state"], row["error"]) == ("failed", "CheckLoad", "ServingFailed"), row
    assert "fake deployment disagg" in row["cause"], row


def test_a_step_that_completed_is_kept_when_the_next_step_fails_before_ingesting_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step n is ingested while step n+1 loads (IngestPreviousStep runs after n+1's LaunchLoad): when n+1's
    launch fails (the budget guard refusing it, the load's own start), the failure path still ingests n,
    which ended on its own, before the experiment is torn down."""
    result, world, rec, _ = run(tmp_path, monkeypatch, fail_at=None, concurrency=(1, 2),
                                world_kw={"refuse_launch": {"agg-concurrency-sweep-c2-r0": "the launch was refused"}})
    assert result.status == "FAILED", rec.out.getvalue()
    assert not any(world.leftovers().values()), world.leftovers()
    steps = {(s["experiment"], s["step_id"]): s["status"] for s in read_table(tmp_path / "out" / "lake", "steps")}
    assert steps == {("agg", "concurrency-sweep-c1-r0"): "succeeded"}, steps
    assert ("IngestAfterFailure", "agg", "concurrency-sweep-c2-r0") in rec.calls
    # the step that never ran has no rows, and its record says it was not ingested
    assert not any(s == "IngestPreviousStep" and st == "concurrency-sweep-c2-r0" for s, _, st in rec.calls)



def _sweep_dry_run(tmp_path: Path, world: FakeWorld) -> dict[str, Any]:
    from benchctl.campaign.context import Ctx
    from benchctl.campaign.sweep import sweep

    ctx = Ctx(CID, str(tmp_path / "out" / "campaigns" / CID), str(tmp_path / "out" / "lake"), 1, None)
    (entry,) = sweep([CID], lambda _cid: (world.providers(ctx), ctx), lambda _cid: False, dry_run=True)
    return entry


@pytest.mark.parametrize("restore_fails", [_together("CheckReady", False), True])
def test_the_receipt_and_the_sweepers_dry_run_agree(
        restore_fails: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failed_run: Any) -> None:
    """A failed campaign whose teardown restored everything: its receipt is complete and `benchctl sweep
    --dry-run` finds nothing left. One whose pool could not be restored (every attempt refused): the campaign
    ends failed-untorn, its report says so, the receipt reads the pool back as still there, and the sweeper
    would tear down exactly the experiments the receipt names."""
    if restore_fails:
        def refuse(record: dict[str, Any]) -> dict[str, Any]:
            raise RuntimeError(f"pool {record['pool']}: restore refused (test)")

        original = FakeWorld.__post_init__

        def post_init(self: FakeWorld) -> None:
            original(self)
            self.pool.restore = refuse  # type: ignore[method-assign]

        monkeypatch.setattr(FakeWorld, "__post_init__", post_init)
        result, world, rec, _ = run(tmp_path, monkeypatch, fail_at="CheckReady", report=True)
        where = tmp_path
    else:  # the per-state test's run failing at CheckReady (the dry run and the report below only read it)
        result, world, rec, where, primary = failed_run("CheckReady")
        assert primary is None and not world.kill_on_launch and not world.preflight_missing
    assert result.status == "FAILED", rec.out.getvalue()
    rows = receipt(where / "out" / "lake")
    unsettled = sorted({r["experiment"] for r in rows if r["state"] not in ("gone", "restored", "handed over")})
    entry = _sweep_dry_run(where, world)
    assert entry["experiments"] == unsettled, (entry, rows)
    head = (where / "out" / "campaigns" / CID / "report" / "report.html").read_text(encoding="utf-8")
    if restore_fails:
        assert unsettled == ["agg"] and entry["action"] == "would tear down"
        (pool,) = [r for r in rows if r["kind"].startswith("pool")]
        assert pool["state"] == "still there" and pool["action"].endswith("NOT restored"), pool
        assert pool["billing"] == "still billing (simulated)", pool
        assert 'data-status="failed-untorn"' in head and 'data-receipt-complete="false"' in head
        assert '<td class="billing">still billing' in head
    else:
        assert unsettled == [] and entry["action"] == "nothing left"
        assert 'data-status="failed"' in head and 'data-receipt-complete="true"' in head
    # `benchctl report --campaign` writes it again from the lake alone, for a failed campaign too
    from benchctl.cli.main import main

    again = tmp_path / "again.md"
    assert main(["report", "--lake", str(where / "out" / "lake"), "--campaign", CID, "--out", str(again)]) == 0
    text = again.read_text(encoding="utf-8")
    ending = "FAILED, AND ITS TEARDOWN FAILED" if restore_fails else "FAILED"
    assert f"## How it ended: {ending} in state CheckReady: InjectedFailure" in text, text[:2000]
    assert "### Teardown receipt" in text and "PARTIAL" in text

