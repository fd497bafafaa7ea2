-- v_sequence_distribution: how each length distribution behaves, per experiment, overall and by
-- input-length bucket (does serving stay stable on long sequences?).
-- One row per campaign x sequence-distribution workload x distribution x experiment x bucket, where
-- isl_bucket is 'all' or a power-of-two range of the request's ACTUAL input length ('1024-2047').
-- Requests without an error, over every repeat; sample counts in n_requests.
--   ttft_p50_ms/_p99_ms, ttft_cv              TTFT percentiles and coefficient of variation
--   tps_user_p50/_p99, tps_user_cv            per-request generation speed (AIPerf's
--                                             output_token_throughput_per_user, tokens/s)
--   requested_isl_mean / actual_isl_mean      what the dataset asked for vs what was sent
--   requested_osl_mean / actual_osl_mean      ... and produced
--   output_tokens_per_s                       total output tokens/s (AIPerf's step figure, 'all' only)
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH sd_steps AS (
    SELECT campaign_id, experiment, mode, workload, distribution, step_id, output_tokens_per_s
    FROM v_step_stats
    WHERE workload_kind = 'sequence_distribution' AND status = 'succeeded'
),
ok AS (
    SELECT s.campaign_id, s.experiment, s.mode, s.workload, s.distribution, r.ttft_ms,
           r.output_tokens_per_s_user AS tps_user, r.isl, r.osl, r.requested_isl, r.requested_osl,
           cast(power(2, floor(log2(greatest(r.isl, 1)))) AS bigint) AS bucket_lo
    FROM requests r
    JOIN sd_steps s
        ON s.campaign_id = r.campaign_id AND s.experiment = r.experiment AND s.step_id = r.step_id
    WHERE r.error_type IS NULL AND r.error_code IS NULL
),
labelled AS (
    SELECT ok.*, 'all' AS isl_bucket, 0 AS bucket_order FROM ok
    UNION ALL
    SELECT ok.*, cast(bucket_lo AS varchar) || '-' || cast(2 * bucket_lo - 1 AS varchar) AS isl_bucket,
           bucket_lo AS bucket_order
    FROM ok
),
step_tps AS (
    SELECT campaign_id, experiment, workload, distribution, avg(output_tokens_per_s) AS output_tokens_per_s
    FROM sd_steps
    GROUP BY campaign_id, experiment, workload, distribution
)
SELECT
    l.campaign_id,
    l.workload,
    l.distribution,
    l.experiment,
    l.mode,
    l.isl_bucket,
    count(*) AS n_requests,
    approx_percentile(l.ttft_ms, 0.5) AS ttft_p50_ms,
    approx_percentile(l.ttft_ms, 0.99) AS ttft_p99_ms,
    stddev_samp(l.ttft_ms) / nullif(avg(l.ttft_ms), 0) AS ttft_cv,
    approx_percentile(l.tps_user, 0.5) AS tps_user_p50,
    approx_percentile(l.tps_user, 0.99) AS tps_user_p99,
    stddev_samp(l.tps_user) / nullif(avg(l.tps_user), 0) AS tps_user_cv,
    avg(l.requested_isl) AS requested_isl_mean,
    avg(l.isl) AS actual_isl_mean,
    avg(l.requested_osl) AS requested_osl_mean,
    avg(l.osl) AS actual_osl_mean,
    CASE WHEN l.isl_bucket = 'all' THEN max(t.output_tokens_per_s) END AS output_tokens_per_s
FROM labelled l
LEFT JOIN step_tps t
    ON t.campaign_id = l.campaign_id AND t.experiment = l.experiment AND t.workload = l.workload
    AND t.distribution = l.distribution
GROUP BY l.campaign_id, l.workload, l.distribution, l.experiment, l.mode, l.isl_bucket, l.bucket_order
ORDER BY l.campaign_id, l.workload, l.distribution, l.experiment, l.bucket_order
