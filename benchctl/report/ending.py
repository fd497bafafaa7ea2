"""How a campaign ended and its teardown receipt, as the report says them first: the ending (status, the state
it failed in, why), whether what follows is partial, and every resource the campaign created or changed with
its state read back after teardown (the ``receipt`` events of the timeline, ``benchctl.campaign.receipt``).
May import the standard library and the core."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchctl.lake import timeline
from benchctl.report.data import ReportData

RECEIPT_COLUMNS = ("experiment", "kind", "name", "action", "recorded", "now", "state", "why", "billing", "read_at")
SETTLED = ("gone", "restored", "handed over")
ENDINGS = {
    "succeeded": "SUCCEEDED",
    "failed": "FAILED",
    "aborted": "ABORTED",
    "stopped": "STOPPED FROM OUTSIDE (Step Functions' Stop execution, or the execution's timeout)",
    "failed-untorn": "FAILED, AND ITS TEARDOWN FAILED",
    "running": "NOT ENDED (still running, or its runner died: `benchctl sweep` ends it)",
}


@dataclass(frozen=True)
class Ending:
    status: str  # the campaigns row's status
    headline: str  # "FAILED in state CheckLoad: ServingFailed"
    cause: str  # why, as recorded (escapes stripped at the source)
    partial: bool  # what the report shows is what completed before the end
    receipt: list[dict[str, Any]]
    receipt_complete: bool  # every row read back gone/restored/handed over, no pool still billing
    # the headline's parts: what ENDINGS says (the report's own words), and the lake's failed state and error
    what: str = ""
    failed_state: str = ""
    error: str = ""

    def headline_in(self, esc: Callable[[str], str]) -> str:
        """The headline with the lake's words (the failed state, the error, a status ENDINGS does not know)
        through ``esc`` (a format's escaper: Markdown's ``md_text``), the report's own words as they are."""
        what = self.what if self.status in ENDINGS else esc(self.what)
        return what + (f" in state {esc(self.failed_state)}" if self.failed_state else "") + (
            f": {esc(self.error)}" if self.error else "")

    @property
    def still_billing(self) -> list[dict[str, Any]]:
        return [r for r in self.receipt if str(r.get("billing") or "").startswith(("still billing", "unknown: possibly"))]


def receipt_rows(data: ReportData) -> list[dict[str, Any]]:
    """The receipt rows of the campaign's timeline (the latest of each experiment's), in campaign order."""
    events = [ev for ev in data.timeline if timeline.is_event(ev, timeline.RECEIPT)]
    order = {e: i for i, e in enumerate(data.experiments)}
    # each deployment of an experiment (design.deployments) is listed under its own name, in the order they ran
    first: dict[str, int] = {}
    for ev in sorted(events, key=lambda ev: str(ev.get("at"))):
        first.setdefault(str(ev.get("deployment") or ev["experiment"]), len(first))
    rows = [(order.get(ev["experiment"], len(order)), first[str(ev.get("deployment") or ev["experiment"])], i,
             {"experiment": str(ev.get("deployment") or ev["experiment"]), **timeline.detail(ev)})
            for i, ev in enumerate(events)]
    return [r for *_, r in sorted(rows, key=lambda t: t[:3])]


def ending(data: ReportData) -> Ending:
    c = data.campaign
    status = str(c.get("status") or "running")
    what = ENDINGS.get(status, status.upper())
    state, error = c.get("failed_state"), c.get("error")
    shown_error = str(error) if error and status != "succeeded" else ""
    headline = what + (f" in state {state}" if state else "") + (f": {shown_error}" if shown_error else "")
    rows = receipt_rows(data)
    done = all(r.get("state") in SETTLED and not str(r.get("billing") or "").startswith("still billing") for r in rows)
    return Ending(status=status, headline=headline, cause=str(c.get("cause") or "") if status != "succeeded" else "",
                  partial=status != "succeeded", receipt=rows, receipt_complete=done, what=what,
                  failed_state=str(state or ""), error=shown_error)


def receipt_summary(e: Ending, esc: Callable[[str], str] = str) -> str:
    """What the receipt says in one paragraph; the lake's resource names through ``esc`` (a format's escaper)."""
    if not e.receipt:
        return "The campaign created nothing that needed tearing down (or recorded no receipt)."
    bad = [r for r in e.receipt if r.get("state") not in SETTLED]
    text = (f"{len(e.receipt)} resource(s) read back after teardown: "
            + ("every one gone, restored to its recorded size or handed over." if not bad else
               f"{len(bad)} NOT confirmed gone or restored (see why; `benchctl sweep` cleans up)."))
    if e.still_billing:
        text += f" STILL BILLING: {', '.join(esc(str(r['name'])) for r in e.still_billing)}."
    return text
