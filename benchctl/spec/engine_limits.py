"""What the engines without GPUs can run, checked against the rest of a spec (part of the spec; pure: the standard
library and :mod:`benchctl.spec.bounds` only).

* A local CPU pool (``provider: local``, ``gpus_per_node: 0``: the CPU engine, or the mocker) runs every worker as
  one process with tensor parallelism 1 (``benchctl.local.cpu_engine.CHANGES``): ``tensor_parallel`` above 1 would
  be planned and reported as TP but run as 1. (An EKS CPU pool's mocker rehearses the GPU layout's rendered
  arguments, TP included, and is left alone.)
* A local pool serves the model directory the local engine generates, never the campaign model's weights: the
  mocker's (Qwen3-30B-A3B's config, ``max_position_embeddings`` 40,960) or the CPU engine's tiny model (4,096, which
  vLLM enforces as its max model length). ``model.max_context`` above the local model's would send prompts no
  local engine serves (AIPerf still builds them: a billion-token prompt is gigabytes of text).
"""

from __future__ import annotations

from typing import Any

from benchctl.spec.bounds import CPU_ENGINE_MAX_CONTEXT, LOCAL_MOCKER_MAX_CONTEXT


def engine_limit_problems(spec: Any) -> list[str]:
    """One line per place the spec (``benchctl.spec.model.CampaignSpec``) asks a GPU-less engine for more than it runs."""
    problems: list[str] = []
    pools = {p.name: p for p in spec.pools}
    cpu_engine, local = False, False
    for i, e in enumerate(spec.experiments):
        for j, g in enumerate(e.workers):
            pool = pools.get(g.pool)
            if pool is None:
                continue  # named by the pool check
            local = local or pool.provider == "local"
            cpu_engine = cpu_engine or (pool.local_cpu and e.engine == "vllm")
            if pool.local_cpu and g.tensor_parallel > 1:
                what = "the CPU engine" if e.engine == "vllm" else "the local mocker"
                problems.append(
                    f"experiments[{i}].workers[{j}].tensor_parallel: {g.tensor_parallel} on local CPU pool "
                    f"{pool.name!r}: {what} runs each worker as one process with tensor parallelism 1, so the plan and "
                    "report would say a TP it never ran; valid: 1 (add replicas for more workers)")
    if local and spec.model.max_context > LOCAL_MOCKER_MAX_CONTEXT:
        problems.append(
            f"model.max_context: {spec.model.max_context} is beyond what a local engine serves: at most "
            f"{LOCAL_MOCKER_MAX_CONTEXT} with a local pool (the local engines serve generated model directories, not "
            "the campaign model: benchctl.local.modeldir); run the longer context on EKS pools")
    for i, w in enumerate(spec.workloads if cpu_engine else []):
        isl, osl = w.max_lengths()
        if isl + osl > CPU_ENGINE_MAX_CONTEXT:
            problems.append(
                f"workloads[{i}]: its longest request ({isl} + {osl} tokens) exceeds {CPU_ENGINE_MAX_CONTEXT}, the max "
                "model length of the CPU engine's model (benchctl.local.engine_model), which vLLM enforces; valid: "
                f"isl + osl at most {CPU_ENGINE_MAX_CONTEXT} on the CPU engine")
    return problems
