"""The Job that fetches a model's files (or only the mocker's: tokenizer and config) into the shared cache before
a deployment, with a pinned Hugging Face client in its own container filesystem."""

from __future__ import annotations

import json
from collections.abc import Sequence

from benchctl.aws.k8s.common import (
    DEFAULT_DEADLINE_S,
    HF_TOKEN_MOUNT,
    MODEL_MOUNT,
    hf_env,
    hf_token_volume,
    labels,
    model_snapshot_dir,
    model_volume,
    prefetch_job_name,
)
from benchctl.aws.k8s.jobs import JSON, job_object, off_gpu_pools
from benchctl.spec.deployment import ModelSpec, PoolSpec
from benchctl.spec.model import Kubernetes

# The model prefetch: huggingface_hub pinned (the version benchctl's own environment holds and its tests run
# this script with), installed into a directory of the Job's own so that any image user can, into a slim
# Python image as Dynamo's model-caching guide does (docs/kubernetes/model-caching.md), not the >12 GB runtime
# image. snapshot_download writes the hub cache under HF_HOME; the Job fails unless the snapshot landed exactly
# where the workers serve it from (SNAPSHOT, common.model_snapshot_dir).
PREFETCH_HF_HUB = "huggingface_hub==1.33.0"


PREFETCH_LIB = "/tmp/benchctl-hub"  # in the Job's own container filesystem


PREFETCH_SCRIPT = """\
import json, os, sys
from huggingface_hub import snapshot_download
patterns = [p for p in os.environ.get("PATTERNS", "").split(",") if p] or None
todo = [(os.environ["MODEL"], os.environ["REVISION"], os.environ["SNAPSHOT"])]
todo += [(m["model"], m["revision"], m["snapshot"]) for m in json.loads(os.environ.get("MORE_MODELS") or "[]")]
for model, revision, snapshot in todo:
    path = snapshot_download(model, revision=revision, allow_patterns=patterns)
    if os.path.realpath(path) != os.path.realpath(snapshot):
        sys.exit(f"prefetch: the snapshot is at {path}, not at {snapshot} where the workers serve it")
    print(f"prefetch: {model} at {revision} is in {path}")
"""


# The prefetch's whole command, the same in every campaign: the admission policy compares it (and PREFETCH_SCRIPT, in
# the env) with the deployment's parameters (benchctl.aws.k8s.admission_shapes.script_params)
PREFETCH_COMMAND = ('python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir --root-user-action=ignore '
                    f'--target "$PYTHONPATH" "{PREFETCH_HF_HUB}" && exec python3 -c "$PREFETCH_SCRIPT"')


PREFETCH_RESOURCES = {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}


# A mocker campaign (engine: mocker) needs the model's config and tokenizer only, not its weights
MOCKER_FILES = ("*.json", "*.txt", "*.jinja")


def render_prefetch_job(model: ModelSpec, k: Kubernetes, campaign_id: str, *, weights: bool = True,
                        pools: Sequence[PoolSpec] = (), more: Sequence[ModelSpec] = ()) -> JSON:
    """Fill the model volume once per campaign (timed apart from deployment start-up): the model at
    ``model.revision`` into the hub cache under HF_HOME, the snapshot directory the workers serve and AIPerf
    reads the tokenizer from, then each of ``more`` (experiments' checkpoints: ``MORE_MODELS``) the same way. A
    slim Python image (``kubernetes.prefetch_image``) running as its own user, on a CPU node, never on the
    campaign's ``pools`` (:func:`off_gpu_pools`), with requests and limits. Without ``weights`` (a mocker
    campaign) only the config and tokenizer files (:data:`MOCKER_FILES`)."""
    lbl = labels(campaign_id, step_id="prefetch")
    pod_spec: JSON = {
        "automountServiceAccountToken": False,
        "affinity": off_gpu_pools(pools, campaign_id),
        "volumes": [model_volume(k), hf_token_volume(k)],
        "containers": [{
            "name": "prefetch",
            "image": k.prefetch_image,
            "command": ["sh", "-c", PREFETCH_COMMAND],
            "env": [*hf_env(k), {"name": "MODEL", "value": model.name}, {"name": "REVISION", "value": model.revision or ""},
                    {"name": "SNAPSHOT", "value": model_snapshot_dir(model)}, {"name": "PYTHONPATH", "value": PREFETCH_LIB},
                    {"name": "PREFETCH_SCRIPT", "value": PREFETCH_SCRIPT},
                    *([] if weights else [{"name": "PATTERNS", "value": ",".join(MOCKER_FILES)}]),
                    *([{"name": "MORE_MODELS", "value": json.dumps(
                        [{"model": m.name, "revision": m.revision or "", "snapshot": model_snapshot_dir(m)}
                         for m in more], separators=(",", ":"))}] if more else [])],
            "resources": {kind: dict(v) for kind, v in PREFETCH_RESOURCES.items()},
            # the one pod that writes the model volume, and the one that reads the token
            "volumeMounts": [dict(MODEL_MOUNT), dict(HF_TOKEN_MOUNT)],
        }],
    }
    return job_object(k.namespace, prefetch_job_name(campaign_id), lbl, pod_spec, DEFAULT_DEADLINE_S)
