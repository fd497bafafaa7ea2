"""JSON as AIPerf and the Prometheus API write it, and nothing else: what ingestion and `benchctl dashboards` parse with.

Python's ``json`` module accepts what no AIPerf (nor RFC 8259) writes, and each of those changes a figure without
a word: ``NaN``, ``Infinity`` and ``-Infinity`` (stored as NULL by the lake, so a verdict's n shrinks), numbers
that overflow a double (``1e400`` becomes ``inf``), an object naming one key twice (the last one silently wins),
and nesting deep enough to end in a ``RecursionError`` traceback. :func:`loads_strict` refuses each as an
:class:`~benchctl.errors.ArtifactError` naming the file (and line) and the field's path inside the document, e.g.
``profile_export.jsonl:12: metrics.time_to_first_token.value: NaN is not a finite number``.

How (Python's ``json.loads`` hooks, docs.python.org/3/library/json.html#json.loads): ``parse_constant`` is called
for ``NaN``/``Infinity``/``-Infinity``, ``parse_float`` for every real literal (``float('1e400')`` is ``inf``),
``parse_int`` for every integer literal (and ``int()`` of more than 4,300 digits raises a ``ValueError``),
``object_pairs_hook`` with every object's (key, value) pairs in order, duplicates included. The hooks only mark
what they see; the document is then walked to name the field. The depth bound is checked on the text before
parsing (the C scanner recurses once per level). May import only the standard library and benchctl.errors.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from benchctl.errors import ArtifactError

MAX_DEPTH = 64  # AIPerf 0.13's deepest artifact nests 6 levels (server metrics: metrics.X.series[i].stats)
MAX_INT_DIGITS = 40  # a 64-bit integer has at most 20 digits; int() of over 4,300 raises
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]')  # strings whole: a "[" inside one is text


NOT_FINITE = "is not a finite number (AIPerf writes no NaN or Infinity, and no number beyond a double's range)"


class _Impossible:
    """A literal no AIPerf writes, kept as written until the walk names its field."""

    __slots__ = ("text", "why")

    def __init__(self, text: str, why: str) -> None:
        self.text = text
        self.why = why


class _Duplicated(dict[str, Any]):
    """An object that named ``key`` more than once."""

    key: str = ""


def _path_text(stack: list[list[Any]]) -> str:
    parts = [f"[{label}]" if kind == "[" else f".{label}" for kind, label, _ in stack if label is not None]
    text = "".join(parts[:4]).lstrip(".") or "(the document)"
    return text + (f"...({len(parts) - 4} more levels)" if len(parts) > 4 else "")


def _depth_error(text: str, where: str) -> ArtifactError | None:
    """The error for ``text`` nesting deeper than MAX_DEPTH, naming the field that does, found by a scan of the
    text (strings skipped whole; an object's key is the string after its ``{`` or a ``,``), or None."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # cannot nest deeper: no scan needed
        return None
    stack: list[list[Any]] = []  # [kind, key or index, expecting a key]
    for m in _TOKENS.finditer(text):
        tok = m.group()
        top = stack[-1] if stack else None
        if tok in "[{":
            if len(stack) == MAX_DEPTH:
                line = text.count("\n", 0, m.start())
                at = f"{where}:{line + 1}" if line else where
                return ArtifactError(f"{at}: {_path_text(stack)}: JSON nested deeper than {MAX_DEPTH} levels; "
                                     "AIPerf's artifacts nest a handful: refused before parsing")
            stack.append([tok, 0 if tok == "[" else None, tok == "{"])
        elif tok in "]}":
            if stack:
                stack.pop()
        elif tok == ",":
            if top is not None and top[0] == "[":
                top[1] += 1
            elif top is not None:
                top[2] = True
        elif top is not None and top[0] == "{" and top[2]:  # a string where a key is expected: the key
            top[1], top[2] = tok[1:-1][:60], False
    return None


def _walk(value: Any, path: str) -> tuple[str, str] | None:
    """(field path, what is wrong) of the first impossible value under ``value``, or None."""
    if isinstance(value, _Impossible):
        return path or "(the document)", f"{value.text[:40]} {value.why}"
    if isinstance(value, dict):
        if isinstance(value, _Duplicated):
            return path or "(the document)", (f"key {value.key!r} appears more than once in one object (AIPerf "
                                             "writes each key once; which value is meant is ambiguous)")
        for k, v in value.items():
            found = _walk(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _walk(v, f"{path}[{i}]")
            if found:
                return found
    return None


def loads_strict(text: str, where: str) -> Any:
    """``text`` parsed as JSON; ``where`` ("file" or "file:line") names it in errors.

    Raises ``json.JSONDecodeError`` for text that is not JSON (the caller words it: it may be a write cut
    short) and :class:`ArtifactError` for JSON that no AIPerf writes (see the module's docstring)."""
    err = _depth_error(text, where)
    if err is not None:
        raise err
    flagged = False

    def impossible(s: str, why: str = NOT_FINITE) -> Any:
        nonlocal flagged
        flagged = True
        return _Impossible(s, why)

    def real(s: str) -> Any:
        v = float(s)
        return v if math.isfinite(v) else impossible(s)

    def integer(s: str) -> Any:
        if len(s) <= MAX_INT_DIGITS:
            return int(s)
        return impossible(f"{s[:20]}... ({len(s)} digits)", f"is beyond any count or time (over {MAX_INT_DIGITS} digits)")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal flagged
        obj = dict(items)
        if len(obj) == len(items):
            return obj
        flagged = True
        seen: set[str] = set()
        dup = _Duplicated(obj)
        for k, _ in items:
            if k in seen:
                dup.key = k
                break
            seen.add(k)
        return dup

    obj = json.loads(text, parse_constant=impossible, parse_float=real, parse_int=integer, object_pairs_hook=pairs)
    if flagged:
        found = _walk(obj, "")
        if found:
            field, what = found
            raise ArtifactError(f"{where}: {field}: {what}")
    return obj
