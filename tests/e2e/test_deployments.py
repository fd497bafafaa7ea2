"""Deployments as a level of the design, end to end (real Dynamo mockers, real AIPerf, the campaign ASL): the smoke
spec cut down to one short sweep, each mode deployed twice (``design.deployments: 2``) with the twin's own seeded
spread between deployments, in the randomized counterbalanced order the plan draws (A B | B A). The campaign
succeeds; each deployment is its own plan entry, process set and run-store record; the lake's steps carry the
deployment; the report gives the order and the variance components its verdicts rest on; the teardown receipt
lists every deployment."""

from __future__ import annotations

import json
import re

import pytest

from benchctl.local.report import render_report
from tests.e2e.conftest import campaign_once, leftovers, read_table, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]
SPREAD_PCT = 3.0


def _spec(tmp_path):
    def mutate(d):
        d["name"] = "deployments-e2e"
        sweep = next(w for w in d["workloads"] if w["kind"] == "concurrency_sweep")
        sweep.update(concurrency=[1, 4], duration_s=3)
        sweep.pop("search", None)
        d["workloads"] = [sweep]
        d.update(warmup={"request_count": 2}, quality={"questions": 1}, smoke={"requests": 1, "max_tokens": 8},
                 design={"deployments": 2, "twin_spread_pct": SPREAD_PCT})
        d.pop("budget", None)

    return write_spec(tmp_path, "deployments", mutate)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deployments")
    yield from campaign_once(_spec(tmp), tmp / "out", timeout=420)


def test_two_deployments_per_mode_run_interleaved_and_succeed(deployed):
    code, output, out = deployed
    assert code == 0, output[-4000:]
    assert "SUCCEEDED" in output, output[-2000:]
    run = out / "campaigns" / "e2e"
    plan = json.loads((run / "plan.json").read_text())
    order = [e["name"] for e in plan["experiments"]]
    # four plan entries, one per deployment; the second round reverses the first (A B | B A)
    assert sorted(order) == ["agg--d1", "agg--d2", "disagg--d1", "disagg--d2"], order
    assert [n.split("--")[0] for n in order[2:]] == [n.split("--")[0] for n in reversed(order[:2])], order
    assert plan["design"]["rounds"] == [[n.split("--")[0] for n in order[:2]], [n.split("--")[0] for n in order[2:]]]
    # each deployment its own processes, all stopped
    assert sorted(p.stem for p in (run / "deployments").glob("*.json")) == sorted(order)
    assert leftovers(run) == []
    # the deployments ran in the plan's order, each recorded under its experiment with its own name
    deploys = sorted((r for r in read_table(out / "lake", "timeline") if r["event"] == "deploy_applied"),
                     key=lambda r: r["at"])
    assert [r["deployment"] for r in deploys] == order
    assert all(r["experiment"] == r["deployment"].split("--")[0] for r in deploys)
    speeds = {r["deployment"]: json.loads(r["detail_json"])["speed"] for r in deploys}
    assert len(set(speeds.values())) == 4 and all(0.8 < s < 1.25 for s in speeds.values()), speeds


def test_the_lake_has_the_deployment_of_every_step(deployed):
    _, _, out = deployed
    steps = read_table(out / "lake", "steps")
    by = {(r["experiment"], r["deployment"]) for r in steps}
    assert by == {("agg", "agg--d1"), ("agg", "agg--d2"), ("disagg", "disagg--d1"), ("disagg", "disagg--d2")}
    # repeat r ran on deployment r + 1 (one repeat per deployment), on both sides
    assert all(r["deployment"].endswith(f"--d{r['repeat'] + 1}") for r in steps)


def test_the_report_shows_the_order_the_variance_components_and_every_deployments_receipt(deployed):
    _, _, out = deployed
    md = render_report(out / "lake", "e2e", "md")  # the report the run wrote, as Markdown (its HTML's twin)
    text = re.sub(r"\\([\\`*_\[\]|~])", r"\1", md)
    q1 = text[text.index("### Q1."):text.index("### Q2.")]
    assert re.search(r"agg deployed 2 times and disagg 2 times, in the order (agg|disagg)--d1, (agg|disagg)--d1, "
                     r"(agg|disagg)--d2, (agg|disagg)--d2", q1), q1
    assert re.search(r"variance components \(TTFT p50: base: between deployments [\d.]+ %", q1), q1
    # the banner says the twin varied by deployment (SIMULATED)
    assert "each deployment's mocker ran at its own seeded speed (design.twin_spread_pct" in text
    # the teardown receipt: every deployment's processes, each read back gone
    receipt = [r for r in read_table(out / "lake", "timeline") if r["event"] == "teardown_receipt"]
    assert {r["deployment"] for r in receipt} == {"agg--d1", "agg--d2", "disagg--d1", "disagg--d2"}
    assert all(json.loads(r["detail_json"])["state"] in ("gone", "restored", "handed over") for r in receipt)
