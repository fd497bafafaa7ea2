-- v_prefix_cache: the seeds' prefix-cache table. Per input prefix duplication ratio, aggregated vs
-- disaggregated side by side: TTFT, its improvement over the same experiment's ratio-0 step, and the
-- cache hit rate three ways: duplication -> achievable -> measured. The input duplication ratio, the best
-- hit rate any cache could reach on the dataset, and the server's measured rate (they differ: the first
-- requests of a step find a cold cache; blocks are cached whole; requests in flight are not cached yet).
-- One row per campaign x comparison (an aggregated and a disaggregated experiment of the comparisons
-- table) x prefix workload x ratio; means over repeats of valid steps (v_comparison_steps; n_repeats: the
-- smaller side's, agg_n_repeats / disagg_n_repeats per side; *_sd = standard deviation across repeats),
-- cache figures from v_step_cache.
--   achievable_hit_rate      the step's dataset in send order through an infinite cache that keeps every block:
--                            a request's block i hits when the same block-aligned prefix (its hash ids 0..i, the
--                            chain) was in an earlier request; hit blocks' tokens / input tokens (whole blocks
--                            only: the last partial block never hits). Computed when the dataset is generated
--                            (benchctl/planning/datasets.py achievable_hit_rate); an UPPER bound (under
--                            concurrency some earlier requests are still in flight). One dataset for both sides
--   *_first_requests_hit_rate   the hit rate of each step's first `concurrency` requests (v_step_cache;
--                            aggregated only): ~0 at ratio 0 shows the step started from a cold cache
--   cache_state              how the steps' cache state is known (steps.cache_state: 'namespaced: ...')
--   *_ttft_improvement_pct   (TTFT p50 at ratio 0 - TTFT p50 at this ratio) / TTFT p50 at ratio 0 x 100
--   *_cache_hit_rate         server-measured hit rate, one meter in both modes (v_step_cache.cache_hit_rate, its cache_meter)
--   *_client_cache_hit_rate  cached tokens reported to the client / input tokens (aggregated only)
--   *_kv_usage_max, *_preemptions   KV cache pressure where the backend exposes it
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH per_exp AS (
    SELECT
        campaign_id, comparison, comparison_index, experiment, mode, workload, prefix_ratio,
        avg(prefix_ratio_actual) AS prefix_ratio_actual,
        avg(achievable_hit_rate) AS achievable_hit_rate,
        avg(first_requests_hit_rate) AS first_requests_hit_rate,
        min(split_part(cache_state, ':', 1)) AS cache_state,
        count(DISTINCT "repeat") AS n_repeats,
        avg(ttft_p50_ms) AS ttft_p50_ms,
        stddev_samp(ttft_p50_ms) AS ttft_p50_ms_sd,
        avg(ttft_p99_ms) AS ttft_p99_ms,
        avg(cache_hit_rate) AS cache_hit_rate,
        stddev_samp(cache_hit_rate) AS cache_hit_rate_sd,
        avg(client_cache_hit_rate) AS client_cache_hit_rate,
        max(kv_usage_max) AS kv_usage_max,
        sum(preemptions) AS preemptions
    FROM v_comparison_steps
    WHERE valid AND workload_kind = 'prefix_cache' AND ',' || differs || ',' LIKE '%,mode,%'
    GROUP BY campaign_id, comparison, comparison_index, experiment, mode, workload, prefix_ratio
),
with_base AS (
    SELECT p.*,
           100.0 * (b.ttft_p50_ms - p.ttft_p50_ms) / nullif(b.ttft_p50_ms, 0) AS ttft_improvement_pct
    FROM per_exp p
    LEFT JOIN per_exp b
        ON b.campaign_id = p.campaign_id AND b.comparison = p.comparison AND b.experiment = p.experiment
        AND b.workload = p.workload AND b.prefix_ratio = 0
),
agg AS (SELECT * FROM with_base WHERE mode = 'aggregated'),
dis AS (SELECT * FROM with_base WHERE mode = 'disaggregated')
SELECT
    coalesce(a.campaign_id, d.campaign_id) AS campaign_id,
    coalesce(a.comparison, d.comparison) AS comparison,
    coalesce(a.workload, d.workload) AS workload,
    coalesce(a.prefix_ratio, d.prefix_ratio) AS prefix_ratio,
    coalesce(a.prefix_ratio_actual, d.prefix_ratio_actual) AS prefix_ratio_actual,
    coalesce(a.achievable_hit_rate, d.achievable_hit_rate) AS achievable_hit_rate,
    least(coalesce(a.n_repeats, 0), coalesce(d.n_repeats, 0)) AS n_repeats,
    coalesce(a.n_repeats, 0) AS agg_n_repeats,
    coalesce(d.n_repeats, 0) AS disagg_n_repeats,
    a.ttft_p50_ms AS agg_ttft_p50_ms,
    d.ttft_p50_ms AS disagg_ttft_p50_ms,
    a.ttft_p99_ms AS agg_ttft_p99_ms,
    d.ttft_p99_ms AS disagg_ttft_p99_ms,
    a.ttft_improvement_pct AS agg_ttft_improvement_pct,
    d.ttft_improvement_pct AS disagg_ttft_improvement_pct,
    a.cache_hit_rate AS agg_cache_hit_rate,
    d.cache_hit_rate AS disagg_cache_hit_rate,
    a.client_cache_hit_rate AS agg_client_cache_hit_rate,
    a.first_requests_hit_rate AS agg_first_requests_hit_rate,
    coalesce(a.cache_state, d.cache_state) AS cache_state,
    a.kv_usage_max AS agg_kv_usage_max,
    d.kv_usage_max AS disagg_kv_usage_max,
    a.preemptions AS agg_preemptions,
    d.preemptions AS disagg_preemptions,
    a.ttft_p50_ms_sd AS agg_ttft_p50_ms_sd,
    d.ttft_p50_ms_sd AS disagg_ttft_p50_ms_sd,
    a.cache_hit_rate_sd AS agg_cache_hit_rate_sd,
    d.cache_hit_rate_sd AS disagg_cache_hit_rate_sd,
    a.experiment AS agg_experiment,
    d.experiment AS disagg_experiment
FROM agg a
FULL OUTER JOIN dis d
    ON a.campaign_id = d.campaign_id AND a.comparison = d.comparison AND a.workload = d.workload
    AND a.prefix_ratio = d.prefix_ratio
ORDER BY 1, coalesce(a.comparison_index, d.comparison_index), 3, 4
