"""``benchctl calibrate``: fit the mocker's timing profile from a campaign in a lake and store it where the twin
reads profiles (``<workspace>/twin/<name>/``, ``benchctl.forecast.twin_profile``). The fit is ``benchctl.forecast.calibrate``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchctl.cli.common import _path
from benchctl.lake.query import QueryPort

HELP = ("fit a timing profile for the mocker (TTFT against input length at concurrency 1; ITL against active KV "
        "tokens and context length) from a campaign's measured steps, and store it in the twin store "
        "<workspace>/twin/<name>/ with its provenance (campaign, lake, steps, fit residuals, measured domain)")
SPEC_FIELD = "twin"  # experiments[].mocker.<this>: <profile name> selects a stored profile (benchctl.forecast.twin)


def add_parser(sub: Any) -> Any:
    p = sub.add_parser("calibrate", help=HELP, description=HELP)
    p.add_argument("--lake", default="runs/lake", help="the lake (default runs/lake: `benchctl run --out runs`)")
    p.add_argument("--campaign", required=True, help="the measured campaign's id (its steps and request records)")
    p.add_argument("--experiment", action="append", metavar="NAME",
                   help="calibrate only this experiment (repeatable; default every experiment of the campaign)")
    p.add_argument("--ttft", choices=["auto", "router", "aiperf"], default="auto",
                   help="the TTFT the prefill curve is fitted on: the router's (dispatch to first token: the engine's "
                        "prefill, no client/HTTP/frontend path), AIPerf's (end to end), or auto (the router's where "
                        "every concurrency-1 step has it once per request, else AIPerf's; default)")
    p.add_argument("--name", help="the profile's name (one experiment only); default <campaign>-<experiment>")
    p.add_argument("--workspace", default="runs", help="the twin store's workspace: profiles go to "
                                                      "WORKSPACE/twin/<name>/ (default runs, as `benchctl run`)")
    return p


def run_calibrate(query: QueryPort, lake: Path, args: argparse.Namespace) -> int:
    """Fit through ``query`` (the lake's engine, opened by the command line), then write every profile."""
    from benchctl.forecast.calibrate import calibrate
    from benchctl.forecast.twin_profile import PROVENANCE_NAME, profile_dir, write_profile

    workspace = _path(args.workspace)
    results = calibrate(query, args.campaign, str(lake), experiments=args.experiment, name=args.name,
                        ttft=args.ttft)
    targets = []
    for cal in results:  # every check before the first write: all or nothing
        directory = profile_dir(workspace, cal.name)
        prov = directory / PROVENANCE_NAME
        if directory.exists():
            try:
                previous = json.loads(prov.read_text(encoding="utf-8")).get("campaign_id")
            except (OSError, ValueError):
                previous = None
            if previous != args.campaign:
                raise FileExistsError(f"{directory}: a profile named {cal.name} exists (from "
                                      f"{previous or 'elsewhere'}); give another --name (a profile is replaced "
                                      "only by a calibration of the same campaign)")
        targets.append((cal, directory))
    for cal, directory in targets:
        npz = write_profile(directory, cal.profile)
        pre, dec = cal.profile.provenance["prefill"], cal.profile.provenance["decode"]
        print(f"{cal.experiment} ({cal.mode}): profile {cal.name} written to {npz}")
        print(f"  prefill: {pre['model']} on the {pre['ttft_source']}'s TTFT over new tokens "
              f"{_span(pre['domain']['isl'])}, {len(pre['points'])} points "
              f"from {len(pre['steps'])} step(s), residuals max {pre['residual_max_pct']:.1f} %")
        print(f"  decode:  {dec['model']} over active KV {_span(dec['domain']['kv'])}, context "
              f"{_span(dec['domain']['ctx'])}, {len(dec['points'])} step(s), residuals max "
              f"{dec['residual_max_pct']:.1f} %")
        for role, what in cal.profile.provenance["roles"].items():
            print(f"  role {role}: {what}")
        print(f"  select it in a spec: experiments[{cal.experiment}].mocker: {{{SPEC_FIELD}: {cal.name}}}"
              f" (benchctl run --out {workspace})")
    return 0


def _span(v: list[float]) -> str:
    return f"{v[0]:.0f}..{v[1]:.0f}" if v[1] > v[0] else f"{v[0]:.0f} only"
