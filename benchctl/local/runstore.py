"""``RunStore`` on this machine: a directory of JSON files (``<workspace>/campaigns/<campaign id>/``).

Keys are relative paths (``benchctl.campaign.runstate`` names them); every write is atomic (``benchctl.atomic``).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from benchctl.atomic import atomic_write


class LocalRunStore:
    """A directory. A relative root is made absolute once, here: every key and listing is then
    relative to the same absolute (and symlink-resolved) root, whatever the working directory."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()
        self.uri = str(self.root)

    def _path(self, key: str) -> Path:
        p = (self.root / key).resolve()
        if self.root not in p.parents:
            raise ValueError(f"run store key {key!r} escapes {self.root}")
        return p

    def read_json(self, key: str) -> dict[str, Any] | None:
        p = self._path(key)
        if not p.exists():
            return None
        data = json.loads(p.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {"value": data}

    def read_bytes(self, key: str) -> bytes | None:
        """The object as it was written (None: not there)."""
        p = self._path(key)
        return p.read_bytes() if p.exists() else None

    def write_json(self, key: str, obj: dict[str, Any]) -> None:
        atomic_write(self._path(key), json.dumps(obj, indent=2, sort_keys=True, default=str))

    def create_json(self, key: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Create-only: the content goes to a temporary file that is then hard-linked to the key (``link``
        fails when the name exists, atomically: no two creators both win)."""
        path = self._path(key)
        tmp = atomic_write(path.parent / f".{path.name}.{uuid.uuid4().hex}.new",
                           json.dumps(obj, indent=2, sort_keys=True, default=str))
        try:
            os.link(tmp, path)
        except FileExistsError:
            return self.read_json(key) or {}
        finally:
            tmp.unlink(missing_ok=True)
        return None

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*.json") if p.is_file())
