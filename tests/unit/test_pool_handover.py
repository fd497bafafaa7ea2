"""Keeping a pool warm between consecutive experiments that use it: no restore and re-scale in between,
the original size restored by the last user, and every failure path still restoring it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from benchctl import campaign
from benchctl.campaign import Task
from benchctl.campaign.context import Ctx
from benchctl.local.lake import LocalLake
from benchctl.local.pool import LocalPool
from benchctl.spec.model import parse_spec
from tests.fakes.ports import providers_for_test

ROOT = Path(__file__).resolve().parents[2]


class Serving:
    def prepare(self, request):
        pass

    def teardown(self, state):
        return {"removed": True}


class CountingPool(LocalPool):
    def __init__(self, sizes):
        super().__init__(sizes)
        self.restores: list[str] = []

    def restore(self, record):
        self.restores.append(record["pool"])
        return super().restore(record)


@pytest.fixture
def world(tmp_path):
    spec = parse_spec(yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text()))
    pool = CountingPool({"gpu-a100": 3})  # somebody's 3 nodes were there before us
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, pools=pool, serving=Serving())
    return p, Ctx("c1", str(tmp_path / "run"), str(tmp_path / "lake"), 1, None), pool, p.state.plan()


def test_the_plan_hands_shared_pools_to_the_next_experiment(world):
    _, _, _, plan = world
    assert plan.experiments[0].handover == {"gpu-a100": 1}
    assert plan.experiments[1].handover == {}  # the last user restores


def test_warm_pool_is_restored_once_by_its_last_user(world):
    p, ctx, pool, _ = world
    campaign.scale_pools(p, ctx, Task("agg"))
    campaign.teardown_experiment(p, ctx, Task("agg"), handover=True)
    assert pool.restores == [] and pool.current("gpu-a100")["desired"] == 3  # kept as it was
    out = campaign.scale_pools(p, ctx, Task("disagg"))
    (rec,) = out["pools"]
    assert rec["previous"] == {"desired": 3, "min": 0, "max": 3} and rec["handed_from"] == "agg"
    campaign.teardown_experiment(p, ctx, Task("disagg"), handover=True)  # the last one: restores
    assert pool.restores == ["gpu-a100"] and pool.current("gpu-a100")["desired"] == 3
    events = [(r["experiment"], r["event"]) for r in p.lake.read_table("timeline", "c1")]
    assert ("agg", "pool_handed_over") in events and ("disagg", "pool_restored") in events


def test_a_failure_after_the_hand_over_still_restores_the_original_size(world):
    p, ctx, pool, _ = world
    campaign.scale_pools(p, ctx, Task("agg"))
    pool._sizes["gpu-a100"] = 5  # (the pool grew while warm)
    campaign.teardown_experiment(p, ctx, Task("agg"), handover=True)
    campaign.abort_campaign(p, ctx, Task(error={"Error": "ServingFailed", "Cause": "disagg never became ready"}))
    assert pool.current("gpu-a100")["desired"] == 3  # the size recorded before the campaign touched it
    campaign.abort_campaign(p, ctx, Task(error={"Error": "ServingFailed", "Cause": "again"}))
    assert pool.restores == ["gpu-a100"]  # once: a repeated abort changes nothing


def test_the_failure_path_never_hands_over(world):
    p, ctx, pool, _ = world
    campaign.scale_pools(p, ctx, Task("agg"))
    campaign.experiment_failed(p, ctx, Task("agg", error={"Error": "LoadFailed", "Cause": "x"}))
    assert pool.restores == ["gpu-a100"]
