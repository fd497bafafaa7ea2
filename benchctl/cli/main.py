"""benchctl: the command line for people.

Exit codes: 0 success; 1 a campaign ran and failed (or a dashboard query did); 2 bad input (spec, artifacts,
arguments); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys

from benchctl.cli.aws import cmd_doctor, cmd_start, cmd_status
from benchctl.cli.common import AwsUnavailable, _err, say
from benchctl.cli.dashboards import cmd_dashboards
from benchctl.cli.lake import cmd_calibrate, cmd_compare, cmd_ingest, cmd_query, cmd_report
from benchctl.cli.local import cmd_run, cmd_sweep
from benchctl.cli.planning import cmd_plan, cmd_predict, cmd_render, cmd_schema, cmd_validate
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
  benchctl compare --lake runs/lake                    # the latest campaign against the one before it (same spec)
  benchctl calibrate --lake runs/lake --campaign C     # fit the mocker's timing profile from a measured campaign
  benchctl schema --out spec.schema.json               # the spec's JSON Schema, for editors
  benchctl dashboards --prometheus http://127.0.0.1:9090 --since 60   # every dashboard query, evaluated
"""


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

    p = sub.add_parser("plan", help="experiments x steps with deterministic ids, durations and cost estimate; with "
                       "--engine aws also the allocation table (deployments x repeats: price, error rate, power)")
    p.add_argument("spec")
    p.add_argument("--json", action="store_true", help="machine-readable plan")
    p.add_argument("--engine", choices=["local", "aws"], default="local", help="whose overheads to estimate")
    p.add_argument("--out", default="runs", help="workspace whose twin/ store holds the experiments' timing "
                   "profiles (default runs; a missing one is made in memory, nothing is written)")
    p.add_argument("--no-twin", action="store_true", help="time request-count steps by the fixed guess "
                   "(200 ms + OSL x 20 ms per request), not by each experiment's twin")
    p.add_argument("--no-edges", action="store_true", help="AWS: leave out each searched sweep's SLO edge as "
                   "aiconfigurator predicts it, with the grid's and the search's GPU-hours (about a minute for "
                   "examples/seed-plan.yaml)")
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
                                      "its deployed layers (every verb it uses on the cluster, as its own identity: "
                                      "its creates dry-run through the admission policies), the load role's path as "
                                      "a tiny Job, the images exist, the node group of each node-group pool, the "
                                      "spec's EC2 vCPU quotas (P, G/VT) and the capacity options of its P pools")
    p.add_argument("--state-machine-arn", help="default $BENCHCTL_STATE_MACHINE_ARN (stack output StateMachineArn)")
    p.add_argument("--spec", required=True, help="the spec you will run: the objects each function creates for it "
                                                 "are dry-run, its images looked up, its node groups read, its GPU "
                                                 "pools' quotas read (your credentials: servicequotas:GetServiceQuota, "
                                                 "ec2:Describe*, eks:DescribeNodegroup), and the runner Job check "
                                                 "runs with its Kubernetes settings")
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

    p = sub.add_parser("compare", help="a campaign against an earlier one of the same spec (default: the latest "
                                       "against the one before it), figure by figure and point by point, each change "
                                       "with its interval; what differs between them (spec hash, versions, driver, "
                                       "engine, twins) first")
    p.add_argument("campaign", nargs="?", help="campaign id (default: the latest in the lake's campaigns table)")
    p.add_argument("--against", metavar="CAMPAIGN", help="the campaign to compare it with (default: the latest "
                   "earlier campaign of the same spec name)")
    p.add_argument("--lake", default="runs/lake", help="the lake holding both (default runs/lake)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(fn=cmd_compare)

    p = sub.add_parser("schema", help="print the campaign spec's JSON Schema (editors: # yaml-language-server: $schema=...)")
    p.add_argument("--out", metavar="FILE", help="write it to FILE instead (docs/reference/spec.schema.json: `make docs`)")
    p.set_defaults(fn=cmd_schema)

    from benchctl.cli.calibrate import add_parser as add_calibrate
    from benchctl.cli.dashboards import add_parser as add_dashboards

    add_calibrate(sub).set_defaults(fn=cmd_calibrate)
    add_dashboards(sub).set_defaults(fn=cmd_dashboards)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except CeilingExceeded as err:
        _err(f"{err.source}: outside the deployment's ceilings (CDK context benchctl:ceilings of "
             "--context-file, default the project's cdk.json):")
        for line in err.problems:
            say(f"  {line}", file=sys.stderr)
        return 2
    except SpecError as err:
        _err(f"invalid spec {err.source}:")
        for line in err.problems:
            say(f"  {line}", file=sys.stderr)
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
