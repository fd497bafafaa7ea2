"""Renders vLLM 0.31.0's NIXL connector metrics as its own code exposes them (not run by the tests).

``vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats.NixlPromMetrics`` (the class a vLLM worker with the
NIXL connector registers) on prometheus_client's registry, fed by ``NixlKVConnectorStats`` with MADE-UP transfers:
48 prefill -> decode transfers of 1-16 MiB in 4-40 ms, 1 failed notification. Names, types, help texts, labels
and buckets are vLLM's; the numbers are not a measurement. Run with the CPU engine's environment:

    .venv-engine/bin/python tests/data/recorded/render_vllm_nixl.py > /tmp/nixl.prom
"""

import random
from types import SimpleNamespace

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest
from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlKVConnectorStats, NixlPromMetrics

LABELS = ["model_name", "engine"]  # vllm/v1/metrics/loggers.py: every vLLM metric's label names
VALUES = {0: ["Qwen/Qwen3-30B-A3B", "0"]}

metrics = NixlPromMetrics(SimpleNamespace(kv_transfer_config=None), {Gauge: Gauge, Counter: Counter, Histogram: Histogram},
                          LABELS, VALUES)
rng = random.Random(1234)
stats = NixlKVConnectorStats()
for _ in range(48):
    mib = rng.choice([1, 2, 4, 8, 16])
    stats.record_transfer(SimpleNamespace(xferDuration=rng.uniform(4e3, 40e3), postDuration=rng.uniform(50, 900),
                                          totalBytes=mib * 2**20, descCount=mib * 16))
stats.record_failed_notification()
metrics.observe(stats.data)
text = generate_latest(REGISTRY).decode()
print("\n".join(line for line in text.splitlines() if "nixl" in line))
