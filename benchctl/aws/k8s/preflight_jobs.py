"""The preflight's Jobs: one short CPU Job per image the campaign's load runners use, run as a runner runs
(its service account, its user, off the GPU pools), proving the image holds the right tool and the load Job
role may make every call a runner makes, and that the cluster reaches the registries and the Hub the campaign
needs (:data:`EGRESS_CHECK`, in the AIPerf Job), before anything is scaled. Pure: standard library and benchctl only.
"""

from __future__ import annotations

import json
from typing import Any

from benchctl.aws.k8s.common import (
    LAKE_PLACEHOLDER,
    MODEL_MOUNT,
    OFFLINE_TOKENIZER_ENV,
    PREFLIGHT_DEADLINE_S,
    REGION_PLACEHOLDER,
    RUNS_PLACEHOLDER,
    aiperf_image,
    control_uri,
    labels,
    model_volume,
    preflight_job_name,
    raw_s3_uri,
    runner_service_account,
)
from benchctl.aws.k8s.jobs import (
    CONTROL_RESOURCES,
    aws_cli_env,
    container_security,
    cpu_pod,
    job_object,
    pod_security,
)
from benchctl.campaign.runstate import runner_key
from benchctl.planning import aiperf_args
from benchctl.planning.quotas import egress_targets
from benchctl.spec.model import CampaignSpec, Kubernetes

JSON = dict[str, Any]


# The preflight's image checks: each prints its tool's version; the check script compares it with what
# benchctl needs, so a Job that succeeds proves the image runs and holds the right tool, on a CPU node
# (off the campaign's GPU pools), with the load Jobs' service account and user, before any pool is scaled.
PREFLIGHT_CHECKS: dict[str, str] = {
    # AIPerf's own version string is the package's; the Job fails unless it is the one we parse for
    "aiperf": ('v="$(aiperf --version 2>&1 | tail -n 1)"; echo "aiperf --version: $v"; '
               'case "$v" in *"{version}"*) ;; *) echo "need aiperf {version}" >&2; exit 3;; esac'),
    # the uploader runs `aws s3 cp`: AWS CLI v2, and credentials from Pod Identity for the service account
    "uploader": ('v="$(aws --version 2>&1)"; echo "aws --version: $v"; '
                 'case "$v" in aws-cli/2.*) ;; *) echo "need AWS CLI v2" >&2; exit 3;; esac; '
                 'aws sts get-caller-identity --query Arn --output text || exit 4'),
}
# ... then every call the runner's control container makes, as it makes them, where a campaign's runner makes
# them (BENCHCTL_RAW_PREFIX: a step's raw area, BENCHCTL_CONTROL: its run-store keys, both of a probe step no
# experiment can be named): a step's inputs fetched (ListObjectsV2 of its inputs/ prefix), a run-store object
# written and read back, and the three task-token answers (a token that names no task: refused as invalid
# once IAM allowed the call; only an AccessDenied fails the check). 6: a call the load Job role is denied.
UPLOADER_PATH_CHECK = """\
probe() {
  echo "$1: denied to this service account's role (the load Job role of the control-plane stack): $2" >&2
  exit 6
}
out=$(aws s3 cp --only-show-errors --recursive "${BENCHCTL_RAW_PREFIX}inputs/" "$HOME/benchctl-preflight/" 2>&1) \\
  || probe "fetching a step's inputs (s3 cp --recursive ${BENCHCTL_RAW_PREFIX}inputs/: ListObjectsV2, GetObject)" "$out"
out=$(printf '{"preflight": true}' | aws s3 cp --only-show-errors - "${BENCHCTL_CONTROL}end.json" 2>&1) \\
  || probe "writing a step's end record (s3 cp to ${BENCHCTL_CONTROL}end.json: PutObject)" "$out"
out=$(aws s3 cp --only-show-errors "${BENCHCTL_CONTROL}end.json" - 2>&1) \\
  || probe "reading a step's request (s3 cp from ${BENCHCTL_CONTROL}end.json: GetObject)" "$out"
out=$(printf '{"preflight": true}' | aws s3 cp --only-show-errors - "${BENCHCTL_RAW_PREFIX}probe.json" 2>&1) \\
  || probe "uploading a step's artifacts (s3 cp to ${BENCHCTL_RAW_PREFIX}probe.json: PutObject)" "$out"
for answer in send-task-heartbeat send-task-success send-task-failure; do
  case "$answer" in send-task-success) extra="--task-output {}";; *) extra="";; esac
  out=$(aws stepfunctions "$answer" --task-token benchctl-preflight-probe $extra 2>&1)
  case "$out" in
    *AccessDenied*) probe "answering a step's task token (stepfunctions $answer)" "$out";;
    # the answer Step Functions gives a token that names no task: it was reached, and it let us ask
    *InvalidToken*|*TaskDoesNotExist*|*TaskTimedOut*) ;;
    *) echo "answering a step's task token (stepfunctions $answer): Step Functions did not answer as it answers a" \\
         "token that names no task (no route to it from this pod? its endpoint, the Region): $out" >&2; exit 7;;
  esac
done
echo "the load Job role's path: inputs listed, run-store object written and read, an artifact uploaded," \\
  "task-token answers allowed"
"""
PREFLIGHT_PROBE = "_preflight"  # the probe step's experiment and step id (no experiment name starts with "_")


# Without a model prefetch the volume must already hold the model: the AIPerf check then also loads the
# tokenizer as the load Jobs will, offline from the volume at the pinned revision (AIPerf's own loader).
TOKENIZER_CHECK = ("python3 -c 'import os; from aiperf.common.tokenizer import Tokenizer; "
                   "Tokenizer.from_pretrained(os.environ[\"MODEL\"], revision=os.environ[\"REVISION\"]); "
                   "print(\"tokenizer\", os.environ[\"MODEL\"], os.environ[\"REVISION\"], \"read offline\")' || exit 5")
# ... and, for vLLM workers, the weights: every file of the snapshot's safetensors index (or its one file) is on
# the volume at the pinned revision; a mocker campaign's prefetch (config and tokenizer only) is not a model
WEIGHTS_CHECK = """python3 -c '
import json, os, sys
from huggingface_hub import try_to_load_from_cache as cached
model, rev = os.environ["MODEL"], os.environ["REVISION"]
index = cached(model, "model.safetensors.index.json", revision=rev)
files = sorted(set(json.load(open(index))["weight_map"].values())) if isinstance(index, str) else ["model.safetensors"]
missing = [f for f in files if not isinstance(cached(model, f, revision=rev), str)]
if missing:
    sys.exit(f"the model volume lacks {len(missing)} of the {len(files)} weight files of {model} at {rev} "
             f"(e.g. {missing[0]}): fill it (kubernetes.prefetch_model: true) before GPUs are scaled")
print("weights", model, rev, len(files), "files on the volume")
' || exit 8"""


# ... and, from the cluster (a pod on a CPU node: the VPC's routes, NAT, proxies and egress rules the GPU nodes
# get too), every registry the campaign's images come from and, with a prefetch, the Hub: one HTTPS request each
# (10 s timeout); any HTTP answer, a registry's 401 included, is reached; no answer (DNS, TCP, TLS, timeout) is
# not. BENCHCTL_EGRESS: a JSON object URL -> what needs it (benchctl.planning.quotas.egress_targets). 9: one unreachable.
EGRESS_CHECK = """python3 -c '
import json, os, sys, urllib.error, urllib.request
targets = json.loads(os.environ["BENCHCTL_EGRESS"] or "{}")
bad = []
for url, why in targets.items():
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10).close()
    except urllib.error.HTTPError:
        pass
    except Exception as err:
        reason = getattr(err, "reason", err)
        bad.append(url + " (" + type(err).__name__ + ": " + str(reason) + "; needed: " + why + ")")
if bad:
    sys.exit("no egress from the cluster to " + "; ".join(bad) + ": the nodes pull images and the prefetch "
             "downloads from there (a NAT gateway or VPC endpoints, proxy, security group or network policy)")
print("egress from the cluster:", len(targets), "endpoints reached:", " ".join(targets))
' || exit 9"""


def campaign_images(spec: CampaignSpec) -> list[str]:
    """Every image the campaign's pods run: the spec's (the prefetch's only with a prefetch), the load image,
    and the EFA workers' image of pools that use EFA."""
    from benchctl.aws.k8s.efa import efa_image
    from benchctl.planning.ceilings import spec_images

    k = spec.kubernetes
    images = [img for path, img in spec_images(spec)
              if path != "kubernetes.prefetch_image" or k.prefetch_model]
    images.append(aiperf_image(k))
    images += [efa_image(p, k) for p in spec.pools if p.network.efa]
    return list(dict.fromkeys(images))


def render_preflight_job(spec: CampaignSpec, campaign_id: str, check: str, *, run_uri: str | None = None,
                         lake_uri: str = LAKE_PLACEHOLDER, region: str = REGION_PLACEHOLDER) -> JSON:
    """A short CPU Job proving one image before anything is scaled (``check`` in PREFLIGHT_CHECKS), run as a
    runner Job runs (its service account, :func:`pod_security`, off the GPU pools). The uploader check then
    makes the runner's calls (:data:`UPLOADER_PATH_CHECK`) where a runner of this campaign makes them: a
    probe step's raw area in the lake (``lake_uri``) and its keys in the campaign's hand-over (``runner/<campaign>/``
    of ``run_uri``'s bucket; default: the placeholder bucket's), in ``region``, as the campaign's own service
    account."""
    image = {"aiperf": aiperf_image(spec.kubernetes), "uploader": spec.kubernetes.uploader_image}[check]
    script = PREFLIGHT_CHECKS[check].replace("{version}", aiperf_args.AIPERF_VERSION)
    # the AIPerf check asks what a load runner's pod asks (its AIPerf container, kubernetes.load_cpu/load_memory,
    # and its control container), on a node no GPU pool of the spec owns: that it runs proves a runner fits
    resources = (runner_pod_resources(spec.kubernetes) if check == "aiperf" else {"cpu": "500m", "memory": "1Gi"})
    container: JSON = {"name": check, "image": image, "command": ["sh", "-c", script],
                       "resources": {"limits": dict(resources), "requests": dict(resources)},
                       "securityContext": container_security()}
    pod_spec: JSON = {
        "serviceAccountName": runner_service_account(campaign_id),
        "automountServiceAccountToken": False,
        "securityContext": pod_security(),
        "containers": [container],
    }
    if check == "aiperf":
        egress = egress_targets(spec, campaign_images(spec))
        container["command"][2] = f"{script}; {EGRESS_CHECK}"
        container["env"] = [{"name": "BENCHCTL_EGRESS", "value": json.dumps(egress, sort_keys=True)}]
    if check == "aiperf" and not spec.kubernetes.prefetch_model:
        container["command"][2] += f"; {TOKENIZER_CHECK}" + (
            f"; {WEIGHTS_CHECK}" if any(e.engine == "vllm" for e in spec.experiments) else "")
        container["env"] += [*(dict(e) for e in OFFLINE_TOKENIZER_ENV), {"name": "MODEL", "value": spec.model.name},
                             {"name": "REVISION", "value": spec.model.revision or "main"}]
        container["volumeMounts"] = [{**MODEL_MOUNT, "readOnly": True}]
        pod_spec["volumes"] = [model_volume(spec.kubernetes)]
    if check == "uploader":
        control = control_uri(run_uri or RUNS_PLACEHOLDER, campaign_id)
        container["command"][2] = f"{script}\n{UPLOADER_PATH_CHECK}"
        container["env"] = [
            {"name": "BENCHCTL_RAW_PREFIX", "value": raw_s3_uri(campaign_id, PREFLIGHT_PROBE, PREFLIGHT_PROBE, lake_uri)},
            {"name": "BENCHCTL_CONTROL", "value": f"{control}/{runner_key(PREFLIGHT_PROBE, PREFLIGHT_PROBE)}"},
            *aws_cli_env(region)]
    lbl = labels(campaign_id, step_id=f"preflight-{check}")
    return job_object(spec.kubernetes.namespace, preflight_job_name(campaign_id, check), lbl,
                cpu_pod(spec, campaign_id, pod_spec), PREFLIGHT_DEADLINE_S)


_CPU = {"m": 1, "": 1000}
_MEMORY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "": 1}


def _quantity(q: str, units: dict[str, int]) -> float:
    """A Kubernetes quantity (``8``, ``250m``, ``16Gi``, ``512Mi``) in the smallest unit of ``units``."""
    for suffix in sorted(units, key=len, reverse=True):
        if suffix and q.endswith(suffix):
            return float(q[: -len(suffix)]) * units[suffix]
    return float(q) * units[""]


def runner_pod_resources(k: Kubernetes) -> dict[str, str]:
    """What a load runner's pod asks in all: its AIPerf container (``load_cpu``/``load_memory``) and its
    control container (:data:`CONTROL_RESOURCES`), as one container's request."""
    cpu = _quantity(k.load_cpu, _CPU) + _quantity(CONTROL_RESOURCES["cpu"], _CPU)
    memory = _quantity(k.load_memory, _MEMORY) + _quantity(CONTROL_RESOURCES["memory"], _MEMORY)
    return {"cpu": f"{round(cpu)}m", "memory": f"{-(-int(memory) // 2**20)}Mi"}
