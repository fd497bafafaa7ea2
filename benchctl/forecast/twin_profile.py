"""A timing profile for the Dynamo mocker: the "twin" of one worker role on one GPU, TP and engine.

The file format is the mocker's own (``python -m dynamo.mocker --planner-profile-data FILE.npz``, Dynamo
1.6.1, ``dynamo/mocker/utils/planner_profiler_perf_data_converter.py``): an NPZ with

* ``prefill_isl`` (1-D, increasing) and ``prefill_ttft_ms`` (same length): a prefill's time against its
  new input tokens;
* ``decode_active_kv_tokens`` (1-D, increasing), ``decode_context_length`` (1-D, increasing) and
  ``decode_itl`` (2-D, ``[kv, ctx]``): one decode iteration's time against the tokens held in the KV cache
  by the running batch and the mean context length (batch = kv / ctx).

Beside it, ``provenance.json`` says where the curves came from (aiconfigurator and its version, system,
backend and its version, model, TP; or the campaign a calibration was fitted from). A profile directory
is ``<root>/<name>/`` holding both files; :func:`write_profile` writes them atomically (the NPZ last is
not enough: both go through :func:`benchctl.atomic.atomic_write`), :func:`read_profile` checks what the
mocker would otherwise reject late (keys, shapes, increasing axes, finite positive times).

Where profiles live (one store, so ``benchctl calibrate`` writes where the twin reads):
``<workspace>/twin/<name>/`` (:func:`profile_dir`), the workspace being the local engine's output
directory (``runs/`` by default).

:meth:`TimingProfile.ttft_ms` and :meth:`TimingProfile.itl_ms` evaluate the curves by linear (bilinear)
interpolation, clamped at the grid's edges.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchctl.atomic import atomic_write
from benchctl.spec.fields import PROFILE_NAME_PATTERN

TWIN_DIR = "twin"  # under the workspace
NPZ_NAME, PROVENANCE_NAME = "perf_data.npz", "provenance.json"
KEYS_1D = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length")
NAME_PATTERN = PROFILE_NAME_PATTERN  # the spec's rule: one definition


class ProfileError(ValueError):
    """A profile file or directory that the mocker could not use; the message names the file and the rule."""


@dataclass(frozen=True)
class TimingProfile:
    prefill_isl: tuple[float, ...]
    prefill_ttft_ms: tuple[float, ...]
    decode_active_kv_tokens: tuple[float, ...]
    decode_context_length: tuple[float, ...]
    decode_itl: tuple[tuple[float, ...], ...]  # [kv index][context index], milliseconds
    provenance: dict[str, Any] = field(default_factory=dict)

    def check(self, where: str = "profile") -> TimingProfile:
        if len(self.prefill_isl) < 2 or len(self.prefill_isl) != len(self.prefill_ttft_ms):
            raise ProfileError(f"{where}: prefill_isl and prefill_ttft_ms must have the same length, at least 2;"
                               f" got {len(self.prefill_isl)} and {len(self.prefill_ttft_ms)}")
        kv, ctx = self.decode_active_kv_tokens, self.decode_context_length
        if len(kv) < 2 or len(ctx) < 2:
            raise ProfileError(f"{where}: decode_active_kv_tokens and decode_context_length need at least 2 points")
        if len(self.decode_itl) != len(kv) or any(len(row) != len(ctx) for row in self.decode_itl):
            raise ProfileError(f"{where}: decode_itl must be a {len(kv)} x {len(ctx)} grid"
                               " (decode_active_kv_tokens x decode_context_length)")
        for name in KEYS_1D:
            values = getattr(self, name)
            if not all(math.isfinite(v) for v in values):
                raise ProfileError(f"{where}: {name} holds a value that is not finite")
        for name in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
            values = getattr(self, name)
            if any(b <= a for a, b in itertools.pairwise(values)):
                raise ProfileError(f"{where}: {name} must be strictly increasing")
        times = [*self.prefill_ttft_ms, *(v for row in self.decode_itl for v in row)]
        if not all(math.isfinite(v) and v > 0 for v in times):
            raise ProfileError(f"{where}: prefill_ttft_ms and decode_itl must be finite and > 0 (milliseconds)")
        return self

    def ttft_ms(self, isl: float) -> float:
        """A prefill of ``isl`` new tokens alone, in milliseconds."""
        return interp(self.prefill_isl, self.prefill_ttft_ms, isl)

    def itl_ms(self, active_kv_tokens: float, context_length: float) -> float:
        """One decode iteration with ``active_kv_tokens`` in the batch's KV cache, mean context
        ``context_length``, in milliseconds (bilinear, clamped)."""
        kv, ctx = self.decode_active_kv_tokens, self.decode_context_length
        i, fi = _locate(kv, active_kv_tokens)
        j, fj = _locate(ctx, context_length)
        g = self.decode_itl
        top = g[i][j] * (1 - fj) + g[i][j + 1] * fj
        bottom = g[i + 1][j] * (1 - fj) + g[i + 1][j + 1] * fj
        return top * (1 - fi) + bottom * fi


def _locate(axis: Sequence[float], x: float) -> tuple[int, float]:
    """Index ``i`` and fraction ``f`` with ``x ~ axis[i] + f * (axis[i+1] - axis[i])``, clamped to the axis."""
    if x <= axis[0]:
        return 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 2, 1.0
    lo, hi = 0, len(axis) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if axis[mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo, (x - axis[lo]) / (axis[lo + 1] - axis[lo])


def interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """``ys`` at ``x`` by linear interpolation over increasing ``xs``, clamped at the ends."""
    i, f = _locate(xs, x)
    return ys[i] * (1 - f) + ys[i + 1] * f


def profile_dir(workspace: Path | str, name: str) -> Path:
    """Where the profile ``name`` lives in a workspace's twin store."""
    if not NAME_PATTERN.match(name):
        raise ProfileError(f"profile name {name!r} must match {NAME_PATTERN.pattern}")
    return Path(workspace) / TWIN_DIR / name


def write_profile(directory: Path | str, profile: TimingProfile) -> Path:
    """Write ``perf_data.npz`` and ``provenance.json`` into ``directory`` atomically; returns the NPZ path
    (what ``--planner-profile-data`` takes)."""
    import numpy as np

    directory = Path(directory)
    profile.check(str(directory))
    buf = io.BytesIO()
    np.savez(buf, prefill_isl=np.asarray(profile.prefill_isl, dtype=float),
             prefill_ttft_ms=np.asarray(profile.prefill_ttft_ms, dtype=float),
             decode_active_kv_tokens=np.asarray(profile.decode_active_kv_tokens, dtype=float),
             decode_context_length=np.asarray(profile.decode_context_length, dtype=float),
             decode_itl=np.asarray(profile.decode_itl, dtype=float))
    atomic_write(directory / PROVENANCE_NAME, json.dumps(profile.provenance, indent=2, sort_keys=True, default=str))
    return atomic_write(directory / NPZ_NAME, buf.getvalue())


def read_profile(path: Path | str) -> TimingProfile:
    """A profile from a directory (``perf_data.npz`` + optional ``provenance.json``) or an NPZ file."""
    import numpy as np

    path = Path(path)
    npz = path / NPZ_NAME if path.is_dir() else path
    try:
        with np.load(npz, allow_pickle=False) as data:
            missing = [k for k in (*KEYS_1D, "decode_itl") if k not in data]
            if missing:
                raise ProfileError(f"{npz}: not a mocker profile, missing {missing}")
            arrays = {k: data[k] for k in (*KEYS_1D, "decode_itl")}
    except (OSError, ValueError) as err:
        if isinstance(err, ProfileError):
            raise
        raise ProfileError(f"{npz}: cannot read a mocker profile (NPZ): {err}") from err
    for k in KEYS_1D:
        if arrays[k].ndim != 1:
            raise ProfileError(f"{npz}: {k} must be 1-D, has shape {arrays[k].shape}")
    if arrays["decode_itl"].ndim != 2:
        raise ProfileError(f"{npz}: decode_itl must be 2-D, has shape {arrays['decode_itl'].shape}")
    prov_file = npz.parent / PROVENANCE_NAME
    provenance = json.loads(prov_file.read_text(encoding="utf-8")) if prov_file.is_file() else {}
    one = {k: tuple(float(v) for v in arrays[k]) for k in KEYS_1D}
    return TimingProfile(
        prefill_isl=one["prefill_isl"], prefill_ttft_ms=one["prefill_ttft_ms"],
        decode_active_kv_tokens=one["decode_active_kv_tokens"], decode_context_length=one["decode_context_length"],
        decode_itl=tuple(tuple(float(v) for v in row) for row in arrays["decode_itl"]),
        provenance=provenance,
    ).check(str(npz))
