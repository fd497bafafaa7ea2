-- v_step_cache: the server's own KV cache figures per step, from the metrics scraped during the
-- load (AIPerf's server_metrics export of the frontend and every worker; never estimated from the
-- client). Token figures are sums over the step's profiling window. docs/METRICS.md lists every meter.
--
-- ONE meter per engine, the same in both modes (cache_hit_rate, named by cache_meter):
--   vLLM workers (AWS)     vllm:prefix_cache_hits / vllm:prefix_cache_queries (counters, tokens) of the
--                          workers that compute prefill: the aggregated workers, the disaggregated prefill
--                          workers (decode workers look the prompt up again when its KV arrives: left out)
--   the CPU engine         the same vLLM counters, from vLLM's CPU build (local, engine: vllm on a CPU pool):
--                          SIMULATED (CPU engine); chosen wherever the counters are there
--   the Dynamo mocker      SIMULATED: the KV router's selected prefix, router_cached_tokens / input_tokens
--   (local engine, or      (the mocker exports no prefix-cache counter; the router's series exists in both
--   engine: mocker)        modes, phase "aggregated" or "prefill"); NULL without the KV router
-- The other meters stay beside it for reference, never mixed into cache_hit_rate:
--   input_tokens             dynamo_frontend_input_sequence_tokens (histogram sum)
--   frontend_cached_tokens   dynamo_frontend_cached_tokens (histogram sum): cached prompt tokens the
--                            workers reported; aggregated mode only (0 when prefill is disaggregated)
--   router_cached_tokens     dynamo_component_router_kv_selected_cached_prefix_tokens (counter), the
--                            aggregated or prefill-side series: the cached prefix of the worker the KV router
--                            chose (its index's view at routing time); KV router only
--   vllm_prefix_hits / vllm_prefix_queries   vllm:prefix_cache_hits / _queries of the prefill-side workers
--   frontend_cache_hit_rate, router_cache_hit_rate, vllm_cache_hit_rate   each meter's own ratio
--   router_kv_hit_rate_avg   dynamo_component_router_kv_hit_rate (histogram avg): block-level overlap
--   kv_usage_avg / _max      vllm:kv_cache_usage_perc over the workers (0..1)
--   preemptions              vllm:num_preemptions (counter total, every worker): requests the scheduler
--                            preempted for lack of KV blocks (their KV is dropped and recomputed when they
--                            resume). Preemptions, not prefix-cache evictions: no backend exports those
--   offload_blocks           every kvbm_offload_blocks_* counter (KVBM only; per tier in v_kv_offload)
-- Compare cache_hit_rate with prefix_ratio (the input's duplication): they are different things.
-- The step's starting cache state (prefix-cache and multi-turn steps; benchctl/planning/cache_state.py):
--   cache_state              'namespaced: ...': the step's prompts share nothing with any other step (no reset
--                            is reachable in Dynamo 1.6.1: the frontend serves no clear_kv_blocks route, the
--                            mocker has no reset)
--   first_requests, first_requests_hit_rate   its first `concurrency` requests by start time: their cached
--                            prompt tokens reported to the client / their input tokens (the only per-request
--                            cache evidence; the server's meters are step totals). They are sent together onto
--                            the cache the step found, so on a dataset sharing nothing within itself (ratio 0)
--                            any hit is a block an earlier step left: ~0 is a cold start. Aggregated mode only
--                            (NULL when disaggregated: the client is told 0 there)
--   achievable_hit_rate      the best hit rate any cache could reach on the dataset (v_prefix_cache)
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH sm AS (
    SELECT
        campaign_id,
        experiment,
        step_id,
        metric,
        stat,
        value,
        json_extract_scalar(labels_json, '$.phase') AS phase,
        CASE
            WHEN source LIKE 'decode%' THEN 'decode'
            WHEN source LIKE 'prefill%' THEN 'prefill'
            WHEN source LIKE 'worker%' THEN 'worker'
            ELSE 'other'
        END AS role
    FROM server_metrics
),
m AS (
    SELECT
        campaign_id, experiment, step_id,
        sum(CASE WHEN metric = 'dynamo_frontend_input_sequence_tokens' AND stat = 'sum' THEN value END)
            AS input_tokens,
        sum(CASE WHEN metric = 'dynamo_frontend_cached_tokens' AND stat = 'sum' THEN value END)
            AS frontend_cached_tokens,
        sum(
            CASE
                WHEN metric = 'dynamo_component_router_kv_selected_cached_prefix_tokens' AND stat = 'total'
                    AND coalesce(phase, 'prefill') <> 'decode'
                THEN value
            END
        ) AS router_cached_tokens,
        sum(CASE WHEN metric = 'vllm:prefix_cache_hits' AND stat = 'total' AND role IN ('worker', 'prefill')
                 THEN value END) AS vllm_prefix_hits,
        sum(CASE WHEN metric = 'vllm:prefix_cache_queries' AND stat = 'total' AND role IN ('worker', 'prefill')
                 THEN value END) AS vllm_prefix_queries,
        avg(CASE WHEN metric = 'dynamo_component_router_kv_hit_rate' AND stat = 'avg' THEN value END)
            AS router_kv_hit_rate_avg,
        avg(CASE WHEN metric = 'vllm:kv_cache_usage_perc' AND stat = 'avg' THEN value END) AS kv_usage_avg,
        max(CASE WHEN metric = 'vllm:kv_cache_usage_perc' AND stat = 'max' THEN value END) AS kv_usage_max,
        sum(CASE WHEN metric = 'vllm:num_preemptions' AND stat = 'total' THEN value END) AS preemptions,
        sum(CASE WHEN metric LIKE 'kvbm_offload_blocks%' AND stat = 'total' THEN value END) AS offload_blocks
    FROM sm
    GROUP BY campaign_id, experiment, step_id
),
ordered AS (
    SELECT
        q.campaign_id, q.experiment, q.step_id, q.cached_tokens, q.isl, st.concurrency,
        row_number() OVER (PARTITION BY q.campaign_id, q.experiment, q.step_id
                           ORDER BY q.start_ns, q.request_index) AS n
    FROM requests q
    JOIN steps st ON st.campaign_id = q.campaign_id AND st.experiment = q.experiment AND st.step_id = q.step_id
    WHERE q.cached_tokens IS NOT NULL AND q.isl IS NOT NULL AND q.start_ns IS NOT NULL
),
first AS (
    SELECT campaign_id, experiment, step_id, count(*) AS first_requests,
           sum(cached_tokens) AS first_cached_tokens, sum(isl) AS first_input_tokens
    FROM ordered
    WHERE n <= greatest(coalesce(concurrency, 1), 1)
    GROUP BY campaign_id, experiment, step_id
),
r AS (
    SELECT
        s.campaign_id, s.experiment, s.mode, s.router, s.workload, s.workload_kind, s.variant, s.step_id,
        s."repeat", s.status, s.prefix_ratio, s.prefix_ratio_actual, s.client_cache_hit_rate,
        s.achievable_hit_rate, s.cache_state, f.first_requests,
        CASE WHEN s.mode = 'aggregated'
             THEN cast(f.first_cached_tokens AS double) / nullif(f.first_input_tokens, 0)
        END AS first_requests_hit_rate,
        coalesce(c.simulated, false) AS simulated,
        m.input_tokens,
        m.frontend_cached_tokens,
        m.router_cached_tokens,
        m.vllm_prefix_hits,
        m.vllm_prefix_queries,
        m.frontend_cached_tokens / nullif(m.input_tokens, 0) AS frontend_cache_hit_rate,
        m.router_cached_tokens / nullif(m.input_tokens, 0) AS router_cache_hit_rate,
        m.vllm_prefix_hits / nullif(m.vllm_prefix_queries, 0) AS vllm_cache_hit_rate,
        m.router_kv_hit_rate_avg,
        m.kv_usage_avg,
        m.kv_usage_max,
        m.preemptions,
        m.offload_blocks
    FROM v_step_stats s
    LEFT JOIN m
        ON m.campaign_id = s.campaign_id AND m.experiment = s.experiment AND m.step_id = s.step_id
    LEFT JOIN campaigns c ON c.campaign_id = s.campaign_id
    LEFT JOIN first f ON f.campaign_id = s.campaign_id AND f.experiment = s.experiment AND f.step_id = s.step_id
)
SELECT
    campaign_id,
    experiment,
    mode,
    router,
    workload,
    workload_kind,
    variant,
    step_id,
    "repeat",
    status,
    prefix_ratio,
    prefix_ratio_actual,
    CASE
        WHEN NOT simulated OR vllm_prefix_queries IS NOT NULL THEN vllm_cache_hit_rate
        WHEN router IS NULL OR router = 'kv' THEN router_cache_hit_rate
    END AS cache_hit_rate,
    CASE
        WHEN NOT simulated THEN 'vllm:prefix_cache_hits/queries'
        WHEN vllm_prefix_queries IS NOT NULL THEN 'SIMULATED (CPU engine): vllm:prefix_cache_hits/queries'
        WHEN router IS NULL OR router = 'kv' THEN 'SIMULATED: router selected prefix'
        ELSE 'none: SIMULATED without the KV router'
    END AS cache_meter,
    input_tokens,
    frontend_cached_tokens,
    router_cached_tokens,
    vllm_prefix_hits,
    vllm_prefix_queries,
    frontend_cache_hit_rate,
    router_cache_hit_rate,
    vllm_cache_hit_rate,
    client_cache_hit_rate,
    cache_state,
    first_requests,
    first_requests_hit_rate,
    achievable_hit_rate,
    router_kv_hit_rate_avg,
    kv_usage_avg,
    kv_usage_max,
    preemptions,
    offload_blocks,
    simulated
FROM r
ORDER BY campaign_id, experiment, step_id
