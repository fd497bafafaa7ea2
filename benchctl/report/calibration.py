"""The report's three-way comparison: per concurrency-sweep step, the twin (a simulated local campaign: the
mocker timed by a profile, named), the prediction (aiconfigurator: the ``predictions`` table) and the
measurement (another campaign of the same lake, ``benchctl report --compare-measured C``), with the error
between each pair as MAPE per metric (TTFT p50, ITL p50, output tokens/s).

MAPE of a pair ``(a, reference)`` = mean over the steps both have of ``|a - ref| / ref x 100``; the reference is
the measurement when the pair has one, else the prediction. Steps are matched by experiment, concurrency, ISL
and OSL (a step's repeats averaged). Without a measured campaign: twin vs prediction only, and the section says
"no measured campaign".

Pure: rows in, rows out (:func:`three_way`); :func:`load_calibration` reads them through a ``QueryPort``.
May import the standard library and the core.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from benchctl.lake import schema
from benchctl.lake.paths import check_path_value
from benchctl.lake.query import QueryPort

METRICS = (("ttft_p50_ms", "TTFT p50 (ms)"), ("itl_p50_ms", "ITL p50 (ms)"),
           ("output_tokens_per_s", "output tokens/s"))
SOURCES = ("twin", "prediction", "measured")
PAIRS = (("twin", "prediction"), ("twin", "measured"), ("prediction", "measured"))  # (a, reference)
NO_MEASURED = "no measured campaign"
KEY = ("experiment", "concurrency", "isl", "osl")


@dataclass
class Calibration:
    rows: list[dict[str, Any]]  # one per step: KEY, then <source>_<metric> for each source and metric
    mape: list[dict[str, Any]]  # one per pair: pair, steps, <metric>_mape_pct
    twins: dict[str, str]  # experiment -> the twin its figures came from
    measured_campaign: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        return list(self.rows[0]) if self.rows else []


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(r.get(k) for k in KEY)


def _mean_by_step(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, float]]:
    groups: dict[tuple[Any, ...], dict[str, list[float]]] = {}
    for r in rows:
        g = groups.setdefault(_key(r), {})
        for m, _ in METRICS:
            if r.get(m) is not None:
                g.setdefault(m, []).append(float(r[m]))
    return {k: {m: sum(v) / len(v) for m, v in g.items()} for k, g in groups.items()}


def three_way(twin: list[dict[str, Any]], prediction: list[dict[str, Any]], measured: list[dict[str, Any]] | None,
              twins: dict[str, str], measured_campaign: str | None = None) -> Calibration:
    """Rows of each source (KEY columns and the METRICS, any number of repeats) -> the side-by-side table and
    MAPE per pair and metric. ``measured`` None: no measured campaign."""
    by = {"twin": _mean_by_step(twin), "prediction": _mean_by_step(prediction),
          "measured": _mean_by_step(measured or [])}
    keys = sorted(set(by["twin"]) | set(by["prediction"]) | set(by["measured"]),
                  key=lambda k: tuple((v is None, v) for v in k))
    rows = []
    for k in keys:
        row: dict[str, Any] = dict(zip(KEY, k, strict=True))
        row["twin"] = twins.get(str(k[0]), "")
        for m, _ in METRICS:
            for s in SOURCES if measured is not None else SOURCES[:2]:
                row[f"{s}_{m}"] = by[s].get(k, {}).get(m)
        rows.append(row)
    mape = []
    for a, ref in PAIRS if measured is not None else PAIRS[:1]:
        entry: dict[str, Any] = {"pair": f"{a} vs {ref}", "steps": 0}
        for m, _ in METRICS:
            errs = [abs(by[a][k][m] - by[ref][k][m]) / abs(by[ref][k][m]) * 100.0 for k in keys
                    if m in by[a].get(k, {}) and by[ref].get(k, {}).get(m) not in (None, 0.0)]
            entry[f"{m}_mape_pct"] = sum(errs) / len(errs) if errs else None
            entry["steps"] = max(entry["steps"], len(errs))
        mape.append(entry)
    notes = [] if measured is not None else [NO_MEASURED + ": twin vs prediction only (give one with "
                                                          "`benchctl report --compare-measured CAMPAIGN`)"]
    return Calibration(rows, mape, twins, measured_campaign, notes)


def twin_label(mocker_json: str | None) -> str:
    """The twin an experiment's mocker ran with, from the experiments row's ``mocker_json`` (what the spec
    chose; the ``twins`` table, where the local engine records what it made of that, comes first)."""
    try:
        knobs = json.loads(mocker_json or "{}")
    except ValueError:
        knobs = {}
    if knobs.get("twin") and knobs["twin"] not in ("auto", "off"):
        return f"twin {knobs['twin']}"
    if knobs.get("twin") == "auto":
        return "twin auto (aiconfigurator's profile of the pool's GPU, when it has one)"
    return "the mocker's built-in timing (no twin)"


def _twin_labels(query: QueryPort, cid: str) -> tuple[dict[str, str], set[str]]:
    """(experiment -> what timed its workers, the campaigns calibrated twins were fitted from): the ``twins``
    table's labels per role and profile provenance (the local engine's record, when the lake has it), else what
    the spec chose."""
    labels: dict[str, list[str]] = {}
    sources: set[str] = set()
    if "twins" in schema.TABLES:
        try:
            for r in _rows(query, "SELECT experiment, role, label, provenance_json FROM twins "  # noqa: S608
                                  f"WHERE campaign_id = '{cid}' ORDER BY experiment, role"):
                labels.setdefault(str(r["experiment"]), []).append(f"{r['role']}: {r['label']}")
                prov = _json_object(r.get("provenance_json"))
                if prov.get("source") == "calibrate" and isinstance(prov.get("campaign_id"), str):
                    sources.add(prov["campaign_id"])
        except Exception:  # an older lake without the table: what the spec chose
            labels, sources = {}, set()
    if labels:
        return {e: "; ".join(v) for e, v in labels.items()}, sources
    return {str(r["experiment"]): twin_label(r["mocker_json"]) for r in _rows(
        query, f"SELECT experiment, mocker_json FROM experiments WHERE campaign_id = '{cid}'")}, set()  # noqa: S608


def _json_object(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _steps_sql(cid: str) -> str:
    return ("SELECT experiment, concurrency, isl, osl, ttft_p50_ms, itl_p50_ms, output_tokens_per_s FROM steps "  # noqa: S608
            f"WHERE campaign_id = '{cid}' AND workload_kind = 'concurrency_sweep' AND status = 'succeeded'")


def _rows(query: QueryPort, sql: str) -> list[dict[str, Any]]:
    cols, raw = query.run(sql)
    return [dict(zip(cols, r, strict=True)) for r in raw]


def load_calibration(query: QueryPort, campaign: dict[str, Any], measured_campaign: str | None) -> Calibration | None:
    """The three-way comparison of a simulated campaign (its own steps are the twin's), or None for a measured
    one (its predicted-vs-measured section says it all). ``measured_campaign`` must be in the lake."""
    cid = check_path_value("campaign_id", str(campaign["campaign_id"]))
    if measured_campaign is not None:
        check_path_value("campaign_id", measured_campaign)
        known_campaigns = [str(r["campaign_id"]) for r in _rows(query, "SELECT DISTINCT campaign_id FROM steps")]
        if measured_campaign not in known_campaigns:
            raise ValueError(f"--compare-measured {measured_campaign}: no such campaign in the lake; valid: "
                             f"{', '.join(sorted(c for c in known_campaigns if c != cid)) or 'none'}")
        if measured_campaign == cid:
            raise ValueError(f"--compare-measured {measured_campaign}: that is the reported campaign itself; "
                             "give the measured campaign to compare the twin with")
    if not campaign.get("simulated"):
        if measured_campaign is not None:
            raise ValueError(f"--compare-measured {measured_campaign}: the reported campaign {cid} is not "
                             f"simulated (no twin to compare); report the twin's campaign with --compare-measured "
                             f"{measured_campaign}")
        return None
    twins, calibrated_from = _twin_labels(query, cid)
    notes = []
    if measured_campaign is None and calibrated_from:  # the twin was fitted from a campaign this lake holds
        known_campaigns = [str(r["campaign_id"]) for r in _rows(query, "SELECT DISTINCT campaign_id FROM steps")]
        found = sorted(c for c in calibrated_from if c in known_campaigns and c != cid)
        if found:
            measured_campaign = check_path_value("campaign_id", found[0])
            notes.append(f"measured campaign {measured_campaign}: the one the twin was calibrated from "
                         "(benchctl calibrate; --compare-measured picks another)")
    pred_sql = ("SELECT experiment, concurrency, isl, osl, predicted_ttft_ms AS ttft_p50_ms, "
                "predicted_itl_ms AS itl_p50_ms, predicted_output_tokens_per_s AS output_tokens_per_s "
                "FROM predictions WHERE campaign_id = '{}'")
    prediction: list[dict[str, Any]] = []
    for c in (cid, measured_campaign) if "predictions" in schema.TABLES else ():
        if c and not prediction:
            try:
                prediction = _rows(query, pred_sql.format(c))
            except Exception:  # a lake without the table: the comparison goes on without it
                prediction = []
    measured = _rows(query, _steps_sql(measured_campaign)) if measured_campaign else None
    cal = three_way(_rows(query, _steps_sql(cid)), prediction, measured, twins, measured_campaign)
    cal.notes += notes
    return cal


def mape_columns(cal: Calibration) -> list[str]:
    return ["pair", "steps", *(f"{m}_mape_pct" for m, _ in METRICS)]


def description(cal: Calibration) -> str:
    twins = "; ".join(f"{e}: {t}" for e, t in sorted(cal.twins.items())) or "none recorded"
    measured = f"measured campaign {cal.measured_campaign}" if cal.measured_campaign else NO_MEASURED
    return (f"Per concurrency-sweep step: twin = this campaign (SIMULATED, the mocker timed by {twins}); "
            f"prediction = aiconfigurator (predictions table); measurement = {measured}. MAPE = mean of "
            "|a - reference| / reference x 100 over the steps both have; the reference is the measurement, else "
            "the prediction.")
