"""The report's answers on made-up campaigns that vary as a GPU campaign does (real lake files, the real views, the
rendered report): a step whose load generator fell behind is no measurement of its load, two sides paying for
different node counts are not the "same GPU total" bill, a hit-rate response that bends is not read as no
difference, the strict-SLA scenario reads only loads a mode serves, and deployments are a level of the design."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from benchctl.analysis.verdicts import Settings
from benchctl.local.query import QueryEngine
from tests.unit.synthetic_lake import Campaign
from tests.unit.test_answers import answers, compared, figures, verdict
from tests.unit.test_recommendations import HIGH, recommendations

BEHIND = {"client_on_time_fraction": 0.5, "client_issue_lag_p95_ms": 80.0, "client_lag_budget_ms": 5.0}
KEPT_UP = {"client_on_time_fraction": 0.99, "client_issue_lag_p95_ms": 1.0, "client_lag_budget_ms": 5.0}


def _sweep(c: Campaign, exp: str, mode: str, repeats: int, loads: dict[int, dict[str, Any]],
           deployments: int = 1) -> None:
    """A sweep whose steps carry the client columns (and, with ``deployments``, each repeat's deployment)."""
    for r in range(repeats * deployments):
        for load, given in loads.items():
            means = dict(given)
            extra = {k: means.pop(k) for k in ("attainment",) if k in means}
            client = means.pop("client", KEPT_UP)
            unit = {"deployment": f"{exp}--d{r // repeats + 1}"} if deployments > 1 else {}
            c.step(exp, mode, "concurrency_sweep", f"sweep-c{load}-r{r}", r, n_requests=100, concurrency=load,
                   isl=1024, osl=128, variant=f"c{load}", **means, **extra, **client, **unit)


# ----------------------------------------------------------------------------------------- the client fell behind


def test_a_client_bound_step_on_one_side_does_not_move_q1s_slo_regime(tmp_path: Path) -> None:
    # Given the same server on both sides (within the SLO up to c=64, past it at 256 and 1024), 3 repeats; on the
    # disaggregated side the load generator fell behind at c=256 and c=1024: it sent half the load, and the steps
    # look within the SLO
    same = {16: figures(100.0, attainment=1.0), 64: figures(150.0, attainment=1.0),
            256: figures(2000.0, attainment=0.5), 1024: figures(5000.0, attainment=0.1)}
    behind = {**same, 256: figures(150.0, attainment=1.0, client=BEHIND),
              1024: figures(150.0, attainment=1.0, client=BEHIND)}
    c = compared(tmp_path)
    _sweep(c, "agg", "aggregated", 3, same)
    _sweep(c, "disagg", "disaggregated", 3, behind)
    q1 = answers(c)["q1"]
    v = verdict(q1)
    # Then the steps the client did not load are left out of the regime, and no limit is called higher
    assert "SLO limit is higher" not in v and "SLO limit is lower" not in v, v
    assert "disagg within the SLO up to c=64" in v, v
    assert "client-bound: the load generator fell behind" in q1 and "sweep-c1024-r0" in q1, q1
    assert "the load generator fell behind at different points on the two sides" in q1, q1
    # nor does their lighter TTFT read as a mode effect at the loads they claim
    assert not re.search(r"TTFT p50: lower at [^;]*c=(256|1024) \(", v), v


# ----------------------------------------------------------------------------------------- who pays for what


def test_sides_on_different_node_counts_are_not_the_same_gpu_total_bill(tmp_path: Path) -> None:
    # Given aggregated on 1 node and disaggregated on 2 (prefill and decode on separate nodes), 8 worker GPUs each
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated", nodes=1)
    c.experiment("disagg", "disaggregated", nodes=2)
    c.modelled("disagg")
    c.compare("disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3")
    _sweep(c, "agg", "aggregated", 3, {1: figures(100.0), 4: figures(120.0)})
    _sweep(c, "disagg", "disaggregated", 3, {1: figures(100.0), 4: figures(120.0)})
    c.write()
    with QueryEngine(c.root) as q:
        cols, got = q.run(f"SELECT experiment, category, gpus_allocated FROM v_cost_efficiency WHERE campaign_id = "
                          f"'{c.cid}'")
    rows = {r["experiment"]: r for r in (dict(zip(cols, t, strict=True)) for t in got)}
    # Then the cost view does not call the disaggregated one the same GPU total, and Q1 names the difference
    assert rows["disagg"]["category"] == "disaggregated same GPU total, more GPUs paid (more nodes allocated)", rows
    assert rows["disagg"]["gpus_allocated"] == 16 and rows["agg"]["gpus_allocated"] == 8
    q1 = answers(c)["q1"]
    assert "the sides pay for different allocations (agg 8 GPUs on 1 node(s), disagg 16 GPUs on 2 node(s))" in q1, q1


# ----------------------------------------------------------------------------------------- a bending response


def test_a_curved_hit_rate_response_is_not_read_as_no_slope_difference(tmp_path: Path) -> None:
    # Given the aggregated hit rate straight in the duplication ratio and the disaggregated one bending below it
    # (ratio^2: the same at 0 and 1, a quarter lower at 0.5), 3 repeats, little noise
    c = compared(tmp_path, "q3", noise=0.001)
    for exp, mode, shape in (("agg", "aggregated", lambda x: x), ("disagg", "disaggregated", lambda x: x * x)):
        for r in range(3):
            for ratio in (0.0, 0.25, 0.5, 0.75, 1.0):
                sid = f"prefix-p{int(ratio * 100)}-r{r}"
                c.step(exp, mode, "prefix_cache", sid, r, prefix_ratio=ratio, variant=f"p{int(ratio * 100)}",
                       ttft_p50_ms=100.0)
                c.cache(exp, mode, sid, r, min(1.0, max(0.0, shape(ratio) + 0.002 * (r - 1))))
    q3 = answers(c)["q3"]
    v = verdict(q3)
    # Then the slopes may agree, but the curvature differs, with a direction: Q3 is directional
    assert "(directional)" in q3, q3
    assert re.search(r"the treatment's curvature minus the baseline's \(a bend of a quarter of it at the middle "
                     r"ratio\): higher: \+1", v), v


# ----------------------------------------------------------------------------------------- strict SLA


def test_the_strict_sla_scenario_ignores_loads_both_modes_fail(tmp_path: Path) -> None:
    # Given both modes within the SLO up to c=32 with equal TTFT, and both past it from c=64 on (attainment 10 %),
    # where the disaggregated TTFT is 40 % lower: which mode fails worse, at loads neither serves
    agg = {16: figures(100.0, attainment=1.0), 32: figures(120.0, attainment=1.0),
           64: figures(3000.0, attainment=0.1), 256: figures(9000.0, attainment=0.1)}
    disagg = {**agg, 64: figures(1800.0, attainment=0.1), 256: figures(5400.0, attainment=0.1)}
    c = compared(tmp_path)
    _sweep(c, "agg", "aggregated", 3, agg)
    _sweep(c, "disagg", "disaggregated", 3, disagg)
    got = recommendations(c)[HIGH]
    # Then it does not vote with the TTFT at c=64 and c=256, and says so
    assert got["outcome"] != "confirmed", got
    assert "left out: TTFT p50 at c=64, c=256, where neither mode is shown within the SLO" in got["evidence"], got


# ----------------------------------------------------------------------------------------- deployments


def test_two_deployments_per_side_are_judged_on_their_means_and_the_report_says_how_each_level_varied(
        tmp_path: Path) -> None:
    # Given two deployments of each mode, two repeats on each, the same server: Q1's design line names the
    # deployments and the components
    c = compared(tmp_path, settings=Settings(deployment_spread_pct=2.0), noise=0.02)
    loads = {1: figures(100.0), 4: figures(120.0), 16: figures(300.0)}
    _sweep(c, "agg", "aggregated", 2, loads, deployments=2)
    _sweep(c, "disagg", "disaggregated", 2, loads, deployments=2)
    q1 = answers(c)["q1"]
    assert "agg deployed 2 times and disagg 2 times" in q1, q1
    assert re.search(r"variance components \(TTFT p50: base: between deployments [\d.]+ %", q1), q1
    assert "the interval includes 0" in verdict(q1) or "inconclusive" in verdict(q1)
