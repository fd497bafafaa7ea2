-- v_concurrency_sweep: aggregated vs disaggregated, side by side, per concurrency.
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
-- One row per campaign x sweep workload (with its ISL/OSL) x concurrency; each figure is the mean
-- over repeats of AIPerf's own per-step statistic (n_repeats; agg_n_steps/disagg_n_steps count the
-- steps behind each side). Only succeeded steps count.
-- workload_kind holds the workload's kind (spec `kind`); rows written without it are taken as
-- concurrency sweeps, the only kind the spec had when the column was added.
SELECT
    campaign_id,
    workload,
    isl,
    osl,
    concurrency,
    count(DISTINCT "repeat") AS n_repeats,
    count(CASE WHEN mode = 'aggregated' THEN 1 END) AS agg_n_steps,
    count(CASE WHEN mode = 'disaggregated' THEN 1 END) AS disagg_n_steps,
    avg(CASE WHEN mode = 'aggregated' THEN ttft_p50_ms END) AS agg_ttft_p50_ms,
    avg(CASE WHEN mode = 'disaggregated' THEN ttft_p50_ms END) AS disagg_ttft_p50_ms,
    avg(CASE WHEN mode = 'aggregated' THEN ttft_p99_ms END) AS agg_ttft_p99_ms,
    avg(CASE WHEN mode = 'disaggregated' THEN ttft_p99_ms END) AS disagg_ttft_p99_ms,
    avg(CASE WHEN mode = 'aggregated' THEN itl_p50_ms END) AS agg_itl_p50_ms,
    avg(CASE WHEN mode = 'disaggregated' THEN itl_p50_ms END) AS disagg_itl_p50_ms,
    avg(CASE WHEN mode = 'aggregated' THEN itl_p99_ms END) AS agg_itl_p99_ms,
    avg(CASE WHEN mode = 'disaggregated' THEN itl_p99_ms END) AS disagg_itl_p99_ms,
    avg(CASE WHEN mode = 'aggregated' THEN output_tokens_per_s END) AS agg_output_tokens_per_s,
    avg(CASE WHEN mode = 'disaggregated' THEN output_tokens_per_s END) AS disagg_output_tokens_per_s,
    avg(CASE WHEN mode = 'aggregated' THEN request_latency_p50_ms END) AS agg_request_latency_p50_ms,
    avg(CASE WHEN mode = 'disaggregated' THEN request_latency_p50_ms END) AS disagg_request_latency_p50_ms
FROM steps
WHERE status = 'succeeded'
  AND coalesce(workload_kind, 'concurrency_sweep') = 'concurrency_sweep'
  AND concurrency IS NOT NULL
GROUP BY campaign_id, workload, isl, osl, concurrency
ORDER BY campaign_id, workload, isl, osl, concurrency
