"""``benchctl dashboards``: evaluate every PromQL query of the Grafana dashboards against a Prometheus, as Grafana
would (``benchctl.dashboards``): on the cluster's Prometheus (port-forwarded) after the rehearsal and before the GPU
campaign, it says which panels would be empty or wrong, with the dashboard, panel and query of each. An answer the
Prometheus HTTP API does not give (a redirect, a body over ``benchctl.dashboards.MAX_BODY_BYTES``, a wrong shape) is
bad input: exit 2 naming the endpoint and the query; every line printed goes through ``benchctl.logtext.inert``."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from benchctl import dashboards as dq
from benchctl.cli.common import _path, say

HELP = ("evaluate every PromQL query of the Grafana dashboards against a Prometheus over a time window, as Grafana "
        "would (its variables set to every value in the window, $__rate_interval at a 15 s scrape): each must parse, "
        "return numbers and stay inside its panel's unit; exit 1 naming the dashboard, panel and query of each that "
        "does not")
EXAMPLE = ("kubectl -n monitoring port-forward svc/kube-prometheus-stack-prometheus 9090 &  then  "
           "benchctl dashboards --prometheus http://127.0.0.1:9090 --since 60")


def add_parser(sub: Any) -> Any:
    p = sub.add_parser("dashboards", help=HELP, description=f"{HELP}. Example: {EXAMPLE}")
    p.add_argument("--prometheus", required=True, metavar="URL", help="the Prometheus HTTP API's base URL (http or "
                   "https), e.g. a port-forward of the platform's: http://127.0.0.1:9090")
    p.add_argument("--since", type=float, default=60.0, metavar="MINUTES",
                   help="the window: the last MINUTES minutes (default 60); or --start/--end")
    p.add_argument("--start", type=float, metavar="EPOCH_S", help="the window's start, Unix seconds (with --end)")
    p.add_argument("--end", type=float, metavar="EPOCH_S", help="the window's end, Unix seconds (with --start)")
    p.add_argument("--dashboard", action="append", metavar="FILE", help="a dashboard JSON model (repeatable; default "
                   "every dashboards/*.json with Prometheus queries)")
    p.add_argument("--var", action="append", default=[], metavar="NAME=V1[,V2]",
                   help="set a variable to these values instead of every value in the window (repeatable), e.g. "
                        "namespace=dynamo-bench")
    p.add_argument("--format", choices=["table", "json"], default="table")
    return p


def _window(args: argparse.Namespace) -> tuple[float, float]:
    if (args.start is None) != (args.end is None):
        raise ValueError("--start and --end go together (Unix seconds); or --since MINUTES alone")
    if args.start is not None:
        if not args.start < args.end:
            raise ValueError(f"--start {args.start} is not before --end {args.end}")
        return float(args.start), float(args.end)
    if not args.since > 0:
        raise ValueError(f"--since {args.since}: a number of minutes above 0")
    end = time.time()
    return end - args.since * 60, end


def _vars(items: list[str]) -> dict[str, list[str]]:
    out = {}
    for item in items:
        m = re.fullmatch(r"(\w+)=(.+)", item)
        if not m:
            raise ValueError(f"--var {item!r}: NAME=VALUE[,VALUE...] (a variable of the dashboards, e.g. "
                             "namespace=dynamo-bench)")
        out[m.group(1)] = m.group(2).split(",")
    return out


def _dashboards(files: list[str] | None) -> list[Path]:
    paths = [_path(f) for f in files] if files else sorted(dq.DASHBOARDS.glob("*.json"))
    if not paths:
        raise ValueError(f"no dashboards in {dq.DASHBOARDS}: give --dashboard FILE")
    return paths


def cmd_dashboards(args: argparse.Namespace) -> int:
    if not re.match(r"https?://[^/\s]+", args.prometheus):
        raise ValueError(f"--prometheus {args.prometheus!r}: an http(s) URL, e.g. http://127.0.0.1:9090")
    start, end = _window(args)
    pinned = _vars(args.var)
    prom = dq.HttpPrometheus(args.prometheus)
    try:
        built = prom.get("/api/v1/status/buildinfo")
    except OSError as e:
        raise ValueError(f"--prometheus {args.prometheus}: cannot reach its HTTP API ({e})") from e
    outcomes: list[dq.Outcome] = []
    for path in _dashboards(args.dashboard):
        try:
            dash = dq.load(path)
        except ValueError as e:
            raise ValueError(f"{path}: not a dashboard JSON model ({e})") from e
        if any(t.kind == "prometheus" for t in dq.targets(path.name, dash)):
            outcomes += dq.check_prometheus(prom, path.name, dash, start, end, pinned=pinned, classify=False)
    failed = [o for o in outcomes if o.failure]
    if args.format == "json":
        say(json.dumps({"prometheus": args.prometheus, "version": (built.get("data") or {}).get("version"),
                        "window": [start, end], "queries": len(outcomes), "failed": len(failed),
                        "results": [{"where": o.target.where(), "expr": o.expr, "numbers": o.numbers,
                                     "failure": o.failure} for o in outcomes]}, indent=2))
    else:
        for o in outcomes:
            say(f"{'ok  ' if not o.failure else 'FAIL'} {o.target.where()}: {o.numbers} numbers")
        say(f"\n{len(outcomes) - len(failed)} of {len(outcomes)} PromQL queries returned plausible numbers "
            f"({args.prometheus}, {end - start:.0f} s window)")
        for o in failed:  # Prometheus' error text and the label values in the query: remote, printed inert
            say(f"\n{o.failure}")
    return 1 if failed else 0
