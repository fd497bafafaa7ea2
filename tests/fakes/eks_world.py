"""A whole campaign driven through the AWS engine's own code path, against FakeKubeApi and moto's EKS.

What the real AWS engine runs: ``benchctl.campaign``'s operations with the EKS adapters (``EksServing``,
``EksLoad``, ``EksSmoke``, ``preflight``, ``pools_for``) and the real Kubernetes client over HTTP. Only the
other side is imitated, each part as its controller behaves: the Dynamo operator creates a deployment's
pods from its component templates (Grove overwriting ``app.kubernetes.io/managed-by``) and reports it
Ready; the Job controller creates a Job's pod from its template and reports the Job done; Karpenter
accepts NodePools; GPU nodes of node groups come up. Tests then hold what was sent (``api.bodies``) to the
other side's own definitions: the vendored CRD schemas, the Kubernetes schemas, AIPerf's parser, RBAC.

The lake is the local one with S3-shaped raw URIs (what the Job renderer and the load adapter expect from
the S3 lake), so no S3 is needed for manifests.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchctl import campaign
from benchctl.analysis.quality import LOG_MARK
from benchctl.aws.eks import EksServing, EksSmoke
from benchctl.aws.eks_load import EksLoad, sign_end
from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.aws.k8s.client import KubeClient
from benchctl.aws.k8s.common import LABEL_MANAGED, LABEL_STEP
from benchctl.aws.pools import pools_for
from benchctl.aws.preflight import preflight
from benchctl.aws.runner_identity import RunnerIdentity
from benchctl.campaign import Task
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import Providers
from benchctl.campaign.runstate import RunState, runner_key
from benchctl.local.lake import LocalLake
from benchctl.local.runstore import LocalRunStore
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import CampaignSpec, parse_spec
from tests import yaml_files
from tests.fakes import pod_identity
from tests.fakes.k8s_api import FakeKubeApi
from tests.fakes.ports import arithmetic

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NS = "dynamo-bench"
CLUSTER = "bench"
CID = "example-20261201-000000"
TOKEN = "test-token"
# each function that calls the cluster has its own identity (its role's access entry): a token per function,
# its user in the function's group (benchctl.aws.k8s.admission.FUNCTION_GROUPS)
FUNCTION_TOKENS = {fn: f"token-{fn.lower()}" for fn in FUNCTION_GROUPS}
LOAD_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-assets:benchctl-load"
LAKE_URI = "s3://results-bucket/lake"
_ROLE_ARN = "arn:aws:iam::123456789012:role/eks"


def local_only(data: dict[str, Any]) -> bool:
    """An example of the CPU engine (``engine: vllm`` on a local CPU pool): it has no EKS variant."""
    cpu_pools = {p["name"] for p in data["pools"] if p.get("provider") == "local" and p["gpus_per_node"] == 0}
    return any(e.get("engine", "vllm") == "vllm" and {w["pool"] for w in e.get("workers", [])} & cpu_pools
               for e in data["experiments"])


def example_specs() -> dict[str, CampaignSpec]:
    """Every example spec as the AWS engine would run it: pools the examples leave ``local`` become
    managed node groups in one variant and Auto Mode pools in another; the others run as written. The
    deployment's load image is filled in as ``benchctl.aws.preflight.with_load_image`` does."""
    out: dict[str, CampaignSpec] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        data = yaml_files.load(path)
        providers = {p.get("provider", "managed-nodegroup") for p in data["pools"]}
        if local_only(data):
            continue  # the CPU engine (vLLM on this machine's CPU) is local only: no EKS variant of it
        variants = ["managed-nodegroup", "auto-mode"] if "local" in providers else [None]
        for provider in variants:
            d = copy.deepcopy(data)
            # no budget: it changes no manifest (a local rehearsal's is sized for the local engine), and
            # its guard reads the whole timeline before every step
            d.pop("budget", None)
            for pool in d["pools"]:
                if provider is not None:
                    pool["provider"] = provider
                    pool["nodegroup"] = f"ng-{pool['name']}" if provider == "managed-nodegroup" else None
            d.setdefault("kubernetes", {}).setdefault("aiperf_image", LOAD_IMAGE)
            out[path.stem + (f"[{provider}]" if provider else "")] = parse_spec(d, str(path))
    return out


class S3NamedLake(LocalLake):
    """The local lake, raw areas and kept inputs named as the S3 lake names them (``s3://…/raw/…``)."""

    def raw_uri(self, campaign_id: str, experiment: str, step_id: str) -> str:
        self.raw_dir(campaign_id, experiment, step_id)
        return f"{LAKE_URI}/raw/campaign_id={campaign_id}/experiment={experiment}/step_id={step_id}/"

    def local_raw(self, campaign_id: str, experiment: str, step_id: str) -> Path:
        return self.raw_dir(campaign_id, experiment, step_id)

    @contextmanager
    def raw_local(self, campaign_id: str, experiment: str, step_id: str) -> Iterator[Path]:
        yield self.local_raw(campaign_id, experiment, step_id)  # what the S3 lake downloads for ingestion

    def write_raw(self, campaign_id: str, experiment: str, step_id: str, name: str, data: bytes) -> str:
        inputs = self.local_raw(campaign_id, experiment, step_id) / "inputs"
        inputs.mkdir(parents=True, exist_ok=True)
        (inputs / name).write_bytes(data)
        return f"{self.raw_uri(campaign_id, experiment, step_id)}inputs/{name}"


# ------------------------------------------------------------------------------------ the other side


# AWS's EFA device plugin as its Helm chart installs it (release "efa" in kube-system)
EFA_DEVICE_PLUGIN: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "DaemonSet",
    "metadata": {"name": "efa-aws-efa-k8s-device-plugin", "namespace": "kube-system"},
    "spec": {"template": {"spec": {"containers": [{
        "name": "aws-efa-k8s-device-plugin",
        "image": "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.8"}]}}}}


def cluster_prerequisites(api: FakeKubeApi, spec: CampaignSpec) -> None:
    """What docs/howto/aws-existing-cluster.md asks a cluster to have (what the preflight checks)."""
    k = spec.kubernetes
    for obj in (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": k.namespace}},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": "dynamographdeployments.nvidia.com"}},
        {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
         "metadata": {"name": "nodepools.karpenter.sh"}},
        {"apiVersion": "eks.amazonaws.com/v1", "kind": "NodeClass", "metadata": {"name": k.node_class}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": k.hf_token_secret, "namespace": k.namespace},
         "data": {"HF_TOKEN": "aGZfdG9rZW4="}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": k.model_pvc, "namespace": k.namespace},
         "spec": {"accessModes": ["ReadWriteMany"]}},
        EFA_DEVICE_PLUGIN,
        runner_grants(k.namespace),
    ):
        api.put(obj)


def runner_grants(namespace: str) -> dict[str, Any]:
    """The runner grants ConfigMap as stacks/kubernetes/benchctl-identities.yaml applies it (no grant yet)."""
    from benchctl.aws.k8s.common import RUNNER_GRANTS

    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": RUNNER_GRANTS, "namespace": namespace, "labels": {LABEL_MANAGED: "benchctl"}}}


def dynamo_operator(api: FakeKubeApi) -> list[dict[str, Any]]:
    """On a DGD create: one Running pod per component replica from its template (Grove's managed-by on
    them), each with an address; the deployment Ready for its generation. Returns the pods it made."""
    ips = (f"10.1.{i // 250}.{i % 250 + 1}" for i in itertools.count())
    made: list[dict[str, Any]] = []

    def on_create(fake: FakeKubeApi, dgd: dict[str, Any]) -> None:
        ns, name = dgd["metadata"]["namespace"], dgd["metadata"]["name"]
        for comp in dgd["spec"]["components"]:
            tmpl = comp["podTemplate"]
            for i in range(comp.get("replicas", 1)):
                pod = fake.add_pod(ns, f"{name}-{comp['name'].lower()}-{i}", owner=dgd,
                                   labels={**tmpl["metadata"]["labels"], LABEL_MANAGED: "grove-operator"},
                                   containers=tuple(c["name"] for c in tmpl["spec"]["containers"]))
                pod["status"].update(podIP=next(ips), containerStatuses=[
                    {"name": c["name"], "image": c["image"], "imageID": f"{c['image'].split('@')[0]}@sha256:{'1' * 64}"}
                    for c in tmpl["spec"]["containers"]])
                made.append(fake.put(pod))
        fake.set_status("DynamoGraphDeployment", ns, name, {
            "state": "successful", "observedGeneration": dgd["metadata"].get("generation", 1),
            "conditions": [{"type": "Ready", "status": "True"}]})

    api.on_create("DynamoGraphDeployment", on_create)
    return made


def quality_log(job: dict[str, Any]) -> str:
    """The smoke script's quality lines (benchctl.analysis.quality.LOG_MARK + JSON) as a model that can count
    answers the Job's QUALITY_REQUESTS."""
    env = {e["name"]: e.get("value") for c in job["spec"]["template"]["spec"]["containers"] for e in c.get("env") or []}
    lines = [LOG_MARK + json.dumps({"id": q["id"], "content": f"ANSWER: {arithmetic(q['body'])}", "finish_reason": "stop"})
             for q in json.loads(env.get("QUALITY_REQUESTS") or "[]")]
    return "".join(line + "\n" for line in lines)


def _runner_steps(job: dict[str, Any]) -> list[str] | None:
    """A load runner Job's steps (its control container's BENCHCTL_STEPS), or None for another Job."""
    for c in job["spec"]["template"]["spec"]["containers"]:
        env = {e["name"]: e.get("value") for e in c.get("env") or []}
        if c["name"] == "control" and "BENCHCTL_STEPS" in env:
            return str(env["BENCHCTL_STEPS"]).split()
    return None


def job_controller(api: FakeKubeApi, fail_steps: tuple[str, ...] = ()) -> None:
    """On a Job create: its pod (from the template) and a finished status; failed for ``fail_steps``. A load
    runner Job's pod keeps running (its steps end by :func:`end_runner_step`); its log says why a step of
    ``fail_steps`` failed."""

    def on_create(fake: FakeKubeApi, job: dict[str, Any]) -> None:
        steps = _runner_steps(job)
        if steps is not None:
            bad = [s for s in steps if s in fail_steps]
            fake.add_job_pod(job, f"{job['metadata']['name']}-pod", phase="Running",
                             logs="".join(f"[benchctl] step {s}: AIPerf exited 1\naiperf: 3 of 24 requests failed\n"
                                          for s in bad))
            return
        step = (job["spec"]["template"]["metadata"].get("labels") or {}).get(LABEL_STEP, "")
        failed = step in fail_steps
        logs = "aiperf: 3 of 24 requests failed\n" if failed else "ok\n"
        if step == "smoke" and not failed:
            logs += quality_log(job)
        fake.add_job_pod(job, f"{job['metadata']['name']}-pod", phase="Failed" if failed else "Succeeded",
                         logs=logs)
        fake.set_status("Job", job["metadata"]["namespace"], job["metadata"]["name"],
                        {"failed": 1} if failed else {"succeeded": 1})

    api.on_create("Job", on_create)


@functools.lru_cache(maxsize=1)
def _engine_packages_log() -> str:
    """What a pre-pull container prints: its real script, run here (this environment's packages stand in for
    the image's: ai-dynamo 1.6.1, no vLLM, no torch)."""
    from benchctl.aws.k8s.nodepool import ENGINE_PACKAGES_SCRIPT

    return subprocess.run([sys.executable, "-c", ENGINE_PACKAGES_SCRIPT], capture_output=True, text=True,
                          timeout=60, check=True).stdout


def daemonset_controller(api: FakeKubeApi) -> None:
    """On a DaemonSet create: a Running pod (owned by it, its template's labels) on every node its
    ``nodeSelector`` matches, as the DaemonSet controller places them; a pre-pull container's log is what its
    command prints (:func:`_engine_packages_log`)."""
    from benchctl.aws.k8s.nodepool import PREPULL_COMMAND

    def on_create(fake: FakeKubeApi, ds: dict[str, Any]) -> None:
        tmpl = ds["spec"]["template"]
        want = (tmpl.get("spec") or {}).get("nodeSelector") or {}
        for node in fake.all_stored("Node"):
            labels = node["metadata"].get("labels") or {}
            if all(labels.get(k) == v for k, v in want.items()):
                pod = fake.add_pod(ds["metadata"]["namespace"], f"{ds['metadata']['name']}-{node['metadata']['name']}",
                                   labels=dict(tmpl["metadata"]["labels"]), owner=ds,
                                   containers=tuple(c["name"] for c in tmpl["spec"]["containers"]))
                pod["spec"]["nodeName"] = node["metadata"]["name"]
                pod["spec"]["containers"] = [{"name": c["name"], "image": c["image"]} for c in tmpl["spec"]["containers"]]
                fake.put(pod)
                for c in tmpl["spec"]["containers"]:
                    if c.get("command") == PREPULL_COMMAND:
                        fake.set_logs(ds["metadata"]["namespace"], pod["metadata"]["name"], _engine_packages_log(),
                                      c["name"])

    api.on_create("DaemonSet", on_create)


def karpenter(api: FakeKubeApi) -> None:
    """NodePools are accepted (Ready) as soon as they exist."""
    api.on_create("NodePool", lambda fake, pool: fake.set_status(
        "NodePool", None, pool["metadata"]["name"], {"conditions": [{"type": "Ready", "status": "True"}]}))


def gpu_nodes(api: FakeKubeApi, spec: CampaignSpec) -> None:
    """Node-group GPU nodes Ready with their GPUs and a driver the Dynamo image accepts (GFD's label)."""
    plan = plan_campaign(spec, "aws")
    for pool in spec.pools:
        if pool.provider != "managed-nodegroup":
            continue
        for i in range(max(e.nodes.get(pool.name, 0) for e in plan.experiments)):
            api.add_node(f"{pool.nodegroup}-{i}", {"eks.amazonaws.com/nodegroup": str(pool.nodegroup),
                                                   "nvidia.com/cuda.driver-version.major": "580"},
                         allocatable_gpus=pool.gpus_per_node, allocatable_efa=pool.efa_interfaces())


# EC2's answer when an Availability Zone has no capacity for a type (the message EKS passes on in the node group's
# AsgInstanceLaunchFailures issue, as quoted in aws/containers-roadmap#2204)
ICE_MESSAGE = ("Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have "
               "sufficient {type} capacity in the Availability Zone you requested ({zone}). Our system will be working "
               "on provisioning additional capacity. You can currently get {type} capacity by not specifying an "
               "Availability Zone in your request or choosing {others}. Launching EC2 instance failed.")


def _moto_nodegroup(session: Any, nodegroup: str) -> Any:
    """moto's own node group object (its backend), for what moto cannot be asked to do through the API."""
    from moto.eks.models import eks_backends

    region = session.region_name
    account = session.client("sts").get_caller_identity()["Account"]
    return eks_backends[account][region].clusters[CLUSTER].nodegroups[nodegroup]


def set_nodegroup_health(session: Any, nodegroup: str, issues: list[dict[str, Any]], status: str) -> None:
    """What EKS reports of a node group's health (DescribeNodegroup: ``health.issues[]`` of {code, message,
    resourceIds}, and ``status``), set on moto's node group, which never reports any. As strict as the API: each code
    is one of EKS's NodegroupIssueCode values and the status one of its NodegroupStatus values (botocore's service
    model, which follows the EKS API reference's "Issue" and "Nodegroup" data types)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("eks")
    codes, statuses = model.shape_for("NodegroupIssueCode").enum, model.shape_for("NodegroupStatus").enum
    bad = [i.get("code") for i in issues if i.get("code") not in codes]
    assert not bad, f"not EKS NodegroupIssueCode values: {bad} (valid: {codes})"
    assert status in statuses, f"{status!r} is not an EKS NodegroupStatus ({statuses})"
    ng = _moto_nodegroup(session, nodegroup)
    ng.health = {"issues": [dict(i) for i in issues]}  # a new dict: moto's default health is shared by every group
    ng.status = status


def capacity_runs_out(world: World, pool_name: str, *, launched: int = 1, zone: str = "us-east-1a",
                      others: str = "us-east-1b, us-east-1c") -> dict[str, Any]:
    """A scale-up of ``pool_name``'s node group that EC2 can only partly serve, as EKS shows it: ``launched`` nodes
    join the cluster (Ready, their GPUs, in ``zone``), the rest cannot be launched; the group reports the health issue
    ``AsgInstanceLaunchFailures`` carrying EC2's ``InsufficientInstanceCapacity`` message (its resource: the group's
    Auto Scaling group), its status turns ``DEGRADED`` (it stays so until a scale-out succeeds: aws/containers-
    roadmap#2326) and its scaling config is left as asked (the ASG's desired size stays; EKS does not lower it).
    The scale-up must have been requested first."""
    pool = next(p for p in world.spec.pools if p.name == pool_name)
    assert pool.provider == "managed-nodegroup" and pool.nodegroup, pool
    ng = _moto_nodegroup(world.providers_session, str(pool.nodegroup))
    desired = int(ng.scaling_config["desiredSize"])
    assert launched < desired, f"node group {pool.nodegroup}: desired size {desired}: no scale-up of more than {launched}"
    for i in range(launched):
        world.api.add_node(f"{pool.nodegroup}-{i}", {"eks.amazonaws.com/nodegroup": str(pool.nodegroup),
                                                    "topology.kubernetes.io/zone": zone,
                                                    "node.kubernetes.io/instance-type": pool.instance_type,
                                                    "nvidia.com/cuda.driver-version.major": "580"},
                           allocatable_gpus=pool.gpus_per_node, allocatable_efa=pool.efa_interfaces())
    issue = {"code": "AsgInstanceLaunchFailures", "resourceIds": [ng.resources["autoScalingGroups"][0]["name"]],
             "message": ICE_MESSAGE.format(type=pool.instance_type, zone=zone, others=others)}
    set_nodegroup_health(world.providers_session, str(pool.nodegroup), [issue], "DEGRADED")
    return issue


@contextmanager
def moto_eks(spec: CampaignSpec, config: Any = None) -> Iterator[Any]:
    """moto EKS with the cluster and the spec's node groups (scaled to zero); DescribeUpdate answered.
    ``config``: moto's (e.g. Step Functions executing its state machines)."""
    import boto3
    from botocore.awsrequest import AWSResponse
    from moto import mock_aws

    with mock_aws(config=config):
        session = boto3.Session(aws_access_key_id="a", aws_secret_access_key="b", region_name="us-east-1")
        eks = session.client("eks")
        eks.create_cluster(name=CLUSTER, roleArn=_ROLE_ARN, resourcesVpcConfig={})
        for pool in spec.pools:
            if pool.provider == "managed-nodegroup":
                eks.create_nodegroup(clusterName=CLUSTER, nodegroupName=str(pool.nodegroup), nodeRole=_ROLE_ARN,
                                     subnets=["subnet-1"], scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 0})

        def describe_update(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:  # moto lacks DescribeUpdate
            return AWSResponse("", 200, {}, None), {"update": {"id": "u", "status": "Successful", "errors": []}}

        session.events.register("before-call.eks.DescribeUpdate", describe_update)
        pod_identity.install(session, CLUSTER)  # the runner identity's calls (moto has none of them)
        yield session


# ------------------------------------------------------------------------------------ the campaign


@dataclass
class World:
    api: FakeKubeApi
    spec: CampaignSpec
    providers: Providers
    ctx: Ctx
    lake: S3NamedLake
    argv: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (experiment, step) -> AIPerf argv
    pods: list[dict[str, Any]] = field(default_factory=list)  # what the operator created
    providers_session: Any = None  # the boto3 session of moto's EKS
    capacity_polls: dict[str, int] = field(default_factory=dict)  # experiment -> CheckCapacity calls
    failed: Failed | None = None  # with ``failure_path``: the state that failed and the failure path's answers


@dataclass
class Failed:
    """A run that ended through the failure path, as the state machine runs it: the failing state, its error (the
    Lambda's errorType and message), TeardownAfterFailure's, AbortCampaign's and ReportFailure's answers."""

    state: str
    experiment: str
    error: str
    message: str
    teardown: dict[str, Any] = field(default_factory=dict)
    abort: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)


class _Preflight:
    def __init__(self, kube: KubeClient, session: Any, identity: RunnerIdentity | None = None) -> None:
        self.kube, self.session, self.identity = kube, session, identity

    def check(self, spec: CampaignSpec) -> list[str]:
        """Plan's preflight; its runner identity made first (``identity``, else the campaign's: :func:`runner_identity`)."""
        identity = self.identity or runner_identity(spec, self.kube, self.session)
        return preflight(spec, self.kube, eks=self.session.client("eks"), cluster_name=CLUSTER, campaign_id=CID,
                         identity=identity)


LOAD_JOB_ROLE = "arn:aws:iam::123456789012:role/benchctl-load-job"  # the role every runner identity is associated with


def runner_identity(spec: CampaignSpec, kube: KubeClient, session: Any) -> RunnerIdentity:
    """The campaign's runner identity as the AWS providers build it (benchctl.aws.providers): made by Plan's
    preflight (its service account, Pod Identity association and grant), removed on the end paths. Its clock is
    the association's creation plus SETTLE_S: the preflight's wait for it to settle is the state machine's, not
    this world's."""
    from benchctl.aws.runner_identity import SETTLE_S

    created = pod_identity.PodIdentity().now.timestamp()  # the fake's fixed "now" (tests/fakes/pod_identity.py)
    return RunnerIdentity(lambda: kube, lambda: session.client("eks"), cluster=CLUSTER,
                          namespace=spec.kubernetes.namespace, role_arn=LOAD_JOB_ROLE, campaign_id=CID,
                          clock=lambda: created + SETTLE_S)


def end_runner_step(p: Providers, experiment: str, step_id: str, exit_code: int) -> None:
    """What a load runner Job's control container does when a step ended: its end record in the run store."""
    assert isinstance(p.load, EksLoad)
    rec = p.state.load(experiment, step_id)
    key = p.load.control.read_json(runner_key(experiment, step_id, "key.json"))
    assert rec is not None and key is not None
    body = json.dumps({"exit_code": exit_code, "ended_at": 0, "step": step_id}).encode()  # signed as the Job signs
    end = Path(p.load.control.uri) / runner_key(experiment, step_id, "end.json")
    end.parent.mkdir(parents=True, exist_ok=True)
    end.write_bytes(sign_end(body, key["end_key"]))


def providers(spec: CampaignSpec, kube: KubeClient, tmp: Path, session: Any) -> tuple[Providers, Ctx, S3NamedLake]:
    store = LocalRunStore(tmp / "run")
    state = RunState(store)
    lake = S3NamedLake(tmp / "lake")
    ctx = Ctx(CID, str(tmp / "run"), LAKE_URI, 30, None)  # an AWS poll (1 s would exceed the history quota)
    no_sleep = lambda _s: None  # noqa: E731 (the fake answers at once; nothing to wait for)
    state.keep_spec(spec, source="s3://results-bucket/specs/example.yaml", text="")  # what Plan imports
    p = Providers(
        engine="aws", state=state,
        pools=pools_for(spec, CID, cluster_name=CLUSTER, session=session, kube=kube),
        serving=EksServing(kube, CID, sleep=no_sleep), load=EksLoad(kube, spec, CID, control=store, region="us-east-1"),
        smoke=EksSmoke(kube, spec, CID, sleep=no_sleep), lake=lake, read_uri=lambda uri: b"",
        tokenizer="",  # as benchctl.aws: the model's own tokenizer, offline from the model volume
        preflight=_Preflight(kube, session, identity := runner_identity(spec, kube, session)),
        identity=identity,
    )
    return p, ctx, lake


class Caller:
    """Which function's identity the shared client presents: as on AWS, each state's function calls the
    cluster with its own role, mapped to its own group (the fake API server authorizes and admits by it)."""

    def __init__(self, function: str = "Plan") -> None:
        self.function = function

    def client(self, api: FakeKubeApi) -> KubeClient:
        return KubeClient(api.url, token=lambda: FUNCTION_TOKENS[self.function])


def function_tokens(api: FakeKubeApi) -> None:
    """The cluster accepts each function's token as a user in that function's group."""
    for fn, token in FUNCTION_TOKENS.items():
        api.add_token(token, {FUNCTION_GROUPS[fn]})


CapacityPoll = Callable[["World", str, int], None]


def run_campaign(spec: CampaignSpec, api: FakeKubeApi, tmp: Path, session: Any, *,
                 fail_steps: tuple[str, ...] = (), failure_path: bool = False,
                 before_capacity_poll: CapacityPoll | None = None) -> World:
    """Plan (preflight included), then every experiment: scale, capacity, deploy, ready, smoke, warm-up,
    every step (launch, check), teardown with hand-over; the last one restores its pools.

    CheckCapacity is polled as the state machine polls it (``before_capacity_poll(world, experiment, n)`` runs before
    the n-th poll, n from 1: what the cluster does in between), at most ``timeouts.capacity_s / poll_seconds`` + 1
    times. With ``failure_path``, a state of an experiment that raises ends the run as the ASL's Catch does: the
    first failure recorded (``lambdas._runtime.run``), TeardownAfterFailure until done, AbortCampaign until done,
    ReportFailure (``world.failed``); without it, the error propagates."""
    caller = Caller()
    kube = caller.client(api)
    p, ctx, lake = providers(spec, kube, tmp, session)
    world = World(api, spec, p, ctx, lake, providers_session=session)
    caller.function = "Plan"
    campaign.plan(p, ctx, Task(state="Plan"))
    plan = plan_campaign(spec, "aws")
    for i, exp in enumerate(plan.experiments):
        state = "ScalePools"
        try:
            caller.function = "Pools"
            campaign.scale_pools(p, ctx, Task(exp.name, state=state))
            state = "CheckCapacity"
            _await_capacity(world, exp.name, before_capacity_poll)
            state = "Deploy"
            _run_experiment(world, caller, exp, plan, i + 1 < len(plan.experiments), fail_steps)
        except Exception as exc:
            if not failure_path:
                raise
            world.failed = failure(world, caller, state, exp.name, exc)
            return world
    return world


def _await_capacity(world: World, experiment: str, before_poll: CapacityPoll | None) -> None:
    """CheckCapacity, then WaitForCapacity (``ctx.poll_seconds``) while not done, as the ASL loops."""
    p, ctx = world.providers, world.ctx
    limit = int(world.spec.timeouts.capacity_s // max(1, ctx.poll_seconds)) + 1
    for n in range(1, limit + 1):
        if before_poll is not None:
            before_poll(world, experiment, n)
        world.capacity_polls[experiment] = n
        if campaign.check_capacity(p, ctx, Task(experiment, state="CheckCapacity"))["done"]:
            return
    raise AssertionError(f"CheckCapacity of {experiment} still waiting after {limit} polls (timeouts.capacity_s)")


def failure(world: World, caller: Caller, state: str, experiment: str, exc: Exception) -> Failed:
    """The ASL's failure path after ``state`` of ``experiment`` raised ``exc``: what Lambda reports (errorType, the
    Catch's {Error, Cause}), the first failure recorded as the runtime records it, then TeardownAfterFailure and
    AbortCampaign (each called again while they answer not done, as their Choice/Wait loops do) and ReportFailure."""
    p, ctx = world.providers, world.ctx
    name = type(exc).__name__
    campaign.record_failure(p, state, exc)  # lambdas._runtime.run: before the error leaves the function
    error = {"Error": name, "Cause": json.dumps({"errorMessage": str(exc), "errorType": name})}
    caller.function = "Teardown"
    torn = _until_done(lambda: campaign.experiment_failed(p, ctx, Task(experiment, state="TeardownAfterFailure",
                                                                         error=error), wait_gone=True))
    # ExperimentFailed (Fail: its Error/Cause from the teardown's answer) -> the Map's Catch -> AbortCampaign
    map_error = {"Error": torn["error"], "Cause": torn["cause"]}
    aborted = _until_done(lambda: campaign.abort_campaign(p, ctx, Task(state="AbortCampaign", error=map_error),
                                                          wait_gone=True))
    caller.function = "Report"
    reported = campaign.report_ending(p, ctx, Task(state="ReportFailure", ending="failed"))
    return Failed(state=state, experiment=experiment, error=name, message=str(exc), teardown=torn, abort=aborted,
                  report=reported)


def _until_done(call: Callable[[], dict[str, Any]], attempts: int = 50) -> dict[str, Any]:
    for _ in range(attempts):
        out = call()
        if out["done"]:
            return out
    raise AssertionError(f"still not done after {attempts} calls: {out}")


def _run_experiment(world: World, caller: Caller, exp: Any, plan: Any, handover: bool,
                    fail_steps: tuple[str, ...]) -> None:
    """Deploy to the experiment's teardown (its pools already Ready)."""
    p, ctx, spec = world.providers, world.ctx, world.spec
    e = Task(exp.name)
    caller.function = "Serving"
    campaign.deploy(p, ctx, e)
    assert campaign.check_ready(p, ctx, e)["done"], e
    campaign.smoke(p, ctx, e)
    caller.function = "Load"
    for step_id in (["warmup"] if spec.warmup.request_count else []) + [s.step_id for s in exp.steps]:
        if step_id == "warmup":
            campaign.launch_warmup(p, ctx, e)
            end_runner_step(p, exp.name, step_id, 0)
            campaign.check_warmup(p, ctx, e)
        else:
            if campaign.launch_step(p, ctx, Task(exp.name, step_id)).get("skipped"):
                continue  # a search probe the search did not need: no request, no Job, no argv
            end_runner_step(p, exp.name, step_id, 1 if step_id in fail_steps else 0)
            campaign.check_load(p, ctx, Task(exp.name, step_id))
        rec = p.state.load(exp.name, step_id)
        assert rec is not None and rec.argv is not None
        if step_id != "warmup" and rec.ingest_status is None and step_id not in fail_steps:
            # what ingesting it records (no artifacts here): every request within the SLO up to c=16, none
            # past it, so that a sweep's search probes choose loads and run
            load = rec.concurrency or plan.step(exp.name, step_id).concurrency or 1
            rec.ingest_status, rec.slo = "succeeded", {"n": 100, "good": 100 if load <= 16 else 0}
            p.state.save_load(exp.name, step_id, rec)
        world.argv[(exp.name, step_id)] = list(rec.argv)
    caller.function = "Teardown"
    teardown(p, ctx, e, handover=handover)


def teardown(p: Providers, ctx: Ctx, task: Task, *, handover: bool = False) -> dict[str, Any]:
    """TeardownExperiment as the state machine runs it: called again (after its wait) while what was
    deleted is still going away, the pools restored only once it is gone."""
    for _ in range(50):
        out = campaign.teardown_experiment(p, ctx, task, handover=handover, wait_gone=True)
        if out["done"]:
            return out
    raise AssertionError(f"teardown of {task.exp} still waiting after 50 calls: {out.get('left')}")
