-- v_history: a figure across campaigns. One row per step of every campaign in the lake, beside what the
-- campaign was (its spec, when it started, what served the requests and which versions), so that the same
-- spec's steps can be followed over time and two campaigns compared step by step (benchctl compare; the
-- report's "Since the previous campaign" section):
--   spec_name, spec_hash  the campaign's spec (a step of the same spec and step key is the same measurement
--                         repeated; spec_hash says whether anything in the spec changed)
--   started_at            when the campaign started (the history's order)
--   worker_engine, dynamo_version, vllm_version, gpu_driver, simulated   what served the requests
--   step key              experiment, workload_kind, workload, variant, isl, osl, concurrency, search_probe
--                         (a probe's load is chosen from what its sweep measured: it matches no other
--                         campaign's step by design)
--   valid                 the step succeeded and its error rate is at most 5 % (comparison.max_error_rate's
--                         default); its latency percentiles count, else only its status does
--   the figures           v_step_stats' TTFT/ITL percentiles, throughputs and goodput
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
SELECT
    s.campaign_id,
    c.spec_name,
    c.spec_hash,
    c.started_at,
    c.status AS campaign_status,
    c.simulated,
    c.worker_engine,
    c.dynamo_version,
    c.vllm_version,
    c.gpu_driver,
    s.experiment,
    s.mode,
    s.workload_kind,
    s.workload,
    s.variant,
    s.isl,
    s.osl,
    s.concurrency,
    s.search_probe,
    s.step_id,
    s."repeat",
    s.status,
    s.error_rate,
    (s.status = 'succeeded' AND coalesce(s.error_rate, 0) <= 0.05) AS valid,
    s.n_requests,
    s.ttft_p50_ms,
    s.ttft_p99_ms,
    s.itl_p50_ms,
    s.itl_p99_ms,
    s.request_latency_p50_ms,
    s.output_tokens_per_s,
    s.request_throughput_per_s,
    s.goodput_per_s,
    s.benchmark_duration_s
FROM v_step_stats s
JOIN campaigns c
    ON c.campaign_id = s.campaign_id
