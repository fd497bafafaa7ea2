"""The repository's YAML files (examples, stacks/kubernetes) as tests read them, parsed once per process: PyYAML's
pure-Python loader takes tens of ms a file and the same few files are read hundreds of times in the unit tier.
Each call returns its own deep copy (a test may change what it is given); the files do not change during a run."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml


@functools.cache
def _parsed(path: Path) -> tuple[Any, ...]:
    return tuple(yaml.safe_load_all(path.read_text(encoding="utf-8")))


def load(path: Path) -> Any:
    """``yaml.safe_load`` of the file (its one document)."""
    docs = _parsed(Path(path).resolve())
    if len(docs) != 1:
        raise ValueError(f"{path}: {len(docs)} YAML documents, expected one")
    return copy.deepcopy(docs[0])


def load_all(path: Path) -> list[Any]:
    """``list(yaml.safe_load_all(...))`` of the file."""
    return copy.deepcopy(list(_parsed(Path(path).resolve())))
