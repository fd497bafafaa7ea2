"""``SmokePort`` on this machine: a few short chat completions against a local deployment's frontend, on
loopback, run at once by SmokeTest (seconds), so CheckSmoke finds them done at its first poll. Also the
loopback HTTP helpers the local serving adapter probes with."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from benchctl.analysis import quality
from benchctl.campaign.ports import JSON
from benchctl.errors import SmokeTestFailed


def loopback_http(method: str, url: str, body: dict[str, Any] | None, timeout: float) -> tuple[int, bytes]:
    if not url.startswith("http://127.0.0.1:"):
        raise ValueError(f"refusing non-loopback URL {url}")
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (checked: loopback http)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (loopback http only)
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def smoke_test(
    url: str, model: str, n: int = 3, max_tokens: int = 8, timeout_s: float = 30
) -> dict[str, Any]:
    """n short chat completions (alternately non-streaming and streaming).

    Returns counts and latencies; raises SmokeTestFailed on any failure (HTTP error, bad or empty answer,
    timeout).
    """
    latencies: list[float] = []
    tokens = 0
    deadline = time.monotonic() + timeout_s
    for i in range(n):
        stream = i % 2 == 1
        body = {
            "model": model,
            "messages": [{"role": "user", "content": f"Smoke test {i}: say hello."}],
            "max_tokens": max_tokens,
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SmokeTestFailed(
                f"smoke test against {url}: timed out after {i}/{n} requests ({timeout_s}s)"
            )
        t0 = time.monotonic()
        try:
            status, raw = loopback_http("POST", url.rstrip("/") + "/v1/chat/completions", body, timeout=remaining)
        except (OSError, urllib.error.URLError) as e:
            raise SmokeTestFailed(f"smoke test request {i} to {url} failed: {e}") from e
        latencies.append(time.monotonic() - t0)
        if status != 200:
            raise SmokeTestFailed(f"smoke test request {i} to {url}: HTTP {status}: {raw[:300]!r}")
        try:
            got = parse_stream(raw) if stream else parse_completion(raw)
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise SmokeTestFailed(
                f"smoke test request {i} to {url}: bad response ({e}): {raw[:300]!r}"
            ) from e
        if not got["content"] and not got["completion_tokens"]:
            raise SmokeTestFailed(f"smoke test request {i} to {url}: empty completion: {raw[:300]!r}")
        tokens += got["completion_tokens"]
    return {
        "url": url,
        "model": model,
        "requests": n,
        "ok": n,
        "completion_tokens": tokens,
        "latencies_s": [round(x, 4) for x in latencies],
        "max_latency_s": round(max(latencies), 4) if latencies else 0.0,
        "mean_latency_s": round(sum(latencies) / len(latencies), 4) if latencies else 0.0,
    }


def parse_completion(raw: bytes) -> dict[str, Any]:
    doc = json.loads(raw)
    content = doc["choices"][0]["message"].get("content") or ""
    return {
        "content": content,
        "completion_tokens": int((doc.get("usage") or {}).get("completion_tokens", 0)),
    }


def parse_stream(raw: bytes) -> dict[str, Any]:
    content, usage_tokens, chunks, done = "", 0, 0, False
    for line in raw.decode("utf-8", "replace").splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            continue
        doc = json.loads(payload)
        if doc.get("error"):
            raise ValueError(f"error event {doc['error']}")
        for choice in doc.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content += delta["content"]
                chunks += 1
        if doc.get("usage"):
            usage_tokens = int(doc["usage"].get("completion_tokens") or 0)
    if not done:
        raise ValueError("stream ended without [DONE]")
    return {"content": content, "completion_tokens": usage_tokens or chunks}




def ask(url: str, requests: list[JSON], timeout_s: float = 120) -> JSON:
    """Send each ``{"id", "body"}`` chat completion as given; ``{id: {"content", "finish_reason"} | {"error"}}``
    (``benchctl.analysis.quality`` scores them)."""
    out: JSON = {}
    deadline = time.monotonic() + timeout_s
    for r in requests:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            out[r["id"]] = {"error": f"not sent: the questions took over {timeout_s:g} s"}
            continue
        try:
            status, raw = loopback_http("POST", url.rstrip("/") + "/v1/chat/completions", r["body"], timeout=remaining)
            out[r["id"]] = (quality.answer_of(json.loads(raw)) if status == 200
                            else {"error": f"HTTP {status}: {raw[:300]!r}"})
        except (OSError, urllib.error.URLError, ValueError) as e:
            out[r["id"]] = {"error": str(e)[:300]}
    return out


class LocalSmoke:
    """The smoke requests, then the quality questions, run in ``start`` (raising ``SmokeTestFailed`` there
    on a failed smoke request); their result and the questions' answers are kept."""

    def start(self, deployment: JSON, requests: int, max_tokens: int, *, quality: list[JSON] | None = None) -> JSON:
        result = smoke_test(deployment["url"], deployment["model"], n=requests, max_tokens=max_tokens)
        if quality is not None:
            result["quality_answers"] = ask(deployment["url"], quality)
        return {"result": result}

    def poll(self, started: JSON) -> int | None:
        return 0

    def result(self, started: JSON) -> JSON:
        result: JSON = started["result"]
        return result

    def failure_logs(self, started: JSON) -> JSON:
        return {}
