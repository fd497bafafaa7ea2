"""Campaign timeline simulation on AWS: billed GPU node time against the time spent under load.

SIMULATED, not measured: every duration here is a stated assumption (``Latencies``), and the load
seconds are the plan's own estimates. The simulation answers one question: of the GPU-hours a
campaign pays for, how many carry measured load? It compares today's behaviour (``BASELINE``) with
four switchable changes (``Strategy``), so each gain can be attributed:

* ``reorder``   run experiments that share pools back to back (spec order on ties; a feature-ladder
                rung never before its base);
* ``keep_warm`` keep a pool's nodes between consecutive experiments that use it (no restore and
                re-scale; restored at the end of its last consecutive user, or on any failure). Each
                hand-over is taken only when it costs no more than restoring (see ``simulate``);
* ``prepull``   pull the runtime image on each node as soon as it is Ready (a pre-puller DaemonSet),
                overlapping the pull with the other nodes' boot and the GPU device plugin start;
* ``prefetch``  download the model to the shared volume once per campaign, at its start, on a CPU
                node, overlapped with the first scale-up (today the first experiment's workers
                download it while the GPU nodes wait).

Pure and deterministic: no I/O, no clock, no randomness. Same plan + spec + latencies + strategy
give the same result. Times are seconds from the start of the campaign's execution.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from benchctl.planning.plan import EST_ITL_MS, EST_TTFT_MS, OVERHEADS, CampaignPlan, ExperimentPlan, StepPlan
from benchctl.spec.model import CampaignSpec


@dataclass(frozen=True)
class Latencies:
    """Stated durations (seconds) and rates. Assumptions, not measurements; sources in each comment.

    Change any of them to see how sensitive the figures are; the bench prints the ones it used.
    """

    # --- control plane
    task_s: float = 2.0  # one Lambda task round trip (warm); assumption
    poll_s: float = 30.0  # Check* states poll every poll_seconds; benchctl.campaign.start_ctx default 30
    # --- nodes (EKS managed node group, on-demand, capacity available)
    instance_launch_s: float = 60.0  # UpdateNodegroupConfig -> ASG -> instance 'running' (billing starts); assumption 30-90 s
    node_boot_s: float = 420.0  # 'running' -> kubelet Ready, default for types not listed below; assumption
    node_boot_s_by_type: tuple[tuple[str, float], ...] = (
        # p4d: 8 NVSwitch, 4 EFA, 8 NVMe, EKS accelerated AMI: ~8-10 min from the scale request to Ready
        ("p4d.24xlarge", 450.0),
        ("p4de.24xlarge", 450.0),
        # g6e: 4 L40S, no NVSwitch/EFA fabric to bring up: ~5-6 min from the request; assumption
        ("g6e.12xlarge", 270.0),
    )
    node_stagger_s: float = 45.0  # each further node of one scale-up is Ready this much later; assumption
    gpu_ready_s: float = 90.0  # kubelet Ready -> device plugin advertises nvidia.com/gpu (fabric manager); assumption
    # --- serving start-up
    image_gb: float = 20.0  # nvcr.io/nvidia/ai-dynamo/vllm-runtime, ~20 GB unpacked; stated in the brief
    image_pull_mb_s: float = 80.0  # registry pull + containerd unpack (serial per layer) -> 250 s; assumption
    pod_start_s: float = 15.0  # schedule + container create once the image is there; assumption
    model_gb: float = 61.0  # Qwen3-30B-A3B BF16 weights (30.5 B x 2 bytes; the seeds)
    model_download_mb_s: float = 200.0  # Hugging Face Hub -> EFS volume -> 305 s; assumption
    model_on_volume_at_start: bool = False  # True: an earlier campaign left the model on the volume
    efs_read_mb_s: float = 400.0  # per worker, several workers of a node sharing the EFS client -> 152 s; assumption
    page_cache_read_mb_s: float = 3000.0  # re-load on a node that already read the weights (page cache) -> 20 s
    engine_init_s: float = 150.0  # vLLM profile run, KV cache allocation, torch.compile, CUDA graphs; assumption
    # --- validation and load
    smoke_s: float = 30.0  # benchctl.planning.plan.OVERHEADS["aws"]["smoke"]
    load_job_start_s: float = 20.0  # AIPerf Job pod start + tokenizer; benchctl.planning.plan.OVERHEADS["aws"]["step_setup"]
    ingest_s: float = 10.0  # IngestStep Lambda: read artifacts, write Parquet; assumption
    # AIPerf's own start-up + shutdown per step in a warm load runner (imports, tokenizer, corpus paid once per
    # Job): 2.2-2.5 s measured on a loaded 2-core machine (bench/local_campaign.py, issue 16); assumption on AWS
    runner_step_s: float = 3.0
    # the runner Job's hand-overs (benchctl.aws.k8s.jobs.RUNNER_CONTROL_SCRIPT): after AIPerf exits, upload the
    # step's artifacts, write its end record, answer the task token; before a step, the control container's
    # 1 s poll of the run store for the request (0.5 s on average) and the fetch of the step's kept input
    runner_upload_s: float = 1.5  # assumption: a few MB to S3 from inside the Region + 2 S3 PUTs + 1 API call
    runner_pickup_s: float = 1.0  # assumption
    # --- teardown and billing
    undeploy_s: float = 60.0  # delete the DynamoGraphDeployment and wait for its pods to go; assumption
    drain_terminate_s: float = 90.0  # restore (desired down) -> cordon/drain -> instance shutting-down (billing stops)
    nodegroup_update_s: float = 60.0  # a node group update in flight; another update is refused until it ends
    billing_min_s: float = 60.0  # EC2 Linux on-demand: per-second billing, 60 s minimum per instance

    def boot_s(self, instance_type: str) -> float:
        return float(dict(self.node_boot_s_by_type).get(instance_type, self.node_boot_s))

    @property
    def image_pull_s(self) -> float:
        return self.image_gb * 1000.0 / self.image_pull_mb_s

    @property
    def model_download_s(self) -> float:
        return self.model_gb * 1000.0 / self.model_download_mb_s

    def model_read_s(self, page_cache: bool) -> float:
        return self.model_gb * 1000.0 / (self.page_cache_read_mb_s if page_cache else self.efs_read_mb_s)

    @property
    def prefetch_start_s(self) -> float:
        """The prefetch Job's pod on a CPU node: today it uses the runtime image, so it pulls that first."""
        return self.image_pull_s + self.pod_start_s

    def describe(self) -> list[str]:
        boot = ", ".join(f"{k} {v:g} s" for k, v in sorted(self.node_boot_s_by_type))
        return [
            f"scale request -> instance running (billing starts): {self.instance_launch_s:g} s; "
            f"running -> node Ready: {boot}, other types {self.node_boot_s:g} s; "
            f"+{self.node_stagger_s:g} s per further node; device plugin GPUs: +{self.gpu_ready_s:g} s",
            f"runtime image {self.image_gb:g} GB at {self.image_pull_mb_s:g} MB/s = {self.image_pull_s:.0f} s per node; "
            f"pod start {self.pod_start_s:g} s",
            f"model {self.model_gb:g} GB: download {self.model_download_mb_s:g} MB/s = {self.model_download_s:.0f} s "
            f"(volume {'warm' if self.model_on_volume_at_start else 'cold'} at start); "
            f"load from EFS {self.efs_read_mb_s:g} MB/s = {self.model_read_s(False):.0f} s, "
            f"from page cache {self.model_read_s(True):.0f} s; engine init {self.engine_init_s:g} s",
            f"smoke {self.smoke_s:g} s; AIPerf Job start {self.load_job_start_s:g} s; "
            f"AIPerf run in a warm runner {self.runner_step_s:g} s (+ upload and end record {self.runner_upload_s:g} s, "
            f"request pick-up {self.runner_pickup_s:g} s); ingest {self.ingest_s:g} s; "
            f"polls every {self.poll_s:g} s; Lambda task {self.task_s:g} s",
            f"teardown: undeploy {self.undeploy_s:g} s, drain+terminate {self.drain_terminate_s:g} s, "
            f"node group update {self.nodegroup_update_s:g} s; billing per second, {self.billing_min_s:g} s minimum",
        ]


@dataclass(frozen=True)
class Strategy:
    reorder: bool = False
    keep_warm: bool = False
    prepull: bool = False
    prefetch: bool = False
    # one load Job per workload running its steps back to back (a warm AIPerf runner), each step's end an
    # event (task token, no poll rounding), step n ingested while step n+1 loads; SIMULATED, not built on AWS
    runner: bool = False

    @property
    def label(self) -> str:
        on = [n for n in ("reorder", "keep_warm", "prepull", "prefetch", "runner") if getattr(self, n)]
        return "+".join(on) if on else "baseline"


BASELINE = Strategy()
IMPROVED = Strategy(reorder=True, keep_warm=True, prepull=True, prefetch=True)
IMPROVEMENTS = ("reorder", "keep_warm", "prepull", "prefetch")
def engine_now(spec: CampaignSpec) -> Strategy:
    """What the AWS engine runs: pools kept warm (ExperimentPlan.handover), one load runner Job per workload
    whose steps end as task-token events with ingestion overlapped, the runtime image pre-pulled on each
    GPU node as it joins (a DaemonSet ScalePools creates before scaling), and the model prefetch started
    by ScalePools before the GPU pools when the spec asks for it (``kubernetes.prefetch_model``; else the
    volume must hold the model, or the workers download it). No reordering."""
    return Strategy(keep_warm=True, runner=True, prepull=True, prefetch=spec.kubernetes.prefetch_model)


@dataclass(frozen=True)
class NodeInterval:
    """One EC2 instance of a pool, from billing start to billing end."""

    pool: str
    node: str  # "<pool>#<n>", n counting every instance launched for the pool in this campaign
    instance_type: str
    gpus: int
    start_s: float
    end_s: float
    experiments: tuple[str, ...]  # the experiments that used it

    @property
    def billed_s(self) -> float:
        return max(self.end_s - self.start_s, 0.0)


@dataclass(frozen=True)
class LoadWindow:
    experiment: str
    step_id: str
    start_s: float
    end_s: float
    gpus: int

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Phase:
    experiment: str
    name: str  # scale, capacity, deploy, ready, smoke, warmup, steps, teardown
    start_s: float
    end_s: float


@dataclass(frozen=True)
class SimResult:
    strategy: Strategy
    order: tuple[str, ...]
    nodes: tuple[NodeInterval, ...]
    windows: tuple[LoadWindow, ...]
    phases: tuple[Phase, ...]
    wall_s: float
    billing_min_s: float
    prices: Mapping[str, float | None]  # instance type -> USD per hour (None: unpriced)
    eks_usd_per_hour: float
    notes: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # hand-overs: pools kept warm from one experiment to the next

    def billed_s(self, node: NodeInterval) -> float:
        return max(node.billed_s, self.billing_min_s)

    @property
    def load_gpu_hours(self) -> float:
        return sum(w.seconds * w.gpus for w in self.windows) / 3600.0

    @property
    def billed_gpu_hours(self) -> float:
        return sum(self.billed_s(n) * n.gpus for n in self.nodes) / 3600.0

    @property
    def ratio(self) -> float:
        """Measured-load GPU-hours / billed GPU-hours (1.0 would be load on every paid GPU second)."""
        billed = self.billed_gpu_hours
        return self.load_gpu_hours / billed if billed else 0.0

    def breakdown(self) -> dict[str, float]:
        """Billed GPU-hours by what the nodes were doing: each node's interval cut by the phases of the
        experiments it served; 'load' is the load windows, 'step overhead' the rest of the steps phase
        (Job start, poll rounding, ingest), 'other' what no phase covers (drain, 60 s minimum)."""
        out: dict[str, float] = {}

        def add(key: str, seconds: float, gpus: int) -> None:
            out[key] = out.get(key, 0.0) + max(seconds, 0.0) * gpus / 3600.0

        for n in self.nodes:
            covered = 0.0
            for ph in self.phases:
                if ph.experiment not in n.experiments:
                    continue
                lo, hi = max(ph.start_s, n.start_s), min(ph.end_s, n.end_s)
                if hi <= lo:
                    continue
                covered += hi - lo
                if ph.name == "steps":
                    load = sum(max(min(w.end_s, hi) - max(w.start_s, lo), 0.0)
                               for w in self.windows if w.experiment == ph.experiment)
                    add("load", load, n.gpus)
                    add("step overhead", hi - lo - load, n.gpus)
                else:
                    add(ph.name, hi - lo, n.gpus)
            add("other", self.billed_s(n) - covered, n.gpus)
        return out

    def billed_node_hours(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for n in self.nodes:
            out[n.pool] = out.get(n.pool, 0.0) + self.billed_s(n) / 3600.0
        return out

    @property
    def usd(self) -> float | None:
        """Node-hours x the spec's price + the EKS cluster fee over the campaign's wall time."""
        total = self.eks_usd_per_hour * self.wall_s / 3600.0
        for n in self.nodes:
            price = self.prices.get(n.instance_type)
            if price is None:
                return None
            total += self.billed_s(n) / 3600.0 * price
        return total


# ---------------------------------------------------------------- plan-derived quantities


def step_load_s(step: StepPlan, engine: str) -> float:
    """Seconds of load of one step: its duration, else the plan's request estimate (without set-up)."""
    if step.duration_s is not None:
        return float(step.duration_s)
    return max(step.est_s - OVERHEADS[engine]["step_setup"], 0.0)


def plan_load_gpu_hours(plan: CampaignPlan) -> float:
    return sum(step_load_s(s, plan.engine) * e.gpus for e in plan.experiments for s in e.steps) / 3600.0


def warmup_s(spec: CampaignSpec) -> float:
    """The plan's warm-up estimate (benchctl.planning.plan.plan_campaign)."""
    n = spec.warmup.request_count
    return n * (EST_TTFT_MS + 32 * EST_ITL_MS) / 1000.0 if n else 0.0


def _shared_nodes(a: ExperimentPlan, b: ExperimentPlan) -> int:
    return sum(min(n, b.nodes.get(pool, 0)) for pool, n in a.nodes.items())


def order_experiments(plan: CampaignPlan) -> list[ExperimentPlan]:
    """Run order that puts experiments sharing pools back to back.

    Greedy: start with the first experiment of the spec; then take, among those whose ladder base
    (if any) has already run, the one sharing the most nodes with the one just run; ties keep the
    spec order. A feature-ladder rung therefore never runs before its base.
    """
    names = {e.name for e in plan.experiments}
    left = list(plan.experiments)
    done: set[str] = set()
    out: list[ExperimentPlan] = []
    while left:
        ready = [e for e in left if not e.base or e.base in done or e.base not in names]
        if not ready:  # pragma: no cover - a valid spec names only earlier experiments as bases
            ready = left[:1]
        prev = out[-1] if out else None
        best = ready[0] if prev is None else max(ready, key=lambda e: (_shared_nodes(prev, e), -left.index(e)))
        out.append(best)
        left.remove(best)
        done.add(best.name)
    return out


# ---------------------------------------------------------------- simulation


@dataclass
class _Node:
    pool: str
    name: str
    instance_type: str
    gpus: int
    start: float  # billing start (instance running)
    ready: float  # kubelet Ready
    gpu_ready: float
    image_at: float | None = None  # runtime image in the node's containerd store
    page_cache: bool = False  # the node has read the model before
    end: float | None = None
    used_by: list[str] = field(default_factory=list)


def _observe(start: float, done_at: float, lat: Latencies) -> float:
    """When a Check*/Wait loop that began at ``start`` sees a condition that became true at ``done_at``."""
    first = start + lat.task_s
    if done_at <= first:
        return first
    return first + math.ceil((done_at - first) / lat.poll_s - 1e-9) * lat.poll_s


Handover = frozenset[tuple[int, str]]  # (position in the run order, pool): kept for the next experiment


def candidate_handovers(order: Sequence[ExperimentPlan]) -> list[tuple[int, str]]:
    """Pools the next experiment also uses, per position of the run order."""
    return [(k, pool) for k, (a, b) in enumerate(itertools.pairwise(order)) for pool in a.nodes if pool in b.nodes]


def simulate(plan: CampaignPlan, spec: CampaignSpec, strategy: Strategy = BASELINE,
             latencies: Latencies | None = None) -> SimResult:
    """Simulate the campaign's timeline on AWS; see the module docstring for what each switch does.

    With ``keep_warm``, each hand-over (a pool the next experiment also uses) is decided in run order:
    kept when that costs no more billed GPU-hours than restoring it (later hand-overs restored), so
    keeping a pool warm never costs more than restoring every pool. Keeping loses only when the next
    experiment must wait for newly launched nodes anyway and launching is slower than draining.
    """
    lat = latencies or Latencies()
    order = order_experiments(plan) if strategy.reorder else list(plan.experiments)
    keep: set[tuple[int, str]] = set()
    if strategy.keep_warm:
        for cand in candidate_handovers(order):
            with_it = _run(plan, spec, strategy, lat, order, frozenset(keep | {cand}))
            without = _run(plan, spec, strategy, lat, order, frozenset(keep))
            if with_it.billed_gpu_hours <= without.billed_gpu_hours:
                keep.add(cand)
    return _run(plan, spec, strategy, lat, order, frozenset(keep))


def _run(plan: CampaignPlan, spec: CampaignSpec, strategy: Strategy, lat: Latencies,
         order: Sequence[ExperimentPlan], handover: Handover) -> SimResult:
    pools = {p.name: p for p in spec.pools}
    notes: list[str] = []
    held: dict[str, list[_Node]] = {}  # pool -> nodes the campaign holds now
    done_nodes: list[_Node] = []
    windows: list[LoadWindow] = []
    phases: list[Phase] = []
    launched: dict[str, int] = {}
    busy_until: dict[str, float] = {}  # pool -> end of the node group update in flight

    t = lat.task_s  # Plan
    model_at: float | None = -math.inf if lat.model_on_volume_at_start else None
    if strategy.prefetch and model_at is None:
        model_at = t + lat.prefetch_start_s + lat.model_download_s

    for k, exp in enumerate(order):
        nxt = order[k + 1] if k + 1 < len(order) else None
        # ScalePools: a pool with an update in flight (our own restore) refuses another until it ends
        t_scale = t
        for pool in exp.nodes:
            if len(held.get(pool, [])) < exp.nodes[pool] and busy_until.get(pool, -math.inf) > t_scale:
                notes.append(f"{exp.name}: ScalePools waits {busy_until[pool] - t_scale:.0f} s for the restore "
                             f"update of pool {pool} (today's scale_pools fails with ResourceInUseException)")
                t_scale = busy_until[pool]
        t_scale += lat.task_s
        phases.append(Phase(exp.name, "scale", t, t_scale))
        nodes: list[_Node] = []
        for pool, need in exp.nodes.items():
            have = held.setdefault(pool, [])
            ps = pools[pool]
            for j in range(need - len(have)):
                launched[pool] = launched.get(pool, 0) + 1
                start = t_scale + lat.instance_launch_s
                ready = start + lat.boot_s(ps.instance_type) + j * lat.node_stagger_s
                have.append(_Node(pool, f"{pool}#{launched[pool]}", ps.instance_type, ps.gpus_per_node,
                                  start, ready, ready + lat.gpu_ready_s))
                busy_until[pool] = t_scale + lat.nodegroup_update_s
            nodes.extend(have[:need])
        capacity = _observe(t_scale, max(n.gpu_ready for n in nodes), lat)
        phases.append(Phase(exp.name, "capacity", t_scale, capacity))

        # Deploy -> CheckReady
        deploy = capacity + lat.task_s
        for n in nodes:
            if n.image_at is None:
                n.image_at = (n.ready if strategy.prepull else deploy) + lat.image_pull_s
        starts = {n.name: max(deploy, n.image_at or deploy) + lat.pod_start_s for n in nodes}
        if model_at is None:  # the first experiment's workers download the model onto the volume
            model_at = min(starts.values()) + lat.model_download_s
        serving = 0.0
        for n in nodes:
            begin = max(starts[n.name], model_at)
            serving = max(serving, begin + lat.model_read_s(n.page_cache) + lat.engine_init_s)
            n.page_cache = True
            n.used_by.append(exp.name)
        ready = _observe(deploy, serving, lat)
        phases.append(Phase(exp.name, "deploy", capacity, ready))

        # SmokeTest, warm-up, steps
        t = ready + lat.smoke_s
        phases.append(Phase(exp.name, "smoke", ready, t))
        w0 = t
        t = _observe(t, t + lat.load_job_start_s + warmup_s(spec), lat)
        phases.append(Phase(exp.name, "warmup", w0, t))
        s0 = t
        workload = None
        for s in exp.steps:
            launch = t + lat.task_s
            if strategy.runner:  # the workload's Job starts once; then the request's pick-up, AIPerf's own start
                begin = (launch + (lat.load_job_start_s if s.workload != workload else 0.0) + lat.runner_pickup_s
                         + lat.runner_step_s)
                workload = s.workload
            else:
                begin = launch + lat.load_job_start_s
            end = begin + step_load_s(s, plan.engine)
            windows.append(LoadWindow(exp.name, s.step_id, begin, end, exp.gpus))
            # runner: the end is an event (the callback's task), the ingest overlaps the next step's load
            # (AwaitLoadEnd resumes when the Job answered after its upload; CheckLoad judges)
            t = end + lat.runner_upload_s + lat.task_s if strategy.runner else _observe(launch, end, lat) + lat.ingest_s
        if strategy.runner and exp.steps:
            t += lat.ingest_s  # the last step's ingest has no next load to hide behind
        phases.append(Phase(exp.name, "steps", s0, t))

        # TeardownExperiment: stop load, delete the deployment, restore what the next one does not use
        gone = t + lat.task_s + lat.undeploy_s
        keep = {pool: n for pool, n in nxt.nodes.items() if (k, pool) in handover} if nxt is not None else {}
        for pool in list(held):
            have = held[pool]
            stay = min(len(have), keep.get(pool, 0))
            for n in have[stay:]:
                n.end = gone + lat.drain_terminate_s
                done_nodes.append(n)
            if stay < len(have):
                busy_until[pool] = gone + lat.nodegroup_update_s
            held[pool] = have[:stay]
            if not held[pool]:
                del held[pool]
        phases.append(Phase(exp.name, "teardown", t, gone + lat.task_s))
        t = gone + lat.task_s

    wall = max([t, *(n.end or t for n in done_nodes)])
    ordered = sorted(done_nodes, key=lambda n: (n.start, n.name))
    prices = {p.instance_type: (spec.pricing.instances[p.instance_type].usd_per_hour
                                if p.instance_type in spec.pricing.instances else None) for p in spec.pools}
    return SimResult(
        strategy=strategy,
        order=tuple(e.name for e in order),
        nodes=tuple(NodeInterval(n.pool, n.name, n.instance_type, n.gpus, n.start, float(n.end or n.start),
                                 tuple(n.used_by)) for n in ordered),
        windows=tuple(windows),
        phases=tuple(phases),
        wall_s=wall,
        billing_min_s=lat.billing_min_s,
        prices=prices,
        eks_usd_per_hour=spec.pricing.eks_cluster_usd_per_hour,
        notes=tuple(notes),
        kept=tuple(f"{order[k].name} -> {order[k + 1].name}: {pool}" for k, pool in sorted(handover)),
    )


def attribution(plan: CampaignPlan, spec: CampaignSpec, latencies: Latencies | None = None,
                improvements: Sequence[str] = IMPROVEMENTS) -> dict[str, SimResult]:
    """Baseline, everything on, each improvement alone, and everything but each one (same latencies)."""
    out = {"baseline": simulate(plan, spec, BASELINE, latencies),
           "improved": simulate(plan, spec, IMPROVED, latencies)}
    for name in improvements:
        out[f"only {name}"] = simulate(plan, spec, replace(BASELINE, **{name: True}), latencies)
        out[f"all but {name}"] = simulate(plan, spec, replace(IMPROVED, **{name: False}), latencies)
    return out
