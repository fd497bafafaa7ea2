"""A ``tune:`` campaign on the twin whose arms' sweep is ``concurrency: auto``: a timing profile where prefill is
slow next to decode makes 3 prefill + 1 decode workers hold the SLO at a higher load than the arm's own 2 + 2
(same 4 GPUs), and the tune phase, which pilots three disaggregated splits and three aggregated layouts, runs the
disaggregated arm at 3 + 1; the lake's ``tuning`` table and the report show the search. Then each arm's sweep is
the SLO-edge search alone, which brackets each mode's edge by itself, within its resolution and budget line.
One campaign for both (its 8 deployments are what it costs).

The profile (the same for every role: prefill workers read its prefill curve, decode workers its decode grid,
aggregated workers both): a prefill of ISL 256 takes 250 ms, a decode iteration 5 ms whatever the batch. P
prefill workers complete 4 P requests/s, so in a closed loop of c the first token waits about c / 4P s less the
decode's time (the first wave up to ceil(c / P) x 250 ms): at c = 6, ~750 ms with 2 prefill workers (past the
625 ms bound), 500 ms with 3; at c = 4, 500 ms with 2 and 1 s with 1. Everything else is cut to what the test
needs (one quality question, one smoke request, a two-request warm-up): 8 deployments.
"""

from __future__ import annotations

import json
import re

import pytest

from benchctl.analysis.search import Measured, bound_level, bracket, located
from benchctl.forecast.twin_profile import TimingProfile, write_profile
from tests.e2e.conftest import assert_report_and_receipt, campaign_once, leftovers, read_table, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
PROFILE = "slow-prefill-test"
MAX_PROBES = 6


def _profile(out):
    isl, kv, ctx = (0.0, 4096.0), (0.0, 65536.0), (0.0, 8192.0)
    write_profile(out / "twin" / PROFILE, TimingProfile(
        isl, (0.25, 4000.0), kv, ctx, ((5.0, 5.0), (5.0, 5.0)), {"source": "test: prefill slow next to decode"}))


def _spec(tmp_path):
    def mutate(d):
        # a GPU aiconfigurator has no data for: the candidates are not predicted, the pilots alone decide
        d["pools"][0].update(gpu_kind="T4-16GB", name="gpu", instance_type="m7i.2xlarge", network={})
        d["pricing"] = {"instances": {"m7i.2xlarge": {"usd_per_hour": 0.5}}}
        d["experiments"] = [
            {"name": "agg", "mode": "aggregated", "router": "round-robin", "mocker": {"twin": PROFILE},
             "workers": [{"role": "worker", "pool": "gpu", "replicas": 4, "tensor_parallel": 1}]},
            {"name": "disagg", "mode": "disaggregated", "router": "round-robin", "mocker": {"twin": PROFILE},
             "workers": [{"role": "prefill", "pool": "gpu", "replicas": 2, "tensor_parallel": 1},
                         {"role": "decode", "pool": "gpu", "replicas": 2, "tensor_parallel": 1}]}]
        # the arms' sweep: the SLO-edge search alone, from c=4
        d["workloads"] = [{"kind": "concurrency_sweep", "name": "sweep", "concurrency": "auto", "isl": 256, "osl": 16,
                           "duration_s": 6, "search": {"start": 4, "max_probes": MAX_PROBES, "resolution": 0.1}}]
        d["warmup"] = {"request_count": 2}  # the first load after a deploy is not the one measured
        d["smoke"] = {"requests": 1, "max_tokens": 8}
        d["quality"] = {"questions": 1}
        d["slo"] = {"ttft_ms": 625, "itl_ms": 200}
        d["comparisons"] = []
        d["tune"] = {"pilots": 3, "pilot_requests": 40, "loads": [4, 6]}
        d.pop("budget", None)

    return write_spec(tmp_path, "tune", mutate)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """The campaign, run once for the module; the run directory is reaped by the module's end."""
    tmp = tmp_path_factory.mktemp("tune")
    out = tmp / "out"
    _profile(out)
    yield from campaign_once(_spec(tmp), out, timeout=540)


def test_the_tune_phase_runs_each_arm_at_its_best_piloted_configuration(tuned):
    code, output, out = tuned
    assert code == 0, output[-4000:]
    assert not leftovers(out / "campaigns" / "e2e")
    rows = {(r["experiment"], r["candidate"]): r for r in read_table(out / "lake", "tuning")}
    disagg = {c: r for (e, c), r in rows.items() if e == "disagg"}
    agg = {c: r for (e, c), r in rows.items() if e == "agg"}
    summary = json.dumps({k: [r["measured_edge"], r["measured_goodput_rps"], r["chosen"], r["measured_loads_json"]]
                          for k, r in {**{f"d:{c}": r for c, r in disagg.items()},
                                       **{f"a:{c}": r for c, r in agg.items()}}.items()}, indent=1)
    piloted_d = [c for c, r in disagg.items() if r["pilot"]]
    piloted_a = [c for c, r in agg.items() if r["pilot"]]
    assert len(piloted_d) >= 3 and len(piloted_a) >= 2, summary
    assert {"p2x1-d2x1", "p3x1-d1x1"} <= set(piloted_d), summary
    chosen = [c for c, r in disagg.items() if r["chosen"]]
    assert chosen == ["p3x1-d1x1"], summary
    assert disagg["p3x1-d1x1"]["measured_edge"] > disagg["p2x1-d2x1"]["measured_edge"], summary
    assert sum(r["chosen"] for r in agg.values()) == 1, summary
    # every role of every candidate was timed by the one named profile
    deployed = [json.loads(f.read_text()) for f in (out / "campaigns" / "e2e" / "deployments").glob("*.json")]
    twins = [t for d in deployed for t in (d["state"].get("twins") or {}).values()]
    assert twins and all(t["name"] == PROFILE for t in twins), twins
    assert len({d["state"]["deployment_id"] for d in deployed}) == 8  # 6 pilots + 2 arms
    # the arm ran at its choice: its deployment and its experiments row
    arm = next(d for d in deployed if d["state"]["deployment_id"] == "disagg")
    exps = {r["experiment"]: r for r in read_table(out / "lake", "experiments")}
    assert [(g["role"], g["replicas"]) for g in json.loads(exps["disagg"]["workers_json"])] == \
        [("prefill", 3), ("decode", 1)], (exps["disagg"], arm)
    html = assert_report_and_receipt(out, "e2e", "succeeded")
    report = (out / "campaigns" / "e2e" / "report" / "report.html").read_text(encoding="utf-8")
    assert "each arm at the best configuration its own pilots found" in report.lower(), html
    # per arm, how many layouts were feasible and how many its pilots covered (both arms by the same rule)
    assert re.search(r"disagg: p3x1-d1x1, of \d+ feasible layouts 3 piloted \(\d+%\)", report), html
    assert "p3x1-d1x1" in report


def test_concurrency_auto_brackets_each_modes_edge_within_its_resolution(tuned):
    code, output, out = tuned
    assert code == 0, output[-4000:]
    steps = read_table(out / "lake", "steps")
    level = bound_level(read_table(out / "lake", "comparisons")[0]["confidence"]) if read_table(
        out / "lake", "comparisons") else bound_level(0.95)
    requests = read_table(out / "lake", "requests")
    stopped_by_client: list[str] = []
    for exp in ("agg", "disagg"):
        probes = sorted((r for r in steps if r["experiment"] == exp), key=lambda r: r["step_index"])
        # every step of the arm is a probe; its load is in the lake (variant c<load>), its decision beside it
        assert probes and all(r["search_probe"] is not None for r in probes)
        assert len(probes) <= MAX_PROBES
        assert [r["variant"] for r in probes] == [f"c{r['concurrency']}" for r in probes]
        assert probes[0]["concurrency"] == 4 and len({r["concurrency"] for r in probes}) == len(probes)
        decisions = [json.loads(r["search_json"]) for r in probes]
        assert [d["load"] for d in decisions] == [r["concurrency"] for r in probes]
        # the bracket, recomputed here from the requests the lake holds (the views' goodput rule)
        points = []
        for r in probes:
            rows = [q for q in requests if q["experiment"] == exp and q["step_id"] == r["step_id"]]
            good = sum(1 for q in rows if q["error_type"] is None and q["ttft_ms"] is not None
                       and q["ttft_ms"] <= r["slo_ttft_ms"] and q["itl_ms"] is not None
                       and q["itl_ms"] <= r["slo_itl_ms"])
            points.append(Measured(int(r["concurrency"]), good, len(rows)))
        # the search stopped by itself: the probe after the last that ran says located, or the budget line was hit
        loads = out / "campaigns" / "e2e" / "loads" / exp
        skipped = [json.loads(f.read_text()) for f in sorted(loads.glob("sweep-s*-r0.json"))]
        whys = [s["search"]["why"] for s in skipped if s.get("state", {}).get("skipped")]
        # (or at the client's reach: on a busy 2-core machine AIPerf can fall behind twice at or above a load, and
        # the search then says so rather than probe what it cannot measure; at least one arm must locate its edge)
        reach = [w for w in whys if "cannot be measured with this client" in w]
        if reach:
            assert "(client-bound)" in reach[0] and not any(w.startswith("located") for w in whys), whys
            # the records bear it out: two probes at or above the named load whose load generator fell behind
            named = re.search(r"at or above c=(\d+)", reach[0])
            assert named, reach
            x = int(named.group(1))
            ran = [json.loads(f.read_text()) for f in sorted(loads.glob("sweep-s*-r0.json"))]
            assert sum(1 for r in ran if r.get("client_bound") and (r.get("concurrency") or 0) >= x) >= 2, reach
            stopped_by_client.append(exp)
            continue
        assert len(probes) == MAX_PROBES or any(w.startswith("located") for w in whys), whys
        # as the search judged them, allowing for the run-to-run spread (search.run_spread, default 0.3): located to
        # the resolution, or to the finer of it and what that spread supports (and said so)
        within, past = bracket(points, 0.9, level, spread=0.3)
        supported = any(w.startswith("located to the resolution the run-to-run spread supports") for w in whys)
        assert within is not None and past is not None and (located(within, past, 0.1) or supported), (
            exp, within, past, [(p.load, p.good, p.n) for p in points], whys)
    assert len(stopped_by_client) < 2, "neither arm's search could locate its edge: the client fell behind in both"
    report = (out / "campaigns" / "e2e" / "report" / "report.html").read_text(encoding="utf-8")
    assert "Loads the SLO-edge search chose" in report
