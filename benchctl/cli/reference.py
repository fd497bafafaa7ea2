"""The manual's generated references (``docs/reference/``): the campaign spec from its pydantic models, the command
line from its parser, and the spec's JSON Schema for editors (``# yaml-language-server: $schema=...``).

Every text here is a function of the models, the parser and the examples' values, nothing else: no time, no
path of this machine, no terminal width; the same code gives the same bytes. ``python -m benchctl.cli.reference
--write docs/reference`` (``make docs``) writes the files; tests/unit/test_docs.py regenerates them in memory
and fails when a checked-in copy differs. Generating is pure; only :func:`main` writes (the schema itself: :mod:`benchctl.spec.jsonschema`).
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from benchctl.spec.jsonschema import schema_text

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "make docs"  # what regenerates every file below (the Makefile runs this module with --write)
SPEC_MD, CLI_MD, SCHEMA_JSON = "spec.md", "cli.md", "spec.schema.json"
EXAMPLE_MAX = 60  # characters of an example value shown in a table cell

Examples = Mapping[tuple[str, str], tuple[str, Any]]  # (model, field) -> (example file, value)


def _banner(source: str) -> str:
    return (f"<!-- GENERATED from {source} by `{REGENERATE}` (python -m benchctl.cli.reference --write docs/reference); "
            "do not edit: tests/unit/test_docs.py fails when this copy is not current -->")


def _cell(text: str) -> str:
    """Text for one Markdown table cell: no line break, no column separator."""
    return " ".join(text.split()).replace("|", "\\|")


# ------------------------------------------------------------------------------------------ the spec's models


def _members(annotation: Any) -> tuple[Any, ...]:
    return tuple(a for a in get_args(annotation) if a is not type(None))


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def _flat(metadata: Sequence[Any]) -> list[Any]:
    """Constraints of ``Annotated`` metadata, a nested ``Field(...)`` opened up."""
    out: list[Any] = []
    for m in metadata:
        out.extend(_flat(m.metadata) if isinstance(m, FieldInfo) else [m])
    return out


BOUNDS: tuple[tuple[type, str, str], ...] = (
    (at.Gt, "gt", "> {}"), (at.Ge, "ge", "≥ {}"), (at.Lt, "lt", "< {}"), (at.Le, "le", "≤ {}"),
    (at.MinLen, "min_length", "length ≥ {}"), (at.MaxLen, "max_length", "length ≤ {}"),
)


def bounds(metadata: Sequence[Any]) -> list[str]:
    """The numeric, length and pattern bounds a field's metadata sets, in that order."""
    out: list[str] = []
    flat = _flat(metadata)
    for kind, attr, text in BOUNDS:
        out += [text.format(getattr(m, attr)) for m in flat if isinstance(m, kind)]
    out += [f"pattern `{m.pattern}`" for m in flat if isinstance(getattr(m, "pattern", None), str)]
    return out


def _inner_metadata(annotation: Any) -> list[Any]:
    """The metadata of every ``Annotated`` inside a type (a list's items, a union's members)."""
    args = get_args(annotation)
    here = list(args[1:]) if get_origin(annotation) is Annotated else []
    return here + [m for a in (args[:1] if here else args) for m in _inner_metadata(a)]


def rules(info: FieldInfo) -> list[str]:
    """The text rules of a field's validators, its items' included (``benchctl.spec.fields``: each validator
    states its rule as its doc)."""
    found = [getattr(getattr(m, "func", None), "__doc__", None)
             for m in _flat([*info.metadata, *_inner_metadata(info.annotation)])]
    return list(dict.fromkeys(doc for doc in found if doc))


def type_text(annotation: Any) -> str:
    """A field's type in YAML terms; a model links to its section."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        inner, found = type_text(args[0]), bounds(args[1:])
        disc = next((m.discriminator for m in args[1:] if isinstance(m, FieldInfo) and m.discriminator), None)
        if disc:
            inner = f"one of (by `{disc}`): {inner.replace(' or ', ', ')}"
        return f"{inner} ({', '.join(found)})" if found else inner
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if _is_union(annotation):
        text = " or ".join(type_text(a) for a in _members(annotation))
        return text + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {type_text(args[0])}"
    if origin is tuple:
        return "[" + ", ".join(type_text(a) for a in args) + "]"
    if origin is dict:
        return f"map of {type_text(args[0])} to {type_text(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    return "any" if annotation is Any else getattr(annotation, "__name__", str(annotation))


def nested_models(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """The models a field holds, each with the path suffix that reaches one (``[]`` for a list item,
    ``.<key>`` for a map's value)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    if origin is Annotated or _is_union(annotation):
        return [m for a in (args[:1] if origin is Annotated else args) for m in nested_models(a)]
    if origin is list:
        return [("[]" + s, m) for s, m in nested_models(args[0])]
    if origin is dict:
        return [(".<key>" + s, m) for s, m in nested_models(args[1])]
    return []


def model_sections(root: type[BaseModel]) -> list[tuple[type[BaseModel], list[str]]]:
    """Every model under ``root``, depth first in field order, with the paths at which a spec holds it."""
    found: dict[type[BaseModel], list[str]] = {}

    def walk(model: type[BaseModel], path: str) -> None:
        first = model not in found
        found.setdefault(model, []).append(path)
        if not first:
            return
        for name, info in model.model_fields.items():
            for suffix, sub in nested_models(info.annotation):
                walk(sub, f"{path}.{name}{suffix}" if path else f"{name}{suffix}")

    walk(root, "")
    return list(found.items())


def _value_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(", ", ": "))
    if isinstance(value, str) and not value:
        text = '""'
    return text if len(text) <= EXAMPLE_MAX else text[: EXAMPLE_MAX - 1] + "…"


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "**required**"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its defaults"
    return f"`{_value_text(to_jsonable_python(value))}`"


def example_values(specs: Mapping[str, BaseModel]) -> dict[tuple[str, str], tuple[str, Any]]:
    """For every (model, field) a spec sets to a plain value, the first such value, by file name."""
    out: dict[tuple[str, str], tuple[str, Any]] = {}

    def walk(m: Any, source: str) -> None:
        if isinstance(m, list | tuple):
            for x in m:
                walk(x, source)
        elif isinstance(m, dict):
            for x in m.values():
                walk(x, source)
        elif isinstance(m, BaseModel):
            for name in type(m).model_fields:
                value = getattr(m, name)
                if name in m.model_fields_set and not _holds_model(value):
                    out.setdefault((type(m).__name__, name), (source, to_jsonable_python(value)))
                walk(value, source)

    for source in sorted(specs):
        walk(specs[source], source)
    return out


def _holds_model(value: Any) -> bool:
    if isinstance(value, BaseModel):
        return True
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
    return any(_holds_model(v) for v in items)


def _sentence(text: str) -> str:
    return text + "." if text and not text.endswith(".") else text


def field_row(model: type[BaseModel], name: str, info: FieldInfo, examples: Examples) -> str:
    said = [_sentence(info.description or ""), *(f"Rule: {r}." for r in rules(info))]
    example = examples.get((model.__name__, name))
    shown = f"`{_cell(_value_text(example[1]))}` ({example[0]})" if example else ""
    cells = [f"`{name}`", type_text(info.annotation), default_text(info), ", ".join(bounds(info.metadata)),
             " ".join(s for s in said if s), shown]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _where(model: type[BaseModel], paths: list[str]) -> str:
    if paths == [""]:
        return "The top level of a spec file."
    kind = model.model_fields.get("kind")  # a workload: its tag
    tags = get_args(kind.annotation) if kind is not None and get_origin(kind.annotation) is Literal else ()
    tag = f" with `kind: {tags[0]}`" if len(tags) == 1 else ""
    return "At " + ", ".join(f"`{p}`" for p in paths) + tag + "."


def model_section(model: type[BaseModel], paths: list[str], examples: Examples) -> list[str]:
    doc = " ".join((model.__doc__ or "").split()).replace("``", "`") if model.__doc__ != BaseModel.__doc__ else ""
    lines = [f"## {model.__name__}", "", _where(model, paths) + (f" {doc}" if doc else ""), "",
             "| field | type | default | bounds | description | example |", "|---|---|---|---|---|---|"]
    lines += [field_row(model, name, info, examples) for name, info in model.model_fields.items()]
    return [*lines, ""]


SPEC_INTRO = """\
# Campaign spec reference

Every field of a campaign spec: its type, default, bounds and description, from the pydantic models
(`benchctl/spec/model.py`, `spec_settings.py`, `spec_fields.py`, `workloads.py`, `comparisons.py`), with an example
value from `examples/*.yaml` where one sets it. A field is required only where it says **required**. Besides
these bounds, `benchctl validate` checks what relates fields to each other (pools named by experiments,
comparisons, placement, the model's context, the deployment's ceilings): the guide to the spec, with those
rules, is [campaign-spec.md](campaign-spec.md).

**Editors**: [spec.schema.json](spec.schema.json) is this spec's JSON Schema (also printed by `benchctl schema`).
With the YAML language server (VS Code's YAML extension and others), a first line
`# yaml-language-server: $schema=docs/reference/spec.schema.json` (the path relative to the spec file: from
`examples/`, `../docs/reference/spec.schema.json`) completes and checks fields as you type.
"""


def spec_markdown(examples: Examples | None = None) -> str:
    """The spec reference (``docs/reference/spec.md``): one section per model, every field in model order."""
    from benchctl.spec.model import CampaignSpec

    lines = [_banner("the spec's pydantic models and examples/*.yaml"), "", SPEC_INTRO]
    for model, paths in model_sections(CampaignSpec):
        lines += model_section(model, paths, examples or {})
    return "\n".join(lines).rstrip() + "\n"


# ------------------------------------------------------------------------------------------ the command line


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, help) of each subcommand, in the order the parser lists them."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out += [(name, sub, helps.get(name, "")) for name, sub in action.choices.items()]
    return out


def usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage line, never wrapped (no terminal width in it)."""
    fmt = argparse.HelpFormatter(parser.prog, width=100_000)
    fmt.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return fmt.format_help().strip()


def _default(action: argparse.Action) -> str:
    if action.required or action.default in (None, False, argparse.SUPPRESS) or action.option_strings == []:
        return ""
    return f"`{action.default}`"


def argument_row(action: argparse.Action) -> str:
    name = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.option_strings and action.nargs != 0 and (action.metavar or not action.choices):
        name += f" `{action.metavar or action.dest.upper()}`"
    kind = "positional" if not action.option_strings else "required" if action.required else (
        "flag" if action.nargs == 0 else "option")
    if isinstance(action, argparse._AppendAction):
        kind += ", repeatable"
    choices = ", ".join(f"`{c}`" for c in action.choices) if action.choices else ""
    cells = [name, kind, action.help or "", _default(action), choices]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def command_section(name: str, parser: argparse.ArgumentParser, help_text: str, level: int = 2) -> list[str]:
    lines = [f"{'#' * level} `{parser.prog}`", "", _cell(help_text), "", "```text", usage(parser), "```", ""]
    if parser.description and parser.description != help_text:
        lines += [_cell(parser.description), ""]
    rows = [argument_row(a) for a in parser._actions
            if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]
    if rows:
        lines += ["| argument | kind | help | default | choices |", "|---|---|---|---|---|", *rows, ""]
    for sub_name, sub, sub_help in _subcommands(parser):
        lines += command_section(sub_name, sub, sub_help, level + 1)
    return lines


def _epilog(parser: argparse.ArgumentParser) -> list[str]:
    text = (parser.epilog or "").strip("\n")
    head, _, body = text.partition("\n")
    if head.strip() != "examples:":
        return [text, ""] if text else []
    return ["Examples (the parser's epilog, `benchctl --help`):", "", "```bash",
            *(line.strip() for line in body.splitlines() if line.strip()), "```", ""]


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """The command-line reference (``docs/reference/cli.md``): every subcommand in the parser's order, each
    argument in its order, with help, default and choices."""
    lines = [_banner("benchctl.cli.main.build_parser()"), "", "# Command-line reference", "",
             "Every command of `benchctl`, with every argument, its default and its choices, from the parser "
             "itself. What each command does and its exit codes: [commands.md](commands.md).", "",
             _cell(parser.description or ""), "", "```text", usage(parser), "```", "", *_epilog(parser)]
    for name, sub, help_text in _subcommands(parser):
        lines += command_section(name, sub, help_text)
    return "\n".join(lines).rstrip() + "\n"


# ------------------------------------------------------------------------------------------ the files


def load_examples(root: Path = ROOT) -> dict[str, BaseModel]:
    from benchctl.spec.model import load_spec

    return {f"examples/{p.name}": load_spec(p) for p in sorted((root / "examples").glob("*.yaml"))}


def generated_files(examples: Mapping[str, BaseModel]) -> dict[str, str]:
    """Every generated reference: file name (under docs/reference/) -> its text."""
    from benchctl.cli.main import build_parser

    return {SPEC_MD: spec_markdown(example_values(examples)), CLI_MD: cli_markdown(build_parser()),
            SCHEMA_JSON: schema_text()}


def stale(directory: Path, files: Mapping[str, str]) -> list[str]:
    """The generated files whose copy in ``directory`` is missing or differs."""
    return sorted(name for name, text in files.items()
                  if not (directory / name).is_file() or (directory / name).read_text(encoding="utf-8") != text)


def _iter_write(directory: Path, files: Mapping[str, str]) -> Iterator[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(files.items()):
        (directory / name).write_text(text, encoding="utf-8")
        yield directory / name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchctl.cli.reference", description=__doc__.split("\n")[0])
    ap.add_argument("--write", metavar="DIR", help="write the generated references into DIR (docs/reference)")
    ap.add_argument("--check", metavar="DIR", help="exit 1 naming each file in DIR that is not current")
    args = ap.parse_args(argv)
    files = generated_files(load_examples())
    if args.check:
        old = stale(Path(args.check), files)
        for name in old:
            print(f"{Path(args.check) / name}: not current; run `{REGENERATE}`", file=sys.stderr)
        return 1 if old else 0
    for path in _iter_write(Path(args.write or ROOT / "docs" / "reference"), files):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
