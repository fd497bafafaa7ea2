"""The edge of aiconfigurator's Python API that the predictions and the twin share: its calls silenced, and the
database version it would resolve for itself, resolved once per system and backend (``cli_estimate`` re-reads
every database's YAML metadata to find it: about 1 s a call, most of a seed plan's prediction time)."""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence aiconfigurator's INFO logging and deprecation notices during a call."""
    loggers = [logging.getLogger(n) for n in ("aiconfigurator", "aiconfigurator_core")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@functools.cache
def latest_version(system: str, backend: str) -> str | None:
    """The newest database version aiconfigurator holds for ``system`` and ``backend``: what ``cli_estimate``
    uses when it is given none."""
    with quiet():
        from aiconfigurator.sdk.perf_database import get_latest_database_version

        version = get_latest_database_version(system=system, backend=backend)
    return str(version) if version is not None else None
