"""Placement as kube-scheduler does it (``benchctl.planning.placement``): for every example and the hostile cases, every
order in which a deployment's worker pods can be placed on the planned nodes (one at a time, onto any node
that passes the required rules, never moved again) places them all.

The rules checked are read back from the RENDERED DynamoGraphDeployment (``benchctl.aws.k8s.placement``), the
node counts are the plan's: render and plan are held to the scheduler's semantics, not to a copy of our own.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.aws.k8s.placement import deployment_pods, planned_nodes
from benchctl.aws.k8s.render import render_dgd
from benchctl.errors import SpecError
from benchctl.planning.placement import NodeShape, PodShape, feasible, find_deadlock
from benchctl.planning.plan import plan_campaign
from benchctl.planning.units import entry_experiment
from benchctl.spec.model import CampaignSpec, parse_spec
from tests.fakes.eks_world import example_specs

ROOT = Path(__file__).resolve().parents[2]
CID = "place-20261201-000000"
P4D = {"name": "p4d", "instance_type": "p4d.24xlarge", "gpus_per_node": 8, "gpu_kind": "A100-40GB",
       "provider": "managed-nodegroup", "nodegroup": "gpu-p4d", "network": {"efa": True, "nixl_backend": "LIBFABRIC"}}


def _spec(*experiments: dict[str, Any], max_nodes: int = 16, pool: dict[str, Any] | None = None) -> CampaignSpec:
    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text(encoding="utf-8"))
    data["pools"] = [{**(pool or P4D), "max_nodes": max_nodes}]
    data["experiments"] = list(experiments)
    data.pop("pricing", None)
    return feasible(parse_spec(data, "hostile.yaml"), "hostile.yaml")  # the spec, then the planning check


def _disagg(name: str, prefill: tuple[int, int], decode: tuple[int, int]) -> dict[str, Any]:
    return {"name": name, "mode": "disaggregated", "workers": [
        {"role": "prefill", "pool": "p4d", "replicas": prefill[0], "tensor_parallel": prefill[1]},
        {"role": "decode", "pool": "p4d", "replicas": decode[0], "tensor_parallel": decode[1]}]}


def _agg(name: str, *groups: tuple[int, int]) -> dict[str, Any]:
    return {"name": name, "mode": "aggregated",
            "workers": [{"role": "worker", "pool": "p4d", "replicas": r, "tensor_parallel": tp} for r, tp in groups]}


def _deadlocks(spec: CampaignSpec) -> dict[str, list[str] | None]:
    """experiment -> a deadlocking order of its rendered worker pods on its planned nodes (None: none)."""
    out: dict[str, list[str] | None] = {}
    for entry in plan_campaign(spec, "aws").experiments:  # each deployment of each experiment
        exp = entry_experiment(spec, entry)
        pods = deployment_pods(render_dgd(spec, CID, entry.name, exp), spec.pools, CID)
        assert sum(n for _, n in pods) == sum(g.replicas for g in exp.workers)  # every worker pod is checked
        out[entry.lake_name] = out.get(entry.lake_name) or find_deadlock(pods, planned_nodes(spec.pools, entry.nodes))
    return out


EXAMPLES = example_specs()


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_no_example_can_deadlock_on_its_planned_nodes(name: str) -> None:
    assert _deadlocks(EXAMPLES[name]) == {e.name: None for e in EXAMPLES[name].experiments}


HOSTILE = {
    # TP=3 on 8-GPU nodes: two per node, 2 GPUs idle; disaggregated over EFA each role fits one node
    "tp3-aggregated": (_agg("agg", (5, 3)), {"p4d": 3}),
    "tp3-disaggregated": (_disagg("disagg", (2, 3), (2, 3)), {"p4d": 2}),
    # 1 prefill + 1 decode on one EFA pool: never on one node, however few GPUs they take
    "1p1d-one-pool": (_disagg("disagg", (1, 4), (1, 4)), {"p4d": 2}),
    # the seed plan's 2p2d TP=4: exactly two nodes, safe only with each role kept together
    "2p2d-tp4": (_disagg("disagg", (2, 4), (2, 4)), {"p4d": 2}),
    # 4p4d TP=4: a role needs two nodes but may be spread over four, leaving the other role two: six nodes
    "4p4d-tp4": (_disagg("disagg", (4, 4), (4, 4)), {"p4d": 6}),
    # mixed sizes without affinity: two TP=2 pods on two nodes leave no node for the TP=8 one
    "mixed-sizes": (_agg("agg", (1, 8), (2, 2)), {"p4d": 3}),
    # TP=1 over EFA: a pod takes one of a p4d's 4 interfaces, so EFA, not GPUs, bounds a node
    "tp1-efa": (_disagg("disagg", (4, 1), (4, 1)), {"p4d": 2}),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_cases_are_planned_and_rendered_so_that_none_can_deadlock(case: str) -> None:
    exp, nodes = HOSTILE[case]
    spec = _spec(exp)
    assert plan_campaign(spec, "aws").experiments[0].nodes == nodes
    assert _deadlocks(spec) == {exp["name"]: None}


def test_what_cannot_be_placed_within_max_nodes_is_refused_naming_the_experiment_and_the_fix() -> None:
    with pytest.raises(SpecError) as err:
        _spec(_disagg("disagg-4p4d", (4, 4), (4, 4)), max_nodes=4)
    (line,) = [p for p in err.value.problems if "disagg-4p4d" in p]
    assert line.startswith("experiments[0].workers: experiment 'disagg-4p4d': its workers on pool 'p4d'")
    assert "need 6 nodes" in line and "pools[0].max_nodes is 4: raise it to 6" in line
    assert "tensor_parallel = gpus_per_node" in line


def test_a_count_the_check_could_not_prove_the_fewest_is_refused_saying_so() -> None:
    """12 prefill + 12 decode at TP=2 over EFA: more orders than the check explores, so its count is the one
    safe in any order (a node per pod); a refusal says that fewer may do but could not be proven, not that so
    many are needed."""
    with pytest.raises(SpecError) as err:
        _spec(_disagg("disagg-12p12d", (12, 2), (12, 2)), max_nodes=16)
    (line,) = [p for p in err.value.problems if "disagg-12p12d" in p]
    assert "need at most 24 nodes" in line and "could not be proven" in line and "raise it to 24" in line


def test_benchctl_validate_exits_2_on_a_placement_that_can_deadlock(tmp_path: Path) -> None:
    from benchctl.cli.main import main

    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text(encoding="utf-8"))
    data["experiments"][1]["workers"] = [{"role": "prefill", "pool": "p4d", "replicas": 4, "tensor_parallel": 4},
                                         {"role": "decode", "pool": "p4d", "replicas": 4, "tensor_parallel": 4}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["validate", str(path)]) == 2


# ---------------------------------------------------------------------------------------- the checker


def test_the_check_finds_the_deadlocks_of_a_gpu_count_plan_and_of_a_preferred_affinity() -> None:
    spec = _spec(_disagg("one", (1, 4), (1, 4)), _disagg("two", (2, 4), (2, 4)))
    one = deployment_pods(render_dgd(spec, CID, "one"), spec.pools, CID)
    # packing by GPU count alone: 1 prefill + 1 decode at TP=4 on one p4d
    stuck = find_deadlock(one, planned_nodes(spec.pools, {"p4d": 1}))
    assert stuck is not None and stuck[-1].startswith("stuck: 1 x ")
    # 2p2d on two nodes with only a preferred (scored) same-role affinity: spreading splits a role
    dgd = render_dgd(spec, CID, "two")
    for comp in dgd["spec"]["components"][1:]:
        comp["podTemplate"]["spec"]["affinity"]["podAffinity"].pop("requiredDuringSchedulingIgnoredDuringExecution")
    stuck = find_deadlock(deployment_pods(dgd, spec.pools, CID), planned_nodes(spec.pools, {"p4d": 2}))
    assert stuck is not None and stuck[:2] == ["Prefill -> p4d/0", "Prefill -> p4d/1"], stuck
    assert stuck[-1] == "stuck: 2 x Decode fit on no node"


def _pod(name: str, labels: dict[str, str], *, affinity: dict[str, str] | None = None, anti: dict[str, str] | None = None,
         gpus: int = 4) -> PodShape:
    return PodShape(name, "p", gpus, 0, frozenset(labels.items()),
                    (frozenset(affinity.items()),) if affinity else (),
                    (frozenset(anti.items()),) if anti else ())


def test_a_required_affinity_lets_the_first_pod_of_its_own_series_go_anywhere_and_no_other() -> None:
    node = {"p": (NodeShape(8, 0), 2)}
    series = _pod("a", {"role": "a"}, affinity={"role": "a"})
    assert find_deadlock([(series, 2)], node) is None  # the first anywhere, the second follows it
    assert find_deadlock([(series, 3)], node) is not None  # the third must follow too: no room
    # affinity to pods that never come (its own labels do not match): never placed
    assert find_deadlock([(_pod("b", {"role": "b"}, affinity={"role": "c"}), 1)], node) == [
        "stuck: 1 x b fit on no node"]


def test_an_existing_pods_anti_affinity_refuses_the_incoming_pod_too() -> None:
    node = {"p": (NodeShape(8, 0), 1)}
    guarded = _pod("guarded", {"role": "x"}, anti={"role": "y"}, gpus=2)
    plain = _pod("plain", {"role": "y"}, gpus=2)  # carries no rule itself
    assert find_deadlock([(guarded, 1), (plain, 1)], node) is not None
    assert find_deadlock([(guarded, 1), (plain, 1)], {"p": (NodeShape(8, 0), 2)}) is None


def test_an_unmodelled_scheduling_rule_is_an_error_not_ignored() -> None:
    spec = _spec(_disagg("two", (2, 4), (2, 4)))
    dgd = copy.deepcopy(render_dgd(spec, CID, "two"))
    term = dgd["spec"]["components"][1]["podTemplate"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][0]
    term["topologyKey"] = "topology.kubernetes.io/zone"
    with pytest.raises(ValueError, match="not modelled by the placement check"):
        deployment_pods(dgd, spec.pools, CID)
