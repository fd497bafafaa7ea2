"""`benchctl ingest` and `benchctl query` from the command line, on the real AIPerf samples."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.unit.test_ingest import SUMMARY_JSON, artifact_dir, records  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "benchctl.cli.main", *args], capture_output=True, text=True, cwd=ROOT)


def test_ingest_then_query_matches_aiperf_summary(tmp_path, artifact_dir):  # noqa: F811
    lake = tmp_path / "lake"
    res = cli("ingest", str(artifact_dir), "--lake", str(lake), "--campaign", "c1", "--experiment", "agg",
              "--step", "s1", "--concurrency", "4", "--mode", "disaggregated")
    assert res.returncode == 0, res.stderr
    summary = json.loads((artifact_dir / SUMMARY_JSON).read_text())
    out = cli("query", "SELECT step_id, mode, ttft_p50_ms, output_tokens_per_s FROM steps", "--lake", str(lake),
              "--format", "json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    assert row["step_id"] == "s1" and row["mode"] == "disaggregated"
    assert row["ttft_p50_ms"] == summary["time_to_first_token"]["p50"]
    assert row["output_tokens_per_s"] == summary["output_token_throughput"]["avg"]


def test_ingest_sweep_directory_gives_one_step_per_concurrency(tmp_path, artifact_dir):  # noqa: F811
    sweep = tmp_path / "sweep"
    for c in (1, 4):
        shutil.copytree(artifact_dir, sweep / f"concurrency_{c}")
    lake = tmp_path / "lake"
    res = cli("ingest", str(sweep), "--lake", str(lake), "--campaign", "c1", "--experiment", "agg", "--step", "s",
              "--mode", "aggregated")
    assert res.returncode == 0, res.stderr
    out = cli("query", "SELECT step_id, concurrency FROM steps ORDER BY concurrency", "--lake", str(lake),
              "--format", "csv")
    assert out.stdout.split() == ["step_id,concurrency", "s-c1,1", "s-c4,4"]


def test_bad_inputs_exit_2_with_a_clear_message(tmp_path, artifact_dir):  # noqa: F811
    lake = tmp_path / "lake"
    missing = cli("ingest", str(tmp_path / "nope"), "--lake", str(lake), "--campaign", "c", "--experiment", "e",
                  "--step", "s", "--mode", "aggregated")
    assert missing.returncode == 2 and "nope" in missing.stderr
    unsafe = cli("ingest", str(artifact_dir), "--lake", str(lake), "--campaign", "../x", "--experiment", "e",
                 "--step", "s", "--mode", "aggregated")
    assert unsafe.returncode == 2 and "campaign_id" in unsafe.stderr
    (artifact_dir / SUMMARY_JSON).write_text("{not json")
    bad = cli("ingest", str(artifact_dir), "--lake", str(lake), "--campaign", "c", "--experiment", "e", "--step", "s",
              "--mode", "aggregated")
    assert bad.returncode == 2 and SUMMARY_JSON in bad.stderr
    assert not list(lake.rglob("*.parquet"))  # nothing half-written
    ddl = cli("query", "DROP TABLE steps", "--lake", str(lake))
    assert ddl.returncode == 2


def test_ingest_needs_the_mode_the_artifacts_cannot_tell(tmp_path, artifact_dir):  # noqa: F811
    res = cli("ingest", str(artifact_dir), "--lake", str(tmp_path / "lake"), "--campaign", "c", "--experiment", "e",
              "--step", "s")
    assert res.returncode == 2 and "--mode" in res.stderr and not (tmp_path / "lake").exists()


def test_bad_queries_and_missing_lakes_are_one_line_and_exit_2(tmp_path, artifact_dir):  # noqa: F811
    lake = tmp_path / "lake"
    assert cli("ingest", str(artifact_dir), "--lake", str(lake), "--campaign", "c", "--experiment", "e", "--step", "s",
               "--mode", "aggregated").returncode == 0
    column = cli("query", "SELECT ttft_p51_ms FROM steps", "--lake", str(lake))
    assert column.returncode == 2 and "Traceback" not in column.stderr
    assert '"ttft_p51_ms"' in column.stderr and "columns of steps:" in column.stderr and "ttft_p50_ms" in column.stderr
    table = cli("query", "SELECT * FROM stepz", "--lake", str(lake))
    assert table.returncode == 2 and "stepz" in table.stderr and "tables and views: campaigns" in table.stderr
    view = cli("query", "v_nope", "--lake", str(lake))
    assert view.returncode == 2 and "'v_nope'" in view.stderr and "v_concurrency_sweep" in view.stderr
    for cmd in (("query", "v_pareto"), ("report", "--out", str(tmp_path / "r.html"))):
        gone = cli(*cmd, "--lake", str(tmp_path / "no-lake"))
        assert gone.returncode == 2 and gone.stderr.count("\n") == 1, gone.stderr
        assert "no lake there" in gone.stderr and "no-lake" in gone.stderr
    assert not (tmp_path / "r.html").exists()


def test_newcomer_mistakes_are_one_line_and_exit_2(tmp_path):
    folder = cli("validate", "examples")
    assert folder.returncode == 2 and "is a directory" in folder.stderr and "Traceback" not in folder.stderr
    env_without_aws = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AWS_CONFIG_FILE": str(tmp_path / "none"),
                       "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"}
    for args, needle in (
        (("status", "arn:aws:states:us-east-1:123456789012:execution:sm:x"), "region"),
        (("start", "examples/smoke.yaml", "--bucket", "b", "--state-machine-arn",
          "arn:aws:states:us-east-1:123456789012:stateMachine:sm"), "credentials"),
    ):
        env = dict(env_without_aws, AWS_DEFAULT_REGION="us-east-1") if args[0] == "start" else env_without_aws
        res = subprocess.run([sys.executable, "-m", "benchctl.cli.main", *args], capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=120)
        assert res.returncode == 2, res.stderr
        assert "Traceback" not in res.stderr and needle in res.stderr.lower() and res.stderr.count("\n") == 1


def test_query_says_simulated_for_a_simulated_campaigns_rows_in_every_format(tmp_path):
    from benchctl.local.lake import LocalLake

    lake = LocalLake(tmp_path / "lake")
    for cid, simulated in (("smoke-1", True), ("gpu-1", False)):
        lake.write("campaigns", [{"campaign_id": cid, "simulated": simulated, "engine": "local" if simulated else "aws"}],
                   part_name="campaign")
        lake.write("steps", [{"campaign_id": cid, "experiment": "agg", "mode": "aggregated", "step_id": "s1",
                              "step_index": 0, "repeat": 0, "status": "succeeded"}], part_name="steps")
    sql = "SELECT campaign_id, step_id FROM steps WHERE campaign_id = '{}'"
    table = cli("query", sql.format("smoke-1"), "--lake", str(lake.root))
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0] == ("SIMULATED (campaign smoke-1): every row below comes from the Dynamo "
                                           "mocker's timing model, not GPU measurements")
    csv = cli("query", sql.format("smoke-1"), "--lake", str(lake.root), "--format", "csv")
    assert csv.stdout.split() == ["campaign_id,step_id,simulated", "smoke-1,s1,True"]
    js = cli("query", sql.format("smoke-1"), "--lake", str(lake.root), "--format", "json")
    assert json.loads(js.stdout) == [{"campaign_id": "smoke-1", "step_id": "s1", "simulated": True}]
    measured = cli("query", sql.format("gpu-1"), "--lake", str(lake.root))
    assert measured.returncode == 0 and "SIMULATED" not in measured.stdout


def test_query_outside_the_lake_exits_2_naming_the_rule(tmp_path):
    from benchctl.local.lake import LocalLake

    lake = LocalLake(tmp_path / "lake")
    lake.write("steps", [{"campaign_id": "c", "experiment": "agg", "mode": "aggregated", "step_id": "s1",
                          "step_index": 0, "repeat": 0, "status": "succeeded"}], part_name="steps")
    for sql, rule in (
        ("SELECT * FROM read_text('/etc/hostname')", "a query reads only the lake's tables and views"),
        ("SELECT * FROM read_csv('/etc/passwd', sep = ':')", "a query reads only the lake's tables and views"),
        (f"COPY (SELECT 1) TO '{tmp_path}/x.csv'", "only a SELECT"),
        ("INSTALL httpfs", "only a SELECT"),
        ("SET enable_external_access = true", "only a SELECT"),
    ):
        res = cli("query", sql, "--lake", str(lake.root))
        assert res.returncode == 2 and rule in res.stderr and res.stderr.count("\n") == 1, (sql, res.stderr)
    assert not (tmp_path / "x.csv").exists()
    ok = cli("query", "SELECT step_id FROM steps", "--lake", str(lake.root), "--format", "csv")
    assert ok.returncode == 0 and "s1" in ok.stdout, ok.stderr
