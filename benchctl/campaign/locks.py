"""One campaign per pool: a lock per pool, taken by Plan before anything is scaled, released when the
campaign ends (Report, or the abort path). A second campaign on the same pools fails at Plan with a
message naming the holder, and touches nothing.

Keys name what is actually shared: ``managed-nodegroup:<node group>``, ``auto-mode:<pool>``,
``local:<pool>``. Locks expire (``ttl_s``) so a campaign that died without its abort path (power
loss, a deleted state machine) cannot block a pool forever; the sweeper cleans up after it. Taking a
lock again by the same campaign (a redelivered Plan) succeeds.

The ``Locks`` port (``benchctl.campaign.ports``) has two adapters: ``benchctl.local.locks.FileLocks`` (one JSON
file per key under ``<workspace>/locks/``, created with ``O_CREAT | O_EXCL``) and
``benchctl.aws.locks.DynamoLocks`` (one item per key in a DynamoDB table, written with a condition).
May import only the standard library and the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchctl.errors import BenchError

if TYPE_CHECKING:
    from benchctl.spec.model import CampaignSpec


class LockHeld(BenchError):
    """Another campaign holds a pool this campaign needs."""


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


def held_message(key: str, holder: str, expires_at: float, now: float) -> str:
    return (f"pool {key} is in use by campaign {holder!r} (lock expires in {max(0, expires_at - now) / 60:.0f} "
            f"min); wait for it to end, or if it is dead, run `benchctl sweep`")
