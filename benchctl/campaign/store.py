"""The run store's port: small JSON objects by key, a directory locally (``benchctl.local.runstore``), an S3
prefix on AWS (``benchctl.aws.s3``). ``benchctl.campaign.runstate`` is its only reader and writer of keys."""

from __future__ import annotations

from typing import Any, Protocol

JSON = dict[str, Any]


class RunStore(Protocol):
    """Small JSON objects by relative key (a directory locally, an S3 prefix on AWS); only
    ``benchctl.campaign.runstate`` names keys."""

    uri: str

    def read_json(self, key: str) -> JSON | None: ...
    def read_bytes(self, key: str) -> bytes | None: ...
    def write_json(self, key: str, obj: JSON) -> None: ...
    def create_json(self, key: str, obj: JSON) -> JSON | None:
        """Write ``obj`` at ``key`` only if nothing is there, atomically (no two callers both create it):
        None when written, else the object already there (which is left as it was)."""
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def keys(self, prefix: str) -> list[str]: ...
