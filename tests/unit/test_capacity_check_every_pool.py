"""CheckCapacity asks every pool of the experiment at every poll: a pool whose nodes cannot be had ends the wait at
that poll even while another pool is still booting (the hetero example: its g6e pool comes up slowly while its p4d
pool reports InsufficientInstanceCapacity)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from benchctl.campaign import Task
from benchctl.campaign.context import Ctx
from benchctl.campaign.pools import check_capacity
from benchctl.campaign.records import PoolsRecord
from benchctl.errors import CapacityUnavailable


class Pools:
    """A pool port whose first pool is still booting and whose second cannot get its nodes."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def ready(self, record: dict[str, Any]) -> bool:
        self.asked.append(record["pool"])
        if record["pool"] == "p4d":
            raise CapacityUnavailable("p4d", instance_type="p4d.24xlarge", zone="us-east-1a",
                                      code="InsufficientInstanceCapacity", launched=1, requested=2)
        return False


def test_check_capacity_asks_every_pool_so_a_later_pool_out_of_capacity_ends_the_wait_at_once() -> None:
    rec = PoolsRecord(records=[{"pool": "g6e", "requested": 1}, {"pool": "p4d", "requested": 2}], requested_at=0.0)
    pools = Pools()
    state = SimpleNamespace(pools=lambda exp: rec, spec=SimpleNamespace)
    p: Any = SimpleNamespace(state=state, pools=pools, clock=lambda: 1.0)
    with pytest.raises(CapacityUnavailable, match=r"1 of 2 p4d\.24xlarge"):
        check_capacity(p, Ctx("c", "/tmp/run", "/tmp/lake", 30, None), Task("hetero", state="CheckCapacity"))
    assert pools.asked == ["g6e", "p4d"]
