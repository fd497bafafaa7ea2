"""A deployed function's self-test (``benchctl doctor`` invokes each function with it, after ``cdk deploy``).

Each check runs the function's real code on what the function really has (the runtime, the deployed layers,
its role, its network, its access entry): nothing a test on this machine can prove. A check that fails is
reported, never raised, so one answer names every problem; a layer that crashes the process (a segfault)
ends the invocation, and the doctor reports the function as crashed.

Checks (``CHECKS``; the doctor picks them per function, ``checks_for``):

* ``imports``: the libraries the code imports, with the versions the layers really hold;
* ``datetime64``: pandas datetime64 construction, the path that segfaulted in AWS SDK for pandas 3.17.0's
  layers (aws/aws-sdk-pandas#3393), through the lake writer's own frame builder;
* ``parquet``: one timeline row written by the lake writer (awswrangler, pyarrow) under the scratch prefix
  ``<runs_uri>/_doctor/<function>/`` and read back;
* ``eks``: the cluster's API as this function's identity (access entry, RBAC, network): the namespace read;
* ``verbs`` (with the event's spec): every verb the function uses on the cluster, as its identity
  (:mod:`benchctl.aws.verbs`): its creates as server-side dry runs through the admission policies, the rest as
  access reviews, the node groups it scales read; one problem per verb, each with its fix;
* ``athena``: one view's DDL in the workgroup (what the Report state runs first);
* ``runner_job`` (the Load function): the load role's real path as a tiny load runner Job, started the way
  LaunchLoad starts one (``EksLoad.launch``) for one step whose AIPerf argv is ``--version``: the pod's
  two images as they run (one user, the shared directory), the inputs of its step listed and copied (an
  empty prefix: the listing is what needs ``s3:ListBucket``), AIPerf's output directory written as the load
  image's user, the upload of its artifacts (the runner's ``runner-record.json``) and the step's end record;
  ``runner_job_result`` reads how it ended (the doctor asks again until it did) and deletes the Job,
  ``runner_job_stop`` deletes it when the doctor stops waiting. The event carries the spec whose Kubernetes
  settings the Job runs with (namespace, images, service account, sizes).

May import the core and ``benchctl.aws`` (it runs in the functions), never ``benchctl.local``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from benchctl.aws.env import LambdaEnv
from benchctl.campaign.runstate import runner_key

SELF_TEST = "self_test"  # the event's action
DOCTOR_PREFIX = "_doctor"  # the scratch prefix under the run store's root
CHECKS = ("imports", "datetime64", "parquet", "eks", "verbs", "athena", "runner_job", "runner_job_result",
          "runner_job_stop")
DOCTOR = "doctor"  # the runner Job's experiment, workload and step name
# The functions whose roles call Kubernetes (held to stacks/function_needs.py's FUNCTION_NEEDS by a test; the
# scheduled sweeper, outside the state machine, too)
KUBERNETES_FUNCTIONS = ("Plan", "Pools", "Serving", "Load", "Teardown", "Sweep")

JSON = dict[str, Any]


def checks_for(function: str, *, spec: bool = False) -> list[str]:
    """The checks that apply to one function (its name as in ``lambdas.FUNCTIONS`` without ``FunctionArn``);
    ``spec``: the event carries a spec (the ``verbs`` check needs one)."""
    out = ["imports", "datetime64", "parquet"]
    if function in KUBERNETES_FUNCTIONS:
        out += ["eks", "verbs"] if spec else ["eks"]
    if function == "Report":
        out.append("athena")
    return out


def _imports(env: LambdaEnv, function: str, session: Any) -> str:
    import aws_lambda_powertools  # noqa: F401  (the handlers' logger)
    import awswrangler
    import boto3
    import botocore
    import numpy
    import pandas
    import pyarrow
    import yaml

    v = sys.version_info
    return (f"python {v.major}.{v.minor}.{v.micro}, pandas {pandas.__version__}, numpy {numpy.__version__}, "
            f"pyarrow {pyarrow.__version__}, awswrangler {awswrangler.__version__}, boto3 {boto3.__version__}, "
            f"botocore {botocore.__version__}, pyyaml {yaml.__version__}")


def _timeline_row() -> JSON:
    """A real timeline row (the lake's most common write), of a campaign id no campaign can have."""
    from benchctl.campaign.base import now_iso
    from benchctl.lake import timeline

    return timeline.row(DOCTOR_PREFIX, timeline.CAMPAIGN, timeline.PLANNED, now_iso(), steps=0)


def _datetime64(env: LambdaEnv, function: str, session: Any) -> str:
    import datetime

    import pandas as pd

    from benchctl.aws.s3 import _frame

    df = pd.DataFrame({"n": [1, 2]})
    df["t"] = datetime.datetime.now(datetime.UTC)  # the construction aws/aws-sdk-pandas#3393 crashed on
    parsed = pd.to_datetime(["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"])
    frame = _frame("timeline", [_normalised(_timeline_row())])  # the lake writer's own conversion
    return f"datetime64 columns built ({df['t'].dtype}, {parsed.dtype}, timeline.at {frame['at'].dtype})"


def _normalised(row: JSON) -> JSON:
    from benchctl.lake import schema

    return schema.normalize_row("timeline", row)


def _parquet(env: LambdaEnv, function: str, session: Any) -> str:
    import awswrangler as wr

    from benchctl.aws.providers import split_s3_uri
    from benchctl.aws.s3 import S3Lake

    bucket, prefix = split_s3_uri(env.runs_uri)
    scratch = f"{prefix}/{DOCTOR_PREFIX}/{function}".strip("/")
    lake = S3Lake(bucket, scratch, database=None, session=session)  # no Glue: a scratch prefix, no table
    row = _timeline_row()
    try:
        (uri,) = lake.write("timeline", [row], part_name="self-test")
        back = wr.s3.read_parquet(uri, boto3_session=session)
    except Exception as err:
        raise RuntimeError(f"s3://{bucket}/{scratch}/: {type(err).__name__}: {err}") from err
    if len(back) != 1 or back["event"].iloc[0] != row["event"] or str(back["at"].dtype) != "datetime64[us]":
        raise AssertionError(f"{uri}: read back {back.to_dict('records')} ({dict(back.dtypes.astype(str))})")
    return f"wrote and read back {uri}"


def _eks(env: LambdaEnv, function: str, session: Any) -> str:
    from benchctl.aws.eks_token import kube_for_cluster

    if not env.cluster:
        raise ValueError("BENCHCTL_CLUSTER is not set")
    kube = kube_for_cluster(env.cluster, session)
    ns = kube.get("v1", "Namespace", env.namespace)
    return (f"namespace {ns['metadata']['name']} of cluster {env.cluster} read with this function's EKS token "
            "(its role's access entry and RBAC group)")


def _athena(env: LambdaEnv, function: str, session: Any) -> str:
    from benchctl.analysis.views import athena_view_ddl
    from benchctl.aws.athena import run_query

    name, ddl = athena_view_ddl()[0]
    t0 = time.monotonic()
    try:
        run_query(session.client("athena"), ddl, database=env.database, workgroup=env.workgroup, timeout_s=120)
    except Exception as err:
        raise RuntimeError(f"view {name} in database {env.database!r}, workgroup {env.workgroup!r}: "
                           f"{type(err).__name__}: {err}") from err
    return f"CREATE OR REPLACE VIEW {name} in {env.database} (workgroup {env.workgroup}): {time.monotonic() - t0:.1f} s"


def _doctor_load(env: LambdaEnv, session: Any, spec_data: Any, campaign_id: str) -> Any:
    """The load port of the doctor's own campaign id, as the Load function builds it for a campaign."""
    from benchctl.aws.eks_load import EksLoad
    from benchctl.aws.eks_token import kube_for_cluster
    from benchctl.aws.preflight import with_load_image
    from benchctl.aws.providers import split_s3_uri
    from benchctl.aws.s3 import S3RunStore
    from benchctl.constants import runner_prefix
    from benchctl.spec.model import parse_spec

    if not isinstance(spec_data, dict):
        raise ValueError("the runner Job check needs the spec whose Kubernetes settings it runs with (event 'spec')")
    spec = with_load_image(parse_spec(spec_data), env.load_image)
    bucket, _ = split_s3_uri(env.runs_uri)
    store = S3RunStore(bucket, runner_prefix(campaign_id), session=session)  # the runner's hand-over
    return EksLoad(lambda: kube_for_cluster(env.cluster, session), spec, campaign_id, control=store,
                   region=session.region_name or "")


def _doctor_identity(env: LambdaEnv, session: Any, load: Any, campaign_id: str) -> Any:
    """The doctor's campaign's runner identity, as a campaign's Plan makes it (benchctl.aws.runner_identity)."""
    from benchctl.aws.runner_identity import RunnerIdentity

    return RunnerIdentity(lambda: load.kube, lambda: session.client("eks"), cluster=env.cluster,
                          namespace=load.spec.kubernetes.namespace, role_arn=env.load_role_arn, campaign_id=campaign_id)


def _runner_job(env: LambdaEnv, function: str, session: Any, event: Mapping[str, Any]) -> JSON:
    from benchctl.aws.k8s.common import raw_s3_uri
    from benchctl.aws.runner_identity import SETTLE_S
    from benchctl.campaign.ports import LoadRequest

    cid = str(event.get("campaign_id") or f"{DOCTOR}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    load = _doctor_load(env, session, event.get("spec"), cid)
    age = _doctor_identity(env, session, load, cid).ensure()  # its own service account, as a campaign's runner
    if age < SETTLE_S:  # an association takes several seconds to be effective: the doctor asks again then
        return {"detail": f"runner identity of campaign id {cid} settling ({age:.0f} s old)",
                "settle_s": SETTLE_S - age, "campaign_id": cid}
    state = load.launch(LoadRequest(cid, DOCTOR, DOCTOR, ("--version",), raw_s3_uri(cid, DOCTOR, DOCTOR, env.lake_uri),
                                    est_s=60.0, group=DOCTOR, group_steps=(DOCTOR,), group_est_s=60.0))
    return {"detail": f"Job {state['namespace']}/{state['name']} started (campaign id {cid})",
            "job": {"campaign_id": cid, "state": state}}


def _verbs(env: LambdaEnv, function: str, session: Any, event: Mapping[str, Any]) -> JSON:
    from benchctl.aws.eks_token import kube_for_cluster
    from benchctl.aws.preflight import with_load_image
    from benchctl.aws.verbs import NODEGROUP_FUNCTIONS, check_verbs
    from benchctl.spec.model import parse_spec

    if not isinstance(event.get("spec"), dict):
        raise ValueError("the verbs check needs the spec whose objects it dry-runs (event 'spec'; benchctl doctor --spec)")
    spec = with_load_image(parse_spec(event["spec"]), env.load_image)
    cid = f"{DOCTOR}-verbs-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"  # no campaign's; nothing is stored
    eks = session.client("eks") if function in NODEGROUP_FUNCTIONS else None
    problems, proven = check_verbs(function, spec, kube_for_cluster(env.cluster, session), cid, eks=eks,
                                   cluster=env.cluster, nodegroups=env.nodegroups, region=session.region_name or "",
                                   lake_uri=env.lake_uri, runs_uri=env.runs_uri)
    detail = f"{len(proven)} proven as this function's identity: {', '.join(proven)}"
    return {"ok": not problems, "problems": problems, "detail": "; ".join(problems) if problems else detail}


def _uploaded_runner_record(env: LambdaEnv, session: Any, campaign_id: str) -> JSON | None:
    """The runner's own record of the doctor's step (``runner-record.json``) as the Job uploaded it, or None."""
    import json

    from botocore.exceptions import ClientError

    from benchctl.aws.k8s.common import raw_s3_uri
    from benchctl.aws.providers import split_s3_uri

    bucket, key = split_s3_uri(f"{raw_s3_uri(campaign_id, DOCTOR, DOCTOR, env.lake_uri)}runner-record.json")
    try:
        data: JSON = json.loads(session.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError:
        return None
    return data


def _runner_job_stop(env: LambdaEnv, function: str, session: Any, event: Mapping[str, Any]) -> JSON:
    """The doctor gave up waiting (or was interrupted): the Job and its pod go."""
    job = event.get("job") or {}
    if not isinstance(job, dict) or "state" not in job:
        raise ValueError("event 'job': the answer of the runner_job check")
    load = _doctor_load(env, session, event.get("spec"), str(job["campaign_id"]))
    load.stop(job["state"])
    _doctor_identity(env, session, load, str(job["campaign_id"])).release()
    return {"detail": f"Job {job['state']['name']} deleted"}


def _runner_job_result(env: LambdaEnv, function: str, session: Any, event: Mapping[str, Any]) -> JSON:
    job = event.get("job") or {}
    if not isinstance(job, dict) or "state" not in job:
        raise ValueError("event 'job': the answer of the runner_job check")
    load = _doctor_load(env, session, event.get("spec"), str(job["campaign_id"]))
    state = job["state"]
    code = load.poll(state)
    if code is None:
        return {"ok": False, "pending": True,
                "detail": load.pending(state) or f"Job {state['name']} runs"}
    end = load.control.read_json(runner_key(DOCTOR, DOCTOR, "end.json")) or {}
    logs = {} if code == 0 and end else load.failure_logs(state, 20)
    load.stop(state)  # the Job and its pod go; its objects in the run store and the raw area are a few bytes
    _doctor_identity(env, session, load, str(job["campaign_id"])).release()
    if code == 0 and end:
        ran = _uploaded_runner_record(env, session, str(job["campaign_id"]))
        if ran is None:
            return {"ok": False, "detail": f"Job {state['name']}: its end record is there but not its artifacts "
                                           "(the runner's runner-record.json) in the step's raw area"}
        return {"ok": True, "detail": f"Job {state['name']}: AIPerf ran as uid {ran.get('uid')}, the step's inputs "
                                      "were listed and copied, its artifacts uploaded to the raw area and its end "
                                      "record written"}
    why = f"{end.get('error')}: {end.get('cause')}" if end.get("error") else (
        "the Job ended without its end record" if not end else f"AIPerf exited {code}")
    tails = "; ".join(f"{k}: {str(v).strip().splitlines()[-1] if str(v).strip() else ''}" for k, v in logs.items())
    return {"ok": False, "detail": f"Job {state['name']}: {why}" + (f" ({tails})" if tails else "")}


Check = Callable[[LambdaEnv, str, Any], str]
_CHECKS: dict[str, Check] = {
    "imports": _imports, "datetime64": _datetime64, "parquet": _parquet, "eks": _eks, "athena": _athena}
# checks that read the event and answer more than a line (runner_job's Job, runner_job_result's pending)
_EVENT_CHECKS: dict[str, Callable[[LambdaEnv, str, Any, Mapping[str, Any]], JSON]] = {
    "verbs": _verbs, "runner_job": _runner_job, "runner_job_result": _runner_job_result, "runner_job_stop": _runner_job_stop}


def self_test(event: Mapping[str, Any], environ: Mapping[str, str], *, session: Any = None) -> JSON:
    """Run the event's ``checks`` (default: all that apply to ``function``) and say how each went."""
    function = str(event.get("function") or "")
    checks = list(event.get("checks") or checks_for(function, spec=isinstance(event.get("spec"), dict)))
    unknown = sorted(set(checks) - set(CHECKS))
    if unknown:
        raise ValueError(f"self-test checks {unknown} are not among {list(CHECKS)}")
    env = LambdaEnv.from_env(environ)
    if session is None:
        import boto3

        session = boto3.session.Session()
    out: JSON = {}
    for name in checks:
        t0 = time.monotonic()
        try:
            if name in _EVENT_CHECKS:
                out[name] = {"ok": True, **_EVENT_CHECKS[name](env, function, session, event)}
            else:
                out[name] = {"ok": True, "detail": _CHECKS[name](env, function, session)}
        except Exception as err:  # every check answers; the doctor prints them all
            out[name] = {"ok": False, "detail": f"{type(err).__name__}: {err}"[:1000]}
        out[name]["detail"] = str(out[name].get("detail"))[:1000]
        out[name]["seconds"] = round(time.monotonic() - t0, 3)
    return {"function": function, "checks": out}
