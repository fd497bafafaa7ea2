-- v_step_stats: one row per AIPerf step, the building block of the comparison views.
-- AIPerf's own statistics (from steps) plus what is derived from the step's requests and the
-- experiment's settings:
--   n_requests / n_ok      profiling-phase requests recorded / those without an error (a request AIPerf
--                          cancelled, e.g. in flight when its grace period ended, is not ok)
--   n_good                 requests that succeeded AND met every SLO bound the spec set (NULL without one)
--   error_rate             (n_requests - n_ok) / n_requests; without request records, AIPerf's
--                          error_count / (request_count + error_count)
--   goodput_ratio          share of the step's requests that succeeded AND met every SLO bound the
--                          spec set (slo.ttft_ms on TTFT, slo.itl_ms on the request's mean ITL);
--                          NULL when the spec sets no SLO
--   goodput_per_s          such requests per second of the benchmark
--   output_tokens_per_s_per_gpu   total output tokens/s over the experiment's GPUs
--   deployment             which deployment of the experiment ran the step (design.deployments: the
--                          plan entry's name, e.g. agg--d2; the experiment's own with one deployment)
--   client_on_time_fraction, client_issue_lag_p95_ms, client_lag_budget_ms, client_cpu_cores,
--   client_cpu_cores_available, client_effective_concurrency   whether the load generator kept up
--                          (steps; benchctl.lake.client_load judges a step client-bound from them)
--   client_cache_hit_rate  cached prompt tokens reported to the client / input tokens (AIPerf's
--                          usage_prompt_cache_read_tokens; stays 0 in disaggregated mode, see
--                          v_step_cache for the server's own figures)
--   achievable_hit_rate    the best hit rate any cache could reach on the step's dataset (steps; prefix-cache
--                          steps only: see v_prefix_cache)
--   cache_state            the KV cache state the step starts from (steps; every step:
--                          'namespaced: ...', its prompts share nothing with any other step, and why no reset)
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH req AS (
    SELECT
        r.campaign_id,
        r.experiment,
        r.step_id,
        count(*) AS n_requests,
        count(CASE WHEN r.error_type IS NULL AND r.error_code IS NULL AND NOT coalesce(r.was_cancelled, false)
                   THEN 1 END) AS n_ok,
        count(
            CASE
                WHEN r.error_type IS NULL AND r.error_code IS NULL AND NOT coalesce(r.was_cancelled, false)
                    AND (s.slo_ttft_ms IS NULL OR r.ttft_ms <= s.slo_ttft_ms)
                    AND (s.slo_itl_ms IS NULL OR r.itl_ms <= s.slo_itl_ms)
                THEN 1
            END
        ) AS n_good,
        sum(r.cached_tokens) AS cached_tokens,
        sum(CASE WHEN r.cached_tokens IS NOT NULL THEN r.isl END) AS input_tokens
    FROM requests r
    JOIN steps s
        ON s.campaign_id = r.campaign_id AND s.experiment = r.experiment AND s.step_id = r.step_id
    GROUP BY r.campaign_id, r.experiment, r.step_id
)
SELECT
    s.campaign_id,
    s.experiment,
    s.mode,
    e.router,
    e.kv_offload,
    e.gpus,
    s.workload,
    coalesce(s.workload_kind, 'concurrency_sweep') AS workload_kind,
    coalesce(s.variant, 'c' || cast(s.concurrency AS varchar)) AS variant,
    s.step_id,
    s."repeat",
    coalesce(s.deployment, s.experiment) AS deployment,
    s.status,
    s.concurrency,
    s.isl,
    s.osl,
    s.distribution,
    s.prefix_ratio,
    s.prefix_ratio_actual,
    s.achievable_hit_rate,
    s.cache_state,
    s.turns,
    s.dataset_sha256,
    s.random_seed,
    s.search_probe,
    s.request_count,
    s.error_count,
    coalesce(q.n_requests, 0) AS n_requests,
    coalesce(q.n_ok, 0) AS n_ok,
    coalesce(
        cast(q.n_requests - q.n_ok AS double) / nullif(q.n_requests, 0),
        cast(s.error_count AS double) / nullif(coalesce(s.request_count, 0) + s.error_count, 0)
    ) AS error_rate,
    s.ttft_p50_ms,
    s.ttft_p90_ms,
    s.ttft_p99_ms,
    s.itl_p50_ms,
    s.itl_p99_ms,
    s.request_latency_p50_ms,
    s.request_latency_p99_ms,
    s.output_tokens_per_s,
    s.request_throughput_per_s,
    s.output_tokens_per_s / nullif(e.gpus, 0) AS output_tokens_per_s_per_gpu,
    s.benchmark_duration_s,
    s.slo_ttft_ms,
    s.slo_itl_ms,
    CASE
        WHEN s.slo_ttft_ms IS NULL AND s.slo_itl_ms IS NULL THEN NULL
        ELSE coalesce(q.n_good, 0)
    END AS n_good,
    CASE
        WHEN s.slo_ttft_ms IS NULL AND s.slo_itl_ms IS NULL THEN NULL
        ELSE cast(q.n_good AS double) / nullif(q.n_requests, 0)
    END AS goodput_ratio,
    CASE
        WHEN s.slo_ttft_ms IS NULL AND s.slo_itl_ms IS NULL THEN NULL
        ELSE q.n_good / nullif(s.benchmark_duration_s, 0)
    END AS goodput_per_s,
    cast(q.cached_tokens AS double) / nullif(q.input_tokens, 0) AS client_cache_hit_rate,
    s.client_on_time_fraction,
    s.client_issue_lag_p95_ms,
    s.client_lag_budget_ms,
    s.client_cpu_cores,
    s.client_cpu_cores_available,
    s.client_effective_concurrency
FROM steps s
LEFT JOIN req q
    ON q.campaign_id = s.campaign_id AND q.experiment = s.experiment AND q.step_id = s.step_id
LEFT JOIN experiments e
    ON e.campaign_id = s.campaign_id AND e.experiment = s.experiment
