"""Every number of a spec is bounded: the limits no real campaign reaches, named once, and the walk over the spec's
models that finds a numeric field without a finite upper and a lower bound (``tests/unit/test_spec_bounds.py`` holds
every model of :class:`benchctl.spec.model.CampaignSpec` to it, so a new unbounded field fails that test by its path).

A bound is declared the pydantic way (``Field(le=...)``/``lt``, ``ge``/``gt``, on the field or on the items of a
list, tuple or mapping); floats are finite everywhere (``allow_inf_nan=False`` on :class:`benchctl.spec.base.Strict`).
Pure: pydantic and the standard library.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel

# The longest context any model we could serve has: Qwen2.5-1M and Qwen3-2507's 1M mode serve 1,010,000 tokens
# (their model cards); 2^20 is above it. Workloads' lengths (isl, osl, ranges, prefix) share it.
MAX_CONTEXT = 1_048_576
# The local engines serve only the model directories they generate: the mocker's (benchctl.local.modeldir,
# Qwen3-30B-A3B's config: max_position_embeddings 40960) and the CPU engine's (benchctl.local.engine_model: 4096,
# which vLLM's CPU build enforces as its max model length). tests/unit/test_spec_bounds.py holds these equal.
LOCAL_MOCKER_MAX_CONTEXT = 40_960
CPU_ENGINE_MAX_CONTEXT = 4_096
# KV bytes per token: OPT-175B (96 layers x 96 full heads x 128 x K,V) in BF16 is 4.7 MB, in FP32 9.4 MB; 2^24 is
# above every dense or GQA/MLA model.
MAX_KV_BYTES_PER_TOKEN = 16_777_216
# Weights on the GPUs, GB: Kimi K2 (1.04 T parameters) in BF16 is about 2,080 GB.
MAX_WEIGHTS_GB = 10_000.0
# The mocker's KV block: vLLM's default is 16 and its CUDA attention backends take up to 256; the mocker's default
# for vLLM is 64, TRT-LLM's 32, SGLang's 1 (dynamo.mocker --block-size help, 1.6.1).
MAX_BLOCK_SIZE = 1024
# KV blocks of one worker: 8 x 192 GB at 98,304 B/token is 15.6 M tokens, under a million 16-token blocks.
MAX_KV_BLOCKS = 16_777_216
# Bandwidths, GB/s: NVLink 5 moves 1,800 GB/s per GPU, EFA on p5 400 GB/s per node.
MAX_BANDWIDTH_GBPS = 10_000.0
# A step's length: one day of load per step or probe; requests per step, a million.
MAX_STEP_SECONDS = 86_400.0
MAX_REQUESTS = 1_000_000
# A generated dataset's lines (requests, conversations), as the sequence and prefix workloads' `requests`.
MAX_DATASET = 100_000
# lognormal_sigma: lognormvariate draws exp(mu + sigma * z) with |z| <= 8.6 (random.gauss's Box-Muller on a 53-bit
# uniform) and mu <= ln(MAX_CONTEXT) ~ 13.9: at sigma 8 the exponent stays under 83, far from exp's overflow at
# 709.8. (sample_lengths also has to keep enough draws inside the range: benchctl.spec.workloads checks that.)
MAX_LOGNORMAL_SIGMA = 8.0
# zipf_exponent: the weights are 1 / k^exponent for k up to MAX_CONTEXT; at 10 the largest k^e is 1e60 (a float's
# limit is 1e308) and every draw is already the shortest length.
MAX_ZIPF_EXPONENT = 10.0
# speedup_ratio: 0 would switch the mocker's timing off (dynamo.mocker: "0 for infinite speedup") and give
# figures of no time at all; above 1000 a step's simulated time is under the mocker's own scheduling overhead.
MAX_SPEEDUP_RATIO = 1000.0
# Seeds that reach a request's `seed` field: what every server accepts (31 bits).
MAX_SEED_31 = 2**31 - 1
# Money and time.
MAX_USD_PER_HOUR = 10_000.0
MAX_USD = 10_000_000.0
MAX_CAMPAIGN_HOURS = 8_760.0  # a year
MAX_SLO_MS = 3_600_000.0  # an hour to a first token
MAX_WAIT_SECONDS = 604_800.0  # a week (capacity); the deployment's ceilings (benchctl.planning.ceilings) are lower


@dataclass(frozen=True)
class NumericField:
    """A numeric field of a spec model (or the items of a list, tuple or mapping field), with its bounds."""

    path: str  # e.g. "experiments[].mocker.block_size", "pricing.auto_mode_fee_usd_per_hour.<key>"
    kind: str  # "int" | "float"
    upper: float | None
    lower: float | None


def _bound(meta: list[Any], names: tuple[str, str]) -> float | None:
    """The first bound named ``names`` (pydantic's annotated_types Le/Lt or Ge/Gt metadata) in ``meta``."""
    for m in meta:
        for name in names:
            v = getattr(m, name, None)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
    return None


def _field_meta(extra: Any) -> list[Any]:
    return list(getattr(extra, "metadata", None) or [extra])


def _walk(annotation: Any, meta: list[Any], path: str, seen: set[type], out: list[NumericField]) -> None:
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        base, *extras = typing.get_args(annotation)
        _walk(base, meta + [m for e in extras for m in _field_meta(e)], path, seen, out)
    elif origin in (typing.Union, types.UnionType):
        for a in typing.get_args(annotation):
            if a is not type(None):
                _walk(a, meta, path, seen, out)
    elif origin in (list, tuple, set, frozenset):
        for a in typing.get_args(annotation):
            if a is not Ellipsis:
                _walk(a, [], f"{path}[]", seen, out)
    elif origin is dict:
        _walk(typing.get_args(annotation)[1], [], f"{path}.<key>", seen, out)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation not in seen:
            seen.add(annotation)
            for name, info in annotation.model_fields.items():
                _walk(info.annotation, list(info.metadata), f"{path}.{name}" if path else name, seen, out)
    elif annotation in (int, float):
        out.append(NumericField(path, annotation.__name__, _bound(meta, ("le", "lt")), _bound(meta, ("ge", "gt"))))


def numeric_fields(model: type[BaseModel]) -> list[NumericField]:
    """Every numeric field of ``model`` and of every model below it (once per model class), with its bounds."""
    out: list[NumericField] = []
    _walk(model, [], "", set(), out)
    return out


def models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """``model`` and every model class below it."""
    found: list[type[BaseModel]] = []
    todo: list[Any] = [model]
    while todo:
        a = todo.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            if a not in found:
                found.append(a)
                todo += [i.annotation for i in a.model_fields.values()]
        else:
            todo += list(typing.get_args(a))
    return found


def unbounded(model: type[BaseModel]) -> list[str]:
    """One line per numeric field below ``model`` without a finite upper or lower bound, and per model whose floats
    may be NaN or infinite: empty when every number is bounded."""
    lines = []
    for f in numeric_fields(model):
        missing = [w for w, b in (("upper", f.upper), ("lower", f.lower)) if b is None or not math.isfinite(b)]
        if missing:
            lines.append(f"{f.path}: {f.kind} with no finite {' and no '.join(missing)} bound")
    lines += [f"{m.__name__}: floats may be NaN or infinite (model_config allow_inf_nan is not False)"
              for m in models(model) if m.model_config.get("allow_inf_nan", True) is not False]
    return lines
