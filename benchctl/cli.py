"""benchctl: the command line for people.

Exit codes: 0 success; 1 a campaign ran and failed; 2 bad input (spec, artifacts, arguments);
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchctl.cli_common import AwsUnavailable, _aws, _ceilings, _err, _lake, _path, _within_ceilings
from benchctl.errors import ArtifactError, CeilingExceeded, SpecError

EPILOG = """examples:
  benchctl validate examples/smoke.yaml
  benchctl plan examples/seed-plan.yaml --json
  benchctl run examples/smoke.yaml                 # local engine: real Dynamo mocker + AIPerf
  benchctl query v_concurrency_sweep --lake runs/lake
  benchctl ingest ART_DIR --lake runs/lake --campaign c1 --experiment agg --step s1 --mode aggregated
  benchctl start examples/seed-plan.yaml --bucket BUCKET --state-machine-arn ARN   # AWS
  benchctl status EXECUTION_ARN
  benchctl render examples/seed-plan.yaml --out manifests   # Kubernetes manifests the AWS engine applies
  benchctl predict examples/seed-plan.yaml --lake runs/lake   # aiconfigurator's predictions, offline
  benchctl report --lake runs/lake --out report.html   # one self-contained HTML report (figures, tables)
  benchctl calibrate --lake runs/lake --campaign C     # fit the mocker's timing profile from a measured campaign
  benchctl schema --out spec.schema.json               # the spec's JSON Schema, for editors
"""


def cmd_validate(args: argparse.Namespace) -> int:
    from benchctl.spec import load_spec

    spec = load_spec(_path(args.spec))
    _within_ceilings(args, spec)
    print(f"{args.spec}: valid ({len(spec.experiments)} experiments, {len(spec.workloads)} workloads)")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from benchctl import ceilings
    from benchctl.comparisons import format_comparisons, resolved
    from benchctl.errors import CeilingExceeded
    from benchctl.plan import format_plan, plan_campaign
    from benchctl.spec import load_spec

    spec = load_spec(_path(args.spec))
    if args.poll_seconds < 1:
        raise ValueError(f"--poll-seconds {args.poll_seconds}: must be at least 1")
    from benchctl.twin import plan_timers

    # request-count steps timed on each experiment's twin (benchctl.twin), unless --no-twin
    plan = plan_campaign(spec, args.engine, {} if args.no_twin else plan_timers(spec, Path(args.out)))
    # the deployment's ceilings; the worst-case history only where there is a quota (one AWS execution)
    over = ceilings.check(spec, plan_campaign(spec, "aws"), _ceilings(args),
                          args.poll_seconds if args.engine == "aws" else None)
    problems = list(plan.budget_problems)
    out = plan.to_json()
    text = format_plan(plan) + "\n" + format_comparisons(spec)
    out["comparisons"] = [asdict(r) for r in resolved(spec)]
    if args.engine == "aws":  # what one Step Functions execution can hold (moto, locally, has no such limits)
        from benchctl.plan import aws_limits, format_history

        est, limits = aws_limits(spec, plan, args.poll_seconds)
        out["step_functions"] = asdict(est)
        text += "\n" + format_history(est)
        problems += limits
    print(json.dumps(out, indent=2) if args.json else text)
    if over:
        raise CeilingExceeded(str(args.spec), ceilings.lines(over) + problems)
    if problems:
        raise SpecError(str(args.spec), problems)
    return 0


def _print_table(query: Any, view: str, campaign_id: str | None, columns: tuple[str, ...] = ()) -> int:
    from benchctl.formatting import format_result
    from benchctl.lake import check_path_value

    if campaign_id:
        check_path_value("campaign_id", campaign_id)  # path-safe characters only: safe to quote
    select = ", ".join(columns) if columns else "*"
    sql = f"SELECT {select} FROM {view}" + (f" WHERE campaign_id = '{campaign_id}'" if campaign_id else "")  # noqa: S608
    cols, rows = query.run(sql)
    print(format_result(cols, rows, "table"))
    return len(rows)


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
        print(f"  error: {result.error}: {result.cause}")
        report = result.run_dir / "report" / "report.html"
        if report.is_file():  # every ending has its report: how it ended, the receipt, what completed
            print(f"  report (how it ended, the teardown receipt, what completed): {report}")
    _print_report(result.lake, result.campaign_id, result.run_dir, result.query)
    if result.status == "ABORTED":
        return 130
    return 0 if result.status == "SUCCEEDED" else 1


def _print_report(lake: Path, campaign_id: str, run_dir: Path, query: Any = None) -> None:
    from benchctl.local.query import QueryEngine
    from benchctl.views import REPORT_VIEWS

    engine = query() if query is not None else QueryEngine(lake)  # the run's own engine
    print("\nAll figures below are SIMULATED: Dynamo mocker workers on CPU, not GPU measurements.")
    for view, columns in REPORT_VIEWS.items():
        if view == "v_feature_ladder":
            _, rows = engine.run(f"SELECT 1 FROM {view} WHERE campaign_id = '{campaign_id}'")  # noqa: S608
            if not rows:
                continue  # not a ladder campaign
        print(f"\n{view} (SIMULATED)")
        _print_table(engine, view, campaign_id, columns)
    report = run_dir / "report" / "report.html"
    if report.is_file():
        print(f"\nthe report (tables, figures, timeline, cost, provenance; opens offline): {report}")
        print(f"every column of every view: {run_dir / 'report'}/<view>.csv; "
              f"`benchctl query <view> --lake {lake}` for more")
    else:
        print(f"\nno report was written (its report step failed: see the timeline's cleanup_error); write one from "
              f"what the lake holds: benchctl report --lake {lake} --campaign {campaign_id} --out report.html")


def cmd_sweep(args: argparse.Namespace) -> int:
    from benchctl.local.runner import sweep_workspace

    out = _path(args.out)
    if not out.is_dir():
        raise FileNotFoundError(f"--out {args.out}: no such workspace (the --out of `benchctl run`, default runs)")
    from benchctl.sweep import failed

    report = sweep_workspace(out, dry_run=args.dry_run)
    for entry in report:
        exps = ", ".join(entry.get("experiments") or []) or "-"
        print(f"{entry['campaign_id']}: {entry['action']} (experiments: {exps})")
    if not report:
        print(f"{out}: no campaigns")
    for entry in failed(report):  # the others were swept all the same
        _err(f"{entry['campaign_id']}: not swept: {entry['error']}: {entry['cause']}")
    return 1 if failed(report) else 0


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
            print(f"{k:<{width}}  {v}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    import os

    from benchctl.aws.doctor import checks

    arn = args.state_machine_arn or os.environ.get("BENCHCTL_STATE_MACHINE_ARN")
    if not arn or not arn.startswith("arn:") or ":stateMachine:" not in arn:
        raise ValueError(f"--state-machine-arn {arn!r}: give the control-plane stack's StateMachineArn output "
                         "(arn:aws:states:REGION:ACCOUNT:stateMachine:NAME), or set BENCHCTL_STATE_MACHINE_ARN")
    from benchctl.spec import load_spec

    spec = _path(args.spec)
    load_spec(spec)  # a bad spec is exit 2 before anything is invoked
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


def cmd_ingest(args: argparse.Namespace) -> int:
    from benchctl.ingest import StepContext, ingest_artifacts, ingest_sweep
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
    from benchctl.formatting import format_result, label_simulated, simulated_campaigns
    from benchctl.local.query import QueryEngine

    with QueryEngine(_lake(args.lake)) as engine:
        cols, rows = engine.run(args.name_or_sql)
        labelled = label_simulated(cols, rows, simulated_campaigns(engine))
    if args.format == "table":  # the mark above the table; CSV and JSON carry it as a column/field
        if labelled.header:
            print(labelled.header)
        print(format_result(cols, rows, "table"))
    else:
        print(format_result(labelled.columns, labelled.rows, args.format))
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    import json

    import yaml

    from benchctl.aws.k8s.render import render_campaign, render_requests
    from benchctl.context import check_campaign_id, new_campaign_id
    from benchctl.spec import load_spec

    if args.campaign_id is not None:
        check_campaign_id(args.campaign_id, "--campaign-id")
    spec = load_spec(_path(args.spec))
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
    from benchctl.lake import check_path_value
    from benchctl.local.lake import LocalLake
    from benchctl.plan import plan_campaign
    from benchctl.predict import predict_plan
    from benchctl.predict_table import format_predictions
    from benchctl.spec import load_spec

    spec = load_spec(_path(args.spec))
    plan = plan_campaign(spec, "aws")
    campaign_id = check_path_value("campaign_id", args.campaign_id or plan.plan_id)
    rows = predict_plan(spec, plan, campaign_id)
    print(format_predictions(rows, spec.slo))
    if args.lake:
        files = LocalLake(_path(args.lake)).write("predictions", rows, part_name="predictions")
        print(f"{len(rows)} prediction rows for campaign {campaign_id} in {len(files)} file(s) under "
              f"{_path(args.lake) / 'predictions'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from benchctl.local.report import write_report

    out = _path(args.out)
    fmt = args.format or ("md" if out.suffix.lower() in {".md", ".markdown"} else "html")
    path = write_report(_lake(args.lake), args.campaign, out, fmt, compare_measured=args.compare_measured)
    print(f"{fmt} report of {f'campaign {args.campaign}' if args.campaign else 'the latest campaign'}: {path}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from benchctl.cli_calibrate import run_calibrate
    from benchctl.local.query import QueryEngine

    with QueryEngine(lake := _lake(args.lake)) as engine:
        return run_calibrate(engine, lake, args)


def cmd_schema(args: argparse.Namespace) -> int:
    from benchctl.reference import emit_schema

    return emit_schema(args.out and _path(args.out))


CONTEXT_HELP = ("the CDK app's cdk.json whose context 'benchctl:ceilings' (images, instance types and list prices, "
                "nodes per pool, $ per campaign, timeouts, worst-case history) the spec must stay within; default "
                "$BENCHCTL_CONTEXT_FILE, else the project's cdk.json: the ceilings the deployment records")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="benchctl", description=__doc__.split("\n")[0] if __doc__ else "",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
    )
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a campaign spec; exit 2 with one line per problem")
    p.add_argument("spec")
    p.add_argument("--context-file", metavar="CDK_JSON", help=CONTEXT_HELP)
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("plan", help="experiments x steps with deterministic ids, durations and cost estimate")
    p.add_argument("spec")
    p.add_argument("--json", action="store_true", help="machine-readable plan")
    p.add_argument("--engine", choices=["local", "aws"], default="local", help="whose overheads to estimate")
    p.add_argument("--out", default="runs", help="workspace whose twin/ store holds the experiments' timing "
                   "profiles (default runs; a missing one is made in memory, nothing is written)")
    p.add_argument("--no-twin", action="store_true", help="time request-count steps by the fixed guess "
                   "(200 ms + OSL x 20 ms per request), not by each experiment's twin")
    p.add_argument("--poll-seconds", type=int, default=30,
                   help="AWS: the Wait states' period (as for `start`), for the execution-history estimate (default 30)")
    p.add_argument("--context-file", metavar="CDK_JSON", help=CONTEXT_HELP)
    p.set_defaults(fn=cmd_plan)

    p = sub.add_parser("run", help="run a campaign with the local engine (the campaign ASL, real Dynamo mocker + AIPerf)")
    p.add_argument("spec")
    p.add_argument("--out", default="runs", help="workspace: lake in OUT/lake, run state in OUT/campaigns (default runs)")
    p.add_argument("--campaign-id", help="default: <spec name>-<UTC time>; lowercase letters, digits and '-' "
                   "(at most 80), a new one (an existing campaign's is refused)")
    p.add_argument("--fail-at", metavar="STATE", help="rehearsal: make the named ASL state fail (the run still ends "
                                                      "with its report, OUT/campaigns/<id>/report/report.html: how "
                                                      "it ended, the teardown receipt, what completed)")
    p.add_argument("--poll-seconds", type=int, default=1, help="Wait state period in whole seconds (default 1)")
    p.add_argument("--context-file", metavar="CDK_JSON", help=CONTEXT_HELP)
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("sweep", help="tear down what dead local campaigns left behind (pools, processes, locks)")
    p.add_argument("--out", default="runs", help="workspace of `benchctl run` (default runs)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be torn down")
    p.set_defaults(fn=cmd_sweep)

    p = sub.add_parser("start", help="AWS: validate SPEC here, store it in the results bucket, start the state machine")
    p.add_argument("spec")
    p.add_argument("--state-machine-arn", help="default $BENCHCTL_STATE_MACHINE_ARN (stack output StateMachineArn)")
    p.add_argument("--bucket", help="results bucket, default $BENCHCTL_BUCKET (stack output BucketName)")
    p.add_argument("--campaign-id", help="default: <spec name>-<UTC time>; also the execution name; lowercase "
                   "letters, digits and '-' (at most 80); an existing campaign's id fails Plan (CampaignIdInUse)")
    p.add_argument("--poll-seconds", type=int, default=30, help="Wait state period on AWS (default 30)")
    p.add_argument("--upload-only", action="store_true", help="only store the spec as specs/<file> (for a schedule)")
    p.add_argument("--context-file", metavar="CDK_JSON", help=CONTEXT_HELP)
    p.set_defaults(fn=cmd_start)

    p = sub.add_parser("status", help="AWS: status of a campaign execution (and why it failed)")
    p.add_argument("execution_arn")
    p.set_defaults(fn=cmd_status)

    p = sub.add_parser("doctor", help="AWS: prove a deployment for cents before any GPU: each function's self-test on "
                                      "its deployed layers, the load role's path as a tiny Job, the images exist, the "
                                      "spec's EC2 vCPU quotas (P, G/VT) and the capacity options of its P pools")
    p.add_argument("--state-machine-arn", help="default $BENCHCTL_STATE_MACHINE_ARN (stack output StateMachineArn)")
    p.add_argument("--spec", required=True, help="the spec you will run: its images are looked up, its GPU pools' "
                                                 "quotas read (your credentials: servicequotas:GetServiceQuota, "
                                                 "ec2:Describe*), and the runner Job check runs with its Kubernetes "
                                                 "settings")
    p.add_argument("--no-job", action="store_true", help="skip the load runner Job (it needs a CPU node)")
    p.add_argument("--job-timeout", type=float, default=900.0,
                   help="seconds to wait for the runner Job (a CPU node may have to start; default 900)")
    p.set_defaults(fn=cmd_doctor)

    p = sub.add_parser("ingest", help="ingest one AIPerf artifact directory (or sweep directory) into a lake")
    p.add_argument("artifact_dir")
    p.add_argument("--lake", required=True)
    p.add_argument("--campaign", required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--step", required=True)
    p.add_argument("--mode", choices=["aggregated", "disaggregated"], required=True,
                   help="how the server was deployed (AIPerf's artifacts do not say)")
    p.add_argument("--workload", default="concurrency-sweep")
    p.add_argument("--repeat", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=None)
    p.set_defaults(fn=cmd_ingest)

    p = sub.add_parser("render", help="write the Kubernetes manifests (DGDs, NodePools, Jobs: one load runner per workload) of a campaign as YAML, and each step's runner request as JSON")
    p.add_argument("spec")
    p.add_argument("--out", required=True, help="directory to write into (must be new or empty)")
    p.add_argument("--campaign-id", help="default: <spec name>-<UTC time>")
    p.add_argument("--context-file", metavar="CDK_JSON", help=CONTEXT_HELP)
    p.set_defaults(fn=cmd_render)

    p = sub.add_parser("predict", help="aiconfigurator's offline predictions for each concurrency-sweep step (not "
                       "measured): TTFT with the closed loop's wait, ITL, throughput, memory fit, within the SLO or "
                       "past it, and the highest load within it")
    p.add_argument("spec")
    p.add_argument("--lake", help="also write them to this lake's predictions table")
    p.add_argument("--campaign-id", help="campaign the rows belong to (default: the plan id, <spec name>-<hash>)")
    p.set_defaults(fn=cmd_predict)

    p = sub.add_parser("query", help="run a view (by name) or a SELECT over the lake with DuckDB; rows of a "
                                     "simulated campaign say SIMULATED (a line above a table; a 'simulated' "
                                     "column in CSV, a field in JSON); it reads the lake's tables only (no other "
                                     "file, URL, COPY, ATTACH, extension or SET: exit 2)")
    p.add_argument("name_or_sql")
    p.add_argument("--lake", default="runs/lake")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.set_defaults(fn=cmd_query)

    p = sub.add_parser("report", help="write one self-contained report of a campaign (HTML with SVG figures, or Markdown)")
    p.add_argument("--lake", default="runs/lake", help="the lake (default runs/lake: `benchctl run --out runs`)")
    p.add_argument("--campaign", help="campaign id (default: the latest in the lake's campaigns table)")
    p.add_argument("--out", required=True, help="file to write (atomically), e.g. report.html")
    p.add_argument("--format", choices=["html", "md"], help="default: md for a .md --out, else html")
    p.add_argument("--compare-measured", metavar="CAMPAIGN", help="a simulated campaign's report: put this measured "
                   "campaign (same lake) beside the twin and the prediction per sweep step, with MAPE per pair")
    p.set_defaults(fn=cmd_report)

    p = sub.add_parser("schema", help="print the campaign spec's JSON Schema (editors: # yaml-language-server: $schema=...)")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead (docs/reference/spec.schema.json: `make docs`)")
    p.set_defaults(fn=cmd_schema)

    from benchctl.cli_calibrate import add_parser as add_calibrate

    add_calibrate(sub).set_defaults(fn=cmd_calibrate)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except CeilingExceeded as err:
        _err(f"{err.source}: outside the deployment's ceilings (CDK context benchctl:ceilings of "
             "--context-file, default the project's cdk.json):")
        for line in err.problems:
            print(f"  {line}", file=sys.stderr)
        return 2
    except SpecError as err:
        _err(f"invalid spec {err.source}:")
        for line in err.problems:
            print(f"  {line}", file=sys.stderr)
        return 2
    except (ArtifactError, FileExistsError, FileNotFoundError, ValueError, AwsUnavailable) as err:  # CeilingsError too
        _err(str(err))
        return 2
    except OSError as err:  # a path that is a directory, unreadable, ...: named, never a traceback
        _err(f"{err.filename or ''}: {err.strerror or err}")
        return 2
    except KeyboardInterrupt:
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
