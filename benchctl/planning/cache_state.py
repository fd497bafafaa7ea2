"""The cache state every step starts from, and how the plan makes it known.

A step that runs after another on the same workers could find its blocks in their KV cache because an
earlier step sent them (the same prompts again: a warm start nobody asked for). Two ways to rule that out:
reset the workers' cache before the step, or make the step's prompts share nothing with any other step.

No reset is reachable from the campaign in Dynamo 1.6.1: the vLLM worker registers a ``clear_kv_blocks``
runtime endpoint (``dynamo/vllm/worker_factory.py``: ``handler.clear_kv_blocks``, ``dynamo/vllm/handlers.py``:
``engine_client.reset_prefix_cache``), but the HTTP frontend (``dynamo/_core.abi3.so``) serves no route to it
and the mocker (``dynamo/mocker``) has none at all. So every such step is NAMESPACED:

* prefix-cache steps send a generated mooncake trace whose hash ids lie in the step's own span
  (``[index * HASH_ID_SPAN, (index + 1) * HASH_ID_SPAN)``); AIPerf 0.13 draws a hash id's tokens from
  ``sha256(random seed : trace file's content hash : hash id)``
  (``aiperf/common/hash_id_random_generator.py``, ``aiperf/dataset/loader/base_trace_loader.py``
  ``_init_trace_scope``), so another step's file (other ids, other bytes) never yields the same blocks;
* every other step's prompts are AIPerf's synthetic text, drawn from ``--random-seed``: two steps with one seed
  send the same prompts. A concurrency sweep's loads all ran on the repeat's seed (and the warm-up on the
  campaign's): measured on the smoke before this, its later loads found 50-97 % of their prompt tokens in the
  cache, their TTFT without most of its prefill. So every step's seed is salted with its index
  (:func:`step_seed`; a sequence-distribution step's lengths too). The index is the plan's, the same in every
  experiment: both sides of a comparison still send one dataset.

The steps table keeps the state (``cache_state``) and the first requests' measured hit rate shows it
(``v_step_cache.first_requests_hit_rate``).
"""

from __future__ import annotations

import hashlib

# Hash ids of one step's prefix dataset live in [index * span, (index + 1) * span): disjoint per step.
HASH_ID_SPAN = 10_000_000
NO_RESET = ("no cache reset exists in Dynamo 1.6.1 (the frontend serves no clear_kv_blocks route; the mocker "
            "has no reset)")


def step_seed(kind: str, seed: int, index: int) -> int:
    """The AIPerf ``--random-seed`` of the plan's step ``index`` in a repeat seeded ``seed``, salted with the index
    (its synthetic prompts are its own; ``kind`` is kept for the callers' sake: every kind is salted alike)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:step-{index}".encode()).digest()[:4], "big")


def cache_state(kind: str, index: int, seed: int) -> str | None:
    """What the step's cache state is and why (every kind has one)."""
    if kind == "prefix_cache":
        lo = index * HASH_ID_SPAN
        return (f"namespaced: hash ids [{lo}, {lo + HASH_ID_SPAN}) of this step only; {NO_RESET}")
    return f"namespaced: synthetic prompts of seed {seed}, salted with step index {index}; {NO_RESET}"
