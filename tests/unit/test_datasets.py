"""Generated datasets: reproducible bytes, the named length distributions, exact prefix sharing."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from benchctl.lake.ingest.records import line_of_session
from benchctl.planning.datasets import (
    DISTRIBUTIONS,
    parse_dataset,
    prefix_dataset,
    sample_lengths,
    sequence_dataset,
    shared_blocks,
)

# ------------------------------------------------------------------------------------ reproducibility


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_same_seed_same_bytes_and_hash_other_seed_differs(dist: str) -> None:
    a = sequence_dataset("d.jsonl", dist, 200, (128, 4096), (64, 2048), seed=42)
    b = sequence_dataset("d.jsonl", dist, 200, (128, 4096), (64, 2048), seed=42)
    c = sequence_dataset("d.jsonl", dist, 200, (128, 4096), (64, 2048), seed=43)
    assert a.data == b.data and a.sha256 == b.sha256
    assert c.data != a.data and c.sha256 != a.sha256
    assert len(a.sha256) == 64


def test_prefix_dataset_same_seed_same_bytes_other_seed_differs() -> None:
    a = prefix_dataset("p.jsonl", 0.5, 20, 1024, 16, 64, seed=1)
    assert a.data == prefix_dataset("p.jsonl", 0.5, 20, 1024, 16, 64, seed=1).data
    assert a.sha256 != prefix_dataset("p.jsonl", 0.5, 20, 1024, 16, 64, seed=2).sha256


def test_file_is_what_aiperf_reads_one_object_per_line() -> None:
    ds = sequence_dataset("d.jsonl", "zipf", 10, (100, 200), (10, 20), seed=7)
    lines = ds.data.decode().splitlines()
    assert len(lines) == 10
    assert [json.loads(line) for line in lines] == ds.lines == parse_dataset(ds.data, "d.jsonl")
    assert all(set(obj) == {"input_length", "output_length", "session_id"} for obj in ds.lines)
    # one session per line: AIPerf reports it as the request's conversation id
    assert [line_of_session(obj["session_id"]) for obj in ds.lines] == list(range(10))
    assert line_of_session("session_000001") is None and line_of_session(None) is None


def test_parse_dataset_names_the_bad_line() -> None:
    with pytest.raises(ValueError, match=r"x.jsonl:2: not JSON"):
        parse_dataset(b'{"input_length": 3}\n{oops\n', "x.jsonl")


# ----------------------------------------------------------------------------------- distributions


def _chi2_pvalue(sample: list[int], lo: int, hi: int, pmf: np.ndarray, bins: int = 20) -> float:
    """Chi-square goodness of fit over ~equal-probability bins of the expected pmf on [lo, hi]."""
    cdf = np.cumsum(pmf)
    edges = np.searchsorted(cdf, np.linspace(0, 1, bins + 1)[1:-1])  # bin upper indices
    edges = np.unique(edges)
    idx = np.asarray(sample) - lo
    observed = np.bincount(np.searchsorted(edges, idx, side="left"), minlength=len(edges) + 1)
    expected_p = np.diff(np.concatenate([[0.0], cdf[edges], [1.0]]))
    keep = expected_p > 0
    expected = expected_p[keep] * len(sample)
    return float(stats.chisquare(observed[keep], expected * observed[keep].sum() / expected.sum()).pvalue)


def _scipy_pmf(dist: str, lo: int, hi: int, *, exponent: float = 1.1) -> np.ndarray:
    """The named distribution's pmf on [lo, hi], computed by scipy (independently of the generator)."""
    k = np.arange(lo, hi + 1)
    if dist == "uniform":
        pmf = stats.randint(lo, hi + 1).pmf(k)
    elif dist == "zipf":
        pmf = stats.zipfian(exponent, hi - lo + 1).pmf(k - lo + 1)
    else:
        sigma = math.log(hi / lo) / 4
        ln = stats.lognorm(s=sigma, scale=math.sqrt(lo * hi))
        pmf = ln.cdf(k + 0.5) - ln.cdf(k - 0.5)
    return pmf / pmf.sum()


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize(("lo", "hi"), [(128, 4096), (64, 2048)])
def test_lengths_follow_the_named_distribution(dist: str, lo: int, hi: int) -> None:
    sample = sample_lengths(dist, 5000, lo, hi, random.Random(3))
    assert min(sample) >= lo and max(sample) <= hi
    assert _chi2_pvalue(sample, lo, hi, _scipy_pmf(dist, lo, hi)) > 1e-3


@pytest.mark.parametrize("dist", ["uniform", "lognormal"])
def test_goodness_of_fit_rejects_the_wrong_distribution(dist: str) -> None:
    # the check above can fail: a zipf sample is not uniform, nor lognormal
    sample = sample_lengths("zipf", 5000, 128, 4096, random.Random(3))
    assert _chi2_pvalue(sample, 128, 4096, _scipy_pmf(dist, 128, 4096)) < 1e-6


@given(
    dist=st.sampled_from(DISTRIBUTIONS),
    lo=st.integers(1, 5000),
    width=st.integers(0, 5000),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=60, deadline=None)
def test_bounds_are_always_respected(dist: str, lo: int, width: int, seed: int) -> None:
    sample = sample_lengths(dist, 50, lo, lo + width, random.Random(seed))
    assert len(sample) == 50 and all(lo <= x <= lo + width for x in sample)


def test_unknown_distribution_and_reversed_range_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown distribution 'pareto'; valid: uniform, zipf, lognormal"):
        sample_lengths("pareto", 1, 1, 2, random.Random(0))
    with pytest.raises(ValueError, match=r"\[9, 3\]"):
        sample_lengths("uniform", 1, 9, 3, random.Random(0))


# ------------------------------------------------------------------------------------- prefix sharing


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_prefix_ratio_is_exact_to_the_block(ratio: float) -> None:
    isl, block = 2048, 64
    ds = prefix_dataset("p.jsonl", ratio, 30, isl, 512, block, seed=42, id_base=1000)
    blocks = [line["hash_ids"] for line in ds.lines]
    assert all(len(b) == isl // block for b in blocks)
    shared = {_common_prefix(a, b) for a in blocks for b in blocks if a is not b}
    # every pair of requests shares exactly the requested prefix, nothing more
    assert shared == {round(ratio * isl / block)}
    k = shared.pop()
    assert ds.meta["prefix_ratio_actual"] == pytest.approx(ratio, abs=block / isl / 2)
    # beyond the prefix no block is reused anywhere (no accidental cache hits)
    tails = [h for b in blocks for h in b[k:]]
    assert len(tails) == len(set(tails))
    assert all(h >= 1000 for b in blocks for h in b)


@given(ratio=st.floats(0, 1), isl=st.integers(1, 8192), block=st.sampled_from([16, 32, 64, 512]))
@settings(max_examples=80, deadline=None)
def test_actual_ratio_within_half_a_block_of_the_request(ratio: float, isl: int, block: int) -> None:
    ds = prefix_dataset("p.jsonl", ratio, 3, isl, 8, block, seed=0)
    k = shared_blocks(ratio, isl, block)
    assert ds.meta["shared_blocks"] == k
    assert abs(ds.meta["prefix_ratio_actual"] - ratio) <= block / (2 * isl) + 1e-9 or k * block >= isl
    assert all(line["input_length"] == isl for line in ds.lines)


def test_disjoint_id_bases_never_share_a_block() -> None:
    a = prefix_dataset("a.jsonl", 0.5, 10, 1024, 8, 64, seed=1, id_base=0)
    b = prefix_dataset("b.jsonl", 0.5, 10, 1024, 8, 64, seed=1, id_base=10_000_000)
    ids = lambda d: {h for line in d.lines for h in line["hash_ids"]}  # noqa: E731
    assert not ids(a) & ids(b)


def test_ratio_outside_zero_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        prefix_dataset("p.jsonl", 1.5, 3, 64, 8, 64, seed=0)


@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_request_duplication_is_the_share_of_requests_that_contain_the_prefix(ratio: float) -> None:
    """The plan's input prefix duplication: that share of the requests begins with the one shared prefix (half
    the ISL by default), the others share no block with anyone; the token share is reported beside it."""
    n, isl, block = 40, 1024, 64
    ds = prefix_dataset("p.jsonl", ratio, n, isl, 16, block, seed=7, id_base=500, duplication="requests")
    prefix = list(range(500, 500 + isl // 2 // block))
    having = [line for line in ds.lines if line["hash_ids"][: len(prefix)] == prefix]
    assert len(having) == round(ratio * n) == ds.meta["requests_with_prefix"]
    assert ds.meta["prefix_ratio_actual"] == len(having) / n
    assert ds.meta["shared_token_share"] == pytest.approx(ratio * 0.5, abs=1 / n)
    # outside the prefix no block is used twice, in any request
    rest = [b for line in ds.lines for b in (line["hash_ids"][len(prefix):] if line in having else line["hash_ids"])]
    assert len(rest) == len(set(rest)) and not set(rest) & set(prefix)
    assert all(len(line["hash_ids"]) == isl // block for line in ds.lines)
    # same seed, same bytes; another seed, other requests carry the prefix
    assert ds.data == prefix_dataset("p.jsonl", ratio, n, isl, 16, block, seed=7, id_base=500,
                                     duplication="requests").data


def test_a_prefix_cache_workload_counts_requests_by_default_and_its_prefix_must_fit() -> None:
    from benchctl.errors import SpecError
    from benchctl.spec.model import load_spec, parse_spec

    spec = load_spec(Path(__file__).resolve().parents[2] / "examples" / "smoke.yaml")
    w = next(w for w in spec.workloads if w.kind == "prefix_cache")
    assert w.duplication == "requests"
    data = spec.model_dump(mode="json")
    i = next(i for i, x in enumerate(data["workloads"]) if x["kind"] == "prefix_cache")
    data["workloads"][i]["prefix_tokens"] = data["workloads"][i]["isl"] + 1
    with pytest.raises(SpecError, match=r"prefix_tokens .* at most the isl"):
        parse_spec(data)
