"""What each function does on the cluster, verb by verb, and the self-test that proves it as the function's own
identity before a campaign pays for a node (``benchctl doctor``'s ``verbs`` check).

:data:`FUNCTION_VERBS` is written from the code (which port calls what; ``benchctl.aws.eks``, ``pools``,
``eks_load``, ``preflight``, ``runner_identity``, ``sweep``), not from the RBAC file: a test holds the two equal,
so a verb taken out of a Role is a verb this check still asks for. The check (:func:`check_verbs`):

* every ``create``: a server-side dry run (``dryRun=All``) of each object of that kind the function creates for
  the event's spec (rendered as the campaign renders it, under a campaign id no campaign has): the API server
  runs authentication, RBAC, field validation and every admission policy (our allow-lists with their parameter
  ConfigMap, which fail closed), and persists nothing. A kind the spec renders nothing of (a NodePool without
  Auto Mode pools) is asked as below;
* every other verb: a ``SelfSubjectAccessReview`` (what ``kubectl auth can-i`` sends; every authenticated user
  may create one: Kubernetes' bootstrap ``system:basic-user`` role), with the resource name where the Role
  names one;
* the node groups the function scales (Pools, Teardown): ``eks:DescribeNodegroup`` of each, as its IAM role.

Each failure names the function, the verb, the object and the fix. May import the core and ``benchctl.aws``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from benchctl.aws.k8s.client import RESOURCES, ApiError

JSON = dict[str, Any]
RBAC_FILE = "stacks/kubernetes/benchctl-rbac.yaml"
KUBE_SYSTEM = "kube-system"


@dataclass(frozen=True)
class Verb:
    """One verb a function uses on one resource: ``scope`` is "namespace" (the campaign's), "cluster" or
    ``kube-system``; ``name`` a resource name the Role restricts it to ("" none; "<namespace>", "<secret>" and
    "<claim>" stand for the spec's)."""

    verb: str
    kind: str
    scope: str = "namespace"
    name: str = ""
    subresource: str = ""

    @property
    def group(self) -> str:
        api = RESOURCES[self.kind].api_version
        return api.split("/")[0] if "/" in api else ""

    @property
    def resource(self) -> str:
        return RESOURCES[self.kind].plural + (f"/{self.subresource}" if self.subresource else "")


def _v(verbs: str, kind: str, **kw: str) -> tuple[Verb, ...]:
    return tuple(Verb(v, kind, **kw) for v in verbs.split())


_NS = _v("get", "Namespace", name="<namespace>")  # the self-test's own read, and every function's first
_LOGS = (*_v("list", "Pod"), *_v("get", "Pod", subresource="log"))  # a failed pod's logs, named in the error
_NODES = _v("list", "Node", scope="cluster")
# the runner grants (benchctl.aws.runner_identity, stacks/kubernetes/benchctl-identities.yaml): a merge patch by name
_GRANTS = _v("patch", "ConfigMap", name="benchctl-runner-grants")
FUNCTION_VERBS: dict[str, tuple[Verb, ...]] = {
    # preflight: the token secret, the claim, the CRDs and Auto Mode's NodeClass by name, the nodes' drivers,
    # the EFA plugin; the image-check Jobs (created, followed, deleted) and the runner's service account
    "Plan": (*_NS, *_v("get", "Secret", name="<secret>"), *_v("get", "PersistentVolumeClaim", name="<claim>"),
             *_v("create get", "ServiceAccount"), *_GRANTS, *_LOGS, *_v("create get delete", "Job"), *_NODES,
             *_v("get", "CustomResourceDefinition", scope="cluster", name="dynamographdeployments.nvidia.com"),
             *_v("get", "CustomResourceDefinition", scope="cluster", name="nodepools.karpenter.sh"),
             *_v("get", "NodeClass", scope="cluster", name="default"),
             *_v("list", "DaemonSet", scope=KUBE_SYSTEM)),
    # the model prefetch Job, the image pre-pull DaemonSets, Auto Mode NodePools (made, read, resized)
    "Pools": (*_NS, *_v("create", "Job"), *_v("create", "DaemonSet"), *_NODES,
              *_v("create get update", "NodePool", scope="cluster"), *_v("list", "NodeClaim", scope="cluster")),
    # the smoke Job (and a checkpoint's prefetch), the DGD; its pods and nodes; the EFA plugin
    "Serving": (*_NS, *_LOGS, *_v("create get", "Job"), *_v("create get", "DynamoGraphDeployment"), *_NODES,
                *_v("list", "DaemonSet", scope=KUBE_SYSTEM)),
    # the runner Jobs and the runner's service account (the doctor's too); the DGD's frontend
    "Load": (*_NS, *_v("get", "DynamoGraphDeployment"), *_LOGS, *_v("create get delete", "Job"),
             *_v("create get delete", "ServiceAccount"), *_GRANTS),
    # everything of a campaign, by its label, and the runner's service account by name
    "Teardown": (*_NS, *_LOGS, *_v("get list delete", "Job"), *_v("list delete", "DynamoGraphDeployment"),
                 *_v("list delete", "DaemonSet"), *_v("get delete", "ServiceAccount"), *_GRANTS,
                 *_v("get delete", "NodePool", scope="cluster"), *_NODES),
    # the same for every campaign whose end is overdue, found by listing
    "Sweep": (*_NS, *_LOGS, *_v("get list delete", "Job"), *_v("list delete", "DynamoGraphDeployment"),
              *_v("list delete", "DaemonSet"), *_v("get list delete", "ServiceAccount"), *_GRANTS,
              *_v("get list delete", "NodePool", scope="cluster"), *_NODES),
}
NODEGROUP_FUNCTIONS = ("Pools", "Teardown")  # scale and restore the configured node groups (stacks/function_needs.py)


def created_objects(function: str, spec: Any, campaign_id: str, *, region: str = "", lake_uri: str = "",
                    runs_uri: str = "") -> list[JSON]:
    """Every object ``function`` creates for ``spec``'s campaign, rendered as the campaign renders it."""
    from benchctl.aws.k8s.preflight_jobs import render_preflight_job
    from benchctl.aws.k8s.render import render_campaign
    from benchctl.aws.runner_identity import service_account_object

    ns = spec.kubernetes.namespace
    sa = service_account_object(campaign_id, ns)
    if function == "Plan":
        where = {k: v for k, v in (("region", region), ("lake_uri", lake_uri), ("run_uri", runs_uri)) if v}
        return [sa, *(render_preflight_job(spec, campaign_id, c, **where) for c in ("aiperf", "uploader"))]
    where = {k: v for k, v in (("region", region), ("lake_uri", lake_uri), ("runs_uri", runs_uri)) if v}
    rendered = render_campaign(spec, campaign_id, **where)

    def picked(*patterns: str) -> list[JSON]:
        return [obj for path, obj in rendered if any(_matches(path, p) for p in patterns)]

    if function == "Pools":
        return picked("nodepools/", "prefetch-job.yaml", "/prepull-")
    if function == "Serving":
        return picked("/dynamographdeployment.yaml", "/smoke-job.yaml")
    if function == "Load":
        return [sa, *picked("/jobs/")]
    return []


def _matches(path: str, pattern: str) -> bool:
    return path.startswith(pattern) if not pattern.startswith("/") else pattern in path


def _images(node: Any) -> set[str]:
    """Every container image an object names (pod templates, the DGD's services)."""
    if isinstance(node, dict):
        found = {node["image"]} if isinstance(node.get("image"), str) else set()
        return found.union(*(_images(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_images(v) for v in node))
    return set()


def _fix_rbac(function: str, v: Verb, ns: str) -> str:
    role = f"benchctl-{function.lower()}"
    where = {"namespace": f"Role {role} (namespace {ns})", "cluster": f"ClusterRole {role}",
             KUBE_SYSTEM: f"Role benchctl-kube-system-daemonsets (namespace {KUBE_SYSTEM})"}[v.scope]
    names = f" resourceNames [{v.name}]" if v.name else ""
    return (f"give {where} the rule apiGroups [{v.group!r}] resources [{v.resource}] verbs [{v.verb}]{names} "
            f"({RBAC_FILE}) and apply it again (cdk deploy of the platform, or kubectl apply -f {RBAC_FILE})")


def _fix_admission(message: str) -> str:
    if "no params found" in message:
        return ("the admission policies' parameter ConfigMap benchctl-admission is missing and they fail closed: "
                "apply stacks/kubernetes/benchctl-admission-params.yaml again (the platform stack makes it)")
    return ("an admission policy of stacks/kubernetes/benchctl-admission.yaml refused it: if it names an image, "
            "add its repository to CDK context benchctl:ceilings image_repositories and deploy again (the "
            "ConfigMap benchctl-admission's imagePrefixes are made from it), or use an image under an allowed prefix")


def check_verbs(function: str, spec: Any, kube: Any, campaign_id: str, *, eks: Any = None, cluster: str = "",
                nodegroups: Iterable[str] = (), **where: str) -> tuple[list[str], list[str]]:
    """(problems, what was proven) of ``function``'s verbs on the cluster as its own identity."""
    ns = spec.kubernetes.namespace
    names = {"<namespace>": ns, "<secret>": spec.kubernetes.hf_token_secret, "<claim>": spec.kubernetes.model_pvc}
    problems: list[str] = []
    proven: list[str] = []
    objects = created_objects(function, spec, campaign_id, **where)
    granted = _grant_for_dry_runs(function, kube, ns, campaign_id)
    for v in FUNCTION_VERBS.get(function, ()):
        target = f"{v.kind}" + (f" {names.get(v.name, v.name)}" if v.name else "")
        made = [o for o in objects if o["kind"] == v.kind] if v.verb == "create" else []
        for obj in made:
            what = f"{obj['kind']} {obj['metadata']['name']}"
            try:
                kube.create(obj, dry_run=True)
            except ApiError as err:
                fix = _fix_rbac(function, v, ns) if err.status == 403 else _fix_admission(str(err))
                images = ", ".join(sorted(_images(obj)))
                problems.append(f"{function}: create {what} (server-side dry run; its images: {images or 'none'}) "
                                f"refused: {err}; fix: {fix}")
        if made:
            proven.append(f"create {v.kind} x{len(made)} (dry run)")
            continue
        scope_ns = {"namespace": ns, "cluster": "", KUBE_SYSTEM: KUBE_SYSTEM}[v.scope]
        allowed, reason = kube.can_i(v.verb, v.group, RESOURCES[v.kind].plural, namespace=scope_ns,
                                     name=names.get(v.name, v.name), subresource=v.subresource)
        if allowed:
            proven.append(f"{v.verb} {v.resource}")
        else:
            problems.append(f"{function}: may not {v.verb} {target}" + (f" in namespace {scope_ns}" if scope_ns else "")
                            + (f" ({reason})" if reason else "") + f"; fix: {_fix_rbac(function, v, ns)}")
    if granted:
        _revoke_after_dry_runs(kube, ns, campaign_id)
    if function in NODEGROUP_FUNCTIONS and eks is not None:
        for group in nodegroups:
            try:
                eks.describe_nodegroup(clusterName=cluster, nodegroupName=group)
                proven.append(f"node group {group} read")
            except Exception as err:
                problems.append(f"{function}: eks:DescribeNodegroup {cluster}/{group} failed: {type(err).__name__}: "
                                f"{err}; fix: the node group must exist and be named in CDK context "
                                "benchctl:nodegroups (the stack grants the function exactly those)")
    return problems, proven


def _grant_for_dry_runs(function: str, kube: Any, ns: str, campaign_id: str) -> bool:
    """Plan's and Load's runner Jobs run as their campaign's granted account (the admission policy
    benchctl-runner-identities, stacks/kubernetes/benchctl-identities.yaml): the doctor's campaign id (``doctor-…``,
    a grant both functions may change) is granted its own account before they are dry-run
    (:func:`_revoke_after_dry_runs` after). Whether it was; one refused is left to the dry runs to name."""
    from benchctl.aws.k8s.common import RUNNER_GRANTS, runner_grant_patch

    if function not in ("Plan", "Load"):
        return False
    try:
        kube.merge_patch("v1", "ConfigMap", RUNNER_GRANTS, ns, runner_grant_patch(campaign_id, granted=True))
    except ApiError:
        return False
    return True


def _revoke_after_dry_runs(kube: Any, ns: str, campaign_id: str) -> None:
    from benchctl.aws.k8s.common import RUNNER_GRANTS, runner_grant_patch

    with contextlib.suppress(ApiError):
        kube.merge_patch("v1", "ConfigMap", RUNNER_GRANTS, ns, runner_grant_patch(campaign_id, granted=False))
