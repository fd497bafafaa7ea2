"""The output-quality question sets: the seeded ``multistep`` set is harder than the one-operation gate (three
operations over 2- to 4-digit numbers, exact answers), and every score carries its 95 % Wilson interval, in the
score, the lake's quality rows and v_quality, so that two precisions are compared on intervals, not ratios."""

from __future__ import annotations

import ast
import operator
from pathlib import Path
from typing import Any

import pytest

from benchctl.analysis import quality
from benchctl.cli.main import main
from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _independent_value(prompt: str) -> int:
    """The value of the expression a multistep prompt shows, read by Python's own parser (not quality's)."""
    expr = prompt.removeprefix("Compute ").split(". ", 1)[0].replace(" x ", " * ")

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return int(_OPS[type(node.op)](walk(node.left), walk(node.right)))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        raise AssertionError(f"unexpected expression part {ast.dump(node)} in {expr!r}")

    return walk(ast.parse(expr, mode="eval"))


def _operations(prompt: str) -> int:
    expr = prompt.removeprefix("Compute ").split(". ", 1)[0]
    return sum(expr.count(f" {op} ") for op in "+-x")


def test_the_multistep_set_is_seeded_exact_and_harder_than_the_gate() -> None:
    multi = quality.questions(200, 15, "multistep")
    assert multi == quality.questions(200, 15, "multistep") and multi != quality.questions(200, 16, "multistep")
    assert len({q["id"] for q in multi}) == 200 and len({q["prompt"] for q in multi}) == 200
    for q in multi:
        assert q["answer"] == _independent_value(q["prompt"]), q
        assert _operations(q["prompt"]) == 3 and q["answer"] >= 10_000, q["prompt"]
        assert "ANSWER:" in q["prompt"]
    easy = quality.questions(200, 15)
    assert all(_operations(q["prompt"].replace("What is ", "Compute ").replace("?", ".")
                           .replace(" * ", " x ")) == 1 for q in easy)
    assert min(q["answer"] for q in multi) > max(abs(q["answer"]) for q in easy[1::3])  # a - b: small
    assert sorted({len(str(q["answer"])) for q in multi})[-1] >= 6  # products of up to seven digits
    with pytest.raises(ValueError, match=r"quality\.kind 'trivia'"):
        quality.questions(3, 15, "trivia")


@pytest.mark.parametrize(("correct", "n", "low", "high"), [
    # Wilson score intervals at 95 % (z = 1.96), as tabulated by Newcombe (1998) for these counts
    (10, 20, 0.2993, 0.7007),
    (0, 20, 0.0, 0.1611),
    (20, 20, 0.8389, 1.0),
    (81, 263, 0.2553, 0.3662),
])
def test_the_wilson_interval(correct: int, n: int, low: float, high: float) -> None:
    got = quality.wilson_interval(correct, n)
    assert got == pytest.approx((low, high), abs=1e-4)


def test_a_score_carries_its_interval_and_a_difference_needs_the_intervals_apart() -> None:
    qs = quality.questions(200, 15, "multistep")

    def scored(right: int) -> dict[str, Any]:
        answers = {q["id"]: {"content": f"working...\nANSWER: {q['answer'] if i < right else q['answer'] + 1}"}
                   for i, q in enumerate(qs)}
        return quality.score(qs, answers, simulated=False, min_score=0.2)

    bf16, fp8_close, fp8_far = scored(140), scored(128), scored(100)
    assert (bf16["score"], bf16["gate"]) == (0.7, "passed")
    assert bf16["score_low"] < 0.7 < bf16["score_high"]
    assert (bf16["score_low"], bf16["score_high"]) == quality.wilson_interval(140, 200)
    # 0.70 vs 0.64: within each other's intervals (not a measured loss); 0.70 vs 0.50: apart
    assert fp8_close["score_high"] > bf16["score_low"]
    assert fp8_far["score_high"] < bf16["score_low"]


def test_the_multistep_set_leaves_room_for_a_working(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert quality.default_max_tokens(False, "multistep") == 512 > quality.default_max_tokens(False) == 64
    (req,) = quality.quality_requests("m", 1, 15, sampling={"temperature": 0.0}, thinking=False, kind="multistep")
    assert req["body"]["max_tokens"] == 512 and req["id"] == "multi-000"
    bad = tmp_path / "bad.yaml"
    src = (Path(__file__).resolve().parents[2] / "examples" / "smoke.yaml").read_text()
    assert "\nquality:" not in src
    bad.write_text(src + "\nquality: {kind: trivia}\n")
    assert main(["validate", str(bad)]) == 2
    assert "quality.kind" in capsys.readouterr().err


def test_v_quality_shows_the_set_and_the_interval(tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    qs = quality.questions(40, 15, "multistep")
    result = quality.score(qs, {q["id"]: {"content": f"ANSWER: {q['answer']}"} for q in qs[:26]}, simulated=False,
                           min_score=0.2)
    lake.write("experiments", [{"campaign_id": "c", "experiment": "fp8", "experiment_index": 0,
                                "mode": "aggregated"}], part_name="e")
    lake.write("quality", [{"campaign_id": "c", "experiment": "fp8", "question_id": item["id"], "question_index": i,
                            "expected": item["expected"], "extracted": item["extracted"], "correct": item["ok"],
                            "min_score": 0.2, "gate": result["gate"], "simulated": False, "kind": "multistep",
                            "score_low": result["score_low"], "score_high": result["score_high"]}
                           for i, item in enumerate(result["items"])], part_name="quality")
    cols, rows = QueryEngine(lake.root).run("v_quality")
    (row,) = [dict(zip(cols, r, strict=True)) for r in rows]
    assert (row["quality_kind"], row["quality_questions"], row["quality_correct"]) == ("multistep", 40, 26)
    assert (row["quality_score_low"], row["quality_score_high"]) == pytest.approx(quality.wilson_interval(26, 40))
    assert row["quality_score_low"] < row["quality_score"] == 0.65 < row["quality_score_high"]


def test_the_most_questions_a_spec_may_ask_fit_the_smoke_jobs_one_environment_variable() -> None:
    import json

    import yaml

    from benchctl.errors import SpecError
    from benchctl.spec.model import parse_spec

    longest = quality.quality_requests("Qwen/Qwen3-30B-A3B-FP8", 300, 15, sampling={"temperature": 0.7, "top_p": 0.8,
                                       "seed": 2**31 - 1}, thinking=False, kind="multistep")
    # the Job's QUALITY_REQUESTS (benchctl.aws.k8s.jobs): one string, which exec refuses past MAX_ARG_STRLEN
    assert len(json.dumps(longest, separators=(",", ":")).encode()) < 128 * 1024

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "smoke.yaml").read_text())
    data["quality"] = {"kind": "multistep", "questions": 301}
    with pytest.raises(SpecError, match=r"quality\.questions: 301 is invalid"):
        parse_spec(data)
