"""``server_metrics_export.json`` (AIPerf's "hybrid" export, schema 1.1): the servers' Prometheus metrics
scraped during the step, flattened to one ``server_metrics`` row per metric x labels x stat.
Pure: standard library and benchctl only."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchctl.errors import ArtifactError
from benchctl.lake.ingest.base import StepContext, number, read_json_object, str_or_none
from benchctl.lake.schema import json_text

# What a server metric's value may be (decided here; NaN and infinities are refused by the parser first):
# a counter only grows (Prometheus' metric types: "a cumulative metric ... can only increase"), so every stat of
# a counter (its total over the window, its rate) is >= 0; a histogram's observation counts (``count``,
# ``count_rate``, each bucket) are >= 0. A gauge "can arbitrarily go up and down": negative values are kept
# (a temperature, a delta), as are a histogram's other statistics (observations may be negative). Every value,
# of any type, lies within +-MAX_ABS: no quantity a server exports comes near it (a timestamp in ns is ~1.8e18,
# a byte count of a node ~1e13), and -1e308 summed in a view is -inf.
MAX_ABS = 1e30
_COUNTS = {"counter": None, "histogram": {"count", "count_rate", "bucket"}}  # None: every stat


def _checked(path: Path, where: str, mtype: str | None, stat: str, value: Any) -> float | int:
    v = number(path, where, value)
    if not -MAX_ABS <= v <= MAX_ABS:
        raise ArtifactError(f"{path}: {where}: {v!r} is beyond +-{MAX_ABS:g}, what no server metric reaches")
    counts = _COUNTS.get(mtype or "", set())
    if v < 0 and (counts is None or stat in counts):
        raise ArtifactError(f"{path}: {where}: {v!r} is negative; a {mtype}'s {stat} counts and is >= 0 "
                            "(only a gauge may go below 0)")
    return v


def default_source(endpoint_url: str | None) -> str:
    """``host:port`` of a metrics URL: the source name when the caller gave none."""
    if not endpoint_url:
        return "unknown"
    parts = urlsplit(endpoint_url)
    return parts.netloc or endpoint_url


def _server_row(
    ctx: StepContext,
    *,
    source: str,
    endpoint_url: str | None,
    metric: str,
    metric_type: str | None,
    unit: str | None,
    labels: dict[str, str],
    stat: str,
    value: float,
) -> dict[str, Any]:
    return {
        "campaign_id": ctx.campaign_id,
        "experiment": ctx.experiment,
        "step_id": ctx.step_id,
        "repeat": ctx.repeat,
        "source": source,
        "endpoint_url": endpoint_url,
        "metric": metric,
        "metric_type": metric_type,
        "unit": unit,
        "labels_json": json_text(labels),
        "stat": stat,
        "value": float(value),
    }


def server_metrics_rows(
    path: Path, ctx: StepContext, *, sources: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Flatten AIPerf's ``server_metrics_export.json`` (profiling phase) into server_metrics rows.

    Format (AIPerf 0.13, export schema 1.1, checked on a real run)::

        {"metrics": {"<name>": {"type": "gauge|counter|histogram|unknown", "unit": ..., "description": ...,
                                "series": [{"endpoint_url": ..., "labels": {...} | absent,
                                            "stats": {"avg": .., "p99": .., "total": .., ...},
                                            "buckets": {"0.1": n, "+Inf": n}   # histograms only
                                            }]}},
         "warmup_metrics": {...}, "summary": {...}, ...}

    Counters appear without their ``_total`` suffix (AIPerf strips it). Every numeric entry of
    ``stats`` becomes a row with that stat name; each histogram bucket becomes a row with
    ``stat = "bucket"`` and the bound as label ``le``. ``timeslices`` and ``warmup_metrics`` are skipped.
    """
    data = read_json_object(path)
    metrics = data.get("metrics")
    if metrics is None:
        return []
    if not isinstance(metrics, dict):
        raise ArtifactError(f"{path}: expected 'metrics' to be an object keyed by metric name")
    sources = sources or {}
    rows: list[dict[str, Any]] = []
    for name, m in metrics.items():
        if not isinstance(m, dict) or not isinstance(m.get("series", []), list):
            raise ArtifactError(f"{path}: metrics.{name}: expected an object with a 'series' list")
        mtype = str_or_none(m.get("type"))
        unit = str_or_none(m.get("unit"))
        for i, series in enumerate(m.get("series", [])):
            where = f"metrics.{name}.series[{i}]"
            if not isinstance(series, dict):
                raise ArtifactError(f"{path}: {where}: expected an object with labels and stats")
            url = str_or_none(series.get("endpoint_url"))
            source = sources.get(url, default_source(url)) if url else default_source(url)
            labels = series.get("labels") or {}
            if not isinstance(labels, dict):
                raise ArtifactError(f"{path}: {where}.labels: expected an object of label -> value")
            labels = {str(k): str(v) for k, v in labels.items()}
            stats = series.get("stats") or {}
            if not isinstance(stats, dict):
                raise ArtifactError(f"{path}: {where}.stats: expected an object of stat -> number")
            series_of = {"source": source, "endpoint_url": url, "metric": name, "metric_type": mtype, "unit": unit}
            for stat_name, value in stats.items():
                if value is not None:
                    v = _checked(path, f"{where}.stats.{stat_name}", mtype, stat_name, value)
                    rows.append(_server_row(ctx, **series_of, labels=labels, stat=stat_name, value=v))
            buckets = series.get("buckets") or {}
            if not isinstance(buckets, dict):
                raise ArtifactError(f"{path}: {where}.buckets: expected an object of bound -> count")
            for le, count in buckets.items():
                v = _checked(path, f"{where}.buckets.{le}", mtype, "bucket", count)
                rows.append(_server_row(ctx, **series_of, labels={**labels, "le": str(le)}, stat="bucket", value=v))
    return rows

