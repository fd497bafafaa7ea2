"""``benchctl calibrate``: a timing profile for the mocker fitted from a campaign's measured steps.

The loop this closes: a campaign measured on GPUs (or a twin rehearsal) leaves per-request records in the lake;
the fit turns them into the two curves the Dynamo mocker times itself by (``benchctl.forecast.twin_profile``), so the
next local rehearsal replays the measured hardware instead of a guess.

What the mocker does with the curves (Dynamo ``lib/mocker/src/common/perf_model.rs``, ``PerfModel::Interpolated``):
a prefill of a batch takes ``prefill_ttft_ms`` interpolated at ``batch_size x new tokens per request``; a decode
iteration takes ``decode_itl`` interpolated bilinearly at (the batch's summed context lengths, their mean), at
least 1 ms; both interpolations extrapolate linearly past the grid's edges. A decode worker spends no prefill
time and a prefill worker no decode iterations, so one profile serves both roles of a disaggregated experiment.

What is fitted, per experiment (:func:`calibrate`), from its succeeded concurrency-sweep steps (one ISL and OSL
each; the other workloads' mixed lengths, histories and prefix shares are left out):

* **prefill**: TTFT against new input tokens (ISL less the tokens served from the prefix cache, as the mocker
  counts them; a full hit computes no prefill and is left out), from the concurrency-1 steps (a closed loop of
  one: no request waits behind another). Per distinct count the median TTFT; then least squares
  ``ttft = a + b*isl`` (``+ c*isl^2`` from :data:`QUADRATIC_FROM` distinct counts on). Which TTFT (``--ttft``):
  the router's (:data:`ROUTER_TTFT`, its mean per step against the step's mean new tokens: dispatch to first
  token, the engine's prefill and one hop) where every concurrency-1 step has it with one observation per
  request (a disaggregated router counts two per request: then not), else AIPerf's. AIPerf's TTFT is the
  engine's prefill plus the path around it (frontend, tokenisation, network hop, first token streamed), not
  separated; disaggregated, also the prefill -> decode handoff, KV transfer and the decode worker's first
  iteration. All of it goes to the prefill curve, so a twin replaying the profile adds its own local path once
  more (the provenance's ``attribution``); ``path_overhead_ms`` is AIPerf's mean minus the router's per step.
* **decode**: ITL against active KV tokens and context length, one point per step (any concurrency): the
  median of AIPerf's per-request ITL, at context = mean ISL + mean OSL / 2 (a request's mean context over its
  decode) and active KV per busy worker = max(concurrency / decoding replicas, 1) x context (the loop keeps
  ``concurrency`` requests decoding, the router spreads them evenly over the experiment's decoding workers).
  Least squares ``itl = d + e*kv (+ f*ctx)``: the context term only when the steps vary it (two distinct
  contexts and four points at least). Aggregated, a request's ITL also holds the prefills of the other
  requests its worker ran meanwhile (an iteration runs its prefill and decode one after the other):
  :func:`prefill_stalls` measures that from the records' own times and takes it out; the streaming path stays.

Both fits are evaluated on a grid over the measured domain only (:data:`GRID`); the provenance names the
campaign, the lake, the steps used, the points, the coefficients, the residuals and the domain, and says that
past it the mocker's figures are extrapolations. Too little data raises :class:`CalibrationError` (the CLI:
exit 2) naming what is missing and what would do; nothing is written then.

May import the standard library and the core; numpy lazily.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from benchctl.forecast.twin_profile import NAME_PATTERN, TimingProfile
from benchctl.lake.paths import check_path_value
from benchctl.lake.query import QueryPort

SWEEP = "concurrency_sweep"  # the workload whose steps are fitted (fixed ISL and OSL, closed loop)
QUADRATIC_FROM = 4  # distinct input lengths at concurrency 1 from which the prefill fit has an isl^2 term
MIN_DECODE_STEPS = 2  # steps (distinct active-KV points) the decode fit needs
CONTEXT_TERM_FROM = 4  # decode points from which a varied context gets its own term
GRID = (16, 16, 8)  # prefill points, decode KV points, decode context points
ROUTER_TTFT = "dynamo_component_router_time_to_first_token_seconds"
TTFT_SOURCES = ("auto", "router", "aiperf")  # auto: the router's where every concurrency-1 step has it, else AIPerf's
ROUTER_ATTRIBUTION = ("the router's TTFT at concurrency 1 (from the router's dispatch to the first token: the engine's "
                      "prefill and the router -> worker hop), the client, HTTP and frontend path left out: a twin "
                      "replaying the curve adds its own path once")
MOCKER_SOURCE = "ai-dynamo/dynamo lib/mocker/src/common/perf_model.rs (PerfModel::Interpolated)"
EXTRAPOLATION = ("the grid spans the measured ranges only; past them the mocker extrapolates linearly from the edge "
                 f"segments ({MOCKER_SOURCE}: Linear/Bilinear extrapolate(true)): not measured there. Decode was "
                 "measured at the listed (kv, ctx) points only: the grid's corners away from them (e.g. kv < ctx, a "
                 "batch below one request) are the fit's extrapolation")


class CalibrationError(ValueError):
    """The campaign cannot be calibrated (unknown, no records, too few steps); the message names what and what
    would do."""


@dataclass(frozen=True)
class Fit:
    terms: tuple[str, ...]  # "1", "isl", "isl^2", "kv", "ctx"
    coefficients: tuple[float, ...]
    points: tuple[tuple[float, ...], ...]  # (x..., measured)
    domain: dict[str, tuple[float, float]]

    def __call__(self, **x: float) -> float:
        return sum(c * _term(t, x) for t, c in zip(self.terms, self.coefficients, strict=True))

    def residuals_pct(self) -> list[float]:
        names = list(self.domain)
        return [(self(**dict(zip(names, p[:-1], strict=True))) - p[-1]) / p[-1] * 100.0 for p in self.points]

    def summary(self) -> dict[str, Any]:
        res = self.residuals_pct()
        return {"model": " + ".join(("" if t == "1" else f"{t}*") + f"c{i}" for i, t in enumerate(self.terms)),
                "coefficients": {f"c{i} ({t})": c for i, (t, c) in enumerate(zip(self.terms, self.coefficients,
                                                                                  strict=True))},
                "domain": {k: list(v) for k, v in self.domain.items()},
                "points": [list(p) for p in self.points],
                "residual_max_pct": max(abs(r) for r in res),
                "residual_rms_pct": (sum(r * r for r in res) / len(res)) ** 0.5}


def _term(term: str, x: dict[str, float]) -> float:
    if term == "1":
        return 1.0
    if term.endswith("^2"):
        return x[term[:-2]] ** 2
    return x[term]


def _lstsq(terms: tuple[str, ...], points: list[tuple[float, ...]], names: tuple[str, ...]) -> tuple[float, ...]:
    import numpy as np

    a = np.array([[_term(t, dict(zip(names, p[:-1], strict=True))) for t in terms] for p in points])
    y = np.array([p[-1] for p in points])
    scale = np.abs(a).max(axis=0)  # columns of very different size (1 vs kv^1): solve on scaled columns
    coef, *_ = np.linalg.lstsq(a / scale, y, rcond=None)
    return tuple(float(c) for c in coef / scale)


def fit_prefill(points: list[tuple[float, float]]) -> Fit:
    """``(isl, ttft_ms)`` medians, one per distinct input length -> the prefill fit."""
    isls = sorted({p[0] for p in points})
    if len(isls) < 2:
        raise CalibrationError(f"prefill: concurrency-1 requests at {len(isls)} distinct input length(s) "
                               f"({', '.join(f'{i:g}' for i in isls) or 'none'}); the fit needs at least 2: run "
                               "concurrency 1 at two or more ISLs (e.g. one concurrency_sweep workload per isl)")
    terms = ("1", "isl", "isl^2") if len(isls) >= QUADRATIC_FROM else ("1", "isl")
    pts = [tuple(map(float, p)) for p in sorted(points)]
    return Fit(terms, _lstsq(terms, pts, ("isl",)), tuple(pts), {"isl": (isls[0], isls[-1])})


def fit_decode(points: list[tuple[float, float, float]]) -> Fit:
    """``(active_kv_tokens, context_length, itl_ms)``, one per step -> the decode fit."""
    kvs = sorted({p[0] for p in points})
    if len(kvs) < MIN_DECODE_STEPS:
        raise CalibrationError(f"decode: {len(points)} step(s) at {len(kvs)} distinct active-KV load(s); the fit "
                               f"needs at least {MIN_DECODE_STEPS}: run two or more concurrencies")
    ctxs = sorted({p[1] for p in points})
    varied = len(ctxs) >= 2 and len(points) >= CONTEXT_TERM_FROM and (ctxs[-1] - ctxs[0]) > 0.01 * ctxs[-1]
    terms = ("1", "kv", "ctx") if varied else ("1", "kv")
    pts = [tuple(map(float, p)) for p in sorted(points)]
    return Fit(terms, _lstsq(terms, pts, ("kv", "ctx")), tuple(pts),
               {"kv": (kvs[0], kvs[-1]), "ctx": (ctxs[0], ctxs[-1])})


def _linspace(lo: float, hi: float, n: int) -> list[float]:
    if hi <= lo:  # one measured value: a flat second point (the mocker's axes must increase)
        return [lo, lo + 1.0]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def profile_from_fits(prefill: Fit, decode: Fit, provenance: dict[str, Any]) -> TimingProfile:
    """Both fits evaluated on the grid over their measured domain, as the mocker's NPZ arrays."""
    isl = _linspace(*prefill.domain["isl"], GRID[0])
    kv = _linspace(*decode.domain["kv"], GRID[1])
    ctx = _linspace(*decode.domain["ctx"], GRID[2])
    ttft = [prefill(isl=x) for x in isl]
    itl = [[decode(kv=k, ctx=c) for c in ctx] for k in kv]
    bad = [("prefill_ttft_ms", v) for v in ttft if v <= 0] + [("decode_itl", v) for row in itl for v in row if v <= 0]
    if bad:
        raise CalibrationError(f"the fitted {bad[0][0]} is {bad[0][1]:.3g} ms (not positive) inside the measured "
                               "domain: the measurements do not follow the model (see the points); not written")
    return TimingProfile(tuple(isl), tuple(ttft), tuple(kv), tuple(ctx), tuple(tuple(r) for r in itl),
                         provenance).check("calibrated profile")


# ------------------------------------------------------------------------------------------- the campaign


@dataclass(frozen=True)
class Calibration:
    experiment: str
    mode: str
    name: str
    profile: TimingProfile
    prefill: Fit
    decode: Fit


def _rows(query: QueryPort, sql: str) -> list[dict[str, Any]]:
    cols, rows = query.run(sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def default_name(campaign_id: str, experiment: str) -> str:
    name = f"{campaign_id}-{experiment}".replace("_", "-")[:128]
    if not NAME_PATTERN.match(name):
        raise CalibrationError(f"cannot derive a profile name from campaign {campaign_id!r} and experiment "
                               f"{experiment!r}; give --name matching {NAME_PATTERN.pattern}")
    return name


def _roles(mode: str) -> dict[str, str]:
    if mode == "disaggregated":
        return {"prefill": "the prefill curve (TTFT measured end to end: KV transfer and the decode worker's first "
                           "iteration included)", "decode": "the decode curve"}
    return {"worker": "both curves"}


def calibrate(query: QueryPort, campaign_id: str, lake: str, *, experiments: list[str] | None = None,
              name: str | None = None, ttft: str = "auto") -> list[Calibration]:
    """One fitted profile per experiment of ``campaign_id`` (or the ``experiments`` named), nothing written.
    ``ttft``: which TTFT the prefill curve is fitted on (:data:`TTFT_SOURCES`)."""
    if ttft not in TTFT_SOURCES:
        raise CalibrationError(f"--ttft {ttft}: valid: {', '.join(TTFT_SOURCES)}")
    cid = check_path_value("campaign_id", campaign_id)
    known = sorted({r["campaign_id"] for r in _rows(query, "SELECT DISTINCT campaign_id FROM steps")})
    if cid not in known:
        raise CalibrationError(f"--campaign {cid}: no steps of it in {lake}; campaigns with steps: "
                               f"{', '.join(known) or 'none (run or ingest a campaign first)'}")
    steps = _rows(query, f"SELECT experiment, mode, step_id, concurrency, status, workload_kind FROM steps "  # noqa: S608
                         f"WHERE campaign_id = '{cid}' ORDER BY experiment, step_index, step_id")
    reqs = _rows(query, "SELECT experiment, step_id, isl, osl, cached_tokens, ttft_ms, itl_ms, start_ns, end_ns "  # noqa: S608
                        f"FROM requests "
                        f"WHERE campaign_id = '{cid}' AND error_code IS NULL AND error_type IS NULL")
    if not reqs:
        raise CalibrationError(f"--campaign {cid}: {lake} holds no successful request records of it (the requests "
                               "table); calibrate fits per-request TTFT and ITL: ingest the steps' AIPerf "
                               "profile_export.jsonl (benchctl ingest) or give the lake of the run")
    modes = {s["experiment"]: s["mode"] or "aggregated" for s in steps}
    replicas = _decode_replicas(_rows(query, f"SELECT experiment, workers_json FROM experiments "  # noqa: S608
                                             f"WHERE campaign_id = '{cid}'"))
    chosen = experiments or sorted(modes)
    unknown = [e for e in chosen if e not in modes]
    if unknown:
        raise CalibrationError(f"--experiment {', '.join(unknown)}: not in campaign {cid}; valid: "
                               f"{', '.join(sorted(modes))}")
    if name is not None and len(chosen) != 1:
        raise CalibrationError(f"--name {name}: one name for {len(chosen)} experiments ({', '.join(chosen)}); "
                               "give --experiment too, or leave the names to their default <campaign>-<experiment>")
    by_step: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in reqs:
        by_step[(r["experiment"], r["step_id"])].append(r)
    out = []
    for exp in chosen:
        ok = [s for s in steps if s["experiment"] == exp and s["status"] == "succeeded" and s["concurrency"]
              and s["workload_kind"] == SWEEP]  # one fixed ISL/OSL per step: the means below mean what they say
        try:
            c1 = [s["step_id"] for s in ok if s["concurrency"] == 1 and by_step.get((exp, s["step_id"]))]
            router = _router_ttft(query, cid, exp, c1)
            lacking = [sid for sid in c1 if router.get(sid, (0.0, 0.0))[1] != len(by_step[(exp, sid)])]
            if ttft == "router" and (lacking or not c1):
                raise CalibrationError(f"--ttft router: concurrency-1 step(s) {', '.join(lacking) or 'none'} lack "
                                       f"{ROUTER_TTFT} with one observation per request (a disaggregated router "
                                       "counts two); valid: --ttft aiperf (end to end), or auto")
            source = "router" if c1 and not lacking and ttft != "aiperf" else "aiperf"
            prefill_pts, prefill_steps = _prefill_points(ok, by_step, exp, router if source == "router" else None)
            prefill = fit_prefill(prefill_pts)
            decode_pts, decode_steps, shares = _decode_points(ok, by_step, exp, replicas.get(exp, 1),
                                                              modes[exp] == "aggregated")
            decode = fit_decode(decode_pts)
        except CalibrationError as err:
            raise CalibrationError(f"campaign {cid}, experiment {exp}: {err}") from None
        prof_name = name or default_name(cid, exp)
        provenance = {
            "source": "calibrate", "label": f"SIMULATED on the twin calibrated from campaign {cid} ({exp})",
            "campaign_id": cid, "experiment": exp, "mode": modes[exp],
            "lake": lake, "fitted_at": datetime.now(UTC).isoformat(timespec="seconds"), "name": prof_name,
            "roles": _roles(modes[exp]),
            "prefill": {**prefill.summary(), "steps": prefill_steps, "ttft_source": source,
                        "x": "new input tokens of one request (ISL - cached tokens; concurrency 1)"
                             + (", the step's mean" if source == "router" else ""),
                        "y": (f"the router's mean TTFT of the step, ms ({ROUTER_TTFT})" if source == "router"
                              else "median of AIPerf's TTFT, ms (end to end)"),
                        "path_overhead_ms": _path_overhead(router, prefill_steps, by_step, exp)},
            "decode": {**decode.summary(), "steps": decode_steps,
                       "x": "kv: max(concurrency / decoding replicas, 1) x (mean ISL + mean OSL/2); ctx: mean ISL + "
                            "mean OSL/2", "decoding_replicas": replicas.get(exp, 1),
                       "y": "median of AIPerf's per-request ITL, ms, less the other requests' prefills it "
                            "waited for (prefill_share_ms: the median share taken out per step)",
                       "prefill_share_ms": shares},
            "attribution": {
                "ttft": (ROUTER_ATTRIBUTION if source == "router" else
                         "measured end to end at concurrency 1: prefill plus frontend, tokenisation, network hop and "
                         "first-token streaming" + ("; disaggregated: plus the prefill -> decode KV transfer and the "
                                                    "decode worker's first iteration" if modes[exp] == "disaggregated"
                                                    else "") + " -- all attributed to the prefill curve"),
                "itl": "measured per request: decode iterations plus streaming, attributed to the decode curve; "
                       "aggregated, the other requests' prefills overlapping its decode (from the records' "
                       "times: prefill_share_ms) taken out"},
            "domain_note": EXTRAPOLATION,
        }
        out.append(Calibration(exp, modes[exp], prof_name, profile_from_fits(prefill, decode, provenance),
                               prefill, decode))
    return out


def _prefill_points(steps: list[dict[str, Any]], by_step: dict[tuple[str, str], list[dict[str, Any]]],
                    exp: str, router: dict[str, tuple[float, float]] | None
                    ) -> tuple[list[tuple[float, float]], list[str]]:
    """Per distinct new-token count, the median TTFT: AIPerf's per request, or (``router``) the router's mean
    per step against the step's mean new tokens (a full prefix hit counts 0: the router's mean holds it too)."""
    ttfts: dict[int, list[float]] = defaultdict(list)
    used = []
    for s in steps:
        if s["concurrency"] != 1:
            continue
        if router is not None:
            rs = [r for r in by_step.get((exp, s["step_id"]), []) if r["isl"]]
            if rs and s["step_id"] in router:
                used.append(s["step_id"])
                x = statistics.fmean(r["isl"] - (r["cached_tokens"] or 0) for r in rs)
                ttfts[round(x)].append(router[s["step_id"]][0])
            continue
        rs = [r for r in by_step.get((exp, s["step_id"]), []) if r["isl"] and r["ttft_ms"] is not None
              and r["isl"] - (r["cached_tokens"] or 0) > 0]  # a full prefix hit computes no prefill
        if rs:
            used.append(s["step_id"])
        for r in rs:
            ttfts[int(r["isl"] - (r["cached_tokens"] or 0))].append(float(r["ttft_ms"]))
    if not ttfts:
        raise CalibrationError("prefill: no successful concurrency-1 step with request records (ISL, TTFT, tokens "
                               "not served from the prefix cache); "
                               "the fit needs concurrency 1 at two or more input lengths")
    return [(float(isl), statistics.median(v)) for isl, v in sorted(ttfts.items())], used


def _router_ttft(query: QueryPort, cid: str, exp: str, step_ids: list[str]) -> dict[str, tuple[float, float]]:
    """Per step: (the router's mean TTFT in ms, its observation count), from the step's server metrics."""
    if not step_ids:
        return {}
    ids = ", ".join(f"'{check_path_value('step_id', s)}'" for s in step_ids)
    rows = _rows(query, "SELECT step_id, stat, sum(value) AS value FROM server_metrics "  # noqa: S608
                        f"WHERE campaign_id = '{cid}' AND experiment = '{check_path_value('experiment', exp)}' "
                        f"AND step_id IN ({ids}) AND metric = '{ROUTER_TTFT}' "
                        "AND stat IN ('sum', 'count') GROUP BY step_id, stat")
    got: dict[str, dict[str, float]] = defaultdict(dict)
    for r in rows:
        got[r["step_id"]][r["stat"]] = float(r["value"])
    return {sid: (v["sum"] / v["count"] * 1000.0, v["count"]) for sid, v in got.items()
            if v.get("count") and "sum" in v}


def _path_overhead(router: dict[str, tuple[float, float]], step_ids: list[str],
                   by_step: dict[tuple[str, str], list[dict[str, Any]]], exp: str) -> dict[str, float]:
    """Per concurrency-1 step: AIPerf's mean TTFT minus the router's (the client -> frontend -> router path)."""
    out = {}
    for sid in step_ids:
        ttfts = [float(r["ttft_ms"]) for r in by_step.get((exp, sid), []) if r["ttft_ms"] is not None]
        if sid in router and ttfts:
            out[sid] = round(statistics.fmean(ttfts) - router[sid][0], 2)
    return out


def _decode_replicas(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Per experiment, the worker processes that decode (role worker or decode): a profile times one of them,
    and the router spreads the closed loop's requests over them."""
    out = {}
    for r in rows:
        try:
            groups = json.loads(r["workers_json"] or "[]")
        except ValueError:
            groups = []
        n = sum(int(g.get("replicas") or 1) for g in groups if g.get("role") in ("worker", "decode"))
        out[r["experiment"]] = max(n, 1)
    return out


def prefill_stalls(records: list[dict[str, Any]], replicas: int = 1) -> list[float | None]:
    """Per request, the milliseconds of its decode (first token .. end) during which another request of the
    step was in its prefill (start .. its first token): an aggregated worker runs a step's prefill and decode
    one after the other, so each such overlap held back this request's next token. Divided by ``replicas``
    (the share of the others on the same worker, when the records do not say which worker). None: a record
    without its times."""
    spans: list[tuple[float, float, float] | None] = []
    for r in records:
        if r.get("start_ns") is None or r.get("end_ns") is None or r.get("ttft_ms") is None:
            spans.append(None)
        else:
            first = float(r["start_ns"]) + float(r["ttft_ms"]) * 1e6
            spans.append((float(r["start_ns"]), first, float(r["end_ns"])))
    out: list[float | None] = []
    for i, me in enumerate(spans):
        if me is None:
            out.append(None)
            continue
        cuts = sorted((max(o[0], me[1]), min(o[1], me[2])) for j, o in enumerate(spans)
                      if j != i and o is not None and min(o[1], me[2]) > max(o[0], me[1]))
        total, reach = 0.0, me[1]
        for a, b in cuts:  # the union of the overlaps
            if b > reach:
                total += b - max(a, reach)
                reach = b
        out.append(total / 1e6 / max(replicas, 1))
    return out


def _decode_points(steps: list[dict[str, Any]], by_step: dict[tuple[str, str], list[dict[str, Any]]],
                   exp: str, replicas: int, aggregated: bool
                   ) -> tuple[list[tuple[float, float, float]], list[str], dict[str, float]]:
    """One point per step; aggregated, each request's ITL less the other requests' prefills that held its
    decode back (:func:`prefill_stalls`, from the records' own times: a closed loop of equal lengths runs in
    lockstep, its prefills land in TTFT, not in ITL; a staggered one interleaves them)."""
    pts, used, shares = [], [], {}
    for s in steps:
        rs = [r for r in by_step.get((exp, s["step_id"]), []) if r["isl"] and r["osl"] and r["itl_ms"] is not None]
        if not rs:
            continue
        ctx = statistics.fmean(r["isl"] for r in rs) + statistics.fmean(r["osl"] for r in rs) / 2.0
        n = max(float(s["concurrency"]) / replicas, 1.0)  # requests per busy worker: never below one
        itls = [float(r["itl_ms"]) for r in rs]
        if aggregated and n > 1:
            stalls = prefill_stalls(by_step[(exp, s["step_id"])], replicas)
            stall_of = {id(r): st for r, st in zip(by_step[(exp, s["step_id"])], stalls, strict=True)}
            cut = [(stall_of[id(r)] or 0.0) / (r["osl"] - 1) if r["osl"] > 1 else 0.0 for r in rs]
            if any(cut):
                shares[s["step_id"]] = round(statistics.median(cut), 3)
                itls = [i - c for i, c in zip(itls, cut, strict=True)]
        pts.append((n * ctx, ctx, statistics.median(itls)))
        used.append(s["step_id"])
    return pts, used, shares


def curve_errors(known: TimingProfile, fitted: TimingProfile, prefill: Fit, decode: Fit,
                 n: int = 12) -> dict[str, float]:
    """The largest relative error (%) of ``fitted`` against ``known`` over the fits' measured domain: the
    prefill curve along its ISL range; the decode curve on the segments between every two measured (KV, context)
    points (the grid's corners away from them, e.g. a batch below one request, are the fit's extrapolation)."""
    lo, hi = prefill.domain["isl"]
    isls = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
    ttft = max(abs(fitted.ttft_ms(x) - known.ttft_ms(x)) / known.ttft_ms(x) for x in isls)
    pts = [(p[0], p[1]) for p in decode.points]
    line = [(a[0] + (b[0] - a[0]) * t / (n - 1), a[1] + (b[1] - a[1]) * t / (n - 1))
            for i, a in enumerate(pts) for b in pts[i:] for t in range(n)]
    itl = max(abs(fitted.itl_ms(k, c) - known.itl_ms(k, c)) / known.itl_ms(k, c) for k, c in line)
    return {"prefill_max_error_pct": ttft * 100.0, "decode_max_error_pct": itl * 100.0}
