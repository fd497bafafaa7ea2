"""The manual stays true to the code (docs/explanation/testing.md, "The manual"):

* the generated references (docs/reference/spec.md, cli.md, spec.schema.json) are what ``make docs`` writes now;
* every spec snippet of the README and docs/ validates as ``benchctl validate`` would (fragments over a base);
* every ``benchctl`` command line of their shell blocks parses with the command line's own parser;
* every relative link resolves, and every page under docs/ is reachable from the README.

Each check is a function of tests/docs_check.py that returns its problems; the cases below also hand each a
broken snippet, in memory, and see it named.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from benchctl.cli import reference
from benchctl.cli.main import main
from tests import docs_check

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_DIR = ROOT / "docs" / "reference"


@functools.cache
def _examples() -> dict[str, Any]:
    return reference.load_examples(ROOT)


@functools.cache
def _generated() -> dict[str, str]:
    return reference.generated_files(_examples())


@functools.cache
def _files() -> dict[str, str]:
    return docs_check.markdown_files(ROOT)


def _page(body: str) -> dict[str, str]:
    return {"docs/howto/broken.md": body}


# ------------------------------------------------------------------------------- the generated references


def test_the_generated_references_are_current() -> None:
    stale = reference.stale(REFERENCE_DIR, _generated())
    assert not stale, "\n".join(f"docs/reference/{name} is not what the code generates now: run `make docs` "
                                "(python -m benchctl.cli.reference --write docs/reference) and commit it" for name in stale)


def test_a_changed_copy_is_named_as_stale(tmp_path: Path) -> None:
    files = _generated()
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert reference.stale(tmp_path, files) == []
    (tmp_path / reference.CLI_MD).write_text(files[reference.CLI_MD].replace("--dry-run", "--dry"), encoding="utf-8")
    (tmp_path / reference.SPEC_MD).unlink()
    assert reference.stale(tmp_path, files) == [reference.CLI_MD, reference.SPEC_MD]


def test_generating_twice_gives_the_same_bytes() -> None:
    assert reference.generated_files(_examples()) == _generated()


def test_the_spec_reference_names_every_field_of_every_model() -> None:
    from benchctl.spec.model import CampaignSpec

    text = _generated()[reference.SPEC_MD]
    for model, _paths in reference.model_sections(CampaignSpec):
        assert f"## {model.__name__}\n" in text
        for name in model.model_fields:
            assert f"| `{name}` |" in text, f"{model.__name__}.{name} is not in the spec reference"
    # a default, a bound, a rule and an example, as the rows give them
    assert "| `repeats` | int | `1` | > 0, ≤ 20 |" in text
    assert "Rule: Hugging Face repo id rule:" in text
    assert "`p4d.24xlarge` (examples/auto-mode.yaml)" in text


def test_the_cli_reference_names_every_command_and_option() -> None:
    from benchctl.cli.main import build_parser

    text = _generated()[reference.CLI_MD]
    for name, sub, _ in reference._subcommands(build_parser()):
        assert f"## `benchctl {name}`" in text
        for action in sub._actions:
            for option in [] if option_is_help(action) else action.option_strings:
                assert f"`{option}`" in text, f"benchctl {name} {option} is not in the CLI reference"
    assert "| `--ttft` | option |" in text and "`auto`, `router`, `aiperf`" in text  # calibrate's, its own module


def option_is_help(action: argparse.Action) -> bool:
    return isinstance(action, argparse._HelpAction)  # -h of every command: argparse's own, left out


def test_every_example_is_valid_under_the_published_schema_and_a_typo_is_not() -> None:
    schema = json.loads(_generated()[reference.SCHEMA_JSON])
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text(encoding="utf-8")))]
        assert not errors, f"{path.name}: {errors}"
    typo = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text(encoding="utf-8"))
    typo["pools"][0]["gpus_per_nod"] = 8
    assert any("gpus_per_nod" in e.message for e in validator.iter_errors(typo))


def test_benchctl_schema_prints_the_published_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == _generated()[reference.SCHEMA_JSON]
    assert main(["schema", "--out", str(tmp_path / "s.json")]) == 0
    assert (tmp_path / "s.json").read_text(encoding="utf-8") == _generated()[reference.SCHEMA_JSON]


# ------------------------------------------------------------------------------- spec snippets


def test_every_spec_snippet_in_the_docs_validates() -> None:
    blocks = [b for b in docs_check.all_blocks(_files()) if b.lang in docs_check.SPEC_LANGS]
    assert len(blocks) >= 3  # the check sees the snippets (the comparisons fragment among them)
    problems = docs_check.spec_problems(_files())
    assert not problems, "\n".join(problems)


def test_the_fragment_base_is_a_valid_spec() -> None:
    assert docs_check.validate_spec(docs_check.BASE_SPEC, None, "BASE_SPEC") == []


WHOLE = "```yaml\n" + docs_check.BASE_SPEC + "```\n"


@pytest.mark.parametrize("body, expected", [
    (WHOLE.replace("mode: aggregated, router: kv", "mode: sideways, router: kv"),
     "docs/howto/broken.md:2: spec: experiments[0].mode"),
    (WHOLE.replace("usd_per_hour: 21.96", "usd_per_hour: 1"),  # below the list price: a deployment ceiling
     "docs/howto/broken.md:2: spec: ceiling instance_types"),
    ("```yaml\n# fragment\nrepeats: 0\n```\n", "docs/howto/broken.md:2: spec: repeats"),
    ("```yaml\n# fragment\ncomparisons:\n  - {name: c, baseline: agg, treatment: nobody}\n```\n",
     "docs/howto/broken.md:2: spec: comparisons[0]"),
    ("```yaml\nrepeats: 3\n```\n", "neither a whole spec"),
    ("```yaml\n# fragment\nname: &a x\nseed: *a\n```\n", "not valid YAML"),
    ("```yaml\n# not a spec\nkey: [unclosed\n```\n", "not valid YAML"),
])
def test_the_spec_check_fails_on_a_broken_snippet(body: str, expected: str) -> None:
    problems = docs_check.spec_problems(_page(body))
    assert any(expected in p for p in problems), problems


def test_the_spec_check_passes_good_snippets() -> None:
    good = WHOLE + "\n```yaml\n# fragment\nrepeats: 3\n```\n\n```yaml\n# not a spec: a manifest\nkind: Job\n```\n"
    assert docs_check.spec_problems(_page(good)) == []


# ------------------------------------------------------------------------------- command lines


def test_every_benchctl_command_in_the_docs_parses() -> None:
    commands = [c for b in docs_check.all_blocks(_files()) if b.lang in docs_check.SHELL_LANGS
                for _, c in docs_check.command_lines(b) if c.startswith("benchctl ")]
    assert len(commands) >= 20  # the check sees them
    problems = docs_check.command_problems(_files())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("line, expected", [
    ("benchctl run examples/smoke.yaml --no-such-option", "unrecognized arguments: --no-such-option"),
    ("$ benchctl frobnicate examples/smoke.yaml   # a command that is not", "invalid choice: 'frobnicate'"),
    (".venv/bin/benchctl ingest ART_DIR --lake runs/lake", "the following arguments are required"),
    ("benchctl query v_pareto --format yaml", "invalid choice: 'yaml'"),
    ("benchctl calibrate --lake runs/lake \\\n    --campaign C --ttft never", "invalid choice: 'never'"),
    ("benchctl query \"SELECT 1", "not a shell command line"),
])
def test_the_command_check_fails_on_a_broken_command(line: str, expected: str) -> None:
    problems = docs_check.command_problems(_page(f"Text.\n\n```bash\necho hello\n{line}\n```\n"))
    assert len(problems) == 1 and problems[0].startswith("docs/howto/broken.md:5: `"), problems
    assert expected in problems[0], problems


def test_the_command_check_reads_prompts_comments_and_continuations() -> None:
    body = ("```console\n$ benchctl validate examples/smoke.yaml   # exit 0\n```\n\n```sh\nbenchctl plan SPEC \\\n"
            "  --engine aws --poll-seconds 30\nmake smoke\n```\n\n```text\nbenchctl not-checked --in-text\n```\n")
    assert docs_check.command_problems(_page(body)) == []


# ------------------------------------------------------------------------------- links and reachability


def test_every_relative_link_resolves_and_every_page_is_reachable_from_the_readme() -> None:
    assert sum(len(docs_check.links(n, t)) for n, t in _files().items()) > 100
    problems = docs_check.link_problems(_files(), ROOT)
    assert not problems, "\n".join(problems)
    unreachable = docs_check.unreachable(_files())
    assert not unreachable, f"no chain of links from README.md reaches {unreachable}: link them from docs/index.md"
    assert {"docs/FACTS.md", "docs/METRICS.md", "docs/reference/spec.md"} <= set(_files())


@pytest.mark.parametrize("body, expected", [
    ("See [the guide](no-such-guide.md).", "docs/howto/broken.md:1: dead link: docs/howto/no-such-guide.md"),
    ("See [the tutorial](../tutorial/local-campaign.md#no-such-heading).", "has no heading #no-such-heading"),
    ("Up [here](#nowhere).\n\n## Somewhere\n", "docs/howto/broken.md has no heading #nowhere"),
    ("![a figure](../img/missing.svg)", "dead link: docs/img/missing.svg"),
])
def test_the_link_check_fails_on_a_dead_link(body: str, expected: str) -> None:
    problems = docs_check.link_problems(_page(body), ROOT)
    assert any(expected in p for p in problems), problems


def test_links_in_code_are_not_links_and_a_good_anchor_resolves() -> None:
    body = ("`[not](a-link.md)`\n\n```text\n[nor](this.md)\n```\n\n## `Held` to AWS's own rules\n\n"
            "[ok](#held-to-awss-own-rules) [ok](../explanation/testing.md#held-to-awss-own-rules) [web](https://x.y)\n")
    assert docs_check.link_problems(_page(body), ROOT) == []


def test_a_link_that_wraps_over_two_lines_is_read() -> None:
    problems = docs_check.link_problems(_page("Text, then [a link whose text\nwraps](gone.md) here."), ROOT)
    assert problems == ["docs/howto/broken.md:1: dead link: docs/howto/gone.md does not exist"]


def test_a_page_no_link_reaches_is_named() -> None:
    files = {"README.md": "[index](docs/index.md)", "docs/index.md": "[a](a.md)", "docs/a.md": "back to [index](index.md)",
             "docs/orphan.md": "[a](a.md)"}
    assert docs_check.unreachable(files) == ["docs/orphan.md"]
