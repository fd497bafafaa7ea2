"""Helpers for end-to-end runs of the real CLI (real Dynamo mocker + AIPerf, the campaign ASL)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from benchctl.spec.model import load_spec
from tests import prometheus_harness
from tests.prometheus_harness import recorded_expositions

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int, start_time: int | None) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return False
    return start_time is None or int(fields[19]) == start_time


def run_pids(run_dir: Path) -> list[dict]:
    """Every process record the run wrote into its state (deployments and loads)."""
    recs = []
    for f in list(run_dir.glob("deployments/*.json")) + list(run_dir.glob("loads/*/*.json")):
        data = json.loads(f.read_text())
        state = data.get("state", {})
        for rec in state.get("processes", []) + ([state] if "pid" in state else []):
            recs.append(rec)
        if isinstance(state.get("process"), dict):
            recs.append(state["process"])
    return recs


def leftovers(run_dir: Path) -> list[dict]:
    return [r for r in run_pids(run_dir) if _alive(int(r["pid"]), r.get("start_time"))]


def read_table(lake: Path, table: str):
    files = sorted((lake / table).rglob("*.parquet"))
    if not files:
        return []
    rows = []
    for f in files:
        parts = dict(p.split("=", 1) for p in f.relative_to(lake / table).parts[:-1])
        for r in pq.read_table(f).to_pylist():
            rows.append({**r, **parts})
    return rows


def write_spec(tmp_path: Path, name: str, mutate) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "smoke.yaml").read_text())
    mutate(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_run(spec: Path, out: Path, *extra: str, campaign_id: str = "e2e",
              sigint_ignored: bool = False) -> subprocess.Popen:
    """``benchctl run`` as a person starts it. ``sigint_ignored``: as a background job of a
    non-interactive shell (``cmd &`` in a script, many CI runners) starts it, with SIGINT ignored."""
    bin_ = Path(sys.executable).parent / "benchctl"
    return subprocess.Popen(
        [str(bin_), "run", str(spec), "--out", str(out), "--campaign-id", campaign_id, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        preexec_fn=_ignore_sigint if sigint_ignored else None,  # noqa: PLW1509 - a signal disposition only
    )


SMOKE_ID = "smoke-e2e"


def campaign_once(spec: Path, out: Path, timeout: float):
    """A module's campaign: ``benchctl run`` of ``spec`` into ``out`` (campaign id ``e2e``), waited for; yields
    (exit code, output, out); afterwards kills what a failed run may have left, by its own process ids."""
    proc = start_run(spec, out)
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    yield proc.returncode, output, out
    for rec in run_pids(out / "campaigns" / "e2e"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(rec["pid"], signal.SIGKILL)


@pytest.fixture(scope="session")
def _smoke(tmp_path_factory: pytest.TempPathFactory):
    """`benchctl run examples/smoke.yaml` once per test session (both modes, all four workloads), watched by a
    real Prometheus (Debian's) scraping it with the platform's scrape jobs, beside the recorded expositions of
    what the local engine cannot expose (tests/prometheus_harness.py). Prometheus stays up for the session."""
    out = tmp_path_factory.mktemp("smoke")
    run_dir = out / "campaigns" / SMOKE_ID
    namespace = load_spec(ROOT / "examples" / "smoke.yaml").kubernetes.namespace
    with prometheus_harness.running(run_dir, namespace, tmp_path_factory.mktemp("prometheus"),
                                    recorded_expositions(namespace)) as prom:
        bin_ = Path(sys.executable).parent / "benchctl"
        start = time.time()
        res = subprocess.run([str(bin_), "run", "examples/smoke.yaml", "--out", str(out), "--campaign-id", SMOKE_ID],
                             capture_output=True, text=True, cwd=ROOT, timeout=1500)
        prom.window = (start, time.time())
        yield res, out, prom


@pytest.fixture(scope="session")
def smoke_campaign(_smoke) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The session's smoke campaign; every e2e test that only reads a finished campaign (views, lake, report,
    Chromium, dashboards) uses this one."""
    return _smoke[0], _smoke[1]


@pytest.fixture(scope="session")
def smoke_prometheus(_smoke) -> prometheus_harness.Prometheus:
    """The Prometheus that scraped the smoke campaign (its ``window``: the campaign's start and end)."""
    return _smoke[2]


def wait_for(predicate, timeout: float, proc: subprocess.Popen | None = None, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"run ended before {what}: rc={proc.returncode}\n{out}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def reaper():
    """Kill anything a failed test left behind (by the run's own recorded pids)."""
    dirs: list[Path] = []
    yield dirs
    for d in dirs:
        for r in leftovers(d):
            with contextlib.suppress(OSError):
                os.killpg(int(r["pid"]), signal.SIGKILL)


def assert_report_and_receipt(out: Path, cid: str, status: str) -> list[dict]:
    """Every ending has its report: ``<run dir>/report/report.html`` says how the campaign ended first, and its
    teardown receipt reads every resource back gone or restored (its rows folded when the campaign succeeded): each process by its pid, not running (checked
    here again against ``/proc``). The receipt rows (the lake's ``teardown_receipt`` events)."""
    run_dir = out / "campaigns" / cid
    html = (run_dir / "report" / "report.html").read_text(encoding="utf-8")
    head = html[html.index('<section id="ending"'):html.index('<section id="answers"')]
    assert f'data-status="{status}"' in head and 'data-receipt-complete="true"' in head, head
    # ended well: the receipt is its one-line summary, the rows folded under it; any other ending shows them open
    assert ('<details id="receipt-rows">' in head) == (status == "succeeded"), head
    rows = [{"experiment": r["experiment"], **json.loads(r["detail_json"])} for r in read_table(out / "lake", "timeline")
            if r["campaign_id"] == cid and r["event"] == "teardown_receipt"]
    assert rows and all(r["state"] in ("gone", "restored", "handed over") for r in rows), rows
    procs = [r for r in rows if r["kind"] == "process"]
    recorded = {int(r["pid"]) for r in run_pids(run_dir)}
    assert procs and {int(r["pid"]) for r in procs} == recorded, (procs, recorded)  # every process, by its pid
    assert not [r for r in run_pids(run_dir) if _alive(int(r["pid"]), r.get("start_time"))]
    assert any(r["kind"].startswith("pool") and r["state"] == "restored" for r in rows), rows
    return rows
