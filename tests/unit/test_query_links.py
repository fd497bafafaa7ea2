"""A symlink planted under the lake's tables is named and skipped (it used to take every query outside the lake,
which the engine refuses: one link broke every query); DuckDB spills to its own temporary directory."""

from __future__ import annotations

from pathlib import Path

from benchctl.local.lake import LocalLake
from benchctl.local.query import QueryEngine


def test_a_planted_symlink_is_named_and_skipped_and_every_query_still_runs(tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    lake.write("steps", [{"campaign_id": "c", "experiment": "agg", "step_id": "s1", "random_seed": 1}],
               part_name="s1")
    outside = tmp_path / "outside.parquet"
    (part,) = list((tmp_path / "lake" / "steps").rglob("*.parquet"))
    outside.write_bytes(part.read_bytes())
    link = part.parent / "planted.parquet"
    link.symlink_to(outside)
    (part.parent / "dir-link").symlink_to(tmp_path, target_is_directory=True)
    engine = QueryEngine(tmp_path / "lake")
    try:
        assert sorted(p.name for p in engine.skipped_links) == ["dir-link", "planted.parquet"]
        _, rows = engine.run("SELECT step_id FROM steps")
        assert rows == [("s1",)]  # the table's own file, once; the link's copy not read
        engine.run("v_step_stats")  # every view over it still runs
        temp = engine.con.execute("SELECT current_setting('temp_directory')").fetchone()[0]
        assert "benchctl-duckdb-" in temp and not temp.startswith(str(Path.cwd()))
    finally:
        engine.close()
