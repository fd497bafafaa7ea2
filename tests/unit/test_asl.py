"""Structure of the one campaign ASL: every state that can fail reaches teardown and a failed end."""

import json
import re
from pathlib import Path

from lambdas import FUNCTIONS

ROOT = Path(__file__).resolve().parents[2]
ASL = json.loads((ROOT / "state_machines" / "campaign.asl.json").read_text())
TEARDOWN_ACTIONS = {"experiment", "experiment_failed", "campaign", "plan_failed", "stop"}


def scopes(states, path=()):
    """Yield (path, states-dict) for the top level and every Map iterator."""
    yield path, states
    for name, st in states.items():
        if st["Type"] == "Map":
            yield from scopes(st["ItemProcessor"]["States"], (*path, name))


def all_states():
    for path, states in scopes(ASL["States"]):
        for name, st in states.items():
            yield path, name, st


def test_substitutions_are_exactly_the_handlers():
    text = json.dumps(ASL)
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(FUNCTIONS)
    for _, _, st in all_states():
        if st["Type"] == "Task":
            assert st["Resource"] == "arn:aws:states:::lambda:invoke"
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


def test_every_catch_leads_through_teardown_to_a_fail_state():
    for _path, states in scopes(ASL["States"]):
        for name, st in states.items():
            for c in st.get("Catch", []):
                target = c["Next"]
                if is_teardown(name, st):
                    # teardown's own failure: a failed end (an outer scope's Catch or the sweeper retries it)
                    assert _reaches(states, target, lambda n, s: s["Type"] == "Fail"), name
                    assert not _reaches(states, target, lambda n, s: s["Type"] == "Succeed"), name
                    continue
                assert _reaches(states, target, is_teardown), f"{name} Catch → {target} skips teardown"
                # after teardown the scope ends in a Fail state (and only Fail/teardown on the path)
                assert _reaches(states, target, lambda n, s: s["Type"] == "Fail"), f"{name}: no failed end"
                assert not _reaches(states, target, lambda n, s: s["Type"] == "Succeed"), f"{name}: failure can succeed"


def test_teardown_states_cannot_be_blocked_by_abort():
    # teardown actions are 'cleanup' in the handlers: the abort flag never stops them
    from lambdas import load, teardown  # noqa: F401  (import proves they exist)

    for _, name, st in all_states():
        if st["Type"] == "Task" and is_teardown(name, st):
            assert st.get("Retry"), f"teardown state {name} should retry before giving up"


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
        "CheckWarmUp", "ForEachStep", "TeardownExperiment",
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

    for path in [*(ROOT / "benchctl").glob("*.py"), *(ROOT / "benchctl" / "k8s").glob("*.py"),
                 *(ROOT / "lambdas").glob("*.py")]:
        if path.name == "aws_report.py":
            continue  # Athena's own short queries (seconds) are awaited in Report, bounded by its timeout
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

    from benchctl.local.engine import task_states

    names = task_states()
    assert "LaunchLoad" in names and "Plan" in names and "AbortCampaign" in names
    res = subprocess.run([sys.executable, "-m", "benchctl.cli", "run", "examples/smoke.yaml", "--out", str(tmp_path),
                          "--fail-at", "Nope"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "LaunchLoad" in res.stderr
    assert not (tmp_path / "campaigns").exists()
