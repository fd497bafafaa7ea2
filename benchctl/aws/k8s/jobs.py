"""The Jobs of a campaign: a load runner per workload of an experiment (and the warm-up), the smoke test, the model prefetch, and the
preflight's image checks. Pure: standard library and benchctl only."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from benchctl import aiperf_args
from benchctl.aws.k8s.common import (
    ARTIFACTS,
    DEFAULT_DEADLINE_S,
    DO_NOT_DISRUPT,
    JOB_TTL_S,
    MODEL_MOUNT,
    OFFLINE_TOKENIZER_ENV,
    PREFLIGHT_DEADLINE_S,
    aiperf_image,
    hf_env,
    job_name,
    labels,
    meta,
    model_snapshot_dir,
    model_volume,
    prefetch_job_name,
    preflight_job_name,
)
from benchctl.quality import spec_requests
from benchctl.spec import CampaignSpec, Kubernetes, ModelSpec

JSON = dict[str, Any]


def _job(namespace: str, name: str, lbl: dict[str, str], pod_spec: JSON, deadline_s: int) -> JSON:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, lbl, namespace),
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": JOB_TTL_S,
            "activeDeadlineSeconds": deadline_s,
            "template": {"metadata": {"labels": dict(lbl)}, "spec": {"restartPolicy": "Never", **pod_spec}},
        },
    }


def _with_artifact_dir(argv: list[str], path: str) -> list[str]:
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--artifact-dir" and i + 1 < len(out):
            out[i + 1] = path
            return out
        if a.startswith("--artifact-dir="):
            out[i] = f"--artifact-dir={path}"
            return out
    return [*out, "--artifact-dir", path]


# Values come from the environment, so the script is one constant (nothing to quote).
SMOKE_SCRIPT = """\
import json, os, sys, urllib.request
url = os.environ["FRONTEND_URL"].rstrip("/")
model = os.environ["MODEL"]
n, max_tokens = int(os.environ["SMOKE_REQUESTS"]), int(os.environ["SMOKE_MAX_TOKENS"])
for i in range(n):
    body = {"model": model, "max_tokens": max_tokens, "stream": False,
            "messages": [{"role": "user", "content": f"Smoke test {i}: say hello."}]}
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.load(r)
    if not out.get("choices"):
        sys.exit(f"smoke request {i}: no choices in the answer: {out}")
    print(f"smoke request {i}: ok ({(out.get('usage') or {}).get('completion_tokens')} tokens)")
with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
    text = r.read().decode()
if "dynamo_frontend" not in text:
    sys.exit("smoke: /metrics has no dynamo_frontend_* series")
print(f"smoke: {n} requests ok, /metrics ok")
"""
# The output-quality questions (QUALITY_REQUESTS: [{"id", "body"}], rendered from the spec by
# benchctl.quality), after the smoke requests: one log line per answer, benchctl.quality.LOG_MARK then JSON
# {"id", "content" (the last 1000 characters answered outside a thinking block), "finish_reason"} or
# {"id", "error"}. Scored by benchctl from the Job's log (benchctl.quality.score), never here.
QUALITY_SCRIPT = """\
import re
for q in json.loads(os.environ.get("QUALITY_REQUESTS") or "[]"):
    out = {"id": q["id"]}
    try:
        req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(q["body"]).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            choice = (json.load(r).get("choices") or [{}])[0]
        text = (choice.get("message") or {}).get("content") or ""
        out["content"] = re.sub(r"<think>.*?(?:</think>|$)", "", text, flags=re.S)[-1000:]
        out["finish_reason"] = choice.get("finish_reason")
    except Exception as e:
        out["error"] = str(e)[:300]
    print("BENCHCTL_QUALITY " + json.dumps(out), flush=True)
"""


def render_smoke_job(spec: CampaignSpec, campaign_id: str, experiment: str, frontend_url: str) -> JSON:
    """A Job sending ``smoke.requests`` chat completions and reading ``/metrics`` (fails on any error), then
    the output-quality questions, whose answers it logs (:data:`QUALITY_SCRIPT`)."""
    lbl = labels(campaign_id, experiment, "smoke")
    pod_spec: JSON = {"automountServiceAccountToken": False, "containers": [{
        "name": "smoke",
        "image": aiperf_image(spec.kubernetes),
        "command": ["python3", "-c", SMOKE_SCRIPT + QUALITY_SCRIPT],
        "env": [
            {"name": "FRONTEND_URL", "value": frontend_url},
            {"name": "MODEL", "value": spec.model.name},
            {"name": "SMOKE_REQUESTS", "value": str(spec.smoke.requests)},
            {"name": "SMOKE_MAX_TOKENS", "value": str(spec.smoke.max_tokens)},
            {"name": "QUALITY_REQUESTS", "value": json.dumps(spec_requests(spec), separators=(",", ":"))},
        ],
        "resources": {"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "1", "memory": "512Mi"}},
    }]}
    return _job(spec.kubernetes.namespace, job_name(campaign_id, experiment, "smoke"), lbl, pod_spec, 900)


# The model prefetch: huggingface_hub pinned (the version benchctl's own environment holds and its tests run
# this script with), installed into a directory of the Job's own so that any image user can, into a slim
# Python image as Dynamo's model-caching guide does (docs/kubernetes/model-caching.md), not the >12 GB runtime
# image. snapshot_download writes the hub cache under HF_HOME; the Job fails unless the snapshot landed exactly
# where the workers serve it from (SNAPSHOT, common.model_snapshot_dir).
PREFETCH_HF_HUB = "huggingface_hub==1.33.0"
PREFETCH_LIB = "/tmp/benchctl-hub"  # in the Job's own container filesystem
PREFETCH_SCRIPT = """\
import os, sys
from huggingface_hub import snapshot_download
patterns = [p for p in os.environ.get("PATTERNS", "").split(",") if p] or None
path = snapshot_download(os.environ["MODEL"], revision=os.environ["REVISION"], allow_patterns=patterns)
if os.path.realpath(path) != os.path.realpath(os.environ["SNAPSHOT"]):
    sys.exit(f"prefetch: the snapshot is at {path}, not at {os.environ['SNAPSHOT']} where the workers serve it")
print(f"prefetch: {os.environ['MODEL']} at {os.environ['REVISION']} is in {path}")
"""
PREFETCH_RESOURCES = {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
# A mocker campaign (engine: mocker) needs the model's config and tokenizer only, not its weights
MOCKER_FILES = ("*.json", "*.txt", "*.jinja")


def render_prefetch_job(model: ModelSpec, k: Kubernetes, campaign_id: str, *, weights: bool = True) -> JSON:
    """Fill the model volume once per campaign (timed apart from deployment start-up): the model at
    ``model.revision`` into the hub cache under HF_HOME, the snapshot directory the workers serve and AIPerf
    reads the tokenizer from. A slim Python image (``kubernetes.prefetch_image``) running as its own user, on a
    CPU node (no GPU toleration), with requests and limits. Without ``weights`` (a mocker campaign) only the
    config and tokenizer files (:data:`MOCKER_FILES`)."""
    lbl = labels(campaign_id, step_id="prefetch")
    install = ('python3 -m pip install --quiet --disable-pip-version-check --no-cache-dir --root-user-action=ignore '
               f'--target "$PYTHONPATH" "{PREFETCH_HF_HUB}"')
    pod_spec: JSON = {
        "automountServiceAccountToken": False,
        "volumes": [model_volume(k)],
        "containers": [{
            "name": "prefetch",
            "image": k.prefetch_image,
            "command": ["sh", "-c", f'{install} && exec python3 -c "$PREFETCH_SCRIPT"'],
            "env": [*hf_env(k), {"name": "MODEL", "value": model.name}, {"name": "REVISION", "value": model.revision or ""},
                    {"name": "SNAPSHOT", "value": model_snapshot_dir(model)}, {"name": "PYTHONPATH", "value": PREFETCH_LIB},
                    {"name": "PREFETCH_SCRIPT", "value": PREFETCH_SCRIPT},
                    *([] if weights else [{"name": "PATTERNS", "value": ",".join(MOCKER_FILES)}])],
            "resources": {kind: dict(v) for kind, v in PREFETCH_RESOURCES.items()},
            "volumeMounts": [dict(MODEL_MOUNT)],
        }],
    }
    job = _job(k.namespace, prefetch_job_name(campaign_id), lbl, pod_spec, DEFAULT_DEADLINE_S)
    job["spec"]["template"]["metadata"]["annotations"] = dict(DO_NOT_DISRUPT)  # Auto Mode: not drained mid-download
    return job


# The preflight's image checks: each prints its tool's version; the check script compares it with what
# benchctl needs, so a Job that succeeds proves the image runs and holds the right tool, on a CPU node
# (no GPU toleration), with the load Jobs' service account, before any pool is scaled.
PREFLIGHT_CHECKS: dict[str, str] = {
    # AIPerf's own version string is the package's; the Job fails unless it is the one we parse for
    "aiperf": ('v="$(aiperf --version 2>&1 | tail -n 1)"; echo "aiperf --version: $v"; '
               'case "$v" in *"{version}"*) ;; *) echo "need aiperf {version}" >&2; exit 3;; esac'),
    # the uploader runs `aws s3 cp`: AWS CLI v2, and credentials from Pod Identity for the service account
    "uploader": ('v="$(aws --version 2>&1)"; echo "aws --version: $v"; '
                 'case "$v" in aws-cli/2.*) ;; *) echo "need AWS CLI v2" >&2; exit 3;; esac; '
                 'aws sts get-caller-identity --query Arn --output text || exit 4'),
}


# Without a model prefetch the volume must already hold the model: the AIPerf check then also loads the
# tokenizer as the load Jobs will, offline from the volume at the pinned revision (AIPerf's own loader).
TOKENIZER_CHECK = ("python3 -c 'import os; from aiperf.common.tokenizer import Tokenizer; "
                   "Tokenizer.from_pretrained(os.environ[\"MODEL\"], revision=os.environ[\"REVISION\"]); "
                   "print(\"tokenizer\", os.environ[\"MODEL\"], os.environ[\"REVISION\"], \"read offline\")' || exit 5")


def cpu_node_affinity(spec: CampaignSpec) -> JSON:
    """Required node affinity to nodes that are not GPU nodes: not of the spec's node groups, and not labelled
    as having NVIDIA GPUs (GPU feature discovery's ``nvidia.com/gpu.present``). ``NotIn`` also matches nodes
    without the label, so any CPU node qualifies. (Our Auto Mode NodePools do not exist yet at preflight, and
    their nodes are tainted.)"""
    groups = sorted({p.nodegroup for p in spec.pools if p.provider == "managed-nodegroup" and p.nodegroup})
    terms = [{"key": "nvidia.com/gpu.present", "operator": "NotIn", "values": ["true"]}]
    terms += [{"key": "eks.amazonaws.com/nodegroup", "operator": "NotIn", "values": groups}] if groups else []
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": terms}]}}}


def render_preflight_job(spec: CampaignSpec, campaign_id: str, check: str) -> JSON:
    """A short CPU Job proving one image before anything is scaled (``check`` in PREFLIGHT_CHECKS)."""
    image = {"aiperf": aiperf_image(spec.kubernetes), "uploader": spec.kubernetes.uploader_image}[check]
    script = PREFLIGHT_CHECKS[check].replace("{version}", aiperf_args.AIPERF_VERSION)
    # the AIPerf check asks what a load runner's AIPerf container asks (kubernetes.load_cpu/load_memory), on a
    # node no GPU pool of the spec owns: that it runs proves a runner fits on a CPU node of the cluster
    resources = ({"cpu": spec.kubernetes.load_cpu, "memory": spec.kubernetes.load_memory} if check == "aiperf"
                 else {"cpu": "500m", "memory": "1Gi"})
    container: JSON = {"name": check, "image": image, "command": ["sh", "-c", script],
                       "resources": {"limits": dict(resources), "requests": dict(resources)}}
    pod_spec: JSON = {
        "serviceAccountName": spec.kubernetes.load_service_account,
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if check == "aiperf":
        pod_spec["affinity"] = cpu_node_affinity(spec)
    if check == "aiperf" and not spec.kubernetes.prefetch_model:
        container["command"][2] = f"{script}; {TOKENIZER_CHECK}"
        container["env"] = [*(dict(e) for e in OFFLINE_TOKENIZER_ENV), {"name": "MODEL", "value": spec.model.name},
                            {"name": "REVISION", "value": spec.model.revision or "main"}]
        container["volumeMounts"] = [{**MODEL_MOUNT, "readOnly": True}]
        pod_spec["volumes"] = [model_volume(spec.kubernetes)]
    lbl = labels(campaign_id, step_id=f"preflight-{check}")
    return _job(spec.kubernetes.namespace, preflight_job_name(campaign_id, check), lbl, pod_spec, PREFLIGHT_DEADLINE_S)


# --------------------------------------------------------------------------------------- the load runner

# The control container of a load runner Job (AWS CLI v2 image; values from its environment, so the script
# is one constant): for each step in order, wait for the step's request in the run store (LaunchLoad writes
# it after the budget guard), fetch the step's kept inputs, hand both to the runner (an atomic rename);
# while AIPerf runs, answer the step's task token (AwaitLoadEnd stores it) with heartbeats, and give up if
# the runner stopped beating; when the step's exit code appears, upload its artifacts, write the step's end
# record (CheckLoad reads it), answer the task token (Step Functions resumes at once), free the space.
# 95: the runner died; 96: the inputs could not be fetched; 97: the upload or the end record failed.
# POSIX sh and coreutils only (the AWS CLI image is a minimal Amazon Linux: no jq, no Python of its own).
RUNNER_CONTROL_SCRIPT = """\
set -u
token() {
  t=$(aws s3 cp --quiet "${BENCHCTL_CONTROL}$1/token.json" - 2>/dev/null) || return 0
  t=${t#*'"token":'}
  t=${t#*'"'}
  printf '%s' "${t%%'"'*}"
}
for step in $BENCHCTL_STEPS; do
  d="$BENCHCTL_DIR/$step"
  mkdir -p "$d"
  until aws s3 cp --quiet "${BENCHCTL_CONTROL}$step/request.json" "$d/request.part" 2>/dev/null; do
    sleep 1
  done
  aws s3 cp --quiet --recursive "${BENCHCTL_RAW_PREFIX}$step/inputs/" "$d/inputs/" || exit 96
  mv "$d/request.part" "$d/request.json"
  n=0
  while [ ! -e "$d/exit_code" ]; do
    sleep 1
    n=$((n + 1))
    if [ $((n % 20)) -eq 0 ]; then
      now=$(date +%s)
      beat=$(stat -c %Y "$BENCHCTL_DIR/alive" 2>/dev/null || echo "$now")
      if [ $((now - beat)) -gt 60 ]; then echo "the AIPerf runner stopped beating"; exit 95; fi
      t=$(token "$step")
      [ -n "$t" ] && aws stepfunctions send-task-heartbeat --task-token "$t" >/dev/null 2>&1
    fi
  done
  aws s3 cp --quiet --recursive "$d/out" "${BENCHCTL_RAW_PREFIX}$step/" || exit 97
  printf '{"exit_code": %s, "ended_at": %s}' "$(cat "$d/exit_code")" "$(date +%s)" \\
    | aws s3 cp --quiet - "${BENCHCTL_CONTROL}$step/end.json" || exit 97
  t=$(token "$step")
  [ -n "$t" ] && aws stepfunctions send-task-success --task-token "$t" --task-output '{"woken": "load ended"}' \\
    >/dev/null 2>&1
  rm -rf "$d"
done
"""


def runner_source() -> str:
    """The load runner's source (``benchctl/load_runner.py``), run with ``python3 -c`` in the load image."""
    from importlib.resources import files

    return files("benchctl").joinpath("load_runner.py").read_text(encoding="utf-8")


def runner_step_dir(step_id: str) -> str:
    """Where a runner Job keeps one step: its request, inputs (``inputs/<name>``) and artifacts (``out``)."""
    return f"{ARTIFACTS}/{step_id}"


# A runner Job's own deadline beyond its steps' (estimate + load grace each): its pod's start, image pull,
# each step's hand-over. A backstop, not the rule (CheckLoad and the runner bound every step).
RUNNER_SLACK_S = 1800


def runner_deadline_s(est_total_s: float, steps: int, grace_s: float) -> int:
    """``activeDeadlineSeconds`` of a runner Job whose ``steps`` are estimated at ``est_total_s`` together."""
    return int(est_total_s + grace_s * steps + RUNNER_SLACK_S)


def runner_request(step_id: str, argv: list[str], est_s: float, grace_s: float, input_uri: str | None = None) -> JSON:
    """What a step asks of its runner Job (the run store's ``request.json``): AIPerf's argv in the Job's paths
    (artifacts to ``<step dir>/out``; the step's kept input, named by ``input_uri``, from ``<step dir>/inputs``)
    and the step's deadline (its estimate + the load grace)."""
    local = runner_step_dir(step_id)
    argv = _with_artifact_dir(list(argv), f"{local}/out")
    if input_uri is not None:
        path = f"{local}/inputs/{posixpath.basename(input_uri.rstrip('/'))}"
        argv = [a.replace(input_uri, path) for a in argv]
    return {"argv": argv, "deadline_s": est_s + grace_s}


def raw_prefix(artifact_uri: str, step_id: str) -> str:
    """The prefix every step's raw area of an experiment shares (``…/step_id=``), from one step's."""
    if not artifact_uri.startswith("s3://") or not artifact_uri.endswith(f"={step_id}/"):
        raise ValueError(f"step {step_id}: artifacts go to an S3 prefix ending in '={step_id}/', not {artifact_uri!r}")
    return artifact_uri[: -len(f"{step_id}/")]


def render_runner_job(spec: CampaignSpec, campaign_id: str, experiment: str, group: str, steps: list[str],
                      raw_prefix: str, control_uri: str, region: str, *, active_deadline_s: int) -> JSON:
    """One Job running a workload's steps back to back (``steps`` in order): the load runner in the load
    image (``python3 -c`` of :func:`runner_source`, ``--steps-dir``), paying AIPerf's imports, tokenizer
    load and corpus tokenization once, and the control container (:data:`RUNNER_CONTROL_SCRIPT`). A step's
    artifacts go to ``<raw_prefix><step>/``, its request, task token and end record live under
    ``<control_uri><step>/``. The AWS CLI needs the Region for Step Functions (``region``).

    No Kubernetes API token is mounted (``automountServiceAccountToken: false``): the Job needs none (S3
    and the task-token answers come from EKS Pod Identity, the load Job role, which injects its own
    credentials), and AIPerf's in-cluster metrics discovery, which would list every inference pod of the
    namespace (other campaigns' too, and the frontend a second time), finds nothing; the workers'
    endpoints are given with ``--server-metrics``."""
    k = spec.kubernetes
    lbl = labels(campaign_id, experiment, group)
    mount = [{"name": "artifacts", "mountPath": ARTIFACTS}]
    resources = {"cpu": k.load_cpu, "memory": k.load_memory}
    env_tokenizer = [{"name": "BENCHCTL_RUNNER_TOKENIZER", "value": spec.model.name}]
    if spec.model.revision:
        env_tokenizer.append({"name": "BENCHCTL_RUNNER_TOKENIZER_REVISION", "value": spec.model.revision})
    pod_spec: JSON = {
        "serviceAccountName": k.load_service_account,
        "automountServiceAccountToken": False,
        "volumes": [{"name": "artifacts", "emptyDir": {}}, model_volume(spec.kubernetes)],
        "containers": [
            {
                "name": "aiperf",
                "image": aiperf_image(spec.kubernetes),
                "command": ["python3", "-c", runner_source(), "--steps-dir", ARTIFACTS, *steps],
                "env": [*(dict(e) for e in OFFLINE_TOKENIZER_ENV), *env_tokenizer,
                        {"name": "PYTHONUNBUFFERED", "value": "1"}],
                "resources": {"limits": dict(resources), "requests": dict(resources)},
                "volumeMounts": [*(dict(m) for m in mount), {**MODEL_MOUNT, "readOnly": True}],
            },
            {
                "name": "control",
                "image": k.uploader_image,
                "command": ["sh", "-c", RUNNER_CONTROL_SCRIPT],
                "env": [{"name": "BENCHCTL_STEPS", "value": " ".join(steps)},
                        {"name": "BENCHCTL_DIR", "value": ARTIFACTS},
                        {"name": "BENCHCTL_CONTROL", "value": control_uri},
                        {"name": "BENCHCTL_RAW_PREFIX", "value": raw_prefix},
                        {"name": "AWS_REGION", "value": region},
                        {"name": "AWS_DEFAULT_REGION", "value": region}],
                "volumeMounts": [dict(m) for m in mount],
            },
        ],
    }
    return _job(k.namespace, job_name(campaign_id, experiment, group), lbl, pod_spec, active_deadline_s)
