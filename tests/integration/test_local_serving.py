"""Integration tests of the local engine: real Dynamo frontend + mocker processes and real AIPerf.

Every deployment and AIPerf run goes through fixtures that always tear down (try/finally), and each
test checks afterwards that none of the pids it started (nor their process groups) survive.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytest.importorskip("dynamo.frontend")
pytest.importorskip("aiperf")

from benchctl.campaign.ports import DeploymentRequest, LoadRequest, WorkerGroupSpec
from benchctl.errors import ServingFailed
from benchctl.local import loopback, modeldir, processes
from benchctl.local.load import LocalLoad
from benchctl.local.serving import SERVING_NICENESS, LocalServing, mocker_flags
from benchctl.local.smoke import smoke_test

pytestmark = pytest.mark.integration

MODEL = modeldir.TOKENIZER_NAME
READY_TIMEOUT_S = 60.0


def _agg(dep_id: str, replicas: int = 2, **mocker: object) -> DeploymentRequest:
    return DeploymentRequest(
        deployment_id=dep_id,
        model_name=MODEL,
        mode="aggregated",
        router="round-robin",
        groups=(WorkerGroupSpec("worker", replicas),),
        mocker={"speedup_ratio": 10, **mocker},
    )


def _disagg(dep_id: str, **mocker: object) -> DeploymentRequest:
    return DeploymentRequest(
        deployment_id=dep_id,
        model_name=MODEL,
        mode="disaggregated",
        router="kv",
        groups=(WorkerGroupSpec("prefill", 1), WorkerGroupSpec("decode", 1)),
        mocker={"speedup_ratio": 10, "block_size": 16, **mocker},
    )


def _gone(rec: dict) -> bool:
    """The recorded process and its whole process group are gone (or the pid belongs to someone else)."""
    pid = int(rec["pid"])
    if processes.proc_start_time(pid) not in (None, rec["start_time"]):
        return True  # pid reused by an unrelated process
    return not processes.is_alive(rec) and not processes.group_members(pid)


def _wait_ready(serving: LocalServing, state: dict) -> float:
    t0 = time.monotonic()
    while not serving.probe_ready(state):
        assert time.monotonic() - t0 < READY_TIMEOUT_S, f"not ready after {READY_TIMEOUT_S}s"
        time.sleep(0.25)
    return time.monotonic() - t0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:  # loopback only
        assert resp.status == 200
        return resp.read().decode()


def _served_requests(metrics_text: str) -> float:
    """Sum of dynamo_component_requests_total for the `generate` endpoint in a worker's /metrics."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("dynamo_component_requests_total{") and 'dynamo_endpoint="generate"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _descendants(root: int) -> set[tuple[int, int]]:
    """(pid, start_time) of ``root`` and every process below it in the parent tree (any session)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                raw = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            ppid = int(raw[raw.rfind(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        st = processes.proc_start_time(pid)
        if st is not None:
            found.add((pid, st))
        todo += children.get(pid, [])
    return found


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple[LocalServing, Callable[[DeploymentRequest], dict]]]:
    """A LocalServing plus a deploy function; every deployment is torn down, then checked gone."""
    svc = LocalServing(tmp_path / "run")
    states: list[dict] = []

    def deploy(spec: DeploymentRequest) -> dict:
        state = svc.deploy(spec)
        states.append(state)
        return state

    try:
        yield svc, deploy
    finally:
        try:
            for state in states:
                svc.teardown(state)
        finally:
            processes.stop_all_started()
    for state in states:
        for rec in state["processes"]:
            assert _gone(rec), f"{rec['name']} pid {rec['pid']} survived teardown"
        assert not Path(state["discovery_dir"]).exists()


def test_model_dir_is_an_offline_hub_cache() -> None:
    path = modeldir.ensure_model_dir()
    assert (
        path == modeldir.model_path()
        and (path / "config.json").is_file()
        and (path / "tokenizer.json").is_file()
    )
    info = modeldir.verify(path)  # round trip, Qwen ids, special tokens, ChatML template
    assert info["vocab_size"] >= 151646
    # resolve the repo id from the cache with the offline variables set, as AIPerf does
    code = (
        "from transformers import AutoTokenizer as A; t = A.from_pretrained('Qwen/Qwen3-30B-A3B');"
        "m = [{'role': 'user', 'content': 'x'}];"
        "print(t.apply_chat_template(m, tokenize=True, add_generation_prompt=True))"
    )
    env = {**os.environ, **modeldir.tokenizer_env()}
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "151644" in out.stdout


def test_mocker_knobs_are_mapped_and_unknown_ones_rejected() -> None:
    flags = mocker_flags(
        {
            "speedup_ratio": 2,
            "num_gpu_blocks": 512,
            "enable_prefix_caching": False,
            "prefill": {"speedup_ratio": 4},
        },
        "prefill",
    )
    assert flags == ["--no-enable-prefix-caching", "--num-gpu-blocks-override", "512", "--speedup-ratio", "4"]
    with pytest.raises(ValueError, match=r"valid:.*speedup_ratio"):
        mocker_flags({"speed_up": 3}, "worker")


def test_aggregated_two_workers(serving) -> None:
    svc, deploy = serving
    state = deploy(_agg("agg-a", replicas=2))
    assert state["url"].startswith("http://127.0.0.1:")
    assert set(state["metrics_urls"]) == {"frontend", "worker-0", "worker-1"}
    assert len(state["processes"]) == 3
    assert json.loads((Path(state["workdir"]) / "state.json").read_text())["deployment_id"] == "agg-a"
    # the serving processes yield the cores to the load generator (it runs at this process's niceness)
    mine = os.nice(0)
    for rec in state["processes"]:
        stat = Path(f"/proc/{rec['pid']}/stat").read_text()
        assert int(stat[stat.rindex(")") + 2 :].split()[16]) == mine + SERVING_NICENESS, rec["name"]
    took = _wait_ready(svc, state)
    print(f"aggregated x2 ready in {took:.1f}s")
    assert svc.deploy(_agg("agg-a", replicas=2))["processes"] == state["processes"]  # idempotent

    result = smoke_test(state["url"], state["model"], n=4)
    assert result["ok"] == 4 and result["completion_tokens"] > 0

    fe = _get(state["metrics_urls"]["frontend"])
    assert "dynamo_frontend_requests_total" in fe
    for name in ("worker-0", "worker-1"):  # one process per worker => per-worker metrics, round-robin
        text = _get(state["metrics_urls"][name])
        assert "vllm:" in text
        assert _served_requests(text) >= 1, f"{name} served nothing"
    svc.check_alive(state)

    removed = svc.teardown(state)
    assert set(removed["stopped"]) == {"frontend", "worker-0", "worker-1"}
    assert all(_gone(r) for r in state["processes"])
    assert svc.teardown(state)["stopped"] == []  # idempotent


def test_disaggregated_one_prefill_one_decode(serving) -> None:
    svc, deploy = serving
    state = deploy(_disagg("disagg-b"))
    assert set(state["metrics_urls"]) == {"frontend", "prefill-0", "decode-0"}
    took = _wait_ready(svc, state)
    print(f"disaggregated 1P+1D ready in {took:.1f}s")
    result = smoke_test(state["url"], state["model"], n=3)
    assert result["ok"] == 3
    assert _served_requests(_get(state["metrics_urls"]["prefill-0"])) >= 1
    assert _served_requests(_get(state["metrics_urls"]["decode-0"])) >= 1
    # a partial state (what the campaign records before deploy returns) is enough to tear down
    removed = svc.teardown({"deployment_id": "disagg-b", "pending": True})
    assert set(removed["stopped"]) == {"frontend", "prefill-0", "decode-0"}
    assert all(_gone(r) for r in state["processes"])
    svc.teardown(state)


def test_small_aiperf_run(serving, tmp_path: Path) -> None:
    svc, deploy = serving
    state = deploy(_agg("agg-c", replicas=2))
    _wait_ready(svc, state)
    artifact_dir = tmp_path / "artifacts" / "job-c"
    argv = [
        "--streaming", "--isl", "64", "--isl-stddev", "0", "--osl", "16",
        "--extra-inputs", "ignore_eos:true", "--concurrency", "2", "--request-count", "10",
        "--warmup-request-count", "2", "--random-seed", "7", "--ui-type", "none",
        "--endpoint-type", "chat", "--model", MODEL, "--tokenizer", MODEL,
        "--url", state["url"], "--artifact-dir", str(artifact_dir),
    ]  # fmt: skip
    load = LocalLoad()
    t0 = time.monotonic()
    job = load.launch(LoadRequest("c1", "job", "c", tuple(argv), str(artifact_dir)))  # job id "job-c"
    try:
        while (rc := load.poll(job)) is None:
            assert time.monotonic() - t0 < 120, "aiperf took too long"
            time.sleep(0.5)
    finally:
        load.stop(job)
    print(f"aiperf 10 requests took {time.monotonic() - t0:.1f}s")
    assert rc == 0, Path(job["log"]).read_text()[-3000:]
    assert Path(job["log"]) == artifact_dir.parent / "job-c.aiperf.log"
    summary = json.loads((artifact_dir / "profile_export_aiperf.json").read_text())
    assert summary["request_count"]["avg"] == 10
    assert summary["time_to_first_token"]["avg"] > 0
    records = [json.loads(line) for line in (artifact_dir / "profile_export.jsonl").read_text().splitlines()]
    assert sum(r["metadata"]["benchmark_phase"] == "profiling" for r in records) == 10
    assert not any(r.get("error") for r in records)
    assert _gone(job["process"])


def test_killed_worker_is_detected(serving) -> None:
    svc, deploy = serving
    state = deploy(_agg("agg-d", replicas=2))
    _wait_ready(svc, state)
    victim = next(r for r in state["processes"] if r["name"] == "worker-1")
    os.kill(victim["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    with pytest.raises(ServingFailed, match="worker-1"):
        while time.monotonic() < deadline:
            svc.check_alive(state)
            time.sleep(0.1)
    with pytest.raises(ServingFailed, match="worker-1"):
        svc.probe_ready(state)
    svc.teardown(state)  # with a dead process: fine
    svc.teardown(state)


def test_stop_running_aiperf_leaves_nothing(serving, tmp_path: Path) -> None:
    svc, deploy = serving
    state = deploy(_agg("agg-e", replicas=1, speedup_ratio=1))
    _wait_ready(svc, state)
    artifact_dir = tmp_path / "artifacts" / "job-e"
    argv = [
        "profile", "--streaming", "--isl", "64", "--osl", "512", "--concurrency", "2",
        "--request-count", "100000", "--ui-type", "none", "--endpoint-type", "chat",
        "--model", MODEL, "--tokenizer", MODEL, "--url", state["url"], "--artifact-dir", str(artifact_dir),
    ]  # fmt: skip
    load = LocalLoad()
    job = load.launch(LoadRequest("c1", "job", "e", tuple(argv), str(artifact_dir)))  # job id "job-e"
    try:
        tree: set[tuple[int, int]] = set()
        deadline = time.monotonic() + 60  # wait until AIPerf has spawned its service processes
        while len(processes.group_members(job["process"]["pid"])) < 4:
            tree |= _descendants(job["process"]["pid"])
            assert load.poll(job) is None, Path(job["log"]).read_text()[-3000:]
            assert time.monotonic() < deadline, "aiperf did not spawn its services"
            time.sleep(0.25)
        time.sleep(2)  # let it send requests
        tree |= _descendants(job["process"]["pid"])
        assert load.poll(job) is None
    finally:
        t0 = time.monotonic()
        load.stop(job)
        print(f"aiperf stop took {time.monotonic() - t0:.1f}s")
    assert load.poll(job) is not None
    assert _gone(job["process"])
    assert len(tree) >= 4
    survivors = [pid for pid, st in tree if processes.is_alive({"pid": pid, "start_time": st})]
    assert survivors == [], f"aiperf processes survived stop: {survivors}"
    load.stop(job)  # idempotent


# ------------------------------------------------------------------------------------- loopback only


def _proc_addr(hexaddr: str) -> tuple[str, int]:
    """``0100007F:1F90`` / 32-hex-digit IPv6 forms of /proc/net/{tcp,udp}[6] -> (address, port)."""
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)
    host_order = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))  # four host-order 32-bit words
    return socket.inet_ntop(socket.AF_INET6, host_order), int(port, 16)


def listening_sockets(pids: set[int]) -> set[tuple[int, str, str, int]]:
    """(pid, proto, address, port) of every TCP socket in LISTEN and every unconnected (receiving) UDP
    socket that one of ``pids`` holds open: its ``/proc/<pid>/fd`` socket inodes matched against
    ``/proc/<pid>/net/{tcp,tcp6,udp,udp6}`` (the process's own network namespace)."""
    found: set[tuple[int, str, str, int]] = set()
    for pid in pids:
        inodes: set[int] = set()
        try:
            for fd in os.scandir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target.startswith("socket:["):
                        inodes.add(int(target[8:-1]))
        except OSError:
            continue  # exited meanwhile
        for proto in ("tcp", "tcp6", "udp", "udp6"):
            try:
                rows = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                f = row.split()
                local, remote, state, inode = f[1], f[2], f[3], int(f[9])
                if inode not in inodes:
                    continue
                if proto.startswith("tcp") and state != "0A":  # 0A = TCP_LISTEN
                    continue
                if proto.startswith("udp") and _proc_addr(remote)[1] != 0:  # connected: not receiving
                    continue
                found.add((pid, proto, *_proc_addr(local)))
    return found


def test_the_loopback_shim_rewrites_only_wildcard_binds(tmp_path: Path) -> None:
    code = ("import socket; a = socket.socket(); a.bind(('0.0.0.0', 0)); "
            "b = socket.socket(socket.AF_INET6); b.bind(('::', 0)); "
            "c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); c.bind(('0.0.0.0', 0)); "
            "d = socket.socket(); d.bind(('127.0.0.2', 0)); "
            "print(a.getsockname()[0], b.getsockname()[0], c.getsockname()[0], d.getsockname()[0])")
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert plain.stdout.split() == ["0.0.0.0", "::", "0.0.0.0", "127.0.0.2"]  # what the shim has to change
    shimmed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, **loopback.preload_env()})
    assert shimmed.stdout.split() == ["127.0.0.1", "::1", "127.0.0.1", "127.0.0.2"]


def _shim_runs(code: str) -> list[subprocess.CompletedProcess[str]]:
    """``code`` run without the shim (its LIST set), with the shim and LIST empty, and with both."""
    envs = ({"LIST": "1"}, {**loopback.preload_env(), "LIST": ""}, {**loopback.preload_env(), "LIST": "1"})
    return [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, **env}) for env in envs]


def test_the_shim_sets_tcp_nodelay_only_on_connections_of_the_listed_ports(tmp_path: Path) -> None:
    # Given two loopback listeners, only the first one's port listed in BENCHCTL_NODELAY_PORTS
    code = ("import os, socket; a = socket.socket(); a.bind(('127.0.0.1', 0)); a.listen(); "
            "b = socket.socket(); b.bind(('127.0.0.1', 0)); b.listen(); "
            "os.environ['BENCHCTL_NODELAY_PORTS'] = '1, %d' % a.getsockname()[1] if os.environ.get('LIST') else ''; "
            "ca = socket.create_connection(a.getsockname()); cb = socket.create_connection(b.getsockname()); "
            "sa, _ = a.accept(); sb, _ = b.accept(); "
            "print(*[int(bool(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))) for s in (ca, sa, cb, sb)])")
    # When a process connects to both and accepts both, without the shim, with it but no list, with both
    plain, unlisted, listed = _shim_runs(code)
    # Then only the listed port's two ends (the connecting and the accepted socket) have TCP_NODELAY
    assert plain.stdout.split() == ["0", "0", "0", "0"]  # what the shim has to change
    assert unlisted.stdout.split() == ["0", "0", "0", "0"]
    assert listed.stdout.split() == ["1", "1", "0", "0"]


def test_the_shim_redirects_only_loopback_connections_to_a_listed_port(tmp_path: Path) -> None:
    # Given three listeners: A (listed, redirected to B), B, and C (not listed); each answers with its name
    code = ("import os, socket\n"
            "ls = {n: socket.socket() for n in 'ABC'}\n"
            "[s.bind(('127.0.0.1', 0)) or s.listen() for s in ls.values()]\n"
            "port = {n: s.getsockname()[1] for n, s in ls.items()}\n"
            "os.environ['BENCHCTL_REDIRECT_PORTS'] = '1:2, %d:%d' % (port['A'], port['B']) if os.environ.get('LIST') else ''\n"
            "def reached(n):\n"
            "    c = socket.create_connection(('127.0.0.1', port[n]))\n"
            "    for m, s in ls.items():\n"
            "        s.setblocking(False)\n"
            "        try:\n"
            "            s.accept()\n"
            "            return m\n"
            "        except BlockingIOError:\n"
            "            pass\n"
            "print(*[reached(n) for n in 'ABC'])\n")
    # When a process connects to each, without the shim, with it but no list, and with the list
    plain, unlisted, listed = _shim_runs(code)
    # Then only the listed port's connection lands on its pair; every other one where it was aimed
    assert plain.stdout.split() == ["A", "B", "C"]  # what the shim has to change
    assert unlisted.stdout.split() == ["A", "B", "C"]
    assert listed.stdout.split() == ["B", "B", "C"]


def test_redirect_env_pairs_the_ports_or_unsets_the_variable() -> None:
    assert loopback.redirect_env({23463: 29651, 1: 2}) == {"BENCHCTL_REDIRECT_PORTS": "23463:29651,1:2"}
    assert loopback.redirect_env({}) == {"BENCHCTL_REDIRECT_PORTS": None}


def test_nodelay_env_lists_the_ports_or_unsets_the_variable() -> None:
    assert loopback.nodelay_env([23463, 29651]) == {"BENCHCTL_NODELAY_PORTS": "23463,29651"}
    assert loopback.nodelay_env([]) == {"BENCHCTL_NODELAY_PORTS": None}  # a stray value never reaches a worker


def _first_token_ms(url: str, prompt: str) -> float:
    """Milliseconds from sending one streaming chat completion to its first content chunk (loopback)."""
    u = urlsplit(url)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4,
                       "stream": True})
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        while line := resp.readline():
            if line.startswith(b"data:") and b'"content"' in line:
                return (time.perf_counter() - t0) * 1000.0
        raise AssertionError("no content chunk in the stream")
    finally:
        conn.close()


def test_the_disaggregated_handoff_adds_no_delayed_ack_stall_to_the_first_token(serving) -> None:
    # Given a disaggregated deployment with (almost) no model time: what is left of a first token is the
    # path frontend -> prefill -> bootstrap rendezvous -> decode, on loopback
    svc, deploy = serving
    state = deploy(_disagg("disagg-nodelay", speedup_ratio=1000))
    _wait_ready(svc, state)
    # When a few requests of ~256 words run one at a time
    ttfts = [_first_token_ms(state["url"], " ".join(["word"] * 250) + f" {i}") for i in range(8)]
    # Then the fastest first token is well under the >= 40 ms Linux delayed ACK that Nagle's algorithm waits
    # for on a rendezvous connection without TCP_NODELAY (Dynamo 1.6.1's mocker: ~50 ms on every request)
    print(f"first-token ms: {sorted(round(t, 1) for t in ttfts)}")
    assert min(ttfts) < 25.0, sorted(ttfts)


def _headers_to_first_content_ms(conn: http.client.HTTPConnection, prompt: str) -> float:
    """One streamed chat request on ``conn`` (kept open): ms from the response headers to the first content chunk."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 4,
                       "stream": True})
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    t_headers = time.perf_counter()
    first = None
    while line := resp.readline():  # read the stream to its end: the connection is reused by the next request
        if first is None and line.startswith(b"data:") and b'"content"' in line:
            first = (time.perf_counter() - t_headers) * 1000.0
    assert first is not None, "no content chunk in the stream"
    return first


def _kept_alive_gaps(url: str, n: int = 6) -> list[float]:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        return [_headers_to_first_content_ms(conn, " ".join(["word"] * 250) + f" {i}") for i in range(n)]
    finally:
        conn.close()


def test_the_frontend_holds_a_kept_alive_connection_s_first_token_for_the_delayed_ack(serving) -> None:
    # Given an aggregated deployment whose first token is ready a few ms after the response headers (speedup 10).
    # Dynamo 1.6.1's HTTP frontend (axum::serve on a bare listener) leaves Nagle's algorithm on the client's
    # connection, and the local engine leaves it so (a frontend pod behind a Service is the same binary, the
    # client's Linux the same delayed ACK): the stall is part of what a client measures, not a local artefact
    svc, deploy = serving
    state = deploy(_agg("agg-keepalive", replicas=1))
    _wait_ready(svc, state)
    frontend = next(r for r in state["processes"] if r["name"] == "frontend")
    http_port = str(urlsplit(state["url"]).port)
    environ = Path(f"/proc/{frontend['pid']}/environ").read_bytes().split(b"\0")
    listed = [e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"BENCHCTL_NODELAY_PORTS=")]
    assert http_port not in ",".join(listed).split(","), listed
    # When one connection carries several requests in turn (what AIPerf's pooled keep-alive connections do)
    gaps = _kept_alive_gaps(state["url"])
    print(f"headers -> first content, ms: {[round(g, 1) for g in gaps]}")
    # Then the first request (a new connection: Linux acknowledges its first segments at once) gets its first
    # token promptly, and the reused connection's first token waits for the client's delayed ACK of the
    # headers (Linux TCP_DELACK_MIN, 40 ms): the ~25 ms AIPerf's TTFT carries over a direct client's on the twin
    assert gaps[0] < 25.0, gaps
    assert sorted(gaps[1:])[len(gaps[1:]) // 2] >= 30.0, gaps


def test_tcp_nodelay_on_the_frontend_s_http_port_removes_that_stall(serving, monkeypatch) -> None:
    # Given the same deployment, but the shim also sets TCP_NODELAY on the frontend's HTTP port (what Dynamo's
    # open PR #14643 does in the frontend itself; the local engine does NOT do this, see the test above)
    import benchctl.local.serving as serving_mod

    picked: list[int] = []
    free_ports, nodelay_env = serving_mod._free_ports, loopback.nodelay_env

    def recording_free_ports(n: int) -> list[int]:
        picked[:] = free_ports(n)
        return picked

    monkeypatch.setattr(serving_mod, "_free_ports", recording_free_ports)  # ports[0] is the HTTP port
    monkeypatch.setattr(serving_mod.loopback, "nodelay_env", lambda ports: nodelay_env([*ports, picked[0]]))
    svc, deploy = serving
    state = deploy(_agg("agg-keepalive-nodelay", replicas=1))
    _wait_ready(svc, state)
    # When one connection carries several requests in turn
    gaps = _kept_alive_gaps(state["url"])
    print(f"headers -> first content, ms: {[round(g, 1) for g in gaps]}")
    # Then no request waits for a delayed ACK: the stall is Nagle's algorithm on the frontend's socket
    assert max(gaps) < 25.0, gaps


def _held(monkeypatch: pytest.MonkeyPatch, dispatch_ms: float) -> None:
    """Deployments made now give their aggregated workers a twin's dispatch hold of ``dispatch_ms``
    (what ``benchctl.forecast.twin`` reads from aiconfigurator; the timing itself stays the test's mocker knobs)."""
    monkeypatch.setattr(LocalServing, "_twin_knobs", lambda self, spec: (
        dict(spec.mocker), {"worker": {"name": "test", "label": "test", "dispatch_ms": dispatch_ms}}))


def _concurrent_first_tokens_ms(url: str, n: int) -> list[float]:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda i: _first_token_ms(url, " ".join(["word"] * 250) + f" c{i}"), range(n)))


def test_the_dispatch_hold_delays_each_first_token_without_occupying_the_engine(serving, monkeypatch) -> None:
    # Given two aggregated deployments with (almost) no model time, one whose worker's answers are held 60 ms on
    # their way to the frontend (the twin's dispatch: aiconfigurator's per-request CPU time, not engine time)
    svc, deploy = serving
    fast = deploy(_agg("agg-no-hold", replicas=1, speedup_ratio=1000))
    _held(monkeypatch, 60.0)
    held = deploy(_agg("agg-hold", replicas=1, speedup_ratio=1000))
    for state in (fast, held):
        _wait_ready(svc, state)
    hold = next(c for c in held["components"] if c["role"] == "dispatch-hold")
    worker = next(c for c in held["components"] if c["role"] == "worker")
    assert worker["dispatch_ms"] == 60.0 and len(hold["ports"]) == 1, hold
    # When requests run one at a time on new connections, then on one kept-alive connection, then 8 at once
    alone = {name: sorted(_first_token_ms(s["url"], " ".join(["word"] * 250) + f" {i}") for i in range(6))
             for name, s in (("fast", fast), ("held", held))}
    kept = sorted(_kept_alive_gaps(held["url"]))
    together = sorted(_concurrent_first_tokens_ms(held["url"], 8))
    print(f"first-token ms alone: {alone}; held, headers -> first token kept alive: {[round(g, 1) for g in kept]}; "
          f"held, 8 at once: {[round(t, 1) for t in together]}")
    # Then the hold adds its 60 ms to a first token (medians; the local path's own jitter is a few ms) ...
    added = alone["held"][3] - alone["fast"][3]
    assert 50.0 <= added <= 80.0, alone
    # ... after the response headers, as a real worker's dispatch would: on a kept-alive connection the first
    # token is not held a second time for the client's delayed ACK (that would read ~100 ms: 60 + 40)
    assert 50.0 <= kept[len(kept) // 2] <= 85.0, kept
    # ... and 8 requests held at once overlap: none waits for another's hold (8 x 60 ms in a queue would be 480)
    assert together[-1] < alone["held"][3] + 100.0, together


def test_no_shim_no_deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCHCTL_LIB_DIR", str(tmp_path / "lib"))  # not built there, and no compiler
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(loopback.shutil, "which", lambda _name: None)
    svc = LocalServing(tmp_path / "run")
    with pytest.raises(ServingFailed, match=r"no C compiler \(cc\) to build loopback_bind.c"):
        svc.deploy(_disagg("never"))
    assert not list((tmp_path / "run").rglob("*.log"))  # nothing started


def test_a_local_serving_and_its_load_listen_only_on_loopback(serving, tmp_path: Path) -> None:
    # Given a disaggregated deployment with the KV router (every kind of listener a local run opens:
    # HTTP, request plane, system servers, event-plane PUBs, the prefill bootstrap server)
    svc, deploy = serving
    state = deploy(_disagg("disagg-lo"))
    _wait_ready(svc, state)
    roots = [int(r["pid"]) for r in state["processes"]]
    artifact_dir = tmp_path / "artifacts" / "job-lo"
    argv = [
        "--streaming", "--isl", "64", "--isl-stddev", "0", "--osl", "16", "--concurrency", "2",
        "--request-count", "12", "--warmup-request-count", "1", "--random-seed", "7", "--ui-type", "none",
        "--endpoint-type", "chat", "--model", MODEL, "--tokenizer", MODEL,
        "--url", state["url"], "--artifact-dir", str(artifact_dir),
    ]  # fmt: skip
    load = LocalLoad()
    # When AIPerf runs against it, the sockets of every process this test started (and their
    # descendants: AIPerf's services, forked per run) are listed over and over until the run ends
    job = load.launch(LoadRequest("c1", "job", "lo", tuple(argv), str(artifact_dir)))
    seen: set[tuple[int, str, str, int]] = set()
    pids: set[int] = set()
    t0 = time.monotonic()
    try:
        while True:
            now = set()
            for root in [*roots, int(job["process"]["pid"])]:
                now |= {pid for pid, _ in _descendants(root)}
            pids |= now
            seen |= listening_sockets(now)
            if load.poll(job) is not None:
                break
            assert time.monotonic() - t0 < 120, "aiperf took too long"
            time.sleep(0.2)
    finally:
        load.stop(job)
    assert Path(artifact_dir / "profile_export_aiperf.json").is_file(), Path(job["log"]).read_text()[-2000:]
    # Then there were listeners (the check looked at real ones), in every deployment process, and every
    # one of them is on loopback
    print(f"{len(seen)} listening sockets in {len(pids)} processes: {sorted(seen)}")
    assert {pid for pid, *_ in seen} >= set(roots)
    assert len(seen) >= 10
    beyond = sorted(s for s in seen if s[2] not in ("127.0.0.1", "::1"))
    assert beyond == [], f"listening beyond loopback: {beyond}"
