"""`benchctl ingest` and `benchctl query` from the command line, on the real AIPerf samples."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.unit.test_ingest import SUMMARY_JSON, artifact_dir, records  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "benchctl.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_ingest_then_query_matches_aiperf_summary(tmp_path, artifact_dir):  # noqa: F811
    lake = tmp_path / "lake"
    res = cli("ingest", str(artifact_dir), "--lake", str(lake), "--campaign", "c1", "--experiment", "agg",
              "--step", "s1", "--concurrency", "4")
    assert res.returncode == 0, res.stderr
    summary = json.loads((artifact_dir / SUMMARY_JSON).read_text())
    out = cli("query", "SELECT step_id, ttft_p50_ms, output_tokens_per_s FROM steps", "--lake", str(lake),
              "--format", "json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["step_id"] == "s1"
    assert row["ttft_p50_ms"] == summary["time_to_first_token"]["p50"]
    assert row["output_tokens_per_s"] == summary["output_token_throughput"]["avg"]


def test_ingest_sweep_directory_gives_one_step_per_concurrency(tmp_path, artifact_dir):  # noqa: F811
    sweep = tmp_path / "sweep"
    for c in (1, 4):
        shutil.copytree(artifact_dir, sweep / f"concurrency_{c}")
    lake = tmp_path / "lake"
    res = cli("ingest", str(sweep), "--lake", str(lake), "--campaign", "c1", "--experiment", "agg", "--step", "s")
    assert res.returncode == 0, res.stderr
    out = cli("query", "SELECT step_id, concurrency FROM steps ORDER BY concurrency", "--lake", str(lake),
              "--format", "csv")
    assert out.stdout.split() == ["step_id,concurrency", "s-c1,1", "s-c4,4"]


def test_bad_inputs_exit_2_with_a_clear_message(tmp_path, artifact_dir):  # noqa: F811
    lake = tmp_path / "lake"
    missing = cli("ingest", str(tmp_path / "nope"), "--lake", str(lake), "--campaign", "c", "--experiment", "e",
                  "--step", "s")
    assert missing.returncode == 2 and "nope" in missing.stderr
    unsafe = cli("ingest", str(artifact_dir), "--lake", str(lake), "--campaign", "../x", "--experiment", "e",
                 "--step", "s")
    assert unsafe.returncode == 2 and "campaign_id" in unsafe.stderr
    (artifact_dir / SUMMARY_JSON).write_text("{not json")
    bad = cli("ingest", str(artifact_dir), "--lake", str(lake), "--campaign", "c", "--experiment", "e", "--step", "s")
    assert bad.returncode == 2 and SUMMARY_JSON in bad.stderr
    assert not list(lake.rglob("*.parquet"))  # nothing half-written
    ddl = cli("query", "DROP TABLE steps", "--lake", str(lake))
    assert ddl.returncode == 2
