"""The CI rule of tests/conftest.py: with CI=true a skipped test fails the run (a skip hides an untested
part); without CI the same run passes. Checked by running pytest on a tiny suite that uses our conftest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    suite = tmp_path / "tests"
    suite.mkdir(exist_ok=True)
    shutil.copyfile(ROOT / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_tiny.py").write_text(
        "import pytest\n\ndef test_runs():\n    pass\n\n"
        "@pytest.mark.skip(reason='chromium is missing')\ndef test_skipped():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(suite)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_a_skip_fails_the_run_in_ci(tmp_path):
    res = _pytest(tmp_path, "true")
    assert res.returncode == 1, res.stdout
    assert "test_tiny.py::test_skipped: Skipped: chromium is missing" in res.stdout


def test_a_skip_is_only_reported_outside_ci(tmp_path):
    for ci in (None, "false"):
        res = _pytest(tmp_path, ci)
        assert res.returncode == 0, res.stdout
        assert "1 passed, 1 skipped" in res.stdout
