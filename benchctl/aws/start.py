"""Starting and following campaigns on AWS: ``benchctl start`` and ``benchctl status``.

``start`` validates and plans the spec HERE first (a bad spec, a campaign over budget, or one whose
execution would pass Step Functions' history quota or the 48 h timeout never reaches AWS: exit 2,
nothing uploaded, nothing started), keeps the spec's own bytes in the results bucket under ``specs/``, and
starts the state machine with a small input, the same one the console and the schedule use::

    {"spec_uri": "s3://<bucket>/specs/<campaign id>.yaml", "campaign_id": "<campaign id>", "poll_seconds": 30}

The execution is named after the campaign id, so one id can never run twice. ``--upload-only`` just
stores the spec as ``specs/<file name>`` (what a schedule's ``spec_key`` points at).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchctl.planning.ceilings import Ceilings
from benchctl.planning.history import aws_limits
from benchctl.planning.placement import load_placeable_spec
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import load_spec_text

SPECS_PREFIX = "specs"


@dataclass(frozen=True)
class Started:
    campaign_id: str
    spec_uri: str
    execution_arn: str | None
    console_url: str | None
    input: dict[str, Any]


def console_url(execution_arn: str) -> str:
    region = execution_arn.split(":")[3]
    return (f"https://{region}.console.aws.amazon.com/states/home?region={region}"
            f"#/v2/executions/details/{execution_arn}")


def start(spec_path: Path, *, bucket: str, state_machine_arn: str | None, campaign_id: str | None = None,
          poll_seconds: int = 30, upload_only: bool = False, session: Any = None,
          ceilings: Ceilings | None = None) -> Started:
    import boto3

    from benchctl.campaign.context import check_campaign_id, new_campaign_id
    from benchctl.errors import SpecError

    spec = load_placeable_spec(spec_path)
    plan = plan_campaign(spec, "aws")
    if not 1 <= poll_seconds <= 3600:
        raise ValueError(f"--poll-seconds {poll_seconds}: must be 1..3600")
    _, limits = aws_limits(spec, plan, poll_seconds)  # history quota and timeout of one execution
    if plan.budget_problems or limits:
        raise SpecError(str(spec_path), plan.budget_problems + limits)
    if ceilings is not None:  # the deployment's (the CLI's --context-file): refused here, before any upload
        from benchctl.errors import CeilingExceeded
        from benchctl.planning import ceilings as ceiling_rules

        over = ceiling_rules.check(spec, plan, ceilings, poll_seconds)
        if over:
            raise CeilingExceeded(str(spec_path), ceiling_rules.lines(over))
    if not upload_only and not state_machine_arn:
        raise ValueError("no state machine: pass --state-machine-arn or set BENCHCTL_STATE_MACHINE_ARN "
                         "(the control-plane stack's StateMachineArn output)")
    cid = check_campaign_id(campaign_id or new_campaign_id(spec.name), "--campaign-id")
    session = session or boto3.session.Session()
    suffix = spec_path.suffix if spec_path.suffix in (".yaml", ".yml", ".json") else ".yaml"
    key = f"{SPECS_PREFIX}/{spec_path.name}" if upload_only else f"{SPECS_PREFIX}/{cid}{suffix}"
    body = load_spec_text(spec_path).encode("utf-8")
    s3 = session.client("s3")
    if upload_only:  # the schedule's spec: replaced on purpose
        s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="text/yaml")
    else:  # a new campaign's own spec: create-only, so an existing campaign's is never replaced
        _create_spec(s3, bucket, key, body, cid, session)
    uri = f"s3://{bucket}/{key}"
    inp = {"spec_uri": uri, "campaign_id": cid, "poll_seconds": poll_seconds}
    if upload_only:
        return Started(cid, uri, None, None, inp)
    resp = session.client("stepfunctions").start_execution(
        stateMachineArn=state_machine_arn, name=cid, input=json.dumps(inp))
    arn = resp["executionArn"]
    return Started(cid, uri, arn, console_url(arn), inp)


def _create_spec(s3: Any, bucket: str, key: str, body: bytes, cid: str, session: Any) -> None:
    """Write a new campaign's spec where nothing is (S3 conditional write, ``If-None-Match: *``); an id whose
    run store holds a claim, or whose spec is there already, is another campaign's: ValueError (exit 2),
    nothing written."""
    from botocore.exceptions import ClientError

    from benchctl.aws.s3 import S3RunStore
    from benchctl.campaign.runstate import RunState
    from benchctl.constants import RUNS_PREFIX

    taken = f"campaign id {cid!r} is in use ({{}}): choose another --campaign-id"
    store = S3RunStore(bucket, f"{RUNS_PREFIX}/{cid}", session=session)
    try:
        claimed = RunState(store).claimed()
    except ClientError as err:  # a caller who may not read runs/: Plan's own claim still refuses the id
        if err.response.get("Error", {}).get("Code") not in ("403", "AccessDenied", "Forbidden"):
            raise
        claimed = False
    if claimed:
        raise ValueError(taken.format(f"{store.uri} is claimed by an execution"))
    try:
        s3.put_object(Bucket=bucket, Key=key, Body=body, ContentType="text/yaml", IfNoneMatch="*")
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            raise ValueError(taken.format(f"s3://{bucket}/{key} exists")) from None
        raise


def status(execution_arn: str, *, session: Any = None) -> dict[str, Any]:
    """Status of one execution: its state, times, campaign id and, when it failed, why."""
    import boto3

    session = session or boto3.session.Session()
    sfn = session.client("stepfunctions")
    d = sfn.describe_execution(executionArn=execution_arn)
    inp = json.loads(d.get("input") or "{}")
    out: dict[str, Any] = {
        "execution": execution_arn,
        "status": d["status"],
        "campaign_id": inp.get("campaign_id") or (inp.get("ctx") or {}).get("campaign_id") or d.get("name"),
        "spec_uri": inp.get("spec_uri"),
        "started": str(d.get("startDate")),
        "stopped": str(d["stopDate"]) if d.get("stopDate") else None,
        "console": console_url(execution_arn),
    }
    if d["status"] != "RUNNING" and d["status"] != "SUCCEEDED":
        out["error"] = d.get("error")
        out["cause"] = d.get("cause")
    return out
