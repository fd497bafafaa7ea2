"""Every prefix-cache step starts from a known cache state, on real Dynamo mockers and real AIPerf: the
prefix-cache workload run twice in a row on the same workers (two repeats of one seed) finds the second run's
0 % step as cold as the first's, not warm from the first run's prompts."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchctl.local.query import QueryEngine
from tests.e2e.conftest import ROOT, leftovers, read_table, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

CID = "cache-e2e"


def _twice(tmp_path: Path) -> Path:
    """One aggregated experiment; the prefix-cache workload only, at ratios 0 and 1, twice (``seed_policy:
    fixed``: without a per-step namespace the second run would send the first run's datasets again)."""
    def mutate(d):
        d["experiments"] = d["experiments"][:1]
        prefix = next(w for w in d["workloads"] if w["kind"] == "prefix_cache")
        prefix.update(ratios=[0, 1.0], isl=256, osl=8, concurrency=4, requests=16, block_size=64,
                      duplication="tokens")  # ratio 1: every request one prompt
        d["workloads"] = [prefix]
        d.update(repeats=2, seed_policy="fixed", warmup={"request_count": 2},
                 quality={"questions": 1}, smoke={"requests": 1, "max_tokens": 8})  # not what is tested here

    return write_spec(tmp_path, "cache-twice", mutate)


def test_the_second_runs_zero_ratio_step_starts_cold_not_warm(tmp_path: Path) -> None:
    out = tmp_path / "out"
    bin_ = Path(sys.executable).parent / "benchctl"
    mmap_before = set(Path(tempfile.gettempdir()).glob("benchctl-aiperf-mmap-*"))
    res = subprocess.run([str(bin_), "run", str(_twice(tmp_path)), "--out", str(out), "--campaign-id", CID],
                         capture_output=True, text=True, cwd=ROOT, timeout=540)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not leftovers(out / "campaigns" / CID)
    # nor any file: the dataset directory the load runner gave AIPerf went with it
    assert set(Path(tempfile.gettempdir()).glob("benchctl-aiperf-mmap-*")) <= mmap_before
    steps = {s["step_id"]: s for s in read_table(out / "lake", "steps")}
    assert set(steps) == {"prefix-cache-p0-r0", "prefix-cache-p100-r0", "prefix-cache-p0-r1", "prefix-cache-p100-r1"}
    for s in steps.values():  # every step records its cache state, and why it is namespaced
        assert s["cache_state"].startswith("namespaced: hash ids ") and "no cache reset" in s["cache_state"], s
    # one repeat seed (seed_policy fixed), yet each step's AIPerf seed is its own (salted with its index) and the
    # second run's datasets are not the first run's
    from benchctl.planning.cache_state import step_seed

    r0, r1 = steps["prefix-cache-p0-r0"], steps["prefix-cache-p0-r1"]
    assert r0["random_seed"] == step_seed("prefix_cache", 42, r0["step_index"]) != r1["random_seed"]
    assert r1["random_seed"] == step_seed("prefix_cache", 42, r1["step_index"])
    assert r0["dataset_sha256"] != r1["dataset_sha256"]
    # 16 requests of 4 whole blocks, one prompt (ratio 1): all but the first request's 4 blocks
    assert steps["prefix-cache-p100-r0"]["achievable_hit_rate"] == 15 / 16
    assert steps["prefix-cache-p0-r1"]["achievable_hit_rate"] == 0.0

    cols, rows = QueryEngine(out / "lake").run(
        "SELECT step_id, client_cache_hit_rate, first_requests, first_requests_hit_rate, cache_hit_rate "
        f"FROM v_step_cache WHERE campaign_id = '{CID}'")
    got = {r[0]: dict(zip(cols, r, strict=True)) for r in rows}
    warm = got["prefix-cache-p100-r0"]["client_cache_hit_rate"]  # the workers hold the step's one prompt
    cold, again = got["prefix-cache-p0-r0"], got["prefix-cache-p0-r1"]
    assert warm is not None and warm > 0.5, got
    assert again["first_requests"] == 4
    for figure in ("first_requests_hit_rate", "client_cache_hit_rate", "cache_hit_rate"):
        assert cold[figure] is not None and again[figure] is not None, (figure, got)
        # the second run's 0 % step at the cold level of the first run's, far below the warm level
        assert again[figure] <= cold[figure] + 0.05 and again[figure] < warm / 4, (figure, got)
