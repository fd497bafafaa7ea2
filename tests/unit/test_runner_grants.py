"""A Job runs as a service account only when its campaign was granted that account by something its writer does not
control (stacks/kubernetes/benchctl-identities.yaml): the runner grants ConfigMap, which the Plan function fills
and the end paths empty, read by the admission policy benchctl-runner-identities as its parameter.

Each rule is evaluated by a real CEL interpreter (tests/fakes/admission.py) on the objects benchctl renders (a
runner Job of the smoke example, Plan's preflight Jobs) and on hostile variants of them; every refusal names the
rule it expects (the message's ``[rule]`` prefix) and no other rule of the file refuses it.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from benchctl.aws.k8s.admission import FUNCTION_GROUPS
from benchctl.aws.k8s.client import RESOURCES, ApiError, KubeClient
from benchctl.aws.k8s.common import RUNNER_GRANTS, runner_grant_patch
from benchctl.aws.k8s.preflight_jobs import render_preflight_job
from benchctl.aws.k8s.render import render_campaign
from tests import yaml_files
from tests.aws_checks import IDENTITIES_FILE, upstream_api, writer_group
from tests.fakes.admission import Admission
from tests.fakes.eks_world import CID, FUNCTION_TOKENS, NS, example_specs

JSON = dict[str, Any]
DOCS = yaml_files.load_all(IDENTITIES_FILE)
SPEC = example_specs()["smoke[managed-nodegroup]"]
LOAD, PLAN, POOLS, SERVING = (FUNCTION_GROUPS[f] for f in ("Load", "Plan", "Pools", "Serving"))
TEARDOWN, SWEEP = FUNCTION_GROUPS["Teardown"], FUNCTION_GROUPS["Sweep"]
OTHER = "rival-20261201-000000"  # another live campaign
# the Dynamo operator's service account as its Helm chart names it (dynamo-platform release): a name a Job's
# campaign label can carry, since it is a valid campaign id
OPERATOR_SA = "dynamo-platform-dynamo-operator-controller-manager"


def _grants(data: dict[str, str] | None) -> JSON:
    out: JSON = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": RUNNER_GRANTS, "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "benchctl"}}}
    if data is not None:
        out["data"] = dict(data)
    return out


def _admit(obj: JSON | None, group: str, grants: dict[str, str] | None = None, *, operation: str = "CREATE",
           old: JSON | None = None, params: bool = True) -> list[str]:
    """The denials' messages of the identity file's policies for one write by ``group``."""
    adm = Admission(DOCS, [_grants(grants)] if params else [])
    target = obj if obj is not None else old
    assert target is not None
    r = RESOURCES[target["kind"]]
    return [m.split("denied request: ", 1)[1] for _, _, m in adm.admit(
        operation=operation, api_version=target["apiVersion"], plural=r.plural, namespace=NS, groups=[group],
        obj=obj, old=old)]


def _rules(messages: list[str]) -> list[str]:
    return [m.split("]", 1)[0] + "]" if m.startswith("[") else m for m in messages]


def _rendered(kind: str, part: str) -> JSON:
    return next(copy.deepcopy(o) for p, o in render_campaign(SPEC, CID) if o["kind"] == kind and part in p)


def _runner_job(campaign: str = CID, account: str | None = None) -> JSON:
    """The smoke example's first runner Job, relabelled as ``campaign``'s and run as ``account`` (default: the
    account benchctl renders, the campaign id)."""
    job = _rendered("Job", "/jobs/")
    job["metadata"]["labels"]["benchctl.io/campaign"] = campaign
    job["spec"]["template"]["metadata"]["labels"]["benchctl.io/campaign"] = campaign
    job["spec"]["template"]["spec"]["serviceAccountName"] = account or campaign
    return job


# ------------------------------------------------------------------------ what benchctl writes is admitted


def test_a_runner_job_of_a_granted_campaign_and_plans_preflight_jobs_are_admitted() -> None:
    assert _admit(_rendered("Job", "/jobs/"), LOAD, {CID: CID}) == []
    for check in ("aiperf", "uploader"):
        assert _admit(render_preflight_job(SPEC, CID, check), PLAN, {CID: CID}) == []


def test_every_object_the_other_functions_write_names_no_service_account_and_is_admitted_without_a_grant() -> None:
    for path, obj in render_campaign(SPEC, CID):
        if obj["kind"] in ("DynamoGraphDeployment", "DaemonSet") or (obj["kind"] == "Job" and "/jobs/" not in path):
            assert _admit(obj, writer_group(path, obj), {}) == [], path


# ------------------------------------------------------------------------ a label cannot pick the account


def test_a_runner_job_labelled_with_a_campaign_that_has_no_grant_is_refused_by_the_grant_rule() -> None:
    assert _rules(_admit(_runner_job(OTHER), LOAD, {CID: CID})) == ["[identity/grant]"]


def test_a_runner_job_run_as_the_dynamo_operators_account_through_its_label_is_refused_by_the_grant_rule() -> None:
    assert _rules(_admit(_runner_job(OPERATOR_SA), LOAD, {CID: CID})) == ["[identity/grant]"]


def _as_other_account(job: JSON) -> JSON:
    job["spec"]["template"]["spec"]["serviceAccountName"] = OTHER
    return job


# The review's b05 and b06 as the grants hold them. b05 as the review wrote it, a Job labelled with ANOTHER LIVE
# campaign's id and run as that campaign's account, is still admitted: one Load function writes every campaign's
# Jobs, so no request tells campaign A's invocation from B's (docs/explanation/safety.md, "Runner identities").
@pytest.mark.parametrize(("case", "job", "grants", "rule"), [
    pytest.param("b05", lambda: _runner_job(OTHER), {CID: CID}, "[identity/grant]",
                 id="b05 a runner Job labelled and run as an ended campaign's runner"),
    pytest.param("b05", lambda: _as_other_account(_runner_job(CID)), {CID: CID, OTHER: OTHER}, "[identity/match]",
                 id="b05 a runner Job of this campaign run as another live campaign's runner"),
    pytest.param("b06", lambda: _runner_job(OPERATOR_SA), {CID: CID}, "[identity/grant]",
                 id="b06 a runner Job run as the Dynamo operator's account"),
])
def test_the_reviews_runner_identity_cases_are_refused_naming_the_rule(case: str, job: Any, grants: dict[str, str],
                                                                         rule: str) -> None:
    assert _rules(_admit(job(), LOAD, grants)) == [rule], case


@pytest.mark.parametrize("field", ["serviceAccountName", "serviceAccount"])
def test_a_runner_job_whose_account_is_not_its_campaigns_grant_is_refused_by_the_match_rule(field: str) -> None:
    """Labelled with a granted campaign, running as another live campaign's runner (or the deprecated alias
    serviceAccount naming it beside the right serviceAccountName)."""
    job = _runner_job(CID)
    job["spec"]["template"]["spec"][field] = OTHER
    assert _rules(_admit(job, LOAD, {CID: CID, OTHER: OTHER})) == ["[identity/match]"]


@pytest.mark.parametrize(("group", "kind"), [(POOLS, "DaemonSet"), (SERVING, "DynamoGraphDeployment"), (SERVING, "Job")])
def test_another_functions_pod_template_naming_a_granted_account_is_refused_by_the_writer_rule(group: str,
                                                                                                  kind: str) -> None:
    obj = _rendered(kind, "smoke-job" if kind == "Job" else "")
    pods = ([c["podTemplate"]["spec"] for c in obj["spec"]["components"]] if kind == "DynamoGraphDeployment"
            else [obj["spec"]["template"]["spec"]])
    pods[0]["serviceAccountName"] = CID
    assert _rules(_admit(obj, group, {CID: CID})) == ["[identity/writer]"]


def test_without_the_grants_configmap_every_write_is_refused() -> None:
    (message,) = _admit(_rendered("Job", "/jobs/"), LOAD, params=False)
    assert "no params found" in message and RUNNER_GRANTS in message


# ------------------------------------------------------------------------ who may change the grants


def _patch(group: str, old: dict[str, str] | None, new_data: dict[str, str | None]) -> list[str]:
    """A merge patch of the grants' data by ``group`` (what the API server admits: the stored object patched)."""
    new = {k: v for k, v in {**(old or {}), **new_data}.items() if v is not None}
    return _rules(_admit(_grants(new), group, operation="UPDATE", old=_grants(old)))


def test_plan_grants_a_campaign_its_own_account_and_nothing_else() -> None:
    assert _patch(PLAN, {OTHER: OTHER}, runner_grant_patch(CID, granted=True)["data"]) == []
    assert _patch(PLAN, {}, {CID: OPERATOR_SA}) == ["[grants/self]"]
    assert _patch(PLAN, {}, {OPERATOR_SA: OPERATOR_SA}) == []  # see the module: Plan's word is trusted here


def test_the_load_function_cannot_grant_or_revoke_a_campaigns_account_only_its_doctors() -> None:
    assert _patch(LOAD, {CID: CID}, {OTHER: OTHER}) == ["[grants/writer]"]
    assert _patch(LOAD, {CID: CID}, {CID: None}) == ["[grants/writer]"]
    assert _patch(LOAD, {}, {"doctor-20261201-000000": "doctor-20261201-000000"}) == []
    assert _patch(LOAD, {"doctor-20261201-000000": "doctor-20261201-000000"}, {"doctor-20261201-000000": None}) == []


@pytest.mark.parametrize("group", [TEARDOWN, SWEEP])
def test_the_end_paths_only_remove_grants(group: str) -> None:
    assert _patch(group, {CID: CID, OTHER: OTHER}, runner_grant_patch(CID, granted=False)["data"]) == []
    assert _patch(group, {CID: CID}, {OTHER: OTHER}) == ["[grants/writer]"]


@pytest.mark.parametrize("group", [POOLS, SERVING])
def test_functions_with_no_part_in_a_runner_identity_change_no_grant(group: str) -> None:
    assert _patch(group, {}, {CID: CID}) == ["[grants/writer]"]


def test_a_function_changes_only_the_grants_data() -> None:
    relabelled = _grants({CID: CID})
    relabelled["metadata"]["labels"]["x"] = "y"
    assert _rules(_admit(relabelled, PLAN, operation="UPDATE", old=_grants({CID: CID}))) == ["[grants/shape]"]
    assert _rules(_admit(None, PLAN, operation="DELETE", old=_grants({CID: CID}))) == ["[grants/shape]"]


# ------------------------------------------------------------------------ over HTTP, under RBAC


def test_over_the_wire_load_may_not_grant_a_campaign_and_pools_may_not_patch_the_grants_at_all() -> None:
    """The fake API server (RBAC of stacks/kubernetes/benchctl-rbac.yaml, every policy): the Load function's patch
    of a campaign's grant is refused by admission, the Pools function's by RBAC, and nothing is stored."""
    with upstream_api() as api:
        load = KubeClient(api.url, token=lambda: FUNCTION_TOKENS["Load"])
        with pytest.raises(ApiError) as err:
            load.merge_patch("v1", "ConfigMap", RUNNER_GRANTS, NS, runner_grant_patch(OTHER, granted=True))
        assert err.value.status == 422 and "[grants/writer]" in str(err.value)
        pools = KubeClient(api.url, token=lambda: FUNCTION_TOKENS["Pools"])
        with pytest.raises(ApiError) as err:
            pools.merge_patch("v1", "ConfigMap", RUNNER_GRANTS, NS, runner_grant_patch(OTHER, granted=True))
        assert err.value.status == 403 and 'cannot patch resource "configmaps"' in str(err.value)
        assert not (api.stored("ConfigMap", RUNNER_GRANTS, NS) or {}).get("data")
        plan = KubeClient(api.url, token=lambda: FUNCTION_TOKENS["Plan"])
        plan.merge_patch("v1", "ConfigMap", RUNNER_GRANTS, NS, runner_grant_patch(OTHER, granted=True))
        with pytest.raises(ApiError) as err:  # granted now, but not to this label: the live grant is read
            load.create(_runner_job(CID))
        assert err.value.status == 422 and "[identity/grant]" in str(err.value)
        load.create(_runner_job(OTHER))  # OTHER's own Job: admitted (what a grant does NOT stop, see the yaml)
