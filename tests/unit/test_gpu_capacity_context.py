"""``benchctl:gpu_capacity`` (stacks/config.py) checked like every other CDK context key: what is valid is read into
:class:`stacks.config.GpuCapacity`, anything else stops synth naming the key, the group, what is wrong and what is
valid. No CDK here: ``load`` takes the context as a mapping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stacks.config import ConfigError, load
from stacks.gpu_capacity import RESERVED_NODE_CLASS, GpuCapacity

ROOT = Path(__file__).resolve().parents[2]
BASE = json.loads((ROOT / "cdk.json").read_text())["context"]
NEW = {**BASE, "benchctl:platform": "new"}
GIVEN = {"benchctl:vpc_id": "vpc-0123456789abcdef0",
         "benchctl:subnet_ids": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]}
CR = "cr-0123456789abcdef0"  # EC2 API reference, CapacityReservation: cr- and 17 hex digits


def _load(context: dict[str, Any]) -> Any:
    return load(None, context)  # type: ignore[arg-type]


def test_gpu_capacity_unset_keeps_the_first_subnet_and_on_demand() -> None:
    assert _load(NEW).gpu_capacity == {}
    assert _load({**NEW, "benchctl:gpu_capacity": {}}).gpu_capacity == {}


def test_a_reservation_a_capacity_block_and_a_zone_are_read_per_node_group() -> None:
    raw = {"gpu-p4d": {"zone": "us-east-1b", "purchase": "capacity-block", "reservation_id": CR},
           "gpu-g6e": {"zone": "us-east-1a", "purchase": "reservation", "reservation_id": CR.replace("0", "a")}}
    got = _load({**NEW, "benchctl:gpu_capacity": raw}).gpu_capacity
    assert got == {name: GpuCapacity(**entry) for name, entry in raw.items()}


def test_gpu_capacity_given_with_dash_c_is_json_text() -> None:
    text = json.dumps({"gpu-p4d": {"zone": "us-west-2c"}})
    assert _load({**NEW, "benchctl:gpu_capacity": text}).gpu_capacity == {"gpu-p4d": GpuCapacity(zone="us-west-2c")}


def test_a_subnet_id_of_the_given_vpc_places_a_group() -> None:
    raw = {"gpu-p4d": {"subnet_id": GIVEN["benchctl:subnet_ids"][1], "purchase": "reservation", "reservation_id": CR}}
    got = _load({**NEW, **GIVEN, "benchctl:gpu_capacity": raw}).gpu_capacity
    assert got["gpu-p4d"].subnet_id == GIVEN["benchctl:subnet_ids"][1] and got["gpu-p4d"].zone is None


def test_on_auto_mode_the_reservation_is_keyed_by_the_reserved_node_class() -> None:
    ctx = {**NEW, "benchctl:platform_capacity": "auto-mode",
           "benchctl:gpu_capacity": {RESERVED_NODE_CLASS: {"purchase": "reservation", "reservation_id": CR}}}
    assert _load(ctx).gpu_capacity[RESERVED_NODE_CLASS].reservation_id == CR


@pytest.mark.parametrize(("extra", "raw", "expected"), [
    ({}, {"gpu-h100": {"zone": "us-east-1a"}}, "'benchctl:gpu_capacity.gpu-h100': 'gpu-h100' is not one of "
     "['gpu-p4d', 'gpu-g6e']"),
    ({"benchctl:platform_capacity": "auto-mode"}, {"gpu-p4d": {"zone": "us-east-1a"}}, "is not one of "
     f"['{RESERVED_NODE_CLASS}'] (platform_capacity=auto-mode)"),
    ({}, {"gpu-p4d": {"zone": "us-east-1a", "subnet_id": "subnet-0123456789abcdef0"}}, "give zone or subnet_id, not both"),
    ({}, {"gpu-p4d": {"purchase": "reservation"}}, "'benchctl:gpu_capacity.gpu-p4d.reservation_id': None is not a "
     "Capacity Reservation id (cr- and 17 hex digits"),
    ({}, {"gpu-p4d": {"purchase": "capacity-block", "reservation_id": "cr-123"}}, "'cr-123' is not a Capacity "
     "Reservation id"),
    ({}, {"gpu-p4d": {"reservation_id": CR}}, "given with purchase on-demand"),
    ({}, {"gpu-p4d": {"purchase": "spot"}}, "'benchctl:gpu_capacity.gpu-p4d.purchase': 'spot' is not valid; valid: "
     "on-demand, reservation, capacity-block"),
    ({}, {"gpu-p4d": {"zone": "east"}}, "'benchctl:gpu_capacity.gpu-p4d.zone': 'east' is not an Availability Zone"),
    ({}, {"gpu-p4d": {"az": "us-east-1a"}}, "unknown field(s) ['az']"),
    ({}, {"gpu-p4d": "us-east-1a"}, "'benchctl:gpu_capacity.gpu-p4d': 'us-east-1a' is not an object"),
    ({}, {"gpu-p4d": {"subnet_id": "subnet-0123456789abcdef0"}}, "is not one of 'benchctl:subnet_ids' []"),
    (GIVEN, {"gpu-p4d": {"zone": "us-east-1a"}}, "with 'benchctl:vpc_id' the stack knows its subnets by id, not by "
     "zone: give subnet_id"),
    ({"benchctl:platform": "none"}, {"gpu-p4d": {"zone": "us-east-1a"}}, "is for platform=new only (platform=none"),
    ({"benchctl:platform": "existing", **GIVEN, "benchctl:cluster_security_group_id": "sg-0123456789abcdef0"},
     {"gpu-p4d": {"zone": "us-east-1a"}}, "is for platform=new only (platform=existing"),
])
def test_bad_gpu_capacity_is_refused_naming_the_key_and_what_is_valid(extra: dict[str, Any], raw: Any,
                                                                       expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load({**NEW, **extra, "benchctl:gpu_capacity": raw})
    assert expected in str(err.value)
