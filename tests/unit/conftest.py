"""The unit tier runs no real engine (docs/explanation/testing.md: integration runs Dynamo, AIPerf and aiconfigurator): where a
command reaches for an experiment's twin (``benchctl plan`` times request-count steps on it), the twin's
curves come from a small synthetic model instead of aiconfigurator. ``tests/integration/test_twin_aiconfigurator.py``
holds the real one. Nor does it wait on the disk: ``os.fsync`` checks its descriptor and returns."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from benchctl.forecast import twin


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


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto (every service, us-east-1) and a session on it; a module that needs another world defines its own."""
    for k, v in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        yield boto3.session.Session(region_name="us-east-1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``same_run(key)`` assert on one run a module fixture makes once per process: each is moved
    right after the first test of its key. xdist's load scheduling hands a worker consecutive tests, so they
    nearly always share that worker and its run. The order is the same in every worker (xdist requires it);
    nothing is added or removed."""
    first: dict[str, int] = {}
    followers: dict[str, list[pytest.Item]] = {}
    rest: list[pytest.Item] = []
    for item in items:
        mark = item.get_closest_marker("same_run")
        key = str(mark.args[0]) if mark else None
        if key is not None and key in first:
            followers[key].append(item)
            continue
        if key is not None:
            first[key], followers[key] = len(rest), []
        rest.append(item)
    if not followers or not any(followers.values()):
        return
    ordered: list[pytest.Item] = []
    keys_at = {i: k for k, i in first.items()}
    for i, item in enumerate(rest):
        ordered.append(item)
        if i in keys_at:
            ordered += followers[keys_at[i]]
    assert len(ordered) == len(items)
    items[:] = ordered
