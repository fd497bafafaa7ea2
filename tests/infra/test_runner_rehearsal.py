"""A load runner Job rehearsed as a real account runs it: the seam the unit tests drive with a fake ``aws``.

Real here: the Job as ``EksLoad.launch`` creates it (on the fake Kubernetes API) after writing the step's
request; its two containers as processes with the user Kubernetes would give each (the pod's or container's
``securityContext`` if set, else the image's own: ``USER`` of stacks/images/load/Dockerfile, root for the
AWS CLI image, whose Dockerfile (aws/aws-cli ``docker/Dockerfile``) sets none), the pod's ``fsGroup`` as a
supplementary group, umask 022; the emptyDir they share made as the kubelet makes it (0777, and with an
``fsGroup`` owned by that group with the setgid bit: kubernetes ``pkg/volume/emptydir/empty_dir.go``,
``pkg/volume/volume_linux.go``); the scripts unchanged (``RUNNER_CONTROL_SCRIPT``, ``load_runner.py``); the
real AWS CLI (``awscli`` 1.46 from PyPI, see below); real AIPerf 0.13.0 sending the step's own dataset and
argv to a small streaming OpenAI-compatible server; AWS played by moto's server **with IAM enforced**
(tests/fakes/moto_iam.py: IAM's condition rules and S3's 403 for a missing key where moto is laxer), each
actor holding exactly its synthesized role's policy: the pod the load Job role's (EKS Pod Identity), the
Load function (LaunchLoad's request, AwaitLoadEnd's token through ``RunnerCallbacks``) the Load role's; a
real Step Functions task token from moto's interpreter, whose execution waits in the real ``AwaitLoadEnd``
state (the campaign ASL's, with its ``HeartbeatSecondsPath``) and resumes when the token is answered.

Stand-ins: each image's file system is this machine's (the load image's Python is an interpreter of this
machine with this venv's site-packages; the AWS CLI image's ``aws`` is awscli v1 from the same
site-packages), the Pod Identity credentials are the role session's keys in the environment (the agent
serves the same role session through ``AWS_CONTAINER_CREDENTIALS_FULL_URI``), the volumes are directories
(the Job's ``/artifacts`` is mounted where this machine has it, the model volume's ``/models`` is the
generated offline model directory), and each container's ``/tmp`` is a private directory.

AWS CLI v1 (here) against v2 (the image) for the commands the scripts use: ``s3 cp`` (one object, to or
from ``-``, ``--recursive`` both ways, ``--quiet``) and ``stepfunctions send-task-*`` are the same
commands with the same S3 calls (v1 ``awscli/customizations/s3/filegenerator.py`` lists with
ListObjectsV2, a single download makes HeadObject then GetObject, as v2 does); v2 differs in what the
scripts do not use here (its pager, ``--cli-binary-format`` default base64 for blob parameters, the
auto-prompt, its credential and SSO cache) and in ``aws --version`` (``aws-cli/2.*``: the preflight checks
it, so the rehearsal runs the preflight's path check without the version line).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl.aws.k8s import jobs, preflight_jobs
from benchctl.aws.k8s.common import LOAD_IMAGE_PLACEHOLDER, runner_service_account
from benchctl.campaign import asl
from benchctl.campaign.ports import LoadRequest
from benchctl.constants import runner_prefix
from benchctl.local import modeldir
from benchctl.planning import aiperf_args
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import CampaignSpec, parse_spec
from tests.fakes import pod_identity
from tests.fakes.moto_iam import (
    Enforcement,
    administrator,
    assume_roles,
    fresh_account,
    function_roles,
    iam_enforced,
    role_documents,
)
from tests.infra.cfn_resolve import ACCOUNT, REGION, Resolver
from tests.infra.conftest import CP, ROOT

pytestmark = [pytest.mark.infra, pytest.mark.timeout(900)]
JSON = dict[str, Any]
NS = "dynamo-bench"
CLUSTER_ARN = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/dynamo-bench"  # cdk.json's benchctl:cluster_name


# --------------------------------------------------------------------------------------------- images


@dataclass(frozen=True)
class ImageUser:
    """What an image gives a process that no securityContext overrides: its user, group, home, workdir."""

    uid: int
    gid: int
    home: str
    workdir: str


def load_image_user() -> ImageUser:
    """stacks/images/load/Dockerfile's last ``USER``, the ``useradd`` that creates it (its group: useradd's
    user group, same id) and its ``WORKDIR``."""
    text = (ROOT / "stacks" / "images" / "load" / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\d+)(?::(\d+))?\s*$", text, re.M)
    assert users, "the load image's Dockerfile sets no numeric USER"
    uid, gid = int(users[-1][0]), int(users[-1][1] or users[-1][0])
    add = re.search(rf"useradd\s+(?:--\S+\s+)*--uid\s+{uid}\s+(\S+)", text)
    assert add and "--create-home" in add.group(0), f"the load image's user {uid} is not created by useradd"
    workdir = re.findall(r"^WORKDIR\s+(\S+)", text, re.M)
    return ImageUser(uid, gid, f"/home/{add.group(1)}", workdir[-1] if workdir else "/")


AWS_CLI_IMAGE_USER = ImageUser(0, 0, "/root", "/aws")  # aws/aws-cli docker/Dockerfile: no USER, WORKDIR /aws


def _reachable_by_all(path: str) -> bool:
    p = Path(path)
    return all(os.stat(a).st_mode & 0o001 for a in [*reversed(p.parents)]) and bool(os.stat(p).st_mode & 0o005)


@functools.cache
def _interpreter(site: str, uid: int) -> str:
    """A Python this machine lets ``uid`` run that imports AIPerf and awscli from ``site`` (the images' own
    interpreters stand-in); fails (never skips) when there is none."""
    tried = []
    for cand in dict.fromkeys([os.path.realpath(sys.executable),
                               f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"]):
        if not os.path.exists(cand) or not _reachable_by_all(cand):
            tried.append(f"{cand}: not there or not executable by others")
            continue
        res = subprocess.run([cand, "-c", "import aiperf.cli, awscli"], capture_output=True, text=True, timeout=300,
                             env={"PYTHONPATH": site, "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
                             user=uid, group=uid, extra_groups=[])
        if res.returncode == 0:
            return cand
        tried.append(f"{cand}: {res.stderr.strip()[-300:]}")
    pytest.fail(f"no Python {sys.version_info.major}.{sys.version_info.minor} that uid {uid} may run imports "
                f"aiperf and awscli from {site}: " + "; ".join(tried))


# -------------------------------------------------------------------------------------------- kubelet


@dataclass
class Pod:
    procs: dict[str, subprocess.Popen[bytes]]
    logs: dict[str, Path]
    users: dict[str, tuple[int, int, tuple[int, ...]]]
    kept: dict[str, str] = field(default_factory=dict)
    envs: dict[str, dict[str, str]] = field(default_factory=dict)

    def wait(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(f"container {name} still runs after {timeout:.0f} s; logs:\n{self.text()}")
        return {name: int(p.returncode) for name, p in self.procs.items()}

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def log(self, name: str) -> str:
        if name not in self.kept:
            self.kept[name] = self.logs[name].read_text(errors="replace")
        return self.kept[name]

    def keep_logs(self) -> None:
        """Read every log now (the directories go when the rehearsal ends)."""
        for name in self.logs:
            self.log(name)

    def text(self) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)[-4000:]}" for n in self.logs)


def empty_dir(d: Path, pod: JSON) -> Path:
    """An emptyDir as the kubelet makes it for ``pod``: 0777; with an fsGroup, owned by that group, setgid."""
    d.mkdir(exist_ok=True)
    d.chmod(0o777)
    fs_group = (pod.get("securityContext") or {}).get("fsGroup")
    if fs_group is not None:
        os.chown(d, -1, int(fs_group))
        d.chmod(0o2777)
    return d


def start_pod(pod: JSON, images: dict[str, ImageUser], root: Path, volumes: dict[str, Path],
              path_of: dict[str, Path], env: dict[str, str], annotations: dict[str, str] | None = None) -> Pod:
    """Start every container of ``pod`` as a process, each as Kubernetes would run it (see the module's
    docstring); ``volumes`` maps volume names to directories, ``path_of`` image names to their tools,
    ``env`` is what the platform injects (credentials, where AWS is), except into the containers the pod
    template's ``annotations`` name in ``eks.amazonaws.com/skip-containers``: EKS Pod Identity's webhook gives
    those neither credentials nor the token volume (aws/amazon-eks-pod-identity-webhook
    ``pkg/handler/handler.go``: a comma-separated list, read as CSV)."""
    import csv

    skipped = set(next(csv.reader([(annotations or {}).get(jobs.SKIP_CONTAINERS, "")]), []))
    psc = pod.get("securityContext") or {}
    out = Pod({}, {}, {})
    for c in pod["containers"]:
        image = images[c["image"]]
        sc = {**psc, **(c.get("securityContext") or {})}
        uid = int(sc.get("runAsUser", image.uid))
        gid = int(sc.get("runAsGroup", image.gid if uid == image.uid else 0))
        groups = [int(g) for g in [psc.get("fsGroup"), *psc.get("supplementalGroups", [])] if g is not None]
        own = root / c["name"]
        own.mkdir()
        tmp = own / "tmp"
        tmp.mkdir()
        tmp.chmod(0o1777)
        home, work = own / "home", own / "workdir"  # the image's home and workdir, as the image has them
        for d, mode in ((home, 0o700 if image.uid == 0 else 0o755), (work, 0o755)):
            d.mkdir()
            os.chown(d, image.uid, image.gid)
            d.chmod(mode)
        mounts = {m["mountPath"]: volumes[m["name"]] for m in c.get("volumeMounts", [])}
        mounts.update({"/tmp": tmp, image.home: home, image.workdir: work})

        def host(path: str, mounts: dict[str, Path] = mounts) -> str:
            for mp in sorted(mounts, key=len, reverse=True):
                if path == mp or path.startswith(mp.rstrip("/") + "/"):
                    return str(mounts[mp]) + path[len(mp.rstrip("/")):]
            return path

        cenv = {e["name"]: host(e["value"]) for e in c.get("env", [])}
        cenv.setdefault("HOME", host(image.home if uid == image.uid else "/"))
        cenv = {**cenv, "PATH": f"{path_of[c['image']]}:/usr/bin:/bin",
                **({"AWS_EC2_METADATA_DISABLED": "true"} if c["name"] in skipped else env)}
        out.envs[c["name"]] = cenv
        argv = [host(a) if a.startswith("/") else a for a in [*c["command"], *c.get("args", [])]]
        log = root / f"{c['name']}.log"
        out.logs[c["name"]] = log
        out.users[c["name"]] = (uid, gid, tuple(groups))
        with log.open("wb") as f:
            out.procs[c["name"]] = subprocess.Popen(
                argv, env=cenv, cwd=host(image.workdir), user=uid, group=gid, extra_groups=groups, umask=0o022,
                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    return out


# --------------------------------------------------------------------------------------- the serving side


class _Chat(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that streams the tokens asked for (``max_tokens``), and /metrics."""

    protocol_version = "HTTP/1.1"
    served: list[int] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 8)
        type(self).served.append(n)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(data: str) -> None:
            raw = f"data: {data}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))

        chunk = {"id": "r", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        for _ in range(n):
            event(json.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": " ok"}, "finish_reason": None}]}))
        event(json.dumps({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}))
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        text = b"dynamo_frontend_requests_total 1\n"
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *args: Any) -> None:
        pass


# ------------------------------------------------------------------------------------------- the account


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Account:
    url: str
    bucket: str
    runs_uri: str
    lake_uri: str
    enforcement: Enforcement
    sessions: dict[str, Any]  # "admin", "load-function", and one per pod identity variant
    credentials: dict[str, dict[str, str]]
    awaited: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (campaign, experiment, step) -> token
    role_arns: dict[str, str] = field(default_factory=dict)  # identity -> its role's ARN
    pod_identity: Any = None  # the Load function's EKS Pod Identity calls (tests/fakes/pod_identity.py)

    def client(self, who: str, service: str) -> Any:
        return self.sessions[who].client(service, endpoint_url=self.url, region_name=REGION)

    def runner(self, campaign_id: str, identity: str = "load-job") -> dict[str, str]:
        """The credentials EKS Pod Identity gives a pod of this campaign: a session of the load Job role (as
        ``identity`` has it) with Pod Identity's session tags, its service account the campaign's own
        (benchctl.aws.runner_identity), assumed as the Pod Identity service assumes it (in moto's STS of this
        process, no caller's request; the trust is held by tests/infra/test_runner_isolation.py)."""
        from tests.fakes.moto_iam import assume_as_service, pod_identity_tags

        tags = pod_identity_tags(CLUSTER_ARN, NS, runner_service_account(campaign_id))
        return assume_as_service(self.role_arns[identity], identity, tags, REGION, ACCOUNT)


def _function_env(templates: dict[str, JSON], handler: str) -> JSON:
    """The resolved environment of the function with this handler (where its bucket and prefixes are)."""
    (fn,) = [r["Properties"] for r in templates[CP]["Resources"].values()
             if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == handler]
    resolved: JSON = Resolver({k: v for k, v in templates.items() if not k.startswith("_")}).resolve(
        fn["Environment"]["Variables"], CP)
    return resolved


def _without_list_bucket(docs: list[JSON]) -> list[JSON]:
    out = []
    for d in docs:
        sts = [s for s in d["Statement"] if "s3:ListBucket" not in (s["Action"] if isinstance(s["Action"], list)
                                                                    else [s["Action"]])]
        out.append({**d, "Statement": sts})
    assert out != docs, "the load Job role grants no s3:ListBucket to take away"
    return out


@pytest.fixture(scope="module")
def account(templates: dict[str, JSON]) -> Iterator[Account]:
    """moto's server with the results bucket and the synthesized roles of the load path (the load Job role,
    once more without its s3:ListBucket; the Load function's role) and an administrator for the test's own
    set-up and reads; then IAM enforced for every request. Lambda Invoke of the waiting state is answered in
    this process by the Load function's AwaitLoadEnd adapter (``RunnerCallbacks``), as its role."""
    import boto3
    from moto.core.config import default_user_config
    from moto.server import ThreadedMotoServer

    from benchctl.aws.callbacks import RunnerCallbacks
    from benchctl.aws.s3 import S3RunStore

    if os.geteuid() != 0:
        pytest.fail("the runner rehearsal runs each container as its own user (setuid): it needs root, as CI has")
    t = {k: v for k, v in templates.items() if not k.startswith("_")}
    env = _function_env(t, "lambdas.load.handler")
    who = function_roles(t, CP)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    fresh_account(url)
    sfn_config = dict(default_user_config["stepfunctions"])
    default_user_config["stepfunctions"] = {**sfn_config, "execute_state_machine": True}
    default = boto3._get_default_session()  # moto's interpreter invokes Lambda through it
    hook: list[Callable[..., Any]] = []
    try:
        root = boto3.session.Session(aws_access_key_id="setup", aws_secret_access_key="setup", region_name=REGION)
        iam, sts = root.client("iam", endpoint_url=url), root.client("sts", endpoint_url=url)
        root.client("s3", endpoint_url=url).create_bucket(Bucket=env["BENCHCTL_BUCKET"])
        resolve = Resolver(t)

        def role(rid: str, docs: list[JSON]) -> tuple[JSON, list[JSON]]:
            return resolve.resolve(t[CP]["Resources"][rid]["Properties"]["AssumeRolePolicyDocument"], CP), docs

        job_docs = role_documents(t, CP, who["runner"])
        arns: dict[str, str] = {}
        credentials = assume_roles(iam, sts, {
            "load-job": role(who["runner"], job_docs),
            "load-job-without-list-bucket": role(who["runner"], _without_list_bucket(job_docs)),
            "load-function": role(who["lambdas.load.handler"], role_documents(t, CP, who["lambdas.load.handler"]))},
            arns=arns)
        credentials["admin"] = administrator(iam)
        sessions = {name: boto3.session.Session(aws_access_key_id=c["AWS_ACCESS_KEY_ID"],
                                                aws_secret_access_key=c["AWS_SECRET_ACCESS_KEY"],
                                                aws_session_token=c.get("AWS_SESSION_TOKEN"), region_name=REGION)
                    for name, c in credentials.items()}
        with pytest.MonkeyPatch.context() as mp, iam_enforced(url) as enforcement:
            mp.setenv("AWS_ENDPOINT_URL", url)
            acct = Account(url, env["BENCHCTL_BUCKET"], env["BENCHCTL_RUNS_URI"], env["BENCHCTL_LAKE_URI"], enforcement,
                           sessions, credentials, role_arns=arns,
                           # moto has no Pod Identity calls: the Load function's (the doctor's) answered here
                           pod_identity=pod_identity.install(sessions["load-function"], "dynamo-bench"))

            def invoke(params: JSON, **_: Any) -> tuple[Any, JSON]:
                """AwaitLoadEnd's Lambda task: the Load function keeps the token where the runner looks."""
                import io

                from botocore.awsrequest import AWSResponse
                from botocore.response import StreamingBody

                event = json.loads(params.get("body") or b"{}")
                cid, exp, step = event["ctx"]["campaign_id"], event["experiment"], event["step"]["step_id"]
                fn = sessions["load-function"]
                store = S3RunStore(acct.bucket, runner_prefix(cid), session=fn)  # the runner hand-over
                callbacks = RunnerCallbacks(store, lambda: fn.client("stepfunctions", endpoint_url=url))
                acct.awaited[(cid, exp, step)] = event["task_token"]
                raw = json.dumps({"watching": callbacks.watch(event["task_token"], event["state"], (exp, step),
                                                              lambda: None)}).encode()
                return AWSResponse(f"https://lambda.{REGION}.amazonaws.com", 200, {}, None), {
                    "StatusCode": 200, "Payload": StreamingBody(io.BytesIO(raw), len(raw)),
                    "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}}}

            default.events.register("before-call.lambda.Invoke", invoke)
            hook.append(invoke)
            yield acct
    finally:
        for h in hook:
            default.events.unregister("before-call.lambda.Invoke", h)
        default_user_config["stepfunctions"] = sfn_config
        fresh_account(url)
        server.stop()


# ---------------------------------------------------------------------------------------------- the step


def rehearsal_spec() -> CampaignSpec:
    """The seed plan's Kubernetes settings and experiments with one small sequence-distribution workload of
    two steps (generated datasets: each step has inputs to fetch) and the offline model directory's
    revision."""
    data = yaml.safe_load((ROOT / "examples" / "seed-plan.yaml").read_text())
    data["model"]["revision"] = modeldir.REVISION
    data["workloads"] = [{"kind": "sequence_distribution", "name": "sequence-distribution",
                          "distributions": ["uniform", "zipf"], "isl_range": [32, 128], "osl_range": [4, 16],
                          "concurrency": 2, "requests": 8}]
    data["repeats"] = 1
    data.pop("budget", None)
    return parse_spec(data)


def _state_machine() -> str:
    """The campaign ASL's AwaitLoadEnd as it is (resource, payload, HeartbeatSecondsPath), then a state that
    shows the execution resumed."""
    await_end = {k: v for k, v in asl.state("AwaitLoadEnd").items() if k not in ("Catch", "Next", "Retry")}
    await_end["Next"] = "Resumed"
    text = json.dumps({"StartAt": "AwaitLoadEnd", "States": {"AwaitLoadEnd": await_end,
                                                               "Resumed": {"Type": "Pass", "End": True}}})
    return text.replace("${LoadFunctionArn}", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:benchctl-load")


@dataclass
class StepResult:
    execution: JSON
    history: list[JSON]
    raw: dict[str, bytes]  # the step's raw area: key under it -> bytes
    end: JSON | None  # its end record
    polled: int | None  # what CheckLoad's port says (EksLoad.poll)


@dataclass
class Rehearsal:
    codes: dict[str, int]
    pod: Pod
    steps: list[StepResult]
    denied: list[tuple[str, str, str]]
    checked: list[tuple[str, str, str]]


def rehearse(account: Account, monkeypatch: pytest.MonkeyPatch, campaign_id: str, *, identity: str = "load-job",
             edit_pod: Callable[[JSON], None] | None = None) -> Rehearsal:
    """A workload's runner Job, end to end, step after step as the state machine goes: LaunchLoad (the step's
    dataset and request, as the Load function; the Job created by ``EksLoad.launch`` at the first step),
    AwaitLoadEnd (a real execution waiting on the step's token); the next step only once the previous one's
    execution resumed. The Job's pod runs as the kubelet would run it (``edit_pod``: what a test takes away)
    as ``identity``, until both containers ended."""
    from benchctl.aws.eks_load import EksLoad
    from benchctl.aws.k8s.client import KubeClient
    from benchctl.aws.s3 import S3Lake, S3RunStore
    from benchctl.campaign import step_dataset
    from tests.fakes.k8s_api import FakeKubeApi

    spec = rehearsal_spec()
    exp = plan_campaign(spec, "aws").experiments[0]
    steps = [s for s in exp.steps if s.workload == exp.steps[0].workload]
    assert len(steps) == 2
    site = sysconfig.get_paths()["purelib"]
    load_user = load_image_user()
    py = _interpreter(site, load_user.uid)
    root = Path(tempfile.mkdtemp(prefix="benchctl-rehearsal-"))
    root.chmod(0o755)
    chat = ThreadingHTTPServer(("127.0.0.1", 0), _Chat)
    threading.Thread(target=chat.serve_forever, daemon=True).start()
    _Chat.served = []
    pod: Pod | None = None
    try:
        artifacts = root / "artifacts"  # the emptyDir, mounted at the same path here: the Job's paths are its own
        monkeypatch.setattr(jobs, "ARTIFACTS", str(artifacts))
        fn = account.sessions["load-function"]
        bucket = account.bucket
        store = S3RunStore(bucket, runner_prefix(campaign_id), session=fn)  # the runner hand-over (LaunchLoad's)
        lake = S3Lake(bucket, account.lake_uri.split("/", 3)[3], session=fn)
        url = f"http://127.0.0.1:{chat.server_address[1]}"
        admin_sfn = account.client("admin", "stepfunctions")
        machine = admin_sfn.create_state_machine(name=f"await-{campaign_id}", definition=_state_machine(),
                                                 roleArn=f"arn:aws:iam::{ACCOUNT}:role/states")["stateMachineArn"]
        with FakeKubeApi() as api:
            load = EksLoad(KubeClient(api.url, token=lambda: "test-token"), spec, campaign_id, control=store,
                           region=REGION)

            def launch(step: Any) -> tuple[JSON, str]:
                """LaunchLoad, then AwaitLoadEnd: the step's load state and its waiting execution."""
                ds = step_dataset(step)
                assert ds is not None
                input_uri = lake.write_raw(campaign_id, exp.name, step.step_id, ds.name, ds.data)
                artifact_uri = lake.raw_uri(campaign_id, exp.name, step.step_id)
                argv = aiperf_args.step_args(step, model=spec.model.name, tokenizer=spec.model.name, url=url,
                                             artifact_dir=artifact_uri, input_file=input_uri,
                                             slo=spec.slo.model_dump(), tokenizer_revision=spec.model.revision,
                                             sampling=spec.sampling_fields(), thinking=spec.thinking)
                state = load.launch(LoadRequest(
                    campaign_id, exp.name, step.step_id, tuple(argv), artifact_uri, input_uri=input_uri,
                    est_s=step.est_s, group=step.workload, group_steps=tuple(s.step_id for s in steps),
                    group_est_s=sum(s.est_s for s in steps)))
                arn = admin_sfn.start_execution(stateMachineArn=machine, name=step.step_id, input=json.dumps({
                    "ctx": {"campaign_id": campaign_id}, "experiment": exp.name, "step": {"step_id": step.step_id},
                    "launch": {"callback": True, "heartbeat_s": 300, "timeout_s": 3600}}))["executionArn"]
                deadline = time.monotonic() + 60
                while (campaign_id, exp.name, step.step_id) not in account.awaited:  # AwaitLoadEnd kept its token
                    assert time.monotonic() < deadline, "the execution never reached AwaitLoadEnd"
                    time.sleep(0.1)
                return state, arn

            def ended(arn: str, timeout: float) -> JSON:
                deadline = time.monotonic() + timeout
                while (desc := admin_sfn.describe_execution(executionArn=arn))["status"] == "RUNNING":
                    if time.monotonic() > deadline:
                        raise AssertionError(f"the execution still waits; the pod's logs:\n{pod.text() if pod else ''}")
                    time.sleep(0.2)
                return dict(desc)

            started = len(account.enforcement.checked)
            denied = len(account.enforcement.denied)
            launched = [launch(steps[0])]
            job = api.stored("Job", launched[0][0]["name"], NS)
            assert job is not None
            pod_spec = job["spec"]["template"]["spec"]
            annotations = job["spec"]["template"]["metadata"].get("annotations", {})
            if edit_pod is not None:
                edit_pod(pod_spec)
            empty_dir(artifacts, pod_spec)
            shim = {image: root / f"bin-{i}" for i, image in enumerate((spec.kubernetes.uploader_image,
                                                                        LOAD_IMAGE_PLACEHOLDER))}
            for d in shim.values():
                d.mkdir()
                d.chmod(0o755)
            for name, text in ((shim[spec.kubernetes.uploader_image] / "aws", f'exec {py} -m awscli "$@"'),
                               (shim[LOAD_IMAGE_PLACEHOLDER] / "python3", f'exec {py} "$@"')):
                name.write_text(f"#!/bin/sh\nPYTHONPATH={site}\nexport PYTHONPATH\n{text}\n")
                name.chmod(0o755)
            pod = start_pod(
                pod_spec, {spec.kubernetes.uploader_image: AWS_CLI_IMAGE_USER, LOAD_IMAGE_PLACEHOLDER: load_user},
                root, {"artifacts": artifacts, "model-cache": modeldir.hf_home().parent}, shim,
                {**account.runner(campaign_id, identity), "AWS_ENDPOINT_URL": account.url,
                 "AWS_EC2_METADATA_DISABLED": "true"}, annotations)
            # the next step is launched once the state machine resumed from this one (as ForEachStep goes)
            while len(launched) < len(steps) and ended(launched[-1][1], 240)["status"] == "SUCCEEDED":
                launched.append(launch(steps[len(launched)]))
            codes = pod.wait(300)
            s3 = account.client("admin", "s3")
            results = []
            for step, (state, arn) in zip(steps, launched, strict=False):
                desc = ended(arn, 60)
                prefix = lake.raw_uri(campaign_id, exp.name, step.step_id).removeprefix(f"s3://{bucket}/")
                listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
                results.append(StepResult(
                    desc, admin_sfn.get_execution_history(executionArn=arn)["events"],
                    {o["Key"].removeprefix(prefix): s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
                     for o in listed},
                    store.read_json(f"{exp.name}/{step.step_id}/end.json"), load.poll(state)))
            return Rehearsal(codes, pod, results, account.enforcement.denied[denied:],
                             account.enforcement.checked[started:])
    finally:
        if pod is not None:
            pod.kill()
            pod.keep_logs()
        chat.shutdown()
        shutil.rmtree(root, ignore_errors=True)


def _explain(r: Rehearsal) -> str:
    runs = "; ".join(f"{s.execution.get('status')} {s.execution.get('error')}: {s.execution.get('cause')}"
                     for s in r.steps)
    return f"exit codes {r.codes}; executions: {runs}; denied {r.denied}\n{r.pod.text()}"


# ----------------------------------------------------------------------------------------------- tests


def test_each_step_completes_and_answers_its_token_with_the_real_aws_cli_as_the_load_job_role(
        account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered Job as is, for a workload of two steps: both containers run as the load image's user (the
    pod's securityContext); for each step the control container waits for its request (a missing key: S3's
    403 to this role, which may not list the run store), fetches its inputs (ListObjectsV2 within the load
    Job role's s3:prefix condition), AIPerf runs the step's own argv on them, its artifacts reach the step's
    raw prefix, the end record its run-store key, and the task token is answered: the waiting execution
    resumes; then the next step."""
    r = rehearse(account, monkeypatch, "rehearsal-as-rendered")
    assert r.codes == {"aiperf": 0, "control": 0}, _explain(r)
    assert set(r.pod.users.values()) == {(10001, 10001, (10001,))}  # one user for the pod, its group owns the volume
    # only the control container holds the role's credentials: AIPerf, which talks to the serving side, ran
    # without any (it can fetch neither a step's key nor anything else of the campaign's)
    assert "AWS_SESSION_TOKEN" in r.pod.envs["control"]
    assert not [k for k in r.pod.envs["aiperf"] if k.startswith("AWS_") and k != "AWS_EC2_METADATA_DISABLED"]
    assert len(r.steps) == 2
    for step in r.steps:
        assert step.execution["status"] == "SUCCEEDED", _explain(r)
        (answer,) = [e["taskSucceededEventDetails"]["output"] for e in step.history if e["type"] == "TaskSucceeded"]
        assert json.loads(answer) == {"woken": "load ended"}  # the runner's SendTaskSuccess
        assert any(e["type"] == "PassStateEntered" for e in step.history)  # resumed past AwaitLoadEnd
        assert step.end is not None and step.end["exit_code"] == 0 and step.polled == 0  # CheckLoad's reading
        summary = json.loads(step.raw["profile_export_aiperf.json"])  # AIPerf's own artifacts, uploaded
        assert summary["request_count"]["avg"] == 8
        assert any(k.startswith("inputs/") for k in step.raw)  # the kept input the step sent
    assert len(_Chat.served) >= 16
    # IAM was enforced on every call the pod made: the role's grants were exactly enough
    pod_calls = {(a, res) for who, a, res in r.checked if who.endswith("/load-job")}  # the pod's role session
    assert ("s3:ListBucket", f"arn:aws:s3:::{account.bucket}") in pod_calls
    assert {a for a, _ in pod_calls} >= {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "states:SendTaskSuccess"}
    # the only refusals: S3's 403 for a missing key, to the pod polling the second step's request before
    # LaunchLoad wrote it, and to the Load function reading a token not kept yet (its run store then lists
    # exactly that key, which its role may: benchctl.aws.s3.S3RunStore._absent)
    missing = "s3:ListBucket (a missing key's 404)"
    assert {(a, who.rsplit("/", 1)[-1]) for who, a, _ in r.denied} <= {(missing, "load-job"), (missing, "load-function")}
    assert account.enforcement.problems == []


def test_without_list_bucket_the_step_fails_at_once_naming_the_refused_listing(
        account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load Job role without its s3:ListBucket (the role as it was): the recursive copy of the step's
    inputs is refused, and the Job says so at once, everywhere it is waited for: the task token answered
    with LoadInputsUnavailable (not the heartbeat's end), an end record with that code (CheckLoad's), and
    the runner told, so the pod ends (not its activeDeadlineSeconds)."""
    t0 = time.monotonic()
    r = rehearse(account, monkeypatch, "rehearsal-no-listing", identity="load-job-without-list-bucket")
    (step,) = r.steps  # the next one is never launched
    assert r.codes["control"] == 96 and r.codes["aiperf"] == 1, _explain(r)
    assert step.execution["status"] == "FAILED" and step.execution["error"] == "LoadInputsUnavailable", _explain(r)
    # the cause the Job sent with it is in its end record (moto keeps no cause of SendTaskFailure)
    assert step.end is not None and (step.end["exit_code"], step.end["error"]) == (96, "LoadInputsUnavailable")
    assert "ListObjectsV2" in step.end["cause"] and "AccessDenied" in step.end["cause"]
    assert step.polled == 96
    assert ("s3:ListBucket", f"arn:aws:s3:::{account.bucket}") in {(a, res) for _, a, res in r.denied}
    assert "the control container ended (96 LoadInputsUnavailable)" in r.pod.log("aiperf")
    assert time.monotonic() - t0 < 240  # within the runner's start-up, far from any heartbeat


def test_without_one_user_for_the_pod_the_step_fails_at_once_naming_the_permission_error(
        account: Account, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod without its securityContext (the Job as it was): each container runs as its image's user,
    the AWS CLI's root creates the step's directory (0755) and the load image's user cannot write AIPerf's
    output directory in it; the runner's last words reach the control container, which fails the step at
    once with them (LoadRunnerDied), not after the runner's silence."""
    def as_images_run(pod: JSON) -> None:
        pod.pop("securityContext")

    r = rehearse(account, monkeypatch, "rehearsal-two-users", edit_pod=as_images_run)
    (step,) = r.steps
    assert r.pod.users == {"aiperf": (10001, 10001, ()), "control": (0, 0, ())}
    assert r.codes["control"] == 95 and r.codes["aiperf"] != 0, _explain(r)
    assert step.execution["status"] == "FAILED" and step.execution["error"] == "LoadRunnerDied", _explain(r)
    assert step.end is not None and (step.end["exit_code"], step.end["error"]) == (95, "LoadRunnerDied")
    assert "PermissionError" in step.end["cause"] and "Permission denied" in step.end["cause"]
    assert step.polled == 95


@pytest.mark.parametrize("identity", ["load-job", "load-job-without-list-bucket"])
def test_the_preflight_makes_the_runners_calls_as_its_role_and_names_a_refused_one(
        account: Account, identity: str) -> None:
    """The uploader check's path part (``UPLOADER_PATH_CHECK``, the preflight Job's environment as rendered)
    with the real AWS CLI as the pod's user under the role: it passes with the load Job role, and without
    s3:ListBucket it fails (6) naming the listing, before anything is scaled."""
    spec = rehearsal_spec()
    cid = f"rehearsal-preflight-{identity}"
    job = preflight_jobs.render_preflight_job(spec, cid, "uploader", run_uri=f"{account.runs_uri}/{cid}",
                                    lake_uri=account.lake_uri, region=REGION)
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    c["command"] = ["sh", "-c", preflight_jobs.UPLOADER_PATH_CHECK]  # the check after `aws --version` (v2 there, v1 here)
    site = sysconfig.get_paths()["purelib"]
    py = _interpreter(site, jobs.LOAD_UID)
    root = Path(tempfile.mkdtemp(prefix="benchctl-preflight-"))
    root.chmod(0o755)
    try:
        shim = root / "bin"
        shim.mkdir()
        shim.chmod(0o755)
        (shim / "aws").write_text(f'#!/bin/sh\nPYTHONPATH={site}\nexport PYTHONPATH\nexec {py} -m awscli "$@"\n')
        (shim / "aws").chmod(0o755)
        run = start_pod(pod, {spec.kubernetes.uploader_image: AWS_CLI_IMAGE_USER}, root, {},
                        {spec.kubernetes.uploader_image: shim},
                        {**account.runner(cid, identity), "AWS_ENDPOINT_URL": account.url,
                         "AWS_EC2_METADATA_DISABLED": "true"})
        code = run.wait(240)["uploader"]
        text = run.log("uploader")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert run.users["uploader"] == (10001, 10001, (10001,))
    if identity == "load-job":
        assert code == 0, text
        assert "inputs listed, run-store object written and read, an artifact uploaded, task-token answers allowed" in text
    else:
        assert code == 6, text
        assert "fetching a step's inputs" in text and "ListObjectsV2" in text and "AccessDenied" in text


@pytest.mark.parametrize("identity", ["load-job", "load-job-without-list-bucket"])
def test_the_doctors_runner_job_runs_the_load_roles_real_path(account: Account, templates: dict[str, JSON],
                                                               monkeypatch: pytest.MonkeyPatch, identity: str) -> None:
    """``benchctl doctor``'s Job check as the Load function runs it (``benchctl.aws.selftest``, as the Load
    role): the tiny runner Job it starts runs here as the kubelet would run it, with the real AWS CLI as the
    load Job role; with the role the check passes, without s3:ListBucket it fails naming the refused listing."""
    from benchctl.aws import selftest
    from benchctl.aws.k8s.client import KubeClient
    from tests.aws_checks import RBAC_FILE
    from tests.fakes.eks_world import runner_grants
    from tests.fakes.k8s_api import FakeKubeApi

    spec = yaml.safe_load((ROOT / "examples" / "aws-rehearsal.yaml").read_text())
    spec["model"]["revision"] = modeldir.REVISION  # the offline model directory's (the runner warms its tokenizer)
    env = _function_env({k: v for k, v in templates.items() if not k.startswith("_")}, "lambdas.load.handler")
    env = {**env, "BENCHCTL_LOAD_IMAGE": LOAD_IMAGE_PLACEHOLDER}
    fn = account.sessions["load-function"]
    site = sysconfig.get_paths()["purelib"]
    load_user = load_image_user()
    py = _interpreter(site, load_user.uid)
    root = Path(tempfile.mkdtemp(prefix="benchctl-doctor-"))
    root.chmod(0o755)
    pod: Pod | None = None
    try:
        artifacts = root / "artifacts"
        monkeypatch.setattr(jobs, "ARTIFACTS", str(artifacts))
        with FakeKubeApi() as api:
            api.enforce_rbac([d for d in yaml.safe_load_all(RBAC_FILE.read_text()) if d],
                             {"benchctl-load"})  # the Load role's group
            api.put(runner_grants(NS))  # stacks/kubernetes/benchctl-identities.yaml: the doctor's grant goes here
            monkeypatch.setattr("benchctl.aws.eks_token.kube_for_cluster",
                                lambda name, session=None, **_: KubeClient(api.url, token=lambda: "test-token"))
            started = selftest.self_test({"function": "Load", "checks": ["runner_job"], "spec": spec,
                                          "campaign_id": f"doctor-{identity}"}, env, session=fn)["checks"]["runner_job"]
            assert started["ok"], started
            state = started["job"]["state"]
            template = api.stored("Job", state["name"], NS)["spec"]["template"]
            pod_spec = template["spec"]
            empty_dir(artifacts, pod_spec)
            uploader = next(c["image"] for c in pod_spec["containers"] if c["name"] == "control")
            shim = {uploader: root / "bin-aws", LOAD_IMAGE_PLACEHOLDER: root / "bin-load"}
            for d in shim.values():
                d.mkdir()
                d.chmod(0o755)
            for name, text in ((shim[uploader] / "aws", f'exec {py} -m awscli "$@"'),
                               (shim[LOAD_IMAGE_PLACEHOLDER] / "python3", f'exec {py} "$@"')):
                name.write_text(f"#!/bin/sh\nPYTHONPATH={site}\nexport PYTHONPATH\n{text}\n")
                name.chmod(0o755)
            pod = start_pod(pod_spec, {uploader: AWS_CLI_IMAGE_USER, LOAD_IMAGE_PLACEHOLDER: load_user}, root,
                            {"artifacts": artifacts, "model-cache": modeldir.hf_home().parent}, shim,
                            {**account.runner(f"doctor-{identity}", identity), "AWS_ENDPOINT_URL": account.url,
                             "AWS_EC2_METADATA_DISABLED": "true"}, template["metadata"].get("annotations"))
            codes = pod.wait(300)
            result = selftest.self_test({"function": "Load", "checks": ["runner_job_result"], "spec": spec,
                                         "job": started["job"]}, env, session=fn)["checks"]["runner_job_result"]
    finally:
        if pod is not None:
            pod.kill()
            pod.keep_logs()
        shutil.rmtree(root, ignore_errors=True)
    assert pod.users["control"] == pod.users["aiperf"] == (10001, 10001, (10001,))
    assert api.denied == []
    # it ran as the doctor's own campaign's runner identity, made before the Job and removed once judged
    assert pod_spec["serviceAccountName"] == f"doctor-{identity}"
    assert not [a for a in account.pod_identity.associations.values() if a["serviceAccount"] == f"doctor-{identity}"]
    if identity == "load-job":
        assert codes == {"aiperf": 0, "control": 0}, pod.text()
        assert result["ok"] and "end record written" in result["detail"], result
    else:
        assert codes["control"] == 96, pod.text()
        assert not result["ok"] and "LoadInputsUnavailable" in result["detail"], result
        assert "ListObjectsV2" in result["detail"] and "AccessDenied" in result["detail"], result
