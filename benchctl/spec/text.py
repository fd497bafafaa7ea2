"""A spec's text to plain data, refusing what a hostile or careless spec could do to the reader itself.

Whoever may start a campaign (or write the scheduled spec in the results bucket) is not trusted with the
machine that reads it: the CLI, or the 512 MB Plan function. So, before and while parsing:

* **size**: a spec over :data:`MAX_SPEC_BYTES` (256 KiB) is refused before a byte of it is parsed (readers
  read at most one byte more: :func:`read_capped`; on S3 the object's ``ContentLength`` is checked before its
  body is read). The largest example is about 5 KB; 256 KiB leaves 50 times that and bounds what
  PyYAML, which holds a document's events and nodes in memory, is given;
* **YAML anchors and aliases** (``&a`` / ``*a``, and ``<<`` merge keys) are refused at the line where the
  first one stands: an alias repeats a node wherever it is named, so a few hundred bytes of nested aliases
  ("billion laughs") expand to billions of values once anything walks them (a 441-byte one took 63 s and
  5.4 GB to refuse with PyYAML's ``safe_load``);
* **duplicate keys** are refused (YAML and JSON readers keep the last one silently: the value a reviewer
  reads would not be the value that runs);
* **nesting** deeper than :data:`MAX_DEPTH` is refused (no valid spec goes past 7 levels; deeper input only
  exhausts the parsers' recursion).

Pure: the standard library, PyYAML imported lazily.
"""

from __future__ import annotations

import copy
import json
from typing import IO, Any

from benchctl.errors import SpecError

MAX_SPEC_BYTES = 256 * 1024
MAX_DEPTH = 20
# No list of a valid spec holds more than MAX_SPEC_ITEMS items (the largest cap of any list field: 64 loads,
# comparisons or overrides) and no mapping more than MAX_SPEC_KEYS keys: larger ones are refused as they are
# read (validating thousands of items only to refuse them took seconds at the size cap)
MAX_SPEC_ITEMS = 64
MAX_SPEC_KEYS = 256


def size_problem(size: int) -> str | None:
    """The one-line problem of a spec of ``size`` bytes, or None when it is within the limit."""
    return None if size <= MAX_SPEC_BYTES else _too_big(f"{size} bytes")


def _too_big(size: str) -> str:
    return (f"(file): {size} is over the spec size limit: a spec is at most {MAX_SPEC_BYTES} bytes "
            f"(256 KiB; benchctl.spec.text.MAX_SPEC_BYTES); nothing was parsed")


def read_capped(stream: IO[bytes], source: str, size: int | None = None) -> bytes:
    """At most :data:`MAX_SPEC_BYTES` of ``stream``; a SpecError, before anything is read, when the declared
    ``size`` is over the limit, or after one byte more when the stream turns out longer (no size, or it lied)."""
    if size is not None and (problem := size_problem(size)):
        raise SpecError(source, [problem])
    chunks: list[bytes] = []
    left = MAX_SPEC_BYTES + 1
    while left > 0 and (chunk := stream.read(left)):  # a short read (a pipe, a socket) is not the end
        chunks.append(chunk)
        left -= len(chunk)
    if left <= 0:
        raise SpecError(source, [_too_big(f"more than {MAX_SPEC_BYTES} bytes")])
    return b"".join(chunks)


class _Refused(Exception):
    def __init__(self, line: int, column: int, message: str) -> None:
        super().__init__(message)
        self.where = f"line {line + 1}, column {column + 1}"


def _check_events(text: str) -> None:
    """One pass over the YAML's events (libyaml's parser, in C, when PyYAML has it): an anchor, an alias, nesting
    past :data:`MAX_DEPTH`, or a list or mapping larger than any valid spec's is refused at the line where it
    stands, before any node is composed."""
    import yaml

    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    # per open collection, outermost first: [nodes in it so far, whether it is a mapping (a key and a value a pair)]
    open_: list[list[int]] = []
    try:
        for event in yaml.parse(text, Loader=loader_class):
            _check_event(event, open_)
    except yaml.MarkedYAMLError as err:  # libyaml's own limit (1000 levels), met while scanning ahead
        mark = err.problem_mark
        if "maximum nesting depth" not in str(err) or mark is None:
            raise
        raise _Refused(mark.line, mark.column,
                       f"nested deeper than {MAX_DEPTH} levels (no valid spec goes past 7)") from None


def _where(event: Any) -> tuple[int, int]:
    mark = event.start_mark
    return (mark.line, mark.column) if mark is not None else (0, 0)


def _check_event(event: Any, open_: list[list[int]]) -> None:
    """Refuse ``event`` where it stands if it is an anchor or an alias, one node past what any valid spec's list
    or mapping holds, or a collection nested too deep; keep ``open_`` (the open collections) up to date."""
    from yaml.events import AliasEvent, CollectionEndEvent, MappingStartEvent, NodeEvent, SequenceStartEvent

    if isinstance(event, AliasEvent) or getattr(event, "anchor", None) is not None:
        kind, sign = ("alias", "*") if isinstance(event, AliasEvent) else ("anchor", "&")
        raise _Refused(*_where(event),
                       f"YAML {kind} {sign}{event.anchor} refused: a spec may use no anchors (&name) or aliases "
                       "(*name): an alias repeats a node wherever it is named, so a few lines can expand to "
                       "billions of values; write each value out")
    if isinstance(event, NodeEvent) and open_:  # a scalar, or a collection's start: one node more in its parent
        parent = open_[-1]
        parent[0] += 1
        mapping = parent[1] == 1
        too_many = (parent[0] + 1) // 2 > MAX_SPEC_KEYS if mapping else parent[0] > MAX_SPEC_ITEMS
        if too_many:
            what = (f"a mapping of more than {MAX_SPEC_KEYS} keys" if mapping
                    else f"a list of more than {MAX_SPEC_ITEMS} items")
            raise _Refused(*_where(event), f"{what}: no valid spec holds one (its lists hold at most "
                                           f"{MAX_SPEC_ITEMS} items, its mappings {MAX_SPEC_KEYS} keys)")
    if isinstance(event, (MappingStartEvent, SequenceStartEvent)):
        open_.append([0, 1 if isinstance(event, MappingStartEvent) else 0])
        if len(open_) > MAX_DEPTH - 1:  # the values inside it are one level deeper
            raise _Refused(*_where(event), f"nested deeper than {MAX_DEPTH} levels (no valid spec goes past 7)")
    elif isinstance(event, CollectionEndEvent):
        open_.pop()


def _safe_loader(text: str) -> Any:
    """PyYAML's safe loader over ``text`` (libyaml's, in C, when PyYAML has it: a spec at the size cap loads in
    tens of milliseconds, not a second), refusing anchors, aliases and deep nesting (:func:`_check_events`,
    first), merge keys and duplicate keys."""
    import yaml
    from yaml.nodes import MappingNode, ScalarNode

    _check_events(text)
    base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, MappingNode):
                seen: set[tuple[str, str]] = set()
                for key, _ in node.value:
                    if key.tag == "tag:yaml.org,2002:merge":
                        raise _Refused(key.start_mark.line, key.start_mark.column,
                                       "YAML merge key '<<' refused: a spec's mappings are written out in full")
                    if isinstance(key, ScalarNode):
                        if (key.tag, key.value) in seen:
                            raise _Refused(key.start_mark.line, key.start_mark.column,
                                           f"duplicate key {key.value!r}: each key appears once in a mapping")
                        seen.add((key.tag, key.value))
            return super().construct_mapping(node, deep=deep)

    loader = Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _depth_problem(data: Any) -> str | None:
    todo = [(data, 1)]
    while todo:
        node, depth = todo.pop()
        if depth > MAX_DEPTH:
            return f"(file): nested deeper than {MAX_DEPTH} levels (no valid spec goes past 7)"
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        todo.extend((c, depth + 1) for c in children)
    return None


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}: each key appears once in an object")
        out[k] = v
    return out


def spec_data(text: str, source: str) -> Any:
    """The data of a spec's text (JSON when ``source`` ends with ``.json``, else YAML); SpecError with one
    line naming where and why when the text is over the size limit, not well formed, or uses what a spec
    may not (anchors, aliases, merge keys, duplicate keys, deep nesting)."""
    if problem := size_problem(len(text.encode("utf-8", "surrogatepass"))):
        raise SpecError(source, [problem])
    if source.endswith(".json"):
        try:
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        except RecursionError:
            raise SpecError(source, [f"(file): nested deeper than {MAX_DEPTH} levels (no valid spec goes past 7)"]) from None
        except ValueError as err:  # JSONDecodeError, a duplicate key, an integer of over 4300 digits
            raise SpecError(source, [f"(file): not valid JSON: {' '.join(str(err).split())}"]) from None
        if problem := _depth_problem(data):
            raise SpecError(source, [problem])
        return data
    import yaml

    if (kept := _PARSED.get(text)) is not None:
        return copy.deepcopy(kept)  # the caller's own copy: it may change what it is given
    try:
        data = _safe_loader(text)
    except _Refused as err:
        raise SpecError(source, [f"(file): {err.where}: {err}"]) from None
    except yaml.YAMLError as err:
        detail = " ".join(str(err).split())  # one line per problem, even for PyYAML's multi-line messages
        raise SpecError(source, [f"(file): not valid YAML: {detail}"]) from None
    except ValueError as err:  # an integer of over 4300 digits (Python's int_max_str_digits)
        raise SpecError(source, [f"(file): not valid YAML: {' '.join(str(err).split())}"]) from None
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.pop(next(iter(_PARSED)))  # the oldest
    _PARSED[text] = copy.deepcopy(data)
    return data


# The data of the YAML texts read lately, by text: PyYAML's pure-Python loader (which the refusals above need)
# takes ~20 ms for a spec, and a process often reads the same spec more than once (the CLI's plan, render and
# run paths, the local engine's Plan state). Only well-formed texts are kept; a refused one is re-read, and
# says why, each time.
_PARSED: dict[str, Any] = {}
_PARSED_MAX = 16
