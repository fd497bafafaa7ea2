"""The report end to end, on the session's smoke campaign (real Dynamo mocker + AIPerf, both modes, every
workload kind): the report the run itself wrote and `benchctl report`'s, rendered by headless Chromium
(DOM, layout, screenshot), and the Markdown twin."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, SMOKE_ID

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

CAMPAIGN = SMOKE_ID
TABLE_SECTIONS = ("tbl-v_concurrency_sweep", "tbl-v_prefix_cache", "tbl-v_cost_efficiency", "tbl-v_multi_turn",
                  "tbl-v_sequence_distribution", "tbl-v_pareto", "datasets")
FIGURE_SECTIONS = ("fig-pareto", "fig-concurrency", "fig-multi-turn", "fig-distribution", "fig-prefix",
                   "fig-timeline")
INSTALL_HINT = ("Debian's chromium is needed to render the report: run scripts/setup.sh as root (it installs it) "
                "or `apt-get install -y --no-install-recommends chromium`")


def _chromium() -> str:
    exe = shutil.which("chromium")
    if exe:
        return exe
    if os.geteuid() != 0:
        pytest.skip(f"chromium is not installed and we are not root to install it; {INSTALL_HINT}")
    pytest.fail(f"chromium is not installed (scripts/setup.sh should have installed it; see .venv/setup.log). "
                f"{INSTALL_HINT}")


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@pytest.fixture(scope="module")
def campaign_out(smoke_campaign: tuple[subprocess.CompletedProcess[str], Path]) -> Path:
    _chromium()
    res, out = smoke_campaign
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    return out


class _Dom(HTMLParser):
    """Sections (id -> attributes), marks inside each section's figures, text per section."""

    MARKS = frozenset({"circle", "rect", "path"})

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, dict[str, str]] = {}
        self.marks: dict[str, int] = {}
        self.svgs: dict[str, int] = {}
        self.text: dict[str, list[str]] = {}
        self.external: list[str] = []
        self._stack: list[str] = []  # open section ids
        self._svg_depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "script" or (tag in {"link", "img", "iframe", "object", "embed", "source", "audio", "video"}
                               and re.search(r"^\s*(https?:)?//", a.get("src", "") + a.get("href", "")
                                             + a.get("data", ""))):
            self.external.append(f"<{tag} {a}>")
        if tag == "section":
            sid = a.get("id", "")
            self.sections[sid] = a
            self._stack.append(sid)
        if tag == "svg" and "figure" in a.get("class", "").split():
            self._svg_depth += 1
            for sid in self._stack:
                self.svgs[sid] = self.svgs.get(sid, 0) + 1
        elif self._svg_depth and tag in self.MARKS and "mark" in a.get("class", "").split():
            for sid in self._stack:
                self.marks[sid] = self.marks.get(sid, 0) + 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "section" and self._stack:
            self._stack.pop()
        if tag == "svg" and self._svg_depth:
            self._svg_depth -= 1

    def handle_data(self, data: str) -> None:
        for sid in self._stack:
            self.text.setdefault(sid, []).append(data)


def _run(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def check_report_of(out: Path, tmp_path: Path) -> None:
    """`benchctl report` on the campaign's lake, then what a browser makes of it."""
    html_path = tmp_path / "report.html"
    res = _run([_bin("benchctl"), "report", "--lake", str(out / "lake"), "--out", str(html_path)])
    assert res.returncode == 0, res.stdout + res.stderr
    html = html_path.read_text(encoding="utf-8")
    assert f"Campaign {CAMPAIGN}" in html  # the latest (only) campaign by default

    # self-contained: nothing is fetched from anywhere
    static = _Dom()
    static.feed(html)
    assert not static.external, static.external
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html)
    assert "@import" not in html and not re.search(r"url\(\s*['\"]?(https?:)?//", html)
    assert "http://" not in html and "https://" not in html

    chromium = _chromium()
    profile = tmp_path / "chromium-profile"
    base = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={profile}", "--window-size=1400,6000"]
    dom_res = _run([*base, "--dump-dom", html_path.as_uri()])
    assert dom_res.returncode == 0 and "<section" in dom_res.stdout, dom_res.stderr[-3000:]
    dom = _Dom()
    dom.feed(dom_res.stdout)

    for sid in TABLE_SECTIONS:
        assert sid in dom.sections, f"section {sid} missing from the rendered DOM"
        assert int(dom.sections[sid]["data-rows"]) > 0, f"{sid}: no rows"
    for sid in FIGURE_SECTIONS:
        assert sid in dom.sections, f"section {sid} missing from the rendered DOM"
        assert int(dom.sections[sid]["data-points"]) > 0, f"{sid}: no data points"
        assert dom.svgs.get(sid, 0) >= 1 and dom.marks.get(sid, 0) >= int(dom.sections[sid]["data-points"]), sid
        text = " ".join(dom.text[sid])
        assert "SIMULATED" in text, sid
        if sid != "fig-timeline":
            assert "(aggregated)" in text and "(disaggregated)" in text, f"{sid}: not both modes"
        else:
            assert "aggregated" in text and "disaggregated" in text
    # every answer of the plan states an interval, or "inconclusive" and why, or "not measured": the smoke spec
    # runs one repeat, so nothing in it may be directional
    found = {sid: a for sid, a in dom.sections.items() if sid.startswith("answer-")}
    assert sorted(found) == sorted(f"answer-{k}" for k in ("q1", "q2", "q3", "q4", "h1", "h2", "h3", "h4"))
    for sid, attrs in found.items():
        text = " ".join(dom.text[sid])
        assert attrs["data-status"] in ("inconclusive", "not measured"), (sid, attrs)
        assert "inconclusive (" in text or "not measured" in text, sid
    q1 = " ".join(dom.text["answer-q1"])
    assert "one repeat per side: no interval" in q1
    # and each method line states the answer's primary figures, its family and adjustment, and the design
    assert "primary figures, declared before the data: TTFT p50" in q1 and "Holm's step-down" in q1
    assert "no test could be made" in q1  # one repeat: not one test, so no direction could be stated
    assert re.search(r"one deployment per experiment, run in the order (agg, disagg|disagg, agg)", q1), q1
    assert "a between-deployment spread of 5 % is assumed for it (comparison.deployment_spread_pct)" in q1
    assert "fewer than 3 repeats per side: the brackets are shown, not compared" in q1
    assert "predictions" in dom.sections and "provenance" in dom.sections
    assert "simulated-banner" in dom_res.stdout and "Dynamo mocker on CPU" in dom_res.stdout
    prov = " ".join(dom.text["provenance"])
    for needle in ("spec_hash", "aiperf", "pricing source", "succeeded"):
        assert needle in prov, needle

    # the report opens with the decision: one row per scenario of the plan, each with its outcome
    assert list(dom.sections).index("recommendations") < list(dom.sections).index("answers")
    assert int(dom.sections["recommendations"]["data-rows"]) >= 4
    recs = " ".join(dom.text["recommendations"])
    for scenario in ("fewer than 8 concurrent requests", "multi-turn with a high cache hit rate",
                     "32+ concurrent requests under a strict SLA", "cost first"):
        assert scenario in recs, scenario
    assert "SIMULATED" in recs and "confirmed" not in recs.replace("each confirmed", "")  # one repeat: none decided
    # and each measured answer reads at a glance: a forest plot of its tests, its figures as numbers
    assert int(dom.sections["answer-q1"]["data-forests"]) >= 1 and dom.svgs.get("answer-q1", 0) >= 1
    # every load of the sweep is accounted for: a mark (its tip "c=N: ...") where both sides measured it, else a
    # "not measured on both sides" row, else a step left out by name and why (its load generator fell behind)
    marked = set(re.findall(r"\bc=(\d+): ", q1))
    missing = set(re.findall(r"\bc=(\d+) not measured on both sides", q1))
    left_out = set(re.findall(r"concurrency-sweep-c(\d+)-r\d+: client-bound: the load generator fell behind", q1))
    assert {"1", "4", "16"} <= marked | missing | left_out, (marked, missing, left_out)
    assert marked and dom.marks.get("answer-q1", 0) >= len(marked), (marked, dom.marks)
    assert "change, treatment vs baseline (%)" in q1 and "[1] one repeat per side: no interval" in q1

    # the screenshot a reader would see at 1400 px, kept as an artifact of the run (runs/ is CI's log directory)
    png = tmp_path / "report.png"
    shot = _run([*base, f"--screenshot={png}", html_path.as_uri()])
    assert shot.returncode == 0, shot.stderr[-3000:]
    assert png.is_file() and png.stat().st_size > 20_000, f"screenshot too small: {png.stat().st_size if png.exists() else 0}"
    artifacts = Path(os.environ.get("BENCHCTL_ARTIFACTS", ROOT / "runs" / "artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(png, artifacts / "report-1400px.png")

    md_path = tmp_path / "report.md"
    res = _run([_bin("benchctl"), "report", "--lake", str(out / "lake"), "--campaign", CAMPAIGN,
                "--out", str(md_path), "--format", "md"])
    assert res.returncode == 0, res.stdout + res.stderr
    md = md_path.read_text(encoding="utf-8")
    assert "<svg" not in md and "see the HTML report" in md and "(v_concurrency_sweep) (SIMULATED)" in md

    bad = _run([_bin("benchctl"), "report", "--lake", str(out / "lake"), "--campaign", "nope",
                "--out", str(tmp_path / "x.html")])
    assert bad.returncode == 2 and f"valid: {CAMPAIGN}" in bad.stderr


def test_report_of_a_real_campaign_renders_in_chromium(campaign_out: Path, tmp_path: Path) -> None:
    check_report_of(campaign_out, tmp_path)


# A page that loads the report in a frame and measures, in the browser, every table against its card.
_MEASURE = """<!doctype html><html><body style="margin:0">
<iframe id="f" src="report.html" style="width:1100px;height:9000px;border:0"></iframe>
<script>
document.getElementById("f").addEventListener("load", () => {
  const d = document.getElementById("f").contentDocument, out = [];
  for (const t of d.querySelectorAll("table")) {
    const box = t.parentElement, card = t.closest("section");
    out.push({card: card.id, box: box.getBoundingClientRect().right, edge: card.getBoundingClientRect().right,
              table: t.getBoundingClientRect().width, scrollW: box.scrollWidth, clientW: box.clientWidth,
              overflow: getComputedStyle(box).overflowX});
  }
  const pre = document.createElement("pre");
  pre.id = "measured"; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script></body></html>"""


def test_the_runs_own_report_shows_its_final_status_and_wide_tables_scroll(campaign_out: Path,
                                                                          tmp_path: Path) -> None:
    """The report the Report state wrote (the file a person opens): the campaign's final status, and
    every table inside its card, the wide ones scrolling instead of spilling over or being cut off."""
    import html as html_lib
    import json

    written = campaign_out / "campaigns" / CAMPAIGN / "report" / "report.html"
    page = written.read_text(encoding="utf-8")
    assert "status <b>succeeded</b>" in page and "status <b>running</b>" not in page
    shutil.copyfile(written, tmp_path / "report.html")
    (tmp_path / "measure.html").write_text(_MEASURE, encoding="utf-8")
    res = _run([_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}",
                "--allow-file-access-from-files", "--virtual-time-budget=10000", "--window-size=1200,1000",
                "--dump-dom", (tmp_path / "measure.html").as_uri()])
    found = re.search(r'<pre id="measured">(.*?)</pre>', res.stdout, re.S)
    assert found, res.stderr[-3000:]
    tables = json.loads(html_lib.unescape(found.group(1)))
    assert {t["card"] for t in tables} >= set(TABLE_SECTIONS)
    for t in tables:
        assert t["box"] <= t["edge"] + 1, f"{t['card']}: the table's box spills over its card: {t}"
        if t["table"] > t["clientW"] + 1:  # wider than the card: it must scroll, not be cut off
            assert t["overflow"] in ("auto", "scroll") and t["scrollW"] >= t["table"] - 1, t
    assert any(t["table"] > t["clientW"] + 1 for t in tables), "no wide table: the check checked nothing"
