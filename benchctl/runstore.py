"""Run store: the small JSON state a campaign keeps between handler invocations.

Keys are relative paths (``plan.json``, ``deployments/agg.json``). Locally a directory; on AWS an
S3 prefix (``benchctl.aws``). State machine payloads stay small: ids, never results.
May import only the standard library.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol


class RunStore(Protocol):
    uri: str

    def read_json(self, key: str) -> dict[str, Any] | None: ...
    def write_json(self, key: str, obj: dict[str, Any]) -> None: ...
    def exists(self, key: str) -> bool: ...
    def delete(self, key: str) -> None: ...
    def keys(self, prefix: str) -> list[str]: ...


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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

    def write_json(self, key: str, obj: dict[str, Any]) -> None:
        atomic_write_text(self._path(key), json.dumps(obj, indent=2, sort_keys=True, default=str))

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return []
        return sorted(str(p.relative_to(self.root)) for p in base.rglob("*.json") if p.is_file())
