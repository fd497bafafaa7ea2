"""One campaign per pool: file locks (local) and DynamoDB conditional writes (AWS, under moto)."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
import yaml
from moto import mock_aws

from benchctl.aws.locks import DynamoLocks
from benchctl.campaign.locks import LockHeld, lock_keys
from benchctl.local.locks import FileLocks
from benchctl.spec.model import parse_spec

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def dynamo(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    with mock_aws():
        boto3.client("dynamodb").create_table(
            TableName="locks", KeySchema=[{"AttributeName": "pool", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pool", "AttributeType": "S"}], BillingMode="PAY_PER_REQUEST")
        yield


def _locks(kind: str, tmp_path: Path, clock: Clock):
    return FileLocks(tmp_path / "locks", clock=clock) if kind == "file" else DynamoLocks("locks", clock=clock)


@pytest.mark.parametrize("kind", ["file", "dynamo"])
def test_a_second_campaign_is_refused_naming_the_holder(kind, tmp_path, dynamo):
    clock = Clock()
    locks = _locks(kind, tmp_path, clock)
    locks.acquire(["managed-nodegroup:gpu-p4d", "auto-mode:l40s"], "camp-a", ttl_s=3600)
    locks.acquire(["managed-nodegroup:gpu-p4d"], "camp-a", ttl_s=3600)  # redelivered Plan: ours already
    with pytest.raises(LockHeld, match=r"pool managed-nodegroup:gpu-p4d is in use by campaign 'camp-a'"):
        locks.acquire(["auto-mode:other", "managed-nodegroup:gpu-p4d"], "camp-b", ttl_s=3600)
    # all or nothing: camp-b did not keep the free pool it took before the refusal
    assert locks.release(["auto-mode:other"], "camp-b") == []
    assert locks.release(["managed-nodegroup:gpu-p4d", "auto-mode:l40s"], "camp-b") == []  # not its locks
    assert locks.release(["managed-nodegroup:gpu-p4d", "auto-mode:l40s"], "camp-a") == [
        "managed-nodegroup:gpu-p4d", "auto-mode:l40s"]
    locks.acquire(["managed-nodegroup:gpu-p4d"], "camp-b", ttl_s=3600)  # free again


@pytest.mark.parametrize("kind", ["file", "dynamo"])
def test_an_expired_lock_of_a_dead_campaign_can_be_taken(kind, tmp_path, dynamo):
    clock = Clock()
    locks = _locks(kind, tmp_path, clock)
    locks.acquire(["local:gpu"], "dead", ttl_s=60)
    clock.t += 61
    locks.acquire(["local:gpu"], "alive", ttl_s=60)
    assert locks.release(["local:gpu"], "dead") == []
    assert locks.release(["local:gpu"], "alive") == ["local:gpu"]


def test_keys_name_what_is_shared():
    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    assert lock_keys(parse_spec(data)) == ["managed-nodegroup:gpu-p4d"]
    smoke = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    assert lock_keys(parse_spec(smoke)) == ["local:gpu-a100"]


def test_a_second_plan_on_the_same_pools_fails_and_touches_nothing(tmp_path):
    from benchctl import campaign
    from benchctl.campaign import Task
    from benchctl.campaign.context import Ctx
    from benchctl.campaign.ports import Providers
    from benchctl.local.lake import LocalLake
    from benchctl.local.pool import LocalPool
    from tests.fakes.ports import providers_for_test

    spec = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    pool = LocalPool()
    locks = FileLocks(tmp_path / "locks")
    plan = Task(state="Plan", input={"spec_uri": "file:///spec.yaml"})

    def providers(cid: str) -> tuple[Providers, Ctx]:
        p = providers_for_test(tmp_path / cid, LocalLake(tmp_path / "lake"), pools=pool, locks=locks,
                               read_uri=lambda uri: yaml.safe_dump(spec).encode())
        return p, Ctx(cid, str(tmp_path / cid), str(tmp_path / "lake"), 1, None)

    a, actx = providers("camp-a")
    campaign.plan(a, actx, plan)
    b, bctx = providers("camp-b")
    with pytest.raises(LockHeld, match="in use by campaign 'camp-a'"):
        campaign.plan(b, bctx, plan)
    assert not b.state.has_plan() and pool.current("gpu-a100")["desired"] == 0
    campaign.plan_failed(b, bctx, Task(error={"Error": "LockHeld", "Cause": "x"}))
    # b's failure released nothing of a's: a third campaign is still refused until a reports
    c, cctx = providers("camp-c")
    with pytest.raises(LockHeld):
        campaign.plan(c, cctx, plan)
    campaign.report(a, actx, Task(state="Report"))
    campaign.plan(c, cctx, plan)


def test_a_lock_whose_holder_process_is_gone_is_taken_over_at_once(tmp_path):
    """A local campaign that died (its runner process is gone) does not block the pool for hours."""
    import subprocess
    import sys

    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    FileLocks(tmp_path / "locks", pid=runner.pid).acquire(["local:gpu"], "died", ttl_s=3600)
    runner.kill()
    runner.wait()  # the holder's process ended (and was reaped): the lock names a process that is gone
    said: list[str] = []
    later = FileLocks(tmp_path / "locks", notify=said.append)
    later.acquire(["local:gpu"], "next", ttl_s=3600)
    assert len(said) == 1 and "'died'" in said[0] and "taken over" in said[0] and "benchctl sweep" in said[0]
    assert later.release(["local:gpu"], "died") == []  # the lock is the new holder's now
    assert later.release(["local:gpu"], "next") == ["local:gpu"]


def test_a_lock_whose_holder_runs_is_not_taken(tmp_path):
    import os

    FileLocks(tmp_path / "locks", pid=os.getppid()).acquire(["local:gpu"], "alive", ttl_s=3600)
    with pytest.raises(LockHeld, match="in use by campaign 'alive'"):
        FileLocks(tmp_path / "locks", notify=pytest.fail).acquire(["local:gpu"], "next", ttl_s=3600)


def test_local_stores_work_from_a_relative_root(tmp_path, monkeypatch):
    """The README's commands use relative paths (`--out runs`): every local store must work with them."""
    from benchctl.local.lake import LocalLake
    from benchctl.local.runstore import LocalRunStore

    monkeypatch.chdir(tmp_path)
    store = LocalRunStore(Path("runs/campaigns/c1"))
    store.write_json("loads/agg/warmup.json", {"a": 1})
    store.write_json("loads/agg/s1.json", {"b": 2})
    assert store.keys("loads/agg") == ["loads/agg/s1.json", "loads/agg/warmup.json"]
    assert store.keys("") == ["loads/agg/s1.json", "loads/agg/warmup.json"]
    assert store.read_json("loads/agg/s1.json") == {"b": 2} and store.exists("loads/agg/warmup.json")
    assert Path(store.uri).is_absolute() and Path(store.uri) == tmp_path.resolve() / "runs/campaigns/c1"
    with pytest.raises(ValueError, match="escapes"):
        store.read_json("../c2/plan.json")
    lake = LocalLake(Path("runs/lake"))
    raw = lake.raw_dir("c1", "agg", "s1")
    assert raw.is_absolute() and raw.is_dir()
    locks = FileLocks(Path("runs/locks"))
    locks.acquire(["local:gpu"], "c1", ttl_s=60)
    assert (tmp_path / "runs" / "locks" / "local__gpu.json").exists()
    monkeypatch.chdir(tmp_path / "runs")  # the working directory moves on: nothing points elsewhere
    assert store.keys("loads/agg") == ["loads/agg/s1.json", "loads/agg/warmup.json"]
    assert locks.release(["local:gpu"], "c1") == ["local:gpu"]
