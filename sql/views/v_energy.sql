-- v_energy: per step, the GPUs' energy and what it bought: joules per output token and output tokens per kWh,
-- in all and per stage (prefill / decode / aggregated workers), beside the step's throughput. One row per step.
-- Source: the DCGM exporters the step scraped (AIPerf --server-metrics, kubernetes.dcgm_exporter_urls), one
-- series per GPU:
--   DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION   a counter of millijoules since boot (one of dcgm-exporter's default
--                         counters, etc/default-counters.csv); its "total" stat is the increase over the
--                         step's profiling window: energy_j = sum over GPUs / 1000
--   DCGM_FI_DEV_POWER_USAGE   a gauge in watts; only when no energy counter was scraped: energy_j = the GPUs'
--                         mean power summed x benchmark_duration_s (energy_source says which)
--   gpus_metered          GPU series behind the figure: EVERY GPU the exporters report, serving or idle (a
--                         GPU of the node that no worker holds still draws its idle power: provisioned
--                         energy, as "tokens per provisioned megawatt" counts it)
--   idle_power_w          the lowest power sample of any GPU in the step (DCGM_FI_DEV_POWER_USAGE min): the
--                         floor a GPU draws doing nothing; x gpus_metered x duration is the share of
--                         energy_j no load would have avoided (idle_energy_share)
--   prefill_energy_j, decode_energy_j, worker_energy_j   the same counter of the GPUs whose "pod" label
--                         (dcgm-exporter's Kubernetes mapping) is a worker pod of that stage in this step's
--                         metrics sources; NULL when the exporter maps no pods
--   j_per_output_token    energy_j / total_output_tokens (AIPerf's, this step)
--   output_tokens_per_kwh total_output_tokens / (energy_j / 3.6e6)
--   prefill_j_per_output_token, decode_j_per_output_token, worker_j_per_output_token   per stage, over the
--                         same output tokens (disaggregated: the two add up to the pods' share)
--   energy_source         where energy_j comes from, or why there is none: locally 'not measured (no GPU)',
--                         never 0
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
        json_extract_scalar(labels_json, '$.pod') AS pod,
        coalesce(json_extract_scalar(labels_json, '$.UUID'), json_extract_scalar(labels_json, '$.Hostname') || '/'
                 || json_extract_scalar(labels_json, '$.gpu'), source) AS gpu_key
    FROM server_metrics
    WHERE metric IN ('DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION', 'DCGM_FI_DEV_POWER_USAGE')
),
pods AS (
    -- the worker pods each step scraped, by stage (AWS sources are "<role>/<pod name>")
    SELECT DISTINCT
        campaign_id, experiment, step_id, split_part(source, '/', 2) AS pod,
        CASE
            WHEN source LIKE 'decode/%' THEN 'decode'
            WHEN source LIKE 'prefill/%' THEN 'prefill'
            WHEN source LIKE 'worker/%' THEN 'worker'
        END AS role
    FROM server_metrics
    WHERE source LIKE 'decode/%' OR source LIKE 'prefill/%' OR source LIKE 'worker/%'
),
g AS (
    SELECT
        e.campaign_id,
        e.experiment,
        e.step_id,
        sum(CASE WHEN e.metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' AND e.stat = 'total' THEN e.value END) / 1000.0
            AS counter_energy_j,
        sum(CASE WHEN e.metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' AND e.stat = 'total' AND p.role = 'prefill'
                 THEN e.value END) / 1000.0 AS prefill_energy_j,
        sum(CASE WHEN e.metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' AND e.stat = 'total' AND p.role = 'decode'
                 THEN e.value END) / 1000.0 AS decode_energy_j,
        sum(CASE WHEN e.metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' AND e.stat = 'total' AND p.role = 'worker'
                 THEN e.value END) / 1000.0 AS worker_energy_j,
        count(DISTINCT CASE WHEN e.metric = 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION' AND e.stat = 'total'
                            THEN e.gpu_key END) AS counter_gpus,
        sum(CASE WHEN e.metric = 'DCGM_FI_DEV_POWER_USAGE' AND e.stat = 'avg' THEN e.value END) AS power_sum_w,
        count(DISTINCT CASE WHEN e.metric = 'DCGM_FI_DEV_POWER_USAGE' AND e.stat = 'avg' THEN e.gpu_key END)
            AS power_gpus,
        min(CASE WHEN e.metric = 'DCGM_FI_DEV_POWER_USAGE' AND e.stat = 'min' THEN e.value END) AS idle_power_w
    FROM sm e
    LEFT JOIN pods p
        ON p.campaign_id = e.campaign_id AND p.experiment = e.experiment AND p.step_id = e.step_id AND p.pod = e.pod
    GROUP BY e.campaign_id, e.experiment, e.step_id
),
r AS (
    SELECT
        s.campaign_id, s.experiment, s.mode, s.workload, s.workload_kind, s.variant, s.step_id, s."repeat",
        s.status, s.concurrency, s.output_tokens_per_s, s.benchmark_duration_s,
        st.total_output_tokens,
        g.prefill_energy_j, g.decode_energy_j, g.worker_energy_j, g.idle_power_w,
        CASE
            WHEN g.counter_energy_j IS NOT NULL THEN g.counter_energy_j
            ELSE g.power_sum_w * s.benchmark_duration_s
        END AS energy_j,
        CASE WHEN g.counter_energy_j IS NOT NULL THEN g.counter_gpus ELSE g.power_gpus END AS gpus_metered,
        CASE
            WHEN g.counter_energy_j IS NOT NULL THEN 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (increase over the step)'
            WHEN g.power_sum_w IS NOT NULL AND s.benchmark_duration_s IS NOT NULL
                THEN 'DCGM_FI_DEV_POWER_USAGE mean x benchmark_duration_s (no energy counter scraped)'
            WHEN coalesce(c.simulated, false) THEN 'not measured (no GPU): SIMULATED'
            ELSE 'not measured: no DCGM exporter scraped (kubernetes.dcgm_exporter_urls)'
        END AS energy_source,
        coalesce(c.simulated, false) AS simulated
    FROM v_step_stats s
    JOIN steps st ON st.campaign_id = s.campaign_id AND st.experiment = s.experiment AND st.step_id = s.step_id
    LEFT JOIN g ON g.campaign_id = s.campaign_id AND g.experiment = s.experiment AND g.step_id = s.step_id
    LEFT JOIN campaigns c ON c.campaign_id = s.campaign_id
)
SELECT
    campaign_id,
    experiment,
    mode,
    workload,
    workload_kind,
    variant,
    step_id,
    "repeat",
    status,
    concurrency,
    output_tokens_per_s,
    total_output_tokens,
    benchmark_duration_s,
    energy_j,
    gpus_metered,
    energy_j / nullif(total_output_tokens, 0) AS j_per_output_token,
    total_output_tokens / nullif(energy_j / 3.6e6, 0) AS output_tokens_per_kwh,
    prefill_energy_j / nullif(total_output_tokens, 0) AS prefill_j_per_output_token,
    decode_energy_j / nullif(total_output_tokens, 0) AS decode_j_per_output_token,
    worker_energy_j / nullif(total_output_tokens, 0) AS worker_j_per_output_token,
    prefill_energy_j,
    decode_energy_j,
    worker_energy_j,
    idle_power_w,
    idle_power_w * gpus_metered * benchmark_duration_s / nullif(energy_j, 0) AS idle_energy_share,
    energy_source,
    simulated
FROM r
ORDER BY campaign_id, experiment, step_id
