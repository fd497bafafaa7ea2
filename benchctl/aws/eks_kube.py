"""What the EKS engine's Kubernetes adapters share: the client (or how to make one) bound to one campaign's
objects, and a Job's status and logs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from benchctl.aws.k8s.client import ApiError, KubeClient, NotFound
from benchctl.aws.k8s.common import (
    LABEL_CAMPAIGN,
    selector,
)
from benchctl.campaign.ports import JSON
from benchctl.spec.model import CampaignSpec

DGD = ("nvidia.com/v1beta1", "DynamoGraphDeployment")


JOB = ("batch/v1", "Job")


DAEMONSET = ("apps/v1", "DaemonSet")


KubeSource = KubeClient | Callable[[], KubeClient]


SpecSource = CampaignSpec | Callable[[], CampaignSpec]


def _resolve(source: Any) -> Any:
    return source() if callable(source) and not isinstance(source, KubeClient | CampaignSpec) else source


class _Kube:
    """A Kubernetes client (built on first use) and the campaign whose objects are ours."""

    def __init__(self, kube: KubeSource, campaign_id: str, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._kube, self.campaign_id = kube, campaign_id
        self.clock, self.sleep = clock, sleep

    @property
    def kube(self) -> KubeClient:
        kube: KubeClient = _resolve(self._kube)
        return kube

    def _ours(self, obj: JSON) -> bool:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_CAMPAIGN) == self.campaign_id

    def _left(self, namespace: str, kinds: tuple[tuple[str, str], ...], sel: str) -> list[str]:
        """Our objects of these kinds and our pods still matching ``sel`` (deleted ones linger: a foreground
        deletion holds the owner until its pods have stopped). Lists only: what a list returns is what
        exists, and RBAC grants some kinds (DaemonSets) no GET."""
        left = [f"{kind}/{o['metadata']['name']}" for api_version, kind in kinds
                for o in self.kube.list(api_version, kind, namespace, sel) if self._ours(o)]
        return left + [f"Pod/{o['metadata']['name']}" for o in self.kube.list("v1", "Pod", namespace, sel)]


class _Jobs(_Kube):
    """Jobs rendered from the campaign's spec (its Kubernetes settings: namespace, images, identity)."""

    def __init__(self, kube: KubeSource, spec: SpecSource, campaign_id: str, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(kube, campaign_id, clock=clock, sleep=sleep)
        self._spec = spec

    @property
    def spec(self) -> CampaignSpec:
        spec: CampaignSpec = _resolve(self._spec)
        return spec

    @property
    def namespace(self) -> str:
        return self.spec.kubernetes.namespace


def _conditions(obj: JSON) -> dict[str, str]:
    return {str(c.get("type")): str(c.get("status")) for c in (obj.get("status") or {}).get("conditions") or []}


def job_status(kube: KubeClient, state: JSON) -> int | None:
    """A Job's exit code from its conditions: None while it runs, 0 done, 1 failed or gone."""
    try:
        job = kube.get(*JOB, state["name"], state["namespace"])
    except NotFound:
        return 1  # gone before finishing: deleted or expired; nothing to wait for
    cond = _conditions(job)
    st = job.get("status") or {}
    if cond.get("Complete") == "True" or int(st.get("succeeded") or 0) > 0:
        return 0
    if cond.get("Failed") == "True" or int(st.get("failed") or 0) > 0:
        return 1
    return None


def job_logs(kube: KubeClient, state: JSON, tail_lines: int = 100) -> JSON:
    """The last log lines of every container of a Job's pods, found by our labels (``pod_selector``;
    for a state recorded without it, the ``benchctl.io/`` labels of the Job's own pod template)."""
    out: JSON = {}
    try:
        sel = state.get("pod_selector") or _template_selector(kube, state)
        for pod in kube.list("v1", "Pod", state["namespace"], sel):
            name = pod["metadata"]["name"]
            spec = pod.get("spec") or {}
            containers = [c["name"] for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
            for c in containers or [None]:
                try:
                    text = kube.logs(name, state["namespace"], c, tail_lines)
                except ApiError:
                    continue
                if text:
                    out[f"{name}/{c or 'default'}"] = text
    except ApiError as err:
        out["error"] = str(err)
    return out


def _template_selector(kube: KubeClient, state: JSON) -> str:
    job = kube.get(*JOB, state["name"], state["namespace"])
    tmpl = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
    ours = {k: v for k, v in (tmpl.get("labels") or {}).items() if k.startswith("benchctl.io/")}
    if LABEL_CAMPAIGN not in ours:
        raise ApiError(0, "NotOurs", f"Job {state['name']}: its pod template carries no {LABEL_CAMPAIGN} label")
    return selector(ours)
