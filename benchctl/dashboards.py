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

The Prometheus is a server on the other end of a port-forward, so its answers are held to what its HTTP API
documents (prometheus.io/docs/prometheus/latest/querying/api: "Every successful API request returns a 2xx status
code"; the envelope ``{"status": "success"|"error", "data": ..., "errorType", "error"}``; ``query_range`` data
``{"resultType": "matrix", "result": [{"metric": {..}, "values": [[t, "v"], ..]}]}``, label values a list of
strings, series a list of label sets). :class:`HttpPrometheus` follows no redirect (the API never needs one; a
3xx, e.g. to the instance metadata address, is an error naming where it pointed), reads at most
:data:`MAX_BODY_BYTES`, parses with :func:`benchctl.strict_json.loads_strict` (no NaN literal,
duplicate key or nesting deeper than 64) and checks the answer's shape; any of these is a
:class:`PrometheusAnswerError` naming the endpoint and the query, its remote text made inert
(:func:`benchctl.logtext.inert`).
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
from typing import Any, NoReturn, Protocol

from benchctl.errors import ArtifactError
from benchctl.logtext import inert
from benchctl.strict_json import loads_strict

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


# The most one answer may hold: a 60-minute query_range at a 15 s step is 240 points a series, ~10 kB; 32 MiB is
# some 3,000 series of it, far beyond any dashboard query here, and bounded memory against a hostile server.
MAX_BODY_BYTES = 32 * 1024 * 1024


class PrometheusAPI(Protocol):
    def get(self, path: str, **params: Any) -> Any: ...


class PrometheusAnswerError(ValueError):
    """A Prometheus answer that is not what its HTTP API documents (names the endpoint and the query)."""


class _Redirected(Exception):
    def __init__(self, code: int, to: str) -> None:
        super().__init__(code, to)
        self.code, self.to = code, to


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Every 3xx refused: the API answers 2xx or its JSON error (a redirect could send the query anywhere)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> NoReturn:
        raise _Redirected(code, newurl)


def _where(url: str, path: str, params: dict[str, Any]) -> str:
    query = params.get("query") or params.get("match[]")
    return f"{url}{path}" + (f" (query {inert(str(query))!r})" if query else "")


def _bad(where: str, what: str) -> NoReturn:
    raise PrometheusAnswerError(f"{where}: {what}")


def _sample(where: str, at: str, pair: Any) -> None:
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int | float)
            and not isinstance(pair[0], bool) and isinstance(pair[1], str)):
        _bad(where, f"{at}: expected a [unix time, \"value\"] pair, got {inert(repr(pair))[:80]}")
    try:
        float(pair[1])  # Prometheus writes "NaN", "+Inf", "-Inf" as strings: still numbers
    except ValueError:
        _bad(where, f"{at}: {inert(pair[1])[:40]!r} is not a number")


def check_answer(where: str, path: str, body: Any) -> dict[str, Any]:
    """``body`` held to the API's envelope and, on success, to the shape of ``path``'s data."""
    if not isinstance(body, dict):
        _bad(where, f"expected a JSON object (the API's envelope), got a JSON {type(body).__name__}")
    status = body.get("status")
    if status == "error":
        for key in ("errorType", "error"):
            if not isinstance(body.get(key, ""), str):
                _bad(where, f"{key}: expected a string")
        return {**body, "errorType": inert(body.get("errorType", "")), "error": inert(body.get("error", ""))}
    if status != "success":
        _bad(where, f"status: expected 'success' or 'error', got {inert(repr(status))[:60]}")
    if "data" not in body:
        _bad(where, "no 'data' in a 'success' answer")
    data = body["data"]
    if path.startswith("/api/v1/label/"):
        if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
            _bad(where, "data: expected a list of label values (strings)")
    elif path == "/api/v1/series":
        if not isinstance(data, list) or not all(isinstance(v, dict) for v in data):
            _bad(where, "data: expected a list of series (label sets)")
    elif path == "/api/v1/query_range":
        if not isinstance(data, dict) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            _bad(where, "data: expected {'resultType': 'matrix', 'result': [...]}")
        for i, series in enumerate(data["result"]):
            if not isinstance(series, dict) or not isinstance(series.get("values"), list):
                _bad(where, f"data.result[{i}]: expected a series with a 'values' list")
            for j, pair in enumerate(series["values"]):
                _sample(where, f"data.result[{i}].values[{j}]", pair)
    elif not isinstance(data, dict):
        _bad(where, f"data: expected a JSON object, got a JSON {type(data).__name__}")
    return body


class HttpPrometheus:
    """Prometheus' HTTP API at ``url`` (GET only; an error answer is returned as its JSON body, checked), a careful
    client: no redirect, at most ``max_bytes`` read, the answer's shape checked (the module's docstring)."""

    def __init__(self, url: str, timeout_s: float = 30.0, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._opener = urllib.request.build_opener(_NoRedirect)

    def _read(self, where: str, r: Any) -> bytes:
        length = r.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > self.max_bytes:
            _bad(where, f"answer of {int(length)} bytes (Content-Length) is over the {self.max_bytes}-byte cap")
        body: bytes = r.read(self.max_bytes + 1)
        if len(body) > self.max_bytes:
            _bad(where, f"answer is over the {self.max_bytes}-byte cap; benchctl stopped reading it")
        return body

    def _parse(self, where: str, body: bytes) -> Any:
        try:
            return loads_strict(body.decode("utf-8"), where)
        except ArtifactError as e:
            _bad(where, f"not an answer of the Prometheus HTTP API ({inert(str(e).removeprefix(where + ': '))})")
        except ValueError as e:  # not UTF-8, not JSON
            _bad(where, f"not JSON ({inert(str(e))[:120]})")

    def get(self, path: str, **params: Any) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        where = _where(self.url, path, params)
        try:
            with self._opener.open(url, timeout=self.timeout_s) as r:
                return check_answer(where, path, self._parse(where, self._read(where, r)))
        except _Redirected as e:
            _bad(where, f"answered HTTP {e.code} redirecting to {inert(e.to)[:200]!r}; the Prometheus HTTP API never "
                        "redirects, and benchctl follows no redirect: give --prometheus the API's own base URL")
        except urllib.error.HTTPError as e:  # 400/422/503: the API's own error body
            with e:
                body = self._read(where, e)
            try:
                return check_answer(where, path, self._parse(where, body))
            except PrometheusAnswerError:
                text = inert(body[:300].decode(errors="replace"))
                return {"status": "error", "errorType": f"HTTP {e.code}", "error": text}


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
