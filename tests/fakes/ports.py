"""In-process fakes of the serving / load / smoke ports, for running the real campaign ASL fast.

What is real: the ASL (moto's interpreter via ``benchctl.local.engine.execute``), the handlers in
``lambdas/``, ``benchctl.campaign``, the run state (``RunState`` over ``LocalRunStore``), the lake
(``LocalLake``), the pool (``LocalPool``) and ingestion. What is fake: Dynamo and AIPerf.

* :class:`FakeServing` deploys instantly and is Ready on the first probe; :meth:`FakeServing.kill`
  makes a deployment "die" (``check_alive`` then raises ``ServingFailed``, as a killed mocker does).
* :class:`FakeLoad` "runs" AIPerf by copying the real AIPerf 0.13.0 sample artifacts into the
  artifact directory at launch; the next poll reports exit 0. ``stop`` of a running job reports -15.
* :class:`FakeSmoke` answers at once (the local engine's smoke port does the same, for real).
* :class:`FakeWorld` holds one of each (plus a ``LocalPool`` with known starting sizes) and is the
  engine ``execute``/``use_engine`` take (its campaigns under ``<out>/campaigns``, the lake beside); it
  records every call so a test can assert that nothing is left running and that nothing was done twice.

Standard library and benchctl only.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchctl.campaign.context import Ctx
from benchctl.campaign.ports import DeploymentRequest, LoadRequest, Providers
from benchctl.campaign.runstate import RunState
from benchctl.errors import ServingFailed
from benchctl.local.lake import LocalLake
from benchctl.local.pool import LocalPool
from benchctl.local.runner import read_file_uri
from benchctl.local.runstore import LocalRunStore

JSON = dict[str, Any]
SUMMARY_JSON = "profile_export_aiperf.json"
RECORDS_JSONL = "profile_export.jsonl"


# Real AIPerf 0.13.0 outputs, committed with the tests (tests/data/README.md says where they come from).
SAMPLES = Path(__file__).resolve().parents[1] / "data" / "aiperf-0.13.0"


def sample_records(dataset_lines: int | None = None) -> list[str]:
    """The sample's two warm-up records plus profiling copies of them (AIPerf 0.13 JSONL lines).

    With ``dataset_lines`` (the step sent a generated dataset, ``--input-file``), one profiling record
    per dataset line, whose conversation id names that line (``line-000000``...), as AIPerf's are.
    """
    from benchctl.lake.ingest.records import SESSION_PREFIX

    head = (SAMPLES / "profile_export.head.jsonl").read_text(encoding="utf-8").splitlines()
    profiling = []
    for i in range(len(head) if dataset_lines is None else dataset_lines):
        rec = json.loads(head[i % len(head)])
        rec["metadata"].update(benchmark_phase="profiling", phase_name="profiling", phase_kind="profiling",
                               phase_index=1)
        rec["metadata"]["x_request_id"] = f"{rec['metadata']['x_request_id']}-p{i}"
        if dataset_lines is not None:
            rec["metadata"]["conversation_id"] = f"{SESSION_PREFIX}{i:06d}"
        profiling.append(json.dumps(rec))
    return head + profiling


def write_sample_artifacts(dest: Path, dataset_lines: int | None = None) -> list[str]:
    """What AIPerf 0.13 leaves in its artifact directory after a successful run; the names written."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SAMPLES / SUMMARY_JSON, dest / SUMMARY_JSON)
    shutil.copyfile(SAMPLES / "phase_manifest.json", dest / "phase_manifest.json")
    (dest / RECORDS_JSONL).write_text("\n".join(sample_records(dataset_lines)) + "\n", encoding="utf-8")
    return [SUMMARY_JSON, "phase_manifest.json", RECORDS_JSONL]


class FakeServing:
    """Deployments that start instantly. Status per deployment id: running | dead | torn_down."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.deploy_calls: list[str] = []
        self.prepare_calls: list[str] = []
        self.teardown_calls: list[str] = []
        self.prepared: set[str] = set()  # experiments whose prepare ran and whose teardown did not
        self.probes = 0

    def prepare(self, request: DeploymentRequest) -> None:
        """What EKS's prepare creates per experiment (the pre-pull DaemonSets) until its teardown."""
        self.prepare_calls.append(request.deployment_id)
        self.prepared.add(request.deployment_id)

    def deploy(self, spec: DeploymentRequest) -> JSON:
        self.deploy_calls.append(spec.deployment_id)
        self.status[spec.deployment_id] = "running"
        return {
            "deployment_id": spec.deployment_id,
            "url": "http://127.0.0.1:9/v1",  # never contacted: the load is fake too
            "model": spec.model_name,
            "metrics_urls": {"frontend": "http://127.0.0.1:9/metrics"},
            "mode": spec.mode,
        }

    def probe_ready(self, state: JSON) -> bool:
        self.probes += 1
        if self.status.get(state["deployment_id"]) == "dead":
            raise ServingFailed(f"fake deployment {state['deployment_id']} died")
        return self.status.get(state["deployment_id"]) == "running"

    def check_alive(self, state: JSON) -> None:
        st = self.status.get(state["deployment_id"])
        if st != "running":
            raise ServingFailed(f"fake deployment {state['deployment_id']}: worker process exited ({st})")

    def versions(self, state: JSON) -> JSON:
        return {}

    def metrics_urls(self, state: JSON) -> dict[str, str]:
        return dict(state.get("metrics_urls") or {})

    def network(self, state: JSON) -> JSON:
        return {"engine": "fake"}

    def remaining(self, state: JSON) -> list[str]:
        return []

    def teardown(self, state: JSON) -> JSON:
        dep = state["deployment_id"]
        self.teardown_calls.append(dep)
        self.prepared.discard(dep)
        was = self.status.get(dep)
        self.status[dep] = "torn_down"
        return {"removed": [dep] if was in ("running", "dead") else []}

    def observe(self, state: JSON, removed: JSON | None) -> list[JSON]:
        dep = state["deployment_id"]
        there = self.status.get(dep) in ("running", "dead") or dep in self.prepared
        return [{"kind": "deployment", "name": dep, "present": there, "why": "not torn down" if there else ""}]

    def kill(self, deployment_id: str) -> None:
        """The deployment's worker dies (what the e2e test does with SIGKILL)."""
        self.status[deployment_id] = "dead"

    def not_torn_down(self) -> list[str]:
        return sorted(d for d, s in self.status.items() if s != "torn_down")


class FakeLoad:
    """AIPerf runs that finish at the next poll. Status per job id: running | exited | stopped."""

    def __init__(self, on_launch: Callable[[str], None] | None = None, refuse: dict[str, str] | None = None) -> None:
        self.refuse = refuse or {}
        self.status: dict[str, str] = {}
        self.launch_calls: list[str] = []
        self.stop_calls: list[str] = []
        self.on_launch = on_launch

    def launch(self, request: LoadRequest) -> JSON:
        argv, artifact_dir, job_id = list(request.argv), request.artifact_uri, request.job_id
        assert argv, request
        if job_id in self.refuse:
            raise RuntimeError(self.refuse[job_id])
        self.launch_calls.append(job_id)
        lines = None
        if "--input-file" in argv:  # a generated dataset, sent line by line
            data = Path(argv[argv.index("--input-file") + 1]).read_bytes()
            lines = sum(1 for line in data.splitlines() if line.strip())
        write_sample_artifacts(Path(artifact_dir), lines)
        self.status[job_id] = "running"
        if self.on_launch is not None:
            self.on_launch(job_id)
        return {"job_id": job_id, "artifact_dir": artifact_dir, "fake": True}

    def poll(self, state: JSON) -> int | None:
        job = state["job_id"]
        st = self.status.get(job)
        if st == "running":  # finishes "between" launch and the first poll
            self.status[job] = "exited"
            return 0
        if st == "exited":
            return 0
        if st == "stopped":
            return -15
        raise AssertionError(f"poll of a job never launched: {job}")

    def stop(self, state: JSON) -> None:
        job = state["job_id"]
        self.stop_calls.append(job)
        if self.status.get(job) == "running":
            self.status[job] = "stopped"

    def failure_logs(self, state: JSON) -> JSON:
        return {}

    def pending(self, state: JSON) -> str | None:
        return None

    def observe(self, state: JSON) -> JSON:
        there = self.status.get(state["job_id"]) == "running"
        return {"kind": "load", "name": state["job_id"], "present": there, "why": "still running" if there else ""}

    def running(self) -> list[str]:
        return sorted(j for j, s in self.status.items() if s == "running")


def arithmetic(body: JSON) -> int:
    """What a model that can count answers to a quality question (``benchctl.analysis.quality.PROMPT``, or a multistep
    ``MULTISTEP_PROMPT`` read with Python's own expression parser)."""
    import ast
    import operator

    content = body["messages"][-1]["content"]
    m = re.search(r"What is (-?\d+) ([-+*]) (-?\d+)\?", content)
    if m is None:
        multi = re.match(r"Compute ([\d ()+x-]+)\. ", content)
        assert multi, body
        ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

        def walk(node: ast.AST) -> int:
            if isinstance(node, ast.BinOp) and type(node.op) in ops:
                return int(ops[type(node.op)](walk(node.left), walk(node.right)))
            assert isinstance(node, ast.Constant) and isinstance(node.value, int), ast.dump(node)
            return node.value

        return walk(ast.parse(multi.group(1).replace(" x ", " * "), mode="eval").body)
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return a + b if op == "+" else a - b if op == "-" else a * b


class FakeSmoke:
    """Smoke requests that succeed at once, unless the deployment is dead; every start recorded."""

    def __init__(self, serving: FakeServing) -> None:
        self.serving = serving
        self.calls: list[tuple[str, int, int]] = []
        self.questions: list[JSON] = []
        self.answer_off_by = 0  # a model that answers every quality question wrong by this much (0: right)

    def start(self, deployment: JSON, requests: int, max_tokens: int, *, quality: list[JSON] | None = None) -> JSON:
        self.calls.append((deployment["deployment_id"], requests, max_tokens))
        self.serving.check_alive(deployment)
        result: JSON = {"requests": requests, "ok": requests}
        if quality is not None:
            self.questions = quality
            result["quality_answers"] = {q["id"]: {"content": f"ANSWER: {arithmetic(q['body']) + self.answer_off_by}",
                                                   "finish_reason": "stop"} for q in quality}
        return {"result": result}

    def poll(self, started: JSON) -> int | None:
        return 0

    def result(self, started: JSON) -> JSON:
        result: JSON = started["result"]
        return result

    def failure_logs(self, started: JSON) -> JSON:
        return {}


class FakePreflight:
    def __init__(self, missing: list[str]) -> None:
        self.missing = missing

    def check(self, spec: Any) -> list[str]:
        return list(self.missing)


class FakeReport:
    """A ReportPort from a function of the campaign id (a test's)."""

    def __init__(self, write: Callable[[str], JSON]) -> None:
        self._write = write

    def write(self, campaign_id: str) -> JSON:
        return self._write(campaign_id)


@dataclass
class FakeWorld:
    """The providers factory: real store / lake / pool, fake serving / load / smoke."""

    lake_root: Path  # <out>/lake: the campaigns' run state is under <out>/campaigns
    pool_sizes: dict[str, int] = field(default_factory=lambda: {"gpu-a100": 0, "unrelated-pool": 3})
    preflight_missing: list[str] = field(default_factory=list)
    kill_on_launch: dict[str, str] = field(default_factory=dict)  # job id -> deployment id that dies then
    refuse_launch: dict[str, str] = field(default_factory=dict)  # job id -> why its launch fails (nothing runs)
    report: Callable[[str], JSON] | None = None
    pool: LocalPool = field(init=False)
    serving: FakeServing = field(init=False)
    load: FakeLoad = field(init=False)
    lake: LocalLake = field(init=False)
    smoke: FakeSmoke = field(init=False)
    calls: Counter[str] = field(default_factory=Counter, init=False)
    name: str = field(default="local", init=False)

    def __post_init__(self) -> None:
        self.initial_sizes = dict(self.pool_sizes)
        self.pool = LocalPool(dict(self.pool_sizes))
        self.serving = FakeServing()
        self.load = FakeLoad(on_launch=self._on_launch, refuse=self.refuse_launch)
        self.smoke = FakeSmoke(self.serving)
        self.lake = LocalLake(self.lake_root)
        self.lake_uri = str(self.lake.root)
        self.runs_uri = str(self.lake.root.parent / "campaigns")
        self._count_pool_calls()

    @property
    def smoke_calls(self) -> list[tuple[str, int, int]]:
        return self.smoke.calls

    def _count_pool_calls(self) -> None:
        scale, restore = self.pool.scale, self.pool.restore

        def counted_scale(pool: str, nodes: int, owner: str, *, before_change: Any = None) -> JSON:
            self.calls[f"scale:{pool}"] += 1
            return scale(pool, nodes, owner, before_change=before_change)

        def counted_restore(record: JSON) -> JSON:
            self.calls[f"restore:{record['pool']}"] += 1
            return restore(record)

        self.pool.scale = counted_scale  # type: ignore[method-assign]
        self.pool.restore = counted_restore  # type: ignore[method-assign]

    def _on_launch(self, job_id: str) -> None:
        if job_id in self.kill_on_launch:
            self.serving.kill(self.kill_on_launch[job_id])

    def pool_sizes_now(self) -> dict[str, int]:
        return {name: self.pool.current(name)["desired"] for name in self.initial_sizes}

    def providers(self, ctx: Ctx) -> Providers:
        return Providers(
            engine="local",
            state=RunState(LocalRunStore(Path(ctx.run_uri))),
            pools=self.pool,
            serving=self.serving,
            load=self.load,
            smoke=self.smoke,
            lake=self.lake,
            read_uri=read_file_uri,
            tokenizer="fake-tokenizer",
            report=FakeReport(self.report) if self.report is not None else None,
            preflight=FakePreflight(self.preflight_missing),
            versions={"fake": "1"},
        )

    def leftovers(self) -> dict[str, list[str]]:
        """What is still 'running': deployments not torn down, what ``prepare`` created and no teardown
        removed, loads neither finished nor stopped, pools not back at their starting sizes. Empty lists
        everywhere when the campaign cleaned up."""
        return {
            "deployments": self.serving.not_torn_down(),
            "prepared": sorted(self.serving.prepared),
            "loads": self.load.running(),
            "pools": [f"{k}={v} (was {self.initial_sizes[k]})" for k, v in self.pool_sizes_now().items()
                      if v != self.initial_sizes[k]],
        }


class Unused:
    """A port a test does not expect to be used: touching it fails the test, naming it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise AssertionError(f"{self._name}.{attr} was used")


def providers_for_test(run_dir: Path, lake: Any, *, spec: Any = None, engine: str = "local", **ports: Any) -> Providers:
    """Providers over a local run state (with ``spec`` and its plan stored, when given) and a lake, for unit
    tests that call the operations directly; a port not given is ``Unused``."""
    from benchctl.planning.plan import plan_campaign

    state = RunState(LocalRunStore(run_dir))
    if spec is not None:
        state.keep_spec(spec, source="test", text="")
        state.keep_plan(plan_campaign(spec, engine))
    given = {k: ports.pop(k) for k in ("pools", "serving", "load", "smoke") if k in ports}
    return Providers(engine=engine, state=state, pools=given.get("pools", Unused("pools")),
                     serving=given.get("serving", Unused("serving")), load=given.get("load", Unused("load")),
                     smoke=given.get("smoke", Unused("smoke")), lake=lake,
                     read_uri=ports.pop("read_uri", Unused("read_uri")), tokenizer=ports.pop("tokenizer", "t"),
                     **ports)


def record_asl_waits(monkeypatch: Any) -> list[int]:
    """The ASL's Wait states (``SecondsPath: $.ctx.poll_seconds``) end at once, each recording its seconds in the
    list returned, instead of moto sleeping them for real (``WaitFunction._wait_interval`` waits on the
    execution's event for that long). The fakes' clock, not the wall clock, is what a test's waits advance; the
    state machine still enters and leaves every Wait state (its history events are unchanged)."""
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    waited: list[int] = []

    def wait_interval(self: Any, env: Any, wait_seconds: int) -> None:
        waited.append(wait_seconds)

    monkeypatch.setattr(WaitFunction, "_wait_interval", wait_interval)
    return waited
