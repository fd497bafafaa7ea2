"""Is the load generator keeping up? The issue lag of a closed loop recovered from request spans, the on-time
share against its budget, AIPerf's CPU over the profiling window from the load runner's samples (and the
runner's /proc reading of a real process tree), the ingested ``client_*`` columns, and the report's flag and
caveat on a made-up campaign where one step is client-bound and one is not."""

from __future__ import annotations

import html
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchctl.errors import ArtifactError
from benchctl.lake import client_load
from benchctl.lake.ingest import StepContext, ingest_artifacts
from benchctl.load_runner import _proc_table, tree_usage
from benchctl.local.report import render_report
from tests.unit.synthetic_lake import Campaign

DATA = Path(__file__).resolve().parents[1] / "data" / "aiperf-0.13.0"
MS = 1_000_000


def closed_loop(n: int, concurrency: int, service_ms: list[float], lag_ms: list[float],
                t0: int = 1_796_000_000 * 10**9) -> list[tuple[int | None, int, int]]:
    """(credit_issued_ns, start_ns, end_ns) of ``n`` requests through ``concurrency`` slots, as AIPerf's credit
    issuer hands them out: request i gets the slot that freed first, its credit is issued then, and it starts
    ``lag_ms[i]`` later (the first ``concurrency`` start together)."""
    free = [t0] * concurrency
    spans: list[tuple[int | None, int, int]] = []
    for i in range(n):
        slot = min(range(concurrency), key=lambda s: free[s])
        issued = free[slot]
        start = issued + (int(lag_ms[i] * MS) if i >= concurrency else 0)
        end = start + int(service_ms[i] * MS)
        spans.append((issued, start, end))
        free[slot] = end
    return spans


def test_issue_lag_recovers_the_lag_of_every_request_after_the_first_slots() -> None:
    rng = random.Random(3)
    n, c = 200, 16
    service = [rng.uniform(200, 400) for _ in range(n)]
    lag = [rng.choice([0.0, 0.5, 2.0, 30.0]) for _ in range(n)]
    got = client_load.issue_lags_ms(closed_loop(n, c, service, lag), c)
    assert got == pytest.approx(lag[c:], abs=1e-6)  # every request's own lag, none of the first 16


def test_issue_lag_is_never_negative_and_needs_a_concurrency() -> None:
    # two requests in flight on one slot (clock granularity): lag 0, not negative
    assert client_load.issue_lags_ms([(None, 0, 10 * MS), (None, 9 * MS, 20 * MS)], 1) == [0.0]
    with pytest.raises(ValueError, match="concurrency must be at least 1"):
        client_load.issue_lags_ms([(None, 0, 1)], 0)


def test_without_credit_times_the_issue_order_is_the_start_order() -> None:
    spans = [(None, s, e) for _, s, e in closed_loop(40, 4, [100.0] * 40, [2.0] * 40)]
    assert client_load.issue_lags_ms(spans[::-1], 4) == pytest.approx([2.0] * 36, abs=1e-6)


def test_on_time_share_and_budget_follow_the_request_latency() -> None:
    n, c = 120, 4
    lags = [1.0] * 100 + [40.0] * 20  # 20 of the 116 counted are late against a 30 ms budget
    spans = closed_loop(n, c, [300.0] * n, lags)
    f = client_load.lag_figures(spans, c, 300.0, multi_turn=False)
    assert f["client_lag_budget_ms"] == pytest.approx(30.0)  # 10 % of 300 ms, above the 5 ms floor
    assert f["client_on_time_fraction"] == pytest.approx(96 / 116)
    assert f["client_issue_lag_p95_ms"] == pytest.approx(40.0)
    assert client_load.lag_figures(spans, c, 20.0, multi_turn=False)["client_lag_budget_ms"] == client_load.LAG_FLOOR_MS
    assert set(client_load.lag_figures(spans, c, 300.0, multi_turn=True).values()) == {None}


def test_cpu_over_the_window_is_interpolated_from_the_samples() -> None:
    samples = [(100.0, 0.0, 0.0), (101.0, 5.0, 1.0), (102.0, 5.5, 1.5), (104.0, 7.5, None)]  # start-up: 5 s
    assert client_load.cpu_cores_used(samples, 101.0, 104.0) == pytest.approx(2.5 / 3)
    assert client_load.cpu_cores_used(samples, 101.5, 103.0) == pytest.approx((6.5 - 5.25) / 1.5)
    assert client_load.cpu_cores_used(samples, 99.0, 103.0) is None  # not spanned: not measured
    # the wait from the samples that have it: 0.5 s waited per 0.5 s run between 101 and 102
    assert client_load.cpu_wait_fraction(samples, 101.0, 102.0) == pytest.approx(0.5)
    assert client_load.cpu_wait_fraction(samples, 101.0, 103.0) is None  # the last sample has no wait
    # a record without the wait (two numbers per sample) is still read
    assert client_load.check_cpu_record({"samples": [[1, 2]], "cores": 2}, "w") == ([(1.0, 2.0, None)], 2.0)
    with pytest.raises(ValueError, match=r"where: cpu.samples: expected a list of \[epoch_s, cpu_s, wait_s or null\]"):
        client_load.check_cpu_record({"samples": [[1.0, "x"]], "cores": 2}, "where")
    with pytest.raises(ValueError, match=r"cpu\.cores: expected a positive number"):
        client_load.check_cpu_record({"samples": [], "cores": 0}, "where")


@pytest.mark.parametrize(("figures", "bound", "says"), [
    ({"client_on_time_fraction": 0.99, "client_issue_lag_p95_ms": 2.0, "client_lag_budget_ms": 30.0,
      "client_cpu_cores": 0.8, "client_cpu_cores_available": 2.0}, False, "99 % of requests issued on time"),
    ({"client_on_time_fraction": 0.80, "client_issue_lag_p95_ms": 45.0, "client_lag_budget_ms": 30.0},
     True, "issue lag p95 45.0 ms > budget 30.0 ms"),
    ({"client_on_time_fraction": 0.99, "client_issue_lag_p95_ms": 2.0, "client_lag_budget_ms": 30.0,
      "client_cpu_cores": 1.9, "client_cpu_cores_available": 2.0}, True, "1.90 of 2 cores (95 % > 90 %)"),
    ({}, None, "not measured"),
])
def test_verdict_names_the_figure_behind_it(figures: dict[str, Any], bound: bool | None, says: str) -> None:
    got, why = client_load.verdict(figures)
    assert got is bound
    assert says in why


def _artifacts(tmp_path: Path, spans: list[tuple[int | None, int, int]], concurrency: int, cpu: Any = None) -> Path:
    """An AIPerf artifact directory: the real 0.13 summary and manifest, with the profiling window and the
    records set to ``spans`` (one record per span, the real record's shape), and the runner's record."""
    d = tmp_path / "art"
    d.mkdir()
    shutil.copy(DATA / "profile_export_aiperf.json", d)
    manifest = json.loads((DATA / "phase_manifest.json").read_text())
    for p in manifest["phases"]:
        if p.get("phase_kind") == "profiling":
            p["start_ns"], p["end_ns"] = min(s for _, s, _ in spans), max(e for _, _, e in spans)
    (d / "phase_manifest.json").write_text(json.dumps(manifest))
    template = json.loads((DATA / "profile_export.head.jsonl").read_text().splitlines()[0])
    lines = []
    for i, (issued, s, e) in enumerate(spans):
        rec = json.loads(json.dumps(template))
        rec["metadata"].update(benchmark_phase="profiling", request_start_ns=s, request_end_ns=e, credit_issued_ns=issued,
                               conversation_id=f"session_{i:06d}")
        lines.append(json.dumps(rec))
    (d / "profile_export.jsonl").write_text("\n".join(lines) + "\n")
    if cpu is not None:
        (d / "runner-record.json").write_text(json.dumps({"job_id": "s", "exit_code": 0, "cpu": cpu}))
    return d


def _ctx(concurrency: int) -> StepContext:
    return StepContext("c", "agg", "aggregated", "concurrency-sweep", "s", 0, 0, concurrency=concurrency,
                       workload_kind="concurrency_sweep")


def test_ingest_fills_the_client_columns_from_records_summary_and_runner_record(tmp_path: Path) -> None:
    n, c = 64, 4
    spans = closed_loop(n, c, [200.0] * n, [3.0] * n)
    t0, t1 = min(s for _, s, _ in spans) / 1e9, max(e for _, _, e in spans) / 1e9
    cpu = {"samples": [[t0 - 8.0, 0.0, 0.0], [t0, 6.0, 2.0], [t1, 6.0 + 0.6 * (t1 - t0), 2.0 + 0.2 * (t1 - t0)],
                       [t1 + 1.0, 9.0, None]], "cores": 2}
    step = ingest_artifacts(_artifacts(tmp_path, spans, c, cpu), _ctx(c)).steps[0]
    summary = json.loads((DATA / "profile_export_aiperf.json").read_text())
    assert step["client_issue_lag_p95_ms"] == pytest.approx(3.0, abs=1e-3)
    assert step["client_on_time_fraction"] == 1.0
    assert step["client_cpu_cores"] == pytest.approx(0.6, rel=1e-3)  # start-up and shutdown left out
    assert step["client_cpu_cores_available"] == 2.0
    assert step["client_cpu_wait_fraction"] == pytest.approx(0.2 / 0.8, rel=1e-3)  # waited 0.2 per 0.6 run
    assert step["client_credit_to_start_p95_ms"] == summary["credit_to_start_latency"]["p95"]
    assert step["client_effective_concurrency"] == summary["effective_concurrency"]["avg"]


def test_ingest_without_a_runner_record_says_cpu_not_measured(tmp_path: Path) -> None:
    spans = closed_loop(20, 2, [100.0] * 20, [1.0] * 20)
    step = ingest_artifacts(_artifacts(tmp_path, spans, 2), _ctx(2)).steps[0]
    assert step["client_cpu_cores"] is None and step["client_on_time_fraction"] == 1.0
    assert "AIPerf's CPU not measured" in client_load.verdict(step)[1]


def test_a_malformed_runner_record_is_an_error_naming_the_file(tmp_path: Path) -> None:
    spans = closed_loop(8, 2, [100.0] * 8, [1.0] * 8)
    d = _artifacts(tmp_path, spans, 2, cpu={"samples": "soon", "cores": 2})
    with pytest.raises(ArtifactError, match=r"runner-record\.json: cpu\.samples: expected a list"):
        ingest_artifacts(d, _ctx(2))


def test_the_runner_reads_a_process_trees_cpu_from_proc(tmp_path: Path) -> None:
    # a parent in its own process group whose child burns about 0.3 s of CPU, then is waited for
    script = ("import subprocess, sys, time; "
              "subprocess.run([sys.executable, '-c', 'import time\\nt=time.process_time()\\n"
              "while time.process_time()-t<0.3: pass']); time.sleep(5)")
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        used = 0.0
        while time.monotonic() < deadline:
            used, waited = tree_usage(proc.pid, _proc_table())
            if used >= 0.3:
                break
            time.sleep(0.1)
        assert used >= 0.3  # the reaped child's CPU counts in its parent's tree
        assert waited is not None and waited >= 0.0  # the live parent's run-queue wait (schedstat)
        assert tree_usage(os.getpid(), _proc_table())[0] > 0  # this test's own tree
    finally:
        proc.kill()
        proc.wait()


def _campaign(tmp_path: Path, second_on_time: float) -> Campaign:
    c = Campaign(tmp_path / "lake")
    c.experiment("agg", "aggregated")
    ok = {"client_on_time_fraction": 0.99, "client_issue_lag_p50_ms": 0.8, "client_issue_lag_p95_ms": 3.0,
          "client_lag_budget_ms": 30.0, "client_cpu_cores": 0.7, "client_cpu_cores_available": 2.0}
    c.step("agg", "aggregated", "concurrency_sweep", "sweep-c1", 0, concurrency=1, ttft_p50_ms=50.0, **ok)
    c.step("agg", "aggregated", "concurrency_sweep", "sweep-c16", 0, concurrency=16, ttft_p50_ms=80.0,
           **{**ok, "client_on_time_fraction": second_on_time, "client_issue_lag_p95_ms": 48.0})
    return c


def test_the_report_flags_the_client_bound_step_and_says_so_in_the_caveats(tmp_path: Path) -> None:
    c = _campaign(tmp_path, second_on_time=0.7)
    root = c.write().root
    page = render_report(root, c.cid, "html")
    section = page[page.index('<section id="client"'):]
    section = section[:section.index("</section>")]
    assert 'data-client-bound="1"' in section
    rows = re.findall(r"<tr><td>agg</td><td>(sweep-c\d+)</td>.*?</tr>", section)
    assert rows == ["sweep-c1", "sweep-c16"]
    bound_row = re.search(r"<tr><td>agg</td><td>sweep-c16</td>.*?</tr>", section).group(0)
    assert '<td class="client-bound">CLIENT-BOUND</td>' in bound_row and "70 % of requests issued on time" in bound_row
    assert "keeps up" in re.search(r"<tr><td>agg</td><td>sweep-c1</td>.*?</tr>", section).group(0)
    caveat = html.unescape(re.search(r'<p class="caveat" id="caveats">(.*?)</p>', page).group(1))
    assert "could not keep up in 1 of 2 steps (agg/sweep-c16)" in caveat
    md = render_report(root, c.cid, "md")
    assert "could not keep up in 1 of 2 steps (agg/sweep-c16)" in md
    assert re.search(r"\| agg \| sweep-c16 \| 16 \| CLIENT-BOUND \| 70 % of requests issued on time", md)


def test_no_caveat_when_every_step_kept_up(tmp_path: Path) -> None:
    c = _campaign(tmp_path, second_on_time=0.97)
    root = c.write().root
    page, md = render_report(root, c.cid, "html"), render_report(root, c.cid, "md")
    assert 'data-client-bound="0"' in page and 'id="caveats"' not in page and "CLIENT-BOUND</td>" not in page
    assert "could not keep up" not in md and "CLIENT-BOUND |" not in md


def test_the_runner_records_its_runs_cpu_samples_in_the_exit_record_and_the_artifacts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchctl import load_runner

    def burn(req: dict[str, Any]) -> None:  # the forked child: 0.4 s of CPU instead of an AIPerf run
        t = time.process_time()
        while time.process_time() - t < 0.4:
            pass
        os._exit(3)

    monkeypatch.setattr(load_runner, "_child", burn)
    runner = load_runner.Runner()
    req = {"job_id": "s", "argv": [], "log": str(tmp_path / "log"), "started": str(tmp_path / "started.json"),
           "exit": str(tmp_path / "exit.json"), "record": str(tmp_path / "runner-record.json")}
    runner.fork(req)
    deadline = time.monotonic() + 30
    while runner.children and time.monotonic() < deadline:
        runner.sample()
        runner.reap()
        time.sleep(0.05)
    done = json.loads((tmp_path / "exit.json").read_text())
    record = json.loads((tmp_path / "runner-record.json").read_text())
    samples = done["cpu"]["samples"]
    assert done["exit_code"] == record["exit_code"] == 3 and record["cpu"] == done["cpu"]
    assert len(samples) >= 3  # the fork, at least one /proc sample while it ran, its end (wait4)
    assert [s[0] for s in samples] == sorted(s[0] for s in samples)
    assert [s[1] for s in samples] == sorted(s[1] for s in samples)  # cumulative
    assert samples[-1][1] == done["cpu_s"] >= 0.4 and done["cpu"]["cores"] >= 1
    assert samples[-1][2] is None and all(s[2] is not None and s[2] >= 0 for s in samples[:-1])


def test_the_bench_cuts_the_smoke_spec_to_its_sweep_at_1_and_its_highest_concurrency() -> None:
    import yaml

    from bench.client_keeps_up import bench_spec
    from benchctl.planning.plan import plan_campaign
    from benchctl.spec.model import parse_spec

    smoke = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "smoke.yaml").read_text())
    cut, top = bench_spec(smoke, None)
    assert top == 16 and [w["kind"] for w in cut["workloads"]] == ["concurrency_sweep"]
    plan = plan_campaign(parse_spec(yaml.safe_load(yaml.safe_dump(cut))))  # still valid: validated and planned
    assert sorted({s.concurrency for e in plan.experiments for s in e.steps}) == [1, 16]
    fast, _ = bench_spec(smoke, 8.0)
    assert fast["mocker"]["speedup_ratio"] == 8.0
