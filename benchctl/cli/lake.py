"""``benchctl ingest``, ``query``, ``report`` and ``calibrate``: the lake's commands, and the tables and report a run prints."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchctl.cli.common import _lake, _path, say
from benchctl.errors import ArtifactError


def _print_table(query: Any, view: str, campaign_id: str | None, columns: tuple[str, ...] = ()) -> int:
    from benchctl.analysis.formatting import format_result
    from benchctl.lake.paths import check_path_value

    if campaign_id:
        check_path_value("campaign_id", campaign_id)  # path-safe characters only: safe to quote
    select = ", ".join(columns) if columns else "*"
    sql = f"SELECT {select} FROM {view}" + (f" WHERE campaign_id = '{campaign_id}'" if campaign_id else "")  # noqa: S608
    cols, rows = query.run(sql)
    say(format_result(cols, rows, "table"))
    return len(rows)


def _print_report(lake: Path, campaign_id: str, run_dir: Path, query: Any = None) -> None:
    from benchctl.analysis.views import REPORT_VIEWS
    from benchctl.local.query import QueryEngine

    engine = query() if query is not None else QueryEngine(lake)  # the run's own engine
    from benchctl.report.chartkit import sim_label

    _, found = engine.run(f"SELECT worker_engine FROM campaigns WHERE campaign_id = '{campaign_id}'")  # noqa: S608
    tag, text = sim_label(str(found[0][0]) if found and found[0][0] else None)
    say(f"\nAll figures below are {tag}: {text.replace(' — ', ', ')}.")
    for view, columns in REPORT_VIEWS.items():
        if view == "v_feature_ladder":
            _, rows = engine.run(f"SELECT 1 FROM {view} WHERE campaign_id = '{campaign_id}'")  # noqa: S608
            if not rows:
                continue  # not a ladder campaign
        print(f"\n{view} ({tag})")
        _print_table(engine, view, campaign_id, columns)
    report = run_dir / "report" / "report.html"
    if report.is_file():
        print(f"\nthe report (tables, figures, timeline, cost, provenance; opens offline): {report}")
        print(f"every column of every view: {run_dir / 'report'}/<view>.csv; "
              f"`benchctl query <view> --lake {lake}` for more")
    else:
        print(f"\nno report was written (its report step failed: see the timeline's cleanup_error); write one from "
              f"what the lake holds: benchctl report --lake {lake} --campaign {campaign_id} --out report.html")


def cmd_ingest(args: argparse.Namespace) -> int:
    from benchctl.lake.ingest import StepContext, ingest_artifacts, ingest_sweep
    from benchctl.local.lake import LocalLake

    art = _path(args.artifact_dir)
    if not art.is_dir():
        raise ArtifactError(f"{art}: not a directory of AIPerf artifacts")
    ctx = StepContext(
        campaign_id=args.campaign, experiment=args.experiment, mode=args.mode, workload=args.workload,
        step_id=args.step, step_index=0, repeat=args.repeat, concurrency=args.concurrency, isl=None, osl=None,
        random_seed=None, artifact_uri=str(art), workload_kind="concurrency_sweep",
    )
    lake = LocalLake(_path(args.lake))
    is_sweep = any(p.name.startswith("concurrency_") for p in art.iterdir() if p.is_dir())
    results = ingest_sweep(art, ctx) if is_sweep else [ingest_artifacts(art, ctx)]
    for r in results:
        sid = r.steps[0]["step_id"] if r.steps else args.step
        for table, rows in r.tables().items():
            lake.write(table, rows, part_name=sid)
        st = r.steps[0] if r.steps else {}
        print(f"ingested {sid}: status {st.get('status')}, {len(r.requests)} requests, "
              f"{len(r.server_metrics)} server metric rows")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from benchctl.analysis.formatting import format_result, label_simulated, simulated_campaigns
    from benchctl.local.query import QueryEngine

    with QueryEngine(_lake(args.lake)) as engine:
        cols, rows = engine.run(args.name_or_sql)
        labelled = label_simulated(cols, rows, simulated_campaigns(engine))
    if args.format == "table":  # the mark above the table; CSV and JSON carry it as a column/field
        if labelled.header:
            say(labelled.header)
        say(format_result(cols, rows, "table"))
    else:  # CSV too: a control character in a lake string is shown as its escape, never sent raw
        say(format_result(labelled.columns, labelled.rows, args.format))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from benchctl.local.report import write_report

    out = _path(args.out)
    fmt = args.format or ("md" if out.suffix.lower() in {".md", ".markdown"} else "html")
    path = write_report(_lake(args.lake), args.campaign, out, fmt, compare_measured=args.compare_measured)
    print(f"{fmt} report of {f'campaign {args.campaign}' if args.campaign else 'the latest campaign'}: {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    from benchctl.local.query import QueryEngine
    from benchctl.report import since

    with QueryEngine(lake := _lake(args.lake)) as engine:
        c = since.load_comparison(engine, str(lake), args.campaign, args.against)
    if args.format == "json":
        say(json.dumps({"before": str(c.before["campaign_id"]), "after": str(c.after["campaign_id"]),
                        "simulated": c.simulated, "provenance": since.provenance_rows(c),
                        "figures": [s.row(c.settings) for s in c.shifts], "points": c.point_rows(),
                        "unmatched": c.unmatched}, indent=2, default=str))
    else:
        say(since.text(c))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from benchctl.cli.calibrate import run_calibrate
    from benchctl.local.query import QueryEngine

    with QueryEngine(lake := _lake(args.lake)) as engine:
        return run_calibrate(engine, lake, args)
