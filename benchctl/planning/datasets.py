"""Request datasets we generate ourselves, as AIPerf input files: length distributions and prefix sharing.

AIPerf 0.13 has no Zipf or lognormal length distribution and no exact "x % of the prompt is a shared
prefix" knob, so the plan's sequence-distribution and prefix-cache workloads send datasets made here,
in AIPerf's ``mooncake_trace`` format (``--custom-dataset-type mooncake_trace``), one JSON object per
line::

    {"input_length": 812, "output_length": 97, "session_id": "line-000000"}        # sequence distribution
    {"hash_ids": [0, 1, 5000, 5001], "input_length": 256, "output_length": 32, "session_id": "line-000001"}

``session_id`` is unique per line: AIPerf reports it as the request's ``conversation_id``, which is how
each request's requested lengths are joined to what it actually sent and received (lines sharing a
session id would become turns of one conversation). ``hash_ids`` name the prompt's blocks of ``block_size`` tokens (AIPerf's ``--isl-block-size``): lines
that share a hash id share that block's tokens, so a shared LEADING run of ids is a shared prefix.

Determinism: everything is drawn from ``random.Random(seed)`` (CPython's Mersenne Twister and its
documented algorithms), lines are serialised with sorted keys and fixed separators, so the same
arguments give byte-identical files and the same SHA-256 on every machine; a different seed gives a
different file. Pure: standard library only (Lambdas build these too).

Length distributions over an integer range ``[lo, hi]`` (both bounds always respected):

* ``uniform``: every length equally likely (``Random.randint``).
* ``zipf``: bounded Zipf, ``P(lo + k) ∝ 1 / (k + 1) ** exponent`` for ``k = 0 .. hi - lo``: short
  requests dominate, with a long tail up to ``hi``.
* ``lognormal``: a lognormal with median ``sqrt(lo * hi)`` (the range's geometric centre) and shape
  ``sigma`` (default ``ln(hi / lo) / 4``, so the range spans ±2 sigma), truncated to
  ``[lo - 0.5, hi + 0.5)`` by rejection and rounded to the nearest integer.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

from benchctl.lake.ingest.records import session_id

DISTRIBUTIONS = ("uniform", "zipf", "lognormal")
DATASET_TYPE = "mooncake_trace"
DEFAULT_ZIPF_EXPONENT = 1.1
@dataclass(frozen=True)
class Dataset:
    """One generated AIPerf input file and what it asks for."""

    name: str  # file name, e.g. "seq-dist-zipf-r0.jsonl"
    data: bytes  # the file's bytes (JSONL)
    lines: list[dict[str, Any]]  # the parsed lines, in file order
    custom_dataset_type: str = DATASET_TYPE
    block_size: int | None = None  # AIPerf --isl-block-size, for hash_ids datasets
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. prefix_ratio_actual, distribution

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _encode(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n" for line in lines)


def default_lognormal_sigma(lo: int, hi: int) -> float:
    return max(math.log(hi / lo) / 4.0, 1e-3) if hi > lo else 1e-3


def zipf_cum_weights(lo: int, hi: int, exponent: float) -> list[float]:
    return list(itertools.accumulate(1.0 / (k + 1) ** exponent for k in range(hi - lo + 1)))


def sample_lengths(
    distribution: str,
    n: int,
    lo: int,
    hi: int,
    rng: random.Random,
    *,
    zipf_exponent: float = DEFAULT_ZIPF_EXPONENT,
    lognormal_sigma: float | None = None,
) -> list[int]:
    """``n`` integer lengths in ``[lo, hi]`` from the named distribution (see the module text)."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r}; valid: {', '.join(DISTRIBUTIONS)}")
    if not 0 < lo <= hi:
        raise ValueError(f"length range [{lo}, {hi}] must satisfy 0 < lo <= hi")
    if distribution == "uniform":
        return [rng.randint(lo, hi) for _ in range(n)]
    if distribution == "zipf":
        cum = zipf_cum_weights(lo, hi, zipf_exponent)
        total = cum[-1]
        return [lo + min(bisect.bisect_right(cum, rng.random() * total), hi - lo) for _ in range(n)]
    sigma = lognormal_sigma if lognormal_sigma is not None else default_lognormal_sigma(lo, hi)
    mu = 0.5 * (math.log(lo) + math.log(hi))
    out: list[int] = []
    while len(out) < n:
        x = rng.lognormvariate(mu, sigma)
        if lo - 0.5 <= x < hi + 0.5:
            out.append(min(max(round(x), lo), hi))
    return out


def sequence_dataset(
    name: str,
    distribution: str,
    n: int,
    isl_range: tuple[int, int],
    osl_range: tuple[int, int],
    seed: int,
    *,
    zipf_exponent: float = DEFAULT_ZIPF_EXPONENT,
    lognormal_sigma: float | None = None,
) -> Dataset:
    """``n`` requests whose input and output lengths follow ``distribution`` independently."""
    rng = random.Random(f"{seed}:{distribution}")  # noqa: S311 (reproducible data, not secrets)
    kw: dict[str, Any] = {"zipf_exponent": zipf_exponent}
    isl = sample_lengths(distribution, n, *isl_range, rng, **kw, lognormal_sigma=lognormal_sigma)
    osl = sample_lengths(distribution, n, *osl_range, rng, **kw, lognormal_sigma=lognormal_sigma)
    lines = [{"input_length": i, "output_length": o, "session_id": session_id(n)}
             for n, (i, o) in enumerate(zip(isl, osl, strict=True))]
    return Dataset(
        name=name,
        data=_encode(lines),
        lines=lines,
        meta={"distribution": distribution, "seed": seed, "isl_range": list(isl_range),
              "osl_range": list(osl_range), "zipf_exponent": zipf_exponent,
              "lognormal_sigma": lognormal_sigma if lognormal_sigma is not None else (
                  default_lognormal_sigma(*isl_range), default_lognormal_sigma(*osl_range))},
    )


def shared_blocks(ratio: float, isl: int, block_size: int) -> int:
    """Blocks of the shared prefix: ``ratio * isl`` tokens rounded to whole blocks."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"prefix ratio {ratio} must be within 0..1")
    return min(round(ratio * isl / block_size), math.ceil(isl / block_size))


def prefix_dataset(
    name: str,
    ratio: float,
    n: int,
    isl: int,
    osl: int,
    block_size: int,
    seed: int,
    *,
    id_base: int = 0,
    duplication: str = "tokens",
    prefix_tokens: int | None = None,
) -> Dataset:
    """``n`` requests of ``isl`` tokens with a shared prefix, as ``duplication`` counts it:

    * ``tokens``: every request's first ``ratio`` of tokens (to the block) is one shared prefix;
    * ``requests`` (the plan's "input prefix duplication"): ``round(ratio * n)`` of the requests (chosen with
      ``seed``) begin with one shared prefix of ``prefix_tokens`` (default half the ISL, to the block), the
      others share no block at all.

    Every request has ``ceil(isl / block_size)`` blocks; a shared prefix carries the same hash ids in every line
    that has it, every other block is unique to its line. Ids start at ``id_base`` (callers give each step a
    disjoint range, so one step's "unique" blocks are never cached by another step), and the unique ids are
    shuffled with ``seed`` (so a repeat with another seed sends other blocks). ``prefix_ratio_actual``: the share
    of tokens that is shared (``tokens``) or of requests that contain the prefix (``requests``);
    ``shared_token_share`` the share of all input tokens that are the shared prefix's, either way;
    ``achievable_hit_rate`` the best hit rate any cache could reach on it (:func:`achievable_hit_rate`).
    """
    if isl <= 0 or osl <= 0 or block_size <= 0 or n <= 0:
        raise ValueError("isl, osl, block_size and n must be positive")
    if duplication not in ("tokens", "requests"):
        raise ValueError(f"duplication {duplication!r}: tokens or requests")
    blocks = math.ceil(isl / block_size)
    if duplication == "tokens":
        k = shared_blocks(ratio, isl, block_size)
        with_prefix = set(range(n))
    else:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"prefix ratio {ratio} must be within 0..1")
        k = max(1, min(round((prefix_tokens or isl / 2) / block_size), blocks))
        order = list(range(n))
        random.Random(f"{seed}:prefix-requests").shuffle(order)  # noqa: S311 (reproducible data)
        with_prefix = set(order[:round(ratio * n)])
    shared = list(range(id_base, id_base + k))
    own_blocks = [blocks - k if i in with_prefix else blocks for i in range(n)]
    uniques = list(range(id_base + k, id_base + k + sum(own_blocks)))
    random.Random(f"{seed}:prefix").shuffle(uniques)  # noqa: S311 (reproducible data)
    lines, at = [], 0
    for i in range(n):
        own = uniques[at:at + own_blocks[i]]
        at += own_blocks[i]
        lines.append({"hash_ids": (shared if i in with_prefix else []) + own, "input_length": isl,
                      "output_length": osl, "session_id": session_id(i)})
    shared_tokens = min(k * block_size, isl)
    share = len(with_prefix) * shared_tokens / (n * isl)
    actual = shared_tokens / isl if duplication == "tokens" else len(with_prefix) / n
    return Dataset(
        name=name,
        data=_encode(lines),
        lines=lines,
        block_size=block_size,
        meta={"prefix_ratio": ratio, "prefix_ratio_actual": actual, "duplication": duplication,
              "shared_token_share": share, "shared_blocks": k, "requests_with_prefix": len(with_prefix),
              "blocks": blocks, "seed": seed, "id_base": id_base,
              "achievable_hit_rate": achievable_hit_rate(lines, block_size)},
    )


def achievable_hit_rate(lines: list[dict[str, Any]], block_size: int) -> float | None:
    """The best hit rate any prefix cache could reach on this dataset, sent in file order (None without ``hash_ids``).

    An infinite cache that keeps every block: request r's block i is a hit when the same block-aligned prefix
    (its hash ids 0..i, the chain, as a prefix cache keys a block by everything before it) was in an EARLIER
    request. Only whole blocks count: a block cut short by ``input_length`` (the last partial one) never hits.
    Achievable = hit blocks' tokens / all input tokens. An upper bound: under concurrency some earlier requests
    are still in flight (their blocks not cached yet), and a real cache is finite and shared.
    """
    if block_size <= 0 or not any("hash_ids" in line for line in lines):
        return None
    seen: dict[tuple[int, int], int] = {}  # (parent chain, hash id) -> chain id; -1 is the empty chain
    hit = total = 0
    for line in lines:
        length = int(line["input_length"])
        total += length
        new: dict[tuple[int, int], int] = {}
        parent = -1
        for i, h in enumerate(line.get("hash_ids") or []):
            key = (parent, int(h))
            chain = seen.get(key)
            if chain is None:  # a block first sent now (so is every block after it: its chain is new)
                chain = new.setdefault(key, len(seen) + len(new))
            elif (i + 1) * block_size <= length:
                hit += block_size
            parent = chain
        seen.update(new)  # cached once this request has been sent
    return hit / total if total else None


def parse_dataset(data: bytes, where: str) -> list[dict[str, Any]]:
    """Read back a mooncake-trace file (what AIPerf will send), with errors naming the line."""
    lines = []
    for lineno, raw in enumerate(data.splitlines(), 1):
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}:{lineno}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("input_length"), int):
            raise ValueError(f"{where}:{lineno}: expected an object with an integer input_length")
        lines.append(obj)
    return lines
