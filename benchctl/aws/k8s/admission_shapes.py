"""The whole shape of every pod benchctl renders, as the admission policy ``benchctl-workloads``
(stacks/kubernetes/benchctl-admission.yaml) holds it: per container role (``<shape>/<container>``) the env names
with their values' patterns, the volume mounts, the resources, the flags a Dynamo process takes; per pod shape
the volumes. The policy carries these tables as CEL literals (:func:`cel_literal`); tests/unit/test_admission.py
holds each literal in the YAML to the table here, and the renderers' own output to the policy. The large
scripts the pods run (too long for the policy) are in the deployment's parameters (:func:`script_params`).

Pure: standard library and benchctl's renderers only. Patterns are RE2 (the API server's CEL ``matches``),
anchored at both ends.
"""

from __future__ import annotations

import re
from typing import Any

# the roles' shapes: a Job's or DaemonSet's from its containers' names, a DynamoGraphDeployment component's type
DGD_SHAPES = ("frontend", "worker", "prefill", "decode")
JOB_SHAPES = ("load", "smoke", "prefetch", "preflight-aiperf", "preflight-uploader")
SMOKE = "smoke"  # the smoke Job's shape (its step label) and container name
PREPULL_IMAGES = 4  # a pre-pull DaemonSet's containers: image-0 .. image-3 (one per runtime image of a pool)

_NAME = r"[A-Za-z0-9._-]{1,96}"
MODEL_NAME = rf"^{_NAME}/{_NAME}$"  # a Hub repository id
REVISION = r"^[A-Za-z0-9._-]{1,64}$"
SNAPSHOT = rf"^/models/hf/hub/models--{_NAME}--{_NAME}/snapshots/[A-Za-z0-9._-]{{1,64}}$"
NUMBER = r"^[0-9]{1,7}(\.[0-9]{1,6})?$"  # a mocker knob: below ten million
GIGABYTES = r"^[0-9]{1,4}(\.[0-9]{1,3})?$"  # a KVBM tier: below 10 TB
STEP = r"[a-z0-9][a-z0-9-]{0,80}"
S3 = r"s3://[a-z0-9.<>-]{3,63}"
REGION = r"^(<region>|[a-z]{2}(-[a-z]+)+-[0-9])$"

_OFFLINE = {"HF_HOME": "^/models/hf$", "HF_HUB_OFFLINE": "^1$", "TRANSFORMERS_OFFLINE": "^1$"}
_WORKER_ENV = {
    **_OFFLINE,
    # EFA (benchctl.aws.k8s.efa): libfabric's provider and KVBM's NIXL backends, NIXL's telemetry exporter
    "FI_PROVIDER": "^efa$", "FI_EFA_USE_DEVICE_RDMA": "^1$", "FI_EFA_ENABLE_SHM_TRANSFER": "^0$",
    "FI_EFA_ENABLE_SHM": "^0$", "DYN_KVBM_NIXL_BACKEND_LIBFABRIC": "^(true|false)$",
    "DYN_KVBM_NIXL_BACKEND_UCX": "^(true|false)$", "NIXL_TELEMETRY_ENABLE": "^y$",
    "NIXL_TELEMETRY_EXPORTER": "^prometheus$", "NIXL_TELEMETRY_PROMETHEUS_PORT": "^19090$",
    # KVBM (benchctl.aws.k8s.render._kvbm_env)
    "DYN_KVBM_CPU_CACHE_GB": GIGABYTES, "DYN_KVBM_DISK_CACHE_GB": GIGABYTES, "DYN_KVBM_DISK_CACHE_DIR": "^/kvbm-disk$",
    "DYN_KVBM_METRICS": "^true$",
}
_AWS_CLI = {"AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION, "HOME": "^/tmp$"}

# container role -> env name -> its value's pattern; a name not listed is refused (PYTHON*, LD_*, BROWSER, ...:
# only the two a renderer sets, each with its one value). A value the container runs as a program is in the
# parameters instead (a "pattern" not starting with ``^``: the value equals params.data[<that key>]).
ENV: dict[str, dict[str, str]] = {
    "frontend/main": dict(_OFFLINE),
    "worker/main": dict(_WORKER_ENV),
    "prefill/main": dict(_WORKER_ENV),
    "decode/main": dict(_WORKER_ENV),
    "load/aiperf": {**_OFFLINE, "BENCHCTL_RUNNER_TOKENIZER": MODEL_NAME, "BENCHCTL_RUNNER_TOKENIZER_REVISION": REVISION,
                      "PYTHONUNBUFFERED": "^1$", "HOME": "^/tmp$"},
    "load/control": {"BENCHCTL_STEPS": rf"^{STEP}( {STEP})*$",
                       "BENCHCTL_DIR": "^/artifacts$",
                       # the hand-over in the run stores' bucket, or (a rehearsal's) a local run store's path
                       "BENCHCTL_CONTROL": rf"^({S3}/runner/{STEP}|/[A-Za-z0-9._/-]{{1,300}})/{STEP}/$",
                       "BENCHCTL_RAW_PREFIX": rf"^{S3}(/[A-Za-z0-9._=-]+)*/raw/campaign_id={STEP}/experiment={STEP}/step_id=$",
                       **_AWS_CLI},
    f"{SMOKE}/smoke": {"FRONTEND_URL": r"^http://[a-z0-9-]{1,80}-frontend\.[a-z0-9-]{1,63}\.svc\.cluster\.local:8000$",
                    "MODEL": MODEL_NAME, "SMOKE_REQUESTS": "^[0-9]{1,4}$", "SMOKE_MAX_TOKENS": "^[0-9]{1,6}$",
                    # the quality check's requests: data the pinned script posts to the experiment's frontend
                    "QUALITY_REQUESTS": r"^\[.*\]$", "HOME": "^/tmp$"},
    "prefetch/prefetch": {"HF_TOKEN_PATH": "^/var/run/secrets/huggingface/token$", "HF_HOME": "^/models/hf$",
                          "MODEL": MODEL_NAME, "REVISION": REVISION, "SNAPSHOT": SNAPSHOT,
                          "PYTHONPATH": "^/tmp/benchctl-hub$", "PREFETCH_SCRIPT": "prefetchScript",
                          "PATTERNS": r"^\*\.json,\*\.txt,\*\.jinja$",
                          "MORE_MODELS": (r'^\[(\{"model":"' + _NAME + '/' + _NAME + r'","revision":"[A-Za-z0-9._-]{0,64}",'
                                          r'"snapshot":"/models/hf/hub/[A-Za-z0-9._/-]+"\},?)+\]$')},
    **{f"prepull/image-{i}": {} for i in range(PREPULL_IMAGES)},
    "preflight-aiperf/aiperf": {**_OFFLINE, "MODEL": MODEL_NAME, "REVISION": REVISION,
                                "BENCHCTL_EGRESS": r'^\{("https://[A-Za-z0-9./_:-]+": "[^"\\]*"(, )?)*\}$'},
    "preflight-uploader/uploader": {"BENCHCTL_RAW_PREFIX": rf"^{S3}/[A-Za-z0-9._/=-]{{0,300}}$",
                                    "BENCHCTL_CONTROL": rf"^({S3}/runner/{STEP}|/[A-Za-z0-9._/-]{{1,300}})/[A-Za-z0-9._/=-]{{1,300}}$",
                                    **_AWS_CLI},
}

# container role -> volume name -> "<mountPath> ro|rw"
MOUNTS: dict[str, dict[str, str]] = {
    "frontend/main": {"model-cache": "/models ro"},
    "worker/main": {"model-cache": "/models ro", "kvbm-disk": "/kvbm-disk rw"},
    "prefill/main": {"model-cache": "/models ro", "kvbm-disk": "/kvbm-disk rw"},
    "decode/main": {"model-cache": "/models ro", "kvbm-disk": "/kvbm-disk rw"},
    "load/aiperf": {"artifacts": "/artifacts rw", "model-cache": "/models ro"},
    "load/control": {"artifacts": "/artifacts rw"},
    f"{SMOKE}/smoke": {},
    # the one pod that writes the model volume, and the one that reads the token
    "prefetch/prefetch": {"model-cache": "/models rw", "hf-token": "/var/run/secrets/huggingface ro"},
    **{f"prepull/image-{i}": {} for i in range(PREPULL_IMAGES)},
    "preflight-aiperf/aiperf": {"model-cache": "/models ro"},
    "preflight-uploader/uploader": {},
}

# pod shape -> the volumes it may have (by name; each name has one kind: VOLUME_KINDS)
VOLUMES: dict[str, list[str]] = {
    "frontend": ["model-cache"], "worker": ["model-cache", "kvbm-disk"], "prefill": ["model-cache", "kvbm-disk"],
    "decode": ["model-cache", "kvbm-disk"], "load": ["artifacts", "model-cache"], "smoke": [],
    "prefetch": ["model-cache", "hf-token"], "prepull": [], "preflight-aiperf": ["model-cache"],
    "preflight-uploader": [],
}
VOLUME_KINDS = {"model-cache": "persistentVolumeClaim", "hf-token": "secret", "artifacts": "emptyDir",
                "kvbm-disk": "emptyDir"}

# container role -> the resource names it may request or limit (each within the deployment's per-pod ceilings)
RESOURCES: dict[str, list[str]] = {
    "frontend/main": ["cpu", "memory"],
    "worker/main": ["cpu", "memory", "nvidia.com/gpu"],
    # EFA interfaces: only the disaggregated workers (benchctl.aws.k8s.efa)
    "prefill/main": ["cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"],
    "decode/main": ["cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa"],
    **{role: ["cpu", "memory"] for role in ("load/aiperf", "load/control", f"{SMOKE}/smoke", "prefetch/prefetch",
                                            *(f"prepull/image-{i}" for i in range(PREPULL_IMAGES)),
                                            "preflight-aiperf/aiperf", "preflight-uploader/uploader")},
}


def _mocker_flags() -> dict[str, str]:
    from benchctl.planning.mocker import MOCKER_BOOL_FLAGS, MOCKER_VALUE_FLAGS

    words = {"--preemption-mode", "--engine-type", "--kv-transfer-timing-mode", "--kv-cache-dtype"}
    out = {flag: ("^[a-z0-9_]{1,32}$" if flag in words else NUMBER) for flag in MOCKER_VALUE_FLAGS.values()}
    out["--planner-profile-data"] = r"^/models/[A-Za-z0-9_-][A-Za-z0-9._/-]{0,300}$"  # on the read-only volume
    out.update({flag: "" for pair in MOCKER_BOOL_FLAGS.values() for flag in pair})
    return {"--model-path": SNAPSHOT, "--model-name": MODEL_NAME, "--disaggregation-mode": "^(prefill|decode)$",
            "--bootstrap-ports": "^[0-9]{1,5}$", **out}


def flags() -> dict[str, dict[str, str]]:
    """Dynamo module -> flag -> its value's pattern ("": a flag without a value; not starting with ``^``: one of
    the values in params.data[<that key>], space-separated). Any other argument is refused
    (``--trust-remote-code`` included)."""
    return {
        "dynamo.frontend": {"--http-port": "^8000$", "--router-mode": "^(kv|round-robin|random)$"},
        "dynamo.vllm": {"--model": SNAPSHOT, "--served-model-name": MODEL_NAME, "--tensor-parallel-size": "^[1-8]$",
                        "--enable-prefix-caching": "", "--disaggregation-mode": "^(prefill|decode)$",
                        "--kv-transfer-config": "kvTransferConfigs", "--kv-events-config": "kvEventsConfigs"},
        "dynamo.mocker": _mocker_flags(),
    }


def kv_configs() -> tuple[list[str], list[str]]:
    """Every ``--kv-transfer-config`` and ``--kv-events-config`` value a worker can be rendered with."""
    from benchctl.aws.k8s.common import json_arg
    from benchctl.aws.k8s.render import KV_EVENTS_CONFIG, KVBM_CONNECTOR, nixl_connector

    nixl = [nixl_connector(b) for b in (None, "UCX", "LIBFABRIC")]
    transfer = [dict(KVBM_CONNECTOR), *nixl,
                *({"kv_connector": "PdConnector", "kv_role": "kv_both",
                   "kv_connector_extra_config": {"connectors": [dict(KVBM_CONNECTOR), n]},
                   "kv_connector_module_path": "kvbm.vllm_integration.connector"} for n in nixl)]
    return sorted({json_arg(t) for t in transfer}), [json_arg(KV_EVENTS_CONFIG)]


def script_params() -> dict[str, str]:
    """The programs the pods run, exactly (the admission parameters' script keys): each container's command is
    compared with these, and the prefetch's script in its env."""
    from benchctl.aws.k8s import jobs, nodepool, prefetch, preflight_jobs
    from benchctl.planning import aiperf_args

    transfer, events = kv_configs()
    aiperf_check = preflight_jobs.PREFLIGHT_CHECKS["aiperf"].replace("{version}", aiperf_args.AIPERF_VERSION)
    with_egress = f"{aiperf_check}; {preflight_jobs.EGRESS_CHECK}"
    with_tokenizer = f"{with_egress}; {preflight_jobs.TOKENIZER_CHECK}"
    return {
        "runnerScript": jobs.runner_source(),
        "controlScript": jobs.RUNNER_CONTROL_SCRIPT,
        "smokeScript": jobs.SMOKE_SCRIPT + jobs.QUALITY_SCRIPT,
        "prefetchCommand": prefetch.PREFETCH_COMMAND,
        "prefetchScript": prefetch.PREFETCH_SCRIPT,
        "prepullScript": nodepool.PREPULL_COMMAND[2],
        "preflightAiperf": with_egress,
        "preflightAiperfTokenizer": with_tokenizer,
        "preflightAiperfWeights": f"{with_tokenizer}; {preflight_jobs.WEIGHTS_CHECK}",
        "preflightUploader": (preflight_jobs.PREFLIGHT_CHECKS["uploader"] + "\n" + preflight_jobs.UPLOADER_PATH_CHECK),
        "kvTransferConfigs": " ".join(transfer),
        "kvEventsConfigs": " ".join(events),
    }


def cel_literal(value: Any) -> str:
    """``value`` (dicts, lists, strings, ints, bools) as a CEL literal: strings single-quoted, ``\\`` and ``'``
    escaped."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{cel_literal(k)}: {cel_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(cel_literal(v) for v in value) + "]"
    raise TypeError(f"no CEL literal for {type(value).__name__}")


def cel_block(table: dict[str, Any], indent: str) -> str:
    """A table as a CEL map literal with one top-level entry per line (the policy's YAML block text)."""
    lines = [f"{indent}  {cel_literal(k)}: {cel_literal(v)}" for k, v in table.items()]
    return f"{indent}{{\n" + ",\n".join(lines) + f"\n{indent}}}"


# the policy's variables that are these tables, by name
TABLES: dict[str, Any] = {"env": ENV, "mounts": MOUNTS, "volumeNames": VOLUMES, "resourceNames": RESOURCES}


def tables() -> dict[str, Any]:
    """Every table the policy carries as a literal, by its variable's name."""
    return {**TABLES, "flags": flags()}


def pattern_problems() -> list[str]:
    """Patterns that are not anchored at both ends or do not compile."""
    out = []
    for where, table in (("env", ENV), ("flags", flags())):
        for role, names in table.items():
            for name, pattern in names.items():
                if pattern == "" or (not pattern.startswith("^") and pattern in script_params()):
                    continue
                if not (pattern.startswith("^") and pattern.endswith("$")):
                    out.append(f"{where}[{role}][{name}]: {pattern!r}")
                try:
                    re.compile(pattern)
                except re.error as err:
                    out.append(f"{where}[{role}][{name}]: {err}")
    return out


if __name__ == "__main__":  # pragma: no cover (prints the policy's table variables, to paste into the YAML)
    for name, table in tables().items():
        print(f"    - name: {name}\n      expression: |-\n{cel_block(table, '        ')}")
