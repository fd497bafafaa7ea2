"""Structure of the one campaign ASL: every state that can fail reaches teardown and a failed end."""

import json
import re
from pathlib import Path

from benchctl.campaign import asl
from lambdas import FUNCTIONS

ROOT = Path(__file__).resolve().parents[2]
ASL = asl.load()
TEARDOWN_ACTIONS = {"experiment", "experiment_failed", "campaign", "plan_failed", "stop", "ingest_after_failure"}
AFTER_TEARDOWN_ACTIONS = {"report_failure"}  # the report of a failed ending: after teardown, before the Fail


def scopes(states, path=()):
    return asl.scopes(states, path)


def all_states():
    return asl.all_states(ASL)


def test_substitutions_are_exactly_the_handlers():
    text = json.dumps(ASL)
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(FUNCTIONS)
    for _, _, st in all_states():
        if st["Type"] == "Task":
            assert st["Resource"] in ("arn:aws:states:::lambda:invoke",
                                      "arn:aws:states:::lambda:invoke.waitForTaskToken")
            assert re.fullmatch(r"\$\{\w+FunctionArn\}", st["Parameters"]["FunctionName"])


def test_every_failable_state_has_a_catch_all():
    for path, name, st in all_states():
        if st["Type"] in ("Task", "Map"):
            catches = st.get("Catch", [])
            assert any("States.ALL" in c["ErrorEquals"] for c in catches), f"{'/'.join(path)}/{name} has no Catch"


def _reaches(states, start, pred, seen=None):
    seen = seen or set()
    if start in seen:
        return False
    seen.add(start)
    st = states[start]
    if pred(start, st):
        return True
    nxt = [st.get("Next"), st.get("Default")] + [c["Next"] for c in st.get("Choices", [])]
    nxt += [c["Next"] for c in st.get("Catch", [])]
    return any(n and _reaches(states, n, pred, seen) for n in nxt)


def is_teardown(name, st):
    return st["Type"] == "Task" and st["Parameters"]["Payload"]["action"] in TEARDOWN_ACTIONS


# Errors after which the campaign's resources are another execution's: their Catch must reach a failed end
# through no Task at all (a teardown would tear down, release or record THAT campaign).
FOREIGN_CAMPAIGN_ERRORS = {"CampaignIdInUse"}


def _reaches_task(states, start):
    return _reaches(states, start, lambda n, s: s["Type"] in ("Task", "Map", "Parallel"))


def test_a_campaign_id_in_use_ends_plan_in_a_fail_state_without_any_task():
    catches = [c for c in ASL["States"]["Plan"]["Catch"] if FOREIGN_CAMPAIGN_ERRORS & set(c["ErrorEquals"])]
    assert catches, "Plan has no Catch for CampaignIdInUse: RecordPlanFailure would run on another's campaign"
    assert ASL["States"]["Plan"]["Catch"][0] is catches[0]  # before States.ALL, which would catch it first
    target = ASL["States"][catches[0]["Next"]]
    assert target["Type"] == "Fail" and target["Error"] == "CampaignIdInUse"
    assert not _reaches_task(ASL["States"], catches[0]["Next"])
    # no other state's Catch names it: only Plan claims, later states act on a claimed campaign
    for _path, name, st in all_states():
        if name != "Plan":
            assert not any(FOREIGN_CAMPAIGN_ERRORS & set(c["ErrorEquals"]) for c in st.get("Catch", [])), name


def is_after_teardown(st):
    return st["Type"] == "Task" and st["Parameters"]["Payload"]["action"] in AFTER_TEARDOWN_ACTIONS


def test_every_catch_leads_through_teardown_to_a_fail_state():
    for _path, states in scopes(ASL["States"]):
        for name, st in states.items():
            for c in st.get("Catch", []):
                target = c["Next"]
                if FOREIGN_CAMPAIGN_ERRORS & set(c["ErrorEquals"]):
                    continue  # held by test_a_campaign_id_in_use_ends_plan_in_a_fail_state_without_any_task
                if is_teardown(name, st) or is_after_teardown(st):
                    # teardown's own failure: a failed end (an outer scope's Catch or the sweeper retries it)
                    assert _reaches(states, target, lambda n, s: s["Type"] == "Fail"), name
                    assert not _reaches(states, target, lambda n, s: s["Type"] == "Succeed"), name
                    continue
                assert _reaches(states, target, is_teardown), f"{name} Catch → {target} skips teardown"
                # after teardown the scope ends in a Fail state (and only Fail/teardown on the path)
                assert _reaches(states, target, lambda n, s: s["Type"] == "Fail"), f"{name}: no failed end"
                assert not _reaches(states, target, lambda n, s: s["Type"] == "Succeed"), f"{name}: failure can succeed"


def _handler_and_operation(st):
    """The handler module and the operation a Task state's event is dispatched to."""
    import importlib

    var = st["Parameters"]["FunctionName"].removeprefix("${").removesuffix("}")
    module = importlib.import_module(FUNCTIONS[var].rsplit(".", 1)[0])
    return module, st["Parameters"]["Payload"]["action"]


def test_teardown_states_cannot_be_blocked_by_abort(tmp_path):
    """With an abort requested, every teardown state of the ASL still runs (its handler dispatches to a
    cleanup operation, which the guard lets through); every other task is refused with Aborted."""
    import copy

    import pytest
    import yaml

    from benchctl.campaign.context import Ctx
    from benchctl.errors import Aborted
    from benchctl.local.runner import prepare
    from lambdas._runtime import use_engine
    from tests.fakes.ports import FakeWorld

    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data["workloads"] = [{"kind": "concurrency_sweep", "name": "c", "concurrency": [1], "isl": 64, "osl": 8,
                          "request_count": 2}]
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(data))
    start, _ = prepare(spec, tmp_path / "out", "abort")
    world = FakeWorld(tmp_path / "out" / "lake")
    use_engine(world)
    try:
        module, _ = _handler_and_operation(asl.state("Plan", ASL))
        ctx = module.handler({"action": "plan", "state": "Plan", "input": start.to_json()})["ctx"]
        world.providers(Ctx.parse(ctx)).state.request_abort("test")
        error = {"Error": "Aborted", "Cause": "test"}
        inputs = {"experiment": "agg", "step": "c-c1-r0", "ctx": ctx, "error": error, "input": {**start.to_json(),
                                                                                                "error": error}}
        teardown, other = [], []
        for _, name, st in all_states():
            if st["Type"] != "Task":
                continue
            module, action = _handler_and_operation(st)
            event = {"action": action, "state": name, **copy.deepcopy(inputs)}
            if is_teardown(name, st) or is_after_teardown(st):
                result = module.handler(event)  # runs: the abort request does not stop a teardown (nor its report)
                assert isinstance(result, dict), name
                teardown.append(name)
            else:
                with pytest.raises(Aborted, match="campaign aborted before"):
                    module.handler(event)
                other.append(name)
    finally:
        use_engine(None)
    assert {"TeardownExperiment", "TeardownAfterFailure", "AbortCampaign", "StopLoadAfterFailure",
            "RecordPlanFailure", "ReportFailure"} <= set(teardown)
    assert "ScalePools" in other and "Report" in other


def test_sequence_order_and_one_experiment_at_a_time():
    top = ASL["States"]
    assert ASL["StartAt"] == "Plan"
    assert top["ForEachExperiment"]["MaxConcurrency"] == 1
    inner = top["ForEachExperiment"]["ItemProcessor"]
    order = []
    name = inner["StartAt"]
    states = inner["States"]
    while name and states[name]["Type"] not in ("Succeed", "Fail"):
        order.append(name)
        st = states[name]
        name = st["Choices"][0]["Next"] if st["Type"] == "Choice" else st.get("Next")
    assert [n for n in order if not n.endswith("?")] == [
        "ScalePools", "CheckCapacity", "Deploy", "CheckReady", "SmokeTest", "CheckSmoke", "LaunchWarmUp",
        "CheckWarmUp", "ForEachStep", "IngestLastStep", "TeardownExperiment",
    ]
    steps = states["ForEachStep"]
    assert steps["MaxConcurrency"] == 1
    assert steps["ItemProcessor"]["StartAt"] == "LaunchLoad"


def test_waiting_is_done_by_wait_states_not_handlers():
    waits = [(p, n, s) for p, n, s in all_states() if s["Type"] == "Wait"]
    assert {n for _, n, _ in waits} == {"WaitForCapacity", "WaitForReady", "WaitForSmoke", "WaitForWarmUp",
                                        "WaitForLoad", "WaitForTeardown", "WaitForFailedTeardown", "WaitForAbort"}
    for path, name, s in waits:  # the campaign's poll interval, wherever its context sits in that scope
        assert s["SecondsPath"] == ("$.ctx.poll_seconds" if path else "$.plan.ctx.poll_seconds"), name
    # every wait is a loop back to a Task that decides (a Choice on its `done`), and that Task's handler
    # bounds it with a deadline (DeadlineExceeded / timeouts.*): nothing waits inside a function
    for path, name, s in waits:
        states = dict(scopes(ASL["States"]))[path]
        task = states[s["Next"]]
        assert task["Type"] == "Task", name
        choice = states[task["Next"]]
        assert choice["Type"] == "Choice" and choice["Default"] == name, name
        assert choice["Choices"][0]["Variable"] == f"{task['ResultPath']}.done", name


def test_no_handler_sleeps():
    import ast

    paths = [p for p in (ROOT / "benchctl").rglob("*.py") if "local" not in p.relative_to(ROOT).parts]
    assert ROOT / "benchctl" / "aws" / "k8s" / "client.py" in paths
    for path in [*paths, *(ROOT / "lambdas").glob("*.py")]:
        if path.relative_to(ROOT).as_posix() == "benchctl/aws/athena.py":
            continue  # Athena's own short queries (seconds) are awaited in Report, bounded by its timeout
        if path.relative_to(ROOT).as_posix() == "benchctl/load_runner.py":
            continue  # the load runner is no handler: it runs in the load Job (and beside the local engine)
        if path.relative_to(ROOT).as_posix() == "benchctl/aws/doctor.py":
            continue  # benchctl doctor runs on the user's machine and follows its check Job, no function waits
        tree = ast.parse(path.read_text())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        sleeps = [n.lineno for n in calls if (isinstance(n.func, ast.Attribute) and n.func.attr == "sleep")
                  or (isinstance(n.func, ast.Name) and n.func.id == "sleep")]
        assert not sleeps, f"{path.relative_to(ROOT)}:{sleeps} sleeps: waiting belongs to the state machine"


def test_retriers_follow_the_states_language():
    """States.ALL must be alone in its retrier and in the last one (Step Functions rejects the definition
    otherwise); statelint checks the deployed definition too (tests/infra)."""
    for _, name, st in all_states():
        for field in ("Retry", "Catch"):
            entries = st.get(field, [])
            for i, r in enumerate(entries):
                if "States.ALL" in r["ErrorEquals"]:
                    assert r["ErrorEquals"] == ["States.ALL"] and i == len(entries) - 1, (name, field)
    assert ASL["TimeoutSeconds"] == 48 * 3600


def test_fail_at_names_are_checked_before_anything_starts(tmp_path):
    import subprocess
    import sys

    names = asl.task_states()
    assert "LaunchLoad" in names and "Plan" in names and "AbortCampaign" in names
    res = subprocess.run([sys.executable, "-m", "benchctl.cli.main", "run", "examples/smoke.yaml", "--out", str(tmp_path),
                          "--fail-at", "Nope"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "LaunchLoad" in res.stderr
    assert not (tmp_path / "campaigns").exists()


def test_the_committed_definition_is_the_build_of_its_source():
    """state_machines/campaign.asl.json is generated (python -m benchctl.campaign.asl) from campaign.src.json: every
    Lambda task gets the one transient-error retrier, after its own retriers and before States.ALL."""
    for source, target in asl.BUILT.items():  # the campaign state machine, and the stopped-campaign one
        assert asl.text(target) == asl.render(asl.build(asl.load(source))), "run: python -m benchctl.campaign.asl"
    source = asl.load(asl.SOURCE_PATH)
    for _, name, st in asl.all_states(source):
        assert asl.LAMBDA_RETRY not in st.get("Retry", []), f"{name}: the source repeats the builder's retrier"
    for _, name, st in all_states():
        if st["Type"] == "Task":
            errors = [r["ErrorEquals"] for r in st["Retry"]]
            assert asl.LAMBDA_RETRY["ErrorEquals"] in errors, name
            at = errors.index(asl.LAMBDA_RETRY["ErrorEquals"])
            assert all("States.ALL" not in e for e in errors[:at]), name


def test_the_builder_refuses_a_source_that_repeats_its_retrier():
    import pytest

    source = asl.load(asl.SOURCE_PATH)
    source["States"]["Plan"]["Retry"].append(dict(asl.LAMBDA_RETRY))
    with pytest.raises(ValueError, match="Plan: the source repeats the Lambda retrier"):
        asl.build(source)


def test_every_failed_end_runs_the_report_first():
    """Every way to the campaign's failed ends (torn down, or its teardown failed) passes ReportFailure, with the
    ending it reports; the report's own failure goes on to the same end."""
    top = ASL["States"]
    for fail in ("CampaignFailed", "CampaignFailedUntorn"):
        into = [n for n, st in top.items() if fail in asl.successors(st)]
        assert into == ["Ended?"], (fail, into)
    report = top["ReportFailure"]
    assert report["Parameters"]["Payload"]["action"] == "report_failure"
    assert {c["Next"] for c in report["Catch"]} == {report["Next"]} == {"Ended?"}
    assert [n for n, st in top.items() if "ReportFailure" in asl.successors(st)] == ["EndedFailed", "EndedUntorn"]
    assert top["EndedFailed"]["Result"] == "failed" and top["EndedUntorn"]["Result"] == "untorn"
    assert asl.successors(top["AbortCampaign"]) == ["AbortDone?", "EndedUntorn"]
    assert "EndedFailed" in asl.successors(top["AbortDone?"])
