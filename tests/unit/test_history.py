"""Step Functions' history quota (25,000 events per execution): the plan's estimate, held to the history
that moto's interpreter records for the very ASL, and the refusals (`plan`/`start` exit 2, the Plan state
on AWS) of a campaign that would not fit, before anything starts."""

from __future__ import annotations

import io
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.campaign import Task
from benchctl.campaign.context import Ctx, StartInput
from benchctl.cli.main import main
from benchctl.errors import SpecError
from benchctl.local.engine import Progress, execute
from benchctl.local.lake import LocalLake
from benchctl.local.runner import prepare
from benchctl.planning.history import HISTORY_LIMIT, aws_limits, history_estimate, history_events
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import load_spec, parse_spec
from tests.fakes.ports import FakeLoad, FakeWorld, providers_for_test, record_asl_waits

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "examples" / "seed-plan.yaml"


def many_repeats_of_the_seed(tmp_path: Path) -> Path:
    """examples/seed-plan.yaml with 9 repeats on one deployment per experiment instead of 5 x 1 (630 steps: 35 per
    repeat and experiment, the search's probes included) and steps a quarter as long (so that it stays within the
    48 h execution timeout); its budget is left out so that only what one execution can hold decides."""
    data = yaml.safe_load(SEED.read_text())
    data["repeats"] = 9
    data["design"] = {"deployments": 1}
    for w in data["workloads"]:
        for key in ("duration_s", "requests"):
            if key in w:
                w[key] //= 4
    data.pop("budget")
    path = tmp_path / "seed-20-repeats.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# ------------------------------------------------------------------------------ the model vs the interpreter


class SlowLoad(FakeLoad):
    """A fake AIPerf run that is still running at its first ``polls`` checks."""

    def __init__(self, polls: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.polls = polls
        self.seen: dict[str, int] = {}

    def poll(self, state: dict[str, Any]) -> int | None:
        job = state["job_id"]
        if self.status.get(job) == "running" and self.seen.get(job, 0) < self.polls:
            self.seen[job] = self.seen.get(job, 0) + 1
            return None
        return super().poll(state)


@pytest.mark.parametrize("polls", [0, 1])
def test_the_estimate_is_the_history_the_interpreter_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             polls: int) -> None:
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    monkeypatch.setattr(retrier_decl, "time", types.SimpleNamespace(sleep=lambda _s: None))
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data["workloads"] = [{"kind": "concurrency_sweep", "name": "concurrency-sweep", "concurrency": [1, 2],
                          "isl": 256, "osl": 32, "request_count": 4}]
    data["warmup"] = {"request_count": 2}
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump(data))
    start, _ = prepare(spec, tmp_path / "out", "history")
    world = FakeWorld(tmp_path / "out" / "lake")
    world.load = SlowLoad(polls, on_launch=world._on_launch)
    waited = record_asl_waits(monkeypatch)  # each Wait's seconds recorded, not slept
    result = execute(engine=world, start=StartInput(start.spec_uri, start.campaign_id, poll_seconds=1),
                     progress=Progress(out=io.StringIO()))
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    plan = world.providers(Ctx("history", str(result.run_dir), str(result.lake), 1, None)).state.plan()
    steps = sum(len(e.steps) for e in plan.experiments)
    assert len(plan.experiments) == 2 and steps == 4
    # each CheckWarmUp saw `polls` "still running" answers, so each of those loops went through that many
    # Waits; a step's load is awaited as an event (the engine answers AwaitLoadEnd's token after its own
    # `polls` looks), so CheckLoad runs once; every other wait ended at its first check
    expected = history_events(plan, 1, lambda kind, e, s: float(polls) if kind in ("load", "warmup") else 0.0,
                              callbacks=True)
    assert len(result.history) == expected < 1000  # (one page of get_execution_history)
    assert sum(ev["type"] == "WaitStateEntered" for ev in result.history) == polls * 2
    assert waited == [1] * (polls * 2)  # each of poll_seconds
    assert sum(ev["type"] == "TaskSubmitted" for ev in result.history) == steps  # one AwaitLoadEnd per step
    # on AWS (nobody answers task tokens yet) the same steps poll: more events per step, as planned there
    polled = history_events(plan, 1, lambda kind, e, s: float(polls) if kind in ("load", "warmup") else 0.0)
    # per step: CheckLoad ⟲ with `polls` Waits (7 + 9 x polls) instead of AwaitLoadEnd (6) + one CheckLoad (7)
    assert polled - expected == steps * (9 * polls - 6)


# ---------------------------------------------------------------------------------------------- refusals


def test_the_seed_plan_fits_at_its_30_s_poll_and_the_estimate_grows_as_the_poll_shrinks() -> None:
    spec = load_spec(SEED)
    plan = plan_campaign(spec, "aws")
    est, problems = aws_limits(spec, plan, 30)
    # the steps' ends are events (AwaitLoadEnd): even every wait running to its deadline fits
    assert problems == [] and 2_000 < est.expected < est.worst < est.refuse_at < HISTORY_LIMIT
    assert history_estimate(spec, plan, 10).expected > est.expected > history_estimate(spec, plan, 60).expected
    # a step's length adds no events: polling CheckLoad (what the AWS engine did before) needs nearly 3x more here
    polled = history_events(plan, 30, lambda kind, e, s: s.est_s if s else 0.0)
    assert polled > 2.9 * history_events(plan, 30, lambda kind, e, s: s.est_s if s else 0.0, callbacks=True)


def test_plan_refuses_many_repeats_of_the_seed_at_a_10_s_poll_naming_the_estimate_and_the_limit(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = many_repeats_of_the_seed(tmp_path)
    assert main(["plan", str(path), "--engine", "aws", "--poll-seconds", "10"]) == 2
    out, err = capsys.readouterr()
    est = history_estimate(load_spec(path), plan_campaign(load_spec(path), "aws"), 10).expected
    assert est > 20_000
    assert f"est. {est:,} events at a 10 s poll" in out
    assert f"an estimated {est:,} history events" in err and "fails an execution at 25,000" in err
    assert "split it into" in err and "poll every" in err
    # the local engine (moto) has no such quota: the same spec plans locally
    assert main(["plan", str(path)]) == 0


def test_start_refuses_before_uploading_or_starting_anything(tmp_path: Path) -> None:
    from benchctl.aws.start import start

    class NoAws:
        def client(self, name: str) -> Any:
            raise AssertionError(f"{name} was called: start should have refused first")

    with pytest.raises(SpecError, match=r"history events; Step Functions fails an execution at 25,000"):
        start(many_repeats_of_the_seed(tmp_path), bucket="b", state_machine_arn="arn:aws:states:us-east-1:1:x:y",
              poll_seconds=10, session=NoAws())


def test_the_plan_state_on_aws_refuses_before_any_pool_is_touched(tmp_path: Path) -> None:
    from benchctl import campaign

    path = many_repeats_of_the_seed(tmp_path)
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), engine="aws",
                           read_uri=lambda uri: path.read_bytes())
    ctx = Ctx("c4x", str(tmp_path / "run"), str(tmp_path / "lake"), 10, None)
    task = Task(state="Plan", input={"spec_uri": path.resolve().as_uri(), "poll_seconds": 10})
    with pytest.raises(SpecError, match="history events"):
        campaign.plan(p, ctx, task)  # (pools, serving and load are Unused: touching one fails the test)
    assert not p.state.has_plan() and not (tmp_path / "lake").exists()
    # the same campaign at a poll that fits is planned (60 s)
    ctx = Ctx("c4x", str(tmp_path / "run"), str(tmp_path / "lake"), 60, None)
    assert len(campaign.plan(p, ctx, task)["experiments"]) == 2


def test_an_execution_longer_than_its_timeout_is_refused() -> None:
    data = yaml.safe_load(SEED.read_text())
    data.pop("budget")
    data["workloads"][0]["duration_s"] = 3600  # 7 concurrencies x 3 repeats x 2 experiments of an hour
    spec = parse_spec(data)
    _, problems = aws_limits(spec, plan_campaign(spec, "aws"), 600)
    assert any("exceeds the execution timeout of 48 h" in p for p in problems), problems
