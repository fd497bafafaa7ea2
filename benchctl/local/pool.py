"""Local compute pool: starts nothing, records the same scale/ready/restore decisions as EKS would.

Node-hours derived from its timeline are simulated and labelled so. Standard library only.
"""

from __future__ import annotations

from typing import Any


class LocalPool:
    """A pool of simulated nodes. Its size lives in the run store so restore is exact."""

    provider = "local"

    def __init__(self, sizes: dict[str, int] | None = None) -> None:
        self._sizes = dict(sizes or {})

    def current(self, pool: str) -> dict[str, Any]:
        return {"desired": self._sizes.get(pool, 0), "min": 0, "max": self._sizes.get(pool, 0)}

    def scale(self, pool: str, nodes: int, owner: str, *, before_change: Any = None) -> dict[str, Any]:
        previous = self.current(pool)
        record = {"pool": pool, "owner": owner, "previous": previous, "requested": nodes, "simulated": True}
        if before_change is not None:  # the record is kept before anything changes, as on EKS
            before_change(record)
        self._sizes[pool] = max(nodes, previous["desired"])
        return record

    def ready(self, record: dict[str, Any]) -> bool:
        return self._sizes.get(record["pool"], 0) >= record["requested"]

    def launches(self, record: dict[str, Any]) -> None:
        """Simulated nodes are always had."""

    def restore(self, record: dict[str, Any]) -> dict[str, Any]:
        self._sizes[record["pool"]] = record["previous"]["desired"]
        return self.current(record["pool"])

    def observe(self, record: dict[str, Any]) -> dict[str, Any]:
        """Read the pool back (the teardown receipt): its size now against the recorded one. Its nodes are
        simulated: nothing is billed, and the simulated billing ends when the size is back."""
        now = self.current(record["pool"])
        ok = now["desired"] == record["previous"]["desired"]
        return {"kind": "pool (simulated)", "name": record["pool"], "state": "restored" if ok else "still there",
                "now": now, "nodes": now["desired"], "billing": "ended" if ok else "still billing (simulated)",
                "why": "" if ok else f"size {now['desired']} is not the recorded {record['previous']['desired']}"}
