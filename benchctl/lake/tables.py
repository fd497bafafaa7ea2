"""The lake's tables and their columns, defined once (:mod:`benchctl.lake.schema` types and checks rows against them).

Each table is a list of ``(name, type)`` columns with types from Glue/Athena's vocabulary
(``string``, ``bigint``, ``double``, ``boolean``, ``timestamp``) plus its hive partition keys (always
``string``), listed among the columns too. The standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    pass


TYPES: frozenset[str] = frozenset({"string", "bigint", "double", "boolean", "timestamp"})


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]
    partition_keys: tuple[str, ...]
    description: str


def _table(name: str, description: str, partition_keys: tuple[str, ...], cols: str) -> Table:
    columns = tuple((n, t) for n, t in (line.split() for line in cols.strip().splitlines() if line.strip()))
    return Table(name, columns, partition_keys, description)


_CAMPAIGN_PARTS = ("campaign_id",)


_EXPERIMENT_PARTS = ("campaign_id", "experiment")


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        _table(
            "campaigns",
            "one row per campaign execution",
            _CAMPAIGN_PARTS,
            """
            campaign_id string
            spec_hash string
            spec_name string
            model string
            engine string
            simulated boolean
            status string
            started_at timestamp
            ended_at timestamp
            failed_state string
            error string
            cause string
            versions_json string
            pricing_json string
            lake_uri string
            dynamo_version string
            vllm_version string
            torch_version string
            cuda_version string
            nixl_version string
            kubernetes_version string
            gpu_driver string
            server_metrics_interval_s string
            prometheus_scrape_interval string
            dashboards_sha256 string
            nixl_registration string
            worker_engine string
            """,
        ),
        _table(
            "comparisons",
            "one row per comparison of a campaign (benchctl.spec.comparisons): baseline and treatment experiments, the "
            "plan's questions it answers, what differs, and how its verdicts are judged",
            _CAMPAIGN_PARTS,
            # questions / differs: comma-separated (q1,q3,...; mode,gpus,...); source: spec | default; the
            # columns from confidence on: the spec's comparison settings (benchctl.analysis.verdicts.Settings)
            """
            campaign_id string
            comparison string
            comparison_index bigint
            baseline string
            treatment string
            questions string
            differs string
            source string
            confidence double
            practical_threshold_pct double
            max_error_rate double
            slo_attainment double
            min_samples_p99 bigint
            transfer_share_pct double
            queue_threshold double
            deployment_spread_pct double
            """,
        ),
        _table(
            "experiments",
            "one row per experiment of a campaign: its serving features and, on a ladder, what it changes",
            _EXPERIMENT_PARTS,
            """
            campaign_id string
            experiment string
            experiment_index bigint
            mode string
            router string
            kv_offload boolean
            kv_offload_json string
            gpus bigint
            workers_json string
            base_experiment string
            changed_feature string
            mocker_json string
            nixl_backend string
            kv_transfer_path string
            kv_transfer_bandwidth_gbps double
            kv_bytes_per_token bigint
            network_json string
            """,
        ),
        _table(
            "steps",
            "one row per AIPerf invocation; statistics copied exactly from AIPerf's summary JSON",
            _EXPERIMENT_PARTS,
            # client_*: is AIPerf keeping up (benchctl.lake.client_load): the issue lag and the share of requests
            # issued on time are computed from its records, its CPU from the load runner's record; the
            # credit-to-start p95 and effective concurrency are copied from its summary
            # request_count = AIPerf's request_count (successful requests); error_count = AIPerf's
            # error_request_count (or the error records when no summary exists); completed_count =
            # AIPerf's completed_request_count (success + error).
            """
            campaign_id string
            experiment string
            mode string
            workload string
            workload_kind string
            step_id string
            step_index bigint
            repeat bigint
            deployment string
            concurrency bigint
            isl bigint
            osl bigint
            request_count bigint
            error_count bigint
            completed_count bigint
            ttft_p50_ms double
            ttft_p90_ms double
            ttft_p99_ms double
            ttft_avg_ms double
            itl_p50_ms double
            itl_p90_ms double
            itl_p99_ms double
            itl_avg_ms double
            request_latency_p50_ms double
            request_latency_p90_ms double
            request_latency_p99_ms double
            request_latency_avg_ms double
            output_tokens_per_s double
            request_throughput_per_s double
            total_output_tokens bigint
            benchmark_duration_s double
            output_token_throughput_per_user_p50 double
            cache_read_tokens_total bigint
            aiperf_version string
            benchmark_id string
            started_at timestamp
            ended_at timestamp
            status string
            was_cancelled boolean
            error_summary_json string
            ingest_warnings_json string
            artifact_uri string
            random_seed bigint
            variant string
            distribution string
            prefix_ratio double
            prefix_ratio_actual double
            prefix_token_share double
            achievable_hit_rate double
            cache_state string
            turns bigint
            dataset_sha256 string
            dataset_uri string
            slo_ttft_ms double
            slo_itl_ms double
            aiperf_good_request_fraction double
            temperature double
            top_p double
            sampling_seed bigint
            thinking boolean
            client_issue_lag_p50_ms double
            client_issue_lag_p95_ms double
            client_lag_budget_ms double
            client_on_time_fraction double
            client_credit_to_start_p95_ms double
            client_effective_concurrency double
            client_cpu_cores double
            client_cpu_cores_available double
            client_cpu_wait_fraction double
            search_probe bigint
            search_json string
            """,
        ),
        _table(
            "requests",
            "one row per profiling-phase AIPerf record (warm-up excluded, failed requests kept)",
            _EXPERIMENT_PARTS,
            """
            campaign_id string
            experiment string
            step_id string
            repeat bigint
            request_index bigint
            x_request_id string
            conversation_id string
            turn_index bigint
            worker_id string
            start_ns bigint
            end_ns bigint
            ttft_ms double
            itl_ms double
            request_latency_ms double
            isl bigint
            osl bigint
            requested_isl bigint
            requested_osl bigint
            cached_tokens bigint
            output_tokens_per_s_user double
            error_code bigint
            error_type string
            error_message string
            was_cancelled boolean
            """,
        ),
        _table(
            "server_metrics",
            "step x metric x labels x stat: AIPerf's server_metrics_export.json, or our own scrapes",
            _EXPERIMENT_PARTS,
            # stat: AIPerf's per-series stat names (gauge avg/min/max/std/pNN, counter total/rate/...,
            # histogram count/sum/avg/pNN_estimate, "bucket" with an "le" label) or, for our own
            # Prometheus scrapes, before/after/delta.
            """
            campaign_id string
            experiment string
            step_id string
            repeat bigint
            source string
            endpoint_url string
            metric string
            metric_type string
            unit string
            labels_json string
            stat string
            value double
            """,
        ),
        _table(
            "timeline",
            "one event of a campaign (scale_requested, nodes_ready, deploy_applied, ready, ...)",
            _EXPERIMENT_PARTS,
            """
            campaign_id string
            experiment string
            event string
            at timestamp
            pool string
            detail_json string
            deployment string
            """,
        ),
        _table(
            "costs",
            "experiment x deployment x pool: node-hours, price and its source, output tokens, $/1M tokens",
            _EXPERIMENT_PARTS,
            """
            campaign_id string
            experiment string
            deployment string
            pool string
            gpu_kind string
            instance_type string
            nodes bigint
            node_hours double
            gpu_hours double
            price_per_node_hour_usd double
            price_source string
            fees_json string
            cost_usd double
            successful_output_tokens bigint
            usd_per_1m_output_tokens double
            simulated boolean
            """,
        ),
        _table(
            "quality",
            "experiment x question of the output-quality gate (benchctl.analysis.quality), run after the smoke test",
            _EXPERIMENT_PARTS,
            # expected/extracted: the question's answer and the one read from the reply (NULL: none found);
            # simulated: the local mocker (random tokens: the score is not meaningful, the gate not applied);
            # gate: passed | failed | not applied (SIMULATED); score_low/score_high: the experiment's score's 95 %
            # Wilson interval (repeated on each of its rows); kind: the question set; the sampling and thinking
            # settings sent.
            """
            campaign_id string
            experiment string
            question_id string
            question_index bigint
            prompt string
            expected bigint
            extracted bigint
            correct boolean
            finish_reason string
            error string
            content_head string
            min_score double
            gate string
            simulated boolean
            kind string
            score_low double
            score_high double
            temperature double
            top_p double
            sampling_seed bigint
            thinking boolean
            max_tokens bigint
            """,
        ),
        _table(
            "twins",
            "experiment x worker role: what timed the local mocker workers (benchctl.forecast.twin), SIMULATED figures",
            _EXPERIMENT_PARTS,
            # label: what the figures are ("SIMULATED on the a100_sxm TP4 twin (aiconfigurator 0.12.0, vllm
            # 0.14.0)"); profile: the store's name (null: the mocker's built-in timing, note says why);
            # provenance_json: the profile's provenance.json (aiconfigurator version, system, backend, grid, ...)
            """
            campaign_id string
            experiment string
            role string
            choice string
            profile string
            label string
            num_gpu_blocks bigint
            provenance_json string
            note string
            """,
        ),
        _table(
            "predictions",
            "experiment x concurrency-sweep step: figures PREDICTED by aiconfigurator before spending, not measured",
            _EXPERIMENT_PARTS,
            # predicted_*: the whole experiment at the step's concurrency (all its GPUs); predicted_ttft_ms
            # includes predicted_queue_ms, the closed loop's wait before the first token (benchctl.forecast.predict);
            # memory_gb_per_gpu: aiconfigurator's estimate (GiB, the larger of prefill/decode); fits_memory:
            # against the pool's GPU memory; within_slo: predicted TTFT and ITL both within the spec's SLO;
            # null figures with a note when no prediction could be made (unknown GPU, ...).
            """
            campaign_id string
            experiment string
            step_id string
            workload string
            concurrency bigint
            isl bigint
            osl bigint
            system string
            decode_system string
            mode string
            tp bigint
            predicted_ttft_ms double
            predicted_itl_ms double
            predicted_output_tokens_per_s double
            predicted_tokens_per_s_per_gpu double
            memory_gb_per_gpu double
            fits_memory boolean
            predicted_queue_ms double
            within_slo boolean
            source string
            note string
            """,
        ),
        _table(
            "tuning",
            "tuned arm x candidate configuration searched: the tune phase's prediction, its pilot's measurement, the choice",
            _EXPERIMENT_PARTS,
            # experiment: the arm; candidate: its layout (w4x2: 4 workers at TP 2; p3x1-d1x1: prefill/decode replicas
            # x TP); pilot: the experiment that measured it (null: not piloted); predicted_edge: the highest
            # concurrency aiconfigurator predicts within the SLO, predicted_goodput_rps the requests/s there
            # (benchctl.forecast.tune); measured_edge: the highest pilot load up to which every load's SLO attainment
            # is shown (Wilson lower bound) to reach comparison.slo_attainment, measured_goodput_rps its requests
            # within the SLO per second (benchctl.campaign.tuning); chosen: the arm ran at it, why says why.
            """
            campaign_id string
            experiment string
            candidate string
            pilot string
            given boolean
            gpus bigint
            workers_json string
            predicted_edge bigint
            predicted_goodput_rps double
            fits_memory boolean
            measured_edge bigint
            measured_goodput_rps double
            measured_loads_json string
            chosen boolean
            why string
            note string
            """,
        ),
    )
}
