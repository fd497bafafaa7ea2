"""A Lambda retry delivers the same event twice: the second delivery must change nothing.

The ``lambdas/*.py`` handlers are called directly, with events built from the ASL's own
``Parameters.Payload`` templates (``*.$`` paths resolved against the state input, as Step Functions
does), the real LocalRunStore / LocalLake / LocalPool and the fakes of ``tests/fakes/ports.py``
installed with ``lambdas._runtime.use_engine``. After each second delivery: no second scale,
deploy, launch, teardown or restore; the same lake files and the same row count in every table.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from benchctl.campaign import asl
from benchctl.local.engine import function_arn
from benchctl.local.report import LocalReport
from benchctl.local.runner import prepare
from lambdas import FUNCTIONS
from lambdas._runtime import use_callbacks, use_engine
from tests.fakes.ports import FakeWorld

ROOT = Path(__file__).resolve().parents[2]
ASL = asl.load()
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:benchctl-campaign:redeliver"



def _task(name: str) -> dict[str, Any]:
    st = asl.state(name, ASL)
    assert st["Type"] == "Task", name
    return st


def _path(doc: Any, path: str) -> Any:
    assert path == "$" or path.startswith("$."), path
    for part in [p for p in path[2:].split(".") if p]:
        doc = doc[part]
    return doc


def _resolve(template: Any, state_input: Any, context: dict[str, Any]) -> Any:
    """Step Functions' Parameters: keys ending in ``.$`` take a path into the input (``$``) or context (``$$``)."""
    if isinstance(template, dict):
        out = {}
        for k, v in template.items():
            if k.endswith(".$"):
                out[k[:-2]] = _path(context, v[1:]) if v.startswith("$$") else _path(state_input, v)
            else:
                out[k] = _resolve(v, state_input, context)
        return out
    return template


def event_for(state: str, state_input: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """(handler, event) of a Task state, exactly as its ASL Parameters build them."""
    import importlib

    params = _task(state)["Parameters"]
    var = params["FunctionName"].removeprefix("${").removesuffix("}")
    mod, fn = FUNCTIONS[var].rsplit(".", 1)
    assert function_arn(var)  # a known substitution variable
    # a Lambda retry delivers the same event: the same task token for the same state and input
    token = f"token-{state}-{abs(hash(json.dumps(state_input, sort_keys=True, default=str)))}"
    context = {"State": {"Name": state}, "Execution": {"Id": EXECUTION}, "Task": {"Token": token}}
    event = _resolve(params["Payload"], state_input, context)
    return getattr(importlib.import_module(mod), fn), json.loads(json.dumps(event))


# ------------------------------------------------------------------------------------------ harness


class Callbacks:
    """The callbacks port as the local engine's relay is to the handlers: every watch recorded, a token
    watched once; ``wake`` runs a watched step's check as the relay would."""

    def __init__(self) -> None:
        self.watched: dict[str, tuple[str, tuple[str, str], Any]] = {}
        self.calls = 0

    def watch(self, token: str, state: str, key: tuple[str, str], wake: Any) -> bool:
        self.calls += 1
        if token in self.watched:
            return False
        self.watched[token] = (state, key, wake)
        return True

    def wake(self, key: tuple[str, str]) -> str | None:
        from benchctl.local.callbacks import reason_of

        ((_, _, check),) = [w for w in self.watched.values() if w[1] == key]
        return reason_of(check)


class Campaign:
    """One campaign driven state by state; every event delivered twice, snapshots around each."""

    def __init__(self, tmp: Path, **world_kw: Any) -> None:
        data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8"))
        data["workloads"] = [
            {"kind": "concurrency_sweep", "name": "concurrency-sweep", "concurrency": [1, 2], "isl": 256,
             "osl": 32, "request_count": 4},
            {"kind": "prefix_cache", "name": "prefix-cache", "ratios": [0.5], "isl": 512, "osl": 16,
             "concurrency": 2, "requests": 4, "block_size": 64},
        ]
        data["warmup"] = {"request_count": 2}
        spec = tmp / "redeliver.yaml"
        spec.write_text(yaml.safe_dump(data), encoding="utf-8")
        start, _ = prepare(spec, tmp / "out", "redeliver")
        self.cid, self.run_dir, self.lake = "redeliver", tmp / "out" / "campaigns" / "redeliver", tmp / "out" / "lake"
        # the local engine's own ReportPort: views and report.html into <run dir>/report
        self.world = FakeWorld(self.lake, report=LocalReport(self.lake, lambda _cid: self.run_dir).write, **world_kw)
        self.start = {"spec_uri": start.spec_uri, "campaign_id": self.cid, "poll_seconds": 1}
        self.ctx: dict[str, Any] = {}
        self.callbacks = Callbacks()
        self.results: dict[str, list[tuple[dict[str, Any], dict[str, Any], Any, Any]]] = {}

    def snapshot(self) -> dict[str, Any]:
        files = sorted(str(p.relative_to(self.lake)) for p in self.lake.rglob("*") if p.is_file())
        rows = Counter()
        for f in self.lake.rglob("*.parquet"):
            if not f.name.startswith("."):
                rows[f.relative_to(self.lake).parts[0]] += pq.read_metadata(f).num_rows
        w = self.world
        return {
            "lake_files": files,
            "rows": dict(rows),
            "pool_calls": dict(w.calls),
            "pool_sizes": w.pool_sizes_now(),
            "deploys": list(w.serving.deploy_calls),
            "teardowns": list(w.serving.teardown_calls),
            "launches": list(w.load.launch_calls),
            "stops": list(w.load.stop_calls),
            "run_store": sorted(str(p.relative_to(self.run_dir)) for p in self.run_dir.rglob("*.json")),
        }

    def twice(self, state: str, state_input: dict[str, Any], *, fails: bool = False) -> Any:
        """Deliver the state's event, snapshot, deliver the identical event again, snapshot."""
        handler, event = event_for(state, state_input)
        outs = []
        snaps = []
        for _ in range(2):
            try:
                outs.append(handler(copy.deepcopy(event), None))
            except Exception as exc:  # a failing state fails the same way again
                if not fails:
                    raise
                outs.append(type(exc).__name__)
            snaps.append(self.snapshot())
        self.results.setdefault(state, []).append((snaps[0], snaps[1], outs[0], outs[1]))
        return outs[0]

    def until_done(self, state: str, state_input: dict[str, Any]) -> None:
        out = self.twice(state, state_input)
        assert out == {"done": True} or out.get("done") is True, (state, out)

    def experiment(self, exp: dict[str, Any], *, stop_after_launch: str | None = None) -> None:
        item = {"ctx": self.ctx, "experiment": exp}
        self.twice("ScalePools", item)
        self.until_done("CheckCapacity", item)
        self.twice("Deploy", item)
        self.until_done("CheckReady", item)
        self.twice("SmokeTest", item)
        self.until_done("CheckSmoke", item)
        self.twice("LaunchWarmUp", item)
        self.until_done("CheckWarmUp", item)
        for step in exp["steps"]:
            sitem = {"ctx": self.ctx, "experiment": exp["name"], "step": step}
            launched = self.twice("LaunchLoad", sitem)
            assert launched["callback"] is True, launched  # a callbacks port is installed: the ASL awaits
            self.twice("IngestPreviousStep", sitem)
            self.twice("AwaitLoadEnd", sitem)
            if step == stop_after_launch:
                return
            assert self.callbacks.wake((exp["name"], step)) == "load ended"
            self.until_done("CheckLoad", sitem)
        self.twice("IngestLastStep", item)
        self.until_done("TeardownExperiment", item)


@pytest.fixture(scope="module")
def happy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    """Plan → both experiments → Report, every event delivered twice."""
    c = Campaign(tmp_path_factory.mktemp("happy"))
    use_engine(c.world)
    use_callbacks(c.callbacks)
    try:
        plan = c.twice("Plan", c.start)
        c.ctx = plan["ctx"]
        for exp in plan["experiments"]:
            c.experiment(exp)
        c.twice("Report", {"plan": plan})
    finally:
        use_engine(None)
        use_callbacks(None)
    yield c


@pytest.fixture(scope="module")
def aborted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    """The failure path: the first step's load is running when its check fails; every cleanup state
    (StopLoadAfterFailure, TeardownAfterFailure, AbortCampaign) delivered twice."""
    c = Campaign(tmp_path_factory.mktemp("aborted"))
    use_engine(c.world)
    use_callbacks(c.callbacks)
    try:
        plan = c.twice("Plan", c.start)
        c.ctx = plan["ctx"]
        exp = plan["experiments"][0]
        step = exp["steps"][0]
        c.experiment(exp, stop_after_launch=step)
        c.world.serving.kill(exp["name"])
        # the awaited step's wake check names the dead serving side: CheckLoad, woken, fails with it
        assert "ServingFailed" in (c.callbacks.wake((exp["name"], step)) or ""), "no wake for a dead serving side"
        sitem = {"ctx": c.ctx, "experiment": exp["name"], "step": step}
        handler, event = event_for("CheckLoad", sitem)
        with pytest.raises(Exception, match="worker process exited") as info:
            handler(event, None)
        error = {"Error": type(info.value).__name__,
                 "Cause": json.dumps({"errorMessage": str(info.value), "errorType": type(info.value).__name__})}
        c.twice("StopLoadAfterFailure", {**sitem, "error": error})
        c.twice("TeardownAfterFailure", {"ctx": c.ctx, "experiment": exp, "error": error})
        c.twice("AbortCampaign", {"plan": plan, "error": error})
    finally:
        use_engine(None)
        use_callbacks(None)
    yield c


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    """Plan refused (a missing prerequisite): Plan and RecordPlanFailure delivered twice."""
    c = Campaign(tmp_path_factory.mktemp("refused"), preflight_missing=["namespace 'dynamo-bench' (fake)"])
    use_engine(c.world)
    use_callbacks(c.callbacks)
    try:
        c.twice("Plan", c.start, fails=True)
        handler, event = event_for("Plan", c.start)
        with pytest.raises(Exception, match="preflight") as info:
            handler(event, None)
        error = {"Error": type(info.value).__name__,
                 "Cause": json.dumps({"errorMessage": str(info.value), "errorType": type(info.value).__name__})}
        c.twice("RecordPlanFailure", {**c.start, "error": error})
    finally:
        use_engine(None)
        use_callbacks(None)
    yield c


# --------------------------------------------------------------------------------------------- tests

NORMAL = ["Plan", "ScalePools", "CheckCapacity", "Deploy", "CheckReady", "SmokeTest", "CheckSmoke", "LaunchWarmUp",
          "CheckWarmUp", "LaunchLoad", "AwaitLoadEnd", "CheckLoad", "IngestPreviousStep", "IngestLastStep",
          "TeardownExperiment", "Report"]


def test_providers_are_reset_after_the_walks(happy: Campaign, aborted: Campaign, refused: Campaign) -> None:
    from lambdas import _runtime

    assert _runtime._engine is None and _runtime._callbacks is None


def test_the_walk_succeeds_and_covers_every_normal_task_state(happy: Campaign) -> None:
    from benchctl.campaign.asl import task_states

    assert set(NORMAL) <= set(task_states())
    assert set(happy.results) == set(NORMAL)
    rows = happy.snapshot()["rows"]
    assert rows["steps"] == 2 * 3 and rows["campaigns"] == 1
    assert happy.world.leftovers() == {"deployments": [], "prepared": [], "loads": [], "pools": []}


@pytest.mark.parametrize("state", NORMAL)
def test_second_delivery_changes_nothing(happy: Campaign, state: str) -> None:
    for first, second, out1, out2 in happy.results[state]:
        assert second == first, (state, out1, out2)


@pytest.mark.parametrize("state", ["StopLoadAfterFailure", "TeardownAfterFailure", "AbortCampaign"])
def test_second_delivery_of_a_cleanup_state_changes_nothing(aborted: Campaign, state: str) -> None:
    ((first, second, out1, out2),) = aborted.results[state]
    assert second == first, state
    assert out1 == out2 and out1["error"] == "ServingFailed", (out1, out2)


def test_the_abort_path_cleaned_up_once(aborted: Campaign) -> None:
    w = aborted.world
    assert w.leftovers() == {"deployments": [], "prepared": [], "loads": [], "pools": []}
    assert w.serving.deploy_calls == ["agg"] and w.serving.teardown_calls == ["agg"]
    assert w.calls == Counter({"scale:gpu-a100": 1, "restore:gpu-a100": 1})
    assert len(w.load.stop_calls) == 1  # StopLoadAfterFailure stopped it; nothing stopped twice
    rows = aborted.snapshot()["rows"]
    assert rows["campaigns"] == 1 and "steps" not in rows


@pytest.mark.parametrize("state", ["Plan", "RecordPlanFailure"])
def test_second_delivery_of_a_refused_plan_changes_nothing(refused: Campaign, state: str) -> None:
    ((first, second, out1, out2),) = refused.results[state]
    assert second == first and out1 == out2
    assert refused.world.calls == Counter() and refused.world.serving.deploy_calls == []


def test_no_double_scale_deploy_launch_or_teardown(happy: Campaign) -> None:
    w = happy.world
    exps = ["agg", "disagg"]
    assert w.serving.deploy_calls == exps and w.serving.teardown_calls == exps
    # each experiment scaled once; the pool was restored exactly once (kept warm between the two
    # experiments, restored by the last one), and is back at its size
    assert w.calls["scale:gpu-a100"] <= 2 and w.calls["restore:gpu-a100"] == 1, w.calls
    assert w.pool_sizes_now() == w.initial_sizes
    assert len(w.smoke_calls) == 2  # one smoke test per experiment: a redelivered SmokeTest starts none
    launched = Counter(w.load.launch_calls)
    assert set(launched.values()) == {1} and len(launched) == 2 * (1 + 3)
    assert w.load.stop_calls == []
    # the redelivered ScalePools reused its record instead of scaling again
    for _first, _second, out1, out2 in happy.results["ScalePools"]:
        assert out1["reused"] is False and out2["reused"] is True
    for _first, _second, out1, out2 in happy.results["Deploy"] + happy.results["LaunchLoad"]:
        assert out1["reused"] is False and out2["reused"] is True


def test_a_redelivered_await_watches_once(happy: Campaign) -> None:
    """AwaitLoadEnd delivered twice: the same token is handed over twice and watched once, one per step."""
    cb = happy.callbacks
    outs = [(out1, out2) for _f, _s, out1, out2 in happy.results["AwaitLoadEnd"]]
    assert len(outs) == 2 * 3 and cb.calls == 2 * len(outs)
    assert all(o1 == {"watching": True, "again": False} and o2 == {"watching": True, "again": True} for o1, o2 in outs)
    assert len(cb.watched) == len(outs)
    assert {key for _state, key, _w in cb.watched.values()} == {
        (exp, step) for exp in ("agg", "disagg") for step in {k[1] for _s, k, _w in cb.watched.values()}}
