"""Whether a sweep's SLO-edge search can reach the edge it looks for: a planning check (``benchctl validate``, the
local runner, ``benchctl start`` and the Plan state run it, with the placement check).

A search with ``concurrency: auto`` has no fixed load to start from: it probes ``search.start`` (the spec's, else
16), ramps by 2 until a load misses the SLO, then bisects the last doubling to ``resolution``. A GPU deployment's
edge can lie anywhere up to what its workers can hold at once (vLLM runs at most ``max_num_seqs`` requests per
engine; a closed loop may queue as many again): from the default start, reaching a p4d pair's edge near c=700 takes
six doublings before the first miss and three bisections after it, more probes than the default budget line. So:

* the deployment's **feasible maximum**: twice the requests its decoding workers run at once (``max_num_seqs``
  per aggregated or decode worker), capped by ``search.max_concurrency``;
* the probes a search needs: without a start, the doublings from 16 to that maximum, then the bisections of one
  doubling to the resolution; with a start (the plan's prediction: ``benchctl predict`` prints each mode's edge),
  one doubling either way of it, then the bisections;
* a search whose ``max_probes`` is fewer is refused, naming both numbers and what to set.

A sweep with fixed loads brackets the edge on its grid first (within a doubling when the grid is one); its search
only bisects, and is not checked here. Pure: the spec only.
"""

from __future__ import annotations

import math

from benchctl.spec.deployment import Experiment
from benchctl.spec.model import CampaignSpec
from benchctl.spec.workloads import ConcurrencySweep

# vLLM's default max_num_seqs (requests one engine runs at once) on a GPU under 70 GiB or any A100, i.e. on p4d's
# A100-40GB and g6e's L40S-48GB: vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (OPENAI_API_SERVER and
# LLM_CLASS contexts; 1024 on larger non-A100 GPUs). Which usage context Dynamo's worker passes was not checked:
# vLLM's SchedulerConfig falls back to 128 without one. The Dynamo mocker's default is the same 256.
VLLM_MAX_NUM_SEQS = 256
DEFAULT_START = 16  # benchctl.analysis.search.DEFAULT_START (the search's first probe without a start)
QUEUE_FACTOR = 2  # a closed loop's requests beyond the batch wait: the edge is below twice what the batch holds


def feasible_load(exp: Experiment) -> int:
    """The highest concurrency an edge of ``exp`` can lie below: twice the requests its decoding workers (aggregated
    or decode) run at once."""
    decoding = sum(g.replicas for g in exp.workers if g.role in ("worker", "decode"))
    return QUEUE_FACTOR * VLLM_MAX_NUM_SEQS * max(1, decoding)


def bisections(resolution: float) -> int:
    """Probes that bisect one doubling down to ``past <= within x (1 + resolution)`` (geometric middles)."""
    return max(0, math.ceil(math.log2(math.log(2.0) / math.log1p(resolution))))


def probes_needed(start: int | None, top: int, resolution: float) -> int:
    """Probes a search needs to locate an edge anywhere below ``top`` (module doc)."""
    if start is not None:
        return 2 + bisections(resolution)
    return 1 + max(0, math.ceil(math.log2(top / DEFAULT_START))) + bisections(resolution)


def search_problems(spec: CampaignSpec) -> list[str]:
    """Each ``concurrency: auto`` sweep whose search cannot reach an experiment's feasible maximum (module doc)."""
    problems = []
    for i, w in enumerate(spec.workloads):
        if not isinstance(w, ConcurrencySweep) or w.concurrency != "auto":
            continue
        s = w.search_settings()
        if s is None:
            continue
        for exp in spec.experiments:
            top = min(s.max_concurrency, feasible_load(exp))
            need = probes_needed(s.start, top, s.resolution)
            if s.max_probes < need:
                how = (f"from search.start {s.start} (one doubling either way, then {bisections(s.resolution)} "
                       "bisections)" if s.start is not None else
                       f"from the default start c={DEFAULT_START} up to c={top}, experiment {exp.name!r}'s feasible "
                       f"maximum (twice {VLLM_MAX_NUM_SEQS} requests per decoding worker, at most "
                       "search.max_concurrency), then to the resolution")
                problems.append(
                    f"workloads[{i}].search.max_probes: {s.max_probes} probes cannot locate the SLO edge {how} to "
                    f"{s.resolution:.0%}: that takes up to {need}; set search.start to the predicted edge (`benchctl "
                    f"predict` prints it), raise max_probes to {need}, or lower search.max_concurrency")
                break
    return problems
