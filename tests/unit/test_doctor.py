"""``benchctl doctor`` against moto: the deployed state machine's functions found from its definition, each
function's self-test run by its real handler (in this process, as Lambda would invoke it, with the stack's
variables), the images looked up in a local registry that speaks the distribution API's token flow.
Every check is seen failing once: a crashed function, each self-test check, a missing image."""

from __future__ import annotations

import base64
import io
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from moto import mock_aws

from benchctl.aws.doctor import deployed_functions, doctor
from benchctl.aws.eks_load import sign_end
from benchctl.aws.images import DOCKER_HUB, image_exists, parse_ref
from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.aws.selftest import KUBERNETES_FUNCTIONS, checks_for
from benchctl.campaign import asl
from lambdas import FUNCTIONS
from tests.fakes import pod_identity, stop_path_world

ROOT = Path(__file__).resolve().parents[2]
REGION, ACCOUNT = "us-east-1", "123456789012"
BUCKET, DATABASE, WORKGROUP, CLUSTER, NS = "bench-results", "benchctl_dev", "benchctl-dev", "bench", "dynamo-bench"
RBAC = [d for d in yaml.safe_load_all((ROOT / "stacks" / "kubernetes" / "benchctl-rbac.yaml").read_text()) if d]
LOAD_IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/cdk-assets:load"
ENV = {"BENCHCTL_BUCKET": BUCKET, "BENCHCTL_LAKE_URI": f"s3://{BUCKET}/lake", "BENCHCTL_RUNS_URI": f"s3://{BUCKET}/runs",
       "BENCHCTL_DATABASE": DATABASE, "BENCHCTL_WORKGROUP": WORKGROUP, "BENCHCTL_CLUSTER": CLUSTER,
       "BENCHCTL_NODEGROUPS": "gpu-ng,benchctl-rehearsal", "BENCHCTL_NAMESPACE": NS, "BENCHCTL_LOCK_TABLE": "locks",
       "BENCHCTL_LOAD_IMAGE": LOAD_IMAGE, "BENCHCTL_LOAD_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/load-job",
       "POWERTOOLS_LOG_LEVEL": "WARNING"}


def test_the_functions_that_call_kubernetes_are_the_stacks():
    from stacks.function_needs import FUNCTION_NEEDS  # the rows the control plane stack grants from

    assert set(KUBERNETES_FUNCTIONS) == {n for n, needs in FUNCTION_NEEDS.items() if needs.kubernetes} | {"Sweep"}
    assert set(FUNCTION_NEEDS) == {v.removesuffix("FunctionArn") for v in FUNCTIONS}


@pytest.mark.parametrize(("image", "registry", "repository", "reference"), [
    ("nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1", "nvcr.io", "nvidia/ai-dynamo/vllm-runtime", "1.6.1"),
    ("python:3.11-slim", DOCKER_HUB, "library/python", "3.11-slim"),
    ("amazon/aws-cli:2.22.0", DOCKER_HUB, "amazon/aws-cli", "2.22.0"),
    ("localhost:5000/x/y", "localhost:5000", "x/y", "latest"),
    ("public.ecr.aws/aws-cli/aws-cli@sha256:" + "a" * 64, "public.ecr.aws", "aws-cli/aws-cli", "sha256:" + "a" * 64),
    ("r.io/a/b:tag@sha256:" + "b" * 64, "r.io", "a/b", "sha256:" + "b" * 64),
])
def test_image_references_are_parsed_as_docker_resolves_them(image, registry, repository, reference):
    ref = parse_ref(image)
    assert (ref.registry, ref.repository, ref.reference) == (registry, repository, reference)


@pytest.mark.parametrize("image", ["", "a b", "r.io/UPPER/case:1"])
def test_a_malformed_image_reference_is_refused(image):
    with pytest.raises(ValueError, match=r"image reference|repository"):
        parse_ref(image)


class Registry(BaseHTTPRequestHandler):
    """A registry as nvcr.io answers anonymous pulls: 401 with a Bearer challenge, a token from the realm,
    then the manifest (200) or 404."""

    images: set[tuple[str, str]] = set()
    token = "anon-token"

    def do_HEAD(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            self.send_response(401)
            port = self.server.server_address[1]
            self.send_header("WWW-Authenticate",
                             f'Bearer realm="http://127.0.0.1:{port}/token",service="test-registry"')
            self.end_headers()
            return
        _, _, rest = self.path.partition("/v2/")
        repo, _, ref = rest.rpartition("/manifests/")
        found = (repo, ref) in self.images
        self.send_response(200 if found else 404)
        if found:
            self.send_header("Docker-Content-Digest", "sha256:" + "c" * 64)
        self.end_headers()

    def do_GET(self) -> None:
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        body = json.dumps({"token": self.token} if q.get("service") == ["test-registry"] else {}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def registry():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()  # shutdown waits a poll
    Registry.images = {("nvidia/ai-dynamo/vllm-runtime", "1.6.1"), ("nvidia/ai-dynamo/vllm-runtime", "1.6.1-efa"),
                       ("aws-cli/aws-cli", "2.22.0"), ("library/python", "3.11-slim-bookworm")}
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_an_image_is_found_through_the_registrys_token_challenge_and_a_missing_one_is_named(registry):
    ok, how = image_exists(f"{registry}/nvidia/ai-dynamo/vllm-runtime:1.6.1", scheme="http")
    assert ok and "sha256:" in how
    ok, how = image_exists(f"{registry}/nvidia/ai-dynamo/vllm-runtime:9.9.9", scheme="http")
    assert not ok and "404" in how and "vllm-runtime:9.9.9" in how


# ------------------------------------------------------------------------------------------ the account


class Invoker:
    """Lambda Invoke answered by the function's real handler in this process, with the stack's variables;
    ``crash`` makes one function's process die as a segfaulting layer would (Lambda's answer for it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, arns: dict[str, str]) -> None:
        import importlib

        self.monkeypatch = monkeypatch
        self.by_arn = {}
        for var, target in {**FUNCTIONS, "SweepFunctionArn": "lambdas.sweep.handler"}.items():
            mod, fn = target.rsplit(".", 1)
            self.by_arn[arns[var]] = getattr(importlib.import_module(mod), fn)
        self.crash: set[str] = set()
        self.env = dict(ENV)

    def __call__(self, params: dict[str, Any], **_: Any) -> tuple[Any, dict[str, Any]]:
        from botocore.awsrequest import AWSResponse
        from botocore.response import StreamingBody

        name = urllib.parse.unquote(params["url_path"].split("/functions/")[1].split("/")[0])
        event = json.loads(params.get("body") or b"{}")
        headers: dict[str, str] = {}
        if name in self.crash:
            raw = json.dumps({"errorType": "Runtime.ExitError",
                              "errorMessage": "RequestId: x Error: Runtime exited with error: signal: segmentation fault"
                              }).encode()
            headers["x-amz-function-error"] = "Unhandled"
        else:
            with self.monkeypatch.context() as mp:
                for k, v in self.env.items():
                    mp.setenv(k, v)
                mp.setenv("AWS_LAMBDA_FUNCTION_NAME", name.rsplit(":", 1)[-1])  # as Lambda sets it
                try:
                    raw = json.dumps(self.by_arn[name](event, None)).encode()
                except Exception as exc:
                    raw = json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}).encode()
                    headers["x-amz-function-error"] = "Unhandled"
        parsed: dict[str, Any] = {"StatusCode": 200, "Payload": StreamingBody(io.BytesIO(raw), len(raw)),
                                  "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": headers}}
        if headers:
            parsed["FunctionError"] = "Unhandled"
        return AWSResponse(f"https://lambda.{REGION}.amazonaws.com", 200, headers, None), parsed


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The deployment as the stacks create it (bucket, Glue database, Athena workgroup, functions with their
    variables, the state machine naming them, the load image in ECR), a cluster whose API is the strict fake."""
    from benchctl.aws.k8s.client import KubeClient
    from tests.fakes.eks_world import runner_grants
    from tests.fakes.k8s_api import FakeKubeApi

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
                 "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(k, v)
    pods = pod_identity.install_everywhere(monkeypatch, CLUSTER)  # moto's EKS has no Pod Identity calls
    with mock_aws(), FakeKubeApi() as api:
        boto3.client("s3").create_bucket(Bucket=BUCKET)
        boto3.client("glue").create_database(DatabaseInput={"Name": DATABASE})
        boto3.client("athena").create_work_group(Name=WORKGROUP, Configuration={
            "ResultConfiguration": {"OutputLocation": f"s3://{BUCKET}/athena-results/"}})
        eks = boto3.client("eks")
        eks.create_cluster(name=CLUSTER, roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", resourcesVpcConfig={})
        for group, itype in (("gpu-ng", "p4d.24xlarge"), ("benchctl-rehearsal", "m7i.2xlarge")):  # BENCHCTL_NODEGROUPS
            eks.create_nodegroup(clusterName=CLUSTER, nodegroupName=group, nodeRole=f"arn:aws:iam::{ACCOUNT}:role/node",
                                 subnets=[_subnet()], instanceTypes=[itype],
                                 scalingConfig={"minSize": 0, "desiredSize": 0, "maxSize": 2})
        api.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        api.put(runner_grants(NS))  # stacks/kubernetes/benchctl-identities.yaml's runner grants, none yet
        # the access entries' groups, bound by our RBAC file (the functions run here in one process, one token)
        api.enforce_rbac(RBAC, set(FUNCTION_GROUPS.values()))
        monkeypatch.setattr("benchctl.aws.eks_token.kube_for_cluster",
                            lambda name, session=None, **_: KubeClient(api.url, token=lambda: "test-token"))
        ecr = boto3.client("ecr")
        ecr.create_repository(repositoryName="cdk-assets")
        ecr.put_image(repositoryName="cdk-assets", imageTag="load", imageManifest=json.dumps(
            {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
             "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 1,
                        "digest": "sha256:" + "d" * 64}, "layers": []}))
        iam = boto3.client("iam")
        role = iam.create_role(RoleName="fn", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                    "Principal": {"Service": "lambda.amazonaws.com"}}]}))["Role"]["Arn"]
        lam = boto3.client("lambda")
        arns = {}
        for var, handler in {**FUNCTIONS, "SweepFunctionArn": "lambdas.sweep.handler"}.items():
            fn = lam.create_function(FunctionName=f"benchctl-{var.removesuffix('FunctionArn')}", Runtime="python3.13",
                                     Role=role, Handler=handler, Code={"ZipFile": base64.b64decode(
                                         "UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==")}, Environment={"Variables": ENV})
            arns[var] = fn["FunctionArn"]
        # another deployment's sweeper in the same Region (its own run store): never this one's
        lam.create_function(FunctionName="other-sweep", Runtime="python3.13", Role=role, Handler="lambdas.sweep.handler",
                            Code={"ZipFile": base64.b64decode("UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==")},
                            Environment={"Variables": {**ENV, "BENCHCTL_RUNS_URI": "s3://other/runs"}})
        sm = boto3.client("stepfunctions").create_state_machine(
            name="campaign", definition=asl.substitute({v: a for v, a in arns.items() if v in FUNCTIONS}),
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/sfn")
        session = boto3.session.Session(region_name=REGION)
        stop_path_world.install(session, sm["stateMachineArn"], arns, cluster=CLUSTER,  # benchctl.aws.doctor_stop
                                nodegroups=("gpu-ng", "benchctl-rehearsal"))
        invoker = Invoker(monkeypatch, arns)
        invoker.env["BENCHCTL_CAMPAIGN_MACHINE_ARN"] = sm["stateMachineArn"]  # as the stack sets it (stop events)
        session.events.register("before-call.lambda.Invoke", invoker)
        yield {"arn": sm["stateMachineArn"], "session": session, "invoker": invoker, "api": api, "arns": arns,
               "pods": pods}


def _run(account: dict[str, Any], registry: str | None = None, spec: Path | None = None) -> dict[str, Any]:
    def lookup(image: str) -> tuple[bool, str]:
        if registry and parse_ref(image).ecr is None:  # every public registry is the local one here
            ref = parse_ref(image)
            return image_exists(f"{registry}/{ref.repository}:{ref.reference}", scheme="http")
        return image_exists(image, session=account["session"])

    checks = doctor(account["arn"], spec_path=spec, session=account["session"], lookup=lookup, runner_job=False)
    return {c.name: c for c in checks}


def test_every_function_is_found_from_the_deployed_definition(account):
    definition = json.loads(boto3.client("stepfunctions").describe_state_machine(
        stateMachineArn=account["arn"])["definition"])
    assert deployed_functions(definition) == {v.removesuffix("FunctionArn"): a for v, a in account["arns"].items()
                                              if v in FUNCTIONS}


def test_a_healthy_deployment_passes_every_check(account):
    checks = {c.name: c for c in doctor(account["arn"], spec_path=ROOT / "examples" / "aws-rehearsal.yaml",
                                        session=account["session"], lookup=lambda image: (True, "stubbed"),
                                        runner_job=False)}
    failed = [c.line() for c in checks.values() if not c.ok]
    assert failed == []
    assert checks["Pools verbs"].ok and "node group benchctl-rehearsal read" in checks["Pools verbs"].detail
    assert checks["node group of pool cpu-rehearsal"].ok
    # without a spec the doctor cannot dry-run what the functions create: it says so, as a failure
    bare = _run(account)
    assert sorted(c.name for c in bare.values() if not c.ok) == sorted(f"{fn} verbs" for fn in KUBERNETES_FUNCTIONS)
    names = set(checks)
    for var in [*FUNCTIONS, "SweepFunctionArn"]:  # the scheduled sweeper too, found by its handler and run store
        fn = var.removesuffix("FunctionArn")
        assert {f"{fn} {c}" for c in checks_for(fn)} <= names
    assert "Report athena" in names and "Plan eks" in names and "Ingest eks" not in names
    assert "pandas" in checks["Plan imports"].detail and "datetime64" in checks["Ingest datetime64"].detail
    assert f"s3://{BUCKET}/runs/_doctor/Ingest/timeline/" in checks["Ingest parquet"].detail
    assert checks[f"load image (deployment) {LOAD_IMAGE}"].ok


def test_a_crashing_layer_fails_its_function_naming_the_crash(account):
    account["invoker"].crash.add(account["arns"]["IngestFunctionArn"])
    checks = _run(account)
    bad = checks["Ingest function"]
    assert not bad.ok and "segmentation fault" in bad.detail and "stacks/layers.py" in bad.detail
    assert checks["Plan parquet"].ok  # the others still answer


def test_pandas_datetime64_failing_fails_that_check(account, monkeypatch):
    import pandas as pd

    def broken(*a: Any, **k: Any) -> Any:
        raise SystemError("numpy ABI mismatch")

    monkeypatch.setattr(pd, "to_datetime", broken)
    checks = _run(account)
    assert not checks["Report datetime64"].ok and "numpy ABI mismatch" in checks["Report datetime64"].detail
    assert checks["Report imports"].ok


# awswrangler's S3 writer retries its PUT from a finalizer, which raises again there (the check already failed)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_bucket_the_functions_cannot_write_fails_parquet(account):
    account["invoker"].env["BENCHCTL_RUNS_URI"] = "s3://no-such-bucket/runs"
    checks = _run(account)
    assert not checks["Load parquet"].ok and "no-such-bucket" in checks["Load parquet"].detail


def test_a_cluster_api_that_refuses_the_function_fails_eks(account):
    account["api"].enforce_rbac(RBAC, {"system:authenticated"})  # an access entry without our group
    checks = _run(account)
    assert not checks["Serving eks"].ok and "forbidden" in checks["Serving eks"].detail
    assert "Ingest eks" not in checks


def test_an_athena_workgroup_that_is_not_there_fails_athena(account):
    account["invoker"].env["BENCHCTL_WORKGROUP"] = "no-such-workgroup"
    checks = _run(account)
    assert not checks["Report athena"].ok and "no-such-workgroup" in checks["Report athena"].detail


def test_every_image_the_spec_names_is_looked_up_and_a_missing_one_fails(account, registry, tmp_path):


    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    data["kubernetes"]["uploader_image"] = "public.ecr.aws/aws-cli/aws-cli:9.9.9"  # not in the registry
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(data))
    checks = _run(account, registry, spec)
    dyn = next(c for n, c in checks.items() if n.startswith("dynamo image"))
    efa = next(c for n, c in checks.items() if n.startswith("EFA image"))
    up = next(c for n, c in checks.items() if n.startswith("uploader image"))
    prefetch = next(c for n, c in checks.items() if n.startswith("prefetch image"))
    assert dyn.ok and efa.ok and "-efa" in efa.name and prefetch.ok
    assert not up.ok and "aws-cli:9.9.9" in up.detail


def _cli_doctor(account, monkeypatch, capsys) -> tuple[int, list[str]]:
    """``benchctl doctor --spec examples/aws-rehearsal.yaml --no-job`` on the account: (exit code, lines printed)."""
    from benchctl.aws import doctor as module
    from benchctl.cli import main as cli

    real = module.checks
    monkeypatch.setattr(module, "checks", lambda arn, **kw: real(
        arn, **{**kw, "session": account["session"], "lookup": lambda image: (True, "stubbed")}))
    rc = cli.main(["doctor", "--state-machine-arn", account["arn"], "--spec", "examples/aws-rehearsal.yaml",
                   "--no-job"])
    return rc, capsys.readouterr().out.splitlines()


def test_the_cli_prints_one_line_per_check_and_exits_1_on_a_failure(account, monkeypatch, capsys):
    account["invoker"].env["BENCHCTL_WORKGROUP"] = "no-such-workgroup"
    rc, out = _cli_doctor(account, monkeypatch, capsys)
    assert rc == 1
    assert any(line.startswith("FAIL Report athena:") for line in out)
    assert all(line.startswith(("ok   ", "FAIL ")) for line in out[:-1]) and "failed" in out[-1]


def test_the_doctor_on_the_rehearsal_prints_the_stop_path_scaling_verbs_offering_and_reservation_lines(
        account, monkeypatch, capsys):
    rc, out = _cli_doctor(account, monkeypatch, capsys)
    printed = {line[5:].split(":", 1)[0]: line for line in out if line.startswith(("ok   ", "FAIL "))}
    new_lines = ("stop rule", "stop path failure rule", "stop dead-letter queue", "stop path", "Pools scaling verbs",
                 "Teardown scaling verbs", "offering of pool cpu-rehearsal", "reservation of pool cpu-rehearsal")
    assert [name for name in new_lines if name not in printed] == [], out
    assert [printed[name] for name in new_lines if not printed[name].startswith("ok   ")] == []
    assert "eks:UpdateNodegroupConfig" in printed["Pools scaling verbs"] and "nothing to do" in printed["stop path"]
    assert rc == 0, out


def test_the_cli_refuses_a_missing_state_machine_arn_with_exit_2(monkeypatch, capsys):
    from benchctl.cli import main as cli

    monkeypatch.delenv("BENCHCTL_STATE_MACHINE_ARN", raising=False)
    assert cli.main(["doctor", "--spec", "examples/aws-rehearsal.yaml"]) == 2
    assert "StateMachineArn" in capsys.readouterr().err


def _runner_world(account: dict[str, Any], end: dict[str, Any] | None, status: dict[str, Any] | None,
                  uploaded: bool = True) -> None:
    """The cluster's side of the doctor's runner Job: when it is created, its control container's end record
    (``end``) and the Job's status (``status``), as the real Job would leave them (test_runner_rehearsal runs
    its containers for real)."""
    s3 = boto3.client("s3")

    def created(api: Any, job: dict[str, Any]) -> None:
        cid = job["metadata"]["labels"]["benchctl.io/campaign"]
        if end is not None:  # signed with the step's key, as the control container signs it
            key = json.loads(s3.get_object(Bucket=BUCKET, Key=f"runner/{cid}/doctor/doctor/key.json")["Body"].read())
            s3.put_object(Bucket=BUCKET, Key=f"runner/{cid}/doctor/doctor/end.json",
                          Body=sign_end(json.dumps({**end, "step": "doctor"}).encode(), key["end_key"]))
        if end is not None and uploaded:  # the runner's own record, uploaded with the step's artifacts
            s3.put_object(Bucket=BUCKET, Key=f"lake/raw/campaign_id={cid}/experiment=doctor/step_id=doctor/runner-record.json",
                          Body=json.dumps({"step": "doctor", "exit_code": 0, "uid": 10001}).encode())
        if status is not None:
            api.set_status("Job", NS, job["metadata"]["name"], status)

    account["api"].on_create("Job", created)


def _job_check(account: dict[str, Any], **kw: Any) -> Any:
    checks = doctor(account["arn"], spec_path=ROOT / "examples" / "aws-rehearsal.yaml", session=account["session"],
                    lookup=lambda image: (True, "stubbed"), runner_job=True, poll_s=5, sleep=lambda s: None, **kw)
    return next(c for c in checks if c.name == "load runner Job")


def test_the_load_roles_path_runs_as_a_tiny_runner_job_that_ends_with_its_end_record(account):
    _runner_world(account, {"exit_code": 0, "ended_at": 1}, {"succeeded": 1})
    job = _job_check(account)
    assert job.ok, job.detail
    assert "AIPerf ran as uid 10001" in job.detail and "uploaded to the raw area" in job.detail
    # started as LaunchLoad starts one: a runner Job of the doctor's own campaign id, its step's request
    # asking AIPerf for its version; deleted once judged
    posted = [b for m, path, b in account["api"].bodies if m == "POST" and b.get("kind") == "Job" and "dryRun" not in path]
    (body,) = posted
    cid = body["metadata"]["labels"]["benchctl.io/campaign"]
    assert cid.startswith("doctor-")
    req = json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key=f"runner/{cid}/doctor/doctor/request.json"
                                                   )["Body"].read())
    # it ran as its own campaign's runner identity, made before the Job and removed once judged
    assert body["spec"]["template"]["spec"]["serviceAccountName"] == cid
    assert account["pods"].calls.count("CreatePodIdentityAssociation") == 1 and account["pods"].associations == {}
    assert account["api"].stored("ServiceAccount", cid, NS) is None
    assert req["argv"][0] == "--version"
    assert body["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    stored = account["api"].stored("Job", body["metadata"]["name"], NS)
    assert stored is None or stored["metadata"].get("deletionTimestamp")


def test_a_runner_job_whose_artifacts_never_reached_the_raw_area_fails(account):
    _runner_world(account, {"exit_code": 0, "ended_at": 1}, {"succeeded": 1}, uploaded=False)
    job = _job_check(account)
    assert not job.ok and "raw area" in job.detail


def test_a_runner_job_that_fails_names_its_error(account):
    _runner_world(account, {"exit_code": 96, "ended_at": 1, "error": "LoadInputsUnavailable",
                            "cause": "fatal error: An error occurred (AccessDenied) when calling the ListObjectsV2 "
                                     "operation"}, {"failed": 1})
    job = _job_check(account)
    assert not job.ok and "LoadInputsUnavailable" in job.detail and "ListObjectsV2" in job.detail


def test_a_runner_job_whose_pod_never_runs_is_named_when_the_wait_is_over(account):
    _runner_world(account, None, None)
    job = _job_check(account, job_timeout_s=10)
    assert not job.ok and "still running after 10 s" in job.detail and "no pod yet" in job.detail


def test_a_runner_job_the_doctor_stops_waiting_for_is_deleted(account):
    _runner_world(account, None, None)
    job = _job_check(account, job_timeout_s=5)
    assert not job.ok
    (body,) = [b for m, path, b in account["api"].bodies if m == "POST" and b.get("kind") == "Job" and "dryRun" not in path]
    stored = account["api"].stored("Job", body["metadata"]["name"], NS)
    assert stored is None or stored["metadata"].get("deletionTimestamp")  # not left to run to its deadline


def test_the_sweeper_of_this_deployment_is_checked_and_a_missing_one_named(account):
    boto3.client("lambda").delete_function(FunctionName="benchctl-Sweep")
    checks = _run(account)
    assert not checks["Sweep function"].ok and "lambdas.sweep.handler" in checks["Sweep function"].detail
    assert not any(n.startswith("Sweep ") and n != "Sweep function" for n in checks)  # not the other deployment's


def test_the_runner_job_needs_a_spec(account):
    checks = doctor(account["arn"], session=account["session"], lookup=lambda image: (True, "stubbed"),
                    runner_job=True)
    job = next(c for c in checks if c.name == "load runner Job")
    assert not job.ok and "--spec" in job.detail


def test_a_library_the_layers_do_not_hold_fails_imports(account, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "awswrangler", None)  # as a function without the SDK-for-pandas layer
    checks = _run(account)
    assert not checks["Teardown imports"].ok and "awswrangler" in checks["Teardown imports"].detail


def test_a_state_machine_that_is_not_this_projects_fails_naming_the_missing_functions(account):
    sfn = boto3.client("stepfunctions")
    other = sfn.create_state_machine(name="other", roleArn=f"arn:aws:iam::{ACCOUNT}:role/sfn", definition=json.dumps(
        {"StartAt": "Plan", "States": {"Plan": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke",
                                                "Parameters": {"FunctionName": account["arns"]["PlanFunctionArn"]},
                                                "End": True}}}))
    checks = doctor(other["stateMachineArn"], session=account["session"], lookup=lambda i: (True, ""), runner_job=False)
    sm = checks[0]
    assert sm.name == "state machine" and not sm.ok and "Report" in sm.detail and "Plan" not in sm.detail.split(
        "missing:")[1]


def test_the_doctor_waits_on_its_own_machine_until_the_jobs_identity_has_settled(account):
    """A Pod Identity association takes seconds to be effective; no function sleeps (waiting belongs to the
    state machine, or here to the doctor on the user's machine): the Load function answers "settling" with the
    seconds left and the doctor asks again for the same campaign id after waiting them."""
    import datetime as dt

    from benchctl.aws.runner_identity import SETTLE_S

    _runner_world(account, {"exit_code": 0, "ended_at": 1}, {"succeeded": 1})
    pods = account["pods"]
    pods.now = dt.datetime.now(dt.UTC)  # an association made now is young
    slept: list[float] = []

    def sleep(s: float) -> None:  # time passes for the associations
        slept.append(s)
        for a in pods.associations.values():
            a["createdAt"] -= dt.timedelta(seconds=s)

    checks = doctor(account["arn"], spec_path=ROOT / "examples" / "aws-rehearsal.yaml", session=account["session"],
                    lookup=lambda image: (True, "stubbed"), runner_job=True, poll_s=5, sleep=sleep)
    job = next(c for c in checks if c.name == "load runner Job")
    assert job.ok, job.detail
    assert slept and SETTLE_S - 5 <= slept[0] <= SETTLE_S  # the settling wait first, then the Job's polls
    assert pods.calls.count("CreatePodIdentityAssociation") == 1  # the same campaign id asked again


def test_the_doctor_names_each_pools_zone_offering_and_reservation(account):
    """The doctor reads, for each of the spec's EKS pools, whether its node group's zone offers its type and what
    reservation it names (benchctl.aws.capacity_checks; test_pool_capacity.py holds the refusals)."""
    from tests.fakes.ec2_capacity import ec2_capacity

    spec = ROOT / "examples" / "aws-rehearsal.yaml"
    with ec2_capacity({}, offerings={"m7i.2xlarge": [f"{REGION}a"]}):
        checks = _run(account, spec=spec)
    offering, reservation = checks["offering of pool cpu-rehearsal"], checks["reservation of pool cpu-rehearsal"]
    assert offering.ok and f"m7i.2xlarge is offered in {REGION}a" in offering.detail
    assert reservation.ok and "On-Demand" in reservation.detail
    with ec2_capacity({}, offerings={"m7i.2xlarge": [f"{REGION}c"]}):
        line = _run(account, spec=spec)["offering of pool cpu-rehearsal"].line()
    assert line.startswith("FAIL offering of pool cpu-rehearsal: ") and f"offer it: {REGION}c" in line


def _subnet() -> str:
    """A subnet of the account's VPC in the Region's first zone (a node group's ``subnets``: where its nodes launch)."""
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    return str(ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone=f"{REGION}a")["Subnet"]["SubnetId"])


def test_the_specs_gpu_quotas_are_a_line_each_and_one_past_its_value_fails_naming_the_increase(account):
    """The doctor reads the spec's EC2 vCPU quotas as the preflight judges them (tests/fakes/ec2_capacity.py:
    moto's EC2 quotas), with the capacity options of its P pools, one line each."""
    from tests.fakes.ec2_capacity import ec2_capacity

    eks, iam = boto3.client("eks"), boto3.client("iam")
    role = iam.create_role(RoleName="nodes", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    eks.create_nodegroup(clusterName=CLUSTER, nodegroupName="gpu-p4d", nodeRole=role, subnets=[_subnet()],
                         instanceTypes=["p4d.24xlarge"])
    seed = ROOT / "examples" / "seed-plan.yaml"
    with ec2_capacity({"L-417A185B": 384.0}):
        checks = _run(account, spec=seed)
    quota = checks["quota L-417A185B"]
    assert quota.ok and "is 384 vCPUs (applied value)" in quota.detail and "needs 192 vCPUs" in quota.detail
    assert checks["capacity of pool p4d"].ok and "describe-capacity-block-offerings" in checks["capacity of pool p4d"].detail
    with ec2_capacity({"L-417A185B": 96.0}):
        line = _run(account, spec=seed)["quota L-417A185B"].line()
    assert line.startswith("FAIL quota L-417A185B: ") and "is 96 vCPUs" in line and "--desired-value 192" in line
    with ec2_capacity({}):  # no applied value: the default, said so
        assert "(AWS default" in _run(account, spec=seed)["quota L-417A185B"].detail
