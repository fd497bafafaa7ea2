"""``Locks`` on this machine: one JSON file per pool key under ``<workspace>/locks/``.

Created with ``O_CREAT | O_EXCL`` (atomic); an expired lock, or one whose holder process is gone, is
replaced (atomically, ``benchctl.atomic``). Each names its holder's process (pid and start time, so a
reused pid is not mistaken for the holder).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchctl.atomic import atomic_write
from benchctl.campaign.locks import LockHeld, held_message
from benchctl.local.processes import live_start_time


class FileLocks:
    """Local locks: one JSON file per key. Each names its holder's process (pid and start time, so a
    reused pid is not mistaken for the holder); a lock whose holder process is gone is taken over at
    once, and ``notify`` says so (the dead campaign's leftovers are the sweeper's job)."""

    def __init__(self, root: Path | str, clock: Callable[[], float] = time.time,
                 notify: Callable[[str], None] | None = None, pid: int | None = None) -> None:
        self.root = Path(root).resolve()
        self.clock = clock
        self.notify = notify or (lambda msg: print(f"benchctl: {msg}", file=sys.stderr, flush=True))
        self.pid = os.getpid() if pid is None else pid

    def _path(self, key: str) -> Path:
        return self.root / (key.replace(":", "__").replace("/", "_") + ".json")

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else None
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    @staticmethod
    def holder_alive(held: dict[str, Any]) -> bool:
        """False when the lock names a holder process that no longer runs (or whose pid was reused);
        True when it runs, or when the lock names no process (written by an older version: trust it)."""
        pid, started = held.get("pid"), held.get("pid_start_time")
        if not isinstance(pid, int) or not isinstance(started, int):
            return True
        return live_start_time(pid) == started

    def acquire(self, keys: list[str], campaign_id: str, ttl_s: float) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        now = self.clock()
        taken: list[str] = []
        body = {"campaign_id": campaign_id, "acquired_at": now, "expires_at": now + ttl_s, "pid": self.pid,
                "pid_start_time": live_start_time(self.pid)}
        try:
            for key in keys:
                path = self._path(key)
                data = json.dumps({"key": key, **body}).encode()
                try:
                    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    held = self._read(path) or {}
                    holder = held.get("campaign_id", "?")
                    if holder == campaign_id:
                        continue  # ours already (a redelivered Plan)
                    if held and held.get("expires_at", 0) > now:
                        if self.holder_alive(held):
                            raise LockHeld(held_message(key, holder, held["expires_at"], now)) from None
                        self.notify(f"pool {key}: its lock was held by campaign {holder!r}, whose process "
                                    f"{held.get('pid')} is gone; taken over (`benchctl sweep` stops what it left)")
                    atomic_write(path, data)  # expired, dead or unreadable: take it over
                    taken.append(key)
                    continue
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                taken.append(key)
        except BaseException:
            self.release(taken, campaign_id)  # all or nothing
            raise

    def release(self, keys: list[str], campaign_id: str) -> list[str]:
        released = []
        for key in keys:
            path = self._path(key)
            held = self._read(path)
            if held is not None and held.get("campaign_id") == campaign_id:
                path.unlink(missing_ok=True)
                released.append(key)
        return released
