"""The Grafana dashboards in dashboards/: valid JSON models that only query what exists.

- structure: each file validates against tests/schemas/grafana-dashboard.schema.json (the subset of
  Grafana's dashboard model, schemaVersion 39, that the dashboards use); unique uids, panel ids and
  refIds; panels inside the 24-column grid and not overlapping; every panel has a target; every
  datasource is a declared datasource variable of the right plugin; every ``$variable`` is declared.
- Prometheus: every metric name in a PromQL expression (or a ``label_values()`` variable query) is in
  ALLOWED: Dynamo's frontend/mocker metric families from the AIPerf 0.13.0 samples, the vLLM/KVBM/NIXL
  names of docs/FACTS.md and the standard dcgm-exporter counters.
- Athena: every table/view and column in the panels' SQL exists: tables from benchctl.lake.schema.TABLES,
  views from sql/views/*.sql with their output columns from running them in DuckDB on an empty lake;
  columns resolved by sqlglot's qualifier (Trino dialect), then the query also runs on that lake.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify

from benchctl.analysis.views import view_sql_files
from benchctl.lake import schema
from benchctl.local.query import QueryEngine
from tests.fakes.ports import SAMPLES

ROOT = Path(__file__).resolve().parents[2]
DASH_DIR = ROOT / "dashboards"
SCHEMA = ROOT / "tests" / "schemas" / "grafana-dashboard.schema.json"
DASHBOARDS = sorted(DASH_DIR.glob("*.json"))
EXPECTED = {"benchctl-results.json", "dynamo-platform.json", "kvbm.json", "gpu-dcgm.json"}

PROMETHEUS = "prometheus"
ATHENA = "grafana-athena-datasource"

# Standard dcgm-exporter default counters (default-counters.csv).
DCGM_METRICS = frozenset({
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
})
# FACTS.md, "Dynamo on Kubernetes", Metrics: "KVBM `kvbm_offload_blocks_*`, `kvbm_onboard_blocks_*`,
# `kvbm_host_cache_hit_rate`, `kvbm_disk_cache_hit_rate` (port 6880 with `DYN_KVBM_METRICS=true`)".
# The concrete members of those two families (device/host/disk paths) as ai-dynamo 1.6.1 names them
# (dynamo.prometheus_names.kvbm: OFFLOAD_BLOCKS_D2H/H2D/D2D, ONBOARD_BLOCKS_H2D/D2D, prefix "kvbm_").
KVBM_BLOCK_METRICS = frozenset({
    "kvbm_offload_blocks_d2h", "kvbm_offload_blocks_h2d", "kvbm_offload_blocks_d2d",
    "kvbm_onboard_blocks_h2d", "kvbm_onboard_blocks_d2d",
})

# What each dashboard is for: metric families (exact name, or name + "_" suffix) it must chart.
REQUIRED_METRICS = {
    "dynamo-platform.json": [
        "dynamo_frontend_requests_total", "dynamo_frontend_time_to_first_token_seconds_bucket",
        "dynamo_frontend_inter_token_latency_seconds_bucket", "dynamo_frontend_inflight_requests",
        "dynamo_frontend_queued_requests", "dynamo_component_router_kv_hit_rate", "dynamo_frontend_cached_tokens",
        "dynamo_component_uptime_seconds", "dynamo_component_requests_total", "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total", "vllm:nixl_xfer_time_seconds", "vllm:nixl_bytes_transferred",
    ],
    "kvbm.json": ["kvbm_offload_blocks", "kvbm_onboard_blocks", "kvbm_host_cache_hit_rate",
                  "kvbm_disk_cache_hit_rate"],
    "gpu-dcgm.json": sorted(DCGM_METRICS),
}
REQUIRED_TABLES = {"benchctl-results.json": {"v_pareto", "v_concurrency_sweep", "v_prefix_cache",
                                             "v_cost_efficiency", "campaigns"}}

BUILTIN_VARIABLES = frozenset({"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                               "__range_ms", "__dashboard", "__from", "__to", "__name", "__org", "__user"})


# ------------------------------------------------------------------------------------------ loading

@cache
def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def targets(dash: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(p, t) for p in dash["panels"] for t in p.get("targets", [])]


def variables(dash: dict[str, Any]) -> list[dict[str, Any]]:
    return dash["templating"]["list"]


def var_query_text(var: dict[str, Any]) -> str:
    q = var.get("query")
    if isinstance(q, dict):
        return q.get("query") or q.get("rawSQL") or ""
    return q or ""


def by_plugin(dash: dict[str, Any], plugin: str) -> tuple[list[str], list[str]]:
    """(panel target queries, variable queries) of one datasource plugin: PromQL or SQL texts."""
    field = "expr" if plugin == PROMETHEUS else "rawSQL"
    tq = [t[field] for _, t in targets(dash) if t["datasource"]["type"] == plugin]
    vq = [var_query_text(v) for v in variables(dash)
          if v["type"] == "query" and v["datasource"]["type"] == plugin]
    return tq, vq


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def using(plugin: str) -> list[Path]:
    return [p for p in DASHBOARDS if any(q["datasource"]["type"] == plugin for q in load(p)["panels"])]


PROM_DASHBOARDS = using(PROMETHEUS)
ATHENA_DASHBOARDS = using(ATHENA)


def test_the_dashboards_are_there() -> None:
    assert {p.name for p in DASHBOARDS} >= EXPECTED
    assert {p.name for p in ATHENA_DASHBOARDS} == {"benchctl-results.json"}
    assert {p.name for p in PROM_DASHBOARDS} == EXPECTED - {"benchctl-results.json"}


# ------------------------------------------------------------------------------------------ structure

@pytest.mark.parametrize("path", DASHBOARDS, ids=ids(DASHBOARDS))
def test_validates_against_the_dashboard_schema(path: Path) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    errors = sorted(validator.iter_errors(load(path)), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:20])


def test_schema_rejects_what_it_should() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    good = load(DASH_DIR / "kvbm.json")
    bad = json.loads(json.dumps(good))
    bad["panels"][0]["gridPos"]["w"] = 12.5
    bad["panels"][1]["type"] = "graphh"
    del bad["panels"][2]["targets"][0]["refId"]
    del bad["templating"]
    messages = [e.message for e in validator.iter_errors(bad)]
    assert len(messages) == 4, messages


def test_dashboard_uids_and_titles_are_unique() -> None:
    dashes = [load(p) for p in DASHBOARDS]
    uids = [d["uid"] for d in dashes]
    titles = [d["title"] for d in dashes]
    assert len(set(uids)) == len(uids), uids
    assert len(set(titles)) == len(titles), titles


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids(DASHBOARDS))
def test_panels_have_unique_ids_targets_and_refids(path: Path) -> None:
    panels = load(path)["panels"]
    pids = [p["id"] for p in panels]
    assert len(set(pids)) == len(pids), pids
    for p in panels:
        assert p["targets"], f"panel {p['title']!r} has no target"
        refs = [t["refId"] for t in p["targets"]]
        assert len(set(refs)) == len(refs), (p["title"], refs)


def overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]


def test_overlap_helper() -> None:
    a = {"x": 0, "y": 0, "w": 12, "h": 8}
    assert overlap(a, {"x": 11, "y": 7, "w": 2, "h": 2})
    assert not overlap(a, {"x": 12, "y": 0, "w": 12, "h": 8})
    assert not overlap(a, {"x": 0, "y": 8, "w": 24, "h": 1})


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids(DASHBOARDS))
def test_grid_positions_fit_and_do_not_overlap(path: Path) -> None:
    panels = load(path)["panels"]
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, (p["title"], g)
    for p, q in itertools.combinations(panels, 2):
        assert not overlap(p["gridPos"], q["gridPos"]), (p["title"], p["gridPos"], q["title"], q["gridPos"])


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids(DASHBOARDS))
def test_datasources_are_declared_variables(path: Path) -> None:
    dash = load(path)
    declared = {v["name"]: v["query"] for v in variables(dash) if v["type"] == "datasource"}
    assert declared, "no datasource variable"

    def check(where: str, ref: dict[str, Any]) -> None:
        m = re.fullmatch(r"\$\{(\w+)\}", ref["uid"])
        assert m, f"{where}: datasource uid {ref['uid']!r} is not a ${{variable}}"
        assert m.group(1) in declared, f"{where}: datasource variable {m.group(1)} is not declared"
        assert declared[m.group(1)] == ref["type"], f"{where}: {m.group(1)} is a {declared[m.group(1)]} variable"

    for p in dash["panels"]:
        check(f"panel {p['title']!r}", p["datasource"])
        for t in p["targets"]:
            check(f"panel {p['title']!r} target {t['refId']}", t.get("datasource", p["datasource"]))
            assert t.get("datasource", p["datasource"]) == p["datasource"], "mixed datasources in one panel"
    for v in variables(dash):
        if v["type"] == "query":
            check(f"variable {v['name']}", v["datasource"])
    plugins = {p["datasource"]["type"] for p in dash["panels"]}
    assert plugins <= {PROMETHEUS, ATHENA}, plugins


VAR_REF = re.compile(r"\$\{(\w+)(?::[\w]+)?\}|\[\[(\w+)\]\]|\$(\w+)")


@pytest.mark.parametrize("path", DASHBOARDS, ids=ids(DASHBOARDS))
def test_variables_used_are_declared(path: Path) -> None:
    dash = load(path)
    declared = {v["name"] for v in variables(dash)} | BUILTIN_VARIABLES
    texts = [t.get("expr", "") + t.get("rawSQL", "") for _, t in targets(dash)]
    texts += [var_query_text(v) for v in variables(dash)]
    used = {next(g for g in m.groups() if g) for text in texts for m in VAR_REF.finditer(text)}
    used -= {"__timeFilter"}  # Athena macro, checked with the SQL
    assert used <= declared, sorted(used - declared)


def test_athena_dashboards_select_a_campaign() -> None:
    assert ATHENA_DASHBOARDS
    for path in ATHENA_DASHBOARDS:
        dash = load(path)
        names = {v["name"]: v for v in variables(dash)}
        assert "campaign_id" in names, path.name
        assert names["campaign_id"]["datasource"]["type"] == ATHENA


# ------------------------------------------------------------------------------------------ PromQL

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and",
                       "or", "unless", "inf", "nan", "start", "end", "atan2"})


def promql_metrics(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not function calls (``name(``),
    keywords, label names (inside ``{}``, ``by (...)``/``on (...)`` lists), strings or durations."""
    s = _STRING.sub('""', expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)                 # label matchers
    s = re.sub(r"\[[^\[\]]*\]", " ", s)               # range and subquery selectors
    s = _GROUPING.sub(" ", s)                         # grouping / matching label lists
    s = re.sub(r"\$\{?\w+\}?", " ", s)                # Grafana variables
    s = re.sub(r"\boffset\s+-?\w+", " ", s)
    out = set()
    for m in _IDENT.finditer(s):
        name, call = m.group(1), m.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        out.add(name)
    return out


def variable_query_metrics(query: str) -> set[str]:
    """Metric names in a Prometheus variable query; only label_values() is used here."""
    m = re.fullmatch(r"\s*label_values\(\s*(?:(.+?)\s*,\s*)?(\w+)\s*\)\s*", query)
    assert m, f"unsupported Prometheus variable query {query!r}"
    return promql_metrics(m.group(1)) if m.group(1) else set()


def test_promql_metric_extraction() -> None:
    assert promql_metrics(
        'histogram_quantile(0.9, sum by (le, model) (rate(foo_bucket{a="b", c=~"$x"}[$__rate_interval])))'
    ) == {"foo_bucket"}
    assert promql_metrics(
        "sum(rate(vllm:x_total[5m] offset 1h)) by (pod) / on (pod) group_left (node) bar_info"
    ) == {"vllm:x_total", "bar_info"}
    assert promql_metrics("(sum(x) or vector(0)) / clamp_min(sum(y), 1e-9) > bool 0.5") == {"x", "y"}
    assert promql_metrics('max by (pod) (resets(up{job="a:b"}[$__range])) and on() absent(z)') == {"up", "z"}
    assert promql_metrics('label_replace(m, "dst", "$1", "src", "(.*)")') == {"m"}
    assert variable_query_metrics('label_values(foo{namespace=~"$namespace"}, pod)') == {"foo"}
    assert variable_query_metrics("label_values(namespace)") == set()


def facts_metric_names() -> tuple[set[str], set[str]]:
    """(exact names, wildcard patterns) of vLLM/KVBM/NIXL metrics in FACTS.md's "Dynamo on Kubernetes"
    "Metrics:" item."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "FACTS.md").read_text(encoding="utf-8")
    section = re.search(r"^## Dynamo on Kubernetes.*?(?=^## )", text, re.S | re.M)
    assert section, "FACTS.md has no 'Dynamo on Kubernetes' section"
    item = re.search(r"^- Metrics:.*?(?=^- |\Z)", section.group(0), re.S | re.M)
    assert item, "FACTS.md's Kubernetes section has no Metrics item"
    names = {n for n in re.findall(r"`([^`\s]+)`", item.group(0))
             if n.startswith(("vllm:", "kvbm_")) or "nixl" in n}
    return {n for n in names if "*" not in n}, {n for n in names if "*" in n}


def family(names: set[str]) -> set[str]:
    """Family names -> series names: histograms add _bucket/_sum/_count, counters may add _total."""
    return {n + s for n in names for s in ("", "_bucket", "_sum", "_count", "_total")}


@cache
def allowed_metrics() -> frozenset[str]:
    samples = SAMPLES
    sampled = set()
    for name in ("fe_metrics.txt", "mocker_metrics.txt"):
        sampled |= {ln.strip() for ln in (samples / name).read_text(encoding="utf-8").splitlines() if ln.strip()}
    exact, _ = facts_metric_names()
    return frozenset(family(sampled | exact | KVBM_BLOCK_METRICS) | DCGM_METRICS)


def test_allowed_set_is_built_from_the_sources() -> None:
    exact, wildcards = facts_metric_names()
    assert {"vllm:kv_cache_usage_perc", "vllm:nixl_xfer_time_seconds", "vllm:nixl_bytes_transferred",
            "kvbm_host_cache_hit_rate", "kvbm_disk_cache_hit_rate"} <= exact
    assert wildcards == {"kvbm_offload_blocks_*", "kvbm_onboard_blocks_*"}
    for name in KVBM_BLOCK_METRICS:  # the concrete KVBM names stay inside FACTS' families
        assert any(fnmatch.fnmatchcase(name, w) for w in wildcards), name
    allowed = allowed_metrics()
    assert {"dynamo_frontend_requests_total", "dynamo_frontend_time_to_first_token_seconds_bucket",
            "vllm:num_preemptions_total"} <= allowed
    assert "dynamo_frontend_made_up_seconds" not in allowed


@pytest.mark.parametrize("path", PROM_DASHBOARDS, ids=ids(PROM_DASHBOARDS))
def test_prometheus_metrics_exist(path: Path) -> None:
    dash = load(path)
    exprs, var_queries = by_plugin(dash, PROMETHEUS)
    allowed = allowed_metrics()
    used: set[str] = set()
    for expr in exprs:
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        names = promql_metrics(expr)
        assert names, f"no metric found in {expr!r}"
        assert names <= allowed, f"unknown metric(s) {sorted(names - allowed)} in {expr!r}"
        used |= names
    for q in var_queries:
        names = variable_query_metrics(q)
        assert names <= allowed, f"unknown metric(s) {sorted(names - allowed)} in variable query {q!r}"
    for want in REQUIRED_METRICS.get(path.name, []):
        assert any(n == want or n.startswith(want + "_") for n in used), f"{path.name} does not chart {want}"


# ------------------------------------------------------------------------------------------ Athena SQL

@pytest.fixture(scope="module")
def lake_engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    engine = QueryEngine(tmp_path_factory.mktemp("empty-lake"))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def lake_columns(lake_engine: QueryEngine) -> dict[str, list[str]]:
    """{table or view: its columns}: tables from schema.TABLES, views as DuckDB reports them."""
    cols = {name: [c for c, _ in t.columns] for name, t in schema.TABLES.items()}
    for view in view_sql_files():
        cols[view] = lake_engine.run(f"SELECT * FROM {view}")[0]
    return cols


def athena_sql_for_check(sql: str, declared: set[str]) -> str:
    """Grafana's macros and variables replaced by plain SQL of the same shape."""
    sql = re.sub(r"\$__timeFilter\(\s*(\w+)\s*\)",
                 r"\1 BETWEEN TIMESTAMP '1970-01-01 00:00:00' AND TIMESTAMP '2100-01-01 00:00:00'", sql)
    assert not re.search(r"\$__\w+", sql), f"unsupported Athena macro in {sql!r}"

    def value(m: re.Match[str]) -> str:
        name = next(g for g in m.groups() if g)
        assert name in declared, f"undeclared variable {name} in {sql!r}"
        return f"var-{name}"

    return VAR_REF.sub(value, sql)


def check_sql(sql: str, columns: dict[str, list[str]]) -> set[str]:
    """Raise unless every table and column of ``sql`` exists; returns the tables it reads."""
    stmt = sqlglot.parse_one(sql, read="trino")
    assert isinstance(stmt, exp.Query), sql
    ctes = {c.alias_or_name for c in stmt.find_all(exp.CTE)}
    tables = {t.name for t in stmt.find_all(exp.Table)} - ctes
    for t in stmt.find_all(exp.Table):
        assert not t.db, f"qualified table {t.sql()} (the datasource's database is used)"
    unknown = tables - set(columns)
    assert not unknown, f"unknown table(s) {sorted(unknown)} in {sql!r}"
    mapping = {name: dict.fromkeys(cols, "VARCHAR") for name, cols in columns.items()}
    qualify(stmt, schema=mapping, dialect="trino", validate_qualify_columns=True)
    return tables


def test_sql_check_catches_mistakes(lake_columns: dict[str, list[str]]) -> None:
    assert check_sql("SELECT status FROM campaigns WHERE campaign_id = 'x'", lake_columns) == {"campaigns"}
    for bad in ("SELECT nope FROM campaigns", "SELECT c.ttft_p50_ms FROM campaigns c",
                "SELECT experiment FROM v_pareto p JOIN v_cost_efficiency c ON p.experiment = c.experiment"):
        with pytest.raises(Exception, match=r"could not be resolved|Unknown column|ambiguous"):
            check_sql(bad, lake_columns)
    with pytest.raises(AssertionError, match="unknown table"):
        check_sql("SELECT 1 FROM v_nothing", lake_columns)


@pytest.mark.parametrize("path", ATHENA_DASHBOARDS, ids=ids(ATHENA_DASHBOARDS))
def test_athena_sql_references_existing_tables_and_columns(
    path: Path, lake_columns: dict[str, list[str]], lake_engine: QueryEngine
) -> None:
    dash = load(path)
    panel_sql, var_sql = by_plugin(dash, ATHENA)
    declared = {v["name"] for v in variables(dash)}
    read: set[str] = set()
    for sql in panel_sql + var_sql:
        plain = athena_sql_for_check(sql, declared)
        read |= check_sql(plain, lake_columns)
        lake_engine.run(plain)  # and DuckDB binds it on an empty lake (types, functions)
    missing = REQUIRED_TABLES.get(path.name, set()) - read
    assert not missing, f"{path.name} does not query {sorted(missing)}"
