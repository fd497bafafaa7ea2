"""The local lake (hive-partitioned parquet) and the DuckDB query engine over it, with the Athena SQL."""

from __future__ import annotations

import json
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlglot

from benchctl.analysis.formatting import format_result
from benchctl.analysis.views import VIEWS_DIR, view_references, view_sql_files
from benchctl.lake import schema
from benchctl.lake.ingest import ingest_artifacts
from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine, parse_query
from tests.unit.synthetic_lake import Campaign, comparison_row
from tests.unit.test_ingest import CTX, SAMPLES

CAMPAIGN = "camp-1"


def _step(mode: str, concurrency: int, repeat: int, ttft: float, **extra: Any) -> dict[str, Any]:
    experiment = "agg" if mode == "aggregated" else "disagg"
    row = {
        "campaign_id": CAMPAIGN,
        "experiment": experiment,
        "mode": mode,
        "workload": "sweep",
        "workload_kind": "concurrency_sweep",
        "step_id": f"sweep-c{concurrency}-r{repeat}",
        "step_index": repeat,
        "repeat": repeat,
        "concurrency": concurrency,
        "isl": 256,
        "osl": 32,
        "status": "succeeded",
        "ttft_p50_ms": ttft,
        "ttft_p99_ms": ttft * 2,
        "itl_p50_ms": ttft / 10,
        "itl_p99_ms": ttft / 5,
        "output_tokens_per_s": 1000.0 / ttft,
        "request_latency_p50_ms": ttft * 5,
        "request_count": 40,
        "started_at": datetime(2026, 1, 1, 12, 0, 0),
    }
    row.update(extra)
    return row


def _write_steps(lake: LocalLake, rows: list[dict[str, Any]]) -> None:
    for r in rows:
        lake.write("steps", [r], part_name=r["step_id"])


def _compare(lake: LocalLake, *pairs: tuple[str, str]) -> None:
    """The comparisons the Plan state would record: (aggregated baseline, disaggregated treatment) pairs."""
    lake.write("comparisons", [comparison_row(CAMPAIGN, f"{t}-vs-{b}", b, t, "q1,q3,q4,h1,h3", index=i)
                               for i, (b, t) in enumerate(pairs)], part_name="comparisons")


@pytest.fixture
def lake(tmp_path: Path) -> LocalLake:
    return LocalLake(tmp_path / "lake")


# ---------------------------------------------------------------------------------------------- the lake


def test_layout_is_hive_partitioned_without_partition_columns_in_files(lake: LocalLake) -> None:
    paths = lake.write("steps", [_step("aggregated", 1, 0, 10.0)], part_name="sweep-c1-r0")
    assert paths == [
        lake.root / "steps" / f"campaign_id={CAMPAIGN}" / "experiment=agg" / "sweep-c1-r0.parquet"
    ]
    file_schema = pq.read_schema(paths[0])
    assert "campaign_id" not in file_schema.names and "experiment" not in file_schema.names
    assert file_schema.names == [n for n, _ in schema.data_columns("steps")]
    campaign = {"campaign_id": CAMPAIGN, "status": "running", "simulated": True}
    (cpath,) = lake.write("campaigns", [campaign], part_name="campaign")
    assert cpath == lake.root / "campaigns" / f"campaign_id={CAMPAIGN}" / "campaign.parquet"
    assert lake.tables() == ["campaigns", "steps"]


def test_rows_are_grouped_by_partition(lake: LocalLake) -> None:
    rows = [
        _step("aggregated", 1, 0, 10.0),
        _step("disaggregated", 1, 0, 8.0),
        _step("aggregated", 4, 0, 12.0),
    ]
    paths = lake.write("steps", rows, part_name="batch-1")
    assert [p.parent.name for p in paths] == ["experiment=agg", "experiment=disagg"]
    assert pq.read_table(paths[0]).num_rows == 2


def test_same_part_name_overwrites(lake: LocalLake) -> None:
    # Given a step written once; When the same event is delivered again (with a corrected value)
    lake.write("steps", [_step("aggregated", 1, 0, 10.0)], part_name="sweep-c1-r0")
    lake.write("steps", [_step("aggregated", 1, 0, 11.0)], part_name="sweep-c1-r0")
    # Then there is still one row, the latest
    _, rows = QueryEngine(lake.root).run("SELECT step_id, ttft_p50_ms FROM steps")
    assert rows == [("sweep-c1-r0", 11.0)]


def test_write_is_atomic(lake: LocalLake, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a part already written
    (path,) = lake.write("steps", [_step("aggregated", 1, 0, 10.0)], part_name="sweep-c1-r0")
    before = path.read_bytes()

    # When the next write dies half-way through writing the file
    def broken_write(table: Any, where: Any, **kwargs: Any) -> None:
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken_write)
    with pytest.raises(OSError, match="disk full"):
        lake.write("steps", [_step("aggregated", 1, 0, 99.0)], part_name="sweep-c1-r0")
    with pytest.raises(OSError, match="disk full"):
        lake.write("steps", [_step("aggregated", 4, 0, 99.0)], part_name="sweep-c4-r0")
    monkeypatch.undo()

    # Then the old file is intact, no partial or temporary file is left, and readers see the old row
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["sweep-c1-r0.parquet"]
    assert QueryEngine(lake.root).run("SELECT ttft_p50_ms FROM steps")[1] == [(10.0,)]


@pytest.mark.parametrize("bad", ["Camp-1", "camp/1", "..", "camp 1", "", "camp=1"])
def test_partition_values_must_be_path_safe(lake: LocalLake, bad: str) -> None:
    with pytest.raises(ValueError, match="cannot be a lake path segment"):
        lake.write("steps", [_step("aggregated", 1, 0, 10.0, campaign_id=bad)], part_name="p")
    with pytest.raises(ValueError, match="cannot be a lake path segment"):
        lake.write("steps", [_step("aggregated", 1, 0, 10.0)], part_name=bad or "A")
    with pytest.raises(ValueError, match="cannot be a lake path segment"):
        lake.raw_dir(bad, "agg", "s1")
    assert not (lake.root / "steps").exists()


def test_missing_partition_value_is_refused(lake: LocalLake) -> None:
    with pytest.raises(ValueError, match="experiment None cannot be a lake path segment"):
        lake.write("timeline", [{"campaign_id": CAMPAIGN, "event": "ready"}], part_name="p")


def test_unknown_column_is_refused_before_writing(lake: LocalLake) -> None:
    with pytest.raises(ValueError, match=r"unknown column\(s\) \['ttft_ms'\]"):
        lake.write("steps", [_step("aggregated", 1, 0, 10.0, ttft_ms=3.0)], part_name="p")
    assert lake.tables() == []


def test_raw_dir(lake: LocalLake) -> None:
    d = lake.raw_dir(CAMPAIGN, "agg", "sweep-c1-r0")
    assert d == lake.root / "raw" / f"campaign_id={CAMPAIGN}" / "experiment=agg" / "step_id=sweep-c1-r0"
    assert d.is_dir()
    assert lake.tables() == []  # raw/ is not a table


# ---------------------------------------------------------------------------------------------- queries


def test_empty_lake_has_empty_views_with_the_schema_columns(lake: LocalLake) -> None:
    engine = QueryEngine(lake.root)
    for table in schema.table_names():
        cols, rows = engine.run(table)
        assert cols == schema.column_names(table) and rows == []
    cols, rows = engine.run("v_concurrency_sweep")
    assert rows == [] and "agg_ttft_p50_ms" in cols


def test_a_snapshot_engine_reads_every_view_as_the_live_one_and_one_state_of_the_lake(tmp_path: Path) -> None:
    """The report's engine (``snapshot``) computes each table and view once when it opens: every view has the
    live engine's columns and rows (in the live engine's order where the view's SQL orders them), whole and for
    one campaign; a file written after it opened is seen by a live engine and not by the snapshot."""
    # Given two made-up campaigns in one lake, each with both modes compared over a concurrency sweep
    for cid, slower in (("camp-a", 1.0), ("camp-b", 1.5)):
        c = Campaign(tmp_path / "lake", cid=cid)
        c.experiment("agg", "aggregated")
        c.experiment("disagg", "disaggregated")
        c.compare("disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3")
        for name, mode in (("agg", "aggregated"), ("disagg", "disaggregated")):
            c.sweep(name, mode, 2, {k: {"ttft_p50_ms": t * slower, "itl_p50_ms": 10.0, "kv_transfer_ms": 5.0}
                                    for k, t in {1: 100.0, 8: 400.0}.items()})
            c.cache(name, mode, "sweep-i1024-c1-r0", 0, 0.5)
        c.write()
    live, snap = QueryEngine(tmp_path / "lake"), QueryEngine(tmp_path / "lake", snapshot=True)
    assert snap.views() == live.views()
    for view in live.views():
        ordered = view in snap.sql_views and "ORDER BY" in (VIEWS_DIR / f"{view}.sql").read_text(encoding="utf-8")
        (cols, rows), (live_cols, live_rows) = snap.run(view), live.run(view)
        assert cols == live_cols, view
        if ordered:
            assert rows == live_rows, view
        assert sorted(rows, key=repr) == sorted(live_rows, key=repr), view
    one = "SELECT * FROM v_concurrency_sweep WHERE campaign_id = 'camp-b'"
    assert snap.run(one) == live.run(one) and snap.run(one)[1]
    assert live.run("v_concurrency_sweep")[1], "the views compared hold rows"
    # When a step is written after both opened
    LocalLake(tmp_path / "lake").write("steps", [_step("aggregated", 4, 0, 10.0)], part_name="late")
    # Then the live engine reads it (in the table and the views over it) and the snapshot does not
    late = "SELECT count(*) FROM {} WHERE campaign_id = 'camp-1'"
    assert [live.run(late.format(v))[1] for v in ("steps", "v_step_stats")] == [[(1,)], [(1,)]]
    assert [snap.run(late.format(v))[1] for v in ("steps", "v_step_stats")] == [[(0,)], [(0,)]]


def test_concurrency_sweep_pivots_modes(lake: LocalLake) -> None:
    # Given two repeats of aggregated and disaggregated at concurrency 1 and 4, plus rows that must not count
    _write_steps(
        lake,
        [
            _step("aggregated", 1, 0, 10.0),
            _step("aggregated", 1, 1, 12.0),
            _step("disaggregated", 1, 0, 8.0),
            _step("disaggregated", 1, 1, 9.0),
            _step("aggregated", 4, 0, 20.0),
            _step("disaggregated", 4, 0, 16.0),
            _step("disaggregated", 4, 1, 999.0, status="failed"),
            _step("aggregated", 4, 1, 22.0, workload_kind=None),  # written without a kind: a sweep
        ],
    )
    lake.write(
        "steps",
        [_step("aggregated", 4, 0, 999.0, workload="other", workload_kind="prefix_cache", step_id="x")],
        part_name="x",
    )
    _compare(lake, ("agg", "disagg"))
    engine = QueryEngine(lake.root)
    cols, rows = engine.run("v_concurrency_sweep")
    got = [dict(zip(cols, r, strict=True)) for r in rows]
    # Then one row per concurrency, modes side by side, means over repeats
    assert [(g["campaign_id"], g["concurrency"]) for g in got] == [(CAMPAIGN, 1), (CAMPAIGN, 4)]
    c1, c4 = got
    assert c1["agg_ttft_p50_ms"] == pytest.approx(11.0)
    assert c1["disagg_ttft_p50_ms"] == pytest.approx(8.5)
    assert c1["agg_ttft_p99_ms"] == pytest.approx(22.0)
    assert c1["disagg_itl_p50_ms"] == pytest.approx(0.85)
    assert c1["disagg_itl_p99_ms"] == pytest.approx(1.7)
    assert c1["agg_output_tokens_per_s"] == pytest.approx((100.0 + 1000.0 / 12.0) / 2)
    assert c1["agg_request_latency_p50_ms"] == pytest.approx(55.0)
    assert (c1["n_repeats"], c1["agg_n_steps"], c1["disagg_n_steps"]) == (2, 2, 2)
    assert c4["agg_ttft_p50_ms"] == pytest.approx(21.0)
    assert c4["disagg_ttft_p50_ms"] == pytest.approx(16.0)  # the failed step is left out
    # the evidence is bounded by the smaller side: 2 aggregated repeats, 1 disaggregated
    assert (c4["n_repeats"], c4["agg_n_steps"], c4["disagg_n_steps"]) == (1, 2, 1)
    assert (c4["agg_n_repeats"], c4["disagg_n_repeats"], c4["comparison"]) == (2, 1, "disagg-vs-agg")
    # spread across repeats: sample standard deviation, NULL for a single repeat
    assert c1["agg_ttft_p50_ms_sd"] == pytest.approx(statistics.stdev([10.0, 12.0]))
    assert c4["disagg_ttft_p50_ms_sd"] is None
    assert (c1["agg_experiment"], c1["disagg_experiment"]) == ("agg", "disagg")
    expected = """campaign_id comparison workload isl osl concurrency n_repeats agg_n_repeats disagg_n_repeats
        agg_n_steps disagg_n_steps
        agg_ttft_p50_ms disagg_ttft_p50_ms agg_ttft_p99_ms disagg_ttft_p99_ms agg_itl_p50_ms disagg_itl_p50_ms
        agg_itl_p99_ms disagg_itl_p99_ms agg_output_tokens_per_s disagg_output_tokens_per_s
        agg_request_latency_p50_ms disagg_request_latency_p50_ms agg_goodput_ratio disagg_goodput_ratio
        agg_error_rate disagg_error_rate agg_ttft_p50_ms_sd disagg_ttft_p50_ms_sd agg_ttft_p99_ms_sd disagg_ttft_p99_ms_sd agg_itl_p50_ms_sd
        disagg_itl_p50_ms_sd agg_output_tokens_per_s_sd disagg_output_tokens_per_s_sd agg_goodput_ratio_sd
        disagg_goodput_ratio_sd agg_n_requests disagg_n_requests agg_experiment disagg_experiment"""
    assert cols == expected.split()


def _request(step: dict[str, Any], i: int, ttft: float, itl: float, **extra: Any) -> dict[str, Any]:
    return {"campaign_id": step["campaign_id"], "experiment": step["experiment"], "step_id": step["step_id"],
            "repeat": step["repeat"], "request_index": i, "ttft_ms": ttft, "itl_ms": itl, "isl": 256,
            "osl": 32, **extra}


def test_goodput_is_the_share_of_requests_meeting_every_slo_bound(lake: LocalLake) -> None:
    # Given an aggregated step with an SLO (TTFT <= 100 ms, ITL <= 10 ms) and four requests of which
    # one meets both bounds, one misses TTFT, one misses ITL and one failed fast
    agg = _step("aggregated", 1, 0, 10.0, slo_ttft_ms=100.0, slo_itl_ms=10.0, benchmark_duration_s=2.0)
    dis = _step("disaggregated", 1, 0, 10.0)  # and a step without any SLO
    _write_steps(lake, [agg, dis])
    lake.write("requests", [
        _request(agg, 0, 50.0, 5.0), _request(agg, 1, 150.0, 5.0), _request(agg, 2, 50.0, 20.0),
        _request(agg, 3, 1.0, 1.0, error_type="HTTPError", error_code=500),
        _request(dis, 0, 50.0, 5.0),
    ], part_name="r")
    _compare(lake, ("agg", "disagg"))
    engine = QueryEngine(lake.root)
    _, rows = engine.run("SELECT experiment, n_requests, n_ok, goodput_ratio, goodput_per_s FROM v_step_stats "
                            "ORDER BY experiment")
    # Then goodput counts only the request meeting every bound; no SLO means no goodput figure
    assert rows == [("agg", 4, 3, 0.25, 0.5), ("disagg", 1, 1, None, None)]
    # and the aggregated step, one failed request in four, is over the default max_error_rate (0.01): its latency
    # figures are left out of the side-by-side view (invalid, and said why), its goodput counts (a failed request is
    # an SLO miss), with its error rate beside it
    _, rows = engine.run("SELECT agg_goodput_ratio, disagg_goodput_ratio, agg_n_requests, disagg_n_requests, "
                         "agg_ttft_p50_ms, agg_error_rate FROM v_concurrency_sweep")
    assert rows == [(0.25, None, None, 1, None, 0.25)]
    _, rows = engine.run("SELECT experiment, error_rate FROM v_step_stats ORDER BY experiment")
    assert rows == [("agg", 0.25), ("disagg", 0.0)]
    _, rows = engine.run("SELECT experiment, valid, invalid_reason FROM v_comparison_steps ORDER BY experiment")
    assert rows == [("agg", False, "error rate above max_error_rate"), ("disagg", True, None)]


def test_concurrency_sweep_carries_the_recorded_comparisons_not_every_pair(lake: LocalLake) -> None:
    # Given two aggregated and two disaggregated experiments, and the two comparisons the spec names
    _write_steps(lake, [_step("aggregated", 1, 0, 10.0), _step("aggregated", 1, 0, 11.0, experiment="agg-rr"),
                        _step("disaggregated", 1, 0, 8.0), _step("disaggregated", 1, 0, 6.0, experiment="disagg-kv")])
    _compare(lake, ("agg", "disagg"), ("agg", "disagg-kv"))
    engine = QueryEngine(lake.root)
    _, rows = engine.run("SELECT agg_experiment, disagg_experiment, agg_ttft_p50_ms, disagg_ttft_p50_ms "
                         "FROM v_concurrency_sweep")
    # Then one row per comparison: agg-rr, compared with nothing, is in no row (the cross product had four)
    assert rows == [("agg", "disagg", 10.0, 8.0), ("agg", "disagg-kv", 10.0, 6.0)]
    assert engine.run("SELECT comparison FROM v_concurrency_sweep")[1] == [("disagg-vs-agg",), ("disagg-kv-vs-agg",)]


def test_a_comparison_that_changes_no_mode_is_not_a_side_by_side_row(lake: LocalLake) -> None:
    # Given a router rung (both aggregated) recorded as a comparison
    _write_steps(lake, [_step("aggregated", 1, 0, 10.0), _step("aggregated", 1, 0, 9.0, experiment="agg-kv")])
    lake.write("comparisons", [comparison_row(CAMPAIGN, "agg-kv-vs-agg", "agg", "agg-kv", "h2", differs="router")],
               part_name="comparisons")
    # Then the aggregated-vs-disaggregated view has no row for it (its verdicts: the report's H2)
    assert QueryEngine(lake.root).run("v_concurrency_sweep")[1] == []


def test_columns_added_to_the_schema_later_read_as_null(
    lake: LocalLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given files written before a column existed (simulated: drop a column from the schema while writing)
    t = schema.TABLES["steps"]
    trimmed = schema.Table(
        t.name, tuple(c for c in t.columns if c[0] != "benchmark_id"), t.partition_keys, ""
    )
    monkeypatch.setitem(schema.TABLES, "steps", trimmed)
    row = _step("aggregated", 1, 0, 10.0)
    lake.write("steps", [row], part_name="old")
    monkeypatch.undo()
    # Then the view still has the column, as NULL
    _, rows = QueryEngine(lake.root).run("SELECT benchmark_id, ttft_p50_ms FROM steps")
    assert rows == [(None, 10.0)]


def test_partition_columns_are_varchar(lake: LocalLake) -> None:
    lake.write(
        "steps", [_step("aggregated", 1, 0, 10.0, campaign_id="20260101", experiment="1")], part_name="p"
    )
    engine = QueryEngine(lake.root)
    types = dict(engine.con.execute("SELECT column_name, column_type FROM (DESCRIBE steps)").fetchall())
    assert types["campaign_id"] == "VARCHAR" and types["experiment"] == "VARCHAR"
    assert types["started_at"] == "TIMESTAMP" and types["request_count"] == "BIGINT"
    assert engine.run("SELECT campaign_id, experiment FROM steps")[1] == [("20260101", "1")]


def test_run_accepts_trino_queries(lake: LocalLake) -> None:
    _write_steps(lake, [_step("aggregated", 1, 0, 10.0), _step("aggregated", 4, 0, 20.0)])
    engine = QueryEngine(lake.root)
    # Trino spellings (approx_percentile, date_format-free) work through sqlglot
    cols, rows = engine.run(
        "WITH s AS (SELECT concurrency, ttft_p50_ms FROM steps) "
        "SELECT approx_percentile(ttft_p50_ms, 0.5) AS p, count(*) AS n FROM s;"
    )
    assert cols == ["p", "n"] and rows[0][1] == 2
    assert engine.run("  steps ; ")[1][0][0] == CAMPAIGN


@pytest.mark.parametrize(
    "sql",
    [
        "DROP VIEW steps",
        "INSERT INTO steps (mode) VALUES ('x')",
        "DELETE FROM steps",
        "CREATE TABLE t AS SELECT 1",
        "SELECT 1; SELECT 2",
        "SELECT FROM WHERE",
        "no_such_view",
    ],
)
def test_run_refuses_anything_but_one_query(lake: LocalLake, sql: str) -> None:
    with pytest.raises(ValueError):
        QueryEngine(lake.root).run(sql)


@pytest.mark.parametrize(
    "reader",
    [
        "SELECT content FROM read_text('{outside}')",
        "SELECT * FROM read_csv('{outside}')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_csv('/etc/passwd', sep = ':')",
        "SELECT * FROM read_text('{lake}/steps/../../secret.txt')",  # a path that climbs out of the lake
        "SELECT * FROM read_text('{lake}/raw/notes.txt')",  # the lake's raw evidence is not a table
        "SELECT * FROM read_parquet('https://example.com/x.parquet')",
    ],
)
def test_query_cannot_read_a_file_outside_the_lake_tables(tmp_path: Path, lake: LocalLake, reader: str) -> None:
    # Given a lake with a table, a file beside it, and a file in its raw evidence
    _write_steps(lake, [_step("aggregated", 1, 0, 10.0)])
    (tmp_path / "secret.txt").write_text("s3cret")
    (lake.root / "raw").mkdir()
    (lake.root / "raw" / "notes.txt").write_text("s3cret")
    engine = QueryEngine(lake.root)
    # When a query names a file the lake's tables do not hold
    # Then it is refused, naming the rule, and nothing of the file comes back
    with pytest.raises(ValueError, match="query refused: a query reads only the lake's tables and views") as err:
        engine.run(reader.format(outside=tmp_path / "secret.txt", lake=lake.root))
    assert "s3cret" not in str(err.value)
    # while the tables and every view still read the lake's own files
    assert engine.run("SELECT step_id FROM steps")[1] == [("sweep-c1-r0",)]
    for view in engine.sql_views:
        engine.run(view)


@pytest.mark.parametrize(
    "statement",
    [
        "SET enable_external_access = true",
        "SET allowed_directories = ['/']",
        "RESET lock_configuration",
        "COPY (SELECT 1) TO '{tmp}/copied.csv'",
        "ATTACH '{tmp}/other.duckdb'",
        "INSTALL httpfs",
        "LOAD httpfs",
    ],
)
def test_duckdb_itself_holds_the_lake_boundary_under_the_query_gate(
        tmp_path: Path, lake: LocalLake, statement: str) -> None:
    # Given the engine's connection after its views exist (the statement gate bypassed on purpose)
    import duckdb

    engine = QueryEngine(lake.root)
    # When a statement tries to widen the boundary or to touch a file
    with pytest.raises(duckdb.Error, match=r"locked|Permission Error|disabled"):
        engine.con.execute(statement.format(tmp=tmp_path))
    # Then DuckDB refuses it and nothing is written
    assert not (tmp_path / "copied.csv").exists() and not (tmp_path / "other.duckdb").exists()
    assert engine.con.execute("SELECT current_setting('enable_external_access')").fetchone() == (False,)


@pytest.mark.parametrize(
    ("statement", "kind"),
    [
        ("COPY (SELECT 1) TO '/tmp/x'", "COPY"),
        ("ATTACH '/tmp/x.duckdb'", None),
        ("INSTALL httpfs", "INSTALL"),
        ("LOAD httpfs", "LOAD"),
        ("SET enable_external_access = true", "SET"),
        ("PRAGMA enable_profiling", "PRAGMA"),
    ],
)
def test_query_refuses_statements_that_are_not_a_select_by_name(lake: LocalLake, statement: str,
                                                                 kind: str | None) -> None:
    with pytest.raises(ValueError, match="only a SELECT" if kind else "not valid trino SQL") as err:
        QueryEngine(lake.root).run(statement)
    if kind:
        assert str(err.value).endswith(f"got {kind}")


def test_ingested_samples_round_trip(tmp_path: Path, lake: LocalLake) -> None:
    # Given a real AIPerf summary ingested and written
    run = tmp_path / "run"
    run.mkdir()
    (run / "profile_export_aiperf.json").write_bytes((SAMPLES / "profile_export_aiperf.json").read_bytes())
    (run / "profile_export.jsonl").write_bytes((SAMPLES / "error_record.jsonl").read_bytes())
    result = ingest_artifacts(run, CTX)
    for table, rows in result.tables().items():
        lake.write(table, rows, part_name=CTX.step_id)
    lake.write("comparisons", [comparison_row(CTX.campaign_id, "c", CTX.experiment, "disagg", "q1")],
               part_name="comparisons")
    engine = QueryEngine(lake.root)
    summary = json.loads((SAMPLES / "profile_export_aiperf.json").read_text(encoding="utf-8"))
    _, rows = engine.run("SELECT ttft_p99_ms, request_count, status FROM steps")
    assert rows == [(summary["time_to_first_token"]["p99"], 40, "succeeded")]
    _, rows = engine.run("SELECT error_type FROM requests")
    assert rows == [("ClientConnectorError",)]
    # the only record kept is a failed request: the step is invalid for a comparison, and says why
    _, rows = engine.run("SELECT concurrency, error_rate, max_error_rate, valid, invalid_reason FROM v_comparison_steps")
    assert rows == [(4, 1.0, 0.01, False, "error rate above max_error_rate")]


# ------------------------------------------------------------------------------------------ the SQL files


def test_view_files_exist() -> None:
    assert "v_concurrency_sweep" in view_sql_files(VIEWS_DIR)


@pytest.mark.parametrize("path", sorted(VIEWS_DIR.glob("*.sql")), ids=lambda p: p.name)
def test_every_view_is_one_trino_query(path: Path) -> None:
    sql = path.read_text(encoding="utf-8")
    statements = [s for s in sqlglot.parse(sql, read="trino") if s is not None]
    assert len(statements) == 1
    parse_query(sql, what=str(path))  # a SELECT/WITH, as Athena's CREATE VIEW ... AS needs
    assert sqlglot.transpile(sql, read="trino", write="duckdb")


@pytest.mark.parametrize("path", sorted(VIEWS_DIR.glob("*.sql")), ids=lambda p: p.name)
def test_the_report_functions_view_order_reads_what_sqlglot_reads(path: Path) -> None:
    """athena_view_ddl (run by the Report function, where sqlglot is not shipped) orders views by their
    words; held here to sqlglot's parse of the same file: the same views read, not one more or less."""
    from sqlglot import exp

    views = set(view_sql_files(VIEWS_DIR)) - {path.stem}
    stmt = parse_query(path.read_text(encoding="utf-8"), what=str(path))
    ctes = {c.alias_or_name for c in stmt.find_all(exp.CTE)}
    by_sqlglot = {t.name for t in stmt.find_all(exp.Table)} & views - ctes
    assert view_references(path.read_text(encoding="utf-8"), views) == by_sqlglot


def test_view_references_ignore_comments_strings_and_ctes() -> None:
    body = ("-- reads v_a\n/* v_b */ WITH v_c AS (SELECT 'v_d' AS x FROM v_e) "
            "SELECT * FROM v_c JOIN v_f USING (x)")
    assert view_references(body, {"v_a", "v_b", "v_c", "v_d", "v_e", "v_f"}) == {"v_e", "v_f"}


# ---------------------------------------------------------------------------------------------- formats


def test_format_result() -> None:
    cols = ["mode", "ttft_ms", "n", "when"]
    rows = [
        ("aggregated", 55.146340500001, 40, datetime(2026, 1, 1, 12)),
        ("disagg", 0.000123456, None, None),
    ]
    table = format_result(cols, rows, "table")
    lines = table.splitlines()
    assert lines[0].split() == cols
    assert "55.15" in lines[2] and "0.0001235" in lines[3]
    assert lines[-1] == "(2 rows)"
    # numbers right-aligned under their header
    assert lines[2].index("55.15") + len("55.15") == lines[0].index("ttft_ms") + len("ttft_ms")
    csv_text = format_result(cols, rows, "csv")
    assert csv_text.splitlines()[1] == "aggregated,55.146340500001,40,2026-01-01T12:00:00"
    data = json.loads(format_result(cols, rows, "json"))
    assert data[1] == {"mode": "disagg", "ttft_ms": 0.000123456, "n": None, "when": None}
    with pytest.raises(ValueError, match="unknown format"):
        format_result(cols, rows, "xml")
    assert format_result(["x"], [(12345.678,)], "table").splitlines()[2].strip() == "12,345.7"


def test_view_files_are_created_dependencies_first_and_a_bad_one_is_named(tmp_path: Path) -> None:
    """The local engine creates the view files in the order Athena does (a view after the views it reads,
    whatever their names), and a file that is not one query, one DuckDB cannot create (when a query reads it),
    or a cycle, is one error naming the file."""
    views = tmp_path / "views"
    views.mkdir()
    (views / "a_top.sql").write_text("SELECT n + 1 AS m FROM z_base", encoding="utf-8")
    (views / "z_base.sql").write_text("SELECT count(*) AS n FROM steps", encoding="utf-8")
    engine = QueryEngine(tmp_path / "lake", views_dir=views)
    assert engine.sql_views == ["z_base", "a_top"] and engine.run("a_top")[1] == [(1,)]
    (views / "b_bad.sql").write_text("SELECT no_such_column FROM steps", encoding="utf-8")
    (views / "d_over_bad.sql").write_text("SELECT * FROM b_bad", encoding="utf-8")
    engine = QueryEngine(tmp_path / "lake", views_dir=views)  # a view is created when a query first reads it
    assert engine.run("SELECT m FROM a_top")[1] == [(1,)]  # the views a query does not read do not stop it
    for query in ("b_bad", "d_over_bad", "SELECT * FROM d_over_bad"):  # read directly or through another view
        with pytest.raises(ValueError, match=r"cannot create view 'b_bad': .*b_bad\.sql: .*no_such_column"):
            engine.run(query)
    (views / "b_bad.sql").write_text("SELECT FROM WHERE", encoding="utf-8")  # not SQL: refused when it opens
    with pytest.raises(ValueError, match=r"b_bad\.sql: not valid trino SQL"):
        QueryEngine(tmp_path / "lake", views_dir=views)
    (views / "d_over_bad.sql").unlink()
    (views / "b_bad.sql").write_text("SELECT * FROM c_loop", encoding="utf-8")
    (views / "c_loop.sql").write_text("SELECT * FROM b_bad", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cycle: \['b_bad', 'c_loop'\]"):
        QueryEngine(tmp_path / "lake", views_dir=views)
