"""``benchctl validate``, ``plan``, ``render`` and ``predict``: a spec checked, planned, rendered and predicted, offline."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchctl.cli.common import _ceilings, _path, _within_ceilings
from benchctl.errors import CeilingExceeded, SpecError


def cmd_validate(args: argparse.Namespace) -> int:
    from benchctl.planning.placement import load_placeable_spec

    spec = load_placeable_spec(_path(args.spec))
    _within_ceilings(args, spec)
    print(f"{args.spec}: valid ({len(spec.experiments)} experiments, {len(spec.workloads)} workloads)")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from benchctl.planning import ceilings
    from benchctl.planning.placement import load_placeable_spec
    from benchctl.planning.plan import format_plan, plan_campaign
    from benchctl.spec.comparisons import format_comparisons, resolved

    spec = load_placeable_spec(_path(args.spec))
    if args.poll_seconds < 1:
        raise ValueError(f"--poll-seconds {args.poll_seconds}: must be at least 1")
    from benchctl.forecast.twin import plan_timers

    # request-count steps timed on each experiment's twin (benchctl.forecast.twin), unless --no-twin
    from benchctl.local.tuning import cached_ranker

    # the tune phase's candidates ranked by aiconfigurator (benchctl.forecast.tune), cached in the workspace
    plan = plan_campaign(spec, args.engine, {} if args.no_twin else plan_timers(spec, Path(args.out)),
                         ranker=cached_ranker(Path(args.out)) if spec.tune is not None else None)
    # the deployment's ceilings; the worst-case history only where there is a quota (one AWS execution)
    over = ceilings.check(spec, plan_campaign(spec, "aws"), _ceilings(args),
                          args.poll_seconds if args.engine == "aws" else None)
    problems = list(plan.budget_problems)
    out = plan.to_json()
    text = format_plan(plan) + "\n" + format_comparisons(spec)
    out["comparisons"] = [asdict(r) for r in resolved(spec)]
    if args.engine == "aws":  # what one Step Functions execution can hold (moto, locally, has no such limits)
        from benchctl.planning.history import aws_limits, format_history

        est, limits = aws_limits(spec, plan, args.poll_seconds)
        out["step_functions"] = asdict(est)
        text += "\n" + format_history(est)
        problems += limits
    if args.engine == "aws" and not (over or problems or args.no_edges) and any(s.probe is not None for e in plan.experiments
                                                                for s in e.steps):
        text += "\n" + _edges_text(spec, plan)  # what the search costs on GPUs beside the grid, predicted
    if args.engine == "aws":  # deployments x repeats: what each design costs and what its verdicts can see
        from benchctl.forecast.allocation import allocations, format_allocations

        rows = allocations(spec, plan)
        out["allocation"] = [asdict(r) for r in rows]
        text += "\n" + format_allocations(spec, rows)
    print(json.dumps(out, indent=2) if args.json else text)
    if over:
        raise CeilingExceeded(str(args.spec), ceilings.lines(over) + problems)
    if problems:
        raise SpecError(str(args.spec), problems)
    return 0


def _edges_text(spec: Any, plan: Any) -> str:
    """The predicted SLO edges with the grid's and the search's GPU-hours; a note when the predictor cannot run."""
    try:
        from benchctl.forecast.edge import format_edges, predicted_edges
    except ImportError as err:  # aiconfigurator is not installed: the plan stands without it
        return f"SLO edge per sweep: not predicted ({err})"
    rows = predicted_edges(spec, plan)
    return format_edges(rows) if rows else ""


def cmd_render(args: argparse.Namespace) -> int:
    import json

    import yaml

    from benchctl.aws.k8s.render import render_campaign, render_requests
    from benchctl.campaign.context import check_campaign_id, new_campaign_id
    from benchctl.planning.placement import load_placeable_spec

    if args.campaign_id is not None:
        check_campaign_id(args.campaign_id, "--campaign-id")
    spec = load_placeable_spec(_path(args.spec))
    _within_ceilings(args, spec)  # before anything is written
    out = _path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out}: exists and is not an empty directory; give a new or empty --out")
    campaign_id = args.campaign_id or new_campaign_id(spec.name)
    manifests = render_campaign(spec, campaign_id)
    for rel, obj in manifests:
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(obj, sort_keys=False), encoding="utf-8")
        meta = obj["metadata"]
        where = f"{meta['namespace']}/" if "namespace" in meta else ""
        print(f"{path}: {obj['kind']} {where}{meta['name']}")
    requests = render_requests(spec, campaign_id)
    for rel, obj in requests:  # what each step asks of its workload's runner Job (the run store's request)
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    print(f"{len(manifests)} manifests and {len(requests)} step requests for campaign {campaign_id} in {out}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from benchctl.forecast.predict import predict_plan
    from benchctl.forecast.predict_table import format_predictions
    from benchctl.lake.paths import check_path_value
    from benchctl.local.lake import LocalLake
    from benchctl.planning.placement import load_placeable_spec
    from benchctl.planning.plan import plan_campaign

    spec = load_placeable_spec(_path(args.spec))
    plan = plan_campaign(spec, "aws")
    campaign_id = check_path_value("campaign_id", args.campaign_id or plan.plan_id)
    rows = predict_plan(spec, plan, campaign_id)
    print(format_predictions(rows, spec.slo))
    print(_edges_text(spec, plan))
    if args.lake:
        files = LocalLake(_path(args.lake)).write("predictions", rows, part_name="predictions")
        print(f"{len(rows)} prediction rows for campaign {campaign_id} in {len(files)} file(s) under "
              f"{_path(args.lake) / 'predictions'}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """``benchctl schema``: the spec's JSON Schema to ``--out``, or to stdout."""
    from benchctl.spec.jsonschema import schema_text

    if args.out is None:
        sys.stdout.write(schema_text())
    else:
        _path(args.out).write_text(schema_text(), encoding="utf-8")
        print(f"{args.out}: the campaign spec's JSON Schema")
    return 0
