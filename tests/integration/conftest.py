"""The integration tier's shared fixture: every example spec run once per session as a whole campaign
through the AWS code path against a strict fake API server (see tests/fakes/eks_world.py)."""

from __future__ import annotations

import pytest

from tests.aws_checks import run_aws_worlds
from tests.fakes.eks_world import World


@pytest.fixture(scope="session")
def aws_worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, World]:
    return run_aws_worlds(tmp_path_factory)
