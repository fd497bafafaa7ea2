-- v_kv_offload: per step, whether KV offload (KVBM's host and disk tiers) was actually used, so that no
-- conclusion about offload (Q2) is drawn from a step where it never moved a block. One row per step,
-- aggregated and disaggregated, offload configured or not. KVBM's counters come from its exporter
-- (DYN_KVBM_METRICS=true, port 6880; sources "kvbm/<pod>"), counted over the step's profiling window;
-- in disaggregated mode KVBM sits on the prefill workers. docs/METRICS.md lists every meter.
--   kv_offload                  the experiment's setting (experiments table)
--   offload_blocks_d2h          kvbm_offload_blocks_d2h: blocks offloaded GPU -> host memory
--   offload_blocks_h2d          kvbm_offload_blocks_h2d: blocks offloaded host memory -> disk
--   offload_blocks_d2d          kvbm_offload_blocks_d2d: blocks offloaded GPU -> disk (bypassing host)
--   onboard_blocks_h2d          kvbm_onboard_blocks_h2d: blocks onboarded host memory -> GPU (a host hit)
--   onboard_blocks_d2d          kvbm_onboard_blocks_d2d: blocks onboarded disk -> GPU (a disk hit)
--   offload_blocks, onboard_blocks   every kvbm_offload_blocks_* / kvbm_onboard_blocks_* counter
--   kvbm_matched_tokens         kvbm_matched_tokens: prompt tokens KVBM found in its tiers
--   host_cache_hit_rate_avg, disk_cache_hit_rate_avg   kvbm_host_cache_hit_rate / kvbm_disk_cache_hit_rate
--                               (gauges over KVBM's own sliding window, 0..1), averaged over the step
--   offload_used, onboard_used  offload_blocks > 0 / onboard_blocks > 0; NULL when not measured
--   offload_source              'kvbm' when KVBM's series were scraped, else why there is no figure:
--                               the experiment has no kv_offload; or SIMULATED (the Dynamo 1.6.1 mocker's
--                               host tier exports no offload or onboard counter: its host-tier hits are
--                               inside the router's and the frontend's cached-prefix figures); or not
--                               measured (KVBM on, its exporter not scraped)
--   preemptions                 vllm:num_preemptions (every worker): requests preempted for lack of KV
--                               blocks, their KV recomputed on resume. Preemptions, not evictions
--   kv_usage_max                vllm:kv_cache_usage_perc, every worker (0..1): how full the GPU KV cache got
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH m AS (
    SELECT
        campaign_id,
        experiment,
        step_id,
        count(CASE WHEN metric LIKE 'kvbm%' THEN 1 END) AS kvbm_rows,
        sum(CASE WHEN metric = 'kvbm_offload_blocks_d2h' AND stat = 'total' THEN value END) AS offload_blocks_d2h,
        sum(CASE WHEN metric = 'kvbm_offload_blocks_h2d' AND stat = 'total' THEN value END) AS offload_blocks_h2d,
        sum(CASE WHEN metric = 'kvbm_offload_blocks_d2d' AND stat = 'total' THEN value END) AS offload_blocks_d2d,
        sum(CASE WHEN metric = 'kvbm_onboard_blocks_h2d' AND stat = 'total' THEN value END) AS onboard_blocks_h2d,
        sum(CASE WHEN metric = 'kvbm_onboard_blocks_d2d' AND stat = 'total' THEN value END) AS onboard_blocks_d2d,
        sum(CASE WHEN metric LIKE 'kvbm_offload_blocks%' AND stat = 'total' THEN value END) AS offload_blocks,
        sum(CASE WHEN metric LIKE 'kvbm_onboard_blocks%' AND stat = 'total' THEN value END) AS onboard_blocks,
        sum(CASE WHEN metric = 'kvbm_matched_tokens' AND stat = 'total' THEN value END) AS kvbm_matched_tokens,
        avg(CASE WHEN metric = 'kvbm_host_cache_hit_rate' AND stat = 'avg' THEN value END) AS host_cache_hit_rate_avg,
        avg(CASE WHEN metric = 'kvbm_disk_cache_hit_rate' AND stat = 'avg' THEN value END) AS disk_cache_hit_rate_avg,
        sum(CASE WHEN metric = 'vllm:num_preemptions' AND stat = 'total' THEN value END) AS preemptions,
        max(CASE WHEN metric = 'vllm:kv_cache_usage_perc' AND stat = 'max' THEN value END) AS kv_usage_max
    FROM server_metrics
    GROUP BY campaign_id, experiment, step_id
)
SELECT
    s.campaign_id,
    s.experiment,
    s.mode,
    s.router,
    coalesce(s.kv_offload, false) AS kv_offload,
    s.workload,
    s.workload_kind,
    s.variant,
    s.step_id,
    s."repeat",
    s.status,
    s.concurrency,
    s.isl,
    m.offload_blocks_d2h,
    m.offload_blocks_h2d,
    m.offload_blocks_d2d,
    m.onboard_blocks_h2d,
    m.onboard_blocks_d2d,
    m.offload_blocks,
    m.onboard_blocks,
    m.kvbm_matched_tokens,
    m.host_cache_hit_rate_avg,
    m.disk_cache_hit_rate_avg,
    CASE WHEN coalesce(m.kvbm_rows, 0) > 0 THEN coalesce(m.offload_blocks, 0) > 0 END AS offload_used,
    CASE WHEN coalesce(m.kvbm_rows, 0) > 0 THEN coalesce(m.onboard_blocks, 0) > 0 END AS onboard_used,
    CASE
        WHEN coalesce(m.kvbm_rows, 0) > 0 THEN 'kvbm'
        WHEN NOT coalesce(s.kv_offload, false) THEN 'none: no kv_offload in this experiment'
        WHEN coalesce(c.simulated, false) THEN 'none: SIMULATED (the mocker host tier exports no offload counter)'
        ELSE 'not measured: no kvbm_* series scraped (KVBM exporter, DYN_KVBM_METRICS, port 6880)'
    END AS offload_source,
    m.preemptions,
    m.kv_usage_max,
    coalesce(c.simulated, false) AS simulated
FROM v_step_stats s
LEFT JOIN m ON m.campaign_id = s.campaign_id AND m.experiment = s.experiment AND m.step_id = s.step_id
LEFT JOIN campaigns c ON c.campaign_id = s.campaign_id
ORDER BY s.campaign_id, s.experiment, s.step_id
