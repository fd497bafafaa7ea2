"""The campaign state machine's definition: load it, substitute it, walk it, and build it from its source.

``state_machines/campaign.asl.json`` is the one definition of the campaign sequence: Step Functions runs
it on AWS (the control-plane stack substitutes each ``${...FunctionArn}``), moto's interpreter runs it
locally (``benchctl.local.engine`` substitutes in-process ones), and the tests derive their cases from it.
It is BUILT from ``state_machines/campaign.src.json`` by :func:`build` (``python -m benchctl.campaign.asl``): the
source holds every state as written, minus what every Lambda task repeats, the retrier of Lambda's own
transient errors (:data:`LAMBDA_RETRY`), which the builder inserts after a task's own retriers and before
a ``States.ALL`` one (the States Language wants ``States.ALL`` last). A test holds the committed file to
the build of its source. May import only the standard library.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchctl.resources import data_dir

JSON = dict[str, Any]
ASL_PATH = data_dir("state_machines") / "campaign.asl.json"
SOURCE_PATH = data_dir("state_machines") / "campaign.src.json"
# the stopped-campaign state machine (benchctl.campaign.stopped), built the same way from its source
STOPPED_ASL_PATH = data_dir("state_machines") / "stopped.asl.json"
STOPPED_SOURCE_PATH = data_dir("state_machines") / "stopped.src.json"
BUILT = {SOURCE_PATH: ASL_PATH, STOPPED_SOURCE_PATH: STOPPED_ASL_PATH}  # each source and its deployable build
LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
LAMBDA_CALLBACK = LAMBDA_INVOKE + ".waitForTaskToken"  # the invoke resumes when the task token is answered
# Lambda's own transient errors (AWS Step Functions developer guide, "Handling Lambda service exceptions")
LAMBDA_RETRY: JSON = {
    "ErrorEquals": ["Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException",
                    "Lambda.TooManyRequestsException"],
    "IntervalSeconds": 2,
    "MaxAttempts": 3,
    "BackoffRate": 2.0,
}


# ---------------------------------------------------------------------------------------------- load


def text(path: Path = ASL_PATH) -> str:
    return path.read_text(encoding="utf-8")


def load(path: Path = ASL_PATH) -> JSON:
    """The definition as a dict."""
    data: JSON = json.loads(text(path))
    return data


def substitute(substitutions: dict[str, str], path: Path = ASL_PATH) -> str:
    """The definition's text with its ``${Var}`` substitutions applied, as CDK's DefinitionBody does on AWS;
    ValueError when one is left."""
    out = text(path)
    for key, value in substitutions.items():
        out = out.replace("${" + key + "}", value)
    if "${" in out:
        raise ValueError(f"{path}: unresolved substitution in {out[out.index('${'):][:40]!r}")
    return out


# ---------------------------------------------------------------------------------------------- walk


def scopes(states: JSON, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], JSON]]:
    """(path of Map names, states) of the top level and every Map iterator, outermost first."""
    yield path, states
    for name, st in states.items():
        if st["Type"] == "Map":
            yield from scopes(st["ItemProcessor"]["States"], (*path, name))


def all_states(asl: JSON | None = None) -> Iterator[tuple[tuple[str, ...], str, JSON]]:
    """(scope path, name, state) of every state, at every level."""
    for path, states in scopes((asl or load())["States"]):
        for name, st in states.items():
            yield path, name, st


def state(name: str, asl: JSON | None = None) -> JSON:
    """One state by name, at any level (KeyError naming it)."""
    for _, n, st in all_states(asl):
        if n == name:
            return st
    raise KeyError(f"no state {name!r} in the campaign ASL")


def scope_of(name: str, asl: JSON | None = None) -> JSON:
    """The states dict (top level or a Map iterator) that holds ``name``."""
    for _, states in scopes((asl or load())["States"]):
        if name in states:
            return states
    raise KeyError(f"no state {name!r} in the campaign ASL")


def task_states(asl: JSON | None = None) -> list[str]:
    """Names of every Task state, in definition order (top level and inside Map iterators)."""
    def walk(states: JSON) -> list[str]:
        out = []
        for name, st in states.items():
            if st["Type"] == "Task":
                out.append(name)
            elif st["Type"] == "Map":
                out += walk(st["ItemProcessor"]["States"])
        return out

    return walk((asl or load())["States"])


def successors(st: JSON, *, catches: bool = True) -> list[str]:
    """The states a state may go to next within its scope: Next, Default, each Choice (and each Catch)."""
    out = [n for n in (st.get("Next"), st.get("Default")) if n]
    out += [c["Next"] for c in st.get("Choices", [])]
    if catches:
        out += [c["Next"] for c in st.get("Catch", [])]
    return out


def reachable(states: JSON, starts: list[str], *, catches: bool = True) -> set[str]:
    """Every state of one scope reachable from ``starts`` (themselves included)."""
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += successors(states[name], catches=catches)
    return seen


def normal_path_states(asl: JSON | None = None) -> set[str]:
    """States reached without any failure: Next/Default/Choice edges and Map iterators, no Catch."""
    asl = asl or load()
    seen: set[str] = set()

    def walk(states: JSON, start: str) -> None:
        for name in reachable(states, [start], catches=False):
            if name not in seen:
                seen.add(name)
                st = states[name]
                if st["Type"] == "Map":
                    walk(st["ItemProcessor"]["States"], st["ItemProcessor"]["StartAt"])

    walk(asl["States"], asl["StartAt"])
    return seen


def catch_targets(name: str, asl: JSON | None = None) -> set[str]:
    """Every state reachable from ``name``'s Catch, within its scope."""
    states = scope_of(name, asl)
    return reachable(states, [c["Next"] for c in states[name].get("Catch", [])])


# --------------------------------------------------------------------------------------------- build


def build(source: JSON) -> JSON:
    """The deployable definition from its source: every Lambda task gets :data:`LAMBDA_RETRY` after its
    own retriers and before a ``States.ALL`` one. ValueError when the source already holds it."""
    out = copy.deepcopy(source)
    for _, name, st in all_states(out):
        if st["Type"] != "Task" or st.get("Resource") not in (LAMBDA_INVOKE, LAMBDA_CALLBACK):
            continue
        retry = st.get("Retry", [])
        if any(r.get("ErrorEquals") == LAMBDA_RETRY["ErrorEquals"] for r in retry):
            raise ValueError(f"state {name}: the source repeats the Lambda retrier; the builder adds it")
        last = [r for r in retry if "States.ALL" in r.get("ErrorEquals", [])]
        retry = [r for r in retry if r not in last] + [copy.deepcopy(LAMBDA_RETRY)] + last
        if "Retry" in st:
            st["Retry"] = retry
        else:  # where a retrier list stands: before the Catch
            keys = list(st)
            at = keys.index("Catch") if "Catch" in keys else len(keys)
            items = list(st.items())
            st.clear()
            st.update(items[:at])
            st["Retry"] = retry
            st.update(items[at:])
    return out


def render(definition: JSON) -> str:
    """The definition as the committed file holds it."""
    return json.dumps(definition, indent=2) + "\n"


def main(argv: list[str]) -> int:
    """``python -m benchctl.campaign.asl [--check]``: write each definition built from its source (:data:`BUILT`;
    or only check that the committed ones are current: exit 1 when one is not)."""
    if argv not in ([], ["--check"]):
        print("usage: python -m benchctl.campaign.asl [--check]", file=sys.stderr)
        return 2
    stale = 0
    for source, target in BUILT.items():
        built = render(build(load(source)))
        if argv == ["--check"]:
            if text(target) != built:
                print(f"{target} is not the build of {source}: run python -m benchctl.campaign.asl", file=sys.stderr)
                stale += 1
            continue
        target.write_text(built, encoding="utf-8")
        print(f"wrote {target}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
