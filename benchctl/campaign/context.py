"""The campaign context, and the one way an execution starts on either engine.

Both engines start an execution of ``state_machines/campaign.asl.json`` with the same input::

    {"spec_uri": "file:///abs/path/spec.yaml" | "s3://<bucket>/specs/<name>.yaml",
     "campaign_id": "<id>",          # optional: the execution's name
     "poll_seconds": 30,             # optional: the Wait states' period (default 30)
     "fail_at": "<Task state>"}      # optional: a rehearsal (`benchctl run --fail-at`)

``benchctl run`` (local), ``benchctl start``, the console and the schedule (AWS) all send it. The
context every later task carries (``ctx`` in the ASL: campaign id, where its run state and the lake
are, the poll period) is built from it here, in one place, by :func:`context_of`: the entry states'
events (Plan, RecordPlanFailure) hold the execution input, every other event the context Plan returned.
May import only the standard library.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]
DEFAULT_POLL_SECONDS = 30
SPEC_URI_SCHEMES = ("file://", "s3://")


CAMPAIGN_ID_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,78}[a-z0-9])?\Z")  # 80: a Step Functions execution name's limit
CAMPAIGN_ID_RULE = "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 80"


def check_campaign_id(cid: object, where: str) -> str:
    """``cid`` if it is a campaign id in its one normal form (:data:`CAMPAIGN_ID_RE`), else ValueError naming
    ``where`` it came from. Ids are never rewritten into the normal form: ``Seed_Plan-1`` is refused, not taken
    as ``seed-plan-1``, so one campaign has exactly one spelling (its run-store prefix, lake partition, lock
    owner and execution name) and two spellings can never meet in one campaign's records. Every entry (the
    execution input, the execution name, ``benchctl run/start/render --campaign-id``) checks here."""
    if not isinstance(cid, str) or not CAMPAIGN_ID_RE.match(cid):
        raise ValueError(f"{where}: {cid!r} is not a campaign id: use {CAMPAIGN_ID_RULE} characters")
    return cid


def new_campaign_id(spec_name: str, now: datetime | None = None) -> str:
    """``<spec name>-<UTC yyyymmdd-hhmmss>``: readable, sortable, path- and execution-name-safe."""
    now = now or datetime.now(UTC)
    return re.sub(r"[^a-z0-9-]", "-", f"{spec_name}-{now:%Y%m%d-%H%M%S}")


@dataclass(frozen=True)
class StartInput:
    """An execution's input (see the module docstring); ``parse`` names the field that is wrong."""

    spec_uri: str
    campaign_id: str | None = None
    poll_seconds: int = DEFAULT_POLL_SECONDS
    fail_at: str | None = None

    @staticmethod
    def parse(data: Any) -> StartInput:
        if not isinstance(data, dict):
            raise ValueError(f"execution input: expected an object, got {type(data).__name__}")
        uri = data.get("spec_uri")
        if not uri or not isinstance(uri, str):
            raise ValueError("execution input: give 'spec_uri' (a campaign spec: s3://<bucket>/specs/seed-plan.yaml "
                             "on AWS, file:///path/spec.yaml locally) or start with `benchctl start SPEC`")
        if not uri.startswith(SPEC_URI_SCHEMES):
            raise ValueError(f"execution input 'spec_uri': {uri!r} is not one of {', '.join(SPEC_URI_SCHEMES)}")
        poll = data.get("poll_seconds", DEFAULT_POLL_SECONDS)
        if isinstance(poll, bool) or not isinstance(poll, int) or not 1 <= poll <= 3600:
            raise ValueError(f"execution input 'poll_seconds': {poll!r} must be an integer 1..3600")
        cid = data.get("campaign_id")
        if cid is not None:
            check_campaign_id(cid, "execution input 'campaign_id'")
        fail_at = data.get("fail_at")
        return StartInput(spec_uri=uri, campaign_id=cid or None, poll_seconds=poll,
                          fail_at=str(fail_at) if fail_at else None)

    def to_json(self) -> JSON:
        out: JSON = {"spec_uri": self.spec_uri, "poll_seconds": self.poll_seconds}
        if self.campaign_id:
            out["campaign_id"] = self.campaign_id
        if self.fail_at:
            out["fail_at"] = self.fail_at
        return out


@dataclass(frozen=True)
class Ctx:
    """What every task of one campaign knows: its id, where its run state and the lake are, the poll
    period, and the state a rehearsal fails at."""

    campaign_id: str
    run_uri: str
    lake_uri: str
    poll_seconds: int
    fail_at: str | None

    @staticmethod
    def parse(data: Any) -> Ctx:
        if not isinstance(data, dict):
            raise ValueError(f"event field 'ctx': expected an object, got {type(data).__name__}")
        missing = [k for k in ("campaign_id", "run_uri", "lake_uri") if not data.get(k)]
        if missing:
            raise ValueError(f"event field 'ctx': missing {missing}")
        return Ctx(
            campaign_id=str(data["campaign_id"]),
            run_uri=str(data["run_uri"]),
            lake_uri=str(data["lake_uri"]),
            poll_seconds=max(1, int(data.get("poll_seconds", 5))),
            fail_at=data.get("fail_at"),
        )

    def to_json(self) -> JSON:
        return {
            "campaign_id": self.campaign_id,
            "run_uri": self.run_uri,
            "lake_uri": self.lake_uri,
            "poll_seconds": self.poll_seconds,
            "fail_at": self.fail_at,
        }


def start_context(inp: StartInput, execution: str | None, *, runs_uri: str, lake_uri: str) -> Ctx:
    """The context of an execution: the campaign id is the input's, else the execution's name (unique per
    state machine; refused unless already a campaign id's normal form); its run state goes under ``<runs_uri>/<campaign id>``, results to ``lake_uri`` (the
    engine's: a workspace locally, the results bucket on AWS)."""
    name = str(execution or "").rsplit(":", 1)[-1]
    if not inp.campaign_id and not name:
        raise ValueError("execution input: no 'campaign_id' and no execution name to take it from")
    cid = inp.campaign_id or check_campaign_id(
        name, "execution name (no 'campaign_id' in the input; give one, or name the execution as one)")
    return Ctx(campaign_id=cid, run_uri=f"{runs_uri.rstrip('/')}/{cid}", lake_uri=lake_uri,
               poll_seconds=inp.poll_seconds, fail_at=inp.fail_at)


def context_of(event: JSON, *, runs_uri: str, lake_uri: str) -> Ctx:
    """The context of a task's event: its ``ctx``, or (the entry states) built from the execution input."""
    if "ctx" in event:
        return Ctx.parse(event["ctx"])
    if "input" not in event:
        raise ValueError("task event: neither a campaign context ('ctx') nor an execution input ('input')")
    return start_context(StartInput.parse(event.get("input")), event.get("execution"), runs_uri=runs_uri,
                         lake_uri=lake_uri)
