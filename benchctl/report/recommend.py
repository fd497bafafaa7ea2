"""Recommendations: the plan's four scenarios (the first seed's table) confirmed, refuted or inconclusive from
the answers' verdicts, never from point estimates, and the regimes the data reveals (a crossover load).

A scenario is judged only by tests its answer's family decided (Holm's step-down, :mod:`benchctl.report.answers`),
or, for the multi-turn scenario, which no answer compares between the modes, by its own family judged the same
way (TTFT p50 of each multi-turn variant, aggregated vs disaggregated):

* **confirmed**: every decided test favours the mode the plan expects (for the low-load scenario also: every
  interval lies within the practical threshold, so the simpler mode loses nothing);
* **refuted**: every decided test favours the other mode;
* **inconclusive**: nothing decided (why: the tests' reasons), or the decided tests disagree;
* **not measured**: the campaign has no test the scenario reads (what is missing is said).

Pure: the standard library and the core.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from benchctl.analysis.effects import DESCRIPTIVE, Compared, Point, adjust, crossovers, effects
from benchctl.analysis.verdicts import HIGHER, INCONCLUSIVE, LOWER, Sample, mean_interval, num_text
from benchctl.report.answers import TTFT
from benchctl.report.data import ReportData, num
from benchctl.report.evidence import (
    BASELINE,
    NOT_MEASURED,
    TREATMENT,
    Answer,
    Evidence,
    Pair,
    Shown,
    evidence_of,
    observations,
    shown,
)

AGG, DISAGG = "aggregated", "disaggregated"
CONFIRMED, REFUTED = "confirmed", "refuted"
LOW_LOAD = 8.0  # "fewer than 8 concurrent requests"
HIGH_LOAD = 32.0  # "32+ concurrent requests"
HIGH_HIT_RATE = 0.5  # what "a high cache hit rate" means here: at least half the input tokens served from cache

INTRO = ("The plan's scenarios (the first seed's table), each confirmed, refuted or inconclusive from the answers' "
         "verdicts only (tests decided by their family's Holm step-down), never from point estimates; \"not "
         "measured\" where the campaign has no test a scenario reads; then any regime the data reveals (a load "
         "where the better mode changes).")


@dataclass
class Recommendation:
    scenario: str
    expected: str  # what the plan expects
    outcome: str  # CONFIRMED | REFUTED | INCONCLUSIVE | NOT_MEASURED | "found" (a regime)
    recommended: str  # the mode the verdicts support, or ""
    evidence: str  # the answer, figure, change and interval, load range
    why: str

    def row(self) -> dict[str, str]:
        return {"scenario": self.scenario, "the plan expects": self.expected, "outcome": self.outcome,
                "recommended": self.recommended, "evidence": self.evidence, "why": self.why}


COLUMNS = ["scenario", "the plan expects", "outcome", "recommended", "evidence", "why"]


def _winner(c: Any, pair: Pair, modes: dict[str, str]) -> str | None:
    """The mode a decided test favours (None when it decided nothing)."""
    side = c.better if isinstance(c, Compared) else (
        TREATMENT if c.outcome == HIGHER else BASELINE if c.outcome == LOWER else None)
    return modes.get(pair.experiment(side)) if side else None


def _said(s: Shown) -> str:
    iv = s.c.change_interval
    return (f"{s.c.figure.label} at {s.point}: {num_text(s.c.change, s.c.shown_unit, signed=True)}"
            + (f", CI [{num_text(iv[0], signed=True)}, {num_text(iv[1], signed=True)}] {s.c.shown_unit}" if iv else ""))


def _all_said(shown_: Sequence[Shown]) -> str:
    """Each comparison once, then what each of its points says."""
    by: dict[str, list[str]] = {}
    for s in shown_:
        by.setdefault(s.where, []).append(_said(s))
    return " | ".join(f"{where}: {'; '.join(said)}" for where, said in by.items())


def _mode_pairs(shown: Iterable[Shown], modes: dict[str, str]) -> list[Shown]:
    """Points of a comparison of an aggregated and a disaggregated experiment."""
    return [s for s in shown if s.pair is not None
            and {modes.get(s.pair.baseline), modes.get(s.pair.treatment)} == {AGG, DISAGG}]


def _judge(tests: Sequence[tuple[Any, Pair, str]], expected: str, modes: dict[str, str]
           ) -> tuple[str, str, str]:
    """``(outcome, recommended, why)`` from tests ``(test, pair, what it says)``: decided tests vote for a mode."""
    votes: dict[str, list[str]] = {}
    for c, pair, said in tests:
        w = _winner(c, pair, modes)
        if w:
            votes.setdefault(w, []).append(said)
    if len(votes) == 1:
        mode, saids = next(iter(votes.items()))
        verdict = CONFIRMED if mode == expected else REFUTED
        return verdict, mode, f"{mode} better where decided: " + "; ".join(saids)
    if votes:
        return INCONCLUSIVE, "", "the decided tests disagree: " + "; ".join(
            f"{m} better at {'; '.join(s)}" for m, s in votes.items())
    reasons = sorted({c.reason for c, _, _ in tests if getattr(c, "reason", "")})
    return INCONCLUSIVE, "", "no test decided: " + ("; ".join(reasons) or "none could be made")


def _primary(a: Answer, figure: str) -> list[Shown]:
    return [s for s in a.effects if s.c.figure.label == figure and s.c.primary and s.c.outcome != DESCRIPTIVE]


def _low_load(q1: Answer, h1: Answer, modes: dict[str, str]) -> Recommendation:
    r = Recommendation(f"single model, fewer than {LOW_LOAD:g} concurrent requests", f"{AGG} (simplest, least "
                       "overhead)", NOT_MEASURED, "", "", "")
    shown_ = [s for s in _mode_pairs(_primary(q1, "TTFT p50") + _primary(h1, "ITL p50"), modes)
              if s.c.load is not None and s.c.load < LOW_LOAD and shown(s.c)]
    if not shown_:
        r.why = (f"no load below {LOW_LOAD:g} concurrent requests compared an {AGG} and a {DISAGG} experiment "
                 "(Q1, H1)")
        return r
    r.evidence = "Q1/H1: " + _all_said(shown_)
    r.outcome, r.recommended, r.why = _judge([(s.c, s.pair, _said(s)) for s in shown_ if s.pair], AGG, modes)
    if r.outcome == INCONCLUSIVE and not any(s.c.directional for s in shown_) and all(
            s.c.low is not None and s.c.high is not None and s.c.edges[0] < s.c.low and s.c.high < s.c.edges[1]
            for s in shown_):
        r.outcome, r.recommended = CONFIRMED, AGG
        r.why = (f"no practical difference below c={LOW_LOAD:g}: every interval lies within the practical threshold "
                 f"({shown_[0].c.threshold_text}), so the simpler mode loses nothing")
    return r


def _high_load(q1: Answer, modes: dict[str, str]) -> Recommendation:
    r = Recommendation(f"{HIGH_LOAD:g}+ concurrent requests under a strict SLA", f"{DISAGG} (stable TTFT: prefill "
                       "apart from decode)", NOT_MEASURED, "", "", "")
    every = [s for s in _mode_pairs(_primary(q1, "TTFT p50"), modes)
             if s.c.load is not None and s.c.load >= HIGH_LOAD and shown(s.c)]
    if not every:
        r.why = f"no load of {HIGH_LOAD:g} or more concurrent requests compared an {AGG} and a {DISAGG} experiment (Q1)"
        return r
    regimes = [(reg, pair) for pair, reg in q1.regimes
               if {modes.get(pair.baseline), modes.get(pair.treatment)} == {AGG, DISAGG}]
    # under a strict SLA a load that neither mode serves within the SLO is no operating point: its TTFT says which
    # mode fails worse, not which one to run; only loads at most the higher of the two shown limits vote
    served: dict[str, float] = {}
    for reg, pair in regimes:
        limits = [x.within for side in (0, 1) if (x := reg.regime(side, reg.confidence or 0.95)) is not None
                  and x.within is not None]
        served[f"{pair.label}, {reg.where}"] = max(limits, default=0.0)
    shown_ = [s for s in every if s.where not in served or (s.c.load or 0.0) <= served[s.where]]
    dropped = sorted({f"{s.point}" for s in every if s not in shown_}, key=lambda p: float(p.split("=")[-1]))
    tests: list[tuple[Any, Pair, str]] = [(s.c, s.pair, _said(s)) for s in shown_ if s.pair]
    tests += [(reg, pair, f"SLO limit ({reg.where}): {pair.treatment}'s is {reg.outcome} than {pair.baseline}'s")
              for reg, pair in regimes]
    r.evidence = "Q1: " + (_all_said(shown_) or "no TTFT test at a load either mode serves within the SLO") + (
        "; SLO limits compared: " + "; ".join(f"{reg.where} {reg.outcome}" + (f" ({reg.reason})" if reg.reason else "")
                                              for reg, _ in regimes) if regimes
        else "; no SLO set: judged on TTFT p50 alone, the SLA not measured") + (
        f"; left out: TTFT p50 at {', '.join(dropped)}, where neither mode is shown within the SLO" if dropped else "")
    r.outcome, r.recommended, r.why = _judge(tests, DISAGG, modes)
    return r


def _multi_turn(ev: Evidence, modes: dict[str, str]) -> Recommendation:
    r = Recommendation("multi-turn with a high cache hit rate", f"{DISAGG} (KV router + prefix cache)", NOT_MEASURED,
                       "", "", "")
    pairs, _ = ev.for_question("q1")
    pairs = [p for p in pairs if {modes.get(p.baseline), modes.get(p.treatment)} == {AGG, DISAGG}]
    found: list[Shown] = []
    rates: list[float] = []
    for pair in pairs:
        pts = ev.points(pair, "multi_turn", lambda row: (row.get("workload"), row.get("variant")))
        rates += [v for sides in pts.values() for rows in sides.values() for row in rows
                  if (v := num(row.get("cache_hit_rate"))) is not None]
        block = effects(TTFT, [Point(f"{wl} {variant}", None, observations(s[BASELINE], TTFT.column),
                                     observations(s[TREATMENT], TTFT.column))
                               for (wl, variant), s in pts.items()], pair.settings)
        found += [Shown(pair.label, c.where, c, pair) for c in block.effects if shown(c)]
    if not found:
        r.why = f"no multi-turn step on both sides of a comparison of an {AGG} and a {DISAGG} experiment"
        return r
    rate = sum(rates) / len(rates) if rates else None
    # the premise from an interval, never from a point estimate: the steps' hit rates (both sides, every repeat)
    conf = pairs[0].settings.confidence if pairs else 0.95
    iv = mean_interval(Sample(tuple(rates)), conf) if rates else None
    said = (f"{num_text(100 * rate, '%')}" + (f", {conf:.0%} CI [{num_text(100 * iv.low, '%')}, "
                                            f"{num_text(100 * iv.high, '%')}] over {len(rates)} steps" if iv else
                                            " (one step: no interval)")) if rate is not None else "not measured"
    r.evidence = f"hit rate over the multi-turn steps of both sides: {said}"
    if rate is None or iv is None or iv.high < HIGH_HIT_RATE:
        r.why = ("the premise does not hold: the multi-turn steps' server-measured cache hit rate is "
                 + (f"{said}, below {HIGH_HIT_RATE:.0%}" if iv is not None else
                    f"{said}: the premise cannot be shown (it needs an interval)" if rate is not None else said))
        if iv is None and rate is not None:
            r.outcome = INCONCLUSIVE
        return r
    if iv.low < HIGH_HIT_RATE:
        r.outcome = INCONCLUSIVE
        r.why = f"the premise is open: the multi-turn steps' hit rate is {said}, which straddles {HIGH_HIT_RATE:.0%}"
        return r
    tested = [s for s in found if s.pair is not None and s.pair.verified]
    if tested and tested[0].pair is not None:
        adjust([s.c for s in tested], tested[0].pair.settings)
    r.evidence = (f"TTFT p50 of each multi-turn variant, judged as one family by Holm's step-down (hit rate "
                  f"{num_text(100 * rate, '%')}): " + _all_said(found))
    r.outcome, r.recommended, r.why = _judge([(s.c, s.pair, _said(s)) for s in tested if s.pair], DISAGG, modes)
    if not tested:
        r.outcome, r.why = INCONCLUSIVE, "every comparison's transfer path is unverified"
    return r


def _cost(h4: Answer, modes: dict[str, str]) -> Recommendation:
    r = Recommendation("cost first", f"{DISAGG} with cheaper GPUs (L40S) for decode", NOT_MEASURED, "", "", "")
    shown_ = [s for s in h4.effects if s.c.primary and s.c.outcome != DESCRIPTIVE and shown(s.c)]
    if not shown_:
        r.why = (h4.verdict.removeprefix(f"{NOT_MEASURED}: ") if not h4.measured
                 else "H4 made no test (its comparisons are not comparable: see H4)")
        return r
    r.evidence = "H4 (SLO-meeting requests/s per $/h): " + _all_said(shown_)
    sides: dict[str, list[str]] = {}
    for s in shown_:
        if s.pair is not None and s.c.better:
            sides.setdefault(s.c.better, []).append(f"{s.pair.experiment(s.c.better)} at {s.point}")
    if len(sides) == 1:  # H4's treatment is the heterogeneous combination
        side, where = next(iter(sides.items()))
        r.outcome = CONFIRMED if side == TREATMENT else REFUTED
        r.recommended = ", ".join(sorted({w.split(" at ")[0] for w in where}))
        r.why = "more goodput per dollar-hour where decided: " + "; ".join(where)
    elif sides:
        r.outcome, r.why = INCONCLUSIVE, "the decided loads disagree: " + "; ".join(
            f"{'; '.join(w)}" for w in sides.values()) + " (the better experiment changes with the load)"
    else:
        r.outcome = INCONCLUSIVE
        r.why = "no test decided: " + ("; ".join(sorted({s.c.reason for s in shown_ if s.c.reason})) or "none made")
    return r


def _regimes(q1: Answer, modes: dict[str, str]) -> list[Recommendation]:
    """A crossover the data reveals: where the mode with the better TTFT p50 changes with the load."""
    by: dict[tuple[str, Any], list[Shown]] = {}
    for s in _mode_pairs(_primary(q1, "TTFT p50"), modes):
        by.setdefault((s.where, id(s.pair)), []).append(s)
    out = []
    for (where, _), got in by.items():
        pair = got[0].pair
        assert pair is not None
        for lo, hi, wa, wb in crossovers([(s.c.load or 0.0, s.c) for s in got]):
            below, above = modes.get(pair.experiment(wa)), modes.get(pair.experiment(wb))
            out.append(Recommendation(
                f"crossover load ({where})", "(revealed by the data)", "found", f"{below} up to c={lo:g}, {above} from "
                f"c={hi:g}", "Q1: " + _all_said([s for s in got if s.c.directional]),
                f"TTFT p50 decided for {below} at c={lo:g} and for {above} at c={hi:g}; between them not decided"))
    return out


def recommendations(data: ReportData, found: list[Answer]) -> list[Recommendation]:
    """The four scenarios of the plan, then any regime the data reveals."""
    by = {a.key: a for a in found}
    modes = data.modes
    return [_low_load(by["q1"], by["h1"], modes), _multi_turn(evidence_of(data), modes), _high_load(by["q1"], modes),
            _cost(by["h4"], modes), *_regimes(by["q1"], modes)]


__all__ = ["COLUMNS", "CONFIRMED", "INTRO", "REFUTED", "Recommendation", "recommendations"]
