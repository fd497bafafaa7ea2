"""EKS serving, load, smoke and preflight against the fake Kubernetes API; teardown from any state of an
experiment (moto EKS node groups + the fake API) leaves pools at their recorded sizes and none of our
objects behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchctl import campaign
from benchctl.aws_k8s import EksLoad, EksServing, EksSmoke, preflight
from benchctl.campaign import Ctx, Providers, deployment_spec
from benchctl.eks_pools import pools_for
from benchctl.errors import ServingFailed, SmokeTestFailed
from benchctl.k8s.client import KubeClient
from benchctl.k8s.render import LABEL_CAMPAIGN, dgd_name, render_nodepool
from benchctl.lake import LocalLake
from benchctl.plan import plan_campaign
from benchctl.runstore import LocalRunStore
from benchctl.spec import parse_spec
from tests.fakes.k8s_api import FakeKubeApi
from tests.unit.test_eks_pools import CLUSTER, ORIGINAL, OTHER, Aws, aws  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
CID = "smoke-20261130-000000"
NS = "dynamo-bench"


def _spec(provider: str = "managed-nodegroup") -> Any:
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
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


def serving(api: FakeKubeApi, spec: Any = None) -> EksServing:
    return EksServing(kube_of(api), spec or _spec(), CID, sleep=no_sleep, clock=_ticking_clock())


def _ready(generation_lag: int = 0) -> Any:
    def status(obj: dict[str, Any]) -> dict[str, Any]:
        gen = obj["metadata"].get("generation", 1)
        return {"state": "successful", "observedGeneration": gen - generation_lag,
                "conditions": [{"type": "Ready", "status": "True"}]}
    return status


# ------------------------------------------------------------------------------------------- serving


def test_deploy_applies_our_labelled_deployment_and_is_idempotent(api):
    s = serving(api)
    st = s.deploy(deployment_spec(s.spec, CID, "agg"))
    obj = api.stored("DynamoGraphDeployment", st["name"], NS)
    assert obj["metadata"]["labels"][LABEL_CAMPAIGN] == CID
    assert st["url"].startswith(f"http://{dgd_name(CID, 'agg')}-frontend.{NS}.svc")
    assert s.deploy(deployment_spec(s.spec, CID, "agg")) == st  # redelivered: same object, no error


def test_a_foreign_object_with_our_name_is_refused(api):
    s = serving(api)
    api.put({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
             "metadata": {"name": dgd_name(CID, "agg"), "namespace": NS, "labels": {"team": "x"}}, "spec": {}})
    with pytest.raises(ServingFailed, match="is not this campaign's"):
        s.deploy(deployment_spec(s.spec, CID, "agg"))


def test_ready_needs_the_condition_and_the_observed_generation(api):
    s = serving(api)
    api.status_after_gets("DynamoGraphDeployment", 3, _ready())  # readiness that arrives late
    st = s.deploy(deployment_spec(s.spec, CID, "disagg"))
    assert [s.probe_ready(st) for _ in range(3)] == [False, False, True]
    api.set_status("DynamoGraphDeployment", NS, st["name"], _ready(generation_lag=1)(api.stored(
        "DynamoGraphDeployment", st["name"], NS)))
    assert s.probe_ready(st) is False  # Ready, but for an older generation of the spec


def test_a_failed_deployment_fails_the_state(api):
    s = serving(api)
    st = s.deploy(deployment_spec(s.spec, CID, "agg"))
    api.set_status("DynamoGraphDeployment", NS, st["name"], {"state": "failed", "conditions": [
        {"type": "Ready", "status": "False", "reason": "ImagePullBackOff"}]})
    with pytest.raises(ServingFailed, match="ImagePullBackOff"):
        s.probe_ready(st)
    with pytest.raises(ServingFailed, match="failed during the load"):
        s.check_alive(st)


def test_versions_are_the_pods_image_digests(api):
    s = serving(api)
    st = s.deploy(deployment_spec(s.spec, CID, "agg"))
    pod = api.add_pod(NS, "w-0", labels=api.stored("DynamoGraphDeployment", st["name"], NS)["metadata"]["labels"])
    pod["status"]["containerStatuses"] = [{"name": "main", "image": "img:1.6.1", "imageID": "img@sha256:abc"}]
    api.put(pod)
    assert s.versions(st) == {"images": {"img:1.6.1": "img@sha256:abc"}}


def test_teardown_removes_only_this_experiments_objects_and_repeats_harmlessly(api):
    s = serving(api)
    agg = s.deploy(deployment_spec(s.spec, CID, "agg"))
    dis = s.deploy(deployment_spec(s.spec, CID, "disagg"))
    agg_obj = api.stored("DynamoGraphDeployment", agg["name"], NS)
    api.add_pod(NS, "agg-w0", labels=agg_obj["metadata"]["labels"], owner=agg_obj)
    api.set_delete_gets("DynamoGraphDeployment", 2)  # foreground deletion takes a while
    out = s.teardown(agg)  # deletes and returns at once: the state machine polls `remaining`
    assert out == {"jobs": [], "deployments": [agg["name"]]}
    polls = []
    while left := s.remaining(agg):
        polls.append(left)
        assert len(polls) < 10, polls
    assert polls and f"DynamoGraphDeployment/{agg['name']}" in polls[0]  # it was still going away
    assert api.stored("DynamoGraphDeployment", dis["name"], NS) is not None  # the other experiment stays
    again = s.teardown(agg)
    assert again == {"jobs": [], "deployments": []} and s.remaining(agg) == []


# ---------------------------------------------------------------------------------------------- load


def _step_argv(spec: Any, raw: str) -> list[str]:
    from benchctl.aiperf_args import step_args

    step = plan_campaign(spec, "aws").experiments[0].steps[0]
    return step_args(step, model=spec.model.name, tokenizer=spec.model.name, url="http://x:8000", artifact_dir=raw)


def test_load_job_runs_polls_fails_with_logs_and_stops(api):
    spec = _spec()
    load = EksLoad(kube_of(api), spec, CID)
    raw = f"s3://b/lake/raw/campaign_id={CID}/experiment=agg/step_id=concurrency-sweep-c1-r0/"
    st = load.launch(_step_argv(spec, raw), raw, "agg-concurrency-sweep-c1-r0")
    job = api.stored("Job", st["name"], NS)
    assert job["metadata"]["labels"][LABEL_CAMPAIGN] == CID
    assert load.poll(st) is None  # running
    api.add_pod(NS, "p1", labels={"job-name": st["name"]}, owner=job, logs="aiperf: connection refused",
                containers=("aiperf", "upload"))
    api.set_status("Job", NS, st["name"], {"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]})
    assert load.poll(st) == 1
    logs = load.failure_logs(st)
    assert any("connection refused" in v for v in logs.values())
    load.stop(st)
    assert api.stored("Job", st["name"], NS) is None
    load.stop(st)  # again: fine
    assert load.poll(st) == 1  # gone: nothing to wait for
    with pytest.raises(ValueError, match="is not a step's raw area"):
        load.launch(["--x"], "s3://b/elsewhere/", "j")


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
    store = LocalRunStore(tmp_path / "run")
    store.write_json("spec.json", spec.model_dump(mode="json"))
    store.write_json("plan.json", plan_campaign(spec, "aws").to_json())
    now = [1000.0]
    kube = kube_of(api)
    p = Providers(engine="aws", store=store, pools=None, serving=EksServing(kube, spec, CID),  # type: ignore[arg-type]
                  load=EksLoad(kube, spec, CID), lake=LocalLake(tmp_path / "lake"), tokenizer="t",
                  smoke=EksSmoke(kube, spec, CID), clock=lambda: now[0])
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 1, None)
    store.write_json("deployments/agg.json", {"state": {"deployment_id": "agg", "url": "http://f:8000"},
                                              "deployed_at": 0})
    assert campaign.smoke(p, ctx, "agg")["reused"] is False
    assert campaign.smoke(p, ctx, "agg")["reused"] is True  # redelivered: nothing started twice
    assert len(_names(api, "Job", ours=True)) == 1
    assert campaign.check_smoke(p, ctx, "agg") == {"done": False}
    now[0] += spec.timeouts.smoke_s + 1
    with pytest.raises(SmokeTestFailed, match=r"did not finish within timeouts\.smoke_s"):
        campaign.check_smoke(p, ctx, "agg")
    (job,) = _names(api, "Job", ours=True)
    api.set_status("Job", NS, job, {"succeeded": 1})
    assert campaign.check_smoke(p, ctx, "agg") == {"done": True}


# -------------------------------------------------------------------------------------------- preflight


def _prereqs(api: FakeKubeApi, *, skip: str = "") -> None:
    objs = {
        "namespace": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        "crd": {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "dynamographdeployments.nvidia.com"}},
        "secret": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token", "namespace": NS}},
        "pvc": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "model-cache", "namespace": NS}},
    }
    for key, obj in objs.items():
        if key != skip:
            api.put(obj)


def test_preflight_names_each_missing_prerequisite(api, aws):  # noqa: F811
    _prereqs(api, skip="secret")
    problems = preflight(_spec(), kube_of(api), eks=aws.eks, cluster_name=CLUSTER)
    assert problems == ["missing secret dynamo-bench/hf-token (HF token)"]
    spec = parse_spec({**_spec().model_dump(mode="json"), "pools": [{**_spec().pools[0].model_dump(mode="json"),
                                                                    "nodegroup": "nope"}]})
    assert preflight(spec, kube_of(api), eks=aws.eks, cluster_name=CLUSTER)[-1] == (
        "pool gpu-a100: node group 'nope' not found in cluster 'bench'")
    assert preflight(_spec("auto-mode"), kube_of(api))[-1] == "missing CRD nodepools.karpenter.sh (EKS Auto Mode)"
    unreachable = KubeClient("http://127.0.0.1:9", token=lambda: "t", timeout=1)
    assert "not reachable" in preflight(_spec(), unreachable)[0]


# ----------------------------------------------------------------------------- teardown from any state


STATES = ["nothing", "scaling", "deployed_half_ready", "job_running"]


@pytest.mark.parametrize("reached", STATES)
def test_teardown_from_any_state_restores_pools_and_leaves_none_of_our_objects(reached, api, aws, tmp_path):  # noqa: F811
    spec = _spec()
    store = LocalRunStore(tmp_path / "run")
    store.write_json("spec.json", spec.model_dump(mode="json"))
    store.write_json("plan.json", plan_campaign(spec, "aws").to_json())
    kube = kube_of(api)
    p = Providers(engine="aws", store=store,
                  pools=pools_for(spec, CID, cluster_name=CLUSTER, session=aws.session, kube=kube,
                                  render_nodepool=lambda pool, gpus: render_nodepool(spec, CID, pool, gpus)),
                  serving=EksServing(kube, spec, CID, sleep=no_sleep, clock=_ticking_clock()),
                  load=EksLoad(kube, spec, CID), lake=LocalLake(tmp_path / "lake"), tokenizer="t", smoke=None)
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 1, None)
    # a foreign deployment in the same namespace that must survive
    api.put({"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
             "metadata": {"name": "theirs", "namespace": NS, "labels": {"team": "other"}}, "spec": {}})
    if reached != "nothing":
        campaign.scale_pools(p, ctx, "agg")
        assert aws.scaling("gpu-ng") != ORIGINAL
    if reached in ("deployed_half_ready", "job_running"):
        campaign.deploy(p, ctx, "agg")
        api.set_status("DynamoGraphDeployment", NS, dgd_name(CID, "agg"),
                       {"state": "pending", "conditions": [{"type": "Ready", "status": "False"}]})
    if reached == "job_running":
        p.lake = _S3Dirs(p.lake)  # the Job wants the S3 raw URI layout
        campaign.launch_step(p, ctx, "agg", "concurrency-sweep-c1-r0")
        assert _names(api, "Job", ours=True)
    # the state machine's way: come back until the deployment is gone, then the pools are restored
    for _ in range(10):
        if campaign.teardown_experiment(p, ctx, "agg", wait_gone=True)["done"]:
            break
    campaign.teardown_experiment(p, ctx, "agg", wait_gone=True)  # repeated: harmless
    assert aws.scaling("gpu-ng") == ORIGINAL and aws.scaling("other-ng") == OTHER
    ours = [n for kind in ("DynamoGraphDeployment", "Job", "Pod", "NodePool") for n in _names(api, kind, ours=True)]
    assert ours == []
    assert api.stored("DynamoGraphDeployment", "theirs", NS) is not None


def _names(api: FakeKubeApi, kind: str, ours: bool = False) -> list[str]:
    kube = kube_of(api)
    versions = {"DynamoGraphDeployment": "nvidia.com/v1beta1", "Job": "batch/v1", "Pod": "v1", "NodePool": "karpenter.sh/v1"}
    ns = None if kind == "NodePool" else NS
    sel = {LABEL_CAMPAIGN: CID} if ours else None
    return [o["metadata"]["name"] for o in kube.list(versions[kind], kind, ns, sel)]


class _S3Dirs:
    """The local lake, but raw areas named like the S3 lake's (what the Job renderer expects)."""

    def __init__(self, lake: LocalLake) -> None:
        self._lake = lake

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lake, name)

    def raw_dir(self, campaign_id: str, experiment: str, step_id: str) -> str:
        return f"s3://b/lake/raw/campaign_id={campaign_id}/experiment={experiment}/step_id={step_id}/"


def test_auto_mode_teardown_removes_our_nodepool(api, tmp_path):
    spec = _spec("auto-mode")
    store = LocalRunStore(tmp_path / "run")
    store.write_json("spec.json", spec.model_dump(mode="json"))
    store.write_json("plan.json", plan_campaign(spec, "aws").to_json())
    kube = kube_of(api)
    p = Providers(engine="aws", store=store,
                  pools=pools_for(spec, CID, cluster_name=CLUSTER, kube=kube,
                                  render_nodepool=lambda pool, gpus: render_nodepool(spec, CID, pool, gpus)),
                  serving=EksServing(kube, spec, CID, sleep=no_sleep, clock=_ticking_clock()),
                  load=EksLoad(kube, spec, CID), lake=LocalLake(tmp_path / "lake"), tokenizer="t", smoke=None)
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 1, None)
    campaign.scale_pools(p, ctx, "agg")
    assert _names(api, "NodePool", ours=True)
    campaign.teardown_experiment(p, ctx, "agg")
    assert _names(api, "NodePool", ours=True) == []


def test_a_crash_right_after_the_node_group_changed_still_restores_it(api, aws, tmp_path):  # noqa: F811
    # Given ScalePools dies after EKS accepted the change but before its result was recorded
    spec = _spec()
    store = LocalRunStore(tmp_path / "run")
    store.write_json("spec.json", spec.model_dump(mode="json"))
    store.write_json("plan.json", plan_campaign(spec, "aws").to_json())
    kube = kube_of(api)
    p = Providers(engine="aws", store=store, pools=pools_for(spec, CID, cluster_name=CLUSTER, session=aws.session,
                                                             kube=kube),
                  serving=EksServing(kube, spec, CID, sleep=no_sleep, clock=_ticking_clock()),
                  load=EksLoad(kube, spec, CID), lake=LocalLake(tmp_path / "lake"), tokenizer="t", smoke=None)
    ctx = Ctx(CID, str(tmp_path / "run"), str(tmp_path / "lake"), 1, None)

    killed: list[bool] = []

    def die(**_: Any) -> None:
        if not killed:  # only the first change: the process "dies" once
            killed.append(True)
            raise SystemExit("Lambda killed after UpdateNodegroupConfig")

    aws.session.events.register("after-call.eks.UpdateNodegroupConfig", die)
    with pytest.raises(SystemExit):
        campaign.scale_pools(p, ctx, "agg")
    assert aws.scaling("gpu-ng") != ORIGINAL  # the change happened
    # Then a redelivered ScalePools refuses to scale on top of it, and teardown restores the recorded size
    from benchctl.errors import ScaleInterrupted

    with pytest.raises(ScaleInterrupted, match="interrupted mid-change"):
        campaign.scale_pools(p, ctx, "agg")
    campaign.teardown_experiment(p, ctx, "agg")
    assert aws.scaling("gpu-ng") == ORIGINAL


def test_model_prefetch_runs_once_per_campaign_before_the_deployment_and_is_timed_apart(api):
    data = _spec().model_dump(mode="json")
    data["kubernetes"]["prefetch_model"] = True
    s = serving(api, parse_spec(data))
    agg = s.deploy(deployment_spec(s.spec, CID, "agg"))
    dis = s.deploy(deployment_spec(s.spec, CID, "disagg"))  # the same prefetch Job, not a second one
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
    s = serving(api, parse_spec(data))
    st = s.deploy(deployment_spec(s.spec, CID, "agg"))
    job = api.stored("Job", st["prefetch_job"], NS)
    api.add_pod(NS, "pf-0", labels={"job-name": st["prefetch_job"]}, owner=job, logs="401 Unauthorized",
                containers=("prefetch",))
    api.set_status("Job", NS, st["prefetch_job"], {"failed": 1})
    with pytest.raises(ServingFailed, match="401 Unauthorized"):
        s.probe_ready(st)
