-- v_stage_queues: per step, the queue depth at each serving stage and the GPUs' use, beside the step's
-- SLO attainment, aggregated and disaggregated steps alike (one row per step). Figures come from the
-- servers' /metrics sampled through the step's profiling phase (AIPerf --server-metrics, server_metrics):
-- *_avg = the time-average summed over the stage's workers (the stage's mean depth), *_max = the highest
-- sample of any one worker. Stages: "prefill" and "decode" workers (disaggregated), "worker" (aggregated:
-- one engine does both). docs/METRICS.md lists every meter, per mode and engine.
-- The matched gauges (the same gauge at each stage):
--   prefill_waiting_avg/max, decode_waiting_avg/max, worker_waiting_avg/max
--                                 vllm:num_requests_waiting of that stage's workers: requests queued in the
--                                 engine's scheduler. Decode "waiting" also counts hand-offs waiting for
--                                 their KV. The local mocker exports no vllm:* on prefill: NULL there (use
--                                 prefill_inflight_*); vLLM's prefill workers on AWS export it
--   prefill_running_avg/max, decode_running_avg/max, worker_running_avg/max   vllm:num_requests_running
--   router_queue_prefill_avg/max, router_queue_decode_avg/max
--                                 dynamo_frontend_router_queue_pending_requests{worker_type}: requests the
--                                 frontend's KV router holds back per worker type (0 unless router queueing
--                                 is configured; the aggregated workers are worker_type "decode")
-- Other stage figures:
--   frontend_queued_avg/max       dynamo_frontend_queued_requests (the frontend's HTTP processing queue)
--   prefill_dispatch_max, decode_dispatch_max   dynamo_frontend_stage_requests{phase, stage="dispatch"}:
--                                 requests the frontend has dispatched to that phase and not yet answered
--   router_queue_max              dynamo_frontend_router_queue_pending_requests, every worker type
--   prefill_inflight_avg/max      dynamo_component_inflight_requests of the prefill component (generate):
--                                 the prefill backlog as Dynamo counts it (exported by the mocker too)
--   kv_usage_max                  vllm:kv_cache_usage_perc (0..1), every worker
--   gpu_util_avg_pct, gpu_fb_used_max_mib, gpu_power_avg_w   DCGM exporter (DCGM_FI_DEV_GPU_UTIL mean
--                                 over GPUs, DCGM_FI_DEV_FB_USED highest GPU, DCGM_FI_DEV_POWER_USAGE mean
--                                 per GPU), scraped with the step when the spec names the exporters
--                                 (kubernetes.dcgm_exporter_urls)
--   gpu_util_{prefill,decode,worker}_avg_pct, gpu_fb_used_{prefill,decode,worker}_max_mib   the same per
--                                 stage: DCGM series whose "pod" label (dcgm-exporter's Kubernetes pod
--                                 mapping) is a worker pod of that stage in this step's metrics sources
--                                 (<role>/<pod>); NULL when the exporter maps no pods
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
        json_extract_scalar(labels_json, '$.worker_type') AS worker_type,
        json_extract_scalar(labels_json, '$.pod') AS pod,
        CASE
            WHEN source LIKE 'decode%' THEN 'decode'
            WHEN source LIKE 'prefill%' THEN 'prefill'
            WHEN source LIKE 'worker%' THEN 'worker'
            ELSE 'other'
        END AS role
    FROM server_metrics
    WHERE stat IN ('avg', 'max')
),
pods AS (
    -- the worker pods each step scraped, by stage (AWS sources are "<role>/<pod name>")
    SELECT DISTINCT campaign_id, experiment, step_id, role, split_part(source, '/', 2) AS pod
    FROM sm
    WHERE role IN ('prefill', 'decode', 'worker') AND source LIKE '%/%'
),
gpu AS (
    SELECT
        g.campaign_id,
        g.experiment,
        g.step_id,
        avg(CASE WHEN g.metric = 'DCGM_FI_DEV_GPU_UTIL' AND g.stat = 'avg' AND p.role = 'prefill' THEN g.value END)
            AS gpu_util_prefill_avg_pct,
        avg(CASE WHEN g.metric = 'DCGM_FI_DEV_GPU_UTIL' AND g.stat = 'avg' AND p.role = 'decode' THEN g.value END)
            AS gpu_util_decode_avg_pct,
        avg(CASE WHEN g.metric = 'DCGM_FI_DEV_GPU_UTIL' AND g.stat = 'avg' AND p.role = 'worker' THEN g.value END)
            AS gpu_util_worker_avg_pct,
        max(CASE WHEN g.metric = 'DCGM_FI_DEV_FB_USED' AND g.stat = 'max' AND p.role = 'prefill' THEN g.value END)
            AS gpu_fb_used_prefill_max_mib,
        max(CASE WHEN g.metric = 'DCGM_FI_DEV_FB_USED' AND g.stat = 'max' AND p.role = 'decode' THEN g.value END)
            AS gpu_fb_used_decode_max_mib,
        max(CASE WHEN g.metric = 'DCGM_FI_DEV_FB_USED' AND g.stat = 'max' AND p.role = 'worker' THEN g.value END)
            AS gpu_fb_used_worker_max_mib
    FROM sm g
    JOIN pods p
        ON p.campaign_id = g.campaign_id AND p.experiment = g.experiment AND p.step_id = g.step_id AND p.pod = g.pod
    WHERE g.metric LIKE 'DCGM_FI_%'
    GROUP BY g.campaign_id, g.experiment, g.step_id
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
        sum(CASE WHEN metric = 'dynamo_frontend_router_queue_pending_requests' AND worker_type = 'prefill'
                 AND stat = 'avg' THEN value END) AS router_queue_prefill_avg,
        max(CASE WHEN metric = 'dynamo_frontend_router_queue_pending_requests' AND worker_type = 'prefill'
                 AND stat = 'max' THEN value END) AS router_queue_prefill_max,
        sum(CASE WHEN metric = 'dynamo_frontend_router_queue_pending_requests' AND worker_type = 'decode'
                 AND stat = 'avg' THEN value END) AS router_queue_decode_avg,
        max(CASE WHEN metric = 'dynamo_frontend_router_queue_pending_requests' AND worker_type = 'decode'
                 AND stat = 'max' THEN value END) AS router_queue_decode_max,
        sum(CASE WHEN metric = 'dynamo_component_inflight_requests' AND component = 'prefill' AND endpoint = 'generate'
                 AND stat = 'avg' THEN value END) AS prefill_inflight_avg,
        max(CASE WHEN metric = 'dynamo_component_inflight_requests' AND component = 'prefill' AND endpoint = 'generate'
                 AND stat = 'max' THEN value END) AS prefill_inflight_max,
        sum(CASE WHEN metric = 'vllm:num_requests_waiting' AND role = 'prefill' AND stat = 'avg' THEN value END)
            AS prefill_waiting_avg,
        max(CASE WHEN metric = 'vllm:num_requests_waiting' AND role = 'prefill' AND stat = 'max' THEN value END)
            AS prefill_waiting_max,
        sum(CASE WHEN metric = 'vllm:num_requests_waiting' AND role = 'decode' AND stat = 'avg' THEN value END)
            AS decode_waiting_avg,
        max(CASE WHEN metric = 'vllm:num_requests_waiting' AND role = 'decode' AND stat = 'max' THEN value END)
            AS decode_waiting_max,
        sum(CASE WHEN metric = 'vllm:num_requests_waiting' AND role = 'worker' AND stat = 'avg' THEN value END)
            AS worker_waiting_avg,
        max(CASE WHEN metric = 'vllm:num_requests_waiting' AND role = 'worker' AND stat = 'max' THEN value END)
            AS worker_waiting_max,
        sum(CASE WHEN metric = 'vllm:num_requests_running' AND role = 'prefill' AND stat = 'avg' THEN value END)
            AS prefill_running_avg,
        max(CASE WHEN metric = 'vllm:num_requests_running' AND role = 'prefill' AND stat = 'max' THEN value END)
            AS prefill_running_max,
        sum(CASE WHEN metric = 'vllm:num_requests_running' AND role = 'decode' AND stat = 'avg' THEN value END)
            AS decode_running_avg,
        max(CASE WHEN metric = 'vllm:num_requests_running' AND role = 'decode' AND stat = 'max' THEN value END)
            AS decode_running_max,
        sum(CASE WHEN metric = 'vllm:num_requests_running' AND role = 'worker' AND stat = 'avg' THEN value END)
            AS worker_running_avg,
        max(CASE WHEN metric = 'vllm:num_requests_running' AND role = 'worker' AND stat = 'max' THEN value END)
            AS worker_running_max,
        max(CASE WHEN metric = 'vllm:kv_cache_usage_perc' AND role IN ('prefill', 'decode', 'worker') AND stat = 'max'
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
    q.prefill_waiting_avg,
    q.prefill_waiting_max,
    q.decode_waiting_avg,
    q.decode_waiting_max,
    q.worker_waiting_avg,
    q.worker_waiting_max,
    q.prefill_running_avg,
    q.prefill_running_max,
    q.decode_running_avg,
    q.decode_running_max,
    q.worker_running_avg,
    q.worker_running_max,
    q.router_queue_prefill_avg,
    q.router_queue_prefill_max,
    q.router_queue_decode_avg,
    q.router_queue_decode_max,
    q.frontend_queued_avg,
    q.frontend_queued_max,
    q.prefill_dispatch_max,
    q.decode_dispatch_max,
    q.router_queue_max,
    q.prefill_inflight_avg,
    q.prefill_inflight_max,
    q.kv_usage_max,
    q.gpu_util_avg_pct,
    q.gpu_fb_used_max_mib,
    q.gpu_power_avg_w,
    g.gpu_util_prefill_avg_pct,
    g.gpu_util_decode_avg_pct,
    g.gpu_util_worker_avg_pct,
    g.gpu_fb_used_prefill_max_mib,
    g.gpu_fb_used_decode_max_mib,
    g.gpu_fb_used_worker_max_mib,
    CASE
        WHEN q.gpu_util_avg_pct IS NOT NULL OR q.gpu_fb_used_max_mib IS NOT NULL THEN 'dcgm-exporter'
        WHEN coalesce(c.simulated, false) THEN 'none: no GPU (Dynamo mocker, SIMULATED)'
        ELSE 'none: no DCGM exporter scraped (kubernetes.dcgm_exporter_urls)'
    END AS gpu_source,
    coalesce(c.simulated, false) AS simulated
FROM v_step_stats s
LEFT JOIN q ON q.campaign_id = s.campaign_id AND q.experiment = s.experiment AND q.step_id = s.step_id
LEFT JOIN gpu g ON g.campaign_id = s.campaign_id AND g.experiment = s.experiment AND g.step_id = s.step_id
LEFT JOIN campaigns c ON c.campaign_id = s.campaign_id
ORDER BY s.campaign_id, s.experiment, s.step_id
