"""benchctl report over a hand-made lake: sections, figures, SIMULATED labels, Markdown, bad input."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from html import escape as html_escape
from pathlib import Path
from typing import Any

import pytest

from benchctl.cli.main import main
from benchctl.lake import schema
from benchctl.local.lake import LocalLake
from benchctl.local.report import render_report, write_report
from benchctl.report import SIM_TEXT, pareto_frontier, timeline_segments
from tests.unit.synthetic_lake import comparison_row

C = "camp-r"
T0 = datetime(2026, 11, 30, 6, 0, 0)
FIGURES = ("fig-pareto", "fig-concurrency", "fig-multi-turn", "fig-distribution", "fig-prefix", "fig-timeline")
TABLES = ("tbl-v_concurrency_sweep", "tbl-v_prefix_cache", "tbl-v_cost_efficiency", "tbl-v_multi_turn",
          "tbl-v_sequence_distribution", "tbl-v_pareto")


def write(lake: LocalLake, table: str, rows: list[dict[str, Any]]) -> None:
    for i, r in enumerate(rows):
        lake.write(table, [r], part_name=f"{table}-{i}")


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def campaign(lake: LocalLake, cid: str = C, *, simulated: bool = True, started: float = 0.0,
             versions: dict[str, Any] | None = None) -> None:
    lake.write("campaigns", [{
        "campaign_id": cid, "spec_hash": "ab" * 32, "spec_name": "smoke", "model": "Qwen/Qwen3-30B-A3B",
        "engine": "local" if simulated else "aws", "simulated": simulated, "status": "succeeded",
        "started_at": at(started), "ended_at": at(started + 300),
        "versions_json": json.dumps(versions or {"aiperf": "0.13.0", "ai-dynamo": "1.6.1"}),
        "pricing_json": json.dumps({"source": "AWS on-demand list price, us-east-1", "as_of": "2026-11-01"}),
        "lake_uri": str(lake.root)}], part_name="campaign")


def build_lake(root: Path, cid: str = C, *, simulated: bool = True) -> LocalLake:
    """Two experiments (agg, disagg), every workload kind, timeline and costs: every section has rows."""
    lake = LocalLake(root)
    campaign(lake, cid, simulated=simulated)
    write(lake, "experiments", [
        {"campaign_id": cid, "experiment": e, "experiment_index": i, "mode": m, "router": "kv",
         "kv_offload": False, "gpus": 8}
        for i, (e, m) in enumerate((("agg", "aggregated"), ("disagg", "disaggregated")))])
    write(lake, "comparisons", [comparison_row(cid, "disagg-vs-agg", "agg", "disagg", "q1,q3,q4,h1,h3")])
    steps: list[dict[str, Any]] = []
    requests: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    for e, m, slow in (("agg", "aggregated", 1.0), ("disagg", "disaggregated", 1.6)):
        base = {"campaign_id": cid, "experiment": e, "mode": m, "repeat": 0, "status": "succeeded",
                "step_index": 0}
        for c, tps in ((1, 150.0), (4, 550.0), (16, 1900.0)):
            steps.append({**base, "workload": "concurrency-sweep", "workload_kind": "concurrency_sweep",
                          "step_id": f"concurrency-sweep-c{c}-r0", "concurrency": c, "isl": 256, "osl": 32,
                          "ttft_p50_ms": 40 * slow + c, "ttft_p99_ms": 60 * slow + 2 * c, "itl_p50_ms": 5.0 + c / 8,
                          "output_tokens_per_s": tps / slow, "total_output_tokens": int(tps * 10),
                          "benchmark_duration_s": 10.0})
        mt = {**base, "workload": "multi-turn", "workload_kind": "multi_turn", "step_id": "multi-turn-c4-r0",
              "concurrency": 4, "turns": 3, "ttft_p50_ms": 45.0, "output_tokens_per_s": 100.0}
        steps.append(mt)
        for conv in range(2):
            for turn in range(3):
                requests.append({"campaign_id": cid, "experiment": e, "step_id": mt["step_id"], "repeat": 0,
                                 "request_index": conv * 3 + turn, "conversation_id": f"s{conv}",
                                 "turn_index": turn, "ttft_ms": (40 + 5 * turn) * slow,
                                 "start_ns": turn * 10**9, "end_ns": (turn + 1) * 10**9})
        for dist in ("uniform", "zipf"):
            sd = {**base, "workload": "sequence-distribution", "workload_kind": "sequence_distribution",
                  "step_id": f"sequence-distribution-{dist}-r0", "distribution": dist, "concurrency": 8,
                  "output_tokens_per_s": 300.0, "dataset_sha256": f"{dist}-sha".ljust(64, "0")}
            steps.append(sd)
            for i, isl in enumerate((100, 300, 900)):
                requests.append({"campaign_id": cid, "experiment": e, "step_id": sd["step_id"], "repeat": 0,
                                 "request_index": i, "isl": isl, "requested_isl": isl, "osl": 8,
                                 "requested_osl": 8, "ttft_ms": (30 + isl / 20) * slow,
                                 "output_tokens_per_s_user": 150.0})
        for ratio, cached in ((0.0, 0.0), (1.0, 850.0)):
            pc = {**base, "workload": "prefix-cache", "workload_kind": "prefix_cache",
                  "step_id": f"prefix-cache-p{int(ratio * 100)}-r0", "prefix_ratio": ratio,
                  "prefix_ratio_actual": ratio, "concurrency": 4, "ttft_p50_ms": (50 - 10 * ratio) * slow,
                  "dataset_sha256": f"p{ratio}".ljust(64, "1")}
            steps.append(pc)
            metric = {"campaign_id": cid, "experiment": e, "step_id": pc["step_id"], "repeat": 0, "source": "x"}
            metrics.append({**metric, "metric": "dynamo_frontend_input_sequence_tokens", "stat": "sum",
                            "value": 1000.0})
            if m == "aggregated":
                metrics.append({**metric, "metric": "dynamo_frontend_cached_tokens", "stat": "sum", "value": cached})
            # the meters of docs/METRICS.md, in both modes: the router's selection (the mocker's), vLLM's counters
            metrics.append({**metric, "metric": "dynamo_component_router_kv_selected_cached_prefix_tokens",
                            "stat": "total", "value": cached * 0.9,
                            "labels_json": '{"phase": "aggregated"}' if m == "aggregated" else '{"phase": "prefill"}'})
            worker = {**metric, "source": "worker-0" if m == "aggregated" else "prefill-0", "stat": "total"}
            metrics.append({**worker, "metric": "vllm:prefix_cache_hits", "value": cached * 0.9})
            metrics.append({**worker, "metric": "vllm:prefix_cache_queries", "value": 1000.0})
    for i, s in enumerate(steps):
        s["step_index"] = i
    write(lake, "steps", steps)
    write(lake, "requests", requests)
    write(lake, "server_metrics", metrics)
    events: list[tuple[str, str, float, str | None, dict[str, Any] | None]] = [("_campaign", "planned", 0, None, None)]
    for e, off in (("agg", 0.0), ("disagg", 150.0)):
        events += [(e, "scale_requested", off + 1, "gpu-a100", {"nodes": 1}), (e, "nodes_ready", off + 2, "gpu-a100", None),
                   (e, "deploy_applied", off + 3, None, {"mode": "x"}), (e, "ready", off + 6, None, None),
                   (e, "smoke_ok", off + 7, None, None)]
        t = off + 8
        for sid in ("warmup", "concurrency-sweep-c1-r0", "concurrency-sweep-c4-r0"):
            events += [(e, "load_start", t, None, {"step_id": sid}), (e, "load_end", t + 20, None, {"step_id": sid})]
            t += 21
        events += [(e, "teardown_start", t, None, None),
                   (e, "pool_handed_over" if e == "agg" else "pool_restored", t + 1, "gpu-a100", None),
                   (e, "teardown_done", t + 2, None, None)]
    events.append(("_campaign", "succeeded", 300, None, None))
    write(lake, "timeline", [{"campaign_id": cid, "experiment": e, "event": ev, "at": at(s), "pool": pool,
                              "detail_json": json.dumps(d) if d else None} for e, ev, s, pool, d in events])
    write(lake, "costs", [{"campaign_id": cid, "experiment": e, "pool": "gpu-a100", "gpu_kind": "A100-40GB",
                           "instance_type": "p4d.24xlarge", "nodes": 1, "node_hours": 0.04, "gpu_hours": 0.33,
                           "price_per_node_hour_usd": 21.96, "price_source": "AWS list", "cost_usd": cost,
                           "successful_output_tokens": 30000, "usd_per_1m_output_tokens": cost / 0.03,
                           "simulated": simulated,
                           "fees_json": json.dumps({"gpus_per_node": 8, "scope_text": "GPU nodes only"})}
                          for e, cost in (("agg", 0.91), ("disagg", 0.95))])
    return lake


@pytest.fixture
def lake(tmp_path: Path) -> LocalLake:
    return build_lake(tmp_path / "lake")


@pytest.fixture(scope="module")
def html(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The report of the standard lake, rendered once for the tests that only read it."""
    return render_report(build_lake(tmp_path_factory.mktemp("report") / "lake").root, C)


def sections(html: str) -> dict[str, dict[str, str]]:
    out = {}
    for m in re.finditer(r"<section\b([^>]*)>", html):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1)))
        out[attrs["id"]] = attrs
    return out


def section_html(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}"')
    return html[start:html.index("</section>", start)]


# ------------------------------------------------------------------------------------------------ HTML


def test_every_table_and_figure_section_has_rows_or_marks(html: str) -> None:
    secs = sections(html)
    for sid in TABLES:
        assert int(secs[sid]["data-rows"]) > 0, sid
    for sid in FIGURES:
        assert int(secs[sid]["data-points"]) > 0, sid
        body = section_html(html, sid)
        assert '<svg class="figure"' in body and re.search(r"<(circle|rect|path) class=\"mark", body), sid
    assert "tbl-v_feature_ladder" not in secs  # not a ladder campaign: no empty ladder table
    assert int(secs["provenance"]["data-rows"]) == 1 and int(secs["datasets"]["data-rows"]) == 4  # one per step: same bytes in both


def test_figures_show_both_modes_with_one_colour_each(html: str) -> None:
    for sid in ("fig-pareto", "fig-concurrency", "fig-multi-turn", "fig-prefix"):
        body = section_html(html, sid)
        assert "agg (aggregated)" in body and "disagg (disaggregated)" in body, sid
        assert "#1f77b4" in body and "#d62728" in body, sid
    pareto = section_html(html, "fig-pareto")
    assert pareto.count("<svg") == 2  # TTFT p50 and p99
    assert "frontier" in pareto and 'class="series"' in pareto  # frontier connected
    assert 'class="ref-line"' in section_html(html, "fig-prefix")  # the y = x duplication line
    timeline = section_html(html, "fig-timeline")
    for phase in ("capacity", "deploy", "smoke", "load", "teardown"):
        assert f"seg-{phase}" in timeline, phase
    assert "load concurrency-sweep-c4-r0" in timeline and "pool_handed_over" in timeline
    assert "$0.91" in timeline and "$0.95" in timeline  # cost per experiment from v_cost_efficiency


def test_simulated_banner_and_tag_in_every_heading_and_figure(html: str) -> None:
    assert 'id="simulated-banner"' in html and SIM_TEXT in html
    assert html.index('id="simulated-banner"') < html.index("<section")
    headings = re.findall(r"<h2>(.*?)</h2>", html)
    assert len(headings) >= len(FIGURES) + len(TABLES) + 2
    assert all("SIMULATED" in h for h in headings), [h for h in headings if "SIMULATED" not in h]
    titles = re.findall(r'<text class="fig-title"[^>]*>(.*?)</text>', html)
    assert len(titles) == html.count('<svg class="figure"') >= 7
    assert all("SIMULATED" in t for t in titles)


def test_measured_campaign_has_no_simulated_label(tmp_path: Path) -> None:
    lake = build_lake(tmp_path / "lake", "aws-1", simulated=False)
    html = render_report(lake.root, None)
    assert "SIMULATED" not in html and 'id="simulated-banner"' not in html


def test_self_contained_no_external_resources(html: str) -> None:
    assert "<script" not in html and "<link" not in html and "<img" not in html and "@import" not in html
    assert "http://" not in html and "https://" not in html
    assert "default-src 'none'" in html  # and the browser is told to load nothing


def test_provenance_block(tmp_path: Path) -> None:
    lake = build_lake(tmp_path / "lake")
    versions = {"aiperf": "0.13.0", "experiments": {"agg": {"images": {
        "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1": "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "e" * 64}}}}
    campaign(lake, C, versions=versions)
    html = render_report(lake.root, C)
    prov = html[html.index('<section id="provenance"'):]
    for text in ("ab" * 32, "smoke", "Qwen/Qwen3-30B-A3B", "AWS on-demand list price, us-east-1", "2026-11-01",
                 "2026-11-30 06:00:00", "2026-11-30 06:05:00", "succeeded", "&quot;aiperf&quot;: &quot;0.13.0&quot;",
                 "uniform-sha".ljust(64, "0"), "sha256:" + "e" * 64):
        assert text in prov, text
    assert int(sections(html)["images"]["data-rows"]) == 1


# ------------------------------------------------------------------------------------------ predictions


def _ensure_predictions_table(monkeypatch: pytest.MonkeyPatch) -> None:
    if "predictions" not in schema.TABLES:  # another change adds it; until then, stand one in
        monkeypatch.setitem(schema.TABLES, "predictions", schema._table(
            "predictions", "test stand-in", ("campaign_id", "experiment"),
            "\n".join(f"{c} {t}" for c, t in (
                ("campaign_id", "string"), ("experiment", "string"), ("step_id", "string"),
                ("concurrency", "bigint"), ("predicted_ttft_ms", "double"), ("predicted_itl_ms", "double"),
                ("predicted_output_tokens_per_s", "double"), ("source", "string")))))


def test_predicted_vs_measured_with_error_percent(lake: LocalLake, monkeypatch: pytest.MonkeyPatch) -> None:
    _ensure_predictions_table(monkeypatch)
    lake.write("predictions", [{"campaign_id": C, "experiment": "agg", "step_id": "concurrency-sweep-c4-r0",
                                "concurrency": 4, "predicted_ttft_ms": 55.0, "predicted_itl_ms": 5.5,
                                "predicted_output_tokens_per_s": 440.0, "source": "aiconfigurator"}],
               part_name="predictions")
    html = render_report(lake.root, C)
    assert sections(html)["predictions"]["data-rows"] == "1"
    body = section_html(html, "predictions")
    # measured TTFT p50 44 ms -> +25 %; output 550 tok/s -> -20 %
    assert "44.00" in body and "25.00" in body and "-20.00" in body
    md = render_report(lake.root, C, "md")
    assert "| agg | concurrency-sweep-c4-r0 | 4 | aiconfigurator | 55.00 | 44.00 | 25.00 |" in md


def test_no_predictions_note_with_and_without_the_table(lake: LocalLake, monkeypatch: pytest.MonkeyPatch) -> None:
    _ensure_predictions_table(monkeypatch)
    html = render_report(lake.root, C)
    assert sections(html)["predictions"]["data-rows"] == "0" and "No predictions" in html
    monkeypatch.delitem(schema.TABLES, "predictions")
    html = render_report(lake.root, C)
    assert sections(html)["predictions"]["data-rows"] == "0" and "No predictions" in html


# ------------------------------------------------------------------------------------------- Markdown


def test_markdown_has_the_tables_and_lists_the_figures(lake: LocalLake) -> None:
    md = render_report(lake.root, C, "md")
    assert "<svg" not in md and "<section" not in md
    assert md.startswith(f"# benchctl report: campaign {C} (SIMULATED)")
    assert f"**SIMULATED: {SIM_TEXT}.**" in md
    for view in ("v_concurrency_sweep", "v_prefix_cache", "v_cost_efficiency", "v_multi_turn",
                 "v_sequence_distribution"):
        heading = next(line for line in md.splitlines() if line.startswith("## ") and f"({view})" in line)
        assert heading.endswith("(SIMULATED)")
        block = md.split(heading, 1)[1].split("\n## ", 1)[0]
        assert block.count("\n| ") >= 2, view  # header + at least one row
    assert "| concurrency-sweep | 4 | 44.00 | 68.00 |" in md  # agg and disagg side by side
    assert "see the HTML report" in md and "- Pareto: TTFT vs output tokens/s per GPU" in md


HOSTILE = "<script>alert(1)</script> | `x` [click](javascript:alert(1)) *b* <img src=x onerror=alert(2)>"


def _hostile_campaign(lake: LocalLake) -> None:
    """The standard lake's campaign row again (same part: replaced), its spec name, error, cause, pricing
    source and versions written by a hostile spec author or copied from a log."""
    campaign(lake, versions={"aiperf": "0.13.0", "note": "```\n<script>alert(3)</script>\n```"})
    row = lake.read_table("campaigns", C)[0]
    row.update(spec_name=HOSTILE, failed_state="Deploy|Ready", error="ServingFailed `x`",
               cause="line 1\n## not a heading\n| a | b |", model="m<b>bold</b>",
               pricing_json=json.dumps({"source": HOSTILE, "as_of": "2026-11-01"}))
    lake.write("campaigns", [row], part_name="campaign")


def _rendered_markdown(md: str) -> str:
    """The Markdown as a CommonMark renderer with GFM tables shows it (raw HTML allowed, as on GitHub
    before its sanitiser): markdown-it-py, the reference CommonMark implementation's Python port."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)


def test_markdown_report_shows_spec_and_log_text_as_text(lake: LocalLake) -> None:
    plain = _rendered_markdown(render_report(lake.root, C, "md"))
    _hostile_campaign(lake)
    md = render_report(lake.root, C, "md")
    shown = _rendered_markdown(md)
    # no element the text brought: no script, image, bold, link or extra code span, heading or table
    for tag in ("<script", "<img", "<b>", "<a ", "<h2>not"):
        assert tag not in shown, tag
    extra = {"<li>": 3, "<strong>": 3}  # the failed_state, error and cause items the plain campaign has not
    for tag in ("<code>", "<table>", "<tr>", "<td>", "<h2>", "<li>", "<em>", "<strong>"):
        assert shown.count(tag) == plain.count(tag) + extra.get(tag, 0), tag
    # and the text itself, character for character, where the provenance list shows it
    assert f"<li><strong>spec_name</strong>: {html_escape(HOSTILE, quote=False)}</li>" in shown
    assert "<li><strong>cause</strong>: line 1 ## not a heading | a | b |</li>" in shown
    assert "<li><strong>model</strong>: m&lt;b&gt;bold&lt;/b&gt;</li>" in shown
    # the versions JSON stays one code block, whatever backticks it holds
    assert shown.count("<pre><code") == plain.count("<pre><code") == 1
    assert "&lt;script&gt;alert(3)" in shown.split("<pre><code", 1)[1].split("</code></pre>", 1)[0]


def test_html_report_shows_spec_and_log_text_as_text(lake: LocalLake) -> None:
    _hostile_campaign(lake)
    page = render_report(lake.root, C)
    assert "<script" not in page and "<img" not in page and "<b>bold" not in page
    assert html_escape(HOSTILE, quote=False) in page


FAILED_STATE = "<script>alert(5)</script>Deploy|Ready"
FAILED_ERROR = "<img src=x onerror=alert(4)> `x` *b*"
FAILED_CAUSE = "line 1\n```\n<img src=x onerror=alert(6)>\n```"


def _hostile_failed_campaign(lake: LocalLake) -> None:
    """The standard lake's campaign row again, FAILED, its failed state, error and cause holding HTML and
    Markdown (the "How it ended" heading and cause of a failed campaign, which a succeeded one never shows)."""
    row = lake.read_table("campaigns", C)[0]
    row.update(status="failed", failed_state=FAILED_STATE, error=FAILED_ERROR, cause=FAILED_CAUSE)
    lake.write("campaigns", [row], part_name="campaign")


def test_a_failed_campaigns_ending_shows_its_state_error_and_cause_as_text_in_markdown(lake: LocalLake) -> None:
    _hostile_failed_campaign(lake)
    md = render_report(lake.root, C, "md")
    shown = _rendered_markdown(md)
    heading = next(line for line in shown.splitlines() if line.startswith("<h2>How it ended"))
    # the heading holds the words, not the elements: no image, script, code span or emphasis of its own
    assert heading == ("<h2>How it ended: FAILED in state "
                       f"{html_escape(FAILED_STATE, quote=False)}: {html_escape(FAILED_ERROR, quote=False)}"
                       " (SIMULATED)</h2>"), heading
    assert "<img" not in shown and "<script" not in shown
    # the cause stays one code block whatever fences it holds: its image line is inside it, as text
    block = shown.split("<h2>How it ended", 1)[1].split("<pre><code", 1)[1].split("</code></pre>", 1)[0]
    assert "&lt;img src=x onerror=alert(6)&gt;" in block and "line 1" in block


def test_a_failed_campaigns_ending_shows_its_state_and_error_as_text_in_html(lake: LocalLake) -> None:
    _hostile_failed_campaign(lake)
    page = render_report(lake.root, C)
    ending_html = page[page.index('<section id="ending"'):].split("</section>", 1)[0]
    assert "<img" not in page and "<script>alert(5)" not in page
    assert (f"How it ended: FAILED in state {html_escape(FAILED_STATE)}: {html_escape(FAILED_ERROR)}"
            in ending_html), ending_html[:400]


# ------------------------------------------------------------------------------------------ bad input


def test_unknown_campaign_names_the_valid_ones(lake: LocalLake) -> None:
    with pytest.raises(ValueError, match=r"unknown campaign 'nope'.*valid: camp-r"):
        render_report(lake.root, "nope")


def test_empty_or_missing_lake_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no campaign to report.*does not exist"):
        render_report(tmp_path / "missing", None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no campaign to report.*has no campaigns"):
        render_report(tmp_path / "empty", None)


def test_unknown_format(lake: LocalLake) -> None:
    with pytest.raises(ValueError, match="valid: html, md"):
        render_report(lake.root, C, "pdf")


def test_default_campaign_is_the_latest_started(lake: LocalLake) -> None:
    campaign(lake, "older", started=-3600)
    assert "Campaign camp-r" in render_report(lake.root, None)
    campaign(lake, "newer", started=3600)
    html = render_report(lake.root, None)
    assert "Campaign newer" in html and sections(html)["tbl-v_concurrency_sweep"]["data-rows"] == "0"
    assert sections(html)["fig-timeline"]["data-points"] == "0"  # no events: a note, not a broken figure
    assert "No timeline events" in section_html(html, "fig-timeline")


def test_empty_campaign_renders_notes_not_errors(tmp_path: Path) -> None:
    lake = LocalLake(tmp_path / "lake")
    campaign(lake, "bare")
    html = render_report(lake.root, "bare")
    secs = sections(html)
    assert all(secs[s]["data-points"] == "0" for s in FIGURES)
    assert all(secs[s]["data-rows"] == "0" for s in TABLES)
    assert html.count('class="empty"') >= len(FIGURES) + len(TABLES)


# ------------------------------------------------------------------------------- files and the CLI


def test_write_report_is_atomic_and_cli_exit_codes(lake: LocalLake, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "report.html"
    assert write_report(lake.root, None, out, "html") == out
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]  # no temporary file left
    assert main(["report", "--lake", str(lake.root), "--out", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text().startswith("# benchctl report")
    assert main(["report", "--lake", str(lake.root), "--campaign", C, "--out", str(tmp_path / "r2.html"),
                 "--format", "html"]) == 0
    assert main(["report", "--lake", str(lake.root), "--campaign", "nope", "--out", str(tmp_path / "x.html")]) == 2
    assert "valid: camp-r" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
    assert main(["report", "--lake", str(tmp_path / "nothing"), "--out", str(tmp_path / "y.html")]) == 2


# ------------------------------------------------------------------------------------------- helpers


def test_pareto_frontier_rule() -> None:
    assert pareto_frontier([(10, 50), (50, 60), (37.5, 90), (100, 120), (100, 130)]) == [
        True, True, False, True, False]


def test_timeline_pairs_load_windows_by_step_and_marks_unfinished() -> None:
    ev = [{"experiment": "a", "event": "load_start", "at": at(0), "pool": None, "detail_json": '{"step_id": "s1"}'},
          {"experiment": "a", "event": "load_start", "at": at(1), "pool": None, "detail_json": '{"step_id": "s2"}'},
          {"experiment": "a", "event": "load_end", "at": at(5), "pool": None, "detail_json": '{"step_id": "s1"}'},
          {"experiment": "a", "event": "pool_restored", "at": at(9), "pool": "p", "detail_json": None}]
    segs, points, span = timeline_segments(ev)
    assert [(s.label, s.start, s.end, s.closed) for s in segs] == [
        ("load s1", 0.0, 5.0, True), ("load s2 (no load_end event)", 1.0, 9.0, False)]
    assert points == [("a", 9.0, "pool_restored p")] and span == 9.0


def test_answers_and_network_provenance_sections(lake: LocalLake) -> None:
    """Issue 15: the plan's 4 questions and 4 hypotheses, each answered from the views or "not measured";
    the network each experiment was observed to use, in the provenance."""
    from benchctl.lake import timeline

    lake.write("timeline", [timeline.row(C, "disagg", timeline.NETWORK_OBSERVED, "2026-12-01T10:00:00+00:00",
                                         engine="local", cni="none: every process on loopback (127.0.0.1)",
                                         zones=["local"], mtu=65536, transfer_backend="none: Dynamo mocker's model",
                                         placement=[{"name": "prefill-0", "role": "prefill", "pid": 7}])],
               part_name="network")
    html = render_report(lake.root, C)
    answers = re.findall(r'<section class="answer" id="answer-(\w+)" data-measured="(\w+)"', html)
    assert [k for k, _ in answers] == ["q1", "q2", "q3", "q4", "h1", "h2", "h3", "h4"]
    measured = dict(answers)
    assert measured["q3"] == "true"  # the lake has a prefix-cache workload in both modes
    assert measured["q2"] == "false" and "not measured: the campaign has no comparison that changes only kv_offload" \
        in html
    # one repeat per side: every measured answer is inconclusive, and says why
    statuses = dict(re.findall(r'id="answer-(\w+)" data-measured="\w+" data-status="(\w[\w ]*)"', html))
    assert {statuses[k] for k, m in measured.items() if m == "true"} == {"inconclusive"}
    assert "one repeat per side: no interval" in html
    assert "Verdict (SIMULATED) (inconclusive)" in html
    net = html[html.index('<section id="network"'):]
    assert "mtu" in net and "65536" in net and "prefill-0" in net and "none: Dynamo mocker&#x27;s model" in net
    md = render_report(lake.root, C, "md")
    assert "## Answers (SIMULATED)" in md and "### Q4. Does the NIXL transfer overhead cancel" in md
    assert "**Verdict (SIMULATED) (inconclusive):** disagg vs agg" in md
    assert "Network (observed: CNI, zones, MTU, placement, KV-transfer backend) (SIMULATED):" in md


def test_the_report_names_the_twin_that_timed_each_role(lake: LocalLake) -> None:
    assert "Timed by" not in render_report(lake.root, C, "md")  # a lake without twins says nothing of them
    label = "SIMULATED on the a100_sxm TP4 twin (aiconfigurator 0.12.0, vllm 0.14.0)"
    lake.write("twins", [
        {"campaign_id": C, "experiment": "agg", "role": "worker", "choice": "auto", "profile": "aic-x", "label": label},
        {"campaign_id": C, "experiment": "disagg", "role": "decode", "choice": "off", "profile": None,
         "label": "SIMULATED on the mocker's built-in timing (no twin)", "note": "mocker.twin: off"}],
        part_name="twins")
    shown = _rendered_markdown(render_report(lake.root, C, "md"))  # as a reader sees the Markdown
    assert f"Timed by: agg worker: {label}; disagg decode: SIMULATED on the mocker" in shown
    assert "(no twin) (mocker.twin: off)." in shown
    html = render_report(lake.root, C)
    assert f"<dt>timed by</dt><dd>agg worker: {html_escape(label)}" in html


def test_the_receipt_of_a_campaign_that_ended_well_is_one_line_with_its_rows_folded_and_any_other_shows_them_open():
    from benchctl.report.ending import Ending
    from benchctl.report.html import receipt_section

    settled = [{"experiment": "agg", "kind": "process", "name": "frontend", "state": "gone", "billing": ""},
               {"experiment": "agg", "kind": "pool (simulated)", "name": "gpu", "state": "restored", "billing": "ended"}]
    billing = [settled[0], {**settled[1], "state": "still there", "billing": "still billing (simulated)"}]
    well = receipt_section(Ending("succeeded", "SUCCEEDED", "", False, settled, True))
    assert '<details id="receipt-rows"><summary>the 2 rows read back</summary>' in well
    assert well.index('<p class="desc">2 resource(s) read back after teardown: every one gone') < well.index("<details")
    for e in (Ending("failed", "FAILED in state CheckReady: InjectedFailure", "x", True, settled, True),
              Ending("succeeded", "SUCCEEDED", "", False, billing, False)):
        html = receipt_section(e)
        assert "<details" not in html and "<table>" in html and 'data-rows="2"' in html, html
    assert '<td class="billing">still billing' in receipt_section(Ending("succeeded", "SUCCEEDED", "", False, billing, False))
