"""``benchctl doctor``: prove a deployment on the user's account for cents, before any GPU is scaled.

What no test on a developer's machine can prove is proven here, on the real account: the deployed state
machine names every function; each function answers a self-test (``benchctl.aws.selftest``) that runs its
real imports on the deployed layers, pandas datetime64 construction, a parquet object written and read back
under a scratch prefix, the cluster's API as its own identity (the functions that call Kubernetes) and one
view's Athena DDL (Report); the load role's real path runs as a tiny runner Job (``benchctl.aws.eks_load``:
the load image and the AWS CLI image as the pod runs them, a recursive copy of an empty prefix, a file written
as the load image's user into the shared directory, the upload and the end record); and every image the
spec names exists in its registry (``benchctl.aws.images``); the spec's EC2 vCPU quotas, with the capacity
options of its P pools (``benchctl.aws.quotas``); and each GPU pool's zone offering its type and its reservation or
Capacity Block able to give the plan's nodes (``benchctl.aws.capacity_checks``; the cluster's egress to the registries is the preflight's
AIPerf Job's, from inside the cluster). One line per check; exit 0 when all pass.

An adapter (boto3): May import the core and ``benchctl.aws``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchctl.aws.doctor_check import Check, lambda_client
from benchctl.aws.selftest import KUBERNETES_FUNCTIONS, SELF_TEST, checks_for
from benchctl.campaign import asl

JSON = dict[str, Any]


def deployed_functions(definition: JSON) -> dict[str, str]:
    """Function name (``Plan``, ``Load``, ...) -> the ARN the deployed definition invokes, found by walking
    the deployed definition beside ours (same states, our substitution variables where it has ARNs)."""
    ours = {name: st for _, name, st in asl.all_states()}
    out: dict[str, str] = {}
    for _, name, st in asl.all_states(definition):
        var = ((ours.get(name) or {}).get("Parameters") or {}).get("FunctionName", "")
        arn = (st.get("Parameters") or {}).get("FunctionName")
        if var.startswith("${") and isinstance(arn, str):
            out[var.removeprefix("${").removesuffix("FunctionArn}")] = arn
    return out


def _invoke(lam: Any, arn: str, payload: JSON) -> tuple[JSON | None, str | None]:
    """(the answer, None) or (None, why the invocation failed: a crash, an error the handler raised)."""
    resp = lam.invoke(FunctionName=arn, Payload=json.dumps(payload).encode())
    body = resp["Payload"].read()
    data = json.loads(body) if body else None
    if resp.get("FunctionError"):
        if isinstance(data, dict):
            kind, msg = data.get("errorType", "?"), data.get("errorMessage", "")
        else:
            kind, msg = "?", str(data)
        hint = " (a layer that crashes the process? see stacks/layers.py)" if "ExitError" in kind else ""
        return None, f"the function failed: {kind}: {msg}"[:600] + hint
    return data, None


def _function_checks(session: Any, functions: dict[str, str], spec: JSON | None = None) -> Iterator[Check]:
    lam = lambda_client(session)
    for name in sorted(functions):
        checks = checks_for(name, spec=spec is not None)
        event: JSON = {"action": SELF_TEST, "function": name, "checks": checks, **({"spec": spec} if spec else {})}
        try:
            answer, failed = _invoke(lam, functions[name], event)
        except Exception as err:  # the invocation itself (permissions, throttling): that function's line
            answer, failed = None, f"could not invoke {functions[name]}: {type(err).__name__}: {err}"
        if failed is not None or answer is None:
            yield Check(f"{name} function", False, failed or "no answer")
            continue
        for check in checks:
            got = (answer.get("checks") or {}).get(check) or {"ok": False, "detail": "not answered"}
            problems = got.get("problems") or []
            if problems:  # one line per verb refused, each with its fix
                yield from (Check(f"{name} {check}", False, str(p)) for p in problems)
            else:
                yield Check(f"{name} {check}", bool(got.get("ok")), str(got.get("detail")))
        if spec is None and name in KUBERNETES_FUNCTIONS:
            yield Check(f"{name} verbs", False, "not checked: give --spec (its objects are dry-run through the "
                                                "admission policies as this function creates them)")


def spec_images(spec_path: Path | None, load_image: str) -> dict[str, str]:
    """What the campaign's pods run, named by role: the spec's images (the deployment's load image where it
    names none), the EFA workers' image of pools that use EFA in a disaggregated experiment."""
    from benchctl.aws.k8s.common import aiperf_image
    from benchctl.aws.k8s.efa import efa_image
    from benchctl.aws.preflight import with_load_image
    from benchctl.planning.placement import load_placeable_spec

    images: dict[str, str] = {}
    if load_image:
        images["load image (deployment)"] = load_image
    if spec_path is None:
        return images
    spec = with_load_image(load_placeable_spec(spec_path), load_image) if load_image else load_placeable_spec(spec_path)
    k = spec.kubernetes
    images.update({"dynamo image": k.dynamo_image, "uploader image": k.uploader_image,
                   "load image": aiperf_image(k)})
    if k.prefetch_model:
        images["prefetch image"] = k.prefetch_image
    for exp in spec.experiments:
        if exp.mode != "disaggregated":
            continue
        for g in exp.workers:
            pool = spec.pool(g.pool)
            if pool.network.efa:
                images[f"EFA image of pool {pool.name}"] = efa_image(pool, k)
    return images


def _image_checks(session: Any, images: dict[str, str],
                  lookup: Callable[[str], tuple[bool, str]]) -> Iterator[Check]:
    seen: set[str] = set()
    for role, image in images.items():
        if image in seen:
            continue
        seen.add(image)
        try:
            ok, how = lookup(image)
        except Exception as err:
            ok, how = False, f"{type(err).__name__}: {err}"
        yield Check(f"{role} {image}", ok, how)


def nodegroup_checks(session: Any, spec_path: Path, load_env: dict[str, str]) -> Iterator[Check]:
    """Which node group each of the spec's node-group pools runs on (the rehearsal's CPU pool among them): one
    this deployment may scale (``BENCHCTL_NODEGROUPS``), found in the cluster, with what it launches; an Auto
    Mode pool is said to be the NodePool the campaign makes."""
    from benchctl.planning.placement import load_placeable_spec

    cluster = load_env.get("BENCHCTL_CLUSTER", "")
    scalable = [n for n in load_env.get("BENCHCTL_NODEGROUPS", "").split(",") if n]
    spec = load_placeable_spec(spec_path)
    for pool in spec.pools:
        if pool.provider == "auto-mode":
            yield Check(f"node pool of pool {pool.name}", True, f"an EKS Auto Mode NodePool the campaign creates and "
                        f"deletes ({pool.instance_type}, NodeClass {spec.kubernetes.node_class}; the functions' "
                        "verbs above prove they may, the admission policies that they may only so)")
            continue
        if pool.provider != "managed-nodegroup":
            continue
        name = f"node group of pool {pool.name}"
        if pool.nodegroup not in scalable:
            yield Check(name, False, f"{pool.nodegroup!r} is not one this deployment may scale ({scalable}): name it "
                                     "in CDK context benchctl:nodegroups and deploy again (benchctl:platform=new "
                                     "makes the rehearsal's, benchctl-rehearsal, itself)")
            continue
        try:
            ng = session.client("eks").describe_nodegroup(clusterName=cluster, nodegroupName=pool.nodegroup)["nodegroup"]
        except Exception as err:
            yield Check(name, False, f"{pool.nodegroup} in cluster {cluster}: {type(err).__name__}: {err}")
            continue
        size = ng.get("scalingConfig") or {}
        yield Check(name, True, f"{pool.nodegroup}: {','.join(ng.get('instanceTypes') or [])} "
                                f"({ng.get('amiType', '?')}), {size.get('desiredSize', '?')} of at most "
                                f"{size.get('maxSize', '?')} nodes now; this deployment may scale it")


def quota_checks(session: Any, spec_path: Path, cluster: str) -> Iterator[Check]:
    """The spec's EC2 vCPU quotas and the capacity options of its P pools (``benchctl.aws.quotas``), as the
    preflight judges them, with the doctor's own credentials; a quota it cannot read fails here."""
    from benchctl.aws.quotas import check
    from benchctl.planning.placement import load_placeable_spec

    try:
        lines = check(load_placeable_spec(spec_path), session, cluster)
    except Exception as err:  # a client that cannot be made, throttling: this check's line, not a crash
        yield Check("quotas", False, f"{type(err).__name__}: {err}")
        return
    for ln in lines:
        yield Check(ln.name, ln.ok, ln.detail)


def capacity_checks(session: Any, spec_path: Path, cluster: str) -> Iterator[Check]:
    """Each GPU pool's zone offers its instance type (else the zones that do) and its reservation or Capacity Block
    can give the plan's nodes (``benchctl.aws.capacity_checks``), as the preflight judges them, with the doctor's
    own credentials; an answer it cannot read fails here."""
    from benchctl.aws.capacity_checks import check
    from benchctl.planning.placement import load_placeable_spec

    try:
        lines = list(check(load_placeable_spec(spec_path), session, cluster))
    except Exception as err:  # a client that cannot be made, throttling: this check's line, not a crash
        yield Check("capacity", False, f"{type(err).__name__}: {err}")
        return
    for ln in lines:
        yield Check(ln.name, ln.ok, ln.detail)


def doctor(state_machine_arn: str, **kw: Any) -> list[Check]:
    """Every check of the deployment behind ``state_machine_arn`` (see :func:`checks`)."""
    return list(checks(state_machine_arn, **kw))


def checks(state_machine_arn: str, *, spec_path: Path | None = None, session: Any = None,
           lookup: Callable[[str], tuple[bool, str]] | None = None, runner_job: bool = True,
           job_timeout_s: float = 900.0, poll_s: float = 5.0,
           sleep: Callable[[float], None] = time.sleep) -> Iterator[Check]:
    """Every check of the deployment behind ``state_machine_arn`` (and the images and the runner Job of the
    spec at ``spec_path``), each as soon as it is known."""
    import boto3

    from benchctl.aws.images import image_exists

    if session is None:
        session = boto3.session.Session(region_name=state_machine_arn.split(":")[3])
    sfn = session.client("stepfunctions")
    definition = json.loads(sfn.describe_state_machine(stateMachineArn=state_machine_arn)["definition"])
    functions = deployed_functions(definition)
    wanted = {var.removesuffix("FunctionArn") for var in _function_vars()}
    missing = sorted(wanted - set(functions))
    yield Check("state machine", not missing, f"{state_machine_arn} invokes {len(functions)} functions"
                + (f"; missing: {', '.join(missing)} (not this project's definition?)" if missing else ""))
    load_env: dict[str, str] = {}
    if "Load" in functions:
        conf = session.client("lambda").get_function_configuration(FunctionName=functions["Load"])
        load_env = (conf.get("Environment") or {}).get("Variables") or {}
        sweeper = _sweeper(session, load_env)
        if sweeper is None:
            yield Check("Sweep function", False, "no function with handler lambdas.sweep.handler of this deployment "
                                                 f"(runs under {load_env.get('BENCHCTL_RUNS_URI')}) in this Region")
        else:
            functions = {**functions, "Sweep": sweeper}
    data: JSON | None = None
    if spec_path is not None:
        from benchctl.spec.model import load_spec_text
        from benchctl.spec.text import spec_data

        data = spec_data(load_spec_text(spec_path), str(spec_path))  # size-capped, no YAML aliases
    yield from _function_checks(session, functions, data)
    from benchctl.aws import doctor_stop  # the stop path and the scaling verbs (IAM policy simulation)
    yield from doctor_stop.checks(session, state_machine_arn, functions)
    look = lookup or (lambda image: image_exists(image, session=session))
    yield from _image_checks(session, spec_images(spec_path, load_env.get("BENCHCTL_LOAD_IMAGE", "")), look)
    if spec_path is not None:
        yield from nodegroup_checks(session, spec_path, load_env)
        yield from quota_checks(session, spec_path, load_env.get("BENCHCTL_CLUSTER", ""))
        yield from capacity_checks(session, spec_path, load_env.get("BENCHCTL_CLUSTER", ""))
    if runner_job and "Load" in functions:
        if data is None:
            yield Check("load runner Job", False, "give --spec: the Job runs with a spec's Kubernetes settings "
                                                  "(namespace, images, service account, sizes)")
        else:
            yield from _runner_job(session, functions["Load"], data, timeout_s=job_timeout_s, poll_s=poll_s,
                                   sleep=sleep)


def _sweeper(session: Any, load_env: dict[str, str]) -> str | None:
    """The deployment's sweeper (scheduled, outside the state machine): the function with the sweep handler
    whose variables name the same run store as the Load function's."""
    for page in session.client("lambda").get_paginator("list_functions").paginate():
        for fn in page.get("Functions", []):
            env = (fn.get("Environment") or {}).get("Variables") or {}
            if (fn.get("Handler") == "lambdas.sweep.handler"
                    and env.get("BENCHCTL_RUNS_URI") == load_env.get("BENCHCTL_RUNS_URI")):
                return str(fn["FunctionArn"])
    return None


def _function_vars() -> list[str]:
    """The substitution variables of the functions our definition invokes (``PlanFunctionArn``, ...)."""
    names = {(st.get("Parameters") or {}).get("FunctionName", "") for _, _, st in asl.all_states()}
    return sorted(n.removeprefix("${").removesuffix("}") for n in names if n.startswith("${"))


def _runner_job(session: Any, load_arn: str, spec: JSON, *, timeout_s: float, poll_s: float,
                sleep: Callable[[float], None]) -> Iterator[Check]:
    """The load role's real path: the Load function starts a tiny runner Job, the doctor follows it; a Job
    not judged (the wait over, an interrupt) is deleted before the doctor leaves."""
    lam = lambda_client(session)
    event: JSON = {"action": SELF_TEST, "function": "Load", "checks": ["runner_job"], "spec": spec}
    for _ in range(4):  # the Load function makes the Job's identity, then starts the Job once it has settled
        started, failed = _invoke(lam, load_arn, event)
        job = ((started or {}).get("checks") or {}).get("runner_job") or {}
        if failed is not None or not job.get("settle_s"):
            break
        sleep(float(job["settle_s"]))  # no function waits: the doctor, on the user's machine, does
        event = {**event, "campaign_id": job["campaign_id"]}
    if failed is not None or not job.get("ok"):
        yield Check("load runner Job", False, failed or str(job.get("detail")))
        return
    judged = False
    try:
        waited = 0.0
        while True:
            answer, failed = _invoke(lam, load_arn, {"action": SELF_TEST, "function": "Load", "spec": spec,
                                                     "checks": ["runner_job_result"], "job": job.get("job")})
            result = ((answer or {}).get("checks") or {}).get("runner_job_result") or {}
            if failed is not None:
                yield Check("load runner Job", False, failed)
                return
            if not result.get("pending"):
                judged = True  # runner_job_result deleted it
                yield Check("load runner Job", bool(result.get("ok")), str(result.get("detail")))
                return
            if waited >= timeout_s:
                yield Check("load runner Job", False, f"still running after {waited:.0f} s (--job-timeout): "
                                                      f"{result.get('detail')}")
                return
            sleep(poll_s)
            waited += poll_s
    finally:
        if not judged:
            _invoke(lam, load_arn, {"action": SELF_TEST, "function": "Load", "spec": spec,
                                    "checks": ["runner_job_stop"], "job": job.get("job")})
