"""The CPU engine: Dynamo's real vLLM worker (``python -m dynamo.vllm``) on vLLM 0.31's CPU build, run locally for an
experiment with ``engine: vllm`` on a local pool of ``gpus_per_node: 0`` (examples/engine-cpu.yaml).

The worker gets the argument list the DynamoGraphDeployment renders for EKS (``benchctl.aws.k8s.render.worker_args``),
with only what a CPU cannot do changed. Every change is in :data:`CHANGES` (what, on EKS, here, why), applied by
:func:`worker_argv` and :func:`worker_env` and nowhere else, and the run record and the report list them. Its figures
time a CPU serving a tiny random-weight model (``benchctl.local.engine_model``): SIMULATED (CPU engine), never GPU
measurements. What they do test: the worker starts from the rendered argv, answers behind the real frontend, feeds
the KV router its real KV events, and exports the real ``vllm:*`` metrics the views read on EKS.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from benchctl.spec.deployment import Experiment, ModelSpec, PoolSpec, WorkerGroup

LABEL = "SIMULATED (CPU engine)"
PRECISION = "bf16 random weights (a tiny Qwen3-MoE made offline, benchctl.local.engine_model): SIMULATED (CPU engine)"
# the engine's CPU KV cache, GiB (VLLM_CPU_KVCACHE_SPACE): 1 GiB holds ~130k tokens of the tiny model's KV
KV_CACHE_GIB = 1
# the readiness probe's wait for its one answer: the CPU build's first answer can take seconds (its first batch of a
# shape), and a probe that gives up sooner cancels it, and the next one again
FIRST_ANSWER_S = 60.0
# (what, on EKS, here, why): the whole difference between the rendered worker and the one started here
CHANGES: tuple[tuple[str, str, str, str], ...] = (
    ("--model", "the model's snapshot directory on the volume",
     "a tiny random-weight Qwen3-MoE (2 layers, 8 experts) with the model's tokenizer",
     "nothing may be downloaded, and a CPU cannot serve the model's 30B parameters"),
    ("--tensor-parallel-size", "the group's tensor_parallel", "1",
     "one CPU process; vLLM's CPU build shards over CPU sockets, not GPUs"),
    ("--kv-events-config endpoint", "tcp://*:20080 (one worker per pod)", "tcp://*:<a free port per worker>",
     "every worker shares this machine's network: one port each (the wildcard kept: vLLM binds only a wildcard "
     "endpoint; the loopback shim keeps the bind on 127.0.0.1)"),
    ("VLLM_TARGET_DEVICE", "cuda (the image)", "cpu", "vLLM's CPU build on a machine without a GPU"),
    ("VLLM_CPU_KVCACHE_SPACE", "a share of GPU memory (--gpu-memory-utilization)", f"{KV_CACHE_GIB} GiB of host memory",
     "the CPU build sizes its KV cache in host memory"),
    ("VLLM_CPU_OMP_THREADS_BIND, OMP_WAIT_POLICY", "not set (GPU kernels)",
     "one core per worker (worker n: core n modulo the cores), idle OpenMP threads sleep (PASSIVE)",
     "vLLM's CPU build binds each worker's OpenMP threads to every core and lets idle ones spin: workers sharing "
     "this machine would fight for every core"),
)


def is_cpu_engine(exp: Experiment, pools: Mapping[str, PoolSpec]) -> bool:
    """``engine: vllm`` whose workers' pools are all local CPU pools (the spec refuses a mix)."""
    mine = [pools[g.pool] for g in exp.workers if g.pool in pools]
    return exp.engine == "vllm" and bool(mine) and all(p.local_cpu for p in mine)


def any_cpu_engine(experiments: Iterable[Experiment], pools: Mapping[str, PoolSpec]) -> bool:
    return any(is_cpu_engine(e, pools) for e in experiments)


def worker_argv(model: ModelSpec, exp: Experiment, group: WorkerGroup, pool: PoolSpec, *, model_dir: Path,
                kv_events_port: int) -> list[str]:
    """The rendered ``dynamo.vllm`` arguments of the group with :data:`CHANGES` applied (and only them)."""
    from benchctl.aws.k8s.render import KV_EVENTS_CONFIG, worker_args

    # the rendered argv names the snapshot of a commit; a local spec's revision need not be one (replaced below)
    rendered = worker_args(model.model_copy(update={"revision": "0" * 40}), exp, group, pool)
    out = list(rendered)
    for flag, value in (("--model", str(model_dir)), ("--tensor-parallel-size", "1")):
        out[out.index(flag) + 1] = value
    if "--kv-events-config" in out:
        i = out.index("--kv-events-config") + 1
        want = f'"endpoint":"{KV_EVENTS_CONFIG["endpoint"]}"'
        if want not in out[i]:
            raise ValueError(f"the rendered --kv-events-config {out[i]} no longer names {want}: update CHANGES")
        # still a wildcard: vLLM BINDS tcp://*:<port> and CONNECTS to any other address, where Dynamo's publisher
        # connects too and no event flows (the loopback shim keeps the wildcard bind on 127.0.0.1)
        out[i] = out[i].replace(want, f'"endpoint":"tcp://*:{kv_events_port}"')
    return out


def process(target: Any, role: str, pool: str, *, model_dir: Path, kv_events_port: int,
            core: int) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of one worker of a role: the rendered arguments and the image's ``python3 -m dynamo.vllm``,
    with :data:`CHANGES` applied; ``target``: the deployment request's ``DeploymentTarget``."""
    from benchctl.local import engine_model

    group = next(g for g in target.experiment.workers if g.role == role and g.pool == pool)
    argv = [str(engine_model.ENGINE_PYTHON), "-m", "dynamo.vllm",
            *worker_argv(target.model, target.experiment, group, target.pool(pool), model_dir=model_dir,
                         kv_events_port=kv_events_port),
            "--discovery-backend", "file", "--request-plane", "tcp"]
    env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
           "VLLM_CPU_OMP_THREADS_BIND": str(core), "OMP_WAIT_POLICY": "PASSIVE"}
    return argv, env


def changes_text() -> str:
    """The changes as one line each (the run record's and the report's list)."""
    return "; ".join(f"{what}: {here} (on EKS: {eks}) because {why}" for what, eks, here, why in CHANGES)


def packages(python: Path) -> dict[str, str]:
    """The engine environment's own package versions (its interpreter's metadata), named as an image's are:
    vLLM's CPU build is ``vllm-cpu`` there, reported as ``vllm`` with the build said."""
    proc = subprocess.run([str(python), "-c", _VERSIONS], check=False, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin"})
    if proc.returncode != 0:
        return {"error": f"not read: {proc.stderr.strip()[-300:]}"}
    found: dict[str, str] = json.loads(proc.stdout)
    if found.get("vllm-cpu"):
        found["vllm"] = f"{found.pop('vllm-cpu')} (vllm-cpu: vLLM's CPU build)"
    return found


_VERSIONS = """
import json
from importlib.metadata import PackageNotFoundError, version
out = {}
for name in ("ai-dynamo", "ai-dynamo-runtime", "vllm-cpu", "torch", "transformers", "nixl-cu12"):
    try:
        out[name] = version(name)
    except PackageNotFoundError:
        pass
print(json.dumps(out))
"""
