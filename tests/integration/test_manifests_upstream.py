"""What the AWS code path sends, held to the other side's own definitions.

Every example spec (examples/*.yaml; those written for the local engine once as managed node groups and
once on EKS Auto Mode) runs as a whole campaign through the AWS engine's adapters against the fake
Kubernetes API (tests/fakes/eks_world.py). The fake validates like an API server with
``fieldValidation=Strict``, which the client sends: DynamoGraphDeployments and NodePools against the
vendored upstream CRD schemas (tests/data/crds/, unknown fields are errors), Jobs against Kubernetes' own
OpenAPI schema (``kubernetes-validate``, strict). Every object created or replaced is captured and checked
again here, with the CEL rules that concern the fields benchctl sets. The AIPerf command line of every
step kind of every example, warm-up included, is parsed by AIPerf 0.13.0's own CLI (cyclopts) and turned
into AIPerf's benchmark plan, without running a benchmark.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest

from benchctl.aws.k8s.common import (
    KVBM_METRICS_PORT,
    LABEL_ROLE,
    WORKER_SYSTEM_PORT,
    nodepool_name,
)
from benchctl.aws.k8s.efa import NIXL_TELEMETRY_PORT
from benchctl.planning.aiperf_args import AIPERF_VERSION
from benchctl.planning.plan import plan_campaign
from tests import crd_schemas, yaml_files
from tests.aws_checks import job_problems
from tests.fakes import eks_world
from tests.fakes.eks_world import CID, World, example_specs

SPECS = example_specs()


@pytest.fixture(scope="module")
def worlds(aws_worlds: dict[str, World]) -> dict[str, World]:
    return aws_worlds


def sent(world: World, kind: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m, path, body) for m, path, body in world.api.bodies if body.get("kind") == kind]


def test_every_example_is_covered_including_an_auto_mode_spec() -> None:
    stems = {p.stem for p in eks_world.EXAMPLES.glob("*.yaml")}
    local_only = {p.stem for p in eks_world.EXAMPLES.glob("*.yaml") if eks_world.local_only(yaml_files.load(p))}
    assert local_only == {"engine-cpu"}  # the CPU engine's example: nothing of it is sent to a cluster
    assert stems - local_only == {n.split("[")[0] for n in SPECS} and len(stems) >= 4
    assert any(p.provider == "auto-mode" for n, s in SPECS.items() if "[" not in n for p in s.pools)


def test_the_vendored_schemas_are_the_recorded_upstream_copies() -> None:
    readme = (crd_schemas.DATA / "README.md").read_text()
    for kind, file in crd_schemas.FILES.items():
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{file}`"))
        assert f"`{crd_schemas.sha256(kind)}`" in row, f"{file} differs from the copy README.md records"
        upstream = {"DynamoGraphDeployment": "ai-dynamo/dynamo", "NodePool": "karpenter-provider-aws",
                    "PodMonitor": "prometheus-community/helm-charts", "ServiceMonitor": "the same chart and tag"}
        assert upstream[kind] in row


# ------------------------------------------------------------------------------------ CRD objects


def _cel_dgd(dgd: dict[str, Any]) -> list[str]:
    """The DGD CEL rules (x-kubernetes-validations) that concern what benchctl renders."""
    comps = dgd["spec"]["components"]
    names = [c["name"].lower() for c in comps]
    out = [] if len(set(names)) == len(names) else ["component names must be unique case-insensitively"]
    out += [] if sum(c.get("type") == "epp" for c in comps) <= 1 else ["at most one component may have type epp"]
    out += ["spec.restart must be unset on create" for _ in [1] if "restart" in dgd["spec"]]
    return out + _webhook_names(dgd)


def _webhook_names(dgd: dict[str, Any]) -> list[str]:
    """Dynamo's admission webhook on the Grove pathway (ai-dynamo/dynamo deploy/operator/internal/webhook/
    validation: dgdComponentResourceNameLength, maxCombinedResourceNameLength = 45): for a single-node component,
    len(DGD name) + len(lowercased component name) may not exceed 45 (written here from the Go source, not from
    benchctl.spec.names)."""
    name = dgd["metadata"]["name"]
    return [f"component {c['name']}: combined resource name length {len(name) + len(c['name'])} exceeds 45"
            for c in dgd["spec"]["components"] if len(name) + len(c["name"].lower()) > 45]


_RESTRICTED_DOMAINS = ("karpenter.sh", "karpenter.k8s.aws", "kubernetes.io/hostname")


def _cel_nodepool(pool: dict[str, Any]) -> list[str]:
    """The NodePool CEL rules (x-kubernetes-validations) that concern what benchctl renders."""
    spec, tmpl = pool["spec"], pool["spec"]["template"]
    out = []
    for key in tmpl.get("metadata", {}).get("labels", {}):
        if key.split("/")[0].endswith(_RESTRICTED_DOMAINS[:2]) or key == _RESTRICTED_DOMAINS[2]:
            out.append(f"template label {key}: restricted domain")
    ref = tmpl["spec"]["nodeClassRef"]
    out += [f"nodeClassRef.{k} may not be empty" for k in ("group", "kind", "name") if not ref.get(k)]
    for req in tmpl["spec"]["requirements"]:
        if req["operator"] == "In" and not req.get("values"):
            out.append(f"requirement {req['key']}: 'In' needs values")
        if req["key"] in ("karpenter.sh/nodepool", "kubernetes.io/hostname"):
            out.append(f"requirement {req['key']}: restricted")
    if "replicas" in spec and set(spec.get("limits") or {}) - {"nodes"}:
        out.append("only 'limits.nodes' is supported on static NodePools")
    return out


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_deployment_and_nodepool_sent_validates_strictly_against_the_upstream_crds(
        worlds: dict[str, World], name: str) -> None:
    world = worlds[name]
    dgds, pools = sent(world, "DynamoGraphDeployment"), sent(world, "NodePool")
    # one DGD per deployment of each experiment (design.deployments), each with its own name
    assert len({b["metadata"]["name"] for _, _, b in dgds}) == len(world.spec.experiments) * world.spec.design.deployments
    auto = [p for p in world.spec.pools if p.provider == "auto-mode"]
    assert bool(pools) == bool(auto)
    for method, path, body in dgds + pools:
        assert "fieldValidation=Strict" in path, (method, path)
        assert crd_schemas.problems(body) == [], (method, body["metadata"]["name"])
        assert (_cel_dgd if body["kind"] == "DynamoGraphDeployment" else _cel_nodepool)(body) == []
    assert not world.api.denied
    # objects and pods are selected by our labels only: never by managed-by, which Grove overwrites
    selectors = [path for _, path in world.api.requests if "labelSelector=" in path]
    assert selectors and not [p for p in selectors if "managed-by" in p]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_job_sent_is_a_valid_kubernetes_job(worlds: dict[str, World], name: str) -> None:
    jobs = sent(worlds[name], "Job")
    steps = {b["spec"]["template"]["metadata"]["labels"].get("benchctl.io/step") for _, _, b in jobs}
    assert {"preflight-aiperf", "preflight-uploader", "smoke", "warmup"} <= steps
    for _, path, job in jobs:
        assert "fieldValidation=Strict" in path and job_problems(job) == [], job["metadata"]["name"]


def test_a_one_node_p4d_auto_mode_pool_gets_one_nodes_gpus_cpu_and_memory_of_limit(worlds: dict[str, World]) -> None:
    # auto-mode.yaml: every experiment needs one p4d.24xlarge (8 GPUs, 96 vCPUs, 1152 GiB); Karpenter never
    # launches a node larger than the remaining limit, so the limits must be the whole node's
    world = worlds["auto-mode"]
    (method, _, pool), *later = sent(world, "NodePool")
    assert method == "POST" and pool["metadata"]["name"] == nodepool_name(CID, "p4d")
    assert pool["spec"]["limits"] == {"cpu": "96", "memory": "1152Gi", "nvidia.com/gpu": "8"}
    # the next experiments ask for the same pool (409: it is ours, kept warm) and never replace it
    assert [m for m, _, _ in later] == ["POST"] * (len(world.spec.experiments) - 1)
    assert all(b == pool for _, _, b in later)
    # feature-ladder on Auto Mode (no EFA): one p4d as well
    assert {b["spec"]["limits"]["nvidia.com/gpu"] for _, _, b in sent(worlds["feature-ladder[auto-mode]"],
                                                                      "NodePool")} == {"8"}
    # smoke on Auto Mode: its disaggregated experiment moves KV over EFA, so prefill and decode never share
    # a node: when that experiment comes the NodePool (409: ours) is replaced with room for two p4d
    assert [(m, b["spec"]["limits"]["nvidia.com/gpu"]) for m, _, b in sent(worlds["smoke[auto-mode]"], "NodePool")] \
        == [("POST", "8"), ("POST", "16"), ("PUT", "16")]


# ------------------------------------------------------------------------------------ AIPerf argv


def load_jobs(world: World) -> dict[tuple[str, str], list[str]]:
    """(experiment, step) -> the argv its workload's runner Job got (the step's request in the run store),
    for every step the campaign launched; each is a step of a runner Job the campaign sent."""
    from benchctl.aws.eks_load import EksLoad
    from benchctl.campaign.runstate import runner_key

    load = world.providers.load
    assert isinstance(load, EksLoad)
    runners: dict[str, set[str]] = {}
    for _, _, job in sent(world, "Job"):
        for c in job["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "aiperf" and c["command"][3:4] == ["--steps-dir"]:
                exp = job["spec"]["template"]["metadata"]["labels"]["benchctl.io/experiment"]
                runners.setdefault(exp, set()).update(c["command"][5:])
    out = {}
    for exp, steps in runners.items():
        for step in steps:
            req = load.control.read_json(runner_key(exp, step, "request.json"))
            assert req is not None, (exp, step)
            out[(exp, step)] = list(req["argv"])
    return out


def aiperf_parse(argv: list[str]) -> Any:
    """AIPerf 0.13.0's own CLI: cyclopts binds the flags to AIPerf's CLIConfig (unknown flags and bad
    values are errors), then AIPerf resolves its config and builds its benchmark plan; nothing runs."""
    from aiperf.cli import app
    from aiperf.config.flags.resolver import resolve_config
    from aiperf.config.loader import build_benchmark_plan

    command, bound, ignored = app.parse_args(argv, exit_on_error=False, print_error=False)
    assert command.__name__ == "profile" and not ignored, (command, ignored)
    return build_benchmark_plan(resolve_config(bound.arguments["cli_config"], None))


def _options(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("--")]


def test_aiperf_is_the_version_benchctl_writes_for() -> None:
    assert importlib.metadata.version("aiperf") == AIPERF_VERSION == "0.13.0"


@pytest.mark.parametrize("name", [n for n in sorted(SPECS) if "[auto-mode]" not in n])  # same argv either way
def test_every_load_argv_parses_with_aiperfs_own_cli(worlds: dict[str, World], name: str) -> None:
    world = worlds[name]
    jobs = load_jobs(world)
    plan = {e.name: {s.step_id: s for s in e.steps} for e in plan_campaign(world.spec, "aws").experiments}
    # a Job's request for every step, but the search probes the search did not need (skipped: no request)
    skipped = {(e, s) for e, steps in plan.items() for s in steps
               if (rec := world.providers.state.load(e, s)) is not None and rec.skipped}
    assert all(plan[e][s].probe is not None for e, s in skipped)
    assert set(jobs) == {(e, s) for e, steps in plan.items() for s in [*steps, "warmup"]} - skipped
    probes = [(e, s) for (e, s) in jobs if s != "warmup" and plan[e][s].probe is not None]
    if name == "seed-plan":  # its sweeps search and none of its steps fails here: its probes ran, through AIPerf
        assert probes, "the seed plan searches, but no probe ran"
    # one argv per experiment and workload (every step kind), and every warm-up, through AIPerf itself;
    # every other step of that workload has exactly the same options (only values such as seeds differ)
    chosen: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for (exp, step_id), argv in sorted(jobs.items()):
        key = (exp, "warmup" if step_id == "warmup" else plan[exp][step_id].workload)
        if key in chosen:
            assert _options(argv) == _options(chosen[key][1]), (exp, step_id)
        else:
            chosen[key] = (step_id, argv)
    kinds = {plan[e][s].kind for (e, s) in jobs if s != "warmup"}
    assert kinds == {w.kind for w in world.spec.workloads}
    for (exp, what), (step_id, argv) in chosen.items():
        local = world.lake.local_raw(CID, exp, step_id) / "inputs"
        # the dataset the Job fetched to /artifacts/<step>/inputs/ is the one kept raw: point AIPerf at it
        bp = aiperf_parse([a.replace(f"/artifacts/{step_id}/inputs/", f"{local}/") for a in argv])
        assert bp is not None, (exp, what)


@pytest.mark.parametrize("bad", [["--isl", "-5"], ["--custom-dataset-type", "mooncake"], ["--no-such-flag", "1"]])
def test_aiperfs_parser_refuses_what_aiperf_would_refuse(worlds: dict[str, World], bad: list[str]) -> None:
    argv = next(a for (e, s), a in load_jobs(worlds["smoke[managed-nodegroup]"]).items() if s == "warmup")
    with pytest.raises(Exception):  # noqa: B017 (cyclopts and pydantic errors alike: refused)
        aiperf_parse([*argv, *bad])


def test_the_tokenizer_is_the_pinned_model_snapshot_read_offline(worlds: dict[str, World]) -> None:
    world = worlds["seed-plan"]
    for argv in load_jobs(world).values():
        assert argv[argv.index("--tokenizer") + 1] == world.spec.model.name
        assert argv[argv.index("--tokenizer-revision") + 1] == world.spec.model.revision


# ------------------------------------------------------------------------------------ worker metrics


def test_aiperf_scrapes_every_worker_and_kvbm_endpoint_of_the_experiment(worlds: dict[str, World]) -> None:
    world = worlds["auto-mode"]
    pods = {p["metadata"]["name"]: p for p in world.pods}  # as the operator made them (teardown removed them)
    for exp in world.spec.experiments:
        expected = set()
        for pod in pods.values():
            lbl = pod["metadata"]["labels"]
            if lbl.get("benchctl.io/experiment") != exp.name or lbl.get(LABEL_ROLE) == "frontend":
                continue
            ip = pod["status"]["podIP"]
            expected.add(f"http://{ip}:{WORKER_SYSTEM_PORT}/metrics")
            if exp.kv_offload is not None and lbl[LABEL_ROLE] in ("worker", "prefill"):
                expected.add(f"http://{ip}:{KVBM_METRICS_PORT}/metrics")
            if exp.mode == "disaggregated":
                expected.add(f"http://{ip}:{NIXL_TELEMETRY_PORT}/metrics")
        assert len(expected) >= 2
        for (e, step_id), argv in load_jobs(world).items():
            if e != exp.name or step_id == "warmup":
                continue
            urls = argv[argv.index("--server-metrics") + 1:]
            urls = urls[:next((i for i, a in enumerate(urls) if a.startswith("--")), len(urls))]
            assert set(urls) == expected, (e, step_id)
    kvbm = [u for u in expected if f":{KVBM_METRICS_PORT}/" in u]
    assert kvbm, "disagg-offload: KVBM's exporter on the prefill worker is scraped"


def test_load_jobs_carry_no_api_token_so_aiperf_cannot_list_other_campaigns_pods(worlds: dict[str, World]) -> None:
    for _, _, job in sent(worlds["auto-mode"], "Job"):
        assert job["spec"]["template"]["spec"]["automountServiceAccountToken"] is False



@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_frontend_and_jobs_sent_never_tolerate_the_gpu_taint_and_every_gpu_worker_sent_does(
        worlds: dict[str, World], name: str) -> None:
    """What the adapters actually sent to the cluster (not a second rendering): the Frontend and every Job's pod
    never tolerate ``nvidia.com/gpu:NoSchedule`` and are admitted by the platform's CPU node group, every GPU
    worker tolerates it, and every NodePool sent carries it (the scheduler's rules as
    ``tests/unit/test_gpu_taint_placement.py`` states them, from the Kubernetes "Taints and Tolerations" page)."""
    from tests.unit.test_gpu_taint_placement import CPU_NODES, GPU_TAINT, admits, tolerates

    world = worlds[name]
    cpu = CPU_NODES["the platform's CPU node group"]
    kinds = set()
    for _, _, dgd in sent(world, "DynamoGraphDeployment"):
        for c in dgd["spec"]["components"]:
            pod = c["podTemplate"]["spec"]
            gpus = sum(int((ct.get("resources") or {}).get("requests", {}).get("nvidia.com/gpu", 0))
                       for ct in pod["containers"])
            where = f"{dgd['metadata']['name']}/{c['name']}"
            if c["type"] == "frontend":
                kinds.add("frontend")
                assert not tolerates(pod.get("tolerations"), GPU_TAINT) and admits(pod, cpu), where
            elif gpus:
                kinds.add("gpu-worker")
                assert tolerates(pod.get("tolerations"), GPU_TAINT), where
    for _, _, job in sent(world, "Job"):
        pod = job["spec"]["template"]["spec"]
        assert not tolerates(pod.get("tolerations"), GPU_TAINT) and admits(pod, cpu), job["metadata"]["name"]
    for _, _, np in sent(world, "NodePool"):
        assert GPU_TAINT in np["spec"]["template"]["spec"]["taints"], np["metadata"]["name"]
    assert "frontend" in kinds
