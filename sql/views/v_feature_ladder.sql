-- v_feature_ladder: what each ladder rung's ONE changed feature did, relative to its base.
-- One row per campaign x rung (an experiment with a base) x workload x variant both ran.
-- Means over repeats of succeeded steps; *_change_pct = (rung - base) / base x 100 (negative TTFT
-- change = faster first token; positive throughput change = more tokens/s).
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH per_exp AS (
    SELECT s.campaign_id, s.experiment, s.workload, s.workload_kind, s.variant,
           count(DISTINCT s."repeat") AS n_repeats,
           avg(s.ttft_p50_ms) AS ttft_p50_ms,
           avg(s.itl_p50_ms) AS itl_p50_ms,
           avg(s.output_tokens_per_s) AS output_tokens_per_s,
           avg(c.cache_hit_rate) AS cache_hit_rate
    FROM v_step_stats s
    LEFT JOIN v_step_cache c
        ON c.campaign_id = s.campaign_id AND c.experiment = s.experiment AND c.step_id = s.step_id
    WHERE s.status = 'succeeded'
    GROUP BY s.campaign_id, s.experiment, s.workload, s.workload_kind, s.variant
)
SELECT
    e.campaign_id,
    e.experiment,
    e.base_experiment,
    e.changed_feature,
    r.workload,
    r.workload_kind,
    r.variant,
    least(r.n_repeats, b.n_repeats) AS n_repeats,
    b.ttft_p50_ms AS base_ttft_p50_ms,
    r.ttft_p50_ms AS ttft_p50_ms,
    100.0 * (r.ttft_p50_ms - b.ttft_p50_ms) / nullif(b.ttft_p50_ms, 0) AS ttft_p50_change_pct,
    b.itl_p50_ms AS base_itl_p50_ms,
    r.itl_p50_ms AS itl_p50_ms,
    b.output_tokens_per_s AS base_output_tokens_per_s,
    r.output_tokens_per_s AS output_tokens_per_s,
    100.0 * (r.output_tokens_per_s - b.output_tokens_per_s) / nullif(b.output_tokens_per_s, 0)
        AS output_tokens_per_s_change_pct,
    b.cache_hit_rate AS base_cache_hit_rate,
    r.cache_hit_rate AS cache_hit_rate
FROM experiments e
JOIN per_exp r ON r.campaign_id = e.campaign_id AND r.experiment = e.experiment
JOIN per_exp b
    ON b.campaign_id = e.campaign_id AND b.experiment = e.base_experiment AND b.workload = r.workload
    AND b.variant = r.variant
WHERE e.base_experiment IS NOT NULL
ORDER BY e.campaign_id, e.experiment_index, r.workload, r.variant
