"""SIMULATED wherever a simulated campaign's rows go: ``benchctl query`` (a line above a table, a column in
CSV, a field in JSON) and the report's exported ``<view>.csv|json`` (both engines' export query).

Lakes are written through the lake writer; ``benchctl query`` runs through the CLI's own ``main`` in-process
(tests/integration/test_cli_ingest_query.py runs it as a process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.cli.main import main
from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine
from tests.unit.test_meters import _smoke_step_metrics, campaign, experiments, metrics, steps


def _two_campaigns(tmp_path: Path, *, measured_too: bool = True) -> LocalLake:
    lake = LocalLake(tmp_path / "lake")
    for cid, sim in (("sim-1", True), ("gpu-1", False))[: 2 if measured_too else 1]:
        campaign(lake, simulated=sim, cid=cid)
        experiments(lake, cid=cid)
        steps(lake, cid=cid)
    return lake


def test_label_simulated_marks_rows_by_campaign_or_by_the_whole_lake() -> None:
    from benchctl.analysis.formatting import label_simulated

    sims = {"sim-1": True, "gpu-1": False}
    one = label_simulated(["campaign_id", "x"], [("sim-1", 1), ("sim-1", 2)], sims)
    assert one.columns == ["campaign_id", "x", "simulated"] and [r[-1] for r in one.rows] == [True, True]
    assert one.header is not None and one.header.startswith("SIMULATED (campaign sim-1): every row below")
    mixed = label_simulated(["campaign_id", "x"], [("sim-1", 1), ("gpu-1", 2)], sims)
    assert [r[-1] for r in mixed.rows] == [True, False] and mixed.header is not None
    assert "the other rows are measured" in mixed.header
    measured = label_simulated(["campaign_id"], [("gpu-1",)], sims)
    assert measured.header is None and measured.rows == [("gpu-1", False)]
    # no campaign_id: the whole lake decides, or says it cannot
    assert label_simulated(["n"], [(3,)], {"sim-1": True}).rows == [(3, True)]
    unknown = label_simulated(["n"], [(3,)], sims)
    assert unknown.rows == [(3, None)] and unknown.header is not None and unknown.header.startswith("SIMULATED?")
    # the result's own column is kept, not doubled
    own = label_simulated(["campaign_id", "simulated"], [("x", True)], {})
    assert own.columns == ["campaign_id", "simulated"] and own.header is not None
    # a lake that records no campaign: nothing to say
    assert label_simulated(["n"], [(3,)], {}) == label_simulated(["n"], [(3,)], {})
    assert label_simulated(["n"], [(3,)], {}).columns == ["n"] and label_simulated(["n"], [(3,)], {}).header is None


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_query_of_a_simulated_campaign_says_simulated_in_every_format(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    lake = _two_campaigns(tmp_path, measured_too=False)
    assert main(["query", "v_step_cache", "--lake", str(lake.root), "--format", fmt]) == 0
    out = capsys.readouterr().out
    if fmt == "table":
        assert out.splitlines()[0].startswith("SIMULATED (campaign sim-1): every row below comes from the Dynamo")
    elif fmt == "csv":
        header, *rows = out.strip().splitlines()
        assert header.split(",").count("simulated") == 1 and rows and all(r.endswith(",True") for r in rows)
    else:
        rows = json.loads(out)
        assert rows and all(r["simulated"] is True for r in rows)


def test_query_of_measured_rows_has_no_mark_and_mixed_rows_are_told_apart(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lake = _two_campaigns(tmp_path)
    assert main(["query", "SELECT campaign_id, step_id FROM steps WHERE campaign_id = 'gpu-1'",
                 "--lake", str(lake.root)]) == 0
    assert "SIMULATED" not in capsys.readouterr().out
    assert main(["query", "SELECT campaign_id, experiment FROM steps ORDER BY campaign_id, experiment",
                 "--lake", str(lake.root), "--format", "json"]) == 0
    assert [(r["campaign_id"], r["simulated"]) for r in json.loads(capsys.readouterr().out)] == [
        ("gpu-1", False), ("gpu-1", False), ("sim-1", True), ("sim-1", True)]
    assert main(["query", "SELECT count(*) AS n FROM steps", "--lake", str(lake.root)]) == 0
    assert capsys.readouterr().out.startswith("SIMULATED?: the lake holds simulated campaign(s) sim-1 beside")


def test_the_reports_exported_views_carry_the_simulated_column(tmp_path: Path) -> None:
    from benchctl.local.report import EXPORTED_VIEWS, report_views

    lake = _two_campaigns(tmp_path)
    metrics(lake, _smoke_step_metrics(), "smoke")
    metrics(lake, [{**r, "campaign_id": "sim-1"} for r in _smoke_step_metrics()], "smoke-sim")
    for cid, sim in (("sim-1", True), ("gpu-1", False)):
        out = tmp_path / cid
        with QueryEngine(lake.root, snapshot=True) as q:  # the report's engine (benchctl.local.report._engine)
            report_views(q, lake.root, cid, out)
        for view in EXPORTED_VIEWS:
            header, *rows = (out / f"{view}.csv").read_text().splitlines()
            assert header.split(",").count("simulated") == 1, view
            data = json.loads((out / f"{view}.json").read_text())
            assert all(r["simulated"] is sim for r in data), view
            assert len(data) == len(rows)
        assert json.loads((out / "v_prefix_cache.json").read_text()), "the comparison view has its row"


def test_the_export_query_adds_the_campaigns_mark_only_to_views_without_their_own(tmp_path: Path) -> None:
    from benchctl.analysis.views import REPORT_VIEWS, campaign_rows_sql, export_sql

    lake = _two_campaigns(tmp_path)
    with QueryEngine(lake.root) as q:
        for view in REPORT_VIEWS:
            cols, _ = q.run(campaign_rows_sql(view, "sim-1"))
            sql = export_sql(view, "sim-1", cols)
            got, rows = q.run(sql)
            assert got.count("simulated") == 1 and got[: len(cols)] == cols, view
            assert all(r[got.index("simulated")] is True for r in rows), view
            assert (sql == campaign_rows_sql(view, "sim-1")) == ("simulated" in cols), view


def test_simulated_campaigns_reads_the_campaigns_table(tmp_path: Path) -> None:
    from benchctl.analysis.formatting import format_result, simulated_campaigns

    lake = _two_campaigns(tmp_path)
    with QueryEngine(lake.root) as q:
        assert simulated_campaigns(q) == {"sim-1": True, "gpu-1": False}
    assert format_result(["a"], [(1,)], "csv") == "a\n1\n"  # the formats themselves are unchanged


class _AthenaAtTheQueryPort:
    """Athena at the query port: DDL recorded, every SELECT run on DuckDB over the same lake, and each result
    location remembered with the SQL that produced it (Athena keeps that result as the view's CSV)."""

    def __init__(self, engine: QueryEngine) -> None:
        self.engine, self.located = engine, {}

    def execute(self, sql: str) -> dict[str, str]:
        return {"State": "SUCCEEDED"}

    def run(self, sql: str) -> tuple[list[str], list[tuple[object, ...]]]:
        return self.engine.run(sql)

    def location(self, sql: str) -> str:
        uri = f"s3://b/athena-results/{len(self.located)}.csv"
        self.located[uri] = sql
        return uri


def test_the_aws_reports_result_csvs_carry_the_simulated_column(tmp_path: Path) -> None:
    from benchctl.analysis.views import REPORT_VIEWS
    from benchctl.aws.athena import athena_report

    lake = _two_campaigns(tmp_path)
    with QueryEngine(lake.root, snapshot=True) as engine:  # the rows read once (test_lake_query holds them equal)
        stub = _AthenaAtTheQueryPort(engine)
        out = athena_report("sim-1", database="d", workgroup="wg", query=stub)
        for view in REPORT_VIEWS:
            cols, rows = engine.run(stub.located[out[view]])
            assert cols.count("simulated") == 1, view
            assert all(r[cols.index("simulated")] is True for r in rows), view
