"""``EksLoad`` (LoadPort on EKS): one load runner Job per workload of an experiment (the warm-up its own),
created at the workload's first step (``render_runner_job``). Each step is a request in the campaign's
runner hand-over (``runner/<campaign>/``) that the Job's control container picks up; the step's end is the
end record it writes, signed with the step's key, after uploading the step's artifacts to its raw S3 prefix
(``poll``, ``end_record``; a Job that ended without it is a failed step, a forged one EndRecordForged);
``failure_logs`` collects the pods' log tails; ``stop`` deletes the Job (Foreground: its pods go with it).
``pending`` says why a step's runner does not run yet (its pod waits for a node or its images): until it
runs nobody heartbeats the step's task token, so LaunchLoad gives AwaitLoadEnd a heartbeat bound that also
covers that wait (``timeouts.capacity_s``).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import secrets
from typing import Any

from benchctl.aws.eks_kube import JOB, KubeSource, SpecSource, _Jobs, job_logs, job_status
from benchctl.aws.k8s.client import ApiError, Conflict, NotFound
from benchctl.aws.k8s.common import selection, selector
from benchctl.aws.k8s.jobs import raw_prefix, render_runner_job, runner_deadline_s, runner_request
from benchctl.campaign.ports import JSON, LoadRequest
from benchctl.campaign.runstate import runner_key
from benchctl.campaign.store import RunStore
from benchctl.errors import EndRecordForged

# An end record as the runner Job writes it (RUNNER_CONTROL_SCRIPT ``signed``): the record's JSON text with
# ``, "hmac": "<HMAC-SHA256 of that text, closed by its '}', with the step's end_key>"}`` in place of its '}'
_SIGNED = re.compile(rb'(?P<body>\{.*), "hmac": "(?P<sig>[0-9a-f]{64})"\}\s*', re.DOTALL)
END_KEY_BYTES = 32  # each step's own key (LaunchLoad's, in its key object), HMAC-SHA256's block is 64
# A step's key lives in an object of its own beside its request (``key.json``: ``{"end_key": "<hex>"}``). The
# runner Job's control container reads it into a shell variable and signs with it; the AIPerf container gets no
# AWS credentials (``render_runner_job``: EKS Pod Identity skips it) and its handed-over request has no key, so
# the process that talks to the serving side can neither read nor forge a step's end record.
END_KEY_OBJECT = "key.json"


def sign_end(body: bytes, key_hex: str) -> bytes:
    """``body`` (a JSON object's text) signed as the runner signs it (what tests forge and verify with)."""
    sig = hmac.new(bytes.fromhex(key_hex), body, hashlib.sha256).hexdigest()
    return body[:-1] + f', "hmac": "{sig}"}}'.encode()


def verified_end(raw: bytes, key_hex: str, step: str, where: str) -> JSON:
    """The end record ``raw`` of ``step`` once its signature holds with the step's key, else
    :class:`EndRecordForged` naming ``where`` (an unsigned record, another key's, an altered byte, another step's)."""
    m = _SIGNED.fullmatch(raw)
    if m is None:
        raise EndRecordForged(f"{where}: the end record of step {step} is not signed (no trailing \"hmac\"): refused")
    want = hmac.new(bytes.fromhex(key_hex), m["body"] + b"}", hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, m["sig"].decode()):
        raise EndRecordForged(f"{where}: the end record of step {step} is not signed with the key of the step's "
                              "request (forged or altered): refused")
    data = json.loads(m["body"] + b"}")
    if not isinstance(data, dict) or data.get("step") != step or not isinstance(data.get("exit_code"), int):
        raise EndRecordForged(f"{where}: a signed end record that is not step {step}'s ({str(data)[:200]}): refused")
    return data


class EksLoad(_Jobs):
    """``LoadPort`` on EKS: a load runner Job per workload (``render_runner_job``); a step is a request in
    the campaign's hand-over (``control``, keys ``runstate.runner_key``; its runner reads them and writes
    only end records), its end the end record the Job writes there after uploading the step's artifacts."""

    def __init__(self, kube: KubeSource, spec: SpecSource, campaign_id: str, *, control: RunStore,
                 region: str, **kw: Any) -> None:
        super().__init__(kube, spec, campaign_id, **kw)
        self.control, self.region = control, region

    def launch(self, request: LoadRequest) -> JSON:
        if request.campaign_id != self.campaign_id:
            raise ValueError(f"load {request.job_id}: campaign {request.campaign_id!r} is not {self.campaign_id!r}")
        step = request.step_id
        try:
            prefix = raw_prefix(request.artifact_uri, step)
        except ValueError as err:
            raise ValueError(f"load {request.job_id}: {err}") from None
        steps = list(request.group_steps or (step,))
        if step not in steps:
            raise ValueError(f"load {request.job_id}: step {step!r} is not one of its runner's steps {steps}")
        group = request.group or step
        grace = self.spec.timeouts.load_grace_s
        # the key the step's end record is signed with, one per step, written before the request the runner
        # waits for; a redelivered launch keeps the one its runner may have read already
        kept = self.control.read_json(runner_key(request.experiment, step, END_KEY_OBJECT)) or {}
        end_key = kept.get("end_key") or secrets.token_hex(END_KEY_BYTES)
        self.control.write_json(runner_key(request.experiment, step, END_KEY_OBJECT), {"end_key": end_key})
        req = runner_request(step, list(request.argv), request.est_s, grace, request.input_uri)
        self.control.write_json(runner_key(request.experiment, step, "request.json"), req)
        job = render_runner_job(self.spec, request.campaign_id, request.experiment, group, steps, prefix,
                                f"{self.control.uri.rstrip('/')}/{runner_key(request.experiment)}", self.region,
                                active_deadline_s=runner_deadline_s(request.group_est_s, len(steps), grace,
                                                                    self.spec.timeouts.capacity_s))
        name = job["metadata"]["name"]
        try:
            self.kube.create(job)
        except Conflict:  # the workload's runner, started by its first step (or a redelivered event)
            if not self._ours(self.kube.get(*JOB, name, self.namespace)):
                raise ValueError(f"Job {self.namespace}/{name} exists and is not this campaign's") from None
        return {"job_id": request.job_id, "name": name, "namespace": self.namespace,
                "control": {"experiment": request.experiment, "step": step},
                "artifact_dir": request.artifact_uri, "argv": req["argv"],
                "pod_selector": selector(selection(request.campaign_id, request.experiment, group))}

    def end_record(self, experiment: str, step: str) -> JSON | None:
        """The step's end record once its runner wrote it (None before), verified against the step's key
        (:data:`END_KEY_OBJECT`, :func:`verified_end`; a record it does not verify raises :class:`EndRecordForged`)."""
        raw = self.control.read_bytes(runner_key(experiment, step, "end.json"))
        if raw is None:
            return None
        where = f"{self.control.uri.rstrip('/')}/{runner_key(experiment, step, 'end.json')}"
        key = (self.control.read_json(runner_key(experiment, step, END_KEY_OBJECT)) or {}).get("end_key")
        if not isinstance(key, str) or not re.fullmatch(r"[0-9a-f]{2,128}", key):
            raise EndRecordForged(f"{where}: step {step} has no key ({END_KEY_OBJECT}) to verify its end record by")
        return verified_end(raw, key, step, where)

    def poll(self, state: JSON) -> int | None:
        """The step's exit code from its (verified) end record; a runner Job that ended without one failed the
        step."""
        experiment, step = state["control"]["experiment"], state["control"]["step"]
        end = self.end_record(experiment, step)
        if end is not None:
            return int(end["exit_code"])
        code = job_status(self.kube, state)
        if code is None:
            return None
        end = self.end_record(experiment, step)  # written just before the Job ended
        return int(end["exit_code"]) if end is not None else (code or 1)

    def pending(self, state: JSON) -> str | None:
        """Why the step's runner pod does not run yet (none yet; Pending: unscheduled with the scheduler's
        message, or its containers waiting), or None once it runs or ended."""
        pods = self.kube.list("v1", "Pod", state["namespace"], state["pod_selector"])
        if not pods:
            return f"Job {state['name']} has no pod yet"
        if any((p.get("status") or {}).get("phase") not in (None, "Pending") for p in pods):
            return None
        why = []
        for p in pods:
            st = p.get("status") or {}
            for c in st.get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") != "True":
                    why.append(f"unscheduled: {c.get('message') or c.get('reason') or 'no node yet'}")
            for cs in st.get("containerStatuses") or []:
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting:
                    why.append(f"{cs.get('name')} {waiting.get('reason', 'waiting')}"
                               + (f": {waiting['message']}" if waiting.get("message") else ""))
        return f"pod {pods[0]['metadata']['name']} Pending" + (f" ({'; '.join(why)})" if why else "")

    def failure_logs(self, state: JSON, tail_lines: int = 100) -> JSON:
        """The last log lines of every container of the Job's pods (see :func:`job_logs`), and, for a pod that
        never ran, why (``pending``)."""
        logs = job_logs(self.kube, state, tail_lines)
        with contextlib.suppress(ApiError):
            if why := self.pending(state):
                logs["pending"] = why
        return logs

    def observe(self, state: JSON) -> JSON:
        """Read the step's runner Job back: gone, or still there (and whether it still runs)."""
        try:
            job = self.kube.get(*JOB, state["name"], state["namespace"])
        except NotFound:
            return {"kind": "Job", "name": state["name"], "present": False, "why": ""}
        deleting = bool((job.get("metadata") or {}).get("deletionTimestamp"))
        return {"kind": "Job", "name": state["name"], "present": True,
                "why": "being deleted" if deleting else "not deleted (the sweeper removes it)"}

    def stop(self, state: JSON) -> None:
        """Delete the step's runner Job (its other steps go too: only failure paths stop a load)."""
        with contextlib.suppress(NotFound):
            self.kube.delete(*JOB, state["name"], state["namespace"])
