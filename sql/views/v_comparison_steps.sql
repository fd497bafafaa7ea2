-- v_comparison_steps: every step of both sides of every comparison the campaign recorded (the comparisons
-- table, written at Plan from the spec's comparisons: or the default pairing; benchctl/comparisons.py),
-- with the step's figures, whether it counts, and the comparison's settings: what the verdicts
-- (benchctl/verdicts.py) and the side-by-side views (v_concurrency_sweep, v_prefix_cache, v_multi_turn)
-- read. One row per campaign x comparison x side x step.
--   side                  'baseline' | 'treatment' (treatment - baseline is what a verdict measures)
--   questions, differs    the plan's questions the comparison answers; what differs between its sides
--   valid, invalid_reason a step counts when it succeeded and its error rate (v_step_stats) is at most the
--                         comparison's max_error_rate; otherwise why not ('step failed', 'error rate above
--                         max_error_rate': compare error_rate with max_error_rate)
--   n_samples             requests behind the step's percentiles (successful requests recorded, else
--                         AIPerf's request_count): a tail percentile needs min_samples_p99 of them
--   attempted             the step ran its load (succeeded, or failed after starting it): goodput and SLO
--                         attainment count every attempted step, latency percentiles only valid ones
--   n_requests, n_good    requests recorded / those that succeeded within the SLO (goodput's count)
--   random_seed, dataset_sha256   what pairs a step with the other side's step of the same repeat
--   deployment            the deployment of the experiment that ran it (design.deployments): the level
--                         the verdicts judge a mode effect on when an experiment was deployed more than once
--   client_*              whether the load generator kept up (v_step_stats): a client-bound step is no
--                         measurement of its nominal load, and the verdicts leave it out
--   search_probe          a sweep's probe number (its load chosen by the SLO-edge search from what the
--                         sweep measured before it), NULL for a fixed load
--   gpu_usd_per_hour      the experiment's allocated nodes x their price (costs; NULL when unpriced)
--   usd_per_1m_output_tokens   gpu_usd_per_hour / (the step's output tokens/s x 3600) x 1e6: the cost of a
--                         million output tokens at this step's load, steady state (no start-up, warm-up or
--                         teardown time: cold start is reported apart, in v_cost_efficiency)
--   goodput_per_usd_hour  SLO-meeting requests/s per $/h of the experiment's nodes
--   cache_hit_rate, preemptions, offload_blocks, kv_usage_max   the server's cache figures (v_step_cache)
--   achievable_hit_rate, cache_state, first_requests_hit_rate   the step's cache state and its evidence
--                         (v_step_stats, v_step_cache)
--   kv_transfer_ms, kv_transfer_per_request_ms, kv_transfer_gbps, kv_transfer_source   the prefill ->
--                         decode transfer (v_kv_transfer): per NIXL transfer, per request, its bandwidth
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH sides AS (
    SELECT campaign_id, comparison, comparison_index, questions, differs, source, confidence,
           practical_threshold_pct, max_error_rate, slo_attainment, min_samples_p99, transfer_share_pct,
           queue_threshold, deployment_spread_pct, 'baseline' AS side, baseline AS experiment
    FROM comparisons
    UNION ALL
    SELECT campaign_id, comparison, comparison_index, questions, differs, source, confidence,
           practical_threshold_pct, max_error_rate, slo_attainment, min_samples_p99, transfer_share_pct,
           queue_threshold, deployment_spread_pct, 'treatment' AS side, treatment AS experiment
    FROM comparisons
),
deployment_price AS (
    -- each deployment's nodes x price (an experiment deployed twice holds one deployment's nodes at a time)
    SELECT
        campaign_id,
        experiment,
        coalesce(deployment, experiment) AS deployment,
        CASE WHEN count(price_per_node_hour_usd) = count(*) THEN sum(nodes * price_per_node_hour_usd) END
            AS gpu_usd_per_hour
    FROM costs
    GROUP BY campaign_id, experiment, coalesce(deployment, experiment)
),
price AS (
    SELECT
        campaign_id,
        experiment,
        CASE WHEN count(gpu_usd_per_hour) = count(*) THEN max(gpu_usd_per_hour) END AS gpu_usd_per_hour
    FROM deployment_price
    GROUP BY campaign_id, experiment
)
SELECT
    c.campaign_id,
    c.comparison,
    c.comparison_index,
    c.questions,
    c.differs,
    c.source,
    c.side,
    s.experiment,
    s.mode,
    s.router,
    s.kv_offload,
    s.gpus,
    s.workload,
    s.workload_kind,
    s.variant,
    s.step_id,
    s."repeat",
    s.deployment,
    s.status,
    s.concurrency,
    s.isl,
    s.osl,
    s.distribution,
    s.prefix_ratio,
    s.prefix_ratio_actual,
    s.turns,
    s.n_requests,
    s.n_ok,
    s.n_good,
    s.benchmark_duration_s,
    s.random_seed,
    s.dataset_sha256,
    s.search_probe,
    s.status IN ('succeeded', 'failed') AS attempted,
    coalesce(nullif(s.n_ok, 0), s.request_count) AS n_samples,
    s.error_rate,
    coalesce(s.status = 'succeeded', false) AND coalesce(s.error_rate, 0) <= c.max_error_rate AS valid,
    CASE
        WHEN s.status IS NULL OR s.status <> 'succeeded' THEN 'step ' || coalesce(s.status, 'without a status')
        WHEN coalesce(s.error_rate, 0) > c.max_error_rate THEN 'error rate above max_error_rate'
    END AS invalid_reason,
    s.ttft_p50_ms,
    s.ttft_p99_ms,
    s.itl_p50_ms,
    s.itl_p99_ms,
    s.request_latency_p50_ms,
    s.output_tokens_per_s,
    s.output_tokens_per_s_per_gpu,
    s.goodput_ratio,
    s.goodput_per_s,
    s.slo_ttft_ms,
    s.slo_itl_ms,
    s.client_cache_hit_rate,
    s.client_on_time_fraction,
    s.client_issue_lag_p95_ms,
    s.client_lag_budget_ms,
    s.client_cpu_cores,
    s.client_cpu_cores_available,
    s.client_effective_concurrency,
    s.achievable_hit_rate,
    s.cache_state,
    p.gpu_usd_per_hour,
    p.gpu_usd_per_hour / nullif(s.output_tokens_per_s * 3600, 0) * 1e6 AS usd_per_1m_output_tokens,
    s.goodput_per_s / nullif(p.gpu_usd_per_hour, 0) AS goodput_per_usd_hour,
    k.cache_hit_rate,
    k.first_requests_hit_rate,
    k.preemptions,
    k.offload_blocks,
    k.kv_usage_max,
    t.kv_transfer_ms,
    t.kv_transfer_per_request_ms,
    t.kv_transfer_gbps,
    t.kv_transfer_source,
    c.confidence,
    c.practical_threshold_pct,
    c.max_error_rate,
    c.slo_attainment,
    c.min_samples_p99,
    c.transfer_share_pct,
    c.queue_threshold,
    c.deployment_spread_pct
FROM sides c
JOIN v_step_stats s ON s.campaign_id = c.campaign_id AND s.experiment = c.experiment
LEFT JOIN price p ON p.campaign_id = s.campaign_id AND p.experiment = s.experiment
LEFT JOIN v_step_cache k ON k.campaign_id = s.campaign_id AND k.experiment = s.experiment AND k.step_id = s.step_id
LEFT JOIN v_kv_transfer t ON t.campaign_id = s.campaign_id AND t.experiment = s.experiment AND t.step_id = s.step_id
ORDER BY c.campaign_id, c.comparison_index, c.side, s.experiment, s.step_id
