"""A sweep's search probes at LaunchLoad: each probe's load comes from the attainment the sweep measured before
it, later repeats run the first repeat's probe loads again, and a probe the search does not need runs nothing
and spends nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.campaign import Task
from benchctl.campaign.context import Ctx
from benchctl.campaign.ingest import ingest_previous, ingest_step, slo_counts
from benchctl.campaign.load import launch_step
from benchctl.campaign.probes import probe_load
from benchctl.campaign.records import LoadRecord
from benchctl.local.lake import LocalLake
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import parse_spec
from tests.fakes.ports import providers_for_test

ROOT = Path(__file__).resolve().parents[2]


def _spec(repeats: int = 1, **search: Any) -> Any:
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data["workloads"] = [{"kind": "concurrency_sweep", "name": "sweep", "concurrency": [4, 64], "isl": 256,
                          "osl": 32, "duration_s": 5, "search": {"max_probes": 6, "duration_s": 3, **search}}]
    data["repeats"] = repeats
    return parse_spec(data)


def _ctx() -> Ctx:
    return Ctx(campaign_id="c1", run_uri="file:///x", lake_uri="file:///y", poll_seconds=1, fail_at=None)


def _ran(p: Any, step_id: str, good: int, n: int, load: int | None = None) -> None:
    """A step whose load ended and whose rows are in the lake, with its SLO counts."""
    p.state.save_load("agg", step_id, LoadRecord(state={}, launched_at=0.0, ended=True, exit_code=0,
                                                 ingest_status="succeeded", slo={"good": good, "n": n},
                                                 concurrency=load))


def _edge(load: int, edge: int = 20) -> tuple[int, int]:
    return (200, 200) if load <= edge else (20, 200)


def test_each_probe_bisects_what_the_sweep_measured_before_it(tmp_path: Path) -> None:
    spec = _spec()
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec)
    for c in (4, 64):
        _ran(p, f"sweep-c{c}-r0", *_edge(c))
    plan = p.state.plan().experiment("agg")
    loads = []
    for step in [s for s in plan.steps if s.probe is not None]:
        nxt = probe_load(p, _ctx(), "agg", step)
        if nxt.load is None:
            p.state.save_load("agg", step.step_id, LoadRecord(state={"skipped": True}, launched_at=0.0,
                                                              search=nxt.to_json()))
            continue
        loads.append(nxt.load)
        _ran(p, step.step_id, *_edge(nxt.load), load=nxt.load)
    assert loads[0] == 16  # the geometric middle of [4, 64)
    assert all(4 < c < 64 for c in loads) and len(set(loads)) == len(loads)
    last = p.state.load("agg", "sweep-s6-r0")
    assert (last is not None and last.skipped) or len(loads) == 6
    # the measured edge (20) bracketed within 10 %, or 1 apart
    within = max(c for c in (4, *loads) if c <= 20)
    past = min(c for c in (64, *loads) if c > 20)
    assert past <= within * 1.1 or past - within <= 1, (within, past, loads)


def test_later_repeats_run_the_first_repeats_probe_loads_again(tmp_path: Path) -> None:
    spec = _spec(repeats=2)
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec)
    _ran(p, "sweep-s1-r0", 200, 200, load=16)
    p.state.save_load("agg", "sweep-s2-r0", LoadRecord(state={"skipped": True}, launched_at=0.0,
                                                       search={"load": None, "why": "located"}))
    step = {s.step_id: s for s in p.state.plan().experiment("agg").steps}
    assert probe_load(p, _ctx(), "agg", step["sweep-s1-r1"]).load == 16
    again = probe_load(p, _ctx(), "agg", step["sweep-s2-r1"])
    assert again.load is None and "did not run" in again.why


def test_a_probe_the_search_does_not_need_launches_nothing_and_ingests_nothing(tmp_path: Path) -> None:
    spec = _spec(resolution=1.0)  # [4, 64) at 100 %: anything is located at once once 4 and 8 are measured
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec)  # load port: Unused
    _ran(p, "sweep-c4-r0", 200, 200)
    _ran(p, "sweep-c64-r0", 0, 200)
    _ran(p, "sweep-s1-r0", 0, 200, load=16)
    _ran(p, "sweep-s2-r0", 200, 200, load=8)
    out = launch_step(p, _ctx(), Task(state="LaunchLoad", experiment="agg", step="sweep-s3-r0"))
    assert out["skipped"] is True and out["job"] is None and "located" in out["why"]
    rec = p.state.load("agg", "sweep-s3-r0")
    assert rec is not None and rec.skipped and rec.search is not None and rec.search["located"]
    assert ingest_step(p, _ctx(), "agg", "sweep-s3-r0") == {"status": "skipped", "requests": 0}
    # the next probe follows without asking the load port either, and says why
    out = launch_step(p, _ctx(), Task(state="LaunchLoad", experiment="agg", step="sweep-s4-r0"))
    assert out["skipped"] and "stopped before probe" in out["why"]
    # IngestPreviousStep over the skipped probe: nothing to ingest, nothing raised
    assert ingest_previous(p, _ctx(), Task(state="IngestPreviousStep", experiment="agg", step="sweep-s4-r0"))[
        "status"] == "skipped"


def test_the_plan_prices_every_probe_up_to_the_budget_line() -> None:
    plan = plan_campaign(_spec(repeats=2), "aws")
    probes = [s for s in plan.experiment("agg").steps if s.probe is not None]
    assert [s.step_id for s in probes][:2] == ["sweep-s1-r0", "sweep-s2-r0"] and len(probes) == 12
    assert all(s.concurrency is None and s.duration_s == 3 for s in probes)
    fixed = [s for s in plan.experiment("agg").steps if s.probe is None]
    # each repeat runs its fixed loads first, then its probes
    assert [s.index for s in plan.experiment("agg").steps if s.repeat == 0][-1] < min(
        s.index for s in plan.experiment("agg").steps if s.repeat == 1)
    assert max(s.index for s in fixed if s.repeat == 0) < min(s.index for s in probes if s.repeat == 0)


def test_slo_counts_follow_the_rule_of_the_goodput_view() -> None:
    rows = [{"ttft_ms": 50.0, "itl_ms": 5.0}, {"ttft_ms": 150.0, "itl_ms": 5.0}, {"ttft_ms": 50.0, "itl_ms": 9.0},
            {"ttft_ms": 50.0, "itl_ms": None}, {"ttft_ms": 50.0, "itl_ms": 5.0, "error_type": "x"},
            {"ttft_ms": 50.0, "itl_ms": 5.0, "was_cancelled": True}]
    assert slo_counts(rows, 100.0, 7.0) == {"n": 6, "good": 1}
    assert slo_counts(rows, None, None) == {"n": 6, "good": 4}


@pytest.mark.parametrize("bad,where", [
    ({"concurrency": []}, "concurrency"),
    ({"concurrency": "most"}, "concurrency"),
    ({"duration_s": None, "request_count": 100}, "search.duration_s"),
])
def test_a_search_the_spec_cannot_run_is_refused_naming_the_field(bad: dict[str, Any], where: str) -> None:
    from benchctl.errors import SpecError

    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    sweep = {"kind": "concurrency_sweep", "name": "sweep", "concurrency": "auto", "isl": 256, "osl": 32,
             "duration_s": 5, **bad}
    data["workloads"] = [sweep]
    with pytest.raises(SpecError) as err:
        parse_spec(data)
    assert where in str(err.value)
