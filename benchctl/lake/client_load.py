"""Is the load generator (AIPerf, "the client") keeping up? Per step, from what AIPerf and the load runner
recorded. Pure: standard library only.

Three figures, and the thresholds that turn them into a verdict, defined here and nowhere else:

* **Issue lag** (closed loop, every step of ours: ``--concurrency N``): AIPerf keeps N requests in flight;
  when one ends, its slot is free and the next request should start at once. AIPerf hands slots out in the
  order they free (its credit issuer waits on one semaphore), so the lag of request i (in the order of its
  ``credit_issued_ns``, else of its start; i >= N) is its ``request_start_ns`` minus the moment the slot it
  got freed: the (i-N+1)-th earliest ``request_end_ns`` of the requests issued before it (the earliest
  moment at most N-1 of them were still in flight). It covers AIPerf's whole loop between two requests: the worker's end of the
  response, the credit's return to the timing manager, the next credit's issue and its trip to a worker,
  the dataset turn and the HTTP send. Not computed for multi-turn steps (a conversation holds its slot
  across its turns and their delays) nor for the first N requests (their slots were never freed).
* **Requests issued on time**: the fraction of those requests whose lag is within the step's lag budget:
  ``max(LAG_FLOOR_MS, LAG_FRACTION x request latency p50)``. A slot held idle that long means the server
  saw the offered concurrency less that fraction of the time for that request; below the floor it is
  timer and scheduling jitter on a shared host, not a client that falls behind.
* **AIPerf's CPU**: CPU seconds of AIPerf's whole process tree (its services, workers and record
  processors) over the profiling phase's wall time, against the cores it can use (its CPU affinity,
  capped by a cgroup quota), sampled by the load runner (``benchctl.load_runner``) every
  ``CPU_SAMPLE_S`` and interpolated at the phase's start and end. Beside it, how long its processes waited on
  a run queue for a CPU, as a fraction of the time they were runnable (``/proc/<pid>/schedstat``): the
  host's contention (the servers on the same cores, or anything else), which explains a lag without a busy
  AIPerf; it is reported, not judged.

A step is **client-bound** when fewer than ``MIN_ON_TIME`` of its requests were issued on time (its p95
issue lag is over budget) or AIPerf used more than ``MAX_CPU_SHARE`` of its cores: its latencies then
measure the client's queue as much as the server. AIPerf's own ``credit_to_start_latency`` (credit issue
to HTTP send, part of the issue lag) and ``effective_concurrency`` (time-averaged requests in flight) are
copied beside them from its summary.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

LAG_FLOOR_MS = 5.0  # below this, a lag is the host's scheduling jitter (asyncio + ZMQ hops on shared cores)
LAG_FRACTION = 0.10  # a slot idle for 10 % of a request's latency: the server saw 10 % less load for it
MIN_ON_TIME = 0.95  # i.e. the p95 issue lag within the budget
MAX_CPU_SHARE = 0.90  # AIPerf's event loops saturate before 100 %: work queues behind them above this
CPU_SAMPLE_S = 0.5  # the load runner's sampling period of AIPerf's process tree (one /proc scan, < 1 ms)

COLUMNS = ("client_issue_lag_p50_ms", "client_issue_lag_p95_ms", "client_lag_budget_ms", "client_on_time_fraction",
           "client_credit_to_start_p95_ms", "client_effective_concurrency", "client_cpu_cores",
           "client_cpu_cores_available", "client_cpu_wait_fraction")
Sample = tuple[float, float, float | None]  # (epoch s, cumulative CPU s, cumulative run-queue wait s or None)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), ``q`` in 0..100; None for no values."""
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def issue_lags_ms(spans: Iterable[tuple[int | None, int, int]], concurrency: int) -> list[float]:
    """Per request after the first ``concurrency`` (in issue order): start minus the moment its slot freed (ms,
    never negative: a start before that moment is clock granularity). ``spans``: (credit_issued_ns or None,
    start_ns, end_ns); the issue order is the credits' when every request has one, else the starts'."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    spans = list(spans)
    by_credit = all(issued is not None for issued, _, _ in spans)
    ordered = sorted(spans, key=lambda s: (s[0], s[1]) if by_credit else (s[1], 0))
    ends: list[int] = []
    lags: list[float] = []
    for i, (_, start, end) in enumerate(ordered):
        if i >= concurrency:
            freed = ends[i - concurrency]  # the (i-N+1)-th earliest end among the i requests before
            lags.append(max(0, start - freed) / 1e6)
        bisect.insort(ends, end)
    return lags


def lag_budget_ms(request_latency_p50_ms: float | None) -> float:
    return max(LAG_FLOOR_MS, LAG_FRACTION * (request_latency_p50_ms or 0.0))


def lag_figures(spans: list[tuple[int | None, int, int]], concurrency: int | None, request_latency_p50_ms: float | None,
                *, multi_turn: bool) -> dict[str, float | None]:
    """``client_issue_lag_p50_ms``, ``..._p95_ms``, ``client_lag_budget_ms``, ``client_on_time_fraction``
    (all None when not computable: multi-turn, no concurrency, no request after the first N)."""
    none: dict[str, float | None] = {"client_issue_lag_p50_ms": None, "client_issue_lag_p95_ms": None,
                                     "client_lag_budget_ms": None, "client_on_time_fraction": None}
    if multi_turn or not concurrency or concurrency < 1:
        return none
    lags = issue_lags_ms(spans, concurrency)
    if not lags:
        return none
    budget = lag_budget_ms(request_latency_p50_ms)
    return {"client_issue_lag_p50_ms": percentile(lags, 50), "client_issue_lag_p95_ms": percentile(lags, 95),
            "client_lag_budget_ms": budget,
            "client_on_time_fraction": sum(1 for x in lags if x <= budget) / len(lags)}


def value_at(samples: Sequence[Sample], t: float, column: int = 1) -> float | None:
    """A cumulative column of the samples (1: CPU s, 2: run-queue wait s) at epoch second ``t``, interpolated
    between the samples around it (in time order; those without the column skipped); None outside them."""
    known: list[tuple[float, float]] = []
    for s in samples:
        v = s[column]
        if v is not None:
            known.append((s[0], v))
    for (t0, c0), (t1, c1) in itertools.pairwise(known):
        if t0 <= t <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (t - t0) / (t1 - t0)
    return None


def cpu_cores_used(samples: Sequence[Sample], start_s: float, end_s: float) -> float | None:
    """Mean cores AIPerf's tree used over ``[start_s, end_s]``; None when the samples do not span it."""
    if end_s <= start_s:
        return None
    c0, c1 = value_at(samples, start_s), value_at(samples, end_s)
    if c0 is None or c1 is None:
        return None
    return max(0.0, c1 - c0) / (end_s - start_s)


def cpu_wait_fraction(samples: Sequence[Sample], start_s: float, end_s: float) -> float | None:
    """Of the time AIPerf's processes were runnable over ``[start_s, end_s]``, the share they waited for a CPU
    (from the samples that have the wait; None when they do not span the window or nothing ran)."""
    live = [s for s in samples if s[2] is not None]
    c0, c1 = value_at(live, start_s), value_at(live, end_s)
    w0, w1 = value_at(live, start_s, 2), value_at(live, end_s, 2)
    if c0 is None or c1 is None or w0 is None or w1 is None or end_s <= start_s:
        return None
    ran, waited = max(0.0, c1 - c0), max(0.0, w1 - w0)
    return waited / (ran + waited) if ran + waited > 0 else None


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def check_cpu_record(cpu: Any, where: str) -> tuple[list[Sample], float | None]:
    """The load runner's ``cpu`` record (``{"samples": [[epoch_s, cpu_s, wait_s or null], ...], "cores": n}``;
    ``wait_s`` may be left out) as (samples in time order, cores); a malformed record raises ValueError
    naming ``where``."""
    if not isinstance(cpu, dict):
        raise ValueError(f"{where}: cpu: expected {{'samples': [[epoch_s, cpu_s, wait_s], ...], 'cores': n}}")
    raw, cores = cpu.get("samples"), cpu.get("cores")
    if not isinstance(raw, list) or not all(
            isinstance(s, list) and len(s) in (2, 3) and _finite(s[0]) and _finite(s[1])
            and (len(s) == 2 or s[2] is None or _finite(s[2])) for s in raw):
        raise ValueError(f"{where}: cpu.samples: expected a list of [epoch_s, cpu_s, wait_s or null] numbers")
    if cores is not None and (not isinstance(cores, int | float) or isinstance(cores, bool) or not cores > 0):
        raise ValueError(f"{where}: cpu.cores: expected a positive number, got {cores!r}")
    samples: list[Sample] = sorted((float(s[0]), float(s[1]), None if len(s) == 2 or s[2] is None else float(s[2]))
                                   for s in raw)
    return samples, None if cores is None else float(cores)


def verdict(step: dict[str, Any]) -> tuple[bool | None, str]:
    """(client-bound?, the figure behind it) of one ``steps`` row with the ``client_*`` columns; None when
    nothing was measured."""
    on_time, p95 = step.get("client_on_time_fraction"), step.get("client_issue_lag_p95_ms")
    budget = step.get("client_lag_budget_ms")
    used, cores = step.get("client_cpu_cores"), step.get("client_cpu_cores_available")
    why: list[str] = []
    bound = False
    measured = False
    if on_time is not None:
        measured = True
        late = float(on_time) < MIN_ON_TIME
        bound |= late
        why.append(f"{float(on_time) * 100:.0f} % of requests issued on time (issue lag p95 "
                   f"{_ms(p95)} {'>' if late else '<='} budget {_ms(budget)})")
    if used is not None and cores:
        measured = True
        share = float(used) / float(cores)
        hot = share > MAX_CPU_SHARE
        bound |= hot
        why.append(f"AIPerf used {float(used):.2f} of {float(cores):g} cores ({share * 100:.0f} %"
                   f"{' > ' if hot else ' <= '}{MAX_CPU_SHARE * 100:.0f} %)")
    elif used is None:
        why.append("AIPerf's CPU not measured")
    wait = step.get("client_cpu_wait_fraction")
    if wait is not None:
        why.append(f"its processes waited for a CPU {float(wait) * 100:.0f} % of their runnable time")
    if not measured:
        return None, "not measured" + (f" ({why[-1]})" if why else "")
    return bound, "; ".join(why)


def _ms(v: Any) -> str:
    return "?" if v is None else f"{float(v):.1f} ms"
