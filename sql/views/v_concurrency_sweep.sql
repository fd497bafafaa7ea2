-- v_concurrency_sweep: the seeds' table, aggregated vs disaggregated side by side per concurrency.
-- One row per campaign x comparison (the comparisons table: an aggregated and a disaggregated experiment
-- the spec, or the default pairing, compares; never every aggregated one with every disaggregated one)
-- x sweep workload (with its ISL/OSL) x concurrency.
-- Each figure is the mean over repeats of AIPerf's own per-step statistic; *_sd is the standard
-- deviation across repeats (NULL with one repeat); agg_n_repeats / disagg_n_repeats per side and
-- n_repeats = the smaller of the two (it bounds the evidence); agg_n_steps/disagg_n_steps and
-- *_n_requests are the sample counts behind them. Goodput: mean share of requests meeting the spec's
-- SLO (see v_step_stats), over every attempted step: a failed request, or a step that ended with none
-- completed, is a miss (*_error_rate: the largest error rate of the load's steps). Latency percentiles and
-- throughputs only from valid steps (v_comparison_steps: succeeded, error rate within the comparison's
-- max_error_rate; *_n_steps counts them). The verdicts with their intervals: the report's Answers.
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH per_exp AS (
    SELECT
        campaign_id, comparison, comparison_index, questions, experiment, mode, workload, isl, osl, concurrency,
        count(CASE WHEN valid THEN 1 END) AS n_steps,
        count(DISTINCT CASE WHEN valid THEN "repeat" END) AS n_repeats,
        sum(CASE WHEN valid THEN n_requests END) AS n_requests,
        avg(CASE WHEN valid THEN ttft_p50_ms END) AS ttft_p50_ms,
        stddev_samp(CASE WHEN valid THEN ttft_p50_ms END) AS ttft_p50_ms_sd,
        avg(CASE WHEN valid THEN ttft_p99_ms END) AS ttft_p99_ms,
        stddev_samp(CASE WHEN valid THEN ttft_p99_ms END) AS ttft_p99_ms_sd,
        avg(CASE WHEN valid THEN itl_p50_ms END) AS itl_p50_ms,
        stddev_samp(CASE WHEN valid THEN itl_p50_ms END) AS itl_p50_ms_sd,
        avg(CASE WHEN valid THEN itl_p99_ms END) AS itl_p99_ms,
        avg(CASE WHEN valid THEN output_tokens_per_s END) AS output_tokens_per_s,
        stddev_samp(CASE WHEN valid THEN output_tokens_per_s END) AS output_tokens_per_s_sd,
        avg(CASE WHEN valid THEN request_latency_p50_ms END) AS request_latency_p50_ms,
        avg(coalesce(goodput_ratio, CASE WHEN status <> 'succeeded' AND coalesce(slo_ttft_ms, slo_itl_ms) IS NOT NULL THEN 0.0 END))
            AS goodput_ratio,
        stddev_samp(coalesce(goodput_ratio, CASE WHEN status <> 'succeeded' AND coalesce(slo_ttft_ms, slo_itl_ms) IS NOT NULL THEN 0.0 END))
            AS goodput_ratio_sd,
        max(error_rate) AS error_rate
    FROM v_comparison_steps
    WHERE attempted AND workload_kind = 'concurrency_sweep' AND concurrency IS NOT NULL
      AND ',' || differs || ',' LIKE '%,mode,%'
    GROUP BY campaign_id, comparison, comparison_index, questions, experiment, mode, workload, isl, osl, concurrency
),
agg AS (SELECT * FROM per_exp WHERE mode = 'aggregated'),
dis AS (SELECT * FROM per_exp WHERE mode = 'disaggregated')
SELECT
    coalesce(a.campaign_id, d.campaign_id) AS campaign_id,
    coalesce(a.comparison, d.comparison) AS comparison,
    coalesce(a.workload, d.workload) AS workload,
    coalesce(a.isl, d.isl) AS isl,
    coalesce(a.osl, d.osl) AS osl,
    coalesce(a.concurrency, d.concurrency) AS concurrency,
    least(coalesce(a.n_repeats, 0), coalesce(d.n_repeats, 0)) AS n_repeats,
    coalesce(a.n_repeats, 0) AS agg_n_repeats,
    coalesce(d.n_repeats, 0) AS disagg_n_repeats,
    coalesce(a.n_steps, 0) AS agg_n_steps,
    coalesce(d.n_steps, 0) AS disagg_n_steps,
    a.ttft_p50_ms AS agg_ttft_p50_ms,
    d.ttft_p50_ms AS disagg_ttft_p50_ms,
    a.ttft_p99_ms AS agg_ttft_p99_ms,
    d.ttft_p99_ms AS disagg_ttft_p99_ms,
    a.itl_p50_ms AS agg_itl_p50_ms,
    d.itl_p50_ms AS disagg_itl_p50_ms,
    a.itl_p99_ms AS agg_itl_p99_ms,
    d.itl_p99_ms AS disagg_itl_p99_ms,
    a.output_tokens_per_s AS agg_output_tokens_per_s,
    d.output_tokens_per_s AS disagg_output_tokens_per_s,
    a.request_latency_p50_ms AS agg_request_latency_p50_ms,
    d.request_latency_p50_ms AS disagg_request_latency_p50_ms,
    a.goodput_ratio AS agg_goodput_ratio,
    d.goodput_ratio AS disagg_goodput_ratio,
    a.error_rate AS agg_error_rate,
    d.error_rate AS disagg_error_rate,
    a.ttft_p50_ms_sd AS agg_ttft_p50_ms_sd,
    d.ttft_p50_ms_sd AS disagg_ttft_p50_ms_sd,
    a.ttft_p99_ms_sd AS agg_ttft_p99_ms_sd,
    d.ttft_p99_ms_sd AS disagg_ttft_p99_ms_sd,
    a.itl_p50_ms_sd AS agg_itl_p50_ms_sd,
    d.itl_p50_ms_sd AS disagg_itl_p50_ms_sd,
    a.output_tokens_per_s_sd AS agg_output_tokens_per_s_sd,
    d.output_tokens_per_s_sd AS disagg_output_tokens_per_s_sd,
    a.goodput_ratio_sd AS agg_goodput_ratio_sd,
    d.goodput_ratio_sd AS disagg_goodput_ratio_sd,
    a.n_requests AS agg_n_requests,
    d.n_requests AS disagg_n_requests,
    a.experiment AS agg_experiment,
    d.experiment AS disagg_experiment
FROM agg a
FULL OUTER JOIN dis d
    ON a.campaign_id = d.campaign_id AND a.comparison = d.comparison AND a.workload = d.workload
    AND a.isl = d.isl AND a.osl = d.osl AND a.concurrency = d.concurrency
ORDER BY 1, coalesce(a.comparison_index, d.comparison_index), 3, 4, 5, 6
