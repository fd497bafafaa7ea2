"""What Lambda really has: each function's real code path, run in an environment holding only what a
function gets on AWS, against AWS's APIs played by moto's server and the cluster's API by a fake.

The environment (``build/lambda-env``, built by ``scripts/build_lambda.sh`` from ``stacks/layers.py``):

* the runtime's interpreter: CPython 3.13 (the ``python3.13`` runtime's language version; this machine's
  pyenv build, not Amazon Linux's), run isolated (``-I -S -B``: no site-packages, no PYTHONPATH, nothing
  written next to the read-only code);
* ``/var/task``: the code asset exactly as synthesized (``cdk.out``), not the work tree;
* ``/opt/python``: the managed layers' library versions (Powertools 3.23.0 with its ``[all]`` extras;
  awswrangler 3.16.0, pyarrow 20.0.0, pandas 3.0.2, numpy 2.4.4 (``stacks/layers.py`` says why those);
  each without the boto3/botocore their builds strip), then our own layer (``requirements-layer.txt``: PyYAML, boto3/botocore 1.44.8),
  merged in the functions' layer order;
* the runtime's own packages: AWS pins no version of its bundled SDK, so botocore 1.34.162 (the last
  one without ``IfNoneMatch``) stands for it: the test proves that our layer's SDK is the one in effect.

The handlers are called as the state machine calls them (``tests/infra/lambda_driver.py``): Plan from a
spec URI, Deploy, LaunchLoad writing a dataset create-only, CheckLoad, IngestPreviousStep/IngestLastStep writing parquet and
registering Glue partitions, Report creating the views in Athena and writing the HTML report. Everything
they do is then read back from moto and the fake cluster. moto plays AWS's APIs here, not AWS's
semantics beyond them (Athena runs no SQL): the boundary under test is what libraries a function has and
that its code path runs on them, each handler with exactly its function's synthesized role (the runner
Job's part with the load Job role), under IAM enforced as tests/fakes/moto_iam.py describes: S3 calls
checked against their bucket and object, with IAM's condition rules and S3's 403 for a missing key;
every other service's calls (Glue, Athena, DynamoDB, EKS, Step Functions) against their actions only,
because moto names no resource for them (``Enforcement.unnamed`` lists them).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from benchctl.analysis.views import athena_view_ddl
from benchctl.campaign import step_dataset
from benchctl.lake import schema
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import load_spec, load_spec_text
from benchctl.spec.text import spec_data
from stacks import layers
from tests.fakes.eks_world import EFA_DEVICE_PLUGIN, runner_grants
from tests.fakes.ports import write_sample_artifacts
from tests.infra.conftest import CP, ROOT, load_templates

pytestmark = pytest.mark.infra
ENV_DIR = ROOT / "build" / "lambda-env"
DRIVER = Path(__file__).with_name("lambda_driver.py")
ACCOUNT, REGION = "123456789012", "us-east-1"
BUCKET, DATABASE, WORKGROUP, LOCKS = "benchctl-dev-results", "benchctl_dev", "benchctl-dev", "benchctl-dev-locks"
CLUSTER, NODEGROUP, NS = "bench", "gpu-p4d", "dynamo-bench"
CID = "seed-plan-lambda-env"
# the driver follows the plan's first entry: the seed plan deploys each experiment 5 times (design.deployments) in a
# randomized order drawn from its seed, so the first entry is one experiment's first deployment (its raw artifacts
# and its DynamoGraphDeployment under the deployment's name, its lake rows under the experiment's)
SEED_PLAN = plan_campaign(load_spec(ROOT / "examples" / "seed-plan.yaml"), "aws")
UNIT, EXPERIMENT, STEP = SEED_PLAN.experiments[0].name, SEED_PLAN.experiments[0].lake_name, "prefix-cache-p25-r0"


class EksTokens:
    """The fake cluster's accepted tokens: any ``aws eks get-token``-style token for this cluster (a
    presigned STS GetCallerIdentity with the signed header x-k8s-aws-id), as EKS would accept it."""

    def __init__(self) -> None:
        self.seen = 0

    def __contains__(self, token: object) -> bool:
        if not isinstance(token, str) or not token.startswith("k8s-aws-v1."):
            return False
        b64 = token.removeprefix("k8s-aws-v1.")
        url = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).decode()
        q = parse_qs(urlsplit(url).query)
        ok = q.get("Action") == ["GetCallerIdentity"] and "x-k8s-aws-id" in q.get("X-Amz-SignedHeaders", [""])[0]
        self.seen += ok
        return ok


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _code_asset(out: Path) -> Path:
    assets = json.loads((out / f"{CP}.assets.json").read_text())["files"]
    dirs = [out / a["source"]["path"] for a in assets.values() if a["source"].get("packaging") == "zip"]
    return next(d for d in dirs if (d / "lambdas").is_dir())


def _world_names(templates: dict[str, Any]) -> dict[str, str]:
    """The synthesized names in the roles' policies -> this world's (its bucket, lock table, cluster)."""
    from tests.infra.cfn_resolve import Resolver

    (fn,) = [r["Properties"] for r in templates[CP]["Resources"].values()
             if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == "lambdas.load.handler"]
    env = Resolver(templates).resolve(fn["Environment"]["Variables"], CP)
    assert (env["BENCHCTL_DATABASE"], env["BENCHCTL_WORKGROUP"]) == (DATABASE, WORKGROUP)
    assert set(env["BENCHCTL_NODEGROUPS"].split(",")) >= {NODEGROUP}
    machine = env["BENCHCTL_CAMPAIGN_MACHINE_ARN"].rsplit(":", 1)[1]  # the campaign state machine's fixed name
    return {f"arn:aws:s3:::{env['BENCHCTL_BUCKET']}": f"arn:aws:s3:::{BUCKET}",
            f":execution:{machine}:": f":execution:{CAMPAIGN_MACHINE_NAME}:",
            f":table/{env['BENCHCTL_LOCK_TABLE']}": f":table/{LOCKS}",
            f":cluster/{env['BENCHCTL_CLUSTER']}": f":cluster/{CLUSTER}",
            f":podidentityassociation/{env['BENCHCTL_CLUSTER']}/": f":podidentityassociation/{CLUSTER}/",
            f":nodegroup/{env['BENCHCTL_CLUSTER']}/": f":nodegroup/{CLUSTER}/"}


def _roles(templates: dict[str, Any]) -> dict[str, tuple[Any, list[Any]]]:
    """Each actor of the driver (a handler; "runner") -> its synthesized role's trust and identity policies,
    named as in this world."""
    from tests.fakes.moto_iam import function_roles, role_documents
    from tests.infra.cfn_resolve import Resolver

    renames = _world_names(templates)

    def here(doc: Any) -> Any:
        text = json.dumps(doc)
        for old, new in renames.items():
            text = text.replace(old, new)
        return json.loads(text)

    r = Resolver(templates)
    return {who: (r.resolve(templates[CP]["Resources"][rid]["Properties"]["AssumeRolePolicyDocument"], CP),
                  [here(d) for d in role_documents(templates, CP, rid)])
            for who, rid in function_roles(templates, CP).items()}


def _load_role_arn(out: Path) -> str:
    """The load Job role's ARN as the stack gives it to the functions (what Plan and Load may pass)."""
    from tests.fakes.moto_iam import function_roles
    from tests.infra.cfn_resolve import Resolver

    templates = load_templates(out)
    arn: str = Resolver(templates).resolve({"Fn::GetAtt": [function_roles(templates, CP)["runner"], "Arn"]}, CP)
    return arn


def _function_env(out: Path, url: str) -> dict[str, str]:
    """The variables the stack gives a function (their names from the template), with this test's values."""
    envs = [f["Properties"]["Environment"]["Variables"] for k, f in load_templates(out)[CP]["Resources"].items()
            if f["Type"] == "AWS::Lambda::Function" and not k.startswith("Sweep")]
    names = sorted({n for e in envs for n in e})  # one process runs every function here: the union
    # the deployment's ceilings, recorded on Plan and Pools only (the same literal JSON on each)
    (ceilings,) = {e["BENCHCTL_CEILINGS"] for e in envs if "BENCHCTL_CEILINGS" in e}
    values = {"BENCHCTL_BUCKET": BUCKET, "BENCHCTL_NAMESPACE": "dynamo-bench", "BENCHCTL_LAKE_URI": f"s3://{BUCKET}/lake",
              "BENCHCTL_RUNS_URI": f"s3://{BUCKET}/runs", "BENCHCTL_DATABASE": DATABASE,
              "BENCHCTL_WORKGROUP": WORKGROUP, "BENCHCTL_CLUSTER": CLUSTER, "BENCHCTL_NODEGROUPS": ",".join(NODEGROUPS),
              "BENCHCTL_LOCK_TABLE": LOCKS, "BENCHCTL_LOAD_IMAGE": "123456789012.dkr.ecr.us-east-1.amazonaws.com/load:1",
              "BENCHCTL_LOAD_ROLE_ARN": _load_role_arn(out), "POWERTOOLS_LOG_LEVEL": "INFO",
              "BENCHCTL_CEILINGS": ceilings, "BENCHCTL_PLATFORM_JSON": PLATFORM_JSON,
              "BENCHCTL_CAMPAIGN_MACHINE_ARN": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{CAMPAIGN_MACHINE_NAME}"}
    assert set(names) == set(values), f"the stack's function variables changed: {sorted(names)}"
    return {**values,  # what the Lambda service itself sets, and where "AWS" is
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
            "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION, "AWS_LAMBDA_FUNCTION_NAME": "benchctl-test",
            "AWS_ENDPOINT_URL": url, "AWS_EC2_METADATA_DISABLED": "true", "LANG": "C.UTF-8",
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"}


@dataclass(frozen=True)
class Case:
    """One campaign the driver runs: its example spec, campaign id and the step it follows."""

    spec: str
    cid: str
    experiment: str
    step: str
    fail_at: str | None = None  # a failed execution: this state fails, then the state machine's failure path
    stop: str | None = None  # stopped from outside while its load runs (ABORTED, TIMED_OUT): the stopped-campaign path

    @property
    def path(self) -> Path:
        return ROOT / "examples" / f"{self.spec}.yaml"


SEED = Case("seed-plan", CID, UNIT, STEP)
# the AWS rehearsal: Dynamo mocker workers on a CPU node group, the same functions and layers
REHEARSAL = Case("aws-rehearsal", "aws-rehearsal-lambda-env", "agg", "prefix-cache-p100-r0")
# a failed execution of it: CheckLoad fails, TeardownAfterFailure, AbortCampaign, ReportFailure
FAILED = Case("aws-rehearsal", "aws-rehearsal-failed", "agg", "prefix-cache-p100-r0", fail_at="CheckLoad")
# executions stopped from outside while AwaitLoadEnd waits (Stop execution; the execution's timeout)
STOPPED = Case("aws-rehearsal", "aws-rehearsal-stopped", "agg", "prefix-cache-p100-r0", stop="ABORTED")
TIMED_OUT = Case("aws-rehearsal", "aws-rehearsal-timed-out", "agg", "prefix-cache-p100-r0", stop="TIMED_OUT")
NODEGROUPS = (NODEGROUP, "benchctl-rehearsal")
# what a platform stack gives the functions (stacks.platform_manifests.monitoring_provenance)
PLATFORM_JSON = '{"dashboards_sha256":"' + "ab" * 32 + '","scrape_interval":"15s"}'


CAMPAIGN_MACHINE_NAME = "benchctl-campaign"  # the executions the driver's cases name (config "execution")


def _stopped_executions(client: Any, cases: tuple[Case, ...]) -> None:
    """The campaign state machine's execution of each stopped case, ended as the case says: ResolveStopped
    describes it (DescribeExecution, as the Teardown role) before it tears anything down. moto, not running
    definitions here, ends an execution ABORTED on StopExecution; TIMED_OUT, which only a running definition
    reaches, is set on its backend record (moto answers DescribeExecution from it)."""
    from moto.stepfunctions.models import stepfunctions_backends

    stopped = [case for case in cases if case.stop]
    if not stopped:
        return
    sfn = client("stepfunctions")
    machine = sfn.create_state_machine(
        name=CAMPAIGN_MACHINE_NAME, roleArn=f"arn:aws:iam::{ACCOUNT}:role/campaign",
        definition=json.dumps({"StartAt": "Run", "States": {"Run": {"Type": "Pass", "End": True}}}))["stateMachineArn"]
    for case in stopped:
        arn = sfn.start_execution(stateMachineArn=machine, name=case.cid, input=json.dumps(
            {"spec_uri": f"s3://{BUCKET}/specs/{case.spec}.yaml", "campaign_id": case.cid, "poll_seconds": 30}))[
            "executionArn"]
        sfn.stop_execution(executionArn=arn)
        if case.stop == "TIMED_OUT":
            stepfunctions_backends[ACCOUNT][REGION].describe_execution(arn).status = "TIMED_OUT"
        assert sfn.describe_execution(executionArn=arn)["status"] == case.stop


def _aws_world(client: Any, api: Any, tmp: Path, cases: tuple[Case, ...]) -> None:
    """The deployment's resources as the stacks create them, the cluster's prerequisites, and each case's spec
    in the bucket and its step's artifacts where its runner Job would upload them."""
    from moto.eks.models import eks_backends

    s3 = client("s3")
    s3.create_bucket(Bucket=BUCKET)
    for case in cases:
        s3.put_object(Bucket=BUCKET, Key=f"specs/{case.spec}.yaml", Body=case.path.read_bytes())
    glue = client("glue")
    glue.create_database(DatabaseInput={"Name": DATABASE})
    for name in schema.table_names():  # as stacks/results.py defines them
        cols = schema.glue_columns(name)
        glue.create_table(DatabaseName=DATABASE, TableInput={
            "Name": name, "TableType": "EXTERNAL_TABLE", "Parameters": {"classification": "parquet"},
            "PartitionKeys": [{"Name": c["name"], "Type": c["type"]} for c in cols["partition_keys"]],
            "StorageDescriptor": {"Columns": [{"Name": c["name"], "Type": c["type"]} for c in cols["columns"]],
                                  "Location": f"s3://{BUCKET}/lake/{name}/"}})
    client("athena").create_work_group(Name=WORKGROUP, Configuration={
        "ResultConfiguration": {"OutputLocation": f"s3://{BUCKET}/athena-results/"},
        "EnforceWorkGroupConfiguration": True})
    client("dynamodb").create_table(TableName=LOCKS, KeySchema=[{"AttributeName": "pool", "KeyType": "HASH"}],
                                    AttributeDefinitions=[{"AttributeName": "pool", "AttributeType": "S"}],
                                    BillingMode="PAY_PER_REQUEST")
    eks = client("eks")
    role = f"arn:aws:iam::{ACCOUNT}:role/eks"
    eks.create_cluster(name=CLUSTER, roleArn=role, resourcesVpcConfig={})
    for ng in NODEGROUPS:
        eks.create_nodegroup(clusterName=CLUSTER, nodegroupName=ng, nodeRole=role, subnets=["subnet-1"],
                             scalingConfig={"minSize": 0, "maxSize": 2, "desiredSize": 0})
    cluster = eks_backends[ACCOUNT][REGION].clusters[CLUSTER]  # its API is the fake's (moto has none)
    cluster.endpoint = api.url
    cluster.certificate_authority = {"data": base64.b64encode(b"-----BEGIN CERTIFICATE-----").decode()}
    for obj in ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
                {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                 "metadata": {"name": "dynamographdeployments.nvidia.com"}},
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": NS},
                 "data": {"HF_TOKEN": "aGY="}},
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache", "namespace": NS}},
                EFA_DEVICE_PLUGIN,  # the seed plan's p4d pool asks for EFA
                runner_grants(NS)):  # applied with stacks/kubernetes/benchctl-identities.yaml; Plan adds each grant
        api.put(obj)
    api.on_create("Job", lambda a, obj: a.set_status("Job", NS, obj["metadata"]["name"], {"succeeded": 1}))
    # the step's AIPerf artifacts, as its Job would upload them (real AIPerf 0.13.0 samples, one record per
    # line of the dataset LaunchLoad will write)
    for case in cases:
        dataset = step_dataset(plan_campaign(load_spec(case.path), "aws").step(case.experiment, case.step))
        assert dataset is not None
        arts = tmp / case.cid / "artifacts"
        lines = sum(1 for line in dataset.data.splitlines() if line.strip())
        for name in write_sample_artifacts(arts, lines):
            s3.put_object(Bucket=BUCKET, Body=(arts / name).read_bytes(),
                          Key=f"lake/raw/campaign_id={case.cid}/experiment={case.experiment}/step_id={case.step}/{name}")


@pytest.fixture(scope="module")
def runs(default_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    yield from _drive(default_out, tmp_path_factory.mktemp("lambda-env"), (SEED, REHEARSAL, FAILED, STOPPED, TIMED_OUT))


@pytest.fixture(scope="module")
def run(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return runs[SEED.cid]


@pytest.fixture(scope="module")
def rehearsal(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return runs[REHEARSAL.cid]


@pytest.fixture(scope="module")
def failed(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return runs[FAILED.cid]


def _drive(default_out: Path, tmp: Path, cases: tuple[Case, ...]) -> Iterator[dict[str, dict[str, Any]]]:
    """The driver's path for each campaign in turn (one deployment, one account: moto's backends and its IAM
    enforcement are this process's), in the Lambda-like environment, against moto (IAM enforced) and the fake
    cluster; what each did and what the account holds after them all, for the tests to read."""
    import boto3
    from moto.server import ThreadedMotoServer

    from tests.fakes import pod_identity
    from tests.fakes.ec2_capacity import ec2_capacity
    from tests.fakes.k8s_api import FakeKubeApi
    from tests.fakes.moto_iam import (
        administrator,
        assume,
        assume_roles,
        fresh_account,
        iam_enforced,
        pod_identity_tags,
    )

    python = ENV_DIR / "python"
    assert python.exists(), (f"{python} is missing: this machine has no Python {layers.PYTHON_VERSION} (the "
                             "Lambda runtime's); install one (e.g. pyenv install 3.13) and run scripts/setup.sh")
    assert (ENV_DIR / "opt" / "python").is_dir(), f"{ENV_DIR} is not built: run scripts/setup.sh"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    patches = pytest.MonkeyPatch()
    # moto's EKS has no Pod Identity calls: answered in its server, authorized as moto authorizes any call
    pods = pod_identity.serve_on_moto(patches, CLUSTER)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    fresh_account(url)
    try:
        with FakeKubeApi() as api, contextlib.ExitStack() as stack:
            api.tokens = EksTokens()  # type: ignore[assignment]
            session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                            region_name=REGION)

            def client(service: str) -> Any:
                return session.client(service, endpoint_url=url)

            _aws_world(client, api, tmp, cases)
            _stopped_executions(client, cases)
            # every actor with its own synthesized role, and the test itself as an administrator from here on
            iam = client("iam")
            arns: dict[str, str] = {}
            credentials = assume_roles(iam, client("sts"), _roles(load_templates(default_out)), arns=arns)
            # each campaign's runner: the load Job role as EKS Pod Identity gives it to that campaign's pods
            runners = {case.cid: assume(client("sts"), arns["runner"], "runner", pod_identity_tags(
                f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER}", NS, case.cid)) for case in cases}
            admin = administrator(iam)
            session = boto3.session.Session(aws_access_key_id=admin["AWS_ACCESS_KEY_ID"],
                                            aws_secret_access_key=admin["AWS_SECRET_ACCESS_KEY"], region_name=REGION)
            # EC2's GPU quotas (Plan's preflight reads them; moto has none): room for every case's pools
            stack.enter_context(ec2_capacity({"L-417A185B": 384.0, "L-DB2E81BA": 384.0}))
            enforcement = stack.enter_context(iam_enforced(url))
            results = {}
            for case in cases:
                results[case.cid] = _run_driver(default_out, tmp / case.cid, case, url,
                                                {**credentials, "runner": runners[case.cid]})
            s3 = client("s3")
            athena = client("athena")
            ids = athena.list_query_executions(WorkGroup=WORKGROUP)["QueryExecutionIds"]
            shared = {
                "kube": api, "tokens": api.tokens,
                "keys": sorted(o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
                               for o in page.get("Contents", [])),
                "get": lambda key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read(),
                "partitions": lambda table: [p["Values"] for p in client("glue").get_partitions(
                    DatabaseName=DATABASE, TableName=table)["Partitions"]],
                "queries": [athena.get_query_execution(QueryExecutionId=i)["QueryExecution"]["Query"] for i in ids],
                "locks": client("dynamodb").scan(TableName=LOCKS)["Items"],
                "iam": enforcement, "pod_identity": pods,
            }
            yield {spec: {**shared, **r} for spec, r in results.items()}
    finally:
        fresh_account(url)
        server.stop()
        patches.undo()


def _run_driver(default_out: Path, tmp: Path, case: Case, url: str, credentials: dict[str, Any]) -> dict[str, Any]:
    """One campaign's path through the handlers, as ``lambda_driver.py`` runs it in the Lambda-like
    environment (-I -S: isolated, no site-packages; -B: no bytecode written, /var/task and /opt are read-only)."""
    python = ENV_DIR / "python"
    tmp.mkdir(parents=True, exist_ok=True)
    dataset = step_dataset(plan_campaign(load_spec(case.path), "aws").step(case.experiment, case.step))
    assert dataset is not None
    config = {
        "paths": [str(_code_asset(default_out)), str(ENV_DIR / "opt" / "python"), str(ENV_DIR / "runtime")],
        "spec_uri": f"s3://{BUCKET}/specs/{case.spec}.yaml", "campaign_id": case.cid, "step": case.step,
        "execution": f"arn:aws:states:{REGION}:{ACCOUNT}:execution:benchctl-campaign:{case.cid}",
        "bucket": BUCKET, "dataset_name": dataset.name, "result": str(tmp / "result.json"),
        "credentials": credentials, "fail_at": case.fail_at, "stop": case.stop,
        "spec_data": spec_data(load_spec_text(case.path), str(case.path)),  # what the doctor sends with --spec
    }
    (tmp / "config.json").write_text(json.dumps(config))
    proc = subprocess.run([str(python), "-I", "-S", "-B", str(DRIVER), str(tmp / "config.json")],
                          env=_function_env(default_out, url), capture_output=True, text=True, timeout=600, cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp / "result.json").read_text())
    assert result["error"] is None, result["error"] + "\n" + proc.stderr[-3000:]
    return {"result": result, "dataset": dataset, "case": case}


def _calls(run: dict[str, Any], state: str) -> list[Any]:
    return [c["result"] for c in run["result"]["calls"] if c["state"] == state]


def test_the_environment_holds_only_what_a_function_gets(run):
    r = run["result"]
    assert r["python"][:2] == [3, 13]
    code, opt, runtime = (Path(p) for p in r["sys_path"][:3])
    assert code.name.startswith("asset.") and opt == ENV_DIR / "opt" / "python" and runtime == ENV_DIR / "runtime"
    assert not any("site-packages" in p or "/.venv" in p or p == str(ROOT) for p in r["sys_path"])  # nothing else
    mods = r["modules"]
    pins = dict(line.split("==") for line in (ROOT / "requirements-layer.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    for name in ("boto3", "botocore"):  # ours, from our layer: the runtime's 1.34 is shadowed
        assert mods[name]["file"].startswith(str(opt)) and mods[name]["version"] == pins[name], mods[name]
    assert mods["yaml"]["file"].startswith(str(opt))
    wanted: dict[str, str | None] = dict(r.split("==") for r in layers.PARTS["sdk-pandas"])
    wanted["aws_lambda_powertools"] = None
    for name, version in wanted.items():
        assert mods[name] and mods[name]["file"].startswith(str(opt)), (name, mods[name])
        assert version is None or mods[name]["version"] == version, (name, mods[name])
    # the Report function's view order needs no sqlglot (not shipped), nor does anything else
    assert mods["sqlglot"] is None and r["sqlglot_importable"] is False and mods["duckdb"] is None


def test_plan_from_a_spec_uri_writes_the_run_store_the_lake_and_the_locks(run):
    (plan,) = _calls(run, "Plan")
    assert plan["ctx"]["campaign_id"] == CID and plan["ctx"]["run_uri"] == f"s3://{BUCKET}/runs/{CID}"
    assert [e["name"] for e in plan["experiments"]] == [e.name for e in SEED_PLAN.experiments]
    assert sorted(e["name"] for e in plan["experiments"]) == [f"{x}--d{k}" for x in ("agg-tp4x4", "disagg-2p2d-tp4")
                                                              for k in range(1, 6)]
    keys = run["keys"]
    for key in ("spec.json", "spec_meta.json", "plan.json", "campaign.json"):
        assert f"runs/{CID}/{key}" in keys, key
    assert json.loads(run["get"](f"runs/{CID}/spec_meta.json"))["source"] == f"s3://{BUCKET}/specs/seed-plan.yaml"
    assert [CID] in run["partitions"]("campaigns") and [CID, EXPERIMENT] in run["partitions"]("experiments")
    assert run["tokens"].seen > 0  # the preflight reached the cluster with an EKS token
    # the id is this execution's (a create-only claim, as the Plan role): another execution's Plan is refused
    claim = json.loads(run["get"](f"runs/{CID}/claim.json"))
    assert claim["execution"] == f"arn:aws:states:{REGION}:{ACCOUNT}:execution:benchctl-campaign:{CID}"
    assert run["result"]["reused_id"].startswith(f"CampaignIdInUse: campaign id '{CID}' belongs to execution ")


def test_launchload_writes_its_dataset_create_only_and_starts_a_job(run):
    ds = run["dataset"]
    key = f"lake/raw/campaign_id={CID}/experiment={UNIT}/step_id={STEP}/inputs/{ds.name}"
    assert run["get"](key) == ds.data  # the exact bytes the load was given, kept before it ran
    assert run["result"]["second_write"].startswith("refused:") and "never replaced" in run["result"]["second_write"]
    posted = [path for method, path in run["kube"].requests if method == "POST"]
    assert any(p.split("?")[0].endswith(f"/namespaces/{NS}/jobs") for p in posted), posted  # the step's AIPerf Job
    assert _calls(run, "CheckLoad") == [{"done": True, "exit_code": 0}]
    argv = run["result"]["runner_request"]["argv"]  # what the step asks of its workload's runner Job
    assert argv[argv.index("--artifact-dir") + 1] == f"/artifacts/{STEP}/out"


def test_ingest_writes_parquet_and_registers_its_partitions(run):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (ingest,) = _calls(run, "IngestPreviousStep") or _calls(run, "IngestLastStep")
    assert ingest["step"] == STEP
    assert ingest["status"] == "succeeded" and ingest["requests"] == sum(
        1 for line in run["dataset"].data.splitlines() if line.strip())
    for table in ("steps", "requests"):
        key = f"lake/{table}/campaign_id={CID}/experiment={EXPERIMENT}/{STEP}.parquet"
        assert key in run["keys"], table
        t = pq.read_table(io.BytesIO(run["get"](key)))
        assert t.schema == schema.arrow_schema(table, include_partitions=False), table
        assert [CID, EXPERIMENT] in run["partitions"](table)
    steps = pq.read_table(io.BytesIO(run["get"](f"lake/steps/campaign_id={CID}/experiment={EXPERIMENT}/{STEP}.parquet")))
    assert any(pa.types.is_timestamp(f.type) and f.type.unit == "us" for f in steps.schema)


def test_report_creates_every_view_and_writes_the_report(run):
    (report,) = _calls(run, "Report")
    assert report["views"]
    ddl = [q for q in run["queries"] if q.startswith("CREATE OR REPLACE VIEW")]
    expected = [d for _, d in athena_view_ddl()]
    assert ddl[:len(expected)] == expected  # every view, dependencies first (then the doctor's self-test's one)
    html = run["get"](f"reports/{CID}/report.html").decode()
    assert "<html" in html.lower() and CID in html
    assert run["locks"] == []  # Report released the campaign's pool locks
    assert [CID] in run["partitions"]("campaigns")


def test_every_function_passes_the_doctors_self_test_on_these_layers(run):
    """``benchctl doctor``'s self-test, as each deployed function runs it: imports with the layers' versions,
    pandas datetime64 through the lake writer, parquet written and read back under the scratch prefix, the
    cluster's API with the function's EKS token and every verb it uses there (the functions that call
    Kubernetes: their creates dry-run, the node groups read with their IAM roles), one view's DDL (Report)."""
    from benchctl.aws.selftest import checks_for

    answers = {c["result"]["function"]: c["result"]["checks"] for c in run["result"]["calls"]
               if c["handler"].startswith("lambdas.") and isinstance(c["result"], dict) and "checks" in c["result"]}
    assert set(answers) == {"Plan", "Pools", "Serving", "Load", "Ingest", "Teardown", "Report", "Sweep"}
    pins = dict(r.split("==") for r in layers.PARTS["sdk-pandas"])
    for fn, checks in answers.items():
        assert list(checks) == checks_for(fn, spec=True), fn
        assert all(c["ok"] for c in checks.values()), (fn, checks)
        assert f"pandas {pins['pandas']}" in checks["imports"]["detail"] and "python 3.13" in checks["imports"]["detail"]
    assert "namespace dynamo-bench" in answers["Plan"]["eks"]["detail"]
    # every verb on the cluster as the function's identity; the node groups read with its own IAM role
    assert "create DynamoGraphDeployment x" in answers["Serving"]["verbs"]["detail"]
    assert all(f"node group {ng} read" in answers[fn]["verbs"]["detail"] for fn in ("Pools", "Teardown")
               for ng in NODEGROUPS)
    assert "CREATE OR REPLACE VIEW" in answers["Report"]["athena"]["detail"]
    ddl = [q for q in run["queries"] if q.startswith("CREATE OR REPLACE VIEW")]
    assert athena_view_ddl()[0][1] in ddl  # the self-test ran the real DDL of one view
    assert any(k.startswith("runs/_doctor/Ingest/timeline/") for k in run["keys"])


LAMBDA_UNZIPPED_LIMIT = 262_144_000  # a function and all its layers, unzipped (Lambda quotas)


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)


def test_a_function_and_its_layers_fit_lambdas_unzipped_limit(default_out):
    """Lambda refuses a function whose code and layers exceed 262,144,000 bytes unzipped ("Layers consume
    more than the available size"), at deployment. The parts: the SDK-for-pandas layer at the size upstream's
    users measured (stacks/layers.py; its trimmed pyarrow cannot be built here), the Powertools layer's
    stand-in (PyPI's wheels of its version and extras, without the SDK its build strips), our layer and the
    code asset as synthesized. At least 10 MB must stay free (a stand-in is not the layer)."""
    sizes = json.loads((ENV_DIR / "sizes.json").read_text())
    ours = _size(ROOT / "build" / "lambda-layer" / "python")
    code = _size(_code_asset(default_out))
    total = layers.SDK_PANDAS_UNZIPPED_BYTES + sizes["powertools"] + ours + code
    parts = (f"sdk-pandas {layers.SDK_PANDAS_UNZIPPED_BYTES / 1e6:.1f} MB + powertools {sizes['powertools'] / 1e6:.1f}"
             f" MB + ours {ours / 1e6:.1f} MB + code {code / 1e6:.1f} MB = {total / 1e6:.1f} MB")
    assert total + 10_000_000 <= LAMBDA_UNZIPPED_LIMIT, parts
    assert code < 10 * 1024**2, parts


# What the functions call that moto checks by action alone (it names no resource for these services): the
# roles' resource scoping of these calls is held by parliament and cdk-nag (tests/infra), not here.
UNNAMED = {"dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "eks:DescribeCluster",
           "eks:DescribeNodegroup", "eks:UpdateNodegroupConfig", "eks:DescribeAddon", "glue:GetTable", "glue:GetTables", "glue:GetDatabase",
           "glue:CreatePartition", "glue:BatchCreatePartition", "glue:GetPartition", "glue:GetPartitions",
           "glue:BatchGetPartition", "glue:UpdateTable", "glue:CreateTable", "athena:StartQueryExecution",
           "athena:GetQueryExecution", "athena:GetQueryResults", "athena:GetWorkGroup",
           "states:SendTaskSuccess",
           # the sweeper's reads after a stopped campaign (its lock table, the recorded execution's status)
           "dynamodb:Scan", "states:DescribeExecution",
           # Plan's preflight reads of the EC2 quotas and capacity (stacks/control_plane.py QUOTA_ACTIONS; none of
           # them names a resource of this stack: granted on *)
           "servicequotas:GetServiceQuota", "servicequotas:GetAWSDefaultServiceQuota", "ec2:DescribeInstanceTypes",
           "ec2:DescribeInstances", "ec2:DescribeCapacityReservations", "ec2:DescribeLaunchTemplateVersions",
           "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeSubnets"}  # the capacity check's (capacity_checks)


def test_each_function_runs_with_exactly_its_roles_policy_under_iam_enforcement(run):
    """The whole path above ran with IAM enforced, each handler as its own function's synthesized role and the
    runner Job's part as the load Job role: every call was checked, none was refused but S3's 403s for keys
    that are not there yet (answered as missing by the run store), and the calls moto could check by action
    only are the ones named in UNNAMED."""
    iam = run["iam"]
    assert iam.problems == []
    by = {}
    for who, action, _ in iam.checked:
        by.setdefault(who.rsplit("/", 1)[-1], set()).add(action)
    for handler in ("lambdas-plan-handler", "lambdas-serving-handler", "lambdas-load-handler",
                    "lambdas-ingest-handler", "lambdas-report-handler", "runner"):
        assert by.get(handler), (handler, sorted(by))  # it acted, as its own role
    refused = {(a, who.rsplit("/", 1)[-1]) for who, a, _ in iam.denied}
    assert {a for a, _ in refused} <= {"s3:ListBucket (a missing key's 404)"}, refused
    unnamed = {a for who, a, res in iam.checked if res == "*" and ":assumed-role/" in who}  # not the test's own
    assert unnamed <= UNNAMED, sorted(unnamed - UNNAMED)
    assert {a for a in unnamed if a.startswith("s3:")} == set()  # every S3 call was checked on its resource


def test_the_aws_rehearsal_runs_through_the_aws_engine_with_mocker_workers_and_a_simulated_report(rehearsal):
    """examples/aws-rehearsal.yaml down the same path, functions, layers and roles as the seed plan: the Plan
    accepts it, Deploy applies a DynamoGraphDeployment of Dynamo mocker workers on the CPU node group,
    LaunchLoad starts its runner Job, the step is ingested, the Report writes the views and the report in S3,
    and the campaign's lake row says SIMULATED."""
    import pyarrow.parquet as pq

    case, r = rehearsal["case"], rehearsal["result"]
    assert r["error"] is None
    (plan,) = _calls(rehearsal, "Plan")
    assert [e["name"] for e in plan["experiments"]] == ["agg", "disagg"]
    dgds = [b for m, _, b in rehearsal["kube"].bodies if m == "POST" and b.get("kind") == "DynamoGraphDeployment"]
    (dgd,) = [d for d in dgds if d["metadata"]["labels"].get("benchctl.io/campaign") == case.cid]
    workers = [c for c in dgd["spec"]["components"] if c["type"] != "frontend"]
    assert workers and all(c["podTemplate"]["spec"]["containers"][0]["command"] == ["python3", "-m", "dynamo.mocker"]
                           for c in workers)
    assert all(c["podTemplate"]["spec"]["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "benchctl-rehearsal"}
               for c in workers)
    assert _calls(rehearsal, "CheckLoad") == [{"done": True, "exit_code": 0}]
    (ingest,) = _calls(rehearsal, "IngestLastStep")
    assert ingest["step"] == case.step and ingest["status"] == "succeeded"
    html = rehearsal["get"](f"reports/{case.cid}/report.html").decode()
    assert "<html" in html.lower() and case.cid in html
    # the campaign's row says SIMULATED (moto's Athena runs no SQL, so the report's own label, read from this
    # row, is held by the report's tests)
    (row,) = pq.read_table(io.BytesIO(rehearsal["get"](
        f"lake/campaigns/campaign_id={case.cid}/campaign.parquet"))).to_pylist()
    assert row["engine"] == "aws" and row["simulated"] is True
    # what it ran on (benchctl.campaign.provenance), never blank: the platform's monitoring from the functions'
    # environment; what the cluster reports is read at CheckReady, which this path does not reach (the DGD is
    # never Ready here: tests/unit/test_aws_k8s.py holds that reading), and says so
    from benchctl.campaign.provenance import FIELDS

    assert all(row[f] for f in FIELDS), {f: row[f] for f in FIELDS}
    assert (row["prometheus_scrape_interval"], row["dashboards_sha256"]) == ("15s", "ab" * 32)
    assert row["dynamo_version"] == row["kubernetes_version"] == "not read: no experiment became ready"
    assert row["gpu_driver"] == "not applicable: CPU pools only"
    assert rehearsal["iam"].problems == []
    assert {a for _, a, _ in rehearsal["iam"].denied} <= {"s3:ListBucket (a missing key's 404)"}


def test_a_failed_execution_writes_its_report_to_s3_and_its_receipt_reads_every_object_back(failed, default_templates):
    """CheckLoad fails: TeardownAfterFailure tears the experiment down and its receipt reads every object back
    through the EKS and node-group adapters (as the Teardown role), AbortCampaign records the failure, and
    ReportFailure (as the Report role) writes the report where the SNS message links it."""
    import pyarrow.parquet as pq

    from benchctl.aws.athena import report_key

    case = failed["case"]
    assert failed["result"]["error"] is None
    (report,) = _calls(failed, "ReportFailure")
    assert report.get("report_error") is None, report
    assert report["report"] == f"s3://{BUCKET}/{report_key(case.cid)}" and report["receipt"]["complete"], report
    html = failed["get"](report_key(case.cid)).decode()
    assert '<section id="ending"' in html and '<section id="receipt"' in html
    # the SNS message of a failed execution names that key: reports/<execution name>/report.html
    (rule,) = [r for r in _resources_of(default_templates, "AWS::Events::Rule")
               if "SUCCEEDED" in json.dumps(r["Properties"].get("EventPattern", {}))]  # the status rule (FAILED is in
    # the stopped-campaign rules too)
    text = json.dumps(rule["Properties"]["Targets"])
    assert re.search(r"reports/<[^>]*name>/report\.html", text) and "teardown receipt" in text, text
    # the receipt in the lake: the node group restored, every object of the deployment gone
    rows = _receipt(failed, case.cid)
    kinds = {r["kind"]: r for r in rows}
    assert kinds["node group"]["name"] == "benchctl-rehearsal" and kinds["node group"]["state"] == "restored", rows
    assert kinds["node group"]["now"] == kinds["node group"]["recorded"], rows
    assert {"DynamoGraphDeployment", "DaemonSet", "Job"} <= set(kinds), rows
    assert all(r["state"] in ("gone", "restored") for r in rows), rows
    (campaign_row,) = pq.read_table(io.BytesIO(failed["get"](
        f"lake/campaigns/campaign_id={case.cid}/campaign.parquet"))).to_pylist()
    assert (campaign_row["status"], campaign_row["failed_state"], campaign_row["error"]) == (
        "failed", "CheckLoad", "InjectedFailure")
    assert failed["iam"].problems == []


def _receipt(run: dict[str, Any], cid: str) -> list[dict[str, Any]]:
    """The campaign's teardown receipt rows, as the lake holds them (the timeline's teardown_receipt events)."""
    import pyarrow.parquet as pq

    rows = []
    for key in run["keys"]:
        if key.startswith(f"lake/timeline/campaign_id={cid}/") and "/teardown_receipt-" in key:
            (row,) = pq.read_table(io.BytesIO(run["get"](key))).to_pylist()
            rows.append(json.loads(row["detail_json"]))
    return rows


def _resources_of(templates: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for t in templates.values() for r in (t.get("Resources") or {}).values() if r.get("Type") == kind]


def test_each_campaigns_runner_identity_is_made_by_plan_and_its_association_removed_by_report(runs, default_out):
    """Plan's preflight made each campaign's service account and its Pod Identity association with the load Job
    role (passing that role, under IAM enforcement); the Report removed the association; the service account,
    inert without it, is left for the sweeper (Report calls no Kubernetes)."""
    run = runs[SEED.cid]
    pods, kube = run["pod_identity"], run["kube"]
    assert pods.calls.count("CreatePodIdentityAssociation") == len(runs)
    assert pods.associations == {}  # each campaign's Report removed its own
    for r in runs.values():
        cid = r["case"].cid
        sa = kube.stored("ServiceAccount", cid, NS)
        if r["case"].fail_at or r["case"].stop:  # the failure path (AbortCampaign) removes the service account too
            assert sa is None, sa
        else:
            assert sa is not None and sa["metadata"]["labels"]["benchctl.io/campaign"] == cid
    passed = [(a, res) for who, a, res in run["iam"].checked if a == "iam:PassRole"]
    assert passed and {res for _, res in passed} == {_load_role_arn(default_out)}



@pytest.mark.parametrize("case", [STOPPED, TIMED_OUT], ids=["stopped", "timed out"])
def test_a_stopped_execution_is_torn_down_reported_in_s3_and_left_nothing_for_the_sweeper(runs, case):
    """Stopped while AwaitLoadEnd waits (no end record): the event's path, each task as its function's role
    under IAM enforcement: ResolveStopped and AbortCampaign (Teardown), ReportFailure (Report), then a duplicate
    event (nothing to do) and the hourly sweeper (nothing to do). The report, ending STOPPED FROM OUTSIDE, is
    in S3 where the status message links it; the receipt reads every object back gone and the node group
    restored to its recorded size."""
    import pyarrow.parquet as pq

    from benchctl.aws.athena import report_key

    r = runs[case.cid]
    resolved = r["result"]["resolved"]
    assert resolved["first"]["todo"] and resolved["first"]["error"]["Error"] == {
        "ABORTED": "ExecutionStopped", "TIMED_OUT": "ExecutionTimedOut"}[case.stop]
    assert not resolved["duplicate"]["todo"] and "ended already (stopped)" in resolved["duplicate"]["why"]
    (report,) = _calls(r, "ReportFailure")
    assert report.get("report_error") is None and report["ending"] == "stopped", report
    assert report["report"] == f"s3://{BUCKET}/{report_key(case.cid)}", report
    html = r["get"](report_key(case.cid)).decode()  # (moto's Athena runs no SQL: its content is the lake's, below)
    assert '<section id="ending"' in html and '<section id="receipt"' in html
    # the sweeper afterwards: nothing of this campaign left to sweep
    assert [line for line in r["result"]["sweep"] if line.get("action") != "nothing left"] == [], r["result"]["sweep"]
    # the load first: the campaign's runner Job deleted before its DynamoGraphDeployment (every object of the
    # campaign ends in its hash, benchctl.spec.names.object_name)
    from benchctl.spec.names import dgd_name

    suffix = "-" + dgd_name(case.cid, case.experiment).rsplit("-", 1)[1]
    deletes = [path.split("?")[0] for method, path in r["kube"].requests if method == "DELETE"]
    jobs = [i for i, path in enumerate(deletes) if "/jobs/" in path and path.endswith(suffix)]
    dgds = [i for i, path in enumerate(deletes) if "/dynamographdeployments/" in path and path.endswith(suffix)]
    assert jobs and dgds and min(jobs) < min(dgds), deletes
    rows = _receipt(r, case.cid)
    kinds = {row["kind"]: row for row in rows}
    assert kinds["node group"]["state"] == "restored" and kinds["node group"]["now"] == kinds["node group"]["recorded"]
    assert {"DynamoGraphDeployment", "Job"} <= set(kinds) and all(x["state"] in ("gone", "restored") for x in rows)
    (campaign_row,) = pq.read_table(io.BytesIO(r["get"](
        f"lake/campaigns/campaign_id={case.cid}/campaign.parquet"))).to_pylist()
    assert (campaign_row["status"], campaign_row["error"]) == ("stopped", resolved["first"]["error"]["Error"])
    assert r["iam"].problems == []
