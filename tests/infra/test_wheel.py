"""A non-editable install works: the wheel carries the data benchctl reads at run time (the view SQL and
the campaign ASL, ``setup.py``) and finds it inside the installed package, away from the work tree."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, benchctl
from benchctl import resources
from benchctl.analysis import views
from benchctl.campaign import asl
print(json.dumps({"package": benchctl.__file__, "sql": str(resources.data_dir("sql")),
                  "views": sorted(views.view_sql_files()), "ddl": len(views.athena_view_ddl()),
                  "states": len(list(asl.all_states(asl.load())))}))
"""


def test_a_built_wheel_installs_and_finds_its_views_and_asl(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("benchctl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    repo_views = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "sql").rglob("*.sql"))
    assert {f"benchctl/_data/{v}" for v in repo_views} <= names
    assert "benchctl/_data/state_machines/campaign.asl.json" in names
    assert "benchctl/local/loopback_bind.c" in names  # the local engine builds its loopback shim from it
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=elsewhere, timeout=120,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["package"].startswith(str(site)) and got["sql"] == str(site / "benchctl" / "_data" / "sql")
    assert got["views"] == sorted(Path(v).stem for v in repo_views) and got["ddl"] == len(repo_views)
    assert got["states"] > 30
