"""The view catalog: the Athena (Trino) SQL views in ``sql/views/``, one file per view, and which of them a
campaign reports.

A view file holds ONE query in Athena's (Trino) dialect: a ``SELECT``/``WITH`` statement, the body of the
view; the file name is the view name. Athena gets ``CREATE OR REPLACE VIEW <name> AS <body>``
(:func:`athena_view_ddl`, dependencies first: the results stack's named queries and the Report function);
the local engine transpiles the same bodies for DuckDB (``benchctl.local.query``). To add a view: drop a
file into ``sql/views/`` (and, for a comparison view, its headline columns into :data:`REPORT_VIEWS`).
A campaign's exported rows of a view (:func:`export_sql`) carry a ``simulated`` column, on both engines.
May import only the standard library (and stdlib-only benchctl modules): the Report function on AWS reads
this (no sqlglot there).
"""

from __future__ import annotations

import re
from pathlib import Path

from benchctl.analysis.formatting import SIMULATED_COLUMN
from benchctl.resources import data_dir

VIEWS_DIR = data_dir("sql") / "views"
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")

# The comparison views a campaign reports (all columns go to report/<view>.csv|json) and the columns
# `benchctl run` prints for a person (the views hold more: spreads, sample counts, experiments).
REPORT_VIEWS: dict[str, tuple[str, ...]] = {
    "v_concurrency_sweep": (
        "comparison", "workload", "concurrency", "agg_ttft_p50_ms", "disagg_ttft_p50_ms", "agg_itl_p50_ms", "disagg_itl_p50_ms",
        "agg_output_tokens_per_s", "disagg_output_tokens_per_s", "agg_goodput_ratio", "disagg_goodput_ratio",
        "n_repeats", "agg_experiment", "disagg_experiment",
    ),
    "v_multi_turn": (
        "comparison", "workload", "turn", "agg_ttft_p50_ms", "disagg_ttft_p50_ms", "agg_ttft_p99_ms", "disagg_ttft_p99_ms",
        "agg_n_requests", "disagg_n_requests", "agg_conversation_p50_s", "disagg_conversation_p50_s",
        "agg_cache_hit_rate", "disagg_cache_hit_rate", "agg_experiment", "disagg_experiment",
    ),
    "v_sequence_distribution": (
        "distribution", "experiment", "isl_bucket", "n_requests", "ttft_p50_ms", "ttft_p99_ms", "ttft_cv",
        "tps_user_p50", "tps_user_cv", "requested_isl_mean", "actual_isl_mean", "output_tokens_per_s",
    ),
    "v_prefix_cache": (
        "comparison", "workload", "prefix_ratio", "agg_ttft_p50_ms", "disagg_ttft_p50_ms", "agg_ttft_improvement_pct",
        "disagg_ttft_improvement_pct", "achievable_hit_rate", "agg_cache_hit_rate", "disagg_cache_hit_rate",
        "agg_first_requests_hit_rate", "agg_kv_usage_max",
        "n_repeats", "agg_experiment", "disagg_experiment",
    ),
    "v_cost_efficiency": (
        "category", "experiment", "gpus", "gpu_kinds", "gpu_usd_per_hour", "cost_usd", "output_tokens_per_s",
        "usd_per_1m_output_tokens", "steady_state_usd_per_1m_output_tokens", "cold_start_usd",
        "usage_usd_per_1m_output_tokens", "tokens_per_usd", "goodput_per_usd_hour",
        "root_volume_usd", "auto_mode_fee_usd", "j_per_output_token", "simulated", "scope",
    ),
    "v_pareto": (
        "workload", "experiment", "variant", "gpus", "output_tokens_per_s_per_gpu", "ttft_p50_ms", "on_frontier",
    ),
    "v_kv_transfer": (
        "experiment", "mode", "workload", "variant", "concurrency", "isl", "ttft_p50_ms", "ttft_avg_ms",
        "kv_transfer_ms", "kv_transfer_share_of_ttft", "kv_transfer_source", "kv_transfer_gbps", "router_estimate_ms",
    ),
    "v_energy": (
        "experiment", "mode", "workload", "variant", "energy_j", "gpus_metered", "j_per_output_token",
        "output_tokens_per_kwh", "prefill_j_per_output_token", "decode_j_per_output_token", "idle_power_w",
        "energy_source",
    ),
    "v_stage_queues": (
        "experiment", "mode", "workload", "variant", "concurrency", "goodput_ratio", "frontend_queued_max",
        "prefill_dispatch_max", "decode_dispatch_max", "prefill_inflight_max", "prefill_waiting_max",
        "decode_waiting_max", "worker_waiting_max", "decode_running_max", "worker_running_max",
        "gpu_util_prefill_avg_pct", "gpu_util_decode_avg_pct", "gpu_util_worker_avg_pct", "gpu_util_avg_pct",
        "gpu_fb_used_max_mib", "gpu_power_avg_w", "gpu_source",
    ),
    "v_kv_offload": (
        "experiment", "mode", "kv_offload", "workload", "variant", "offload_blocks_d2h", "onboard_blocks_h2d",
        "offload_blocks", "onboard_blocks", "host_cache_hit_rate_avg", "offload_used", "offload_source",
        "preemptions", "kv_usage_max",
    ),
    "v_quality": (
        "experiment", "mode", "model", "temperature", "top_p", "sampling_seed", "thinking", "settings_consistent",
        "quality_kind", "quality_questions", "quality_correct", "quality_score", "quality_score_low",
        "quality_score_high", "quality_min_score", "quality_gate", "simulated",
    ),
    "v_feature_ladder": (
        "experiment", "base_experiment", "changed_feature", "workload", "variant", "ttft_p50_change_pct",
        "output_tokens_per_s_change_pct", "base_cache_hit_rate", "cache_hit_rate",
    ),
}


def view_sql_files(views_dir: Path = VIEWS_DIR) -> dict[str, Path]:
    """``{view name: file}`` for every ``*.sql`` in ``views_dir``."""
    if not views_dir.is_dir():
        return {}
    return {p.stem: p for p in sorted(views_dir.glob("*.sql"))}


_COMMENT_OR_STRING = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'", re.DOTALL)
_WORD = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_CTE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s+AS\s*\(", re.IGNORECASE)


def view_references(body: str, views: set[str]) -> set[str]:
    """The other views of ``views`` that a view's query reads, from its words alone (comments and string
    literals stripped, names it defines itself as CTEs ignored). Standard library only: the Report
    function runs this on AWS, where sqlglot is not shipped; tests/unit/test_lake_query.py holds it to
    sqlglot's table references for every view file."""
    text = _COMMENT_OR_STRING.sub(" ", body)
    ctes = {m.group(1) for m in _CTE.finditer(text)}
    return {w for w in _WORD.findall(text) if w in views} - ctes


def ordered_views(views_dir: Path = VIEWS_DIR) -> list[tuple[str, str]]:
    """``(view, file body)`` for every view file, dependencies first: the order follows the views each
    query reads (``view_references``), so creating them in this order creates every view, on Athena and
    on DuckDB alike. No sqlglot: the Report function on AWS calls this."""
    files = view_sql_files(views_dir)
    deps: dict[str, set[str]] = {}
    bodies: dict[str, str] = {}
    for name, path in files.items():
        if not IDENT.match(name):
            raise ValueError(f"{path}: the file name must be a valid view name (letters, digits, _)")
        body = path.read_text(encoding="utf-8")
        deps[name] = view_references(body, set(files) - {name})
        bodies[name] = body.strip().rstrip(";")
    ordered: list[str] = []
    while len(ordered) < len(files):
        ready = sorted(n for n in files if n not in ordered and deps[n] <= set(ordered))
        if not ready:
            raise ValueError(f"views depend on each other in a cycle: {sorted(set(files) - set(ordered))}")
        ordered += ready
    return [(n, bodies[n]) for n in ordered]


def athena_view_ddl(views_dir: Path = VIEWS_DIR) -> list[tuple[str, str]]:
    """``(view, "CREATE OR REPLACE VIEW view AS <file body>")`` for every view file, dependencies first
    (``ordered_views``). The body is the file's own text: Athena runs the Trino dialect the files are
    written in."""
    return [(n, f"CREATE OR REPLACE VIEW {n} AS\n{body}") for n, body in ordered_views(views_dir)]


def campaign_rows_sql(view: str, campaign_id: str) -> str:
    """One campaign's rows of ``view`` (``campaign_id`` already checked path-safe by the caller)."""
    return f"SELECT * FROM {view} WHERE campaign_id = '{campaign_id}'"  # noqa: S608


def export_sql(view: str, campaign_id: str, view_columns: list[str] | tuple[str, ...]) -> str:
    """The SELECT whose result is exported as ``<view>.csv|json`` (locally) or kept as Athena's result CSV (AWS):
    the campaign's rows, with ``campaigns.simulated`` added as a ``simulated`` column when the view has none
    of its own (``view_columns``: the view's columns), so that a simulated campaign's file says so."""
    if SIMULATED_COLUMN in view_columns:
        return campaign_rows_sql(view, campaign_id)
    return (f"SELECT v.*, (SELECT bool_or(c.simulated) FROM campaigns c WHERE c.campaign_id = '{campaign_id}') "  # noqa: S608
            f"AS {SIMULATED_COLUMN} FROM {view} v WHERE v.campaign_id = '{campaign_id}'")
