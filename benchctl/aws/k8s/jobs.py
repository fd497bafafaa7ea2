"""The Jobs of a campaign: a load runner per workload of an experiment (and the warm-up), the smoke test, and the
preflight's image checks (the model prefetch: :mod:`benchctl.aws.k8s.prefetch`). Pure: standard library and benchctl only."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from typing import Any

from benchctl.analysis.quality import spec_requests
from benchctl.aws.k8s.common import (
    ARTIFACTS,
    DO_NOT_DISRUPT,
    JOB_TTL_S,
    MODEL_MOUNT,
    OFFLINE_TOKENIZER_ENV,
    aiperf_image,
    job_name,
    labels,
    meta,
    model_volume,
    off_campaign_pools,
    runner_service_account,
)
from benchctl.spec.deployment import PoolSpec
from benchctl.spec.model import CampaignSpec

JSON = dict[str, Any]


def job_object(namespace: str, name: str, lbl: dict[str, str], pod_spec: JSON, deadline_s: int,
               annotations: dict[str, str] | None = None) -> JSON:
    """A batch/v1 Job of ours: one try, removed a while after it ends, bounded by ``deadline_s``; its pod
    template carries ``annotations`` beside Karpenter's do-not-disrupt."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, lbl, namespace),
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": JOB_TTL_S,
            "activeDeadlineSeconds": deadline_s,
            # Auto Mode's consolidation evicts pods of under-used nodes: a runner Job holds a whole workload
            "template": {"metadata": {"labels": dict(lbl), "annotations": {**DO_NOT_DISRUPT, **(annotations or {})}},
                         "spec": {"restartPolicy": "Never", **pod_spec}},
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


# The pod annotation by which EKS Pod Identity leaves containers without AWS credentials: its webhook adds
# neither the credentials' environment nor the token volume to the containers it names
# (aws/amazon-eks-pod-identity-webhook pkg/handler/handler.go getContainersToSkip, both for IRSA and Pod
# Identity's container credentials; README "skip-containers")
SKIP_CONTAINERS = "eks.amazonaws.com/skip-containers"


# The load image's user (``USER 10001`` in stacks/images/load/Dockerfile). A runner Job's pod runs both its
# containers as this user (``pod_security``): they share the step directories of one emptyDir, and a directory
# one container creates belongs to its user (the AWS CLI image has no USER: root, 0755).
LOAD_UID = 10001
# The control container (AWS CLI v2): a few commands at a time, one upload per step; the pod stays Guaranteed
CONTROL_RESOURCES = {"cpu": "250m", "memory": "512Mi"}
CONTROL_HOME = "/tmp"  # the CLI's home (~/.aws): the image's /root is not this user's


# The runner's emptyDir holds one step at a time (its request, inputs and AIPerf's artifacts; the control container
# removes a step's directory once uploaded): bounded, as the admission policy asks of every emptyDir, far above a
# step's artifacts (AIPerf's per-request export of a long sweep is tens of MB)
ARTIFACTS_SIZE_LIMIT = "20Gi"


def pod_security() -> JSON:
    """One user for every container of a load runner or preflight pod (the load image's), whose group also
    owns the pod's volumes (``fsGroup``), under the container runtime's default seccomp profile (Kubernetes' Pod
    Security "restricted" profile, with :func:`container_security`)."""
    return {"runAsUser": LOAD_UID, "runAsGroup": LOAD_UID, "runAsNonRoot": True, "fsGroup": LOAD_UID,
            # a volume already owned by the group is not walked again (the model volume is large)
            "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"}}


def container_security() -> JSON:
    """What the "restricted" profile asks of each container of a runner or preflight pod: no privilege
    escalation (no setuid binary gives AIPerf's process more than the load image's user) and every capability
    dropped."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def off_gpu_pools(pools: Sequence[PoolSpec], campaign_id: str) -> JSON:
    """The node affinity that keeps a CPU pod (load runner, smoke test, prefetch, preflight, the Frontend) on the
    CPU pool and off this campaign's pools: not on their managed node groups (``eks.amazonaws.com/nodegroup``),
    not on any campaign's Auto Mode NodePool, not on a GPU node whoever runs it
    (:func:`benchctl.aws.k8s.common.cpu_node_affinity`). Such a pod never tolerates the GPU taint."""
    return off_campaign_pools(pools, campaign_id)


def cpu_pod(spec: CampaignSpec, campaign_id: str, pod_spec: JSON) -> JSON:
    return {**pod_spec, "affinity": off_gpu_pools(spec.pools, campaign_id)}


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
# benchctl.analysis.quality), after the smoke requests: one log line per answer, benchctl.analysis.quality.LOG_MARK then JSON
# {"id", "content" (the last 1000 characters answered outside a thinking block), "finish_reason"} or
# {"id", "error"}. Scored by benchctl from the Job's log (benchctl.analysis.quality.score), never here.
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
    the output-quality questions, whose answers it logs (:data:`QUALITY_SCRIPT`); on a CPU node, never on one
    of the campaign's GPU pools (:func:`off_gpu_pools`). It meets Pod Security "restricted" as the load runners
    do (the same image, as its user: :func:`pod_security`)."""
    lbl = labels(campaign_id, experiment, "smoke")
    pod_spec: JSON = {"automountServiceAccountToken": False, "securityContext": pod_security(), "containers": [{
        "name": "smoke",
        "image": aiperf_image(spec.kubernetes),
        "command": ["python3", "-c", SMOKE_SCRIPT + QUALITY_SCRIPT],
        "env": [
            {"name": "FRONTEND_URL", "value": frontend_url},
            {"name": "MODEL", "value": spec.model.name},
            {"name": "SMOKE_REQUESTS", "value": str(spec.smoke.requests)},
            {"name": "SMOKE_MAX_TOKENS", "value": str(spec.smoke.max_tokens)},
            {"name": "QUALITY_REQUESTS", "value": json.dumps(spec_requests(spec), separators=(",", ":"))},
            {"name": "HOME", "value": CONTROL_HOME},
        ],
        "resources": {"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "1", "memory": "512Mi"}},
        "securityContext": container_security(),
    }]}
    return job_object(spec.kubernetes.namespace, job_name(campaign_id, experiment, "smoke"), lbl,
                cpu_pod(spec, campaign_id, pod_spec), 900)


def aws_cli_env(region: str) -> list[JSON]:
    """The AWS CLI's Region (Step Functions needs one) and a home this user may write (:data:`CONTROL_HOME`)."""
    return [{"name": "AWS_REGION", "value": region}, {"name": "AWS_DEFAULT_REGION", "value": region},
            {"name": "HOME", "value": CONTROL_HOME}]


# --------------------------------------------------------------------------------------- the load runner

# The control container of a load runner Job (AWS CLI v2 image, run as the load image's user; values from its
# environment, so the script is one constant): for each step in order, wait for the step's request in the
# campaign's hand-over, runner/<campaign>/ (LaunchLoad writes it after the budget guard, and the step's end
# key before it, in key.json), read the key into this shell only, fetch the step's kept inputs, hand the
# request and inputs to the runner (an atomic rename); while AIPerf runs, answer the
# step's task token (AwaitLoadEnd stores it) with heartbeats, and give up if the runner ended or stopped
# beating; when the step's exit code appears, upload its artifacts, write the step's end record signed with
# its key (`signed`: HMAC-SHA256 from sha256sum; CheckLoad verifies it), answer the task token (Step Functions
# resumes at once), free the space.
# Every other way out (`finish`): the runner told (`control.ended`, it stops too, so the pod ends), the step
# in flight given an end record naming why, and its task token answered with SendTaskFailure (the error
# below and its cause), so the state machine learns it at once, not at the heartbeat's end. Exit codes
# and errors: 95 LoadRunnerDied (the runner ended, `runner.ended`, or stopped beating), 96
# LoadInputsUnavailable, 97 LoadUploadFailed (artifacts or end record), 143 LoadRunnerStopped (SIGTERM: the
# Job deleted; the trap ends a wait at once instead of the kubelet's grace).
# POSIX sh, coreutils and sed only (the AWS CLI image is a minimal Amazon Linux 2: no Python of its own).
RUNNER_CONTROL_SCRIPT = """\
set -u
step="" launched=0 error="" cause="" key=""
poll=${BENCHCTL_POLL_S:-1}  # the hand-over's poll period, s (the Job leaves it unset; a test shortens it)
# HMAC-SHA256 (RFC 2104) with sha256sum: the step's end record is signed with the key its request carries
hexbytes() {
  printf '%s\\n' "$1" | fold -w2 | while read -r h; do printf "\\\\$(printf '%03o' "$((0x$h))")"; done
}
keypad() {
  k=$1 i=0
  while [ "$i" -lt 64 ]; do
    b=${k%"${k#??}"}
    k=${k#??}
    printf '%02x' "$((0x${b:-00} ^ $2))"
    i=$((i + 1))
  done
}
hmac() {
  inner=$({ hexbytes "$(keypad "$1" 54)"; cat; } | sha256sum | cut -c1-64)
  { hexbytes "$(keypad "$1" 92)"; hexbytes "$inner"; } | sha256sum | cut -c1-64
}
signed() {
  sig=$(printf '%s' "$1" | hmac "$key")
  printf '%s, "hmac": "%s"}' "${1%\\}}" "$sig"
}
token() {
  t=$(aws s3 cp --quiet "${BENCHCTL_CONTROL}$1/token.json" - 2>/dev/null) || return 0
  t=${t#*'"token":'}
  t=${t#*'"'}
  printf '%s' "${t%%'"'*}"
}
fail() {
  error=$2 cause=$3
  echo "[benchctl] $error: $cause"
  exit "$1"
}
finish() {
  rc=$?
  trap '' TERM
  [ "$rc" -eq 0 ] && return
  [ -n "$error" ] || { error=LoadRunnerFailed; cause="the control container exited $rc"; }
  printf '%s %s\\n' "$rc" "$error" > "$BENCHCTL_DIR/control.ended" 2>/dev/null
  [ -n "$step" ] || return
  if [ "$launched" -eq 1 ]; then
    why=$(printf '%s' "$cause" | tr '\\000-\\037' ' ' | sed 's/\\\\/\\\\\\\\/g; s/"/\\\\"/g' | cut -c1-4000)
    signed "$(printf '{"exit_code": %s, "ended_at": %s, "step": "%s", "error": "%s", "cause": "%s"}' "$rc" \\
      "$(date +%s)" "$step" "$error" "$why")" | aws s3 cp --quiet - "${BENCHCTL_CONTROL}$step/end.json" >/dev/null 2>&1
  fi
  t=$(token "$step")
  [ -n "$t" ] && aws stepfunctions send-task-failure --task-token "$t" --error "$error" \\
    --cause "step $step: $(printf '%s' "$cause" | cut -c1-30000)" >/dev/null 2>&1
}
runner_gone() {
  if [ -e "$BENCHCTL_DIR/runner.ended" ]; then
    fail 95 LoadRunnerDied "the AIPerf runner ended: $(tail -c 3000 "$BENCHCTL_DIR/runner.ended")"
  fi
  now=$(date +%s)
  beat=$(stat -c %Y "$BENCHCTL_DIR/alive" 2>/dev/null || echo "$now")
  if [ $((now - beat)) -gt 60 ]; then
    fail 95 LoadRunnerDied "the AIPerf runner stopped beating $((now - beat)) s ago"
  fi
}
trap finish EXIT
trap 'fail 143 LoadRunnerStopped "the runner Job was stopped (SIGTERM)"' TERM
for step in $BENCHCTL_STEPS; do
  d="$BENCHCTL_DIR/$step"
  mkdir -p "$d" || fail 95 LoadRunnerDied "cannot create $d"
  until aws s3 cp --quiet "${BENCHCTL_CONTROL}$step/request.json" "$d/request.part" 2>/dev/null; do
    runner_gone
    sleep "$poll"
  done
  launched=1
  # the step's key stays in this shell: never on the volume the AIPerf container shares
  key=$(aws s3 cp --quiet "${BENCHCTL_CONTROL}$step/key.json" - 2>/dev/null \\
    | sed -n 's/^ *"end_key": *"\\([0-9a-f]*\\)".*/\\1/p' | head -n 1)
  [ -n "$key" ] || fail 96 LoadInputsUnavailable "its key ${BENCHCTL_CONTROL}$step/key.json could not be read"
  out=$(aws s3 cp --only-show-errors --recursive "${BENCHCTL_RAW_PREFIX}$step/inputs/" "$d/inputs/" 2>&1) \\
    || fail 96 LoadInputsUnavailable "its inputs could not be fetched from ${BENCHCTL_RAW_PREFIX}$step/inputs/: $out"
  mv "$d/request.part" "$d/request.json"
  n=0
  while [ ! -e "$d/exit_code" ]; do
    sleep "$poll"
    [ -e "$d/exit_code" ] && break
    runner_gone
    n=$((n + 1))
    if [ $((n % 20)) -eq 0 ]; then
      t=$(token "$step")
      [ -n "$t" ] && aws stepfunctions send-task-heartbeat --task-token "$t" >/dev/null 2>&1
    fi
  done
  out=$(aws s3 cp --only-show-errors --recursive "$d/out" "${BENCHCTL_RAW_PREFIX}$step/" 2>&1) \\
    || fail 97 LoadUploadFailed "its artifacts could not be uploaded to ${BENCHCTL_RAW_PREFIX}$step/: $out"
  out=$(signed "$(printf '{"exit_code": %s, "ended_at": %s, "step": "%s"}' "$(cat "$d/exit_code")" "$(date +%s)" \\
    "$step")" | aws s3 cp --only-show-errors - "${BENCHCTL_CONTROL}$step/end.json" 2>&1) \\
    || fail 97 LoadUploadFailed "its end record could not be written to ${BENCHCTL_CONTROL}$step/end.json: $out"
  launched=0
  t=$(token "$step")
  [ -n "$t" ] && aws stepfunctions send-task-success --task-token "$t" --task-output '{"woken": "load ended"}' \\
    >/dev/null 2>&1
  step=""
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


# A runner Job's own deadline beyond its steps' (estimate + load grace each) and its pod's wait for a node
# (``pending_s``): the image pull, each step's hand-over. A backstop, not the rule (CheckLoad and the runner
# bound every step).
RUNNER_SLACK_S = 1800


def runner_deadline_s(est_total_s: float, steps: int, grace_s: float, pending_s: float) -> int:
    """``activeDeadlineSeconds`` of a runner Job whose ``steps`` are estimated at ``est_total_s`` together, whose
    pod may wait ``pending_s`` for a node (``timeouts.capacity_s``): the deadline counts from the Job's start."""
    return int(est_total_s + grace_s * steps + pending_s + RUNNER_SLACK_S)


def runner_request(step_id: str, argv: list[str], est_s: float, grace_s: float,
                   input_uri: str | None = None) -> JSON:
    """What a step asks of its runner Job (the hand-over's ``request.json``, handed to the AIPerf container as
    is): AIPerf's argv in the Job's paths (artifacts to ``<step dir>/out``; the step's kept input, named by
    ``input_uri``, from ``<step dir>/inputs``) and the step's deadline (its estimate + the load grace). The key
    its end record is signed with is not in it (``eks_load.END_KEY_OBJECT``)."""
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

    Both containers run as the load image's user (:func:`pod_security`): they share each step's directory
    on the emptyDir. The pod runs on a CPU node, never on the campaign's GPU pools (:func:`off_gpu_pools`).
    No Kubernetes API token is mounted (``automountServiceAccountToken: false``): the Job needs none (S3
    and the task-token answers come from EKS Pod Identity, the load Job role, which injects its own
    credentials), and AIPerf's in-cluster metrics discovery, which would list every inference pod of the
    namespace (other campaigns' too, and the frontend a second time), finds nothing; the workers'
    endpoints are given with ``--server-metrics``. Only the control container gets the role's credentials:
    the AIPerf container, which talks to the serving side, is skipped by EKS Pod Identity
    (:data:`SKIP_CONTAINERS`) and so can read neither the step's key nor anything else of the role's."""
    k = spec.kubernetes
    lbl = labels(campaign_id, experiment, group)
    mount = [{"name": "artifacts", "mountPath": ARTIFACTS}]
    resources = {"cpu": k.load_cpu, "memory": k.load_memory}
    env_tokenizer = [{"name": "BENCHCTL_RUNNER_TOKENIZER", "value": spec.model.name}]
    if spec.model.revision:
        env_tokenizer.append({"name": "BENCHCTL_RUNNER_TOKENIZER_REVISION", "value": spec.model.revision})
    pod_spec: JSON = {
        "serviceAccountName": runner_service_account(campaign_id),
        "automountServiceAccountToken": False,
        "securityContext": pod_security(),
        "volumes": [{"name": "artifacts", "emptyDir": {"sizeLimit": ARTIFACTS_SIZE_LIMIT}}, model_volume(spec.kubernetes)],
        "containers": [
            {
                "name": "aiperf",
                "image": aiperf_image(spec.kubernetes),
                "command": ["python3", "-c", runner_source(), "--steps-dir", ARTIFACTS, *steps],
                # a home this user may write whatever the image (a spec's own aiperf_image may have no user
                # 10001 in its passwd; AIPerf caches under ~/.cache)
                "env": [*(dict(e) for e in OFFLINE_TOKENIZER_ENV), *env_tokenizer,
                        {"name": "PYTHONUNBUFFERED", "value": "1"}, {"name": "HOME", "value": CONTROL_HOME}],
                "resources": {"limits": dict(resources), "requests": dict(resources)},
                "securityContext": container_security(),
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
                        *aws_cli_env(region)],
                "resources": {"limits": dict(CONTROL_RESOURCES), "requests": dict(CONTROL_RESOURCES)},
                "securityContext": container_security(),
                "volumeMounts": [dict(m) for m in mount],
            },
        ],
    }
    return job_object(k.namespace, job_name(campaign_id, experiment, group), lbl, cpu_pod(spec, campaign_id, pod_spec),
                      active_deadline_s, {SKIP_CONTAINERS: "aiperf"})
