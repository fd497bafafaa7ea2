"""The local campaign end to end: the real CLI runs the campaign ASL with real Dynamo mocker
workers and real AIPerf, writes the parquet lake and prints the comparison table."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    ROOT,
    assert_report_and_receipt,
    leftovers,
    read_table,
    run_pids,
    start_run,
    wait_for,
    write_spec,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def smoke_run(smoke_campaign):
    return smoke_campaign


def test_smoke_campaign_succeeds_and_prints_both_modes(smoke_run):
    res, out = smoke_run
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCEEDED" in res.stdout
    table = res.stdout.split("v_concurrency_sweep", 1)[1]
    assert "SIMULATED" in table
    header = table.splitlines()[1]
    for col in ("concurrency", "agg_ttft_p50_ms", "disagg_ttft_p50_ms", "agg_output_tokens_per_s",
                "disagg_output_tokens_per_s"):
        assert col in header
    for view in ("v_multi_turn", "v_sequence_distribution", "v_prefix_cache", "v_pareto"):
        assert f"\n{view} (SIMULATED)" in res.stdout
    rows = [r for r in read_table(out / "lake", "steps") if r["campaign_id"] == "smoke-e2e"]
    plan = json.loads((out / "campaigns" / "smoke-e2e" / "plan.json").read_text())
    # every planned step has its rows, but the search probes the search did not need (skipped, saying why)
    loads = out / "campaigns" / "smoke-e2e" / "loads"
    skipped = {(e["name"], s["step_id"]) for e in plan["experiments"] for s in e["steps"]
               if json.loads((loads / e["name"] / f"{s['step_id']}.json").read_text()).get("state", {}).get("skipped")}
    assert all(s.startswith("concurrency-sweep-s") for _, s in skipped)
    assert sorted((r["experiment"], r["step_id"]) for r in rows) == sorted(
        (e["name"], s["step_id"]) for e in plan["experiments"] for s in e["steps"]
        if (e["name"], s["step_id"]) not in skipped)
    assert {r["step_id"] for r in rows if r["search_probe"] is not None}, "the smoke's search ran no probe"
    assert {r["workload_kind"] for r in rows} == {"concurrency_sweep", "multi_turn", "sequence_distribution",
                                                  "prefix_cache"}
    assert all(r["status"] == "succeeded" for r in rows)
    # progress shown to a person
    assert "experiment 2/2 disagg" in res.stderr and "step 14/14" in res.stderr


def _view(out, name):
    from benchctl.local.query import QueryEngine

    cols, rows = QueryEngine(out / "lake").run(f"SELECT * FROM {name} WHERE campaign_id = 'smoke-e2e'")
    return [dict(zip(cols, r, strict=True)) for r in rows]


def test_all_five_views_have_results_for_both_modes(smoke_run):
    _, out = smoke_run
    sweep = _view(out, "v_concurrency_sweep")
    # the fixed loads, and every load either mode's SLO-edge search probed (the other side empty there)
    probed = [{r["concurrency"] for r in read_table(out / "lake", "steps") if r["campaign_id"] == "smoke-e2e"
               and r["experiment"] == exp and r["search_probe"] is not None} for exp in ("agg", "disagg")]
    assert [r["concurrency"] for r in sweep] == sorted({1, 4, 16} | probed[0] | probed[1])
    sweep = [r for r in sweep if r["concurrency"] in {1, 4, 16} | (probed[0] & probed[1])]  # both sides measured
    mt = _view(out, "v_multi_turn")
    assert [r["turn"] for r in mt] == [1, 2, 3]
    prefix = _view(out, "v_prefix_cache")
    assert [r["prefix_ratio"] for r in prefix] == [0.0, 0.5, 1.0]
    for rows in (sweep, mt, prefix):
        assert all(r["agg_ttft_p50_ms"] and r["disagg_ttft_p50_ms"] for r in rows)
    sd = _view(out, "v_sequence_distribution")
    assert {(r["distribution"], r["mode"]) for r in sd if r["isl_bucket"] == "all"} == {
        (d, m) for d in ("uniform", "zipf", "lognormal") for m in ("aggregated", "disaggregated")}
    pareto = _view(out, "v_pareto")
    assert {r["mode"] for r in pareto if r["on_frontier"]} == {"aggregated", "disaggregated"}


def test_measured_hit_rate_rises_with_the_prefix_ratio(smoke_run):
    _, out = smoke_run
    rows = _view(out, "v_prefix_cache")
    agg = [r["agg_cache_hit_rate"] for r in rows]
    # the mocker really caches: the server's figure follows the input duplication (cold first requests
    # and whole blocks keep it below the ratio)
    assert agg[0] == 0.0 and agg[0] < agg[1] < agg[2]
    for r in rows:
        assert r["agg_cache_hit_rate"] <= r["prefix_ratio_actual"] + 0.05
    disagg = [r["disagg_cache_hit_rate"] for r in rows]
    assert disagg[0] == 0.0 and disagg[0] < disagg[1] < disagg[2]
    # multi-turn history is reused by later turns
    assert all(r["agg_cache_hit_rate"] > 0.2 for r in _view(out, "v_multi_turn"))


def test_datasets_are_kept_raw_and_hashed_with_the_step(smoke_run):
    import hashlib

    _, out = smoke_run
    steps = [r for r in read_table(out / "lake", "steps") if r["workload_kind"] in ("sequence_distribution",
                                                                                   "prefix_cache")]
    assert len(steps) == 12
    for r in steps:
        data = Path(r["dataset_uri"]).read_bytes()
        assert Path(r["dataset_uri"]).parent.parent == Path(r["artifact_uri"])  # in the step's raw area
        assert hashlib.sha256(data).hexdigest() == r["dataset_sha256"]
    # same seed, same workload variant: both experiments sent byte-identical datasets
    by_step = {}
    for r in steps:
        by_step.setdefault(r["step_id"], set()).add(r["dataset_sha256"])
    assert all(len(h) == 1 for h in by_step.values())
    # requested lengths per request are the dataset's, and AIPerf sent exactly those inputs
    requests = [r for r in read_table(out / "lake", "requests") if r["step_id"].startswith("sequence-distribution")]
    assert len(requests) == 2 * 3 * 48
    assert all(r["requested_isl"] == r["isl"] for r in requests)
    assert len({r["requested_isl"] for r in requests}) > 20


def test_warmup_never_reaches_results_and_goodput_matches_aiperf(smoke_run):
    _, out = smoke_run
    lake = out / "lake"
    for table in ("steps", "requests", "server_metrics"):
        assert not [r for r in read_table(lake, table) if r["step_id"] == "warmup"]
    assert (lake / "raw" / "campaign_id=smoke-e2e" / "experiment=agg" / "step_id=warmup").is_dir()
    from benchctl.local.query import QueryEngine

    _, rows = QueryEngine(lake).run(
        "SELECT s.goodput_ratio, t.aiperf_good_request_fraction FROM v_step_stats s JOIN steps t "
        "ON s.campaign_id = t.campaign_id AND s.experiment = t.experiment AND s.step_id = t.step_id")
    assert rows and all(ours is not None and ours == pytest.approx(theirs) for ours, theirs in rows)


def test_step_statistics_equal_aiperf_summary_exactly(smoke_run):
    _, out = smoke_run
    lake = out / "lake"
    steps = read_table(lake, "steps")
    requests = read_table(lake, "requests")
    assert steps
    for row in steps:
        raw = lake / "raw" / f"campaign_id={row['campaign_id']}" / f"experiment={row['experiment']}" / f"step_id={row['step_id']}"
        summary = json.loads((raw / "profile_export_aiperf.json").read_text())
        assert row["ttft_p50_ms"] == summary["time_to_first_token"]["p50"]
        assert row["ttft_p99_ms"] == summary["time_to_first_token"]["p99"]
        assert row["itl_p50_ms"] == summary["inter_token_latency"]["p50"]
        assert row["itl_p99_ms"] == summary["inter_token_latency"]["p99"]
        assert row["request_latency_p50_ms"] == summary["request_latency"]["p50"]
        assert row["output_tokens_per_s"] == summary["output_token_throughput"]["avg"]
        assert row["request_throughput_per_s"] == summary["request_throughput"]["avg"]
        records = [json.loads(line) for line in (raw / "profile_export.jsonl").read_text().splitlines() if line.strip()]
        profiling = [r for r in records if r["metadata"].get("benchmark_phase") == "profiling"]
        mine = [r for r in requests if (r["campaign_id"], r["experiment"], r["step_id"]) ==
                (row["campaign_id"], row["experiment"], row["step_id"])]
        assert len(mine) == len(profiling) > 0
        assert sum(1 for r in mine if r["error_type"]) == sum(1 for r in profiling if r.get("error"))


def test_timeline_and_campaign_record(smoke_run):
    _, out = smoke_run
    events = [(r["experiment"], r["event"]) for r in read_table(out / "lake", "timeline")]
    for exp in ("agg", "disagg"):
        for ev in ("scale_requested", "nodes_ready", "deploy_applied", "ready", "smoke_ok", "load_start",
                   "load_end", "ingested", "teardown_done"):
            assert (exp, ev) in events, (exp, ev)
    # both use the same pool: agg keeps it warm for disagg, the last user restores it
    assert ("agg", "pool_handed_over") in events and ("agg", "pool_restored") not in events
    assert ("disagg", "pool_restored") in events
    camp = read_table(out / "lake", "campaigns")
    assert [c["status"] for c in camp] == ["succeeded"]
    assert camp[0]["simulated"] is True
    assert not leftovers(out / "campaigns" / "smoke-e2e")


def _short_spec(tmp_path: Path) -> Path:
    def mutate(d):
        d["experiments"] = d["experiments"][:1]
        d["workloads"][0].update(concurrency=[1, 2, 4], duration_s=8)
        d["workloads"][0].pop("search", None)
        d["warmup"] = {"request_count": 2}
        d["quality"], d["smoke"] = {"questions": 1}, {"requests": 1, "max_tokens": 8}  # not what is tested here

    return write_spec(tmp_path, "short", mutate)


def _first_step_ingested(out: Path):
    return lambda: bool(list((out / "lake" / "steps").rglob("*.parquet"))) if (out / "lake" / "steps").exists() else False


def _assert_failed_cleanly(out: Path, expected_status: str, *, teardown_done: bool = True) -> None:
    run_dir = out / "campaigns" / "e2e"
    assert run_pids(run_dir), "the run recorded no processes"
    assert not leftovers(run_dir), f"processes left: {leftovers(run_dir)}"
    camp = read_table(out / "lake", "campaigns")
    assert [c["status"] for c in camp] == [expected_status]
    assert camp[0]["error"]
    steps = read_table(out / "lake", "steps")
    assert any(s["status"] == "succeeded" for s in steps)  # completed step kept
    for s in steps:
        raw = out / "lake" / "raw" / "campaign_id=e2e" / f"experiment={s['experiment']}" / f"step_id={s['step_id']}"
        assert (raw / "profile_export.jsonl").exists()
    events = {(r["experiment"], r["event"]) for r in read_table(out / "lake", "timeline")}
    assert ("agg", "pool_restored") in events
    # teardown_done means every cleanup item succeeded; when one cannot (its record unreadable) the
    # others still ran and the failed item is recorded instead
    assert (("agg", "teardown_done") in events) == teardown_done
    if not teardown_done:
        assert {("agg", "cleanup_error"), ("_campaign", "cleanup_failed")} & events, events


def _interrupt_after_first_step(tmp_path: Path, reaper, act) -> tuple[subprocess.Popen, str]:
    """Run the short spec, wait until its first step is in the lake, then act on the run."""
    out = tmp_path / "out"
    reaper.append(out / "campaigns" / "e2e")
    proc = start_run(_short_spec(tmp_path), out)
    try:
        wait_for(_first_step_ingested(out), 300, proc, "the first step's ingestion")
        act(proc, out)
        output, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, output


def _kill_a_worker(proc: subprocess.Popen, out: Path) -> None:
    dep = json.loads((out / "campaigns" / "e2e" / "deployments" / "agg.json").read_text())
    worker = next(r for r in dep["state"]["processes"] if r["name"] != "frontend")
    os.kill(int(worker["pid"]), signal.SIGKILL)


def test_killing_a_mocker_fails_through_teardown(tmp_path, reaper):
    proc, output = _interrupt_after_first_step(tmp_path, reaper, _kill_a_worker)
    assert proc.returncode == 1, output
    assert "FAILED" in output and "ServingFailed" in output
    out = tmp_path / "out"
    _assert_failed_cleanly(out, "failed")
    failure = json.loads((out / "campaigns" / "e2e" / "failure.json").read_text())
    assert failure["error"] == "ServingFailed"
    # readable: the worker's end first (killed by SIGKILL), its log's last lines without terminal escapes
    message = failure["message"]
    assert "killed by signal SIGKILL (9)" in message and "\x1b" not in message and "\\u001b" not in message, message
    assert "\x1b" not in output.split("\ncampaign e2e:")[-1]  # what the CLI prints of it at the end
    # the report of the failed campaign: how it ended, the state and why first; every resource read back
    assert_report_and_receipt(out, "e2e", "failed")
    report = out / "campaigns" / "e2e" / "report" / "report.html"
    assert f"report (how it ended, the teardown receipt, what completed): {report}" in output
    html = report.read_text(encoding="utf-8")
    assert re.search(r"<h2>How it ended: FAILED in state \w+: ServingFailed[ <]", html), html[:3000]
    assert "killed by signal SIGKILL (9)" in html


def test_ctrl_c_aborts_through_teardown(tmp_path, reaper):
    proc, output = _interrupt_after_first_step(tmp_path, reaper, lambda p, _out: p.send_signal(signal.SIGINT))
    assert proc.returncode == 130, output
    assert "stopping the load first" in output
    _assert_failed_cleanly(tmp_path / "out", "aborted")
    assert_report_and_receipt(tmp_path / "out", "e2e", "aborted")


def test_timeline_names_only_planned_experiments(tmp_path, reaper):
    """The abort path tears down (and records) only the campaign's experiments, nothing else."""
    out = tmp_path / "out"
    reaper.append(out / "campaigns" / "e2e")
    proc = start_run(_short_spec(tmp_path), out, "--fail-at", "IngestPreviousStep")
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, output
    assert "InjectedFailure" in output
    exps = {r["experiment"] for r in read_table(out / "lake", "timeline")}
    assert exps == {"_campaign", "agg"}
    assert not leftovers(out / "campaigns" / "e2e")
    events = {(r["experiment"], r["event"]) for r in read_table(out / "lake", "timeline")}
    assert ("agg", "pool_restored") in events and ("_campaign", "failed") in events


def test_cost_efficiency_has_the_plans_rows_with_cost_and_scope(smoke_run):
    res, out = smoke_run
    rows = {r["experiment"]: r for r in _view(out, "v_cost_efficiency")}
    assert rows["agg"]["category"] == "aggregated same-GPU baseline"
    # prefill and decode on separate nodes (over EFA) against the aggregated pair on one: the same worker GPUs, twice
    # the GPUs paid for, and the cost view says so
    assert rows["disagg"]["category"] == "disaggregated same GPU total, more GPUs paid (more nodes allocated)"
    assert (rows["agg"]["gpus_allocated"], rows["disagg"]["gpus_allocated"]) == (8, 16)
    for r in rows.values():
        assert r["cost_usd"] > 0 and r["usd_per_1m_output_tokens"] > 0 and r["output_tokens_per_s"] > 0
        assert r["simulated"] is True and r["scope"].startswith("priced: GPU and CPU nodes of the experiment's pools")
        assert "root EBS volumes" in r["scope"] and "not included: " in r["scope"]  # each exclusion with its why
        assert r["root_volume_usd"] == 0 and r["auto_mode_fee_usd"] == 0  # the smoke's pools are local: no EBS, no Auto Mode
    assert "\nv_cost_efficiency (SIMULATED)" in res.stdout


def test_a_failing_run_store_cannot_take_the_cleanup_down(tmp_path, reaper, monkeypatch):
    """A failing run store on the normal path (as a relative --out once made its listing fail) fails the
    campaign, and the failure path still stops everything, restores the pool, releases the lock and
    keeps the completed steps. In-process, so the failure can be injected; the processes are real."""
    import io

    from benchctl.local.engine import Progress
    from benchctl.local.runner import run_campaign
    from benchctl.local.runstore import LocalRunStore

    out = tmp_path / "out"
    lake = out / "lake"
    reaper.append(out / "campaigns" / "e2e")
    real_read = LocalRunStore.read_json

    def read_json(self, key):
        # once a step is in the lake (ingested while the next step loads), every read of a load record
        # fails: the next step's wait for its end reads it (normal path), and so do the cleanup states
        # that stop loads
        if key.startswith("loads/") and (lake / "steps").is_dir() and any((lake / "steps").rglob("*.parquet")):
            raise OSError(f"injected: reading {key!r} of the run store failed")
        return real_read(self, key)

    monkeypatch.setattr(LocalRunStore, "read_json", read_json)
    shown = io.StringIO()
    result = run_campaign(_short_spec(tmp_path), out, campaign_id="e2e", progress=Progress(out=shown))
    assert result.status == "FAILED", shown.getvalue()
    assert "injected: reading" in json.loads((out / "campaigns" / "e2e" / "failure.json").read_text())["message"]
    _assert_failed_cleanly(out, "failed-untorn", teardown_done=False)  # its teardown raised too
    camp = read_table(lake, "campaigns")
    assert camp[0]["error"] == "OSError" and camp[0]["failed_state"] == "AwaitLoadEnd"
    steps = read_table(lake, "steps")
    assert [(s["step_id"], s["status"]) for s in steps] == [("concurrency-sweep-c1-r0", "succeeded")]
    assert not list((out / "locks").glob("*.json"))
    pools = LocalRunStore(out / "campaigns" / "e2e").read_json("pools/agg.json")
    assert [r["pool"] for r in pools["restored"]] == ["gpu-a100"]


def test_the_ci_check_accepts_the_real_smoke_output(smoke_run):
    """scripts/check_smoke.py (what CI runs on `make smoke`'s output) agrees with a real smoke run."""
    import importlib.util

    res, _ = smoke_run
    spec = importlib.util.spec_from_file_location("check_smoke", ROOT / "scripts" / "check_smoke.py")
    assert spec is not None and spec.loader is not None
    check_smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_smoke)
    assert check_smoke.problems(res.stdout + res.stderr) == []


# ----------------------------------------------------------------------------------------------- the twin
TWIN_LABEL = "SIMULATED on the a100_sxm TP4 twin (aiconfigurator 0.12.0, vllm "


def test_the_smoke_runs_on_the_a100_twin_and_every_output_names_it(smoke_run):
    res, out = smoke_run
    rows = [r for r in read_table(out / "lake", "twins") if r["campaign_id"] == "smoke-e2e"]
    assert sorted((r["experiment"], r["role"]) for r in rows) == [("agg", "worker"), ("disagg", "decode"),
                                                                  ("disagg", "prefill")]
    for r in rows:
        assert r["label"].startswith(TWIN_LABEL) and r["profile"].startswith("aic-a100_sxm-tp4-"), r
        assert f"{r['experiment']} {r['role']}: {r['label']}" in res.stderr  # the progress output
        state = json.loads((out / "campaigns" / "smoke-e2e" / "deployments" / r["experiment"] / "state.json")
                           .read_text())
        argv = next(p["cmd"] for p in state["processes"] if p["name"] == f"{r['role']}-0")
        npz = argv[argv.index("--planner-profile-data") + 1]
        assert Path(npz) == (out / "twin" / r["profile"] / "perf_data.npz").resolve() and Path(npz).is_file()
        assert argv[argv.index("--num-gpu-blocks-override") + 1] == str(r["num_gpu_blocks"])
        assert argv[argv.index("--speedup-ratio") + 1] == "1.0"
    html = (out / "campaigns" / "smoke-e2e" / "report" / "report.html").read_text(encoding="utf-8")
    assert f"agg worker: {TWIN_LABEL}" in html
    # the aggregated worker's answers were held aiconfigurator's per-request dispatch; the disaggregated roles none
    prov = json.loads(next(r for r in rows if r["experiment"] == "agg")["provenance_json"])
    holds = {e: [c for c in json.loads((out / "campaigns" / "smoke-e2e" / "deployments" / e / "state.json")
                                       .read_text())["components"] if c["role"] == "dispatch-hold"]
             for e in ("agg", "disagg")}
    assert [c["dispatch_ms"] for c in holds["agg"]] == [prov["dispatch_ms"]] and prov["dispatch_ms"] > 30, holds
    assert holds["disagg"] == []


def _sweep_against_prediction(out: Path) -> list[tuple[str, int, str, float, float]]:
    """(mode, concurrency, metric, twin p50, predicted) per concurrency-sweep step and metric."""
    steps = {(r["experiment"], r["step_id"]): r for r in read_table(out / "lake", "steps")
             if r["campaign_id"] == "smoke-e2e" and r["workload_kind"] == "concurrency_sweep"}
    got = []
    for p in read_table(out / "lake", "predictions"):
        s = steps.get((p["experiment"], p["step_id"]))
        if p["campaign_id"] != "smoke-e2e" or s is None:
            continue
        for metric in ("ttft", "itl"):
            got.append((p["mode"], p["concurrency"], metric, s[f"{metric}_p50_ms"], p[f"predicted_{metric}_ms"]))
    return got


# How close the twin comes to benchctl predict is measured by bench/twin_vs_predict.py (the band of 25 % the
# rehearsal aims at, and why some figures are outside it: docs/FACTS.md, "The twin"), not by a timed test: on 2
# shared cores a figure near the band's edge lands on either side of it from run to run. What this test holds is
# that the rehearsal is the twin's and stays in the GPU prediction's neighbourhood on every sweep step, both modes:
# within a factor of 2. It failed before the disaggregated handoff's delayed-ACK stall was removed (+124 to +175 %
# on TTFT); it does not tell the twin from the mocker's default timing (within 2x too, 4 of 12 within 25 % where
# the twin has 7: the bench shows both), the twin's own test does (its profile is what every mocker ran).
FACTOR = 2.0


def test_every_sweep_figure_of_the_twin_is_within_a_factor_of_2_of_the_prediction(smoke_run):
    _, out = smoke_run
    cells = _sweep_against_prediction(out)
    assert len(cells) == 12, cells  # 3 loads x 2 metrics x 2 modes
    far = [f"{m} c={c} {k} p50 {t:.2f} ms vs benchctl predict {p:.2f} ms" for m, c, k, t, p in cells
           if not (p / FACTOR <= t <= p * FACTOR)]
    assert not far, far
