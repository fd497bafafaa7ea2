"""Every prefix-cache and multi-turn step starts from a known cache state: its prompts are its own (a per-step
namespace: no reset exists in Dynamo 1.6.1), and the best hit rate its dataset allows is computed with it."""

from __future__ import annotations

from pathlib import Path

from benchctl.campaign import step_dataset
from benchctl.planning import aiperf_args
from benchctl.planning.cache_state import cache_state
from benchctl.planning.datasets import achievable_hit_rate, prefix_dataset
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import load_spec

ROOT = Path(__file__).resolve().parents[2]


def _fixed_twice() -> list:
    """The smoke campaign's steps with two repeats of one seed (``seed_policy: fixed``): every workload twice."""
    spec = load_spec(ROOT / "examples" / "smoke.yaml").model_copy(update={"repeats": 2, "seed_policy": "fixed"})
    return plan_campaign(spec).experiments[0].steps


def test_achievable_hit_rate_counts_whole_blocks_whose_chain_an_earlier_request_sent() -> None:
    lines = [
        {"hash_ids": [1, 2, 3], "input_length": 12},  # first: nothing cached
        {"hash_ids": [1, 2, 5], "input_length": 11},  # (1), (1,2) hit: 8; (1,2,5) new (and partial)
        {"hash_ids": [1, 2, 5], "input_length": 11},  # (1), (1,2) hit: 8; (1,2,5) seen but partial: never
        {"hash_ids": [7, 2, 3], "input_length": 12},  # (7) new, so (7,2) and (7,2,3) are new chains: 0
        {"hash_ids": [1, 2, 3], "input_length": 12},  # all three whole blocks seen: 12
    ]
    assert achievable_hit_rate(lines, 4) == (8 + 8 + 12) / (12 + 11 + 11 + 12 + 12)
    assert achievable_hit_rate([{"input_length": 12}], 4) is None  # no hash ids: no block structure to judge


def test_a_prefix_datasets_achievable_hit_rate_matches_the_hand_computed_value() -> None:
    # 4 requests of 8 tokens in blocks of 2, the first half shared: request 0 misses everything, each of the
    # 3 others hits the 2 shared blocks (4 tokens): 12 of 32 tokens
    ds = prefix_dataset("tiny.jsonl", 0.5, 4, 8, 4, 2, 7, duplication="tokens")
    assert ds.meta["achievable_hit_rate"] == 12 / 32
    # every request one prompt (ratio 1): all but the first request's blocks
    assert prefix_dataset("all.jsonl", 1.0, 4, 8, 4, 2, 7, duplication="tokens").meta["achievable_hit_rate"] == 24 / 32
    assert prefix_dataset("none.jsonl", 0.0, 4, 8, 4, 2, 7, duplication="tokens").meta["achievable_hit_rate"] == 0.0


def test_the_prefix_workload_run_twice_sends_the_second_run_other_blocks() -> None:
    steps = [s for s in _fixed_twice() if s.kind == "prefix_cache" and s.variant == "p0"]
    first, second = steps  # seed_policy fixed: one repeat seed
    a, b = step_dataset(first), step_dataset(second)
    assert a is not None and b is not None
    ids_a = {h for line in a.lines for h in line["hash_ids"]}
    ids_b = {h for line in b.lines for h in line["hash_ids"]}
    assert ids_a and ids_b and not ids_a & ids_b and a.sha256 != b.sha256
    # without the per-step namespace both runs would send the same file (AIPerf draws a hash id's tokens
    # from its seed, the file's content hash and the id): the second run would start warm
    same = [prefix_dataset(s.params["dataset"], 0.0, s.request_count or 0, s.isl or 0, s.osl or 0,
                           s.params["block_size"], 42, duplication=s.params["duplication"]) for s in steps]
    assert same[0].data == same[1].data


def test_multi_turn_steps_of_one_seed_get_their_own_seed_the_same_in_every_experiment() -> None:
    spec = load_spec(ROOT / "examples" / "smoke.yaml").model_copy(update={"repeats": 2, "seed_policy": "fixed"})
    plan = plan_campaign(spec)
    mt = [[s for s in e.steps if s.kind == "multi_turn"] for e in plan.experiments]
    seeds = [[s.seed for s in steps] for steps in mt]
    assert len(set(seeds[0])) == 2 and spec.seed not in seeds[0]  # nor the warm-up's seed
    assert seeds[0] == seeds[1]  # both sides of a comparison send one dataset
    # a sweep's loads too: each its own prompts (on one seed, later loads found the earlier ones' in the cache)
    sweep = [s.seed for s in plan.experiments[0].steps if s.kind == "concurrency_sweep"]
    assert len(set(sweep)) == len(sweep) and spec.seed not in sweep
    args = aiperf_args.step_args(mt[0][1], model="m", tokenizer="t", url="http://x", artifact_dir="/a")
    assert args[args.index("--random-seed") + 1] == str(seeds[0][1])


def test_every_step_names_its_cache_state() -> None:
    for s in _fixed_twice():
        state = cache_state(s.kind, s.index, s.seed)
        assert state is not None and state.startswith("namespaced: ") and "no cache reset" in state, s.step_id
