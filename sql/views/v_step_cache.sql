-- v_step_cache: the server's own KV cache figures per step, from the metrics scraped during the
-- load (AIPerf's server_metrics export of the frontend and every worker; never estimated from the
-- client). Token figures are sums over the step's profiling window.
--   input_tokens             dynamo_frontend_input_sequence_tokens (histogram sum)
--   frontend_cached_tokens   dynamo_frontend_cached_tokens (histogram sum): cached prompt tokens the
--                            workers reported; aggregated mode only (0 when prefill is disaggregated)
--   router_cached_tokens     dynamo_component_router_kv_selected_cached_prefix_tokens (counter),
--                            prefill-side series: the cached prefix of the worker the KV router chose;
--                            KV router only
--   cache_hit_rate           the measured hit rate of the mode: frontend_cached_tokens / input_tokens
--                            when aggregated, router_cached_tokens / input_tokens when disaggregated
--   router_kv_hit_rate_avg   dynamo_component_router_kv_hit_rate (histogram avg): block-level overlap
--   kv_usage_avg / _max      vllm:kv_cache_usage_perc over the workers (0..1)
--   preemptions              vllm:num_preemptions (counter total), the eviction-under-pressure figure
--                            the backend exposes; offload_blocks: kvbm_offload_blocks_* (KVBM only)
-- Compare cache_hit_rate with prefix_ratio (the input's duplication): they are different things.
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH m AS (
    SELECT
        campaign_id, experiment, step_id,
        sum(CASE WHEN metric = 'dynamo_frontend_input_sequence_tokens' AND stat = 'sum' THEN value END)
            AS input_tokens,
        sum(CASE WHEN metric = 'dynamo_frontend_cached_tokens' AND stat = 'sum' THEN value END)
            AS frontend_cached_tokens,
        sum(
            CASE
                WHEN metric = 'dynamo_component_router_kv_selected_cached_prefix_tokens' AND stat = 'total'
                    AND coalesce(json_extract_scalar(labels_json, '$.phase'), 'prefill') <> 'decode'
                THEN value
            END
        ) AS router_cached_tokens,
        avg(CASE WHEN metric = 'dynamo_component_router_kv_hit_rate' AND stat = 'avg' THEN value END)
            AS router_kv_hit_rate_avg,
        avg(CASE WHEN metric = 'vllm:kv_cache_usage_perc' AND stat = 'avg' THEN value END) AS kv_usage_avg,
        max(CASE WHEN metric = 'vllm:kv_cache_usage_perc' AND stat = 'max' THEN value END) AS kv_usage_max,
        sum(CASE WHEN metric = 'vllm:num_preemptions' AND stat = 'total' THEN value END) AS preemptions,
        sum(CASE WHEN metric LIKE 'kvbm_offload_blocks%' AND stat = 'total' THEN value END) AS offload_blocks
    FROM server_metrics
    GROUP BY campaign_id, experiment, step_id
)
SELECT
    s.campaign_id,
    s.experiment,
    s.mode,
    s.router,
    s.workload,
    s.workload_kind,
    s.variant,
    s.step_id,
    s."repeat",
    s.status,
    s.prefix_ratio,
    s.prefix_ratio_actual,
    m.input_tokens,
    m.frontend_cached_tokens,
    m.router_cached_tokens,
    m.frontend_cached_tokens / nullif(m.input_tokens, 0) AS frontend_cache_hit_rate,
    m.router_cached_tokens / nullif(m.input_tokens, 0) AS router_cache_hit_rate,
    CASE
        WHEN s.mode = 'aggregated' THEN m.frontend_cached_tokens / nullif(m.input_tokens, 0)
        ELSE m.router_cached_tokens / nullif(m.input_tokens, 0)
    END AS cache_hit_rate,
    s.client_cache_hit_rate,
    m.router_kv_hit_rate_avg,
    m.kv_usage_avg,
    m.kv_usage_max,
    m.preemptions,
    m.offload_blocks
FROM v_step_stats s
LEFT JOIN m
    ON m.campaign_id = s.campaign_id AND m.experiment = s.experiment AND m.step_id = s.step_id
