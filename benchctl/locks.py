"""One campaign per pool: a lock per pool, taken by Plan before anything is scaled, released when the
campaign ends (Report, or the abort path). A second campaign on the same pools fails at Plan with a
message naming the holder, and touches nothing.

Keys name what is actually shared: ``managed-nodegroup:<node group>``, ``auto-mode:<pool>``,
``local:<pool>``. Locks expire (``ttl_s``) so a campaign that died without its abort path (power
loss, a deleted state machine) cannot block a pool forever; the sweeper cleans up after it. Taking a
lock again by the same campaign (a redelivered Plan) succeeds.

* ``FileLocks``: the local engine, one JSON file per key under ``<workspace>/locks/`` created with
  ``O_CREAT | O_EXCL`` (atomic); an expired file is replaced.
* ``DynamoLocks``: AWS, one item per key in a DynamoDB table, written with a condition (absent, or
  expired, or already ours); release deletes only our own item.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from benchctl.errors import BenchError
from benchctl.spec import CampaignSpec


class LockHeld(BenchError):
    """Another campaign holds a pool this campaign needs."""


class Locks(Protocol):
    def acquire(self, keys: list[str], campaign_id: str, ttl_s: float) -> None: ...
    def release(self, keys: list[str], campaign_id: str) -> list[str]: ...


def lock_keys(spec: CampaignSpec, pools: set[str] | None = None) -> list[str]:
    """What this campaign will scale (or only ``pools`` of it), named by what is shared in the
    account/cluster."""
    keys = set()
    for pool in spec.pools:
        if pools is not None and pool.name not in pools:
            continue
        shared = pool.nodegroup if pool.provider == "managed-nodegroup" and pool.nodegroup else pool.name
        keys.add(f"{pool.provider}:{shared}")
    return sorted(keys)


def _held_message(key: str, holder: str, expires_at: float, now: float) -> str:
    return (f"pool {key} is in use by campaign {holder!r} (lock expires in {max(0, expires_at - now) / 60:.0f} "
            f"min); wait for it to end, or if it is dead, run `benchctl sweep`")


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
        from benchctl.local.processes import live_start_time  # local engine only (not in the Lambda asset)

        pid, started = held.get("pid"), held.get("pid_start_time")
        if not isinstance(pid, int) or not isinstance(started, int):
            return True
        return live_start_time(pid) == started

    def acquire(self, keys: list[str], campaign_id: str, ttl_s: float) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        now = self.clock()
        taken: list[str] = []
        from benchctl.local.processes import live_start_time

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
                            raise LockHeld(_held_message(key, holder, held["expires_at"], now)) from None
                        self.notify(f"pool {key}: its lock was held by campaign {holder!r}, whose process "
                                    f"{held.get('pid')} is gone; taken over (`benchctl sweep` stops what it left)")
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # expired, dead or unreadable: take it over
                    tmp.write_bytes(data)
                    tmp.replace(path)
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


class DynamoLocks:
    def __init__(self, table: str, *, session: Any = None, clock: Callable[[], float] = time.time) -> None:
        self.table = table
        self.session = session
        self.clock = clock

    def _ddb(self) -> Any:
        import boto3

        return (self.session or boto3.session.Session()).client("dynamodb")

    def acquire(self, keys: list[str], campaign_id: str, ttl_s: float) -> None:
        from botocore.exceptions import ClientError

        ddb = self._ddb()
        now = self.clock()
        taken: list[str] = []
        try:
            for key in keys:
                try:
                    ddb.put_item(
                        TableName=self.table,
                        Item={"pool": {"S": key}, "campaign_id": {"S": campaign_id},
                              "acquired_at": {"N": str(int(now))}, "expires_at": {"N": str(int(now + ttl_s))}},
                        ConditionExpression="attribute_not_exists(#pool) OR expires_at < :now OR campaign_id = :me",
                        ExpressionAttributeNames={"#pool": "pool"},  # POOL is a DynamoDB reserved word
                        ExpressionAttributeValues={":now": {"N": str(int(now))}, ":me": {"S": campaign_id}},
                    )
                    taken.append(key)
                except ClientError as err:
                    if err.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                        raise
                    item = ddb.get_item(TableName=self.table, Key={"pool": {"S": key}}).get("Item") or {}
                    raise LockHeld(_held_message(key, item.get("campaign_id", {}).get("S", "?"),
                                                 float(item.get("expires_at", {}).get("N", now)), now)) from None
        except BaseException:
            self.release(taken, campaign_id)
            raise

    def release(self, keys: list[str], campaign_id: str) -> list[str]:
        from botocore.exceptions import ClientError

        ddb = self._ddb()
        released = []
        for key in keys:
            try:
                ddb.delete_item(TableName=self.table, Key={"pool": {"S": key}},
                                ConditionExpression="campaign_id = :me",
                                ExpressionAttributeValues={":me": {"S": campaign_id}})
                released.append(key)
            except ClientError as err:
                if err.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise
        return released
