"""Atomic file writes: a reader sees the old file or the new one, never a part of one.

The content goes to a temporary file in the same directory (``.<name>.<random>.tmp``), optionally
flushed to disk, which then replaces the target (``os.replace``: atomic within one file system). On any
failure, Ctrl-C included, the temporary file is removed and the target is left as it was. The one
helper behind the run store, the lake, the report, the lock files and the local deployment states.
May import only the standard library.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path | str, content: str | bytes | Callable[[Path], object], *, fsync: bool = False) -> Path:
    """Write ``content`` (text as UTF-8, bytes, or a callable that writes the file it is given) to ``path``
    atomically; the parent directory is created. ``fsync``: flush the file to disk before the rename (the
    lake's parquet files and the report, which must survive a power loss once written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        if callable(content):
            content(tmp)
        else:
            tmp.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        if fsync:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return path
