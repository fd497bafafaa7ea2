"""The AIPerf load runner: one process that pays AIPerf's start-up once and forks one AIPerf run per step.

Locally ``python -m benchctl.load_runner`` reads requests on stdin (``benchctl.local.load``); on EKS a load Job
runs this file's source with ``python3 -c`` (``benchctl.aws.k8s.jobs``), so it imports nothing of benchctl.
Its protocol, its files and its process rules: ``docs/reference/load-runner.md``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import selectors
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_GRACE_S = 10.0  # AIPerf shuts its services down on SIGTERM; SIGKILL the group after this
CPU_SAMPLE_S = 0.5  # the same as benchctl.lake.client_load.CPU_SAMPLE_S (this file imports nothing of benchctl)
_MAX_SAMPLES = 1000  # past this many samples of a run, the period grows with its age


def _atomic_json(path: str, data: dict[str, Any]) -> None:
    tmp = Path(f"{path}.{os.getpid()}.part")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def _start_time(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_bytes().decode("utf-8", "replace")
    return int(raw[raw.rfind(")") + 2 :].split()[19])


def _proc_table() -> dict[int, tuple[int, int, float]]:
    """pid -> (ppid, pgrp, CPU seconds of the process and its reaped children) of every process in /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, int, float]] = {}
    with os.scandir("/proc") as entries:
        names = [e.name for e in entries if e.name.isdigit()]
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:  # plain open: the cheapest read, every 0.5 s
                raw = stat.read().decode("utf-8", "replace")
        except OSError:  # gone meanwhile
            continue
        f = raw[raw.rfind(")") + 2 :].split()  # state ppid pgrp ... utime(11) stime cutime cstime(14)
        table[int(name)] = (int(f[1]), int(f[2]), sum(int(x) for x in f[11:15]) / tick)
    return table


def tree_usage(root: int, table: dict[int, tuple[int, int, float]]) -> tuple[float, float | None]:
    """(CPU seconds used so far by ``root``'s process group and every descendant of ``root``: the live ones'
    own time plus what they reaped (a process that ended and was waited for counts in its parent); seconds
    the live ones waited on a run queue, None without schedstat)."""
    members = {pid for pid, (_, pgrp, _) in table.items() if root in (pgrp, pid)}
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    todo = list(members)  # and their descendants, also those that left the group
    while todo:
        for kid in kids.get(todo.pop(), ()):
            if kid not in members:
                members.add(kid)
                todo.append(kid)
    cpu = sum(table[p][2] for p in members if p in table)
    wait: float | None = 0.0
    for pid in members:
        try:
            with open(f"/proc/{pid}/schedstat", "rb") as stat:  # on-CPU ns, run-queue wait ns, slices
                wait = (wait or 0.0) + int(stat.read().split()[1]) / 1e9
        except FileNotFoundError:  # gone meanwhile
            continue
        except (OSError, ValueError, IndexError):  # no schedstats in this kernel
            return cpu, None
    return cpu, wait


def cores_available() -> int:
    """The CPUs this process may run on: its affinity, capped by a cgroup CPU quota (v2 or v1) rounded up."""
    cores = len(os.sched_getaffinity(0))
    quota = None
    with contextlib.suppress(OSError, ValueError):
        q, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        quota = None if q == "max" else int(q) / int(period)
    if quota is None:
        with contextlib.suppress(OSError, ValueError):
            q1 = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
            quota = q1 / int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text()) if q1 > 0 else None
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def warm(tokenizer: str | None, revision: str | None = None) -> dict[str, Any]:
    """Import AIPerf, preload the tokenizer and the corpus tokens; returns timings (s)."""
    t0 = time.perf_counter()
    import aiperf.cli  # what the CLI process imports before it forks its services
    import aiperf.cli_runner  # noqa: F401

    t_import = time.perf_counter()
    info: dict[str, Any] = {"imports_s": round(t_import - t0, 2), "tokenizer": None, "corpus": False}
    if not tokenizer:
        return info
    from aiperf.common.tokenizer import Tokenizer

    original = Tokenizer.from_pretrained.__func__
    cache: dict[tuple[str, bool, str, bool], Any] = {}
    try:  # AIPerf's own test: offline, ``_load_from_hub`` loads ``name`` as given and ignores resolve_alias
        from aiperf.common.tokenizer import _is_offline_mode
    except ImportError:
        def _is_offline_mode() -> bool:
            return False

    def from_pretrained(cls: Any, name: str, trust_remote_code: bool = False, revision: str = "main",
                        resolve_alias: bool = True) -> Any:
        key = (name, bool(trust_remote_code), revision or "main", bool(resolve_alias) and not _is_offline_mode())
        if key not in cache:
            cache[key] = original(cls, name, trust_remote_code=trust_remote_code, revision=revision,
                                  resolve_alias=resolve_alias)
        return cache[key]

    Tokenizer.from_pretrained = classmethod(from_pretrained)
    try:  # the run's own load reports a tokenizer that cannot be had; a runner without it is only slower
        preloaded = Tokenizer.from_pretrained(tokenizer, revision=revision or "main")
    except Exception as exc:
        info["tokenizer_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return info
    info["tokenizer"] = tokenizer
    info["tokenizer_s"] = round(time.perf_counter() - t_import, 2)
    t_tok = time.perf_counter()
    with contextlib.suppress(ImportError, AttributeError):
        info["corpus"] = _cache_corpus(preloaded)
    info["corpus_s"] = round(time.perf_counter() - t_tok, 2)
    return info


def _cache_corpus(preloaded: Any) -> bool:
    """Tokenize the built-in (sonnet) corpus once with AIPerf's own ``_initialize_corpus``; a run whose
    tokenizer is the preloaded object gets a copy of that token list instead of tokenizing again."""
    from aiperf.common.enums import PromptCorpus
    from aiperf.dataset.generator.prompt import PromptGenerator

    original = PromptGenerator._initialize_corpus
    sonnet = getattr(PromptCorpus, "SONNET", None)
    if sonnet is None:
        return False

    class Probe:  # the attributes _initialize_corpus reads and writes
        def __init__(self) -> None:
            self.tokenizer = preloaded
            self._corpus = sonnet

        def debug(self, *a: Any, **k: Any) -> None:
            pass

    probe = Probe()
    original(probe)
    tokens = probe._tokenized_corpus  # type: ignore[attr-defined]

    def initialize_corpus(self: Any) -> None:
        if getattr(self, "_corpus", None) == sonnet and self.tokenizer is preloaded:
            self._tokenized_corpus = list(tokens)
            self._corpus_size = len(self._tokenized_corpus)
            return
        original(self)

    PromptGenerator._initialize_corpus = initialize_corpus
    return True


def _child(req: dict[str, Any]) -> None:
    """In the forked child: become an ordinary `aiperf` CLI run; never returns."""
    code = 1
    try:
        os.setpgid(0, 0)  # its own process group: stopping the run stops its services, not the runner
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, f"[benchctl] starting aiperf-{req['job_id']} (forked by the load runner): aiperf "
                     f"{' '.join(req['argv'])}\n".encode())
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        if req.get("cwd"):
            os.chdir(req["cwd"])
        from aiperf.cli import app

        sys.argv = ["aiperf", *req["argv"]]
        app()  # a profile run ends in os._exit(code) itself
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class Runner:
    def __init__(self) -> None:
        self.children: dict[int, dict[str, Any]] = {}
        self.stopping = False
        self._next_sample = 0.0

    def sample(self, force: bool = False) -> None:
        """Each running child's process-tree CPU, when its period is due (see ``cpu`` in the docstring)."""
        now = time.monotonic()
        if not self.children or (now < self._next_sample and not force):
            return
        try:
            table = _proc_table()
        except OSError:  # no /proc: nothing measured
            return
        at = time.time()
        for pid, child in self.children.items():
            samples = child.setdefault("cpu_samples", [])
            cpu, wait = tree_usage(pid, table)
            samples.append([round(at, 4), round(cpu, 3), None if wait is None else round(wait, 4)])
        oldest = max(len(c.get("cpu_samples", ())) for c in self.children.values())
        self._next_sample = now + CPU_SAMPLE_S * max(1.0, oldest / _MAX_SAMPLES)

    def fork(self, req: dict[str, Any]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        started_at = time.time()
        pid = os.fork()
        if pid == 0:
            _child(req)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.setpgid(pid, pid)  # also here: no race with a stop right after the started file
        self.children[pid] = {**req, "started_at": started_at, "cpu_samples": [[round(started_at, 4), 0.0, 0.0]]}
        _atomic_json(req["started"], {"pid": pid, "start_time": _start_time(pid), "at": started_at})

    def reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            req = self.children.pop(pid, None)
            if req is None:
                continue
            ended_at, cpu_s = time.time(), round(usage.ru_utime + usage.ru_stime, 3)
            samples = [s for s in req.get("cpu_samples", []) if s[0] < ended_at] + [[round(ended_at, 4), cpu_s, None]]
            cpu = {"samples": samples, "cores": cores_available()}
            code = os.waitstatus_to_exitcode(status)
            if req.get("record"):
                with contextlib.suppress(OSError):
                    _atomic_json(req["record"], {"job_id": req.get("job_id"), "exit_code": code, "cpu": cpu})
            _atomic_json(req["exit"], {"exit_code": code, "started_at": req["started_at"], "ended_at": ended_at,
                                       "cpu_s": cpu_s, "cpu": cpu})

    def stop_children(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + _GRACE_S
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)

    def serve(self) -> int:
        sel = selectors.DefaultSelector()
        sel.register(sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin, selectors.EVENT_READ)
        buf = b""
        fd = sys.stdin.fileno()
        while not self.stopping:
            for _key, _ in sel.select(timeout=0.05):
                chunk = os.read(fd, 65536)
                if not chunk:  # the engine closed the pipe (or died): stop everything and leave
                    self.stopping = True
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self.fork(json.loads(line))
            self.sample()
            self.reap()
        self.stop_children()
        return 0


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


CONTROL_ENDED = "control.ended"  # written by the Job's control container when it leaves on a failure
RUNNER_ENDED = "runner.ended"  # written here when the runner leaves on an error: why


def _control_ended(base: Path) -> str | None:
    try:
        return (base / CONTROL_ENDED).read_text(encoding="utf-8", errors="replace").strip() or "?"
    except OSError:
        return None


def serve_steps(runner: Runner, base: Path, steps: list[str], *, poll_s: float = 0.1, beat_s: float = 5.0) -> int:
    """The load Job's front-end: each step in order, when its request file appears; see the docstring. 0 when
    every step ran (or SIGTERM), 1 when the control container ended first."""
    alive = base / "alive"
    last_beat = [0.0]

    def beat() -> None:
        if time.monotonic() - last_beat[0] >= beat_s:
            last_beat[0] = time.monotonic()
            alive.touch()

    def control_gone(step: str) -> bool:
        why = _control_ended(base)
        if why is not None:
            print(f"[benchctl] step {step}: the control container ended ({why}): stopping", flush=True)
        return why is not None

    for step in steps:
        d = base / step
        while not (d / "request.json").is_file():
            if runner.stopping:  # SIGTERM (the Job deleted) while waiting for a request
                return 0
            if control_gone(step):
                return 1
            beat()
            time.sleep(poll_s)
        req = json.loads((d / "request.json").read_text(encoding="utf-8"))
        (d / "out").mkdir(parents=True, exist_ok=True)
        ended = d / "ended.json"
        runner.fork({"job_id": step, "argv": list(req["argv"]), "log": str(d / "aiperf.log"), "cwd": str(d),
                     "started": str(d / "started.json"), "exit": str(ended)})
        deadline = time.monotonic() + float(req.get("deadline_s") or 7 * 86400)
        timed_out = False
        while runner.children and not runner.stopping:
            runner.sample()
            runner.reap()
            beat()
            if control_gone(step):
                runner.stop_children()
                return 1
            if not timed_out and time.monotonic() > deadline:
                timed_out = True
                print(f"[benchctl] step {step}: past its deadline ({req.get('deadline_s')} s): stopping it", flush=True)
                runner.stop_children()
            time.sleep(poll_s)
        if runner.stopping:
            break
        end = json.loads(ended.read_text(encoding="utf-8")) if ended.is_file() else {}
        code = 124 if timed_out else int(end["exit_code"])
        # the runner's own record beside AIPerf's artifacts (uploaded with them): who ran the step, how it ended
        # and what AIPerf's processes used (``cpu``, as locally)
        _atomic_text(d / "out" / "runner-record.json", json.dumps({"step": step, "exit_code": code, "timed_out": timed_out,
                                                             "uid": os.getuid(), "gid": os.getgid(),
                                                             **({"cpu": end["cpu"]} if "cpu" in end else {})}))
        if code != 0:  # the Job's log shows why (what the state machine's failure_logs collects)
            with contextlib.suppress(OSError):
                tail = (d / "aiperf.log").read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
                print(f"[benchctl] step {step}: AIPerf exited {code}; its last lines:", *tail, sep="\n", flush=True)
        _atomic_text(d / "exit_code", str(code))
    runner.stop_children()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    runner = Runner()

    def on_signal(signum: int, frame: Any) -> None:
        runner.stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if args[:1] == ["--steps-dir"]:
        if len(args) < 3:
            print("usage: load_runner --steps-dir DIR STEP [STEP ...]", file=sys.stderr)
            return 2
        base = Path(args[1])
        try:
            with _beating(base / "alive"):  # the control container watches it from the start
                _ready(_warm_up())
            return serve_steps(runner, base, args[2:])
        except BaseException as exc:  # its last words for the control container, which ends the step at once
            with contextlib.suppress(OSError):
                _atomic_text(base / RUNNER_ENDED, f"{type(exc).__name__}: {exc}"[:3000])
            raise
    _ready(_warm_up())
    return runner.serve()


def _warm_up() -> dict[str, Any]:
    t0 = time.perf_counter()
    info = warm(os.environ.get("BENCHCTL_RUNNER_TOKENIZER") or None,
                os.environ.get("BENCHCTL_RUNNER_TOKENIZER_REVISION") or None)
    # AIPerf's services run gc.collect() at start: with the warm heap frozen those passes skip it
    gc.collect()
    gc.freeze()
    return {"ready": True, "pid": os.getpid(), "warm_s": round(time.perf_counter() - t0, 2), **info}


def _ready(info: dict[str, Any]) -> None:
    print(json.dumps(info), flush=True)


@contextlib.contextmanager
def _beating(alive: Path, every_s: float = 5.0) -> Iterator[None]:
    """Touch ``alive`` every ``every_s`` from a thread while the block runs (imports, tokenizer, corpus: the
    serving loop does not beat yet); the thread is joined before the runner forks anything."""
    import threading

    done = threading.Event()

    def loop() -> None:
        while True:
            with contextlib.suppress(OSError):
                alive.touch()
            if done.wait(every_s):
                return

    thread = threading.Thread(target=loop, name="benchctl-beat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


if __name__ == "__main__":
    sys.exit(main())
