"""EKS serving, load, smoke and preflight against the fake Kubernetes API; teardown from any state of an
experiment (moto EKS node groups + the fake API) leaves pools at their recorded sizes and none of our
objects behind. Pods are made as their controllers make them: a Job's from its template (our labels plus
the controller's), a deployment's with ``app.kubernetes.io/managed-by`` overwritten as Grove does."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl import campaign
from benchctl.aws.eks import EksServing, EksSmoke
from benchctl.aws.eks_load import EksLoad
from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.aws.k8s.client import KubeClient
from benchctl.aws.k8s.common import LABEL_CAMPAIGN, LABEL_MANAGED, LABEL_ROLE, dgd_name, job_name, raw_s3_uri
from benchctl.aws.pools import pools_for
from benchctl.aws.preflight import preflight
from benchctl.campaign import Task, deployment_request
from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import LoadRequest
from benchctl.campaign.records import DeploymentRecord
from benchctl.errors import (
    DeadlineExceeded,
    EndRecordForged,
    NotReadyYet,
    ServingFailed,
    SmokeTestFailed,
    SpecError,
)
from benchctl.local.lake import LocalLake
from benchctl.local.runstore import LocalRunStore
from benchctl.planning.plan import plan_campaign
from benchctl.spec.model import parse_spec
from tests import yaml_files
from tests.aws_checks import RBAC_FILE, job_problems
from tests.fakes.eks_world import EFA_DEVICE_PLUGIN, quality_log
from tests.fakes.k8s_api import FakeKubeApi
from tests.fakes.ports import FakeServing, providers_for_test
from tests.unit.test_eks_pools import CLUSTER, ORIGINAL, OTHER, Aws, aws  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
CID = "smoke-20261130-000000"
NS = "dynamo-bench"


def _spec(provider: str = "managed-nodegroup") -> Any:
    data = yaml_files.load(ROOT / "examples" / "smoke.yaml")
    data["pools"][0].update(provider=provider, nodegroup="gpu-ng" if provider == "managed-nodegroup" else None,
                            max_nodes=4)
    data["budget"]["max_hours"] = 5
    return parse_spec(data)


@pytest.fixture
def api():
    with FakeKubeApi() as fake:
        yield fake


def kube_of(api: FakeKubeApi) -> KubeClient:
    return KubeClient(api.url, token=lambda: "test-token")


def no_sleep(_s: float) -> None:
    return None


def _ticking_clock() -> Any:
    t = [0.0]

    def clock() -> float:
        t[0] += 1.0
        return t[0]

    return clock


def serving(api: FakeKubeApi) -> EksServing:
    return EksServing(kube_of(api), CID, sleep=no_sleep, clock=_ticking_clock())


def deploy(s: EksServing, experiment: str, spec: Any = None) -> dict[str, Any]:
    """What Deploy asks of the serving port: the campaign's deployment request, as given."""
    return s.deploy(deployment_request(spec or _spec(), CID, experiment))


def grove_pod(api: FakeKubeApi, dgd: dict[str, Any], component: int, name: str, *, ip: str | None = None,
              phase: str = "Running") -> dict[str, Any]:
    """A worker pod as the operator's Grove pathway creates it: the component's pod template labels, but
    ``app.kubernetes.io/managed-by`` overwritten (FACTS "Dynamo operator")."""
    tmpl = dgd["spec"]["components"][component]["podTemplate"]
    lbl = {**tmpl["metadata"]["labels"], LABEL_MANAGED: "grove-operator"}
    pod = api.add_pod(NS, name, labels=lbl, owner=dgd, phase=phase)
    if ip:
        pod["status"]["podIP"] = ip
        pod = api.put(pod)
    return pod


def _ready(generation_lag: int = 0) -> Any:
    def status(obj: dict[str, Any]) -> dict[str, Any]:
        gen = obj["metadata"].get("generation", 1)
        return {"state": "successful", "observedGeneration": gen - generation_lag,
                "conditions": [{"type": "Ready", "status": "True"}]}
    return status


# ------------------------------------------------------------------------------------------- serving


def test_deploy_applies_our_labelled_deployment_and_is_idempotent(api):
    s = serving(api)
    st = deploy(s, "agg")
    obj = api.stored("DynamoGraphDeployment", st["name"], NS)
    assert obj["metadata"]["labels"][LABEL_CAMPAIGN] == CID
    assert st["url"].startswith(f"http://{dgd_name(CID, 'agg')}-frontend.{NS}.svc")
    assert deploy(s, "agg") == st  # redelivered: same object, no error


def test_a_foreign_object_with_our_name_is_refused(api):
    s = serving(api)
    api.put({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
             "metadata": {"name": dgd_name(CID, "agg"), "namespace": NS, "labels": {"team": "x"}}, "spec": {}})
    with pytest.raises(ServingFailed, match="is not this campaign's"):
        deploy(s, "agg")


def test_ready_needs_the_condition_and_the_observed_generation(api):
    s = serving(api)
    api.status_after_gets("DynamoGraphDeployment", 3, _ready())  # readiness that arrives late
    st = deploy(s, "disagg")
    assert [s.probe_ready(st) for _ in range(3)] == [False, False, True]
    api.set_status("DynamoGraphDeployment", NS, st["name"], _ready(generation_lag=1)(api.stored(
        "DynamoGraphDeployment", st["name"], NS)))
    assert s.probe_ready(st) is False  # Ready, but for an older generation of the spec


def test_a_failed_deployment_fails_the_state(api):
    s = serving(api)
    st = deploy(s, "agg")
    api.set_status("DynamoGraphDeployment", NS, st["name"], {"state": "failed", "conditions": [
        {"type": "Ready", "status": "False", "reason": "ImagePullBackOff"}]})
    with pytest.raises(ServingFailed, match="ImagePullBackOff"):
        s.probe_ready(st)
    with pytest.raises(ServingFailed, match="failed during the load"):
        s.check_alive(st)


def test_versions_are_the_pods_image_digests_found_by_our_labels_though_grove_overwrites_managed_by(api):
    s = serving(api)
    st = deploy(s, "agg")
    pod = grove_pod(api, api.stored("DynamoGraphDeployment", st["name"], NS), 1, "w-0")
    assert pod["metadata"]["labels"][LABEL_MANAGED] != "benchctl"
    pod["status"]["containerStatuses"] = [{"name": "main", "image": "img:1.6.1", "imageID": "img@sha256:abc"}]
    api.put(pod)
    assert s.versions(st) == {"images": {"img:1.6.1": "img@sha256:abc"},  # no engine line logged yet
                              "precision": {"w-0": "not logged: no vLLM engine configuration line in the worker's log"},
                              # no pre-pull pod, the worker on no node yet; the API server's own version
                              "engine_packages": {}, "gpu_drivers": {}, "kubernetes": "v1.31.0-fake"}
    assert all(LABEL_MANAGED not in path for _, path in api.requests)  # never selected by managed-by


def test_versions_read_the_engine_packages_the_prepull_printed_and_the_workers_nodes_drivers(api):
    from benchctl.aws.k8s.nodepool import PREPULL_COMMAND, render_prepull
    from tests.fakes.eks_world import _engine_packages_log, daemonset_controller

    s = serving(api)
    st = deploy(s, "agg")
    daemonset_controller(api)  # the pre-pull pods, their containers' logs what PREPULL_COMMAND prints
    api.add_node("ip-10-0-0-1", {"eks.amazonaws.com/nodegroup": "gpu-ng",
                                 "nvidia.com/cuda.driver-version.full": "580.95.05"})
    api.add_node("ip-10-0-0-9", {"nvidia.com/cuda.driver-version.full": "570.1"})  # nobody of ours on it
    spec = _spec()
    target = deployment_request(spec, CID, "agg").target
    assert target is not None
    for pool in {g.pool for g in target.experiment.workers}:
        ds = render_prepull(target, CID, pool)
        assert ds["spec"]["template"]["spec"]["containers"][0]["command"] == PREPULL_COMMAND
        ds["spec"]["template"]["spec"].pop("affinity", None)
        ds["spec"]["template"]["spec"]["nodeSelector"] = {"eks.amazonaws.com/nodegroup": "gpu-ng"}
        kube_of(api).create(ds)
    pod = grove_pod(api, api.stored("DynamoGraphDeployment", st["name"], NS), 1, "w-0")
    pod["spec"]["nodeName"] = "ip-10-0-0-1"
    api.put(pod)
    got = s.versions(st)
    image = spec.kubernetes.dynamo_image
    printed = json.loads(_engine_packages_log().split(" ", 1)[1])
    assert got["engine_packages"] == {image: printed} and printed["ai-dynamo"]
    assert got["gpu_drivers"] == {"ip-10-0-0-1": "580.95.05"}


# vLLM's engine configuration line as its EngineCore logs it at start-up (vllm/config VllmConfig.__str__; the
# shape of vLLM 0.11's, shortened where it does not matter)
VLLM_CONFIG_LINE = (
    "(EngineCore_DP0 pid=412) INFO 12-01 03:12:07 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
    "model='/models/hf/hub/models--Qwen--Qwen3-30B-A3B-FP8/snapshots/d206ba7', speculative_config=None, "
    "tokenizer='/models/hf/hub/models--Qwen--Qwen3-30B-A3B-FP8/snapshots/d206ba7', skip_tokenizer_init=False, "
    "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
    "max_seq_len=40960, download_dir=None, load_format=auto, tensor_parallel_size=2, pipeline_parallel_size=1, "
    "data_parallel_size=1, disable_custom_all_reduce=False, quantization={q}, quantization_config=None, "
    "enforce_eager=False, kv_cache_dtype={kv}, device_config=cuda, seed=0, "
    "served_model_name=Qwen/Qwen3-30B-A3B-FP8, enable_prefix_caching=True")


def test_versions_record_the_precision_each_workers_vllm_engine_logged_running(api):
    from benchctl.aws.eks import engine_precision
    from benchctl.planning.mocker import MOCKER_PRECISION

    s = serving(api)
    st = deploy(s, "agg")
    dgd = api.stored("DynamoGraphDeployment", st["name"], NS)
    for i, (q, kv) in enumerate((("fp8", "auto"), ("None", "fp8_e4m3"))):
        grove_pod(api, dgd, 1, f"w-{i}")
        api.set_logs(NS, f"w-{i}", "INFO starting\n" + VLLM_CONFIG_LINE.format(q=q, kv=kv) + "\nINFO ready\n", "main")
    assert s.versions(st)["precision"] == {
        "w-0": {"dtype": "torch.bfloat16", "quantization": "fp8", "kv_cache_dtype": "auto"},
        "w-1": {"dtype": "torch.bfloat16", "quantization": None, "kv_cache_dtype": "fp8_e4m3"}}
    # the quantization_config field of newer vLLM and kv_cache_dtype never pass for the fields they contain
    assert engine_precision(VLLM_CONFIG_LINE.format(q="compressed-tensors", kv="auto"))["quantization"] == \
        "compressed-tensors"
    assert engine_precision("INFO Backend UCX was instantiated") is None
    # mocker workers (engine: mocker) compute nothing: said so, no log read
    assert s.versions({**st, "worker_engine": "mocker"})["precision"] == MOCKER_PRECISION
    assert "not applicable, SIMULATED" in MOCKER_PRECISION
    # the local engine's mocker processes: the same words, recorded with the ready event
    from benchctl.lake.timeline import READY
    from benchctl.local.serving import LocalServing

    assert LocalServing(".").versions({}) == {"precision": MOCKER_PRECISION}
    assert "precision" in (READY.details or ())


def test_network_provenance_is_read_from_the_cluster_and_the_workers_logs(api):
    """Issue 15: CNI version and MTU (aws-node), each worker's node, zone and EFA, and the NIXL backend the
    worker's own log says it instantiated (not our configuration)."""
    s = serving(api)
    st = deploy(s, "disagg")
    dgd = api.stored("DynamoGraphDeployment", st["name"], NS)
    api.put({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "aws-node", "namespace": "kube-system"},
             "spec": {"template": {"spec": {"containers": [{
                 "name": "aws-node", "image": "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni:v1.19.2-eksbuild.1",
                 "env": [{"name": "AWS_VPC_ENI_MTU", "value": "9001"}]}]}}}})
    for node, zone in (("n-a", "us-east-1a"), ("n-b", "us-east-1a")):
        api.add_node(node, {"topology.kubernetes.io/zone": zone, "node.kubernetes.io/instance-type": "p4d.24xlarge"},
                     allocatable_gpus=8, allocatable_efa=4)
    for comp, name, node, backend in ((1, "pf-0", "n-a", "LIBFABRIC"), (2, "dc-0", "n-b", "UCX")):
        pod = grove_pod(api, dgd, comp, name, ip="10.0.0.1")
        pod["spec"]["nodeName"] = node
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4", "vpc.amazonaws.com/efa": "2"}}
        api.put(pod)
        api.set_logs(NS, name, f"INFO Initializing NIXL wrapper\nINFO Backend {backend} was instantiated\n", "main")
    net = s.network(st)
    assert net["cni"] == "amazon-vpc-cni v1.19.2-eksbuild.1" and net["mtu"] == 9001
    assert net["zones"] == ["us-east-1a"]
    assert {(p["pod"], p["node"], p["zone"], p["efa"]) for p in net["placement"]} == {
        ("pf-0", "n-a", "us-east-1a", "2"), ("dc-0", "n-b", "us-east-1a", "2")}
    # what the workers report, even when it is not what was asked for (decode fell back to UCX)
    assert net["nixl_backends"] == {"pf-0": ["LIBFABRIC"], "dc-0": ["UCX"]}
    assert net["transfer_backend"] == "LIBFABRIC, UCX"


def test_dcgm_exporters_named_in_the_spec_are_scraped_with_every_step(api):
    data = _spec().model_dump(mode="json")
    data["kubernetes"]["dcgm_exporter_urls"] = ["http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics"]
    s = serving(api)
    st = deploy(s, "agg", parse_spec(data))
    assert s.metrics_urls(st)["dcgm/0"] == "http://nvidia-dcgm-exporter.gpu-operator.svc:9400/metrics"
    with pytest.raises(SpecError, match=r"kubernetes\.dcgm_exporter_urls\[0\]"):
        parse_spec({**data, "kubernetes": {**data["kubernetes"], "dcgm_exporter_urls": ["nvidia-dcgm:9400"]}})


def test_metrics_urls_name_every_running_worker_and_kvbm_endpoint(api):
    # Given a disaggregated deployment with KV offload: KVBM runs on the prefill worker only
    data = _spec().model_dump(mode="json")
    data["experiments"][1]["kv_offload"] = {"cpu_cache_gb": 8}
    s = serving(api)
    st = deploy(s, "disagg", parse_spec(data))
    dgd = api.stored("DynamoGraphDeployment", st["name"], NS)
    roles = [c["podTemplate"]["metadata"]["labels"][LABEL_ROLE] for c in dgd["spec"]["components"]]
    assert roles == ["frontend", "prefill", "decode"]
    grove_pod(api, dgd, 0, "fe-0", ip="10.0.0.9")
    grove_pod(api, dgd, 1, "pf-0", ip="10.0.0.1")
    grove_pod(api, dgd, 2, "dc-0", ip="10.0.0.2")
    grove_pod(api, dgd, 2, "dc-1", ip="10.0.0.3", phase="Pending")  # not running: no endpoint yet
    api.add_pod(NS, "other", labels={LABEL_CAMPAIGN: "another-campaign", LABEL_ROLE: "decode"})
    # Then every worker's system port and the prefill's KVBM exporter are named; the frontend by its Service
    assert s.metrics_urls(st) == {
        "frontend": f"{st['url']}/metrics",
        "prefill/pf-0": "http://10.0.0.1:9090/metrics",
        "kvbm/pf-0": "http://10.0.0.1:6880/metrics",
        "nixl/pf-0": "http://10.0.0.1:19090/metrics",  # disaggregated: NIXL's telemetry exporter
        "decode/dc-0": "http://10.0.0.2:9090/metrics",
        "nixl/dc-0": "http://10.0.0.2:19090/metrics",
    }


def test_teardown_removes_only_this_experiments_objects_and_repeats_harmlessly(api):
    s = serving(api)
    agg = deploy(s, "agg")
    dis = deploy(s, "disagg")
    agg_obj = api.stored("DynamoGraphDeployment", agg["name"], NS)
    api.add_pod(NS, "agg-w0", labels=agg_obj["metadata"]["labels"], owner=agg_obj)
    api.set_delete_gets("DynamoGraphDeployment", 2)  # foreground deletion takes a while
    out = s.teardown(agg)  # deletes and returns at once: the state machine polls `remaining`
    assert out == {"jobs": [], "deployments": [agg["name"]], "prepull": []}
    polls = []
    while left := s.remaining(agg):
        polls.append(left)
        assert len(polls) < 10, polls
    assert polls and f"DynamoGraphDeployment/{agg['name']}" in polls[0]  # it was still going away
    assert api.stored("DynamoGraphDeployment", dis["name"], NS) is not None  # the other experiment stays
    again = s.teardown(agg)
    assert again == {"jobs": [], "deployments": [], "prepull": []} and s.remaining(agg) == []


# ---------------------------------------------------------------------------------------------- load


def _step_argv(spec: Any, raw: str) -> list[str]:
    from benchctl.planning.aiperf_args import step_args

    step = plan_campaign(spec, "aws").experiments[0].steps[0]
    return step_args(step, model=spec.model.name, tokenizer=spec.model.name, url="http://x:8000", artifact_dir=raw)


def _write_end(control: Any, where: str, record: dict[str, Any], key: str | None = None) -> None:
    """An end record as the runner Job writes it: signed with the step's key (LaunchLoad's, unless ``key``)."""
    from benchctl.aws.eks_load import sign_end

    body = json.dumps(record).encode()
    path = control.root / where / "end.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(sign_end(body, key or control.read_json(f"{where}/key.json")["end_key"]))


@pytest.mark.parametrize("forgery", ["unsigned", "another key", "altered", "another step's", "no key"])
def test_an_end_record_its_steps_key_did_not_sign_is_refused_by_name(api, tmp_path, forgery):
    """CheckLoad reads a step's end only when the step's key (LaunchLoad's ``key.json``) signed it: an
    unsigned record, one signed with another key, an altered byte, a record of another step or one with no key
    to check it by fails the step as EndRecordForged naming the key, never as the exit code it claims."""
    from benchctl.aws.eks_load import sign_end

    spec = _spec()
    control = LocalRunStore(tmp_path / "runner")
    load = EksLoad(kube_of(api), spec, CID, control=control, region="us-west-2")
    steps = ("concurrency-sweep-c1-r0", "concurrency-sweep-c4-r0")
    raw = f"s3://b/lake/raw/campaign_id={CID}/experiment=agg/step_id={steps[0]}/"
    state = load.launch(LoadRequest(CID, "agg", steps[0], tuple(_step_argv(spec, raw)), raw, est_s=100.0,
                                    group="concurrency-sweep", group_steps=steps, group_est_s=250.0))
    key = control.read_json(f"agg/{steps[0]}/key.json")["end_key"]
    body = json.dumps({"exit_code": 0, "ended_at": 1, "step": steps[0]}).encode()
    end = control.root / "agg" / steps[0] / "end.json"
    end.write_bytes(sign_end(body, key))
    assert load.poll(state) == 0  # the genuine record
    forged = {"unsigned": body,
              "another key": sign_end(body, "ab" * 32),
              "altered": sign_end(body, key).replace(b'"exit_code": 0', b'"exit_code": 1'),
              "another step's": sign_end(body.replace(steps[0].encode(), steps[1].encode()), key),
              "no key": sign_end(body, key)}[forgery]
    end.write_bytes(forged)
    if forgery == "no key":
        control.delete(f"agg/{steps[0]}/key.json")
    with pytest.raises(EndRecordForged, match=rf"{re.escape(str(end))}: .*{steps[0]}.*"):
        load.poll(state)


def test_one_runner_job_per_workload_takes_each_steps_request_and_reports_its_end(api, tmp_path):
    spec = _spec()
    control = LocalRunStore(tmp_path / "run")
    load = EksLoad(kube_of(api), spec, CID, control=control, region="us-west-2")
    steps = ("concurrency-sweep-c1-r0", "concurrency-sweep-c4-r0")
    raw = {s: f"s3://b/lake/raw/campaign_id={CID}/experiment=agg/step_id={s}/" for s in steps}

    def request(step: str, **kw: Any) -> LoadRequest:
        return LoadRequest(CID, "agg", step, tuple(_step_argv(spec, raw[step])), raw[step], est_s=100.0,
                           group="concurrency-sweep", group_steps=steps, group_est_s=250.0, **kw)

    first = load.launch(request(steps[0]))
    (name,) = _names(api, "Job", ours=True)
    job = api.stored("Job", name, NS)
    assert job["metadata"]["labels"][LABEL_CAMPAIGN] == CID and first["name"] == name
    pod = job["spec"]["template"]["spec"]
    runner, ctl = pod["containers"]
    assert runner["command"][:2] == ["python3", "-c"] and runner["command"][3:] == ["--steps-dir", "/artifacts", *steps]
    assert "def serve_steps(" in runner["command"][2]  # benchctl/load_runner.py itself, in the load image
    env = {e["name"]: e["value"] for e in ctl["env"]}
    assert env["BENCHCTL_STEPS"] == " ".join(steps) and env["AWS_REGION"] == "us-west-2"
    assert env["BENCHCTL_CONTROL"] == f"{control.uri}/agg/"  # the control store is the campaign's runner/<cid>
    assert env["BENCHCTL_RAW_PREFIX"] + steps[0] + "/" == raw[steps[0]]
    # its steps, each with the load grace, and its pod's wait for a node, all counted from the Job's start
    assert job["spec"]["activeDeadlineSeconds"] == int(250 + 2 * spec.timeouts.load_grace_s
                                                       + spec.timeouts.capacity_s + 1800)
    # until its pod runs, nobody answers or heartbeats for it: said, with the scheduler's reason
    assert load.pending(first) == f"Job {name} has no pod yet"
    waiting = api.add_job_pod(job, "p0", phase="Pending")
    waiting["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/3 nodes are available: 3 Insufficient cpu."}]
    api.put(waiting)
    assert load.pending(first) == "pod p0 Pending (unscheduled: 0/3 nodes are available: 3 Insufficient cpu.)"
    assert load.failure_logs(first)["pending"] == load.pending(first)  # a pod that never ran: why, kept
    waiting["status"] = {"phase": "Running"}
    api.put(waiting)
    assert load.pending(first) is None and "pending" not in load.failure_logs(first)
    # the step's request, in the Job's own paths: AIPerf writes to the step's out directory
    req = control.read_json(f"agg/{steps[0]}/request.json")
    assert req is not None and req["deadline_s"] == 100.0 + spec.timeouts.load_grace_s
    key = control.read_json(f"agg/{steps[0]}/key.json")["end_key"]
    assert re.fullmatch(r"[0-9a-f]{64}", key) and key not in json.dumps(req)  # the step's own, not in its request
    assert req["argv"][req["argv"].index("--artifact-dir") + 1] == f"/artifacts/{steps[0]}/out"
    assert load.poll(first) is None  # running: no end record, the Job lives
    # the next step of the workload goes to the same Job: no second Job
    second = load.launch(request(steps[1]))
    assert second["name"] == name and _names(api, "Job", ours=True) == [name]
    assert control.read_json(f"agg/{steps[1]}/key.json")["end_key"] != key  # one key per step
    _write_end(control, f"agg/{steps[0]}", {"exit_code": 0, "ended_at": 1, "step": steps[0]})
    assert load.poll(first) == 0 and load.poll(second) is None
    # the Job died before the second step's end record: that step failed, with the pod's log tail
    api.add_job_pod(job, "p1", logs="[benchctl] step concurrency-sweep-c4-r0: AIPerf exited 1")
    api.set_status("Job", NS, name, {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]})
    assert load.poll(second) == 1
    assert any("AIPerf exited 1" in v for v in load.failure_logs(second).values())
    load.stop(second)
    assert api.stored("Job", name, NS)["metadata"]["deletionTimestamp"]  # held while its pod stops
    load.stop(second)  # again, while it is being deleted: fine
    api.settle()
    assert api.stored("Job", name, NS) is None
    load.stop(second)  # again, gone: fine
    assert load.poll(second) == 1  # gone: nothing to wait for
    with pytest.raises(ValueError, match="campaign 'another' is not"):  # never another campaign's Job
        load.launch(LoadRequest("another", "agg", "s1", ("--x",), raw[steps[0]]))
    with pytest.raises(ValueError, match="artifacts go to an S3 prefix"):
        load.launch(LoadRequest(CID, "agg", "s1", ("--x",), "/tmp/raw"))
    with pytest.raises(ValueError, match="not one of its runner's steps"):
        load.launch(replace(request(steps[0]), group_steps=("other",)))


class _S3RawLake(LocalLake):
    """A local lake whose raw areas are named as the S3 lake names them (the EKS load uploads there)."""

    def raw_uri(self, campaign_id: str, experiment: str, step_id: str) -> str:
        return raw_s3_uri(campaign_id, experiment, step_id, "s3://b/lake")


class _Answering:
    """A callbacks port: somebody answers task tokens (on AWS the runner Job)."""

    def watch(self, token: str, state: str, key: tuple[str, str], wake: Any) -> bool:
        return True


def _load_providers(api: FakeKubeApi, tmp_path: Path, now: list[float]) -> Any:
    spec = _spec()  # with a wait for capacity longer than the warm-up's own bound, as on AWS
    spec = spec.model_copy(update={"timeouts": spec.timeouts.model_copy(update={"capacity_s": 900.0})})
    p = providers_for_test(tmp_path / "run", _S3RawLake(tmp_path / "lake"), spec=spec, engine="aws",
                           serving=FakeServing(), callbacks=_Answering(), clock=lambda: now[0],
                           load=EksLoad(kube_of(api), spec, CID, control=LocalRunStore(tmp_path / "ctl"),
                                        region="us-east-1"))
    p.state.save_deployment("agg", DeploymentRecord(state={"deployment_id": "agg", "url": "http://f:8000"},
                                                    deployed_at=0))
    p.serving.status["agg"] = "running"
    return p, Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 30, None)


def test_a_runner_pod_waiting_for_a_node_is_given_capacity_s_not_the_steps_own_bounds(api, tmp_path):
    """Nobody heartbeats a step's task token before its runner pod runs: LaunchLoad's heartbeat bound for
    AwaitLoadEnd then also covers the wait for a node (timeouts.capacity_s), a polled load (the warm-up)
    waits for its pod within capacity_s (named, with the scheduler's reason, past it), and its own deadline
    counts from when its pod runs."""
    now = [1000.0]
    p, ctx = _load_providers(api, tmp_path, now)
    spec = p.state.spec()
    steps = [s.step_id for s in plan_campaign(spec, "aws").experiments[0].steps]
    first = campaign.launch_step(p, ctx, Task("agg", steps[0]))
    assert first["callback"] is True and first["heartbeat_s"] == 300 + int(spec.timeouts.capacity_s)
    (job_id,) = _names(api, "Job", ours=True)
    job = api.stored("Job", job_id, NS)
    api.add_job_pod(job, "runner", phase="Running")
    second = campaign.launch_step(p, ctx, Task("agg", steps[1]))  # the same workload's runner, running now
    assert second["heartbeat_s"] == 300
    # the warm-up is polled (CheckWarmUp): its pod waits for a node for a while, longer than its own deadline
    campaign.launch_warmup(p, ctx, Task("agg"))
    (warm_id,) = [n for n in _names(api, "Job", ours=True) if n != job_id]
    warm = api.stored("Job", warm_id, NS)
    pod = api.add_job_pod(warm, "warm", phase="Pending")
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "0/2 nodes are available: 2 Insufficient cpu."}]
    api.put(pod)
    rec = p.state.load("agg", "warmup")
    own = (rec.est_s or 0) + spec.timeouts.load_grace_s
    assert own < spec.timeouts.capacity_s
    now[0] += own + 1
    assert campaign.check_warmup(p, ctx, Task("agg")) == {"done": False}  # not its deadline: it never ran
    pod["status"] = {"phase": "Running"}
    api.put(pod)
    assert campaign.check_warmup(p, ctx, Task("agg")) == {"done": False}  # runs now: its deadline starts
    assert p.state.load("agg", "warmup").running_at == now[0]
    now[0] += own + 1
    with pytest.raises(DeadlineExceeded, match="still running after"):
        campaign.check_warmup(p, ctx, Task("agg"))
    # a pod that never gets a node: past capacity_s, named with the scheduler's reason
    now2 = [5000.0]
    with FakeKubeApi() as api2:
        p2, ctx2 = _load_providers(api2, tmp_path / "2", now2)
        campaign.launch_warmup(p2, ctx2, Task("agg"))
        (w,) = _names(api2, "Job", ours=True)
        stuck = api2.add_job_pod(api2.stored("Job", w, NS), "stuck", phase="Pending")
        stuck["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                          "message": "0/2 nodes are available: 2 Insufficient cpu."}]
        api2.put(stuck)
        now2[0] += spec.timeouts.capacity_s + 1
        with pytest.raises(DeadlineExceeded, match=r"not running after .* \(timeouts\.capacity_s\): pod stuck "
                                                   r"Pending \(unscheduled: 0/2 nodes are available"):
            campaign.check_warmup(p2, ctx2, Task("agg"))


def test_stopping_a_failed_steps_load_keeps_its_pods_logs_before_the_job_and_its_pods_go(api, tmp_path):
    """StopLoadAfterFailure deletes the runner Job (its pods go with it): their last log lines are read
    first and kept with the step's record, where the failure path reports them."""
    now = [1000.0]
    p, ctx = _load_providers(api, tmp_path, now)
    step = plan_campaign(p.state.spec(), "aws").experiments[0].steps[0].step_id
    campaign.launch_step(p, ctx, Task("agg", step))
    (job_id,) = _names(api, "Job", ours=True)
    api.add_job_pod(api.stored("Job", job_id, NS), "runner-pod",
                    logs="[benchctl] LoadRunnerDied: the AIPerf runner ended: MemoryError")
    out = campaign.stop_load_after_failure(p, ctx, Task("agg", step, error={"Error": "States.HeartbeatTimeout",
                                                                            "Cause": ""}))
    assert out["error"] == "States.HeartbeatTimeout"
    assert api.stored("Job", job_id, NS)["metadata"].get("deletionTimestamp")  # stopped: being deleted
    api.settle()
    assert api.stored("Job", job_id, NS) is None  # gone once its pods are
    rec = p.state.load("agg", step)
    assert rec.stopped and any("MemoryError" in text for text in (rec.logs or {}).values()), rec.logs


def test_smoke_job_success_and_failure(api):
    spec = _spec()
    smoke = EksSmoke(kube_of(api), spec, CID)
    state = {"deployment_id": "agg", "url": "http://f:8000"}
    job = smoke.start(state, 3, 8)  # starts the Job and returns: CheckSmoke polls it
    assert job["requests"] == 3 and api.stored("Job", job["name"], NS) is not None
    assert smoke.poll(job) is None
    assert smoke.start(state, 3, 8) == job  # redelivered: the same Job, no second one
    api.set_status("Job", NS, job["name"], {"succeeded": 1})
    assert smoke.poll(job) == 0

    with FakeKubeApi() as api2:
        bad = EksSmoke(kube_of(api2), spec, CID)
        api2.on_create("Job", lambda a, obj: a.set_status("Job", NS, obj["metadata"]["name"], {"failed": 1}))
        bjob = bad.start(state, 3, 8)
        assert bad.poll(bjob) == 1 and isinstance(bad.failure_logs(bjob), dict)


def test_check_smoke_fails_on_a_failed_job_or_its_deadline_and_never_sleeps(api, tmp_path):
    spec = _spec()
    now = [1000.0]
    kube = kube_of(api)
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, engine="aws",
                           serving=EksServing(kube, CID), load=EksLoad(kube, spec, CID, control=LocalRunStore(tmp_path / "ctl"), region="us-east-1"),
                           smoke=EksSmoke(kube, spec, CID), clock=lambda: now[0])
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 30, None)
    p.state.save_deployment("agg", DeploymentRecord(state={"deployment_id": "agg", "url": "http://f:8000"},
                                                    deployed_at=0))
    assert campaign.smoke(p, ctx, Task("agg"))["reused"] is False
    assert campaign.smoke(p, ctx, Task("agg"))["reused"] is True  # redelivered: nothing started twice
    assert len(_names(api, "Job", ours=True)) == 1
    assert campaign.check_smoke(p, ctx, Task("agg")) == {"done": False}
    now[0] += spec.timeouts.smoke_s + 1
    with pytest.raises(SmokeTestFailed, match=r"did not finish within timeouts\.smoke_s"):
        campaign.check_smoke(p, ctx, Task("agg"))
    (job,) = _names(api, "Job", ours=True)
    # the Job's pod logged its quality answers (a model that can count): read back and scored in the core
    job_obj = kube.get("batch/v1", "Job", job, NS)
    api.add_job_pod(job_obj, f"{job}-pod", phase="Succeeded", logs="smoke: ok\n" + quality_log(job_obj))
    api.set_status("Job", NS, job, {"succeeded": 1})
    assert campaign.check_smoke(p, ctx, Task("agg")) == {"done": True}
    assert p.state.smoke("agg").result["quality"] == {
        "questions": 20, "correct": 20, "score": 1.0, "min_score": 0.9, "simulated": False, "gate": "passed",
        "score_low": pytest.approx(0.8389, abs=1e-4), "score_high": 1.0}  # the score's 95 % Wilson interval


# -------------------------------------------------------------------------------------------- preflight


PREREQS = {
    "namespace": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    "crd": {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "dynamographdeployments.nvidia.com"}},
    "secret": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": NS},
               "data": {"HF_TOKEN": "aGZfeHl6"}},
    "pvc": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache", "namespace": NS},
            "spec": {"accessModes": ["ReadWriteMany"]}},
    "nodepool-crd": {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                     "metadata": {"name": "nodepools.karpenter.sh"}},
    "nodeclass": {"apiVersion": "eks.amazonaws.com/v1", "kind": "NodeClass", "metadata": {"name": "default"}},
    "efa-plugin": EFA_DEVICE_PLUGIN,  # the smoke spec's p4d pool asks for EFA
}


def _prereqs(api: FakeKubeApi, *, skip: str = "") -> None:
    for key, obj in PREREQS.items():
        if key != skip:
            api.put(obj)


def _with_image(spec: Any, image: str = "reg.example/benchctl-load:abc") -> Any:
    data = spec.model_dump(mode="json")
    data["kubernetes"]["aiperf_image"] = image
    return parse_spec(data)


@pytest.mark.parametrize(("skip", "problem"), [
    ("namespace", "missing namespace 'dynamo-bench'"),
    ("crd", "missing CRD dynamographdeployments.nvidia.com (install the dynamo-platform chart)"),
    ("secret", "missing secret dynamo-bench/hf-token (HF token)"),
    ("pvc", "missing volume claim dynamo-bench/model-cache (model cache)"),
])
def test_preflight_names_each_missing_prerequisite(api, aws, skip, problem):  # noqa: F811
    _prereqs(api, skip=skip)
    assert preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID) == [problem]
    assert not api.bodies  # nothing created while a prerequisite is missing


def test_preflight_checks_the_secret_key_the_volume_mode_node_groups_and_auto_mode(api, aws):  # noqa: F811
    _prereqs(api)
    api.put({**PREREQS["secret"], "data": {"token": "eA=="}})
    api.put({**PREREQS["pvc"], "spec": {"accessModes": ["ReadWriteOnce"]}})
    assert preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER) == [
        "secret dynamo-bench/hf-token has no key 'HF_TOKEN' (keys: ['token']); the model prefetch reads the token "
        "from it",
        "volume claim dynamo-bench/model-cache is ['ReadWriteOnce'], not ReadWriteMany: the workers of one "
        "experiment run on several nodes at once and all mount it"]
    _prereqs(api)
    spec = parse_spec({**_spec().model_dump(mode="json"), "pools": [{**_spec().pools[0].model_dump(mode="json"),
                                                                    "nodegroup": "nope"}]})
    assert preflight(spec, kube_of(api), eks=aws.eks, cluster_name=CLUSTER) == [
        "pool gpu-a100: node group 'nope' not found in cluster 'bench'"]
    for skip, problem in (("nodepool-crd", "missing CRD nodepools.karpenter.sh (EKS Auto Mode)"),
                          ("nodeclass", "missing NodeClass 'default' (EKS Auto Mode, kubernetes.node_class; our "
                                        "NodePools launch nodes of it)")):
        with FakeKubeApi() as other:
            _prereqs(other, skip=skip)
            assert preflight(_spec("auto-mode"), kube_of(other)) == [problem]
    unreachable = KubeClient("http://127.0.0.1:9", token=lambda: "t", timeout=1)
    assert "not reachable" in preflight(_spec(), unreachable)[0]


def test_preflight_names_a_missing_efa_device_plugin_and_nodes_without_efa(api, aws):  # noqa: F811
    """Issue 15: a pool that asks for EFA (the smoke spec's p4d: network.efa) needs AWS's EFA device plugin."""
    _prereqs(api, skip="efa-plugin")
    (problem,) = preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID)
    assert problem.startswith("pools gpu-a100 ask for EFA (network.efa) but the EFA device plugin is missing: no "
                              "DaemonSet in kube-system runs the aws-efa-k8s-device-plugin image")
    assert "helm install aws-efa-k8s-device-plugin eks/aws-efa-k8s-device-plugin -n kube-system" in problem
    assert not api.bodies  # nothing created while it is missing
    # an unrelated DaemonSet is not the plugin; found by its image whatever the release is called
    api.put({**EFA_DEVICE_PLUGIN, "metadata": {"name": "aws-node", "namespace": "kube-system"},
             "spec": {"template": {"spec": {"containers": [{"name": "aws-node", "image": "amazon-k8s-cni:v1.19.2"}]}}}})
    assert len(preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER)) == 1
    api.put(EFA_DEVICE_PLUGIN)
    assert preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER) == []
    # installed, but a node of the pool advertises no EFA: named
    api.add_node("g1", {"eks.amazonaws.com/nodegroup": "gpu-ng", "nvidia.com/cuda.driver-version.major": "580"},
                 allocatable_gpus=8)
    (problem,) = preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER)
    assert problem.startswith("pool gpu-a100: node g1 advertises no vpc.amazonaws.com/efa although pool gpu-a100 "
                              "asks for EFA")
    # a spec without EFA does not look for the plugin
    no_efa = parse_spec({**_spec().model_dump(mode="json"), "pools": [
        {**_spec().pools[0].model_dump(mode="json"), "network": {"efa": False, "nixl_backend": "UCX"}}]})
    with FakeKubeApi() as other:
        _prereqs(other, skip="efa-plugin")
        assert preflight(no_efa, kube_of(other), eks=aws.eks, cluster_name=CLUSTER) == []


def test_preflight_accepts_auto_mode_efa_pools_whose_device_plugin_is_built_in(api, aws):  # noqa: F811
    """EKS Auto Mode runs the NVIDIA and EFA device plugins itself, not as DaemonSets (EKS user guide, "Deploy an
    accelerated workload"): an Auto Mode pool that asks for EFA is not refused for a missing DaemonSet."""
    _prereqs(api, skip="efa-plugin")
    auto = _spec("auto-mode")
    assert auto.pools[0].network.efa
    assert preflight(auto, kube_of(api), eks=aws.eks, cluster_name=CLUSTER) == []
    assert preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER)[0].startswith(
        "pools gpu-a100 ask for EFA")  # a node group still needs the plugin


def _affinity_admits(pod: dict[str, Any], node_labels: dict[str, str]) -> bool:
    """requiredDuringSchedulingIgnoredDuringExecution as the scheduler reads it: any term whose expressions all
    hold (In/NotIn/Exists/DoesNotExist; NotIn and DoesNotExist hold for a node without the label)."""
    ops = {"In": lambda k, v: k in node_labels and node_labels[k] in v,
           "NotIn": lambda k, v: k not in node_labels or node_labels[k] not in v,
           "Exists": lambda k, v: k in node_labels, "DoesNotExist": lambda k, v: k not in node_labels}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return any(all(ops[e["operator"]](e["key"], e.get("values", [])) for e in t["matchExpressions"]) for t in terms)


def test_the_aiperf_check_asks_a_load_runners_size_on_a_cpu_node():
    """The preflight proves that a load runner fits: the AIPerf check's container asks what a runner Job's pod
    asks in all (its AIPerf container, kubernetes.load_cpu/load_memory, and its control container), and may
    run only where no GPU pool is."""
    from benchctl.aws.k8s.preflight_jobs import render_preflight_job
    from benchctl.aws.k8s.render import render_campaign

    spec = _with_image(_spec())
    runner = next(o for path, o in render_campaign(spec, CID) if "/jobs/" in path)
    asked = {c["name"]: c["resources"]["requests"] for c in runner["spec"]["template"]["spec"]["containers"]}
    assert asked == {"aiperf": {"cpu": "8", "memory": "16Gi"}, "control": {"cpu": "250m", "memory": "512Mi"}}
    pod = render_preflight_job(spec, CID, "aiperf")["spec"]["template"]["spec"]
    (check,) = pod["containers"]
    whole = {"cpu": "8250m", "memory": "16896Mi"}  # 8 + 0.25 CPUs, 16 GiB + 512 MiB
    assert check["resources"] == {"limits": whole, "requests": whole}
    assert _affinity_admits(pod, {"kubernetes.io/hostname": "cpu-1"})
    assert _affinity_admits(pod, {"eks.amazonaws.com/nodegroup": "system"})
    assert not _affinity_admits(pod, {"eks.amazonaws.com/nodegroup": "gpu-ng"})  # the spec's GPU pool
    assert not _affinity_admits(pod, {"nvidia.com/gpu.present": "true"})
    assert job_problems(render_preflight_job(spec, CID, "aiperf")) == []  # still a valid Job


def test_an_image_check_that_is_not_scheduled_is_named_while_it_waits(api, aws):  # noqa: F811
    _prereqs(api)
    spec = _with_image(_spec())
    kube = kube_of(api)
    with pytest.raises(NotReadyYet):
        preflight(spec, kube, eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID)
    job = next(b for m, _, b in api.bodies if m == "POST" and b["spec"]["template"]["spec"]["containers"][0]["name"]
               == "aiperf")
    pod = api.add_job_pod(api.stored("Job", job["metadata"]["name"], NS), "pf-a", phase="Pending")
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": "0/3 nodes are available: 3 Insufficient cpu."}]
    api.put(pod)
    with pytest.raises(NotReadyYet, match=r"aiperf \(reg.example/benchctl-load:abc\) not scheduled yet: "
                                          r"Unschedulable: 0/3 nodes are available: 3 Insufficient cpu\."):
        preflight(spec, kube, eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID)
    api.set_status("Job", NS, job["metadata"]["name"], {"failed": 1})  # its deadline passed
    for other in api.bodies:
        if other[2].get("kind") == "Job" and other[2]["metadata"]["name"] != job["metadata"]["name"]:
            api.set_status("Job", NS, other[2]["metadata"]["name"], {"succeeded": 1})
    (problem,) = preflight(spec, kube, eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID)
    assert "it asks a load runner's 8 CPU and 16Gi of memory, kubernetes.load_cpu/load_memory, on a CPU node" in problem


def test_preflight_refuses_gpu_nodes_with_a_driver_older_than_the_dynamo_image_needs(api, aws):  # noqa: F811
    _prereqs(api)
    api.add_node("g1", {"eks.amazonaws.com/nodegroup": "gpu-ng", "nvidia.com/cuda.driver-version.major": "570"},
                 allocatable_gpus=8, allocatable_efa=4)
    api.add_node("g2", {"eks.amazonaws.com/nodegroup": "gpu-ng", "nvidia.com/cuda.driver-version.major": "580"},
                 allocatable_gpus=8, allocatable_efa=4)
    api.add_node("x1", {"eks.amazonaws.com/nodegroup": "other-ng", "nvidia.com/cuda.driver.major": "535"})
    problems = preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER)
    assert problems == [f"pool gpu-a100: node g1 (driver 570): the Dynamo image {_spec().kubernetes.dynamo_image} "
                        "needs NVIDIA driver 580 or newer (kubernetes.min_gpu_driver); use a newer GPU AMI"]
    # Auto Mode: nodes of the pool's instance type that exist already (the same NodeClass AMI) are judged
    with FakeKubeApi() as other:
        _prereqs(other)
        other.add_node("a1", {"node.kubernetes.io/instance-type": "p4d.24xlarge", "nvidia.com/cuda.driver.major": "575"},
                       allocatable_efa=4)
        assert preflight(_spec("auto-mode"), kube_of(other))[0].startswith("pool gpu-a100: node a1 (driver 575)")


def test_preflight_proves_each_image_with_a_short_cpu_job_before_anything_is_scaled(api, aws):  # noqa: F811
    # Given every prerequisite, and the deployment's load image (the stack's, holding aiperf 0.13.0)
    _prereqs(api)
    spec = _with_image(_spec())
    kube = kube_of(api)
    # When Plan's preflight runs: one Job per image is created and Plan is told to come back
    with pytest.raises(NotReadyYet, match=r"image checks still running: aiperf .*uploader"):
        preflight(spec, kube, eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID)
    jobs = {b["spec"]["template"]["spec"]["containers"][0]["name"]: b for m, _, b in api.bodies if m == "POST"}
    assert set(jobs) == {"aiperf", "uploader"}
    for job in jobs.values():
        pod = job["spec"]["template"]["spec"]
        assert "tolerations" not in pod and "nodeSelector" not in pod  # a CPU node, never a GPU one
        assert pod["serviceAccountName"] == CID and pod["automountServiceAccountToken"] is False  # the campaign's own
        assert job["spec"]["activeDeadlineSeconds"] <= 600
    assert jobs["aiperf"]["spec"]["template"]["spec"]["containers"][0]["image"] == "reg.example/benchctl-load:abc"
    assert "aiperf --version" in jobs["aiperf"]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert jobs["uploader"]["spec"]["template"]["spec"]["containers"][0]["image"] == spec.kubernetes.uploader_image
    # a retried Plan follows the same Jobs (no second pair)
    with pytest.raises(NotReadyYet):
        preflight(spec, kube, eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID)
    assert len(_names(api, "Job", ours=True)) == 2
    # Then both succeed: no problem, and the Jobs are removed
    for job in jobs.values():
        api.set_status("Job", NS, job["metadata"]["name"], {"succeeded": 1})
    assert preflight(spec, kube, eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID) == []
    assert _names(api, "Job", ours=True) == []


def test_the_shipped_load_image_is_proven_to_hold_aiperf_0_13_0():
    # the preflight's aiperf check passes only for the version benchctl's arguments are written for ...
    from benchctl.aws.k8s.preflight_jobs import render_preflight_job
    from benchctl.planning.aiperf_args import AIPERF_VERSION

    job = render_preflight_job(_with_image(_spec()), CID, "aiperf")
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert AIPERF_VERSION == "0.13.0" and 'case "$v" in *"0.13.0"*) ;;' in script
    # ... and the default load image, built by the control-plane stack, pins exactly that version
    dockerfile = (ROOT / "stacks" / "images" / "load" / "Dockerfile").read_text()
    assert f"ARG AIPERF_VERSION={AIPERF_VERSION}" in dockerfile and 'aiperf==${AIPERF_VERSION}' in dockerfile
    assert f"aiperf=={AIPERF_VERSION}" in (ROOT / "requirements-local.txt").read_text()  # what tests parse with


def _run_check(script: str, tmp_path: Any, tools: dict[str, str]) -> Any:
    import os
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, out in tools.items():
        (bin_dir / name).write_text(f"#!{sys.executable}\nimport sys\nprint({out!r})\n")
        (bin_dir / name).chmod(0o755)
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})


@pytest.mark.parametrize(("version", "ok"), [("0.13.0", True), ("0.12.0", False)])
def test_the_aiperf_image_check_fails_on_another_aiperf_version(tmp_path, version, ok, monkeypatch):
    from benchctl.aws.k8s.preflight_jobs import render_preflight_job

    monkeypatch.setenv("BENCHCTL_EGRESS", "{}")  # nothing to reach here (the probe: test_aws_preflight_check.py)

    data = _with_image(_spec()).model_dump(mode="json")
    data["kubernetes"]["prefetch_model"] = True  # the version alone (the tokenizer check: the test below)
    job = render_preflight_job(parse_spec(data), CID, "aiperf")
    res = _run_check(job["spec"]["template"]["spec"]["containers"][0]["command"][2], tmp_path, {"aiperf": version})
    assert (res.returncode == 0) is ok, res.stderr
    assert f"aiperf --version: {version}" in res.stdout



@pytest.mark.parametrize(("version", "code"), [("aws-cli/2.22.0 Python/3.12.6 Linux", 0), ("aws-cli/1.33.0", 3)])
def test_the_uploader_check_needs_aws_cli_v2(tmp_path, version, code):
    from benchctl.aws.k8s.preflight_jobs import PREFLIGHT_CHECKS, render_preflight_job

    job = render_preflight_job(_spec(), CID, "uploader")
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert script.startswith(PREFLIGHT_CHECKS["uploader"])  # the version and identity first (the path: below)
    res = _run_check(PREFLIGHT_CHECKS["uploader"], tmp_path, {"aws": version})
    assert res.returncode == code, res.stderr


@pytest.mark.parametrize("denied", [None, "ListObjectsV2", "PutObject", "PutObjectRaw", "SendTaskFailure", "unreachable"])
def test_the_uploader_check_makes_the_runners_calls_and_names_a_denied_one(tmp_path, denied):
    """After the version and identity, the uploader check makes each call of the runner's path where this
    campaign's runner makes them (a step's inputs listed, a run-store object written and read, the three
    task-token answers; a token naming no task is refused as invalid once IAM allowed the call): exit 6 and
    the call named when one is denied. The real AWS CLI runs it in tests/infra/test_runner_rehearsal.py."""
    import os
    import subprocess
    import sys

    from benchctl.aws.k8s.preflight_jobs import render_preflight_job

    job = render_preflight_job(_spec(), CID, "uploader", run_uri=f"s3://b/runs/{CID}", lake_uri="s3://b/lake",
                               region="eu-west-1")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["BENCHCTL_RAW_PREFIX"] == f"s3://b/lake/raw/campaign_id={CID}/experiment=_preflight/step_id=_preflight/"
    assert env["BENCHCTL_CONTROL"] == f"s3://b/runner/{CID}/_preflight/_preflight/"
    assert env["AWS_REGION"] == "eu-west-1" and env["HOME"] == "/tmp"
    assert job["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001  # as the runner runs
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text(f"""#!{sys.executable}
import sys
args = sys.argv[1:]
op = ("version" if args == ["--version"] else "GetCallerIdentity" if args[0] == "sts"
      else "ListObjectsV2" if "--recursive" in args else ("PutObjectRaw" if "/lake/raw/" in args[-1] else "PutObject")
      if "-" == args[-2] else "GetObject" if args[0] == "s3" else "".join(w.title() for w in args[1].split("-")))
if op == "version":
    print("aws-cli/2.22.0 Python/3.12.6 Linux")
elif {denied!r} == "unreachable" and op.startswith("SendTask"):  # no route to Step Functions from the pod
    print('Could not connect to the endpoint URL: "https://states.eu-west-1.amazonaws.com/"', file=sys.stderr)
    sys.exit(255)
elif op == {denied!r}:
    print(f"An error occurred (AccessDenied) when calling the {{op}} operation: not authorized", file=sys.stderr)
    sys.exit(254)
elif op.startswith("SendTask"):
    print(f"An error occurred (InvalidToken) when calling the {{op}} operation: Invalid token", file=sys.stderr)
    sys.exit(254)
""")
    (bin_dir / "aws").chmod(0o755)
    res = subprocess.run(["sh", "-c", c["command"][2]], capture_output=True, text=True, timeout=30,
                         env={**os.environ, **env, "HOME": str(tmp_path), "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"})
    if denied is None:
        assert res.returncode == 0, res.stderr
        assert "an artifact uploaded" in res.stdout and "task-token answers allowed" in res.stdout
        return
    if denied == "unreachable":  # any answer but a token's refusal is a failure, not a pass
        assert res.returncode == 7, res.stdout + res.stderr
        assert "did not answer" in res.stderr and "Could not connect to the endpoint URL" in res.stderr
        return
    assert res.returncode == 6, res.stdout + res.stderr
    named = {"ListObjectsV2": "fetching a step's inputs", "PutObject": "writing a step's end record",
             "PutObjectRaw": "uploading a step's artifacts",
             "SendTaskFailure": "answering a step's task token (stepfunctions send-task-failure)"}[denied]
    assert named in res.stderr and f"calling the {denied} operation" in res.stderr


def test_a_failed_or_stuck_image_check_is_a_named_problem(api, aws):  # noqa: F811
    _prereqs(api)
    spec = _with_image(_spec(), "reg.example/no-such:1")
    kube = kube_of(api)
    with pytest.raises(NotReadyYet):
        preflight(spec, kube, eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID)
    jobs = {b["spec"]["template"]["spec"]["containers"][0]["name"]: b for m, _, b in api.bodies if m == "POST"}
    # the aiperf image cannot be pulled: named at once, not at the Job's deadline
    api.add_job_pod(api.stored("Job", jobs["aiperf"]["metadata"]["name"], NS), "pf-a", phase="Pending",
                    waiting="ImagePullBackOff")
    # the uploader ran and has no identity
    up = api.stored("Job", jobs["uploader"]["metadata"]["name"], NS)
    api.add_job_pod(up, "pf-u", phase="Failed", logs="aws --version: aws-cli/2.22.0\nUnable to locate credentials")
    api.set_status("Job", NS, up["metadata"]["name"], {"failed": 1})
    problems = preflight(spec, kube, eks=aws.eks, cluster_name=CLUSTER, campaign_id=CID)
    assert problems[0].startswith("image check 'aiperf' failed for reg.example/no-such:1: ImagePullBackOff")
    assert problems[1].startswith(f"image check 'uploader' failed for {spec.kubernetes.uploader_image}: Job ")
    assert "Unable to locate credentials" in problems[1]
    # without a load image at all: named, and nothing is created
    with FakeKubeApi() as other:
        _prereqs(other)
        assert preflight(_spec(), kube_of(other), campaign_id=CID) == [
            "kubernetes.aiperf_image is not set and this deployment has no load image (BENCHCTL_LOAD_IMAGE, set by "
            "the control-plane stack): give an image holding aiperf 0.13.0"]
        assert not other.bodies


# ----------------------------------------------------------------------------- teardown from any state


STATES = ["nothing", "scaling", "deployed_half_ready", "job_running"]


@pytest.mark.parametrize("reached", STATES)
def test_teardown_from_any_state_restores_pools_and_leaves_none_of_our_objects(reached, api, aws, tmp_path):  # noqa: F811
    spec = _spec()
    # what the functions together may do, and no more (each function's own share: tests/integration/test_rbac.py)
    api.enforce_rbac(yaml_files.load_all(RBAC_FILE), groups=set(FUNCTION_GROUPS.values()))
    kube = kube_of(api)
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, engine="aws",
                           pools=pools_for(spec, CID, cluster_name=CLUSTER, session=aws.session, kube=kube),
                           serving=EksServing(kube, CID, sleep=no_sleep, clock=_ticking_clock()),
                           load=EksLoad(kube, spec, CID, control=LocalRunStore(tmp_path / "ctl"), region="us-east-1"))
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 30, None)
    # a foreign deployment in the same namespace that must survive
    api.put({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
             "metadata": {"name": "theirs", "namespace": NS, "labels": {"team": "other"}}, "spec": {}})
    if reached != "nothing":
        campaign.scale_pools(p, ctx, Task("agg"))
        assert aws.scaling("gpu-ng") != ORIGINAL
    if reached in ("deployed_half_ready", "job_running"):
        campaign.deploy(p, ctx, Task("agg"))
        api.set_status("DynamoGraphDeployment", NS, dgd_name(CID, "agg"),
                       {"state": "pending", "conditions": [{"type": "Ready", "status": "False"}]})
    if reached == "job_running":
        p.lake = _S3Dirs(p.lake)  # the Job wants the S3 raw URI layout
        campaign.launch_step(p, ctx, Task("agg", "concurrency-sweep-c1-r0"))
        assert _names(api, "Job", ours=True)
    # the state machine's way: come back until the deployment is gone, then the pools are restored
    calls = 1
    while not campaign.teardown_experiment(p, ctx, Task("agg"), wait_gone=True)["done"]:
        calls += 1
        assert calls < 20
    campaign.teardown_experiment(p, ctx, Task("agg"), wait_gone=True)  # repeated: harmless
    assert aws.scaling("gpu-ng") == ORIGINAL and aws.scaling("other-ng") == OTHER
    # nothing of ours, the image pre-pull ScalePools started included, even when Deploy never ran
    ours = [f"{kind}/{n}" for kind in ("DynamoGraphDeployment", "Job", "Pod", "NodePool", "DaemonSet")
            for n in _names(api, kind, ours=True)]
    assert ours == []
    assert api.denied == []  # the receipt's read-backs included
    assert api.stored("DynamoGraphDeployment", "theirs", NS) is not None
    # the receipt: every object the experiment created, read back through the adapters after teardown
    rows = _receipt(tmp_path / "lake")
    if reached == "nothing":
        assert rows == []
        return
    (ng,) = [r for r in rows if r["kind"] == "node group"]
    assert (ng["name"], ng["state"], ng["now"]) == ("gpu-ng", "restored", ng["recorded"]), ng
    assert ng["recorded"] == ", ".join(f"{k} {v}" for k, v in sorted(ORIGINAL.items())), ng
    assert ng["billing"].startswith("ended by ") or ng["billing"] == "none added", ng
    kinds = {r["kind"] for r in rows if r["state"] == "gone"}
    assert "DaemonSet" in kinds and all(r["state"] in ("gone", "restored") for r in rows), rows
    if reached != "scaling":
        assert "DynamoGraphDeployment" in kinds, rows
    if reached == "job_running":
        assert "Job" in kinds, rows


def _receipt(lake: Any) -> list[dict[str, Any]]:
    from benchctl.lake import timeline

    return [timeline.detail(r) for r in LocalLake(lake).read_table("timeline", CID)
            if timeline.is_event(r, timeline.RECEIPT)]


def _names(api: FakeKubeApi, kind: str, ours: bool = False) -> list[str]:
    kube = kube_of(api)
    versions = {"DynamoGraphDeployment": "nvidia.com/v1beta1", "Job": "batch/v1", "Pod": "v1", "NodePool": "karpenter.sh/v1",
                "DaemonSet": "apps/v1"}
    ns = None if kind == "NodePool" else NS
    sel = {LABEL_CAMPAIGN: CID} if ours else None
    return [o["metadata"]["name"] for o in kube.list(versions[kind], kind, ns, sel)]


class _S3Dirs:
    """The local lake, but raw areas named like the S3 lake's (what the Job renderer expects)."""

    def __init__(self, lake: LocalLake) -> None:
        self._lake = lake

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lake, name)

    def raw_uri(self, campaign_id: str, experiment: str, step_id: str) -> str:
        return f"s3://b/lake/raw/campaign_id={campaign_id}/experiment={experiment}/step_id={step_id}/"


def test_auto_mode_teardown_removes_our_nodepool(api, tmp_path):
    spec = _spec("auto-mode")
    kube = kube_of(api)
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, engine="aws",
                           pools=pools_for(spec, CID, cluster_name=CLUSTER, kube=kube),
                           serving=EksServing(kube, CID, sleep=no_sleep, clock=_ticking_clock()),
                           load=EksLoad(kube, spec, CID, control=LocalRunStore(tmp_path / "ctl"), region="us-east-1"))
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 30, None)
    campaign.scale_pools(p, ctx, Task("agg"))
    assert _names(api, "NodePool", ours=True)
    campaign.teardown_experiment(p, ctx, Task("agg"))
    assert _names(api, "NodePool", ours=True) == []
    (row,) = [r for r in _receipt(tmp_path / "lake") if r["kind"] == "NodePool"]  # read back: gone
    assert row["state"] == "gone" and row["billing"].startswith("ended by "), row


def test_a_crash_right_after_the_node_group_changed_still_restores_it(api, aws, tmp_path):  # noqa: F811
    # Given ScalePools dies after EKS accepted the change but before its result was recorded
    spec = _spec()
    kube = kube_of(api)
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, engine="aws",
                           pools=pools_for(spec, CID, cluster_name=CLUSTER, session=aws.session, kube=kube),
                           serving=EksServing(kube, CID, sleep=no_sleep, clock=_ticking_clock()),
                           load=EksLoad(kube, spec, CID, control=LocalRunStore(tmp_path / "ctl"), region="us-east-1"))
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 30, None)

    killed: list[bool] = []

    def die(**_: Any) -> None:
        if not killed:  # only the first change: the process "dies" once
            killed.append(True)
            raise SystemExit("Lambda killed after UpdateNodegroupConfig")

    aws.session.events.register("after-call.eks.UpdateNodegroupConfig", die)
    with pytest.raises(SystemExit):
        campaign.scale_pools(p, ctx, Task("agg"))
    assert aws.scaling("gpu-ng") != ORIGINAL  # the change happened
    # Then a redelivered ScalePools refuses to scale on top of it, and teardown restores the recorded size
    from benchctl.errors import ScaleInterrupted

    with pytest.raises(ScaleInterrupted, match="interrupted mid-change"):
        campaign.scale_pools(p, ctx, Task("agg"))
    campaign.teardown_experiment(p, ctx, Task("agg"))
    assert aws.scaling("gpu-ng") == ORIGINAL


def test_model_prefetch_runs_once_per_campaign_before_the_deployment_and_is_timed_apart(api):
    data = _spec().model_dump(mode="json")
    data["kubernetes"]["prefetch_model"] = True
    s, spec = serving(api), parse_spec(data)
    agg = deploy(s, "agg", spec)
    dis = deploy(s, "disagg", spec)  # the same prefetch Job, not a second one
    assert agg["prefetch_job"] == dis["prefetch_job"] and len(_names(api, "Job", ours=True)) == 1
    assert api.stored("DynamoGraphDeployment", agg["name"], NS) is None  # not before the model is there
    assert s.probe_ready(agg) is False
    api.set_status("Job", NS, agg["prefetch_job"], {"succeeded": 1, "startTime": "2026-11-30T10:00:00Z",
                                                    "completionTime": "2026-11-30T10:07:30Z"})
    assert s.probe_ready(agg) is False  # the deployment is applied now, not ready yet
    assert api.stored("DynamoGraphDeployment", agg["name"], NS) is not None
    api.set_status("DynamoGraphDeployment", NS, agg["name"], _ready()(api.stored("DynamoGraphDeployment",
                                                                                   agg["name"], NS)))
    assert s.probe_ready(agg) is True
    assert s.versions(agg)["model_prefetch"]["seconds"] == 450.0


def test_a_failed_prefetch_fails_the_deployment_with_its_logs(api):
    data = _spec().model_dump(mode="json")
    data["kubernetes"]["prefetch_model"] = True
    s = serving(api)
    st = deploy(s, "agg", parse_spec(data))
    job = api.stored("Job", st["prefetch_job"], NS)
    api.add_job_pod(job, "pf-0", logs="401 Unauthorized")
    api.set_status("Job", NS, st["prefetch_job"], {"failed": 1})
    with pytest.raises(ServingFailed, match="401 Unauthorized"):
        s.probe_ready(st)


# ------------------------------------------------------------------------------- Plan and its preflight


def test_plan_waits_for_the_image_checks_and_fails_naming_them_before_any_pool_is_scaled(api, tmp_path):
    from benchctl.errors import PreflightFailed
    from tests.fakes import eks_world

    spec = eks_world.example_specs()["auto-mode"]
    eks_world.cluster_prerequisites(api, spec)
    with eks_world.moto_eks(spec) as session:
        p, ctx, _ = eks_world.providers(spec, kube_of(api), tmp_path, session)
        event = Task(state="Plan")  # the spec is in the run state already
        # Given the image checks still running: Plan raises NotReadyYet (its ASL Retry calls it again)
        with pytest.raises(NotReadyYet):
            campaign.plan(p, ctx, event)
        assert not p.state.preflight_done() and not p.state.has_plan()
        # When the load image turns out to hold another AIPerf
        ours = {LABEL_CAMPAIGN: eks_world.CID}
        jobs = {j["metadata"]["name"]: j for j in kube_of(api).list("batch/v1", "Job", NS, ours)}
        assert len(jobs) == 2
        for name, job in jobs.items():
            check = job["spec"]["template"]["spec"]["containers"][0]["name"]
            failed = check == "aiperf"
            api.add_job_pod(job, f"{name}-pod", phase="Failed" if failed else "Succeeded",
                            logs="aiperf --version: 0.12.0\nneed aiperf 0.13.0\n" if failed else "ok")
            api.set_status("Job", NS, name, {"failed": 1} if failed else {"succeeded": 1})
        # Then Plan fails with the named problem, and nothing was scaled or deployed
        with pytest.raises(PreflightFailed, match=r"image check 'aiperf' failed .*need aiperf 0\.13\.0"):
            campaign.plan(p, ctx, event)
        assert not [b for m, _, b in api.bodies if b.get("kind") in ("NodePool", "DynamoGraphDeployment")]
        # the checks' Jobs are removed once judged (still listed while their pods stop)
        assert all(j["metadata"].get("deletionTimestamp") for j in kube_of(api).list("batch/v1", "Job", NS, ours))
        api.settle()
        assert kube_of(api).list("batch/v1", "Job", NS, ours) == []
        # a fixed image passes; the preflight is not repeated once passed (a redelivered Plan)
        api.on_create("Job", lambda a, job: a.set_status("Job", NS, job["metadata"]["name"], {"succeeded": 1}))
        campaign.plan(p, ctx, event)
        assert p.state.preflight_done()
        posts = len(api.bodies)
        campaign.plan(p, ctx, event)
        assert len(api.bodies) == posts


# ------------------------------------------------------------------------- prefetch ahead, task tokens


class _Recorded:
    """A pool port that records when it was asked to scale, against the Jobs the API holds at that moment."""

    def __init__(self, api: FakeKubeApi) -> None:
        self.api, self.jobs_when_scaled, self.daemonsets_when_scaled = api, [], []
        self.provider = "managed-nodegroup"

    def scale(self, pool, nodes, owner, *, before_change=None):
        self.jobs_when_scaled.append(sorted(_names(self.api, "Job", ours=True)))
        self.daemonsets_when_scaled.append(sorted(_names(self.api, "DaemonSet", ours=True)))
        rec = {"pool": pool, "nodes": nodes, "previous": {"desired": 0}}
        if before_change:
            before_change(rec)
        return rec


@pytest.mark.parametrize("prefetch", [True, False])
def test_scale_pools_starts_the_image_prepull_and_model_prefetch_before_any_gpu_pool(api, tmp_path, prefetch):
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    data["pools"][0].update(provider="managed-nodegroup", nodegroup="gpu-ng")
    data.setdefault("kubernetes", {})["prefetch_model"] = prefetch
    spec = parse_spec(data)
    kube = kube_of(api)
    pools = _Recorded(api)
    p = providers_for_test(tmp_path / "run", LocalLake(tmp_path / "lake"), spec=spec, engine="aws", pools=pools,
                           serving=EksServing(kube, CID, sleep=no_sleep))
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 30, None)
    for exp in ("agg", "disagg"):
        campaign.scale_pools(p, ctx, Task(exp))
    prefetch_jobs = [n for n in _names(api, "Job", ours=True) if "prefetch" in n]
    assert len(prefetch_jobs) == (1 if prefetch else 0)  # once per campaign, whichever experiment comes first
    assert pools.jobs_when_scaled[0] == prefetch_jobs  # there before the first pool was asked to scale
    # each experiment's pre-pull DaemonSet on its pool exists before that pool is asked to scale
    assert pools.daemonsets_when_scaled == [[job_name(CID, "agg", "prepull-gpu-a100")],
                                            sorted(job_name(CID, e, "prepull-gpu-a100") for e in ("agg", "disagg"))]


class _Sfn:
    class exceptions:
        class InvalidToken(Exception):
            pass

        class TaskTimedOut(Exception):
            pass

        class TaskDoesNotExist(Exception):
            pass

    def __init__(self) -> None:
        self.answered: list[tuple[str, str]] = []

    def send_task_success(self, taskToken: str, output: str) -> None:
        if any(t == taskToken for t, _ in self.answered):
            raise self.exceptions.TaskTimedOut("Task Timed Out: already answered")
        self.answered.append((taskToken, output))


def test_aws_callbacks_keep_the_token_for_the_runner_and_answer_at_once_only_when_the_end_is_in(tmp_path):
    from benchctl.aws.callbacks import RunnerCallbacks
    from benchctl.local.runstore import LocalRunStore

    store, sfn = LocalRunStore(tmp_path / "run"), _Sfn()
    cb = RunnerCallbacks(store, lambda: sfn)
    # the step still runs: the token is kept where the runner Job reads it, nothing is answered here
    assert cb.watch("tok-1", "AwaitLoadEnd", ("agg", "s1"), lambda: None) is True
    assert store.read_json("agg/s1/token.json") == {"token": "tok-1", "state": "AwaitLoadEnd"}
    assert sfn.answered == []
    assert cb.watch("tok-1", "AwaitLoadEnd", ("agg", "s1"), lambda: None) is False  # a redelivered event
    # the step ended before its token was kept (the runner found no token): answered here, at once
    assert cb.watch("tok-2", "AwaitLoadEnd", ("agg", "s2"), lambda: "load ended") is True
    assert [(t, json.loads(o)) for t, o in sfn.answered] == [("tok-2", {"woken": "load ended"})]
    # a wake check that raises (the serving side died) wakes too; CheckLoad raises it again, named
    def dead() -> str | None:
        raise ServingFailed("worker 1 exited")

    cb.watch("tok-3", "AwaitLoadEnd", ("agg", "s3"), dead)
    assert json.loads(sfn.answered[-1][1]) == {"woken": "ServingFailed: worker 1 exited"}
    # the runner answered the same token first: Step Functions refuses the second answer, which is ignored
    assert cb.answer("tok-2", "load ended") is False


def test_a_search_probe_runs_in_a_runner_job_of_its_own_and_a_skipped_one_makes_none(api, tmp_path):
    """On EKS a workload's runner Job serves its fixed steps in order; a probe (whose load is chosen at its launch,
    and which may not run at all) gets a Job of its own, so the workload's runner never waits for a probe that
    is skipped, and a skipped probe creates nothing."""
    from benchctl.campaign.records import LoadRecord

    now = [1000.0]
    p, ctx = _load_providers(api, tmp_path, now)
    kube = kube_of(api)

    def job_steps() -> dict[str, list[str]]:
        out = {}
        for name in _names(api, "Job", ours=True):
            args = kube.get("batch/v1", "Job", name, NS)["spec"]["template"]["spec"]["containers"]
            flat = [a for c in args for a in (c.get("command") or []) + (c.get("args") or [])]
            out[name] = [a for a in flat if a.startswith("concurrency-sweep-")]
        return out

    campaign.launch_step(p, ctx, Task("agg", "concurrency-sweep-c1-r0"))
    (workload_job,) = job_steps().values()
    assert workload_job == ["concurrency-sweep-c1-r0", "concurrency-sweep-c4-r0", "concurrency-sweep-c16-r0"]
    for c, good in ((1, 200), (4, 200), (16, 0)):  # the fixed loads ended and ingested: within up to 4, past at 16
        p.state.save_load("agg", f"concurrency-sweep-c{c}-r0", LoadRecord(
            state={}, launched_at=0.0, ended=True, exit_code=0, ingest_status="succeeded", slo={"good": good, "n": 200}))
    out = campaign.launch_step(p, ctx, Task("agg", "concurrency-sweep-s1-r0"))
    assert not out.get("skipped")
    probe_jobs = {n: s for n, s in job_steps().items() if s != workload_job}
    assert list(probe_jobs.values()) == [["concurrency-sweep-s1-r0"]]
    req = json.loads((tmp_path / "ctl" / "agg" / "concurrency-sweep-s1-r0" / "request.json").read_text())
    assert req["argv"][req["argv"].index("--concurrency") + 1] == "8"  # bisecting [4, 16)
    # the probe ran at 8 and 7 (within at 7, past at 8): located, so the next probe runs nothing
    p.state.save_load("agg", "concurrency-sweep-s1-r0", LoadRecord(
        state={}, launched_at=0.0, ended=True, exit_code=0, ingest_status="succeeded", slo={"good": 0, "n": 200},
        concurrency=8))
    p.state.save_load("agg", "concurrency-sweep-s2-r0", LoadRecord(
        state={}, launched_at=0.0, ended=True, exit_code=0, ingest_status="succeeded", slo={"good": 200, "n": 200},
        concurrency=7))
    before = set(job_steps())
    out = campaign.launch_step(p, ctx, Task("agg", "concurrency-sweep-s3-r0"))
    assert out["skipped"] and out["job"] is None and set(job_steps()) == before
