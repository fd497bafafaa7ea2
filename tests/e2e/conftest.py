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


def start_run(spec: Path, out: Path, *extra: str) -> subprocess.Popen:
    bin_ = Path(sys.executable).parent / "benchctl"
    return subprocess.Popen(
        [str(bin_), "run", str(spec), "--out", str(out), "--campaign-id", "e2e", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )


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
