"""``benchctl start``, ``status`` and ``doctor``: the AWS engine's commands (its SDK is imported only when one runs)."""

from __future__ import annotations

import argparse
import json

from benchctl.cli.common import _aws, _ceilings, _path, say


def cmd_start(args: argparse.Namespace) -> int:
    import os

    from benchctl.aws.start import start

    bucket = args.bucket or os.environ.get("BENCHCTL_BUCKET")
    if not bucket:
        raise ValueError("no results bucket: pass --bucket or set BENCHCTL_BUCKET (the results stack's "
                         "BucketName output)")
    s = _aws(lambda: start(
        _path(args.spec), bucket=bucket,
        state_machine_arn=args.state_machine_arn or os.environ.get("BENCHCTL_STATE_MACHINE_ARN"),
        campaign_id=args.campaign_id, poll_seconds=args.poll_seconds, upload_only=args.upload_only,
        ceilings=_ceilings(args)))
    if s.execution_arn is None:
        print(f"uploaded {s.spec_uri}; schedule it with context benchctl:schedule "
              f'{{"expression": "cron(...)", "spec_key": "{s.spec_uri.split("/", 3)[3]}"}}')
        return 0
    print(f"campaign {s.campaign_id} started")
    print(f"  execution: {s.execution_arn}")
    print(f"  console:   {s.console_url}")
    print(f"  input:     {json.dumps(s.input)}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from benchctl.aws.start import status

    st = _aws(lambda: status(args.execution_arn))
    width = max(len(k) for k in st)
    for k, v in st.items():
        if v is not None:
            say(f"{k:<{width}}  {v}")  # the execution's error and cause as AWS returns them
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    import os

    from benchctl.aws.doctor import checks

    arn = args.state_machine_arn or os.environ.get("BENCHCTL_STATE_MACHINE_ARN")
    if not arn or not arn.startswith("arn:") or ":stateMachine:" not in arn:
        raise ValueError(f"--state-machine-arn {arn!r}: give the control-plane stack's StateMachineArn output "
                         "(arn:aws:states:REGION:ACCOUNT:stateMachine:NAME), or set BENCHCTL_STATE_MACHINE_ARN")
    from benchctl.planning.placement import load_placeable_spec

    spec = _path(args.spec)
    load_placeable_spec(spec)  # a bad spec is exit 2 before anything is invoked
    seen: list[bool] = []

    def run() -> None:
        for c in checks(arn, spec_path=spec, runner_job=not args.no_job, job_timeout_s=args.job_timeout):
            print(c.line(), flush=True)
            seen.append(c.ok)

    _aws(run)
    failed = seen.count(False)
    print(f"{len(seen) - failed} of {len(seen)} checks passed" + (": the deployment is ready" if not failed
                                                                   else f"; {failed} failed"))
    return 1 if failed else 0
