"""The unit tier runs no real engine (README: integration runs Dynamo, AIPerf and aiconfigurator): where a
command reaches for an experiment's twin (``benchctl plan`` times request-count steps on it), the twin's
curves come from a small synthetic model instead of aiconfigurator. ``tests/integration/test_twin_aiconfigurator.py``
holds the real one. Nor does it wait on the disk: ``os.fsync`` checks its descriptor and returns."""

from __future__ import annotations

import os

import pytest

from benchctl import twin


def synthetic_curves(key: twin.TwinKey) -> twin.Curves:
    """Prefill 10 ms + 0.02 ms per token; a decode iteration 4 ms + 0.3 ms per request; 60,000 KV tokens."""
    return twin.Curves({i: 10.0 + 0.02 * i for i in twin.PREFILL_ISL},
                       {(b, c): 4.0 + 0.3 * b for b in twin.AIC_BATCH for c in twin.AIC_CTX}, 60_000.0,
                       "synthetic (unit tier)")


@pytest.fixture(autouse=True)
def _no_aiconfigurator_in_the_unit_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(twin, "aic_curves", synthetic_curves)


@pytest.fixture(autouse=True)
def _no_disk_flush_in_the_unit_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.fsync`` (the lake's and the report's atomic writes flush each file before its rename) checks its
    descriptor and returns without waiting for the disk: what a flush guards (a power cut) is no unit test's
    subject, and thousands of them waited on the disk in every run. A test of what happens when it fails sets
    its own (tests/unit/test_bad_input.py)."""
    monkeypatch.setattr(os, "fsync", os.fstat)  # an invalid descriptor still raises OSError (EBADF)
