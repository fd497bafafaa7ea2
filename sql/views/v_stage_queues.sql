-- v_stage_queues: per step, the queue depth at each serving stage and the GPUs' use, beside the step's
-- SLO attainment. One row per step. Figures come from the servers' /metrics sampled through the
-- step's profiling phase (AIPerf --server-metrics, server_metrics): *_avg = the time-average summed over
-- the stage's workers (the stage's mean depth), *_max = the highest sample of any one worker.
--   frontend_queued_avg/max       dynamo_frontend_queued_requests (the frontend's HTTP processing queue)
--   prefill_dispatch_max, decode_dispatch_max   dynamo_frontend_stage_requests{phase, stage="dispatch"}:
--                                 requests the frontend has dispatched to that phase and not yet answered
--   router_queue_max              dynamo_frontend_router_queue_pending_requests (0 unless router queueing
--                                 is configured)
--   prefill_inflight_avg/max      dynamo_component_inflight_requests of the prefill component (generate):
--                                 the prefill backlog (the local mocker exports no vllm:* on prefill)
--   waiting_avg/max, running_avg/max   vllm:num_requests_waiting / _running of the decode workers
--                                 (disaggregated) or the workers (aggregated); in disaggregated mode
--                                 "waiting" also counts hand-offs waiting for their KV
--   kv_usage_max                  vllm:kv_cache_usage_perc (0..1), those workers
--   gpu_util_avg_pct, gpu_fb_used_max_mib, gpu_power_avg_w   DCGM exporter (DCGM_FI_DEV_GPU_UTIL mean
--                                 over GPUs, DCGM_FI_DEV_FB_USED highest GPU, DCGM_FI_DEV_POWER_USAGE mean
--                                 per GPU), scraped with the step when the spec names the exporters
--                                 (kubernetes.dcgm_exporter_urls)
--   gpu_source                    where the GPU columns come from, or why they are empty
--   goodput_ratio, ttft_p50_ms, itl_p50_ms   the step's SLO attainment and latency (v_step_stats)
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH sm AS (
    SELECT
        campaign_id,
        experiment,
        step_id,
        source,
        metric,
        stat,
        value,
        json_extract_scalar(labels_json, '$.dynamo_component') AS component,
        json_extract_scalar(labels_json, '$.dynamo_endpoint') AS endpoint,
        json_extract_scalar(labels_json, '$.phase') AS phase,
        json_extract_scalar(labels_json, '$.stage') AS stage,
        CASE
            WHEN source LIKE 'decode%' THEN 'decode'
            WHEN source LIKE 'prefill%' THEN 'prefill'
            WHEN source LIKE 'worker%' THEN 'worker'
            ELSE 'other'
        END AS role
    FROM server_metrics
    WHERE stat IN ('avg', 'max')
),
q AS (
    SELECT
        campaign_id,
        experiment,
        step_id,
        sum(CASE WHEN metric = 'dynamo_frontend_queued_requests' AND stat = 'avg' THEN value END) AS frontend_queued_avg,
        max(CASE WHEN metric = 'dynamo_frontend_queued_requests' AND stat = 'max' THEN value END) AS frontend_queued_max,
        max(CASE WHEN metric = 'dynamo_frontend_stage_requests' AND phase = 'prefill' AND stage = 'dispatch'
                 AND stat = 'max' THEN value END) AS prefill_dispatch_max,
        max(CASE WHEN metric = 'dynamo_frontend_stage_requests' AND phase = 'decode' AND stage = 'dispatch'
                 AND stat = 'max' THEN value END) AS decode_dispatch_max,
        max(CASE WHEN metric = 'dynamo_frontend_router_queue_pending_requests' AND stat = 'max' THEN value END)
            AS router_queue_max,
        sum(CASE WHEN metric = 'dynamo_component_inflight_requests' AND component = 'prefill' AND endpoint = 'generate'
                 AND stat = 'avg' THEN value END) AS prefill_inflight_avg,
        max(CASE WHEN metric = 'dynamo_component_inflight_requests' AND component = 'prefill' AND endpoint = 'generate'
                 AND stat = 'max' THEN value END) AS prefill_inflight_max,
        sum(CASE WHEN metric = 'vllm:num_requests_waiting' AND role IN ('decode', 'worker') AND stat = 'avg'
                 THEN value END) AS waiting_avg,
        max(CASE WHEN metric = 'vllm:num_requests_waiting' AND role IN ('decode', 'worker') AND stat = 'max'
                 THEN value END) AS waiting_max,
        sum(CASE WHEN metric = 'vllm:num_requests_running' AND role IN ('decode', 'worker') AND stat = 'avg'
                 THEN value END) AS running_avg,
        max(CASE WHEN metric = 'vllm:num_requests_running' AND role IN ('decode', 'worker') AND stat = 'max'
                 THEN value END) AS running_max,
        max(CASE WHEN metric = 'vllm:kv_cache_usage_perc' AND role IN ('decode', 'worker') AND stat = 'max'
                 THEN value END) AS kv_usage_max,
        avg(CASE WHEN metric = 'DCGM_FI_DEV_GPU_UTIL' AND stat = 'avg' THEN value END) AS gpu_util_avg_pct,
        max(CASE WHEN metric = 'DCGM_FI_DEV_FB_USED' AND stat = 'max' THEN value END) AS gpu_fb_used_max_mib,
        avg(CASE WHEN metric = 'DCGM_FI_DEV_POWER_USAGE' AND stat = 'avg' THEN value END) AS gpu_power_avg_w
    FROM sm
    GROUP BY campaign_id, experiment, step_id
)
SELECT
    s.campaign_id,
    s.experiment,
    s.mode,
    s.workload,
    s.workload_kind,
    s.variant,
    s.step_id,
    s."repeat",
    s.status,
    s.concurrency,
    s.isl,
    s.goodput_ratio,
    s.ttft_p50_ms,
    s.itl_p50_ms,
    q.frontend_queued_avg,
    q.frontend_queued_max,
    q.prefill_dispatch_max,
    q.decode_dispatch_max,
    q.router_queue_max,
    q.prefill_inflight_avg,
    q.prefill_inflight_max,
    q.waiting_avg,
    q.waiting_max,
    q.running_avg,
    q.running_max,
    q.kv_usage_max,
    q.gpu_util_avg_pct,
    q.gpu_fb_used_max_mib,
    q.gpu_power_avg_w,
    CASE
        WHEN q.gpu_util_avg_pct IS NOT NULL OR q.gpu_fb_used_max_mib IS NOT NULL THEN 'dcgm-exporter'
        WHEN coalesce(c.simulated, false) THEN 'none: no GPU (local mocker, SIMULATED)'
        ELSE 'none: no DCGM exporter scraped (kubernetes.dcgm_exporter_urls)'
    END AS gpu_source,
    coalesce(c.simulated, false) AS simulated
FROM v_step_stats s
LEFT JOIN q ON q.campaign_id = s.campaign_id AND q.experiment = s.experiment AND q.step_id = s.step_id
LEFT JOIN campaigns c ON c.campaign_id = s.campaign_id
ORDER BY s.campaign_id, s.experiment, s.step_id
