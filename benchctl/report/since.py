"""Campaign over campaign, read through the query port (DuckDB locally, Athena on AWS: the same SQL): which two
campaigns (a campaign against the latest earlier one of the same spec, or one named), their ``v_history`` rows,
the settings, and the comparison (:mod:`benchctl.analysis.history`); its text for ``benchctl compare`` and its
section for the report. May import the standard library and the core."""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from benchctl.analysis.history import NO_DAY, CampaignComparison, compare_campaigns, day_spread
from benchctl.analysis.verdicts import Settings
from benchctl.lake.paths import check_path_value
from benchctl.lake.query import QueryPort
from benchctl.report.data import _rows, pick_campaign

TITLE = "Since the previous campaign of this spec"
HISTORY_PAIRS = 5  # the spec's earlier pairs of campaigns the day-to-day spread is measured from, at most
SECTION_ID = "since"
SHIFT_COLUMNS = ["figure", "points", "change", "interval", "level", "verdict"]
POINT_COLUMNS = ["point", "figure", "before", "after", "change", "interval"]
METHOD = ("each figure's change is the mean over every point (experiment, workload, variant, lengths, load) both "
          "campaigns measured with a valid step of the point's change (the log ratio of the geometric means over "
          "repeats), its interval from the points' scatter (Student's t; SLO-edge probes left out: their loads are "
          "chosen by what each campaign measured); TTFT p50, ITL p50 and output tokens/s are one family judged by "
          "Holm's step-down against the practical threshold, each interval widened by the day-to-day spread of a whole "
          "campaign (what repeats inside one campaign cannot show); \"no change\" where the interval at the comparison's "
          "confidence lies within the threshold; the other figures are descriptive. Something common to every "
          "point (the whole machine slower that day) is a change of the campaigns: read the provenance differences "
          "first")


class NoEarlierCampaign(ValueError):
    """The campaign has no earlier campaign of its spec to be compared with."""


def _started(r: dict[str, Any]) -> tuple[bool, datetime, str]:
    return (r.get("started_at") is not None, r.get("started_at") or datetime.min, str(r.get("campaign_id")))


def pick_pair(query: QueryPort, source: str, campaign_id: str | None, against: str | None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(before, after)`` campaigns rows: ``campaign_id`` (default the latest started) against ``against``
    (default the latest campaign of the same spec name started before it)."""
    after = pick_campaign(query, source, campaign_id)
    if against is not None:
        before = pick_campaign(query, source, against)
        if before["campaign_id"] == after["campaign_id"]:
            raise ValueError(f"--against {against!r} is the campaign being compared; name another")
        return before, after
    rows = _rows(query, "SELECT * FROM campaigns").rows
    earlier = [r for r in rows if r.get("spec_name") == after.get("spec_name") and r["campaign_id"] !=
               after["campaign_id"] and _started(r) < _started(after)]
    if not earlier:
        others = sorted(f"{r['campaign_id']} ({r.get('spec_name')})" for r in rows
                        if r["campaign_id"] != after["campaign_id"])
        raise NoEarlierCampaign(
            f"campaign {after['campaign_id']} (spec {after.get('spec_name')!r}) has no earlier campaign of the same "
            f"spec in {source}; name one with --against" + (f" (valid: {', '.join(others)})" if others else
                                                          " (the lake holds no other campaign)"))
    return max(earlier, key=_started), after


def _ids(ids: list[str]) -> str:
    return ", ".join(f"'{check_path_value('campaign_id', i)}'" for i in ids)  # path-safe ids: safe to quote


def _twins(query: QueryPort, ids: list[str]) -> dict[str, dict[str, str]]:
    """What timed each mocker worker, per campaign (the local engine's twins table; absent elsewhere)."""
    try:
        rows = _rows(query, f"SELECT campaign_id, experiment, role, label, num_gpu_blocks, note FROM twins "  # noqa: S608
                            f"WHERE campaign_id IN ({_ids(ids)})").rows
    except Exception:  # an AWS lake has no twins table
        return {}
    out: dict[str, dict[str, str]] = {}
    for r in rows:
        out.setdefault(str(r["campaign_id"]), {})[f"twin.{r['experiment']}.{r['role']}"] = (
            f"{r.get('label')} ({r.get('num_gpu_blocks')} KV blocks)" + (f"; {r['note']}" if r.get("note") else ""))
    return out


def _settings(query: QueryPort, cid: str) -> Settings:
    rows = _rows(query, f"SELECT * FROM comparisons WHERE campaign_id = '{cid}' "  # noqa: S608
                        "ORDER BY comparison_index").rows
    return Settings.from_row(rows[0]) if rows else Settings()


def _history(after: dict[str, Any], pair: tuple[str, str], campaigns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spec's succeeded campaigns started before ``after`` whose consecutive pairs measure the day spread:
    the last :data:`HISTORY_PAIRS` pairs (so that a spec run nightly costs the report a bounded read)."""
    rows = sorted((r for r in campaigns if r.get("spec_name") == after.get("spec_name")
                   and _started(r) < _started(after) and r.get("status") == "succeeded"), key=_started)
    return rows[-(HISTORY_PAIRS + 1):]


def load_comparison(query: QueryPort, source: str, campaign_id: str | None = None, against: str | None = None
                    ) -> CampaignComparison:
    """``campaign_id`` against ``against`` (defaults: :func:`pick_pair`), with the day spread measured from the
    spec's earlier pairs: three queries of the lake whatever its history (campaigns, v_history, twins)."""
    before, after = pick_pair(query, source, campaign_id, against)
    b, a = (check_path_value("campaign_id", str(x["campaign_id"])) for x in (before, after))
    history = _history(after, (b, a), _rows(query, "SELECT * FROM campaigns").rows)
    ids = list(dict.fromkeys([b, a, *(str(r["campaign_id"]) for r in history)]))
    steps: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    for r in _rows(query, f"SELECT * FROM v_history WHERE campaign_id IN ({_ids(ids)})").rows:  # noqa: S608
        steps[str(r["campaign_id"])].append(r)
    twins = _twins(query, ids)
    settings = _settings(query, a)
    earlier = [compare_campaigns(x, y, steps[str(x["campaign_id"])], steps[str(y["campaign_id"])], settings,
                                 extra_before=twins.get(str(x["campaign_id"])),
                                 extra_after=twins.get(str(y["campaign_id"])), point_intervals=False, day=NO_DAY)
               for x, y in itertools.pairwise(history) if (x["campaign_id"], y["campaign_id"]) != (b, a)]
    return compare_campaigns(before, after, steps[b], steps[a], settings, extra_before=twins.get(b),
                             extra_after=twins.get(a), day=day_spread(earlier))


def load_since(query: QueryPort, source: str, campaign_id: str) -> tuple[CampaignComparison | None, str]:
    """The report's comparison of its campaign with the previous one of its spec, or (None, why there is none)."""
    try:
        return load_comparison(query, source, campaign_id), ""
    except NoEarlierCampaign as e:
        return None, str(e).split("; name one with")[0]
    except Exception as e:
        return None, f"not compared: {type(e).__name__}: {e}"


def describe(c: CampaignComparison) -> str:
    sim = " (SIMULATED: not GPU measurements)" if c.simulated else ""
    return (f"campaign {c.after['campaign_id']} against {c.before['campaign_id']} (spec {c.after.get('spec_name')!r}; "
            f"started {c.before.get('started_at')} and {c.after.get('started_at')}){sim}")


def provenance_rows(c: CampaignComparison) -> list[dict[str, str]]:
    return [{"what": w, "before": b, "after": a} for w, b, a in c.provenance]


def text(c: CampaignComparison) -> str:
    """What ``benchctl compare`` prints: the provenance differences first, then figure by figure, then point by
    point."""
    from benchctl.analysis.formatting import format_result

    def table(cols: list[str], rows: list[dict[str, Any]]) -> str:
        return format_result(cols, [tuple(r.get(k) for k in cols) for r in rows], "table")

    out = [describe(c).capitalize(), "",
           f"What differs between the two campaigns ({len(c.provenance)}):" if c.provenance else
           "What differs between the two campaigns: nothing recorded (same spec hash, versions, engine and twins)"]
    if c.provenance:
        out += [table(["what", "before", "after"], provenance_rows(c))]
    out += ["", f"Figure by figure ({c.settings.confidence:.0%} confidence, practical threshold "
                f"+/-{c.settings.practical_threshold_pct:g} %, day-to-day spread {c.day.source}): {c.headline()}",
            table(SHIFT_COLUMNS, [s.row(c.settings) for s in c.shifts]), "", "Point by point (descriptive):",
            table(POINT_COLUMNS, c.point_rows())]
    if c.unmatched:
        out += ["", "Measured by one campaign only (not compared): " + "; ".join(c.unmatched)]
    out += ["", "Method: " + METHOD + "."]
    return "\n".join(out)


def html_section(data: Any, table: Any, esc: Any, sim: str) -> str:
    c: CampaignComparison | None = data.since
    if c is None:
        return (f'<section id="{SECTION_ID}" data-rows="0"><h2>{esc(TITLE)}{sim}</h2><p class="empty">'
                f"{esc(data.since_note or 'No earlier campaign of this spec in the lake.')}</p></section>")
    prov = (table(["what", "before", "after"], provenance_rows(c)) if c.provenance else
            '<p class="note">Nothing recorded differs (same spec hash, versions, engine and twins).</p>')
    return (f'<section id="{SECTION_ID}" data-rows="{len(c.shifts)}" data-before="{esc(str(c.before["campaign_id"]))}">'
            f"<h2>{esc(TITLE)}{sim}</h2><p class=\"desc\">{esc(describe(c).capitalize())}: "
            f"{esc(c.headline())}. Day-to-day spread of a whole campaign: {esc(c.day.source)}.</p><h3>What differs</h3>{prov}<h3>Figure by figure</h3>"
            + table(SHIFT_COLUMNS, [s.row(c.settings) for s in c.shifts])
            + '<details class="method"><summary>Point by point, and the method</summary>'
            + table(POINT_COLUMNS, c.point_rows())
            + f'<p class="note">{esc(METHOD)}.</p></details></section>')


def md_lines(data: Any, table: Any, text_: Any, tag: str) -> list[str]:
    c: CampaignComparison | None = data.since
    out = [f"## {TITLE}{tag}", ""]
    if c is None:
        return [*out, f"_{text_(data.since_note or 'No earlier campaign of this spec in the lake.')}_", ""]
    out += [text_(describe(c).capitalize() + ": " + c.headline() + f". Day-to-day spread of a whole campaign: "
                  f"{c.day.source}."), ""]
    out += ([table(["what", "before", "after"], provenance_rows(c)), ""] if c.provenance
            else ["_Nothing recorded differs (same spec hash, versions, engine and twins)._", ""])
    out += [table(SHIFT_COLUMNS, [s.row(c.settings) for s in c.shifts]), "", table(POINT_COLUMNS, c.point_rows()), "",
            f"_{text_(METHOD)}._", ""]
    return out


__all__ = [
    "METHOD",
    "POINT_COLUMNS",
    "SECTION_ID",
    "SHIFT_COLUMNS",
    "TITLE",
    "NoEarlierCampaign",
    "describe",
    "html_section",
    "load_comparison",
    "md_lines",
    "pick_pair",
    "provenance_rows",
    "text",
]
