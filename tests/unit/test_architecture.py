"""The house rules of the code base, read from the source with ``ast`` (every import, lazy ones included):

* the core (``benchctl`` outside ``benchctl.aws``, ``benchctl.local`` and the command line, which wires an
  engine in) never imports an engine, and
  the AWS engine never imports the local one;
* the Lambda asset's import closure (from ``lambdas/``, through ``benchctl``) stays inside what the
  Lambda runtime has: the standard library, our layer (``requirements-layer.txt``) and the managed layers
  of ``stacks/layers.py`` (Powertools with its extras, the SDK for pandas); never the local engine, which
  the code asset leaves out;
* no product module (``benchctl``, ``lambdas``, ``stacks``, ``app.py``) is over 450 lines;
* no circle of imports among our modules (lazy and type-checking imports count: a circle is a circle to a
  reader), and each wing of ``benchctl`` imports only the wings below it (``WINGS``);
* run-store keys are named only in ``benchctl/campaign/runstate.py`` and timeline event names only in
  ``benchctl/lake/timeline.py`` (docstrings and comments may mention them).
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

import pytest

from benchctl.lake import timeline

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("benchctl", "lambdas")

# What the Lambda runtime offers besides the standard library (stacks/layers.py and requirements-layer.txt):
# our layer: PyYAML, boto3/botocore (and their dependencies); Powertools [all]: aws_lambda_powertools,
# pydantic (parser/validation), jmespath, typing_extensions; AWS SDK for pandas: awswrangler, pandas,
# pyarrow, numpy.
LAMBDA_THIRD_PARTY = {"yaml", "boto3", "botocore", "aws_lambda_powertools", "pydantic", "pydantic_core",
                      "jmespath", "typing_extensions", "awswrangler", "pandas", "pyarrow", "numpy"}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


@cache
def imports(name: str) -> frozenset[str]:
    """Every module ``name`` imports anywhere in its body (``from a import b``: ``a.b`` when that is a module)."""
    path = modules()[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules())
    return frozenset(out)


def ours(name: str) -> bool:
    return name.split(".", maxsplit=1)[0] in PACKAGES


def closure(start: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        if m in modules():
            todo.extend(imports(m))
            # a submodule imports its packages too
            parent = m.rpartition(".")[0]
            if parent:
                todo.append(parent)
    return seen


def is_engine(name: str, engine: str) -> bool:
    return name == f"benchctl.{engine}" or name.startswith(f"benchctl.{engine}.")


# the composition root: the command line (benchctl.cli) wires an engine in (as the Lambda handlers do for AWS)
CORE = sorted(m for m in modules() if m.startswith("benchctl") and not is_engine(m, "aws")
              and not is_engine(m, "local") and not is_engine(m, "cli"))


def test_every_package_directory_is_a_regular_package() -> None:
    # setuptools' find (pyproject.toml) and the walk below see only directories with an __init__.py
    dirs = {p.parent for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert not [d for d in dirs if not (d / "__init__.py").is_file()]


def test_the_rules_see_every_module_and_a_lazy_import() -> None:
    # the walk is what the other tests trust: it finds the engines, the core, and imports inside functions
    assert {"benchctl.aws.s3", "benchctl.local.engine", "benchctl.campaign", "lambdas._runtime"} <= set(modules())
    assert len(CORE) > 20
    assert "benchctl.lake.ingest" in imports("benchctl.campaign.ingest")  # imported inside ingest_step()


@pytest.mark.parametrize("name", CORE)
def test_the_core_never_imports_an_engine(name: str) -> None:
    bad = sorted(i for i in imports(name) if is_engine(i, "aws") or is_engine(i, "local"))
    assert not bad, f"{name} imports {bad}: the core is written against benchctl.campaign.ports; engines plug in"


def test_the_aws_engine_never_imports_the_local_one() -> None:
    for name in (m for m in modules() if is_engine(m, "aws")):
        bad = sorted(i for i in imports(name) if is_engine(i, "local"))
        assert not bad, f"{name} imports {bad}: the Lambda asset has no benchctl.local"


def test_the_lambda_assets_import_closure_is_what_lambda_has() -> None:
    handlers = [m for m in modules() if m.startswith("lambdas")]
    reached = closure(handlers)
    local = sorted(m for m in reached if is_engine(m, "local"))
    assert not local, f"the Lambda functions reach {local}, which the code asset leaves out"
    third = {m.split(".")[0] for m in reached if not ours(m) and m} - set(sys.stdlib_module_names) - {"__future__"}
    assert third <= LAMBDA_THIRD_PARTY, (
        f"the Lambda functions import {sorted(third - LAMBDA_THIRD_PARTY)}, which neither the runtime nor the "
        f"layers provide (stacks/layers.py, requirements-layer.txt)")
    # and the closure is real: the runtime, the AWS engine and the campaign are in it
    assert {"benchctl.aws.providers", "benchctl.campaign", "yaml", "boto3"} <= reached | {m.split(".")[0] for m in reached}


def test_no_product_module_is_over_450_lines() -> None:
    # the product: benchctl, the Lambda handlers, the CDK app (stacks/, app.py)
    product = [*modules().values(), *sorted((ROOT / "stacks").rglob("*.py")), ROOT / "app.py"]
    long = {str(p.relative_to(ROOT)): n for p in product
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    assert not long, f"over 450 lines: {long}; split by what the module does"


def _literals(path: Path) -> list[tuple[int, str]]:
    """String constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):  # f"loads/{exp}/..." : its literal parts
            out.extend((node.lineno, v.value) for v in node.values
                       if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return out


RUN_STORE_KEY = re.compile(r"^(loads|pools|pool_events|deployments|smoke|runner)/|^(spec|spec_meta|plan|preflight|campaign|failure|"
                           r"abort|runner|result)\.json$")


def test_run_store_keys_are_named_only_by_the_run_state() -> None:
    found = [f"{m}:{line}: {text!r}" for m, p in modules().items() if m != "benchctl.campaign.runstate"
             for line, text in _literals(p) if RUN_STORE_KEY.search(text)]
    assert not found, "run-store keys outside benchctl/campaign/runstate.py:\n" + "\n".join(found)
    # the pattern matches what the run state really names
    runstate = [t for _, t in _literals(modules()["benchctl.campaign.runstate"]) if RUN_STORE_KEY.search(t)]
    assert {"loads/", "plan.json", "campaign.json"} <= set(runstate)


# Event names that are also ordinary words of other vocabularies (a campaign's status, a sweep's action):
# a literal equal to one of these is not necessarily an event.
STATUS_WORDS = {"succeeded", "failed", "aborted", "stopped", "swept", "ready"}


def test_timeline_event_names_are_named_only_by_the_timeline() -> None:
    names = {e.name for e in timeline.EVENTS} - STATUS_WORDS
    assert len(names) >= 12
    found = [f"{m}:{line}: {text!r}" for m, p in modules().items() if m != "benchctl.lake.timeline"
             for line, text in _literals(p) if text in names]
    assert not found, "timeline event names outside benchctl/lake/timeline.py:\n" + "\n".join(found)


def test_every_import_of_our_packages_names_a_module_of_this_tree() -> None:
    # a lazy import of a moved module fails only when its function runs (or, worse, is found in another
    # checkout by an editable install's finder): every benchctl/lambdas import must name a module here,
    # or a name defined in one
    files = {**modules(), **{module_name(p): p for p in sorted((ROOT / "tests").rglob("*.py"))},
             **{module_name(p): p for p in sorted((ROOT / "bench").rglob("*.py"))}}
    bad = []
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets = [node.module]
            targets += _modules_in_strings(node)
            bad += [f"{name}:{getattr(node, 'lineno', 0)}: {t}" for t in targets if ours(t) and not _defined(t)]
    assert not bad, "imports of modules that do not exist:\n" + "\n".join(bad)


def _defined(dotted: str) -> bool:
    """A module of this tree, or a name a module of this tree defines (``benchctl.x.Name``)."""
    if dotted in modules():
        return True
    parent, _, attr = dotted.rpartition(".")
    if parent not in modules():
        return False
    tree = ast.parse(modules()[parent].read_text(encoding="utf-8"))
    return any(attr == getattr(n, "name", None) or (isinstance(n, ast.Assign) and any(
        getattr(t, "id", None) == attr for t in n.targets)) for n in tree.body) or attr.startswith("__")


def _modules_in_strings(node: ast.AST) -> list[str]:
    """Modules named in code a subprocess runs (``python -c`` with an import of one of ours)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import " in node.value:
        return re.findall(r"\b(?:benchctl|lambdas)(?:\.\w+)+", node.value)
    return []


# The wings of benchctl, lowest first: each may import its own modules and the wings before it, never one after
# it. "foundation" is benchctl's top-level modules (errors, constants, atomic writes, log text, data files, the
# load runner). aws and local are the engines: side by side, neither imports the other (the test above).
WINGS = ("foundation", "spec", "lake", "planning", "analysis", "forecast", "campaign", "report", "engines", "cli")
ENGINES = ("aws", "local")


def wing(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 2 and not (ROOT / "benchctl" / parts[1]).is_dir():
        return "foundation"
    return "engines" if parts[1] in ENGINES else parts[1]


def _edges() -> dict[str, set[str]]:
    """Module -> the modules of benchctl it imports, its own packages left out (Python imports a module's
    packages before the module whatever it says, so that is no edge a reader follows)."""
    ours_ = {m for m in modules() if m.startswith("benchctl")}
    out = {}
    for m in ours_:
        ancestors = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
        out[m] = {i for i in imports(m) if i in ours_ and i != m and i not in ancestors}
    return out


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (strongly connected components of more than one module), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                on.discard(w)
                comp.append(w)
            on.discard(v)
            if comp:
                found.append(sorted([v, *comp]))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_circle_of_imports_among_our_modules() -> None:
    found = circles(_edges())
    assert not found, "import circles (cut each: move the shared piece down, or pass it in):\n" + "\n".join(
        " <-> ".join(c) for c in found)


def test_the_circle_check_finds_a_circle_through_a_lazy_import() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_every_wing_imports_only_the_wings_below_it() -> None:
    assert {wing(m) for m in modules() if m.startswith("benchctl.")} == set(WINGS)  # every wing is named
    up = sorted(f"{m} ({wing(m)}) imports {i} ({wing(i)})" for m, targets in _edges().items() for i in targets
                if WINGS.index(wing(i)) > WINGS.index(wing(m)))
    assert not up, "imports of a wing above (WINGS is the order):\n" + "\n".join(up)
    assert wing("benchctl.errors") == "foundation" and wing("benchctl.spec.model") == "spec"
    assert wing("benchctl.aws.s3") == wing("benchctl.local.engine") == "engines"


def test_every_wing_says_what_it_owns_and_may_import() -> None:
    for name in WINGS:
        if name in ("foundation", "engines"):
            continue
        doc = ast.get_docstring(ast.parse((ROOT / "benchctl" / name / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "May import:" in doc, f"benchctl/{name}/__init__.py: say what the wing owns and may import"
