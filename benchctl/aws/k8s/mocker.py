"""A mocker experiment's workers on EKS (``engine: mocker``): Dynamo's mocker on CPU nodes, no GPU.

The rehearsal of the whole AWS path before any GPU is scaled (``examples/aws-rehearsal.yaml``): the same
DynamoGraphDeployment, frontend, KV router, load runner Jobs, ingest, Athena and report as a GPU campaign,
with each worker a ``python3 -m dynamo.mocker`` process, as Dynamo's own mocker deployments run it
(ai-dynamo/dynamo ``examples/backends/mocker/deploy/v1beta1/{agg,disagg}.yaml``: the runtime image's
``dynamo.mocker``, ``--model-path`` + ``--model-name``, ``--disaggregation-mode prefill|decode``). The model
path is the prefetched snapshot on the volume (its tokenizer and config: the mocker loads no weights),
offline; the spec's ``mocker`` knobs are the local engine's (``benchctl.planning.mocker``). Its figures are the
mocker's timing model: SIMULATED, labelled so in the lake and the report.

Pure: standard library and benchctl only.
"""

from __future__ import annotations

from typing import Any

from benchctl.aws.k8s.common import MODEL_MOUNT, OFFLINE_TOKENIZER_ENV, model_snapshot_dir, model_volume
from benchctl.planning.mocker import mocker_flags
from benchctl.spec.deployment import ModelSpec, WorkerGroup
from benchctl.spec.model import Kubernetes

JSON = dict[str, Any]
# A prefill mocker listens for its decode peers' rendezvous on one port of its own pod (one worker per pod,
# so one port: dynamo.mocker's --bootstrap-ports takes one per worker)
BOOTSTRAP_PORT = 31000


def mocker_args(model: ModelSpec, mode: str, group: WorkerGroup, knobs: JSON) -> list[str]:
    """``python3 -m dynamo.mocker`` arguments of one worker group (Dynamo 1.6.1 flags)."""
    args = ["--model-path", model_snapshot_dir(model), "--model-name", model.name, *mocker_flags(knobs, group.role)]
    if mode == "disaggregated" and group.role == "prefill":
        args += ["--disaggregation-mode", "prefill", "--bootstrap-ports", str(BOOTSTRAP_PORT)]
    elif mode == "disaggregated":
        args += ["--disaggregation-mode", "decode"]
    return args


def mocker_container(model: ModelSpec, mode: str, group: WorkerGroup, knobs: JSON, k: Kubernetes) -> JSON:
    """The worker's container: the runtime image's mocker, CPU and memory only, the snapshot read-only."""
    resources = {"cpu": k.mocker_cpu, "memory": k.mocker_memory}
    return {
        "name": "main",
        "image": k.dynamo_image,
        "command": ["python3", "-m", "dynamo.mocker"],
        "args": mocker_args(model, mode, group, knobs),
        "env": [dict(e) for e in OFFLINE_TOKENIZER_ENV],
        "resources": {"limits": dict(resources), "requests": dict(resources)},
        "volumeMounts": [{**MODEL_MOUNT, "readOnly": True}],
    }


def mocker_volumes(k: Kubernetes) -> list[JSON]:
    return [model_volume(k)]
