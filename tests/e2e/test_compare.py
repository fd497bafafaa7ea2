"""`benchctl compare` on real campaigns (real Dynamo mockers, real AIPerf, the real lake and views): one small
spec run twice into one lake reads no change for any figure, with nothing recorded differing; a third campaign
whose twin runs 30 % slower (``mocker.speedup_ratio`` 1/1.3) reads ITL p50 higher and output tokens/s lower,
both worse, and lists what differs (the spec hash, the twin's knob) first; the report of the second campaign
compares it with the first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
SLOWER = 1.3


def _spec(tmp_path: Path, name: str, speedup: float | None = None) -> Path:
    """One aggregated experiment, a sweep of three fixed loads of 3 s, one repeat (the smoke spec cut down)."""
    def mutate(d):
        d["name"] = "compare-e2e"
        d["experiments"] = d["experiments"][:1]
        if speedup is not None:
            d["experiments"][0]["mocker"] = {"speedup_ratio": speedup}
        sweep = next(w for w in d["workloads"] if w["kind"] == "concurrency_sweep")
        sweep.update(concurrency=[1, 4, 8], duration_s=3)
        sweep.pop("search", None)
        d["workloads"] = [sweep]
        d.update(warmup={"request_count": 2}, quality={"questions": 1}, smoke={"requests": 1, "max_tokens": 8})

    return write_spec(tmp_path, name, mutate)


def _bin() -> str:
    return str(Path(sys.executable).parent / "benchctl")


def _run(spec: Path, out: Path, cid: str) -> None:
    res = subprocess.run([_bin(), "run", str(spec), "--out", str(out), "--campaign-id", cid], capture_output=True,
                         text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def _compare(lake: Path, *args: str) -> dict:
    res = subprocess.run([_bin(), "compare", *args, "--lake", str(lake), "--format", "json"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("compare")
    out = tmp / "out"
    same = _spec(tmp, "same")
    _run(same, out, "cmp-a")
    _run(same, out, "cmp-b")
    _run(_spec(tmp, "slower", round(1 / SLOWER, 4)), out, "cmp-c")
    return out / "lake"


def test_the_same_spec_twice_reads_no_change_and_nothing_differing(lake: Path) -> None:
    got = _compare(lake, "cmp-b", "--against", "cmp-a")
    assert (got["before"], got["after"], got["simulated"]) == ("cmp-a", "cmp-b", True)
    assert got["provenance"] == [], got["provenance"]
    figures = {f["figure"]: f for f in got["figures"]}
    for label in ("TTFT p50 (ms)", "ITL p50 (ms)", "output tokens/s (tok/s)"):
        assert figures[label]["points"] == 3 and figures[label]["verdict"].startswith("no change"), figures[label]
    assert not any(f["verdict"].startswith(("higher", "lower")) for f in got["figures"]), got["figures"]


def test_a_twin_30_percent_slower_is_named_with_the_right_sign_and_its_knob_listed(lake: Path) -> None:
    got = _compare(lake, "cmp-c", "--against", "cmp-a")
    said = {p["what"]: p for p in got["provenance"]}
    assert "spec_hash" in said and f"mocker.speedup_ratio {round(1 / SLOWER, 4):g}" in said["twin.agg.worker"]["after"]
    figures = {f["figure"]: f for f in got["figures"]}
    assert figures["ITL p50 (ms)"]["verdict"].startswith("higher (worse)"), figures
    assert figures["output tokens/s (tok/s)"]["verdict"].startswith("lower (worse)"), figures
    ttft = figures["TTFT p50 (ms)"]  # its fixed part (HTTP, tokenising, dispatch) is not the twin's: less than 30 %
    assert ttft["change"].startswith("+") and not ttft["verdict"].startswith("lower"), ttft
    rows = [r for r in got["points"] if r["figure"] == "ITL p50"]
    assert len(rows) == 3 and all(r["after"] > r["before"] for r in rows), rows


def test_the_default_compares_the_latest_with_the_one_before_and_the_report_says_so(lake: Path, tmp_path: Path
                                                                                    ) -> None:
    got = _compare(lake)  # cmp-c, the latest, against cmp-b, the campaign of the spec before it
    assert (got["before"], got["after"]) == ("cmp-b", "cmp-c")
    html = tmp_path / "report.html"
    res = subprocess.run([_bin(), "report", "--lake", str(lake), "--campaign", "cmp-b", "--out", str(html)],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    text = html.read_text(encoding="utf-8")
    section = text[text.index('<section id="since"'):text.index('<section id="tuning"')]
    assert 'data-before="cmp-a"' in section and "no change" in section and "SIMULATED" in section
