"""The output-quality gate: a fixed question set with known answers, sent after the smoke test.

The questions are generated from a seed (no downloads, nothing shipped), each asking for the answer on its last
line as ``ANSWER: n``, in one of two sets (``quality.kind``):

- ``arithmetic`` (the gate that the model answers at all): integer arithmetic, ``a + b`` and ``a - b`` with
  3-digit operands, ``a x b`` with 2-digit ones, in turn. A working model gets nearly all of them right.
- ``multistep`` (hard enough for a quantisation loss to show): three operations over 2- to 4-digit operands
  in four shapes, in turn (``a x b - c x d``, ``(a + b) x c - d``, ``a x b + c x d``, ``(a - b) x c + d``), products
  of up to seven digits; the model may show its working before the last line. Without thinking a model of
  Qwen3-30B-A3B's class gets a share of them wrong, so a lower-precision variant has room to score lower.

Scoring ignores a thinking block (``<think>…</think>``, or an unterminated ``<think>…`` cut off by the token
limit), takes the LAST ``ANSWER: n`` (else the last integer), commas stripped, and requires exact equality.
Score = correct / questions, with its Wilson score interval (95 %: ``score_low`` .. ``score_high``), the
binomial interval that stays within [0, 1] and is sound for small counts and scores near 0 or 1: two
experiments' scores differ only when their intervals say so, never on the bare ratio.

The threshold (``quality.min_score``) fails the experiment before any load, where the score means something:
on a real model. The local engine's Dynamo mocker returns random tokens, so there the gate runs end to end,
its score is recorded and labelled SIMULATED, and the threshold is not applied (it would always fail).
Pure: the standard library and benchctl only.
"""

from __future__ import annotations

import math
import random
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from benchctl.spec.model import CampaignSpec

JSON = dict[str, Any]

PROMPT = "What is {a} {op} {b}? Reply with the final answer as a single integer on the last line, like: ANSWER: 42"
MULTISTEP_PROMPT = ("Compute {expr}. Work it out step by step if you need to, then give the final answer as a "
                    "single integer on the last line, like: ANSWER: 42")
KINDS = ("arithmetic", "multistep")
# (symbol shown, operand range) in turn; exact integer answers
_OPS: tuple[tuple[str, tuple[int, int]], ...] = (("+", (100, 999)), ("-", (100, 999)), ("*", (12, 99)))
# multistep shapes in turn: (the expression with its operands' names, each operand's range)
_SHAPES: tuple[tuple[str, tuple[tuple[int, int], ...]], ...] = (
    ("{a} * {b} - {c} * {d}", ((101, 999), (101, 999), (13, 99), (13, 99))),
    ("({a} + {b}) * {c} - {d}", ((1001, 9999), (1001, 9999), (13, 99), (1001, 9999))),
    ("{a} * {b} + {c} * {d}", ((13, 99), (101, 999), (13, 99), (101, 999))),
    ("({a} - {b}) * {c} + {d}", ((1001, 9999), (101, 999), (13, 99), (1001, 9999))),
)
Z_95 = 1.959963984540054  # the standard normal's 97.5 % quantile: a two-sided 95 % interval
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S)  # a closed, or an unterminated, thinking block
_ANSWER = re.compile(r"ANSWER:\s*(-?\d[\d,]*)", re.I)
_INT = re.compile(r"-?\d[\d,]*")
HEAD_CHARS = 200  # how much of each answer is kept with the score


def questions(n: int, seed: int, kind: str = "arithmetic") -> list[JSON]:
    """``n`` questions ``{"id", "prompt", "answer"}`` of set ``kind`` (:data:`KINDS`), the same for the same
    ``(n, seed, kind)`` everywhere."""
    rng = random.Random(seed)  # noqa: S311 (a reproducible question set, not a secret)
    out = []
    if kind == "multistep":
        for i in range(n):
            shape, ranges = _SHAPES[i % len(_SHAPES)]
            values = {name: rng.randint(lo, hi) for name, (lo, hi) in zip("abcd", ranges, strict=False)}
            expr = shape.format(**values)
            out.append({"id": f"multi-{i:03d}", "prompt": MULTISTEP_PROMPT.format(expr=expr.replace("*", "x")),
                        "answer": _evaluate(expr)})
        return out
    if kind != "arithmetic":
        raise ValueError(f"quality.kind {kind!r}: valid are {list(KINDS)}")
    for i in range(n):
        op, (lo, hi) = _OPS[i % len(_OPS)]
        a, b = rng.randint(lo, hi), rng.randint(lo, hi)
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        out.append({"id": f"arith-{i:02d}", "prompt": PROMPT.format(a=a, op=op, b=b), "answer": answer})
    return out


def _evaluate(expr: str) -> int:
    """The exact value of one of our generated expressions (integers, + - * and parentheses), by the usual
    precedence: a tiny recursive-descent reader, never ``eval``."""
    tokens = re.findall(r"\d+|[-+*()]", expr)
    pos = 0

    def atom() -> int:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            value = total()
            pos += 1  # ")"
            return value
        return int(tok)

    def product() -> int:
        nonlocal pos
        value = atom()
        while pos < len(tokens) and tokens[pos] == "*":
            pos += 1
            value *= atom()
        return value

    def total() -> int:
        nonlocal pos
        value = product()
        while pos < len(tokens) and tokens[pos] in "+-":
            op = tokens[pos]
            pos += 1
            value = value + product() if op == "+" else value - product()
        return value

    return total()


def wilson_interval(correct: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion ``correct / n`` (two-sided, ``z``: 95 % by default);
    ``(0.0, 1.0)`` with no questions."""
    if n <= 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def visible_text(content: str | None) -> str:
    """What the model answered outside its thinking (closed or cut-off ``<think>`` blocks removed)."""
    return _THINK.sub("", content or "")


def extract(content: str | None) -> int | None:
    """The answer given: the last ``ANSWER: n``, else the last integer, outside thinking; None if none."""
    text = visible_text(content)
    found = _ANSWER.findall(text) or _INT.findall(text)
    if not found:
        return None
    try:
        return int(found[-1].replace(",", ""))
    except ValueError:  # e.g. a lone "-,"
        return None


def request_body(model: str, question: JSON, *, max_tokens: int, sampling: JSON, thinking: bool) -> JSON:
    """The chat completion sent for one question: the campaign's sampling and thinking settings."""
    return {"model": model, "messages": [{"role": "user", "content": question["prompt"]}], "max_tokens": max_tokens,
            "stream": False, **sampling, "chat_template_kwargs": {"enable_thinking": thinking}}


def score(qs: list[JSON], answers: dict[str, JSON], *, simulated: bool, min_score: float) -> JSON:
    """The gate's result from each question's answer ``{"content", "finish_reason"}`` (by question id).

    ``gate``: ``passed`` / ``failed`` against ``min_score``; on simulated serving ``not applied``."""
    items = []
    for q in qs:
        got = answers.get(q["id"]) or {}
        value = extract(got.get("content"))
        items.append({"id": q["id"], "expected": q["answer"], "extracted": value, "ok": value == q["answer"],
                      "finish_reason": got.get("finish_reason"), "error": got.get("error"),
                      "content_head": (got.get("content") or "")[:HEAD_CHARS]})
    correct = sum(1 for i in items if i["ok"])
    share = correct / len(items) if items else 0.0
    low, high = wilson_interval(correct, len(items))
    gate = "not applied (SIMULATED)" if simulated else ("passed" if share >= min_score else "failed")
    return {"questions": len(items), "correct": correct, "score": share, "score_low": low, "score_high": high,
            "min_score": min_score, "simulated": simulated, "gate": gate, "items": items}


def default_max_tokens(thinking: bool, kind: str = "arithmetic") -> int:
    """Room for the answer: a line without thinking (a short working and the line for ``multistep``); a
    thinking block and the line with it."""
    return 4096 if thinking else (512 if kind == "multistep" else 64)


def quality_requests(model: str, n: int, seed: int, *, sampling: JSON, thinking: bool,
                     max_tokens: int | None = None, kind: str = "arithmetic") -> list[JSON]:
    """``[{"id", "body"}]``: the chat completions the gate sends (the smoke port sends them as given)."""
    limit = max_tokens or default_max_tokens(thinking, kind)
    return [{"id": q["id"], "body": request_body(model, q, max_tokens=limit, sampling=sampling, thinking=thinking)}
            for q in questions(n, seed, kind)]


def answer_of(doc: JSON) -> JSON:
    """``{"content", "finish_reason"}`` of a non-streamed chat completion (what :func:`score` reads); a
    thinking block that a reasoning parser moved to ``reasoning_content`` is not part of the answer."""
    choice = (doc.get("choices") or [{}])[0]
    return {"content": (choice.get("message") or {}).get("content") or "", "finish_reason": choice.get("finish_reason")}


def spec_requests(spec: CampaignSpec) -> list[JSON]:
    """The quality gate's chat completions for a campaign: its question set, sampling and thinking."""
    q = spec.quality
    return quality_requests(spec.model.name, q.questions, q.seed, sampling=spec.sampling_fields(),
                            thinking=spec.thinking, max_tokens=q.max_tokens, kind=q.kind)


# The marker of one answer line in the AWS smoke Job's log (see benchctl.aws.k8s.jobs.QUALITY_SCRIPT).
LOG_MARK = "BENCHCTL_QUALITY "


def answers_from_log(text: str) -> JSON:
    """``{id: answer}`` from the smoke Job's log lines ``BENCHCTL_QUALITY {json}`` (others ignored)."""
    import json

    out: JSON = {}
    for line in text.splitlines():
        if line.startswith(LOG_MARK):
            try:
                doc = json.loads(line[len(LOG_MARK):])
            except ValueError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("id"), str):
                out[doc["id"]] = {k: doc.get(k) for k in ("content", "finish_reason", "error") if k in doc}
    return out
