"""Campaign over campaign: the same spec's steps in two campaigns (``v_history``), figure by figure and point by
point, with what differs between the campaigns listed first (spec hash, versions, driver, what served the
requests, the twins that timed a simulation).

Each figure is judged once over every point (a step key: experiment, workload, variant, input and output lengths,
load) both campaigns measured with a valid step, SLO-edge probes left out (their loads are chosen from what each
campaign measured): the **shift** is the mean over the points of each point's log ratio (after / before, the
geometric means over repeats). Its variance has two parts: the points' scatter around it (every noise that is not
common to all points: repeats, steps, the effect varying with the load), and twice the **day spread** (what is
common to all points of one campaign: its deployment, node, machine that day), which repeats inside one campaign
cannot show. The day spread is measured from the lake's earlier pairs of the spec's campaigns with nothing recorded
differing, never below :data:`DAY_SD_PCT`, which is assumed when there are none (Satterthwaite's degrees of
freedom, the day spread taken as known).

The primary figures (TTFT p50, ITL p50, output tokens/s) are one family judged by Holm's step-down at family-wise
alpha = 1 - ``confidence`` against the practical threshold, as the report's answers are; the others are
descriptive. A figure reads:

* ``higher`` / ``lower`` (better or worse): its interval at the level its Holm step used clears the threshold;
* ``no change``: its interval at ``confidence`` lies within the practical threshold;
* ``no change shown``: neither: no change is shown, and none as large as the threshold is ruled out;
* ``inconclusive``: no interval could be made (why: fewer than 3 matched points, ...).

Each point's own change is shown with its unadjusted interval where both campaigns ran at least 2 repeats of it.
Under the null (bench/compare_aa.py: A/A campaigns at the size of the seed plan) the share of campaign pairs
with any primary figure called a change is the figure a reader should know. Pure: the standard library and the
core.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchctl.analysis import inference
from benchctl.analysis.effects import (
    DESCRIPTIVE,
    Compared,
    Figure,
    Obs,
    Point,
    adjust,
    confidence_text,
    describe,
    effects,
    from_estimate,
)
from benchctl.analysis.verdicts import INCONCLUSIVE, Sample, Settings, num_text

PRIMARY = (Figure("ttft_p50_ms", "TTFT p50", "ms", True), Figure("itl_p50_ms", "ITL p50", "ms", True),
           Figure("output_tokens_per_s", "output tokens/s", "tok/s", False))
DESCRIPTIVE_FIGURES = (Figure("ttft_p99_ms", "TTFT p99", "ms", True), Figure("itl_p99_ms", "ITL p99", "ms", True),
                       Figure("request_latency_p50_ms", "request latency p50", "ms", True),
                       Figure("goodput_per_s", "goodput (SLO-meeting requests/s)", "req/s", False))
KEY = ("experiment", "workload_kind", "workload", "variant", "isl", "osl", "concurrency")
MIN_POINTS = 3  # a shift's interval rests on the points' scatter: 2 points leave it one degree of freedom
# The spread of a whole campaign's level from one campaign to the next of the same spec with nothing recorded
# differing (another deployment, node, day): what no point's scatter shows. Assumed when the lake holds no earlier
# such pair to measure it; measured (never below this) when it does. Under the null, without it, a 2 % day-to-day
# spread made 7-12 % of seed-plan-sized A/A pairs read a change (bench/compare_aa.py).
DAY_SD_PCT = 2.0
NO_CHANGE = "no change"
# what is compared between the two campaigns' rows (the campaigns table) besides versions_json, flattened
PROVENANCE = ("spec_name", "spec_hash", "model", "engine", "simulated", "worker_engine", "dynamo_version",
              "vllm_version", "torch_version", "cuda_version", "nixl_version", "kubernetes_version", "gpu_driver",
              "nixl_registration", "dashboards_sha256", "server_metrics_interval_s", "prometheus_scrape_interval")


@dataclass(frozen=True)
class DaySpread:
    """The sd of a whole campaign's log level between campaigns (:data:`DAY_SD_PCT`), and where it comes from."""

    sd: float
    source: str

    @classmethod
    def assumed(cls) -> DaySpread:
        return cls(math.log1p(DAY_SD_PCT / 100.0), f"assumed {DAY_SD_PCT:g} % (the lake holds no earlier pair of "
                                                   "this spec's campaigns with nothing recorded differing to measure "
                                                   "it)")


NO_DAY = DaySpread(0.0, "none (the points' scatter only)")


def day_spread(history: Sequence[CampaignComparison]) -> DaySpread:
    """From earlier pairs of the spec's campaigns with nothing recorded differing (each compared with
    :data:`NO_DAY`): E[shift^2] = 2 day^2 + se^2, pooled over their primary figures; never below the assumed."""
    parts = [(s.estimate ** 2 - s.se ** 2) / 2.0 for c in history if not c.provenance for s in c.shifts
             if s.primary and s.estimate is not None and s.se is not None]
    assumed = DaySpread.assumed()
    if not parts:
        return assumed
    measured = math.sqrt(max(0.0, sum(parts) / len(parts)))
    pairs = sum(1 for c in history if not c.provenance)
    said = f"{100 * math.expm1(measured):.2g} %"
    if measured <= assumed.sd:
        return DaySpread(assumed.sd, f"{DAY_SD_PCT:g} % (measured {said} over {pairs} earlier pair(s) of this spec's "
                                     f"campaigns with nothing recorded differing; never taken below {DAY_SD_PCT:g} %)")
    return DaySpread(measured, f"{said}, measured over {pairs} earlier pair(s) of this spec's campaigns with "
                               "nothing recorded differing")


@dataclass
class Shift:
    """One figure over every matched point: ``c`` the mean log ratio judged as any compared figure is (its
    interval, threshold and Holm step: :class:`benchctl.analysis.effects.Compared`); ``nominal`` its interval
    at the comparison's confidence, unadjusted (what "no change" reads)."""

    c: Compared
    points: int
    nominal: tuple[float, float] | None = None
    day_assumed: bool = False  # the day spread in its interval is the assumed floor, not measured


    @property
    def figure(self) -> Figure:
        return self.c.figure

    @property
    def primary(self) -> bool:
        return self.c.primary and self.c.outcome != DESCRIPTIVE

    @property
    def estimate(self) -> float | None:
        return self.c.estimate

    @property
    def se(self) -> float | None:
        return self.c.se

    @property
    def low(self) -> float | None:
        return self.c.low

    @property
    def high(self) -> float | None:
        return self.c.high

    @property
    def directional(self) -> bool:
        return self.c.directional

    @property
    def no_change(self) -> bool:
        e = self.c.edges
        return not self.directional and self.nominal is not None and e[0] < self.nominal[0] and self.nominal[1] < e[1]

    @staticmethod
    def pct(x: float) -> float:
        return 100.0 * math.expm1(x)

    def verdict(self) -> str:
        if self.directional:
            said = f"{self.c.outcome} ({'better' if self.c.better == 'treatment' else 'worse'})"
            # until the spec's earlier campaigns measure the day-to-day spread, a change this size may also be a
            # day larger than the assumed floor: said so, not hidden
            return said + (f", or a day-to-day effect over the assumed {DAY_SD_PCT:g} %" if self.day_assumed else "")
        if self.c.outcome == DESCRIPTIVE:
            return DESCRIPTIVE
        if self.no_change:
            return NO_CHANGE
        if self.c.p is None:
            return f"{INCONCLUSIVE} ({self.c.reason})"
        return f"{NO_CHANGE} shown (the interval reaches past the practical threshold: too noisy to rule one out)"

    def row(self, settings: Settings) -> dict[str, Any]:
        iv = self.c.change_interval
        level = self.c.confidence if iv is not None else None
        return {"figure": f"{self.figure.label} ({self.figure.unit})", "points": self.points,
                "change": num_text(self.c.change, "%", signed=True) if self.c.change is not None else "",
                "interval": f"[{num_text(iv[0], signed=True)}, {num_text(iv[1], signed=True)}] %" if iv else "",
                "level": confidence_text(level) if level is not None else "", "verdict": self.verdict()}


@dataclass
class CampaignComparison:
    before: dict[str, Any]  # the campaigns rows
    after: dict[str, Any]
    settings: Settings
    provenance: list[tuple[str, str, str]] = field(default_factory=list)  # (what, before, after)
    shifts: list[Shift] = field(default_factory=list)
    points: list[tuple[str, Compared]] = field(default_factory=list)  # (step key, a figure's change there)
    unmatched: list[str] = field(default_factory=list)
    day: DaySpread = field(default_factory=DaySpread.assumed)

    @property
    def simulated(self) -> bool:
        return bool(self.before.get("simulated") or self.after.get("simulated"))

    def headline(self) -> str:
        said = [f"{s.figure.label} {s.verdict()}" for s in self.shifts if s.primary]
        return "; ".join(said)

    def point_rows(self) -> list[dict[str, Any]]:
        out = []
        for where, c in self.points:
            iv = c.change_interval
            out.append({"point": where, "figure": c.figure.label, "before": _r(c.base.mean), "after": _r(c.treat.mean),
                        "change": num_text(c.change, "%", signed=True) if c.change is not None else "",
                        "interval": (f"[{num_text(iv[0], signed=True)}, {num_text(iv[1], signed=True)}] %"
                                     if iv else c.reason or "")})
        return out


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def _flat(prefix: str, v: Any, out: dict[str, str]) -> None:
    if isinstance(v, dict):
        for k, x in sorted(v.items()):
            _flat(f"{prefix}.{k}" if prefix else str(k), x, out)
    else:
        out[prefix] = "" if v is None else str(v)


def provenance_differences(before: dict[str, Any], after: dict[str, Any],
                           extra_before: dict[str, str] | None = None, extra_after: dict[str, str] | None = None
                           ) -> list[tuple[str, str, str]]:
    """``(what, before, after)`` for every provenance field that differs: the campaigns row's, versions_json's
    (flattened: ``experiments.agg.precision``) and ``extra_*`` (e.g. the twins that timed the workers)."""
    def fields(row: dict[str, Any], extra: dict[str, str] | None) -> dict[str, str]:
        out = {k: "" if row.get(k) is None else str(row.get(k)) for k in PROVENANCE}
        try:
            versions = json.loads(row.get("versions_json") or "{}")
        except ValueError:
            versions = {"versions_json": str(row.get("versions_json"))}
        _flat("versions", versions, out)
        out.update(extra or {})
        return out

    b, a = fields(before, extra_before), fields(after, extra_after)
    return [(k, b.get(k, "(absent)"), a.get(k, "(absent)")) for k in sorted(set(b) | set(a))
            if b.get(k, "(absent)") != a.get(k, "(absent)")]


def _key_text(k: tuple[Any, ...]) -> str:
    exp, kind, workload, variant, isl, osl, conc = k
    lengths = f" ISL {_v(isl)}/OSL {_v(osl)}" if isl is not None else ""
    return f"{exp} {workload or kind} {variant}{lengths}" + (f" c={_v(conc)}" if conc is not None and
                                                           f"c{_v(conc)}" != str(variant) else "")


def _natural(k: tuple[Any, ...]) -> tuple[tuple[int, Any], ...]:
    """Step keys in reading order: experiment, workload, lengths, load (numbers as numbers: c4 before c16), then
    the variant."""
    out: list[tuple[int, Any]] = []
    for x in (*k[:3], *k[4:], k[3]):
        if isinstance(x, int | float) and not isinstance(x, bool):
            out.append((0, float(x)))
        else:
            out.append((1, "" if x is None else str(x)))
    return tuple(out)


def _v(x: Any) -> str:
    if x is None:
        return "-"
    try:
        return f"{float(x):g}"
    except (TypeError, ValueError):
        return str(x)


def _shift(fig: Figure, block: Sequence[Compared], settings: Settings, primary: bool, day: DaySpread) -> Shift:
    d = [c.estimate for c in block if c.estimate is not None]
    none = Sample(())

    def unjudged(why: str, estimate: float | None = None) -> Shift:
        c = Compared(fig, "every point", none, none, primary=primary, estimate=estimate, edges=fig.edges(settings),
                     threshold_text=fig.threshold_text(settings), reason=why)
        return Shift(c, len(d))

    if not d:
        return unjudged("no point measured by both campaigns")
    est = math.fsum(d) / len(d)
    if len(d) < MIN_POINTS:
        return unjudged(f"{len(d)} matched point(s): at least {MIN_POINTS} are needed for an interval", est)
    sd = math.sqrt(math.fsum((x - est) ** 2 for x in d) / (len(d) - 1))
    if not sd > 0:
        return unjudged("every point changed by exactly the same amount: no measure of noise", est)
    scatter = sd * sd / len(d)
    # the two campaigns' levels each move by the day spread: its variance (taken as known) adds to the scatter's
    var = scatter + 2.0 * day.sd ** 2
    df = min(inference.NORMAL_DF, var ** 2 / (scatter ** 2 / (len(d) - 1)))
    c = from_estimate(fig, "every point", none, none, est, math.sqrt(var), df, settings, primary=primary)
    if not primary:
        describe([c], settings)
    return Shift(c, len(d), inference.interval(est, math.sqrt(var), df, settings.confidence),
                 day.source.startswith("assumed"))


def compare_campaigns(before: dict[str, Any], after: dict[str, Any], before_steps: Sequence[dict[str, Any]],
                      after_steps: Sequence[dict[str, Any]], settings: Settings | None = None, *,
                      extra_before: dict[str, str] | None = None, extra_after: dict[str, str] | None = None,
                      point_intervals: bool = True, day: DaySpread | None = None) -> CampaignComparison:
    """``after`` against ``before``: their ``v_history`` rows (valid steps count, probes left out);
    ``point_intervals``: give each point its own interval too (what the reader sees; a simulation of many
    comparisons needs only the figures'); ``day``: the day-to-day spread (default :meth:`DaySpread.assumed`)."""
    settings = settings or Settings()
    out = CampaignComparison(before, after, settings,
                             provenance_differences(before, after, extra_before, extra_after),
                             day=day or DaySpread.assumed())
    sides: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for side, rows in (("before", before_steps), ("after", after_steps)):
        for r in rows:
            if r.get("search_probe") is not None:
                continue
            sides.setdefault(tuple(r.get(k) for k in KEY), {"before": [], "after": []})[side].append(r)
    matched = sorted((k for k, v in sides.items() if v["before"] and v["after"]), key=_natural)
    out.unmatched = sorted(f"{_key_text(k)}: only {'before' if v['before'] else 'after'}"
                           for k, v in sides.items() if not (v["before"] and v["after"]))

    def obs(rows: list[dict[str, Any]], column: str) -> tuple[Obs, ...]:
        by: dict[Any, list[float]] = {}
        for r in rows:
            v = r.get(column)
            if r.get("valid") and v is not None:
                by.setdefault(r.get("repeat"), []).append(float(v))
        return tuple(Obs(sum(vs) / len(vs)) for _, vs in sorted(by.items(), key=lambda kv: str(kv[0])))

    tests = []
    for fig in (*PRIMARY, *DESCRIPTIVE_FIGURES):
        points = [Point(_key_text(k), None if k[6] is None else float(k[6]), obs(sides[k]["before"], fig.column),
                        obs(sides[k]["after"], fig.column)) for k in matched]
        block = effects(fig, points, settings, primary=False)
        if point_intervals:  # each point's own change: descriptive, an unadjusted interval where it has one
            describe(block.effects, settings)
        else:
            for c in block.effects:
                c.outcome = DESCRIPTIVE
        out.points += [(c.where, c) for c in block.effects if c.base.n and c.treat.n]
        shift = _shift(fig, block.effects, settings, fig in PRIMARY, out.day)
        out.shifts.append(shift)
        if shift.primary and shift.c.p is not None:
            tests.append(shift.c)
    adjust(tests, settings)
    return out


__all__ = ["DAY_SD_PCT", "NO_CHANGE", "NO_DAY", "CampaignComparison", "DaySpread", "Shift", "compare_campaigns",
           "day_spread", "provenance_differences"]
