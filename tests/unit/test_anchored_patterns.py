"""Every validator is anchored at both ends: a pattern that ends in ``$`` lets Python's ``re`` match before a
trailing newline, so ``"seed\\n"`` passed the campaign-id rule (one campaign, two spellings). Our patterns end in
``\\Z``; this test reads every ``re`` call of the product's source and holds that rule, and the values it let
through are refused."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchctl.campaign.context import check_campaign_id
from benchctl.lake.paths import check_path_value

ROOT = Path(__file__).resolve().parents[2]


def _patterns_ending_in_dollar() -> list[str]:
    found = []
    for d in ("benchctl", "lambdas", "stacks"):
        for path in (ROOT / d).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                        and node.func.attr in ("compile", "match", "search", "fullmatch") and node.args):
                    arg = node.args[0]  # a literal, or an f-string whose last part is one
                    last = arg.values[-1] if isinstance(arg, ast.JoinedStr) and arg.values else arg
                    pattern = last.value if isinstance(last, ast.Constant) and isinstance(last.value, str) else ""
                    if pattern.endswith("$") and not pattern.endswith("\\$"):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {pattern}")
    return found


def test_no_pattern_of_ours_ends_in_a_dollar_that_matches_before_a_newline() -> None:
    assert _patterns_ending_in_dollar() == []


@pytest.mark.parametrize("value", ["seed\n", "seed\r\n", "seed\n\n"])
def test_a_campaign_id_or_path_segment_with_a_trailing_newline_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="is not a campaign id"):
        check_campaign_id(value, "test")
    with pytest.raises(ValueError, match="cannot be a lake path segment"):
        check_path_value("campaign_id", value)
    assert check_campaign_id("seed", "test") == "seed"
