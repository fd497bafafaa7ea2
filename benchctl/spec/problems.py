"""A spec's problems as a person reads them: one line per problem, naming where (``experiments[1].workers[0].pool``),
what was wrong and what is valid; and the bulk check that refuses lists and mappings larger than any valid spec's
before the models see them. Pure: pydantic and the standard library."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from benchctl.spec.text import MAX_SPEC_ITEMS, MAX_SPEC_KEYS
from benchctl.spec.workloads import WORKLOAD_KINDS


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in WORKLOAD_KINDS or str(part).startswith(("function-", "list[", "literal[")):
            continue  # discriminator or union-member tag pydantic puts into the path
        else:
            out += ("." if out else "") + str(part)
    return out or "(spec)"


def _problems(err: ValidationError) -> list[str]:
    lines: list[str] = []
    errors = err.errors()
    for e in errors:
        where = _loc(tuple(e["loc"]))
        if any(str(x).startswith("literal[") for x in e["loc"]) and isinstance(e.get("input"), list) and any(
                _loc(tuple(o["loc"])).startswith(where) and o is not e for o in errors):
            continue  # a list that is not the list it should be: the list member's error says what (not 'auto')
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] in ("value_error", "assertion_error"):
            for line in msg.splitlines():
                lines.append(line if ":" in line.split(" ")[0] else f"{where}: {line}")
            continue
        value = e.get("input")
        shown = json.dumps(value, default=str)[:80] if not isinstance(value, dict) else "{...}"
        if e["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown field (value {shown}); remove it or check its spelling")
        elif e["type"] == "missing":
            lines.append(f"{where}: required field is missing")
        else:
            lines.append(f"{where}: {shown} is invalid: {msg}")
    return lines


# Lists and mappings larger than any valid spec's (benchctl.spec.text: MAX_SPEC_ITEMS, MAX_SPEC_KEYS) are
# refused before the models see them, also in data that came from JSON or an event; at most MAX_PROBLEMS
# problems are listed.
MAX_PROBLEMS = 50


def _bulk_problems(data: Any) -> list[str]:
    """The lists and mappings of the raw data larger than any valid spec's, each named by its path."""
    problems: list[str] = []
    todo: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while todo and len(problems) < MAX_PROBLEMS:
        node, where = todo.pop()
        if isinstance(node, list):
            if len(node) > MAX_SPEC_ITEMS:
                problems.append(f"{_loc(where) or '(spec)'}: {len(node)} items; a spec's lists hold at most "
                                f"{MAX_SPEC_ITEMS}")
                continue
            todo.extend((v, (*where, i)) for i, v in enumerate(node))
        elif isinstance(node, dict):
            if len(node) > MAX_SPEC_KEYS:
                problems.append(f"{_loc(where) or '(spec)'}: {len(node)} keys; a spec's mappings hold at most "
                                f"{MAX_SPEC_KEYS}")
                continue
            todo.extend((v, (*where, str(k))) for k, v in node.items())
    return problems
