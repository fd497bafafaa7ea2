"""The manual's checks (tests/unit/test_docs.py; the rules are docs/explanation/testing.md, "The manual"): every
spec snippet validates as ``benchctl validate`` would, every ``benchctl`` command line parses, every relative link
resolves and every page under docs/ is reachable from the README.

Each check takes Markdown text (file name -> text) and returns its problems as ``file:line: message``; none
raises on a broken document, so a test can hand it a broken snippet and see the problem named.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
SPEC_LANGS = {"yaml", "yml"}
SHELL_LANGS = {"bash", "console", "sh", "shell"}
COMMANDS = ("benchctl", ".venv/bin/benchctl")
FRAGMENT, NOT_A_SPEC = "# fragment", "# not a spec"

# What a `# fragment` block's top-level keys replace: a small spec that validates, with the experiments the
# manual's fragments name (agg, agg-rr, disagg: 8 GPUs each, so every question of the pairs is valid).
BASE_SPEC = """\
name: docs-fragment
model: {name: Qwen/Qwen3-30B-A3B}
pools:
  - {name: gpu-a100, instance_type: p4d.24xlarge, gpus_per_node: 8, gpu_kind: A100-40GB, provider: local}
experiments:
  - {name: agg, mode: aggregated, router: kv, workers: [{role: worker, pool: gpu-a100, replicas: 2, tensor_parallel: 4}]}
  - {name: agg-rr, mode: aggregated, router: round-robin,
     workers: [{role: worker, pool: gpu-a100, replicas: 2, tensor_parallel: 4}]}
  - name: disagg
    mode: disaggregated
    router: kv
    workers:
      - {role: prefill, pool: gpu-a100, replicas: 1, tensor_parallel: 4}
      - {role: decode, pool: gpu-a100, replicas: 1, tensor_parallel: 4}
workloads:
  - {kind: concurrency_sweep, concurrency: [1, 4], isl: 256, osl: 32, duration_s: 10}
pricing: {instances: {p4d.24xlarge: {usd_per_hour: 21.96}}}
"""


@dataclass(frozen=True)
class Block:
    """A fenced code block: its file, the line of its first content line, its language and its text."""

    source: str
    line: int
    lang: str
    text: str


def markdown_files(root: Path = ROOT) -> dict[str, str]:
    """The README and every page under docs/, by path relative to ``root``."""
    paths = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in paths}


FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def fenced_blocks(source: str, text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m[1]), m[2], m[3].lower()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence)
                    and not lines[j].strip().strip(fence[0])), len(lines))
        body = [line[indent:] if not line[:indent].strip() else line.lstrip() for line in lines[i + 1:end]]
        blocks.append(Block(source, i + 2, lang, "\n".join(body) + "\n"))
        i = end + 1
    return blocks


def all_blocks(files: Mapping[str, str]) -> list[Block]:
    return [b for name, text in sorted(files.items()) for b in fenced_blocks(name, text)]


# --------------------------------------------------------------------------------------------- spec snippets


def _marker(text: str) -> str | None:
    """``# fragment`` or ``# not a spec`` among the block's leading comment lines, else None."""
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        for marker in (FRAGMENT, NOT_A_SPEC):
            if line == marker or line.startswith(marker + ":") or line.startswith(marker + " "):
                return marker
    return None


def validate_spec(text: str | None, data: Any, source: str) -> list[str]:
    """What ``benchctl validate`` says of a spec (its text as a file holds it, or already-read data), as problem
    lines: the models and rules, then the deployment ceilings of the project's cdk.json; [] when valid."""
    from benchctl.errors import CeilingExceeded, SpecError
    from benchctl.planning import ceilings
    from benchctl.spec.model import parse_spec, parse_spec_text

    try:
        spec = parse_spec_text(text, source) if text is not None else parse_spec(data, source)
        c = ceilings.resolve(ROOT / "cdk.json")
        ceilings.refuse(spec, source, c, c.history_poll_seconds)
    except (SpecError, CeilingExceeded) as err:
        return list(err.problems)
    return []


def spec_block_problems(block: Block) -> list[str]:
    from benchctl.errors import SpecError
    from benchctl.spec.text import spec_data

    where = f"{block.source}:{block.line}"
    marker = _marker(block.text)
    try:  # the spec's own YAML rules (no anchors, aliases or duplicate keys), as `validate` reads a file
        data = spec_data(block.text, f"{where}.yaml") if marker != NOT_A_SPEC else yaml.safe_load(block.text)
    except (SpecError, yaml.YAMLError) as err:
        return [f"{where}: not valid YAML: {' '.join(str(err).split())}"]
    if marker == NOT_A_SPEC:
        return []
    if marker == FRAGMENT:
        if data is not None and not isinstance(data, dict):
            return [f"{where}: a fragment's top level must be a mapping of spec keys"]
        problems = validate_spec(None, {**yaml.safe_load(BASE_SPEC), **(data or {})}, where)
    elif isinstance(data, dict) and "experiments" in data:
        problems = validate_spec(block.text, None, where)
    else:
        return [f"{where}: a yaml block that is neither a whole spec (a top-level `experiments` key) nor marked "
                f"`{FRAGMENT}` or `{NOT_A_SPEC}` (docs/explanation/testing.md)"]
    return [f"{where}: spec: {p}" for p in problems]


def spec_problems(files: Mapping[str, str]) -> list[str]:
    return [p for b in all_blocks(files) if b.lang in SPEC_LANGS for p in spec_block_problems(b)]


# --------------------------------------------------------------------------------------------- command lines


def command_lines(block: Block) -> list[tuple[int, str]]:
    """(line number, command) of each shell command of a block: a ``$ `` prompt dropped, ``\\`` continuations
    joined."""
    out: list[tuple[int, str]] = []
    start, parts = block.line, []
    for n, raw in enumerate(block.text.splitlines(), block.line):
        line = raw.strip()
        if not parts:
            start, line = n, line.removeprefix("$ ")
        parts.append(line.removesuffix("\\").strip())
        if not line.endswith("\\"):
            out.append((start, " ".join(parts)))
            parts = []
    return out + ([(start, " ".join(parts))] if parts else [])


def parse_problem(command: str, parser_factory: Callable[[], Any]) -> str | None:
    """Why ``benchctl``'s parser refuses a command line (argparse's own message), or None."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError as err:
        return f"not a shell command line: {err}"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser_factory().parse_args(words[1:])
    except SystemExit as exit_:
        if exit_.code:
            return (err.getvalue().strip().splitlines() or ["refused"])[-1]
    return None


def command_problems(files: Mapping[str, str], parser_factory: Callable[[], Any] | None = None) -> list[str]:
    from benchctl.cli.main import build_parser

    factory = parser_factory or build_parser
    problems = []
    for block in (b for b in all_blocks(files) if b.lang in SHELL_LANGS):
        for n, command in command_lines(block):
            if (command.split() or [""])[0] in COMMANDS:
                why = parse_problem(command, factory)
                if why:
                    problems.append(f"{block.source}:{n}: `{command}`: {why}")
    return problems


# --------------------------------------------------------------------------------------------- links

LINK = re.compile(r"\[[^\[\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+).+?\1")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def prose_lines(text: str, blank_code: bool = True) -> list[tuple[int, str]]:
    """(line number, line) outside fenced blocks, inline code blanked out: where links and headings are."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and (fence is None or (m[2].startswith(fence) and not line.strip().strip(fence[0]))):
            fence = m[2] if fence is None else None
            continue
        if fence is None:
            out.append((n, CODE_SPAN.sub(lambda s: " " * len(s[0]), line) if blank_code else line))
    return out


def prose(text: str) -> str:
    """The text with fenced blocks and inline code blanked out, every line where it was (a link may wrap)."""
    kept = dict(prose_lines(text))
    return "\n".join(kept.get(n, "") for n in range(1, len(text.splitlines()) + 1))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    for _, line in prose_lines(text, blank_code=False):
        if m := HEADING.match(line):
            base = slug(m[1])
            n = next(i for i in range(len(found) + 1) if (f"{base}-{i}" if i else base) not in found)
            found.add(f"{base}-{n}" if n else base)
    return found


def links(name: str, text: str) -> list[tuple[int, str, str]]:
    """(line, target path relative to the repository, anchor) of each relative link of a file."""
    out = []
    body = prose(text)
    for m in LINK.finditer(body):
        target = m[1]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), path)) if path else name
        out.append((body.count("\n", 0, m.start()) + 1, resolved, anchor))
    return out


def link_problems(files: Mapping[str, str], root: Path = ROOT) -> list[str]:
    problems = []
    for name, text in sorted(files.items()):
        for n, target, anchor in links(name, text):
            path = root / target
            if target not in files and not path.exists():
                problems.append(f"{name}:{n}: dead link: {target} does not exist")
            elif anchor and target.endswith(".md"):
                page = files.get(target) or path.read_text(encoding="utf-8")
                if anchor not in anchors(page):
                    problems.append(f"{name}:{n}: dead link: {target} has no heading #{anchor}")
    return problems


def unreachable(files: Mapping[str, str], start: str = "README.md") -> list[str]:
    """The pages under docs/ that no chain of links from ``start`` reaches."""
    seen, todo = {start}, [start]
    while todo:
        page = todo.pop()
        for _, target, _ in links(page, files[page]):
            if target in files and target not in seen:
                seen.add(target)
                todo.append(target)
    return sorted(f for f in files if f.startswith("docs/") and f not in seen)
