"""Every load argv a campaign renders on the AWS path, for every example spec, parsed by AIPerf 0.13.0's own
CLI and resolved into its benchmark plan (nothing runs). The unit tier parses one argv per experiment and
workload and holds the others to the same options; this tier parses them all (the first takes about 3 s, each other well under one)."""

from __future__ import annotations

import pytest

from tests.fakes.eks_world import CID, World
from tests.integration.test_manifests_upstream import SPECS, aiperf_parse, load_jobs


@pytest.mark.parametrize("name", [n for n in sorted(SPECS) if "[auto-mode]" not in n])  # same argv either way
def test_every_rendered_load_argv_parses_with_aiperfs_own_cli(aws_worlds: dict[str, World], name: str) -> None:
    world = aws_worlds[name]
    jobs = load_jobs(world)
    assert jobs
    for (exp, step_id), argv in sorted(jobs.items()):
        local = world.lake.local_raw(CID, exp, step_id) / "inputs"
        # the dataset the Job fetched to /artifacts/<step>/inputs/ is the one kept raw: point AIPerf at it
        bp = aiperf_parse([a.replace(f"/artifacts/{step_id}/inputs/", f"{local}/") for a in argv])
        assert bp is not None, (exp, step_id)
