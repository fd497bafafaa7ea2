"""Every query of the Grafana dashboards of ``dashboards/``, evaluated as Grafana would: PromQL through a real
Prometheus' HTTP API (``benchctl dashboards`` on a cluster's Prometheus; the dashboard tier on a local campaign),
SQL through a query engine over the lake (the report's DuckDB here, Athena's dialect).

Grafana's substitutions, as its Prometheus datasource does them (public/app/plugins/datasource/prometheus:
``interpolateQueryExpr``, ``prometheusSpecialRegexEscape``; the ``$__rate_interval`` rule of its docs):

* a query variable's values from ``label_values(metric{...}, label)`` over the window (the labels API), all of
  them selected: one value regex-escaped, several as ``(a|b)`` (never the ``.*`` of "All", under which a matcher
  on a label the exporter does not set would still match);
* ``$__interval`` the datasource's scrape interval (15 s, the platform's: Grafana's minimum step), ``$__rate_interval``
  ``max($__interval + scrape interval, 4 x scrape interval)`` = 60 s, ``$__range`` the window in seconds.

A query fails when Prometheus answers an error (it does not parse, or cannot run), when it returns no series
with a number in the window, or when a number lies outside what the panel's unit allows (:data:`PLAUSIBLE`).
Each failure names the dashboard, the panel, the query's refId and its text.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

DASHBOARDS = Path(__file__).resolve().parents[1] / "dashboards"  # the repository's (a checkout, not a wheel)
SCRAPE_S = 15  # the Prometheus datasource's scrape interval (Grafana's default, the platform's)
STEP_S = SCRAPE_S
RATE_INTERVAL = f"{max(STEP_S + SCRAPE_S, 4 * SCRAPE_S)}s"

# What a panel's unit allows (Grafana unit ids): a number outside is a unit error (ms charted as s, a ratio as %,
# W as mW) or a wrong query. Latencies of a local campaign stay under a minute; a GPU's power under 2 kW.
PLAUSIBLE: dict[str | None, tuple[float, float]] = {
    "percentunit": (0.0, 1.0), "percent": (0.0, 100.0), "s": (0.0, 60.0), "reqps": (0.0, 1e5),
    "short": (0.0, 1e9), "Bps": (0.0, 1e12), "watt": (0.0, 2000.0), "mbytes": (0.0, 300_000.0),
    "suffix: MHz": (0.0, 5000.0), "currencyUSD": (0.0, 1e6), None: (0.0, 1e12),
}
_RE_SPECIAL = re.compile(r"([$^*{}\[\]'+?.()|])")


class PrometheusAPI(Protocol):
    def get(self, path: str, **params: Any) -> Any: ...


class HttpPrometheus:
    """Prometheus' HTTP API at ``url`` (GET only; an error answer is returned as its JSON body)."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def get(self, path: str, **params: Any) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as r:  # noqa: S310 - the user's URL, http(s)
                return json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400/422: the API's own error body
            body = e.read()
            try:
                return json.loads(body)
            except ValueError:
                return {"status": "error", "errorType": f"HTTP {e.code}", "error": body[:300].decode(errors="replace")}


@dataclass(frozen=True)
class Target:
    dashboard: str  # file name
    panel_id: int
    panel: str  # title
    ref: str
    text: str  # expr or rawSQL
    unit: str | None
    kind: str  # prometheus | sql

    def where(self) -> str:
        return f"{self.dashboard} panel {self.panel_id} {self.panel!r} query {self.ref}"


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for p in panels:
        out.append(p)
        out += _panels(p.get("panels", []))
    return out


def targets(name: str, dash: dict[str, Any]) -> list[Target]:
    out = []
    for p in _panels(dash["panels"]):
        cfg = p.get("fieldConfig") or {}
        unit = cfg.get("defaults", {}).get("unit")
        # a field override by name (a query's legend) giving its series their own unit, as Grafana applies it
        by_name = {o["matcher"]["options"]: prop["value"] for o in cfg.get("overrides", [])
                   if o.get("matcher", {}).get("id") == "byName"
                   for prop in o.get("properties", []) if prop.get("id") == "unit"}
        for t in p.get("targets", []):
            kind = "prometheus" if "expr" in t else "sql"
            out.append(Target(name, p["id"], p.get("title", ""), t["refId"], t.get("expr") or t.get("rawSQL", ""),
                              by_name.get(t.get("legendFormat"), unit), kind))
    return out


def query_variables(dash: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in dash.get("templating", {}).get("list", []) if v.get("type") == "query"]


def variable_query(var: dict[str, Any]) -> str:
    q = var.get("query")
    if isinstance(q, dict):
        return str(q.get("query") or q.get("rawSQL") or "")
    return str(q or var.get("definition") or "")


def regex_escape(value: str) -> str:
    """Grafana's ``prometheusSpecialRegexEscape``: regex specials escaped, doubled for the PromQL string."""
    return _RE_SPECIAL.sub(r"\\\\\1", value.replace("\\", "\\\\\\\\"))


def format_multi(values: list[str]) -> str:
    escaped = [regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(text: str, values: dict[str, str], extra: dict[str, str]) -> str:
    """``$name``, ``${name}`` and Grafana's ``$__*`` macros replaced (longest names first)."""
    allv = {**extra, **values}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in allv:
            raise ValueError(f"no value for ${name} in {text!r}")
        return allv[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, text)


def prom_values(prom: PrometheusAPI, dash: dict[str, Any], start: float, end: float) -> dict[str, list[str]]:
    """Each query variable's values over the window, in order (a later one reads the earlier ones)."""
    chosen: dict[str, list[str]] = {}
    for var in query_variables(dash):
        q = variable_query(var)
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q.strip())
        if not m:
            raise ValueError(f"variable ${var['name']}: not a label_values() query: {q!r}")
        match = substitute(m.group(1), {k: format_multi(v) for k, v in chosen.items()}, {})
        body = prom.get(f"/api/v1/label/{m.group(2)}/values", **{"match[]": match, "start": start, "end": end})
        if body.get("status") != "success":
            raise ValueError(f"variable ${var['name']} ({q}): Prometheus answered {body.get('error') or body}")
        chosen[var["name"]] = sorted(body["data"])
    return chosen


def macros(start: float, end: float) -> dict[str, str]:
    return {"__rate_interval": RATE_INTERVAL, "__interval": f"{STEP_S}s", "__range": f"{int(end - start)}s",
            "__range_s": str(int(end - start))}


def selectors(expr: str) -> set[str]:
    """The vector selectors an expression reads (``name{matchers}``), as written."""
    return {m.group(0) for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*\{[^}]*\}", expr)}


def evaluate(prom: PrometheusAPI, t: Target, expr: str, start: float, end: float) -> tuple[str | None, list[float]]:
    """(the failure or None, every number the query returned in the window)."""
    body = prom.get("/api/v1/query_range", query=expr, start=start, end=end, step=STEP_S)
    if body.get("status") != "success":
        return f"{t.where()}: Prometheus answered {body.get('errorType')}: {body.get('error')}\n  {expr}", []
    numbers = [float(v) for s in body["data"]["result"] for _, v in s["values"]]
    finite = [v for v in numbers if math.isfinite(v)]
    if not finite:
        return (f"{t.where()}: no data ({len(body['data']['result'])} series, none with a number in the window)"
                f"\n  {expr}"), []
    lo, hi = PLAUSIBLE.get(t.unit, PLAUSIBLE[None])
    bad = [v for v in finite if not lo - 1e-9 <= v <= hi + 1e-9]
    if bad:
        return (f"{t.where()}: {len(bad)} of {len(finite)} numbers outside [{lo:g}, {hi:g}] for unit {t.unit!r} "
                f"(e.g. {bad[0]:g})\n  {expr}"), finite
    return None, finite


def source(prom: PrometheusAPI, expr: str, start: float, end: float) -> str:
    """``live`` when every selector of the query matches series of the run's own processes, ``recorded`` when
    every one matches only series served from a recorded exposition, else ``mixed``."""
    kinds = set()
    for sel in selectors(expr):
        body = prom.get("/api/v1/series", **{"match[]": sel, "start": start, "end": end})
        series = body.get("data") or []
        if series:  # a selector nothing matches (e.g. status="error" in a run without errors) says nothing
            kinds.add("live" if any("exposition" not in s for s in series) else "recorded")
    return kinds.pop() if len(kinds) == 1 else "mixed" if kinds else "none"


@dataclass
class Outcome:
    target: Target
    expr: str
    failure: str | None
    source: str  # live | recorded | mixed | none | lake
    numbers: int


def check_prometheus(prom: PrometheusAPI, name: str, dash: dict[str, Any], start: float, end: float,
                     pinned: dict[str, list[str]] | None = None, classify: bool = True) -> list[Outcome]:
    """Every PromQL target of a dashboard, Grafana's variables set to their values in the window (``pinned``:
    those values instead, e.g. the run's own namespace); ``classify``: also say where each query's data came
    from (live or recorded: one series look-up per selector)."""
    values = prom_values(prom, dash, start, end)
    values.update(pinned or {})
    subs = {k: format_multi(v) for k, v in values.items() if v}
    out = []
    for t in targets(name, dash):
        if t.kind != "prometheus":
            continue
        missing = [k for k, v in values.items() if not v and re.search(rf"\${{?{k}\b", t.text)]
        if missing:
            out.append(Outcome(t, t.text, f"{t.where()}: variable(s) {missing} have no value in the window", "", 0))
            continue
        expr = substitute(t.text, subs, macros(start, end))
        failure, numbers = evaluate(prom, t, expr, start, end)
        out.append(Outcome(t, expr, failure, source(prom, expr, start, end) if classify else "", len(numbers)))
    return out


def athena_sql(sql: str, values: dict[str, str], start: float, end: float) -> str:
    """The Athena datasource's ``$__timeFilter(col)`` (``col BETWEEN TIMESTAMP '…' AND TIMESTAMP '…'``, UTC) and
    the variables (text, unescaped, as the plugin interpolates them)."""

    def ts(x: float) -> str:
        return dt.datetime.fromtimestamp(x, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")

    sql = re.sub(r"\$__timeFilter\(\s*(\w+)\s*\)", rf"\1 BETWEEN TIMESTAMP '{ts(start)}' AND TIMESTAMP '{ts(end)}'",
                 sql)
    return substitute(sql, values, {})


def check_sql(engine: Any, name: str, dash: dict[str, Any], start: float, end: float) -> list[Outcome]:
    """Every SQL target (and variable query) of a dashboard through ``engine`` (benchctl.local.query.QueryEngine,
    Athena's dialect): each must run and return rows. A variable takes its first value, as Grafana's default."""
    values: dict[str, str] = {}
    out = []
    for var in query_variables(dash):
        sql = athena_sql(variable_query(var), values, start, end)
        _, rows = engine.run(sql)
        if not rows:
            raise ValueError(f"{name} variable ${var['name']}: no rows\n  {sql}")
        values[var["name"]] = str(rows[0][0])
    for t in targets(name, dash):
        if t.kind != "sql":
            continue
        sql = athena_sql(t.text, values, start, end)
        try:
            _, rows = engine.run(sql)
        except Exception as e:
            out.append(Outcome(t, sql, f"{t.where()}: {type(e).__name__}: {e}\n  {sql}", "lake", 0))
            continue
        out.append(Outcome(t, sql, None if rows else f"{t.where()}: no rows\n  {sql}", "lake", len(rows)))
    return out
