"""The report's data: what it reads (one set of queries, Athena's dialect, run by whichever engine's
``QueryPort``: DuckDB locally, Athena on AWS), assembled into ``ReportData`` the same way on both.

To add a section's data: its query in :func:`report_queries` (or a table in :data:`TABLES`), its rows
picked up in :func:`load_report_data`. May import the standard library and the core.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from benchctl.analysis.formatting import round_for_reading
from benchctl.analysis.views import REPORT_VIEWS
from benchctl.lake import schema, timeline
from benchctl.lake.paths import check_path_value
from benchctl.lake.query import QueryPort
from benchctl.report.chartkit import duration, sim_label
from benchctl.report.client import client_query, client_rows
from benchctl.report.tuning import tuning_query

# (view, section title, one-line description); the columns shown are REPORT_VIEWS[view] (those present).
TABLES: tuple[tuple[str, str, str], ...] = (
    ("v_concurrency_sweep", "Concurrency sweep",
     "Aggregated vs disaggregated per concurrency: AIPerf's per-step statistics, means over repeats."),
    ("v_prefix_cache", "Prefix cache",
     "Per input prefix duplication ratio: TTFT, its improvement over ratio 0, the best hit rate the dataset allows "
     "(achievable) and the server-measured hit rate."),
    ("v_cost_efficiency", "Cost efficiency",
     "Per experiment: allocation-based cost, $/1M output tokens, tokens per $ and goodput per $/h."),
    ("v_multi_turn", "Multi-turn",
     "Per turn of the multi-turn workload: TTFT as the history grows."),
    ("v_sequence_distribution", "Sequence-length distributions",
     "Per distribution and experiment, overall ('all') and per input-length bucket."),
    ("v_pareto", "Pareto points",
     "Per experiment and concurrency: output tokens/s per GPU vs TTFT p50; on_frontier = not dominated."),
    ("v_feature_ladder", "Feature ladder",
     "Each rung's one changed feature relative to its base experiment."),
    ("v_kv_transfer", "KV transfer",
     "Per step: the prefill -> decode KV-transfer time beside TTFT (measured from vLLM's NIXL metrics on AWS; "
     "the local engine: the mocker's transfer model, labelled so), aggregated rows for comparison."),
    ("v_stage_queues", "Stage queues and GPU use",
     "Per step: queue depth at each serving stage, GPU utilisation, memory and power (DCGM), and SLO attainment."),
    ("v_energy", "Energy",
     "Per step: the GPUs' energy (DCGM's energy counter, or power x time, said which), joules per output token "
     "and output tokens per kWh, prefill and decode apart, and the idle power every metered GPU draws."),
    ("v_kv_offload", "KV offload",
     "Per step: the blocks KVBM offloaded and onboarded per tier and whether offload was used at all (counted "
     "before any offload conclusion), preemptions and how full the GPU KV cache got."),
    ("v_quality", "Sampling, thinking and output quality",
     "Per experiment: the sampling and thinking settings every request carried and the output-quality gate."),
)
OPTIONAL_TABLES = frozenset({"v_feature_ladder"})  # shown only when the campaign has rows

PREDICTION_COLUMNS = ("campaign_id", "experiment", "step_id", "concurrency", "predicted_ttft_ms",
                      "predicted_itl_ms", "predicted_output_tokens_per_s", "source")
PREDICTION_EXTRA_COLUMNS = ("system", "fits_memory", "note")  # shown when the table has them
HOW_TO_GET_A_LAKE = "give the lake of a run, e.g. --lake OUT/lake for `benchctl run --out OUT`"


@dataclass
class Rows:
    columns: list[str]
    rows: list[dict[str, Any]]


@dataclass
class ReportData:
    source: str  # the lake it was read from (a directory, or s3://...)
    campaign: dict[str, Any]
    simulated: bool
    views: dict[str, Rows]
    timeline: list[dict[str, Any]]
    modes: dict[str, str]  # experiment -> mode
    experiments: list[str]  # in campaign order
    datasets: list[dict[str, Any]]
    predictions: Rows | None
    predictions_note: str | None
    images: list[dict[str, str]] = field(default_factory=list)
    calibration: Any = None  # report.calibration.Calibration: twin vs prediction vs measurement (simulated only)
    network: list[dict[str, Any]] = field(default_factory=list)  # per experiment: what network_observed recorded
    comparisons: list[dict[str, Any]] = field(default_factory=list)  # the comparisons rows (written at Plan)
    comparison_steps: list[dict[str, Any]] = field(default_factory=list)  # v_comparison_steps: what verdicts read
    experiment_rows: list[dict[str, Any]] = field(default_factory=list)  # experiments: settings, expected transfer
    twins: list[dict[str, Any]] = field(default_factory=list)  # what timed the mocker workers (lake table twins)
    client: list[dict[str, Any]] = field(default_factory=list)  # per step: did the load generator keep up
    tuning: list[dict[str, Any]] = field(default_factory=list)  # the tune phase's candidates (report.tuning)
    since: Any = None  # the campaign against the previous one of its spec (report.since), or None
    since_note: str = ""  # why there is none
    purchases: list[str] = field(default_factory=list)  # per pool: how its nodes were bought (costs.fees_json)

    @property
    def sim_tag(self) -> str:
        return sim_label(self.campaign.get("worker_engine"))[0]

    @property
    def sim_text(self) -> str:
        text = sim_label(self.campaign.get("worker_engine"))[1]
        speeds: dict[str, set[float]] = {}
        for ev in self.timeline:
            if timeline.is_event(ev, timeline.DEPLOY_APPLIED) and (v := timeline.detail(ev).get("speed")) is not None:
                speeds.setdefault(str(ev.get("experiment")), set()).add(float(v))
        varied = {e: sorted(v) for e, v in speeds.items() if len(v) > 1}
        if varied:  # design.twin_spread_pct: the mocker's own deployment-to-deployment spread
            text += ("; each deployment's mocker ran at its own seeded speed (design.twin_spread_pct: "
                     + "; ".join(f"{e} x{', x'.join(f'{s:.3g}' for s in v)}" for e, v in varied.items()) + ")")
        return text

    @property
    def campaign_id(self) -> str:
        return str(self.campaign["campaign_id"])


def _dicts(cols: list[str], rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _rows(query: QueryPort, sql: str) -> Rows:
    cols, raw = query.run(sql)
    return Rows(cols, _dicts(cols, raw))


def pick_campaign(query: QueryPort, source: str, campaign_id: str | None, *,
                  missing_ok: bool = False) -> dict[str, Any]:
    """The ``campaigns`` row to report: ``campaign_id``'s, else the latest started. ``missing_ok`` (the
    Report state, whose campaign is known): a campaign the table does not show yet is reported all the
    same, from what the lake holds of it."""
    rows = _rows(query, "SELECT * FROM campaigns").rows
    if campaign_id is not None and missing_ok and not any(r["campaign_id"] == campaign_id for r in rows):
        return {"campaign_id": campaign_id}
    if not rows:
        raise ValueError(f"no campaign to report: {source} has no campaigns ({HOW_TO_GET_A_LAKE})")
    known = sorted({str(r["campaign_id"]) for r in rows})
    if campaign_id is None:
        def key(r: dict[str, Any]) -> tuple[bool, datetime, str]:
            return (r["started_at"] is not None, r["started_at"] or datetime.min, str(r["campaign_id"]))

        return max(rows, key=key)
    if campaign_id not in known:
        raise ValueError(f"unknown campaign {campaign_id!r} in {source}; valid: {', '.join(known)}")
    return next(r for r in rows if r["campaign_id"] == campaign_id)


def image_digests(versions: Any, path: str = "") -> list[dict[str, str]]:
    """``{"where", "image", "digest"}`` for every ``images`` mapping (and ``@sha256:`` value) inside."""
    out: list[dict[str, str]] = []
    if isinstance(versions, dict):
        for k, v in versions.items():
            where = f"{path}.{k}" if path else str(k)
            if k == "images" and isinstance(v, dict):
                out += [{"where": path or "campaign", "image": str(i), "digest": str(d)} for i, d in v.items()]
            elif isinstance(v, str) and "@sha256:" in v:
                out.append({"where": path or "campaign", "image": str(k), "digest": v})
            else:
                out += image_digests(v, where)
    elif isinstance(versions, list):
        for i, v in enumerate(versions):
            out += image_digests(v, f"{path}[{i}]")
    return out


def _load_predictions(query: QueryPort, cid: str) -> tuple[Rows | None, str | None]:
    if "predictions" not in schema.TABLES:
        return None, "No predictions: this lake has no predictions table yet."
    missing = [c for c in PREDICTION_COLUMNS if c not in schema.column_names("predictions")]
    if missing:
        return None, f"No predictions: the predictions table lacks column(s) {missing}."
    extra = [c for c in PREDICTION_EXTRA_COLUMNS if c in schema.column_names("predictions")]
    sql = f"""
        SELECT p.experiment, p.step_id, coalesce(p.concurrency, s.concurrency) AS concurrency, p.source,
               p.predicted_ttft_ms, s.ttft_p50_ms AS measured_ttft_p50_ms,
               p.predicted_itl_ms, s.itl_p50_ms AS measured_itl_p50_ms,
               p.predicted_output_tokens_per_s, s.output_tokens_per_s AS measured_output_tokens_per_s,
               s.status AS step_status{"".join(f", p.{c}" for c in extra)}
        FROM predictions p
        LEFT JOIN steps s
            ON s.campaign_id = p.campaign_id AND s.experiment = p.experiment AND s.step_id = p.step_id
        WHERE p.campaign_id = '{cid}'
        ORDER BY p.experiment, coalesce(p.concurrency, s.concurrency), p.step_id, p.source
    """  # noqa: S608 (cid is a known, path-safe campaign id)
    try:
        cols, raw = query.run(sql)
    except Exception as e:  # another engineer's table: never let it break the report
        return None, f"No predictions: the predictions table could not be read ({e})."
    rows = _dicts(cols, raw)
    if not rows:
        return None, "No predictions for this campaign."
    out_cols = ["experiment", "step_id", "concurrency", "source"]
    table: list[dict[str, Any]] = []
    for r in rows:
        row = {c: r[c] for c in out_cols}
        for what, m in (("ttft_ms", "measured_ttft_p50_ms"), ("itl_ms", "measured_itl_p50_ms"),
                        ("output_tokens_per_s", "measured_output_tokens_per_s")):
            p, v = r[f"predicted_{what}"], r[m]
            row[f"predicted_{what}"] = p
            row[m] = v
            row[f"{what}_error_pct"] = (
                (float(p) - float(v)) / float(v) * 100.0 if p is not None and v not in (None, 0) else None
            )
        row["step_status"] = r["step_status"] if r["step_status"] is not None else "not measured"
        for c in extra:
            row[c] = r[c]
        table.append(row)
    return Rows(list(table[0]), table), None


def report_queries(cid: str) -> dict[str, str]:
    """The SQL the report reads (Trino/Athena dialect; DuckDB runs it too), by what it feeds."""
    check_path_value("campaign_id", cid)  # path-safe characters only: safe to quote in SQL
    queries = {v: f"SELECT * FROM {v} WHERE campaign_id = '{cid}'" for v, _, _ in TABLES}  # noqa: S608
    queries["_timeline"] = f"SELECT * FROM timeline WHERE campaign_id = '{cid}' ORDER BY at, event"  # noqa: S608
    queries["_experiments"] = (f"SELECT experiment, mode, experiment_index, router, kv_offload, gpus, "  # noqa: S608
                               f"nixl_backend, kv_transfer_path, kv_transfer_bandwidth_gbps, kv_bytes_per_token "
                               f"FROM experiments WHERE campaign_id = '{cid}' ORDER BY experiment_index, experiment")
    queries["_comparisons"] = (f"SELECT * FROM comparisons WHERE campaign_id = '{cid}' "  # noqa: S608
                               "ORDER BY comparison_index, comparison")
    queries["_comparison_steps"] = f"SELECT * FROM v_comparison_steps WHERE campaign_id = '{cid}'"  # noqa: S608
    queries["_steps"] = (f"SELECT experiment, mode, step_id, step_index, workload_kind, dataset_sha256 "  # noqa: S608
                         f"FROM steps WHERE campaign_id = '{cid}' ORDER BY step_index, step_id, experiment")
    queries["_client"] = client_query(cid)
    return queries


def load_report_data(query: QueryPort, campaign_id: str | None, source: str, *,
                     missing_ok: bool = False) -> ReportData:
    """Everything the report shows of ``campaign_id`` (default: the latest started), read through ``query``
    (whichever engine's): the same queries and the same assembly on both engines."""
    campaign = pick_campaign(query, source, campaign_id, missing_ok=missing_ok)
    cid = check_path_value("campaign_id", str(campaign["campaign_id"]))
    results = {key: _rows(query, sql) for key, sql in report_queries(cid).items()}
    predictions, note = _load_predictions(query, cid)
    data = assemble_report_data(source, campaign, results, predictions, note)
    data.twins = _load_twins(query, cid) if data.simulated else []
    try:  # a lake without the table (older): no tune phase to show
        data.tuning = _rows(query, tuning_query(cid)).rows
    except Exception:
        data.tuning = []
    data.purchases = _load_purchases(query, cid)
    return data


def _load_purchases(query: QueryPort, cid: str) -> list[str]:
    """How each pool's nodes were bought (on-demand, an ODCR, a Capacity Block: the ``purchase_text`` its costs
    rows carry, ``benchctl.planning.costs``); none for a lake whose rows predate it or that has no costs table."""
    try:
        rows = _rows(query, f"SELECT pool, fees_json FROM costs WHERE campaign_id = '{cid}' "  # noqa: S608 (known id)
                            "ORDER BY pool").rows
    except Exception:
        return []
    out: dict[str, str] = {}
    for r in rows:
        try:
            text = json.loads(r.get("fees_json") or "{}").get("purchase_text")
        except ValueError:
            continue
        if text:
            out.setdefault(str(r["pool"]), str(text))
    return list(out.values())


def _load_twins(query: QueryPort, cid: str) -> list[dict[str, Any]]:
    """What timed each experiment's mocker workers (the local engine's ``twins`` table; none elsewhere)."""
    try:
        return _rows(query, f"SELECT experiment, role, profile, label, note FROM twins "  # noqa: S608 (known id)
                            f"WHERE campaign_id = '{cid}' ORDER BY experiment, role").rows
    except Exception:  # a lake without the table (older, or S3): the report says nothing of twins
        return []


def twin_text(data: ReportData) -> str:
    """One line per experiment and role: the label of what timed its workers ("SIMULATED on the a100_sxm TP4
    twin (...)", or the built-in timing and why)."""
    return "; ".join(f"{t['experiment']} {t['role']}: {t['label']}" + (f" ({t['note']})" if t.get("note") else "")
                     for t in data.twins)


def assemble_report_data(source: str, campaign: dict[str, Any], results: dict[str, Rows],
                         predictions: Rows | None, note: str | None) -> ReportData:
    """A ReportData from the rows of :func:`report_queries` (whichever engine ran them)."""
    views = {v: results[v] for v, _, _ in TABLES if v in results}
    events = results["_timeline"].rows
    exps = results["_experiments"].rows
    steps = results["_steps"].rows
    modes: dict[str, str] = {}
    order: list[str] = []
    for r in exps:
        if r["experiment"] not in order:
            order.append(r["experiment"])
        if r["mode"]:
            modes[r["experiment"]] = r["mode"]
    for r in steps:
        modes.setdefault(r["experiment"], r["mode"] or "")
    for ev in events:
        exp = ev["experiment"]
        if exp and exp != timeline.CAMPAIGN and exp not in order:
            order.append(exp)
        if timeline.is_event(ev, timeline.DEPLOY_APPLIED) and exp not in modes:
            modes[exp] = str(timeline.detail(ev).get("mode") or "")
    for r in steps:
        if r["experiment"] not in order:
            order.append(r["experiment"])

    datasets: dict[tuple[str, str], dict[str, Any]] = {}
    for r in steps:
        key = (r["step_id"], r["dataset_sha256"] or "")
        d = datasets.setdefault(key, {"step_id": r["step_id"], "workload_kind": r["workload_kind"],
                                      "dataset_sha256": r["dataset_sha256"], "experiments": []})
        d["experiments"].append(r["experiment"])
    for d in datasets.values():
        d["experiments"] = ", ".join(sorted(set(d["experiments"])))

    try:
        versions = json.loads(campaign.get("versions_json") or "{}")
    except ValueError:
        versions = {}
    network = [{"experiment": ev["experiment"], **timeline.detail(ev)} for ev in events
               if timeline.is_event(ev, timeline.NETWORK_OBSERVED)]
    return ReportData(
        source=source, campaign=campaign, simulated=bool(campaign.get("simulated")), views=views,
        timeline=events, modes=modes, experiments=order, datasets=list(datasets.values()),
        predictions=predictions, predictions_note=note, images=image_digests(versions), network=network,
        comparisons=results["_comparisons"].rows if "_comparisons" in results else [],
        comparison_steps=results["_comparison_steps"].rows if "_comparison_steps" in results else [],
        experiment_rows=exps, client=client_rows(results["_client"].rows) if "_client" in results else [],
    )


# --------------------------------------------------------------------------------------- cells, sections


def fmt_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Decimal):
        v = float(v)
    if isinstance(v, float):
        return round_for_reading(v)  # the same rounding as `benchctl query`'s tables
    if isinstance(v, datetime):
        return v.isoformat(sep=" ", timespec="seconds")
    if isinstance(v, date):
        return v.isoformat()
    return str(v)


def num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def shown_columns(view: str, rows: Rows) -> list[str]:
    wanted = REPORT_VIEWS.get(view, ())
    cols = [c for c in wanted if c in rows.columns]
    return cols or [c for c in rows.columns if c != "campaign_id"]


def table_sections(data: ReportData) -> list[tuple[str, str, Rows, list[str], str]]:
    """(section id, title, rows, columns, description) of every table shown."""
    out = []
    for view, title, desc in TABLES:
        rows = data.views[view]
        if view in OPTIONAL_TABLES and not rows.rows:
            continue
        out.append((f"tbl-{view}", f"{title} ({view})", rows, shown_columns(view, rows), desc))
    return out


def provenance_items(data: ReportData) -> list[tuple[str, str]]:
    c = data.campaign
    try:
        pricing = json.loads(c.get("pricing_json") or "{}")
    except ValueError:
        pricing = {}
    started, ended = c.get("started_at"), c.get("ended_at")
    took = duration((ended - started).total_seconds()) if isinstance(started, datetime) and isinstance(
        ended, datetime) else ""
    items = [
        ("campaign_id", data.campaign_id), ("status", fmt_value(c.get("status"))),
        ("spec_name", fmt_value(c.get("spec_name"))), ("spec_hash", fmt_value(c.get("spec_hash"))),
        ("model", fmt_value(c.get("model"))), ("engine", fmt_value(c.get("engine"))),
        ("simulated", f"true — {data.sim_text}" if data.simulated else "false"),
        *([("timed by", twin_text(data))] if data.twins else []),
        ("started_at (UTC)", fmt_value(started)), ("ended_at (UTC)", fmt_value(ended) + (f" ({took})" if took else "")),
        ("pricing source", fmt_value(pricing.get("source")) or "not given"),
        ("pricing as of", fmt_value(pricing.get("as_of")) or "not given"),
        ("purchase option", "; ".join(data.purchases) or "not recorded (on-demand prices of the spec)"),
        ("lake", fmt_value(c.get("lake_uri")) or data.source),
    ]
    from benchctl.campaign.provenance import FIELDS

    # what it ran on (benchctl.campaign.provenance): a lake written before these columns has none to show
    items += [(name, fmt_value(c.get(name))) for name in FIELDS if c.get(name)]
    for k in ("failed_state", "error", "cause"):
        if c.get(k):
            items.append((k, fmt_value(c[k])))
    return items


def versions_pretty(data: ReportData) -> str:
    raw = data.campaign.get("versions_json")
    try:
        return json.dumps(json.loads(raw or "{}"), indent=2, sort_keys=True)
    except ValueError:
        return str(raw)


NETWORK_FIELDS = ("cni", "zones", "mtu", "mtu_source", "transfer_backend", "nixl_backends", "transfer_modelled",
                  "source", "error")


def network_rows(data: ReportData) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per experiment: CNI, zones, MTU, the transfer backend observed; one row per worker placed),
    from the timeline's network_observed events."""
    summary, placement = [], []
    for n in data.network:
        summary.append({"experiment": n["experiment"], **{k: (json.dumps(n[k], sort_keys=True)
                                                              if isinstance(n.get(k), dict | list) else n.get(k))
                                                          for k in NETWORK_FIELDS if n.get(k) is not None}})
        placement += [{"experiment": n["experiment"], **p} for p in n.get("placement") or []]
    return summary, placement
