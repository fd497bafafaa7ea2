-- v_kv_transfer: the prefill -> decode KV-transfer time of every step, beside its TTFT, for every
-- concurrency and sequence length, aggregated and disaggregated. One row per step.
--   kv_transfer_ms          mean KV-transfer time, by kv_transfer_source:
--                           'measured: vllm:nixl_xfer_time_seconds' (AWS: vLLM's NixlConnector
--                           histogram on the workers, sum / count over the step's profiling phase: per
--                           transfer); 'SIMULATED: mocker transfer model' (local: the Dynamo mocker
--                           delays each prefill hand-off by prompt tokens x kv_bytes_per_token /
--                           kv_transfer_bandwidth, so this is the step's mean prompt length run through
--                           that model: per request); NULL when aggregated ('none: aggregated') or when
--                           no source exists ('not measured')
--   kv_transfer_per_request_ms   the transfer time each successful request paid: measured, the step's
--                           whole NIXL transfer time / its successful requests (kv_transfers_per_request
--                           transfers each); simulated, the model's per-request delay (one hand-off each).
--                           What a TTFT gap (per request) is compared with
--   kv_transfers_per_request  measured: NIXL transfers / successful requests; simulated: 1
--   kv_transfer_share_of_ttft   kv_transfer_per_request_ms / ttft_avg_ms (the step's mean TTFT)
--   kv_bytes_per_transfer   measured: vllm:nixl_bytes_transferred sum / count; simulated: mean prompt
--                           tokens x kv_bytes_per_token
--   kv_transfer_gbps        measured: bytes / transfer time (GB/s); simulated: the bandwidth modelled
--   kv_failed_transfers     vllm:nixl_num_failed_transfers over the step (AWS; NULL locally)
--   router_estimate_ms      the frontend's dynamo_component_router_kv_transfer_estimated_latency_seconds
--                           mean: an upper-bound ESTIMATE (prefill complete -> decode first token), not a
--                           measurement; the local mocker holds the prefill answer for the whole
--                           simulated delay, so it stays 0 there
--   prefill_worker_ms       the prefill workers' mean request duration (dynamo_component_request_duration
--                           _seconds, component prefill, endpoint generate): compute + hand-off
--   nixl_backend, kv_transfer_bandwidth_gbps, kv_bytes_per_token   the experiment's settings
--                           (experiments table); the backend actually used is in the timeline's
--                           network_observed event
--   simulated               true for the local engine
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH req AS (
    SELECT campaign_id, experiment, step_id, count(*) AS n_ok, avg(isl) AS isl_mean
    FROM requests
    WHERE error_type IS NULL AND error_code IS NULL
    GROUP BY campaign_id, experiment, step_id
),
sm AS (
    SELECT
        campaign_id,
        experiment,
        step_id,
        sum(CASE WHEN metric = 'vllm:nixl_xfer_time_seconds' AND stat = 'sum' THEN value END) AS xfer_s,
        sum(CASE WHEN metric = 'vllm:nixl_xfer_time_seconds' AND stat = 'count' THEN value END) AS xfer_n,
        sum(CASE WHEN metric = 'vllm:nixl_bytes_transferred' AND stat = 'sum' THEN value END) AS xfer_bytes,
        sum(CASE WHEN metric = 'vllm:nixl_bytes_transferred' AND stat = 'count' THEN value END) AS xfer_bytes_n,
        sum(CASE WHEN metric = 'vllm:nixl_num_failed_transfers' AND stat = 'total' THEN value END) AS failed,
        sum(CASE WHEN metric = 'dynamo_component_router_kv_transfer_estimated_latency_seconds'
                 AND stat = 'sum' THEN value END) AS est_s,
        sum(CASE WHEN metric = 'dynamo_component_router_kv_transfer_estimated_latency_seconds'
                 AND stat = 'count' THEN value END) AS est_n,
        sum(CASE WHEN metric = 'dynamo_component_request_duration_seconds' AND stat = 'sum'
                 AND json_extract_scalar(labels_json, '$.dynamo_component') = 'prefill'
                 AND json_extract_scalar(labels_json, '$.dynamo_endpoint') = 'generate' THEN value END) AS prefill_s,
        sum(CASE WHEN metric = 'dynamo_component_request_duration_seconds' AND stat = 'count'
                 AND json_extract_scalar(labels_json, '$.dynamo_component') = 'prefill'
                 AND json_extract_scalar(labels_json, '$.dynamo_endpoint') = 'generate' THEN value END) AS prefill_n
    FROM server_metrics
    GROUP BY campaign_id, experiment, step_id
),
base AS (
    SELECT
        s.campaign_id,
        s.experiment,
        s.mode,
        s.workload,
        coalesce(s.workload_kind, 'concurrency_sweep') AS workload_kind,
        coalesce(s.variant, 'c' || cast(s.concurrency AS varchar)) AS variant,
        s.step_id,
        s."repeat",
        s.status,
        s.concurrency,
        s.isl,
        r.isl_mean,
        r.n_ok,
        s.ttft_p50_ms,
        s.ttft_avg_ms,
        e.nixl_backend,
        e.kv_transfer_bandwidth_gbps,
        e.kv_bytes_per_token,
        coalesce(c.simulated, false) AS simulated,
        m.xfer_s, m.xfer_n, m.xfer_bytes, m.xfer_bytes_n, m.failed, m.est_s, m.est_n, m.prefill_s, m.prefill_n,
        CASE
            WHEN s.mode <> 'disaggregated' THEN 'none: aggregated'
            WHEN m.xfer_n > 0 THEN 'measured: vllm:nixl_xfer_time_seconds'
            WHEN coalesce(c.simulated, false) AND e.kv_transfer_bandwidth_gbps > 0 AND r.isl_mean IS NOT NULL
                THEN 'SIMULATED: mocker transfer model'
            ELSE 'not measured'
        END AS kv_transfer_source
    FROM steps s
    JOIN experiments e ON e.campaign_id = s.campaign_id AND e.experiment = s.experiment
    LEFT JOIN campaigns c ON c.campaign_id = s.campaign_id
    LEFT JOIN req r ON r.campaign_id = s.campaign_id AND r.experiment = s.experiment AND r.step_id = s.step_id
    LEFT JOIN sm m ON m.campaign_id = s.campaign_id AND m.experiment = s.experiment AND m.step_id = s.step_id
),
fig AS (
    SELECT
        b.*,
        CASE
            WHEN kv_transfer_source LIKE 'measured%' THEN xfer_s / xfer_n * 1000
            WHEN kv_transfer_source LIKE 'SIMULATED%'
                THEN isl_mean * kv_bytes_per_token / (kv_transfer_bandwidth_gbps * 1e9) * 1000
        END AS kv_transfer_ms,
        CASE
            WHEN kv_transfer_source LIKE 'measured%' THEN xfer_bytes / nullif(xfer_bytes_n, 0)
            WHEN kv_transfer_source LIKE 'SIMULATED%' THEN isl_mean * kv_bytes_per_token
        END AS kv_bytes_per_transfer
    FROM base b
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
    isl,
    isl_mean AS isl_actual_mean,
    n_ok AS n_requests_ok,
    ttft_p50_ms,
    ttft_avg_ms,
    kv_transfer_ms,
    CASE
        WHEN kv_transfer_source LIKE 'measured%' THEN xfer_s * 1000 / nullif(n_ok, 0)
        WHEN kv_transfer_source LIKE 'SIMULATED%' THEN kv_transfer_ms
    END AS kv_transfer_per_request_ms,
    CASE
        WHEN kv_transfer_source LIKE 'measured%' THEN xfer_n / nullif(n_ok, 0)
        WHEN kv_transfer_source LIKE 'SIMULATED%' THEN 1.0
    END AS kv_transfers_per_request,
    CASE
        WHEN kv_transfer_source LIKE 'measured%' THEN xfer_s * 1000 / nullif(n_ok, 0)
        WHEN kv_transfer_source LIKE 'SIMULATED%' THEN kv_transfer_ms
    END / nullif(ttft_avg_ms, 0) AS kv_transfer_share_of_ttft,
    kv_bytes_per_transfer,
    CASE
        WHEN kv_transfer_source LIKE 'measured%' THEN xfer_bytes / nullif(xfer_s, 0) / 1e9
        WHEN kv_transfer_source LIKE 'SIMULATED%' THEN kv_transfer_bandwidth_gbps
    END AS kv_transfer_gbps,
    kv_transfer_source,
    failed AS kv_failed_transfers,
    est_s / nullif(est_n, 0) * 1000 AS router_estimate_ms,
    prefill_s / nullif(prefill_n, 0) * 1000 AS prefill_worker_ms,
    nixl_backend,
    kv_transfer_bandwidth_gbps,
    kv_bytes_per_token,
    simulated
FROM fig
ORDER BY campaign_id, experiment, step_id
