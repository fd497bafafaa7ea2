-- v_pareto: per experiment and concurrency-sweep workload, each load level (concurrency) as a point
-- (throughput per GPU, TTFT p50) and whether it lies on the Pareto frontier: no other point of the
-- same experiment and workload has at least the throughput per GPU AND at most the TTFT p50, with
-- one of them strictly better. (Only the sweep varies the load; the other workloads vary the input.)
-- Points are means over repeats of succeeded steps (n_repeats behind each). Throughput per GPU is
-- total output tokens/s divided by the experiment's GPUs (workers x tensor parallel).
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH points AS (
    SELECT campaign_id, experiment, mode, workload, workload_kind, variant,
           max(gpus) AS gpus,
           min(concurrency) AS concurrency,
           count(DISTINCT "repeat") AS n_repeats,
           avg(output_tokens_per_s_per_gpu) AS output_tokens_per_s_per_gpu,
           avg(output_tokens_per_s) AS output_tokens_per_s,
           avg(ttft_p50_ms) AS ttft_p50_ms,
           avg(ttft_p99_ms) AS ttft_p99_ms
    FROM v_step_stats
    WHERE status = 'succeeded' AND workload_kind = 'concurrency_sweep'
      AND output_tokens_per_s IS NOT NULL AND ttft_p50_ms IS NOT NULL
    GROUP BY campaign_id, experiment, mode, workload, workload_kind, variant
)
SELECT
    p.*,
    NOT EXISTS (
        SELECT 1
        FROM points q
        WHERE q.campaign_id = p.campaign_id AND q.experiment = p.experiment AND q.workload = p.workload
          AND q.output_tokens_per_s_per_gpu >= p.output_tokens_per_s_per_gpu
          AND q.ttft_p50_ms <= p.ttft_p50_ms
          AND (q.output_tokens_per_s_per_gpu > p.output_tokens_per_s_per_gpu OR q.ttft_p50_ms < p.ttft_p50_ms)
    ) AS on_frontier
FROM points p
ORDER BY p.campaign_id, p.workload, p.experiment, p.concurrency
