"""A campaign's runner grant through the whole AWS code path (tests/fakes/eks_world.py: each state as its function,
under the RBAC file and every admission policy, stacks/kubernetes/benchctl-identities.yaml's included): Plan grants
the campaign its runner account before its first preflight Job, and the end paths that reach Kubernetes remove
it (AbortCampaign as Teardown, RecordPlanFailure as Plan); Report, which calls no Kubernetes, leaves it and the
inert service account to the sweeper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchctl import campaign
from benchctl.aws.k8s.common import RUNNER_GRANTS
from benchctl.campaign import Task
from tests.aws_checks import upstream_api
from tests.fakes import eks_world
from tests.fakes.eks_world import CID, NS, World


def _grants(api: Any) -> dict[str, str]:
    return dict((api.stored("ConfigMap", RUNNER_GRANTS, NS) or {}).get("data") or {})


def test_plan_grants_the_campaign_its_account_before_its_first_preflight_job(aws_worlds: dict[str, World]) -> None:
    for name, world in aws_worlds.items():
        calls = [(sorted(groups), verb, resource, ns_name) for groups, verb, _, resource, _, ns_name in world.api.calls]
        grant = calls.index((["benchctl-plan"], "patch", "configmaps", RUNNER_GRANTS))
        first_job = next(i for i, c in enumerate(calls) if c[:3] == (["benchctl-plan"], "create", "jobs"))
        assert grant < first_job, name
        # Report calls no Kubernetes: the grant stays beside the inert service account (its association is gone)
        assert _grants(world.api) == {CID: CID}, name
        assert world.api.stored("ServiceAccount", CID, NS) is not None, name


@pytest.mark.parametrize("ending", ["AbortCampaign", "RecordPlanFailure"])
def test_the_end_paths_that_reach_kubernetes_remove_the_grant(tmp_path: Path, ending: str) -> None:
    spec = eks_world.example_specs()["smoke[managed-nodegroup]"]
    with upstream_api() as api, eks_world.moto_eks(spec) as session:
        eks_world.cluster_prerequisites(api, spec)
        eks_world.job_controller(api)
        eks_world.gpu_nodes(api, spec)
        caller = eks_world.Caller("Plan")
        p, ctx, _ = eks_world.providers(spec, caller.client(api), tmp_path, session)
        campaign.plan(p, ctx, Task(state="Plan"))
        assert _grants(api) == {CID: CID}
        error = {"Error": "LoadFailed", "Cause": "a step died"}
        if ending == "AbortCampaign":
            caller.function = "Teardown"
            for _ in range(20):
                if campaign.abort_campaign(p, ctx, Task(state=ending, error=error), wait_gone=True)["done"]:
                    break
        else:
            campaign.plan_failed(p, ctx, Task(state=ending, error={"Error": "PreflightFailed", "Cause": "x"}))
        assert _grants(api) == {}
        assert api.refused == []
        if ending == "AbortCampaign":
            assert api.stored("ServiceAccount", CID, NS) is None and api.denied == []
        # RecordPlanFailure: the Plan function may not delete service accounts; its (inert) account is the
        # sweeper's, by its label, as before the grants
