"""``benchctl dashboards`` as a careful client of the Prometheus at the other end of a port-forward: no redirect
followed (one to the instance metadata address included), at most MAX_BODY_BYTES read, the answer's shape
checked (a JSON list, deep nesting, a missing ``data``), each an exit 2 naming the endpoint and the query, and
every remote string printed inert. The Prometheus here is a loopback HTTP server (http.server, 127.0.0.1, port 0)
answering what the test says; the last test holds the checks to a real Prometheus (Debian's, when installed)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from benchctl import dashboards as dq
from benchctl.cli.main import main

BUILDINFO = {"status": "success", "data": {"version": "2.42.0"}}
ESC_TEXT = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b31m"  # OSC 52 clipboard write, screen clear, C1 CSI
Answer = tuple[int, dict[str, str], bytes | list[bytes]]  # status, headers, body (a list: streamed, no length)


def _json(obj: Any, status: int = 200) -> Answer:
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return status, {"Content-Type": "application/json", "Content-Length": str(len(body))}, body


class _Server(ThreadingHTTPServer):
    routes: dict[str, Answer]
    seen: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # a body without Content-Length ends when the connection closes

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        self.server.seen.append(self.path)
        status, headers, body = self.server.routes.get(path, _json({"status": "error", "error": "no route"}, 404))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client stops reading at its cap
            for chunk in body if isinstance(body, list) else [body]:
                self.wfile.write(chunk)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def prometheus(routes: dict[str, Answer]) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.routes, server.seen = routes, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def dashboard(tmp_path: Path) -> Path:
    """One panel, one query reading a variable whose values come from the server."""
    path = tmp_path / "d.json"
    path.write_text(json.dumps({
        "panels": [{"id": 7, "title": "Up", "targets": [{"refId": "A", "expr": 'up{job=~"$job"}'}]}],
        "templating": {"list": [{"name": "job", "type": "query", "query": "label_values(up, job)"}]},
    }))
    return path


def run(server: _Server, dashboard: Path, capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str, str]:
    code = main(["dashboards", "--prometheus", url(server), "--dashboard", str(dashboard), "--since", "5", *more])
    out, err = capsys.readouterr()
    return code, out, err


def healthy(**override: Answer) -> dict[str, Answer]:
    routes = {
        "/api/v1/status/buildinfo": _json(BUILDINFO),
        "/api/v1/label/job/values": _json({"status": "success", "data": ["prometheus"]}),
        "/api/v1/query_range": _json({"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"job": "prometheus"}, "values": [[1700000000, "1"], [1700000015, "1"]]}]}}),
    }
    return {**routes, **override}


def test_a_healthy_prometheus_is_evaluated(dashboard: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with prometheus(healthy()) as server:
        code, out, err = run(server, dashboard, capsys)
    assert code == 0, err
    assert "1 of 1 PromQL queries returned plausible numbers" in out


def test_a_redirect_to_the_instance_metadata_address_is_not_followed(dashboard: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    to = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"
    with prometheus(healthy(**{"/api/v1/status/buildinfo": (302, {"Location": to, "Content-Length": "0"}, b"")})) \
            as server:
        started = time.monotonic()
        code, _, err = run(server, dashboard, capsys)
    assert code == 2
    assert time.monotonic() - started < 5  # refused, not a connection attempt left to time out
    assert f"{url(server)}/api/v1/status/buildinfo" in err and "HTTP 302 redirecting to" in err and to in err


def test_a_redirect_to_another_loopback_server_reaches_nothing(dashboard: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with prometheus(healthy()) as elsewhere, prometheus(healthy(**{"/api/v1/query_range": (
            307, {"Location": f"{url(elsewhere)}/api/v1/query_range", "Content-Length": "0"}, b"")})) as server:
        code, _, err = run(server, dashboard, capsys)
    assert code == 2
    assert elsewhere.seen == []
    assert f"{url(server)}/api/v1/query_range (query 'up{{job=~\"prometheus\"}}')" in err
    assert "HTTP 307 redirecting to" in err


def test_a_body_over_the_cap_is_not_read_to_its_end(dashboard: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Streamed without a Content-Length (HTTP/1.0, close-delimited): the client stops at the cap itself."""
    chunk = b" " * (1024 * 1024)
    body = [b'{"status": "success", "data": ["x"', *[chunk] * (dq.MAX_BODY_BYTES // len(chunk) + 1), b"]}"]
    with prometheus(healthy(**{"/api/v1/label/job/values": (200, {}, body)})) as server:
        code, _, err = run(server, dashboard, capsys)
    assert code == 2
    assert f"{url(server)}/api/v1/label/job/values (query 'up')" in err
    assert f"over the {dq.MAX_BODY_BYTES}-byte cap" in err


def test_a_declared_length_over_the_cap_is_refused_before_reading() -> None:
    body = json.dumps({"status": "success", "data": {"version": "x" * 5000}}).encode()
    with prometheus({"/api/v1/status/buildinfo": _json(body)}) as server:
        prom = dq.HttpPrometheus(url(server), max_bytes=1000)
        with pytest.raises(dq.PrometheusAnswerError, match=rf"buildinfo: answer of {len(body)} bytes "
                                                           r"\(Content-Length\) is over the 1000-byte cap"):
            prom.get("/api/v1/status/buildinfo")


@pytest.mark.parametrize(("path", "answer", "says"), [
    ("/api/v1/status/buildinfo", _json([1, 2]), "expected a JSON object (the API's envelope), got a JSON list"),
    ("/api/v1/status/buildinfo", _json({"status": "success"}), "no 'data' in a 'success' answer"),
    ("/api/v1/label/job/values", _json({"status": "success"}), "no 'data' in a 'success' answer"),
    ("/api/v1/label/job/values", _json({"status": "success", "data": {"job": 1}}),
     "data: expected a list of label values"),
    ("/api/v1/query_range", _json({"status": "success"}), "no 'data' in a 'success' answer"),
    ("/api/v1/query_range", _json({"status": "success", "data": [1]}), "data: expected {'resultType': 'matrix'"),
    ("/api/v1/query_range", _json({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}}]}}),
     "data.result[0]: expected a series with a 'values' list"),
    ("/api/v1/query_range", _json({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {}, "values": [[1, "one"]]}]}}), "data.result[0].values[0]: 'one' is not a number"),
    ("/api/v1/query_range", _json(b'{"status": "success", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
     "data[0][0][0]...(60 more levels): JSON nested deeper than 64 levels"),
    ("/api/v1/query_range", _json(b'{"status": "success", "status": "error", "data": {}}'),
     "key 'status' appears more than once"),
    ("/api/v1/query_range", _json({"status": "pending", "data": {}}), "status: expected 'success' or 'error'"),
])
def test_an_answer_of_the_wrong_shape_exits_2_naming_endpoint_and_query(
        dashboard: Path, capsys: pytest.CaptureFixture[str], path: str, answer: Answer, says: str) -> None:
    with prometheus(healthy(**{path: answer})) as server:
        code, _, err = run(server, dashboard, capsys)
    assert code == 2
    assert "Traceback" not in err
    query = {"/api/v1/status/buildinfo": "", "/api/v1/label/job/values": " (query 'up')",
             "/api/v1/query_range": " (query 'up{job=~\"prometheus\"}')"}[path]
    assert f"{url(server)}{path}{query}: " in err and says in err, err


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_remote_text_is_printed_inert(dashboard: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """Prometheus' error text and a label value (it lands in the query printed with the failure) carry terminal
    control sequences: each is printed as visible escapes, never as the control characters."""
    with prometheus(healthy(**{
        "/api/v1/label/job/values": _json({"status": "success", "data": [f"a{ESC_TEXT}"]}),
        "/api/v1/query_range": _json({"status": "error", "errorType": "bad_data", "error": f"boom{ESC_TEXT}"}, 400),
    })) as server:
        code, out, err = run(server, dashboard, capsys, "--format", fmt)
    assert code == 1  # the query failed: Prometheus' own error answer
    assert not any(c in out + err for c in "\x1b\x07\x9b")
    if fmt == "table":
        assert "boom\\x1b]52;c;ZXZpbA==\\x07\\x1b[2J\\x9b31m" in out
        assert '  up{job=~"a\\x1b' in out and "\\x07\\x1b" in out.splitlines()[-1]  # the label value, in the query
    else:
        (result,) = json.loads(out)["results"]
        assert "boom\\x1b]52" in result["failure"]
