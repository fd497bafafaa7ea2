-- v_concurrency_sweep: the seeds' table, aggregated vs disaggregated side by side per concurrency.
-- One row per campaign x comparison (the comparisons table: an aggregated and a disaggregated experiment
-- the spec, or the default pairing, compares; never every aggregated one with every disaggregated one)
-- x sweep workload (with its ISL/OSL) x concurrency.
-- Each figure is the mean over repeats of AIPerf's own per-step statistic; *_sd is the standard
-- deviation across repeats (NULL with one repeat); agg_n_repeats / disagg_n_repeats per side and
-- n_repeats = the smaller of the two (it bounds the evidence); agg_n_steps/disagg_n_steps and
-- *_n_requests are the sample counts behind them. Goodput: mean share of requests meeting the spec's
-- SLO (see v_step_stats). Only valid steps count (v_comparison_steps: succeeded, error rate within the
-- comparison's max_error_rate). The verdicts with their intervals: the report's Answers.
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH per_exp AS (
    SELECT
        campaign_id, comparison, comparison_index, questions, experiment, mode, workload, isl, osl, concurrency,
        count(*) AS n_steps,
        count(DISTINCT "repeat") AS n_repeats,
        sum(n_requests) AS n_requests,
        avg(ttft_p50_ms) AS ttft_p50_ms,
        stddev_samp(ttft_p50_ms) AS ttft_p50_ms_sd,
        avg(ttft_p99_ms) AS ttft_p99_ms,
        stddev_samp(ttft_p99_ms) AS ttft_p99_ms_sd,
        avg(itl_p50_ms) AS itl_p50_ms,
        stddev_samp(itl_p50_ms) AS itl_p50_ms_sd,
        avg(itl_p99_ms) AS itl_p99_ms,
        avg(output_tokens_per_s) AS output_tokens_per_s,
        stddev_samp(output_tokens_per_s) AS output_tokens_per_s_sd,
        avg(request_latency_p50_ms) AS request_latency_p50_ms,
        avg(goodput_ratio) AS goodput_ratio,
        stddev_samp(goodput_ratio) AS goodput_ratio_sd
    FROM v_comparison_steps
    WHERE valid AND workload_kind = 'concurrency_sweep' AND concurrency IS NOT NULL
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
