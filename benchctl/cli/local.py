"""``benchctl run`` and ``sweep``: the local engine's commands."""

from __future__ import annotations

import argparse

from benchctl.cli.common import _ceilings, _err, _path, say
from benchctl.cli.lake import _print_report


def cmd_run(args: argparse.Namespace) -> int:
    from benchctl.local.runner import run_campaign

    result = run_campaign(
        _path(args.spec), _path(args.out), campaign_id=args.campaign_id, fail_at=args.fail_at,
        poll_seconds=args.poll_seconds, ceilings=_ceilings(args),
    )
    print(f"\ncampaign {result.campaign_id}: {result.status} in {result.elapsed_s:.0f} s")
    print(f"  results (parquet lake): {result.lake}")
    print(f"  run state, raw spec, report: {result.run_dir}")
    if result.status != "SUCCEEDED":
        say(f"  error: {result.error}: {result.cause}")
        report = result.run_dir / "report" / "report.html"
        if report.is_file():  # every ending has its report: how it ended, the receipt, what completed
            print(f"  report (how it ended, the teardown receipt, what completed): {report}")
    _print_report(result.lake, result.campaign_id, result.run_dir, result.query)
    if result.status == "ABORTED":
        return 130
    return 0 if result.status == "SUCCEEDED" else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    from benchctl.local.runner import sweep_workspace

    out = _path(args.out)
    if not out.is_dir():
        raise FileNotFoundError(f"--out {args.out}: no such workspace (the --out of `benchctl run`, default runs)")
    from benchctl.campaign.sweep import failed

    report = sweep_workspace(out, dry_run=args.dry_run)
    for entry in report:
        exps = ", ".join(entry.get("experiments") or []) or "-"
        print(f"{entry['campaign_id']}: {entry['action']} (experiments: {exps})")
    if not report:
        print(f"{out}: no campaigns")
    for entry in failed(report):  # the others were swept all the same
        _err(f"{entry['campaign_id']}: not swept: {entry['error']}: {entry['cause']}")
    return 1 if failed(report) else 0
