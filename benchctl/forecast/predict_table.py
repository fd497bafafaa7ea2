"""The table ``benchctl predict`` prints: aiconfigurator's predictions (:mod:`benchctl.forecast.predict`), one line per
experiment x sweep step, then per experiment and sweep the loads predicted within the SLO and past it.

Pure: the standard library and benchctl only.
"""

from __future__ import annotations

from typing import Any

from benchctl.forecast.predict import LABEL, source
from benchctl.spec.settings import Slo


def slo_regimes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per experiment and concurrency-sweep workload (its ISL/OSL): the loads predicted within the SLO, those
    past it, and the highest load within it (None when none is), in row order. Repeats count once."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["experiment"], r["workload"])
        g = out.setdefault(key, {"experiment": r["experiment"], "mode": r["mode"], "workload": r["workload"],
                                 "isl": r["isl"], "osl": r["osl"], "within": [], "past": [], "unknown": []})
        bucket = {True: "within", False: "past", None: "unknown"}[r.get("within_slo")]
        if r["concurrency"] not in g[bucket]:
            g[bucket].append(r["concurrency"])
    for g in out.values():
        g["highest_within"] = max(g["within"], default=None)
    return list(out.values())


def format_predictions(rows: list[dict[str, Any]], slo: Slo | None = None) -> str:
    """A table of the predictions, one line per experiment x step (repeats share one line), then per
    experiment and sweep the highest load predicted within the SLO and the loads past it."""
    from benchctl.analysis.formatting import format_result

    columns = ("experiment", "steps", "c", "isl", "osl", "system", "ttft_ms", "wait_ms", "itl_ms", "out_tok_s",
               "tok_s_gpu", "gib_gpu", "fits", "slo")
    lines: dict[tuple[str, str, int, int, int], list[Any]] = {}
    problems: dict[str, str] = {}
    for r in rows:
        key = (r["experiment"], r["workload"], r["concurrency"], r["isl"], r["osl"])
        if key in lines:
            lines[key][1] += 1
            continue
        system = r["system"] or "-"
        if r["decode_system"] and r["decode_system"] != r["system"]:
            system += f"/{r['decode_system']}"
        verdict = r.get("within_slo")
        lines[key] = [r["experiment"], 1, r["concurrency"], r["isl"], r["osl"], system,
                      r["predicted_ttft_ms"], r.get("predicted_queue_ms"), r["predicted_itl_ms"],
                      r["predicted_output_tokens_per_s"], r["predicted_tokens_per_s_per_gpu"], r["memory_gb_per_gpu"],
                      None if r["fits_memory"] is None else ("yes" if r["fits_memory"] else "NO"),
                      None if verdict is None else ("within" if verdict else "PAST")]
        if r["predicted_ttft_ms"] is None:
            problems.setdefault(r["experiment"], r["note"])
    bounds = "no SLO in the spec" if slo is None or (slo.ttft_ms is None and slo.itl_ms is None) else (
        "SLO: " + ", ".join(f"{n} <= {v:g} ms" for n, v in (("TTFT", slo.ttft_ms), ("ITL", slo.itl_ms))
                            if v is not None))
    out = [f"{LABEL} ({rows[0]['source'] if rows else source()}); "
           "steps = concurrency-sweep steps sharing the line (repeats); wait_ms = waiting before the first token "
           f"(closed loop), included in ttft_ms; slo: both predicted figures within it ({bounds})",
           format_result(columns, list(lines.values()), "table")]
    for g in slo_regimes(rows):
        if not g["within"] and not g["past"]:
            continue
        high = "none" if g["highest_within"] is None else f"c={g['highest_within']}"
        past = ", ".join(str(c) for c in g["past"]) or "none"
        out.append(f"  {g['experiment']} ({g['mode']}) {g['workload']} ISL {g['isl']}/OSL {g['osl']}: highest load "
                   f"predicted within the SLO {high}; past it at c = {past}")
    out += [f"  {exp}: {note}" for exp, note in problems.items()]
    return "\n".join(out)
