"""A small process manager for the local engine.

Every process is started in a new session (``start_new_session=True``): it is the leader of its own
process group, so a Ctrl-C in the terminal does not reach it (we stop processes ourselves, in order)
and ``stop`` can signal the whole group, children included (AIPerf spawns worker processes).

Two views of a started process:

* an in-memory registry of ``Popen`` objects keyed by pid, so this Python process can read exit codes
  and reap zombies;
* a JSON-able record ``{name, pid, start_time, log, cmd}`` that can be stored in a state file and used
  by another call or process to check or stop it later. ``start_time`` is field 22 of
  ``/proc/<pid>/stat`` (clock ticks since boot); a pid whose start time differs has been reused and is
  never signalled.

Pid-reuse safety of group signals: a pid number stays reserved while a process group with that id
exists, so when the leader ``pid`` is gone (no ``/proc/<pid>``) any live group ``pid`` is still our
group (its orphans); when ``/proc/<pid>`` exists with a different start time we do not signal at all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

Record = dict[str, Any]

# pid -> (Popen, record); entries are kept after exit so that exit codes stay readable.
_REGISTRY: dict[int, tuple[subprocess.Popen[bytes], Record]] = {}
# pid -> record of processes another of ours forked (the load runner's AIPerf runs): stopped by the safety net
_ADOPTED: dict[int, Record] = {}
_LOCK = threading.Lock()


def _read_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgrp, start_time) of ``pid`` from /proc, or None if there is no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes().decode("utf-8", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    # rest[0] is field 3 (state), rest[2] field 5 (pgrp), rest[19] field 22 (starttime).
    return rest[0], int(rest[2]), int(rest[19])


def proc_start_time(pid: int) -> int | None:
    st = _read_stat(pid)
    return None if st is None else st[2]


def live_start_time(pid: int) -> int | None:
    """Start time of ``pid`` while it runs (not a zombie), else None: with the start time recorded
    earlier, tells "that very process still runs" apart from "ended" and "pid reused"."""
    st = _read_stat(pid)
    return None if st is None or st[0] in ("Z", "X") else st[2]


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in process group ``pgid``."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        st = _read_stat(int(entry.name))
        if st is not None and st[1] == pgid and st[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def start(
    name: str,
    argv: list[str],
    env: Mapping[str, str | None] | None,
    log_path: str | Path,
    cwd: str | Path | None = None,
    *,
    stdin_pipe: bool = False,
    niceness: int = 0,
) -> Record:
    """Start ``argv`` in its own session, stdout+stderr appended to ``log_path``; return its record.

    ``env`` holds variables added to (overriding) the current environment, a None value removes the
    variable; ``env=None`` inherits the environment as is. ``stdin_pipe``: its stdin is a pipe from this
    process (``stdin_of``), which closes when this process ends, else /dev/null.
    """
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = str(value)
    with log.open("ab") as out:
        out.write(f"[benchctl] starting {name}: {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=str(cwd) if cwd is not None else None,
            start_new_session=True,
            close_fds=True,
            preexec_fn=(lambda: os.nice(niceness)) if niceness else None,  # noqa: PLW1509 (before exec only)
        )
    start_time = proc_start_time(proc.pid)  # a zombie still has /proc/<pid>/stat: never None here
    rec = {
        "name": name,
        "pid": proc.pid,
        "start_time": -1 if start_time is None else start_time,
        "log": str(log),
        "cmd": list(argv),
    }
    with _LOCK:
        _REGISTRY[proc.pid] = (proc, rec)
    return dict(rec)


def stdin_of(rec: Record) -> IO[bytes]:
    """The stdin pipe of a process this Python process started with ``stdin_pipe=True``."""
    proc = _ours(rec)
    if proc is None or proc.stdin is None:
        raise ValueError(f"{rec.get('name')} (pid {rec.get('pid')}) was not started here with a stdin pipe")
    return proc.stdin


def adopt(rec: Record) -> None:
    """Track a process that one of ours forked (pid and start time in ``rec``, leader of its own group), so
    that ``stop_all_started`` stops it too; its exit code is its parent's to read."""
    with _LOCK:
        _ADOPTED[int(rec["pid"])] = dict(rec)


def _ours(rec: Record) -> subprocess.Popen[bytes] | None:
    """Our Popen for this record (same pid AND same start time), else None."""
    with _LOCK:
        entry = _REGISTRY.get(int(rec["pid"]))
    if entry is None or int(entry[1]["start_time"]) != int(rec["start_time"]):
        return None
    return entry[0]


def is_alive(rec: Record) -> bool:
    """True while the recorded process runs: False once it exited (zombie or reaped) or its pid is reused."""
    pid = int(rec["pid"])
    proc = _ours(rec)
    if proc is not None and proc.poll() is not None:  # poll() also reaps our zombie
        return False
    st = _read_stat(pid)
    return st is not None and st[2] == int(rec["start_time"]) and st[0] not in ("Z", "X")


def exit_code(rec: Record) -> int | None:
    """Exit code (negative signal number if killed by a signal), or None while running.

    Only processes started by this Python process have a known exit code; for others, None is
    returned even after they ended (use ``is_alive`` to tell the two apart).
    """
    proc = _ours(rec)
    if proc is None:
        return None
    return proc.poll()


def _leader_matches(rec: Record) -> bool | None:
    """True: leader alive (or zombie) with our start time; False: pid reused; None: leader gone."""
    st = _read_stat(int(rec["pid"]))
    if st is None:
        return None
    return st[2] == int(rec["start_time"])


def _signal_group(rec: Record, sig: int) -> None:
    pid = int(rec["pid"])
    proc = _ours(rec)
    if proc is not None:
        proc.poll()
    if _leader_matches(rec) is False:
        return  # the pid belongs to somebody else now
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _group_done(rec: Record) -> bool:
    proc = _ours(rec)
    if proc is not None:
        proc.poll()
    if _leader_matches(rec) is False:
        return True
    return not group_members(int(rec["pid"]))


def stop(recs: Iterable[Record], grace_s: float = 5.0) -> list[Record]:
    """SIGTERM each record's process group, wait up to ``grace_s``, SIGKILL what is left.

    Idempotent; records of processes that already ended (or whose pid was reused) are skipped.
    Returns the records that had to be SIGKILLed.
    """
    recs = [r for r in recs if r]
    pending = [r for r in recs if not _group_done(r)]
    for rec in pending:
        _signal_group(rec, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        pending = [r for r in pending if not _group_done(r)]
    killed = list(pending)
    for rec in pending:
        _signal_group(rec, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        pending = [r for r in pending if not _group_done(r)]
    return killed


def started() -> list[Record]:
    """Records of every process this Python process started or adopted (running or not)."""
    with _LOCK:
        return [dict(rec) for _proc, rec in _REGISTRY.values()] + [dict(rec) for rec in _ADOPTED.values()]


def stop_all_started(grace_s: float = 3.0) -> list[Record]:
    """Stop everything this Python process started that still runs (Ctrl-C / atexit safety net)."""
    return stop([r for r in started() if not _group_done(r)], grace_s=grace_s)
