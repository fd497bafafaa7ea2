"""What one Step Functions execution of a campaign holds: its history events (against the service's hard quota)
and its length (against the ASL's own timeout), from the plan. Pure."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from benchctl.planning.plan import OVERHEADS, WARM_CAPACITY_S, CampaignPlan, ExperimentPlan, StepPlan
from benchctl.spec.model import CampaignSpec

# ---------------------------------------------------------------- what one Step Functions execution holds

# Step Functions' hard quota: 25,000 events in one Standard execution's history, inline Map iterations
# included. Past it the execution fails at once, with no Catch and no teardown (the sweeper then has to
# clean up). ``benchctl plan``/``start`` and the Plan state refuse a campaign whose estimate exceeds
# HISTORY_REFUSE_AT: the limit less 20 % headroom for waits that run past their estimate and retries.
HISTORY_LIMIT = 25_000
HISTORY_REFUSE_AT = 20_000
# The ASL's own TimeoutSeconds (state_machines/campaign.asl.json): an execution still running then ends
# TIMED_OUT, again without teardown.
EXECUTION_TIMEOUT_S = 48 * 3600

# History events per state of the campaign ASL (what Step Functions records, and moto's interpreter too):
# a lambda:invoke Task 5 (entered, scheduled, started, succeeded, exited), a Choice, Wait or Succeed 2,
# a Map 4 plus 2 per iteration, the execution itself 2; a lambda:invoke.waitForTaskToken Task 6 (+ submitted).
_TASK, _PASS, _MAP, _ITERATION, _EXECUTION, _CALLBACK_TASK = 5, 2, 4, 2, 2, 6
WaitSeconds = Callable[[str, "ExperimentPlan", "StepPlan | None"], float]


def _loop(seconds: float, poll_seconds: int) -> int:
    """A check Task + Choice, looped through a Wait every ``poll_seconds`` until ``seconds`` passed."""
    waits = math.ceil(max(seconds, 0.0) / poll_seconds)
    return (waits + 1) * (_TASK + _PASS) + waits * _PASS


def history_events(plan: CampaignPlan, poll_seconds: int, seconds: WaitSeconds, *, callbacks: bool = False) -> int:
    """Events in the history of one successful execution of the campaign ASL for ``plan``, when each
    wait (``capacity``, ``ready``, ``smoke``, ``warmup``, ``load`` of a step, ``teardown``) lasts
    ``seconds(kind, experiment, step)``. Mirrors the ASL state by state (tests/unit/test_history.py
    holds it to the history moto's interpreter records for the same ASL). ``callbacks``: the engine answers
    task tokens (both engines do: locally the relay, on AWS the load runner Job), so a step waits in
    AwaitLoadEnd and CheckLoad runs once; else CheckLoad polls."""
    if poll_seconds < 1:
        raise ValueError(f"poll_seconds {poll_seconds!r}: must be at least 1")
    events = _EXECUTION + _TASK + _MAP + _TASK + _PASS  # Plan, ForEachExperiment, Report, CampaignSucceeded
    for e in plan.experiments:
        events += _ITERATION + _TASK + _loop(seconds("capacity", e, None), poll_seconds)  # ScalePools ⟲
        events += _TASK + _loop(seconds("ready", e, None), poll_seconds)  # Deploy, CheckReady ⟲
        events += _TASK + _loop(seconds("smoke", e, None), poll_seconds)  # SmokeTest, CheckSmoke ⟲
        events += _TASK + _loop(seconds("warmup", e, None), poll_seconds)  # LaunchWarmUp, CheckWarmUp ⟲
        events += _MAP  # ForEachStep
        for s in e.steps:  # LaunchLoad, IngestPreviousStep, LoadEndReported?, [AwaitLoadEnd], CheckLoad ⟲, StepDone
            wait = _CALLBACK_TASK + _loop(0.0, poll_seconds) if callbacks else _loop(seconds("load", e, s), poll_seconds)
            events += _ITERATION + _TASK + _TASK + _PASS + wait + _PASS
        events += _TASK  # IngestLastStep
        events += _loop(seconds("teardown", e, None), poll_seconds) + _PASS  # TeardownExperiment ⟲, ExperimentDone
    return events


@dataclass(frozen=True)
class HistoryEstimate:
    poll_seconds: int
    expected: int  # with the plan's estimated durations
    worst: int  # every wait running to its deadline (timeouts.*), where the handlers fail it
    limit: int = HISTORY_LIMIT
    refuse_at: int = HISTORY_REFUSE_AT


def _warm(plan: CampaignPlan, e: ExperimentPlan) -> bool:
    """No capacity wait: every pool was kept warm by the experiment before (``handover``)."""
    before = plan.experiments[e.index - 1] if e.index > 0 else None
    return before is not None and bool(e.nodes) and all(pool in before.handover for pool in e.nodes)


def history_estimate(spec: CampaignSpec, plan: CampaignPlan, poll_seconds: int) -> HistoryEstimate:
    over = OVERHEADS[plan.engine]
    t = spec.timeouts
    warmup_s = 60.0 + spec.warmup.request_count if spec.warmup.request_count else 0.0

    def expected(kind: str, e: ExperimentPlan, s: StepPlan | None) -> float:
        return {"capacity": 0.0 if _warm(plan, e) else over["capacity"], "ready": over["ready"],
                "smoke": over["smoke"], "warmup": warmup_s, "load": s.est_s if s else 0.0,
                "teardown": over["teardown"]}[kind]

    def worst(kind: str, e: ExperimentPlan, s: StepPlan | None) -> float:
        return {"capacity": min(t.capacity_s, WARM_CAPACITY_S) if _warm(plan, e) else t.capacity_s,
                "ready": t.ready_s, "smoke": t.smoke_s,
                "warmup": warmup_s + t.load_grace_s, "load": (s.est_s if s else 0.0) + t.load_grace_s,
                "teardown": t.teardown_s}[kind]

    # the load's end is an event on both engines (AwaitLoadEnd): a step's length adds no poll events
    return HistoryEstimate(poll_seconds, history_events(plan, poll_seconds, expected, callbacks=True),
                           history_events(plan, poll_seconds, worst, callbacks=True))


def aws_limits(spec: CampaignSpec, plan: CampaignPlan, poll_seconds: int) -> tuple[HistoryEstimate, list[str]]:
    """What one Step Functions execution of this campaign would hold, and every way it would not fit:
    the history quota (with the smallest poll interval that fits, or how many campaigns to split it
    into) and the execution timeout. Empty problems: it fits."""
    est = history_estimate(spec, plan, poll_seconds)
    problems: list[str] = []
    if est.expected > est.refuse_at:
        fits = next((p for p in (15, 20, 30, 45, 60, 90, 120, 180, 240, 300, 450, 600)
                     if p > poll_seconds and history_estimate(spec, plan, p).expected <= est.refuse_at), None)
        parts = math.ceil(est.expected / est.refuse_at)
        hint = (f"poll every {fits} s or more (est. {history_estimate(spec, plan, fits).expected:,} events), or "
                if fits else "")
        problems.append(
            f"poll_seconds: at {poll_seconds} s the campaign's Step Functions execution would record an estimated "
            f"{est.expected:,} history events; Step Functions fails an execution at {est.limit:,} (its hard quota, "
            f"with no teardown), and benchctl refuses above {est.refuse_at:,} to keep headroom for overruns; "
            f"{hint}split it into {parts} or more campaigns (fewer repeats, workloads or experiments per spec)")
    if plan.est_s > EXECUTION_TIMEOUT_S:
        problems.append(f"estimated {plan.est_s / 3600:.1f} h exceeds the execution timeout of "
                        f"{EXECUTION_TIMEOUT_S // 3600} h (TimeoutSeconds of the campaign state machine); split it "
                        "into smaller campaigns")
    return est, problems


def format_history(est: HistoryEstimate) -> str:
    return (f"  Step Functions history: est. {est.expected:,} events at a {est.poll_seconds} s poll "
            f"({est.expected / est.limit:.0%} of the {est.limit:,} limit; {est.worst:,} if every wait ran to "
            "its deadline)")
