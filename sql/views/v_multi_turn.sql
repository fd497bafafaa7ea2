-- v_multi_turn: per turn of the multi-turn workload, aggregated vs disaggregated side by side.
-- One row per campaign x comparison (an aggregated and a disaggregated experiment of the comparisons
-- table) x multi-turn workload x turn (1-based). Requests are grouped by conversation id + turn index
-- (AIPerf's metadata) over every repeat of the workload; percentiles are over those requests.
--   *_ttft_p50_ms / *_ttft_p99_ms   TTFT of that turn (history grows with the turn)
--   *_n_requests                    requests of that turn (the sample count)
--   *_conversation_p50_s            whole-conversation time (first request start to last request
--                                   end) of conversations that completed every turn; same on every row
--   *_cache_hit_rate                server-side prefix cache hit rate of the workload's steps
--                                   (v_step_cache); same on every row
-- Only valid steps (v_comparison_steps: succeeded, error rate within the comparison's max_error_rate)
-- and requests without an error count.
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH mt_steps AS (
    SELECT campaign_id, comparison, comparison_index, experiment, mode, workload, step_id, turns, cache_hit_rate
    FROM v_comparison_steps
    WHERE workload_kind = 'multi_turn' AND valid AND ',' || differs || ',' LIKE '%,mode,%'
),
ok AS (
    SELECT s.campaign_id, s.comparison, s.comparison_index, s.experiment, s.mode, s.workload, s.turns, r.step_id,
           r.conversation_id, r.turn_index, r.ttft_ms, r.start_ns, r.end_ns
    FROM requests r
    JOIN mt_steps s
        ON s.campaign_id = r.campaign_id AND s.experiment = r.experiment AND s.step_id = r.step_id
    WHERE r.error_type IS NULL AND r.error_code IS NULL AND r.turn_index IS NOT NULL
),
per_turn AS (
    SELECT campaign_id, comparison, comparison_index, experiment, mode, workload, turn_index,
           count(*) AS n_requests,
           approx_percentile(ttft_ms, 0.5) AS ttft_p50_ms,
           approx_percentile(ttft_ms, 0.99) AS ttft_p99_ms
    FROM ok
    GROUP BY campaign_id, comparison, comparison_index, experiment, mode, workload, turn_index
),
conversations AS (
    SELECT campaign_id, comparison, experiment, workload, step_id, conversation_id,
           (max(end_ns) - min(start_ns)) / 1e9 AS seconds
    FROM ok
    GROUP BY campaign_id, comparison, experiment, workload, step_id, conversation_id, turns
    HAVING count(DISTINCT turn_index) = turns
),
per_exp AS (
    SELECT c.campaign_id, c.comparison, c.experiment, c.workload,
           approx_percentile(c.seconds, 0.5) AS conversation_p50_s,
           count(*) AS n_conversations
    FROM conversations c
    GROUP BY c.campaign_id, c.comparison, c.experiment, c.workload
),
hits AS (
    SELECT campaign_id, comparison, experiment, workload, avg(cache_hit_rate) AS cache_hit_rate
    FROM mt_steps
    GROUP BY campaign_id, comparison, experiment, workload
),
side AS (
    SELECT t.*, e.conversation_p50_s, e.n_conversations, h.cache_hit_rate
    FROM per_turn t
    LEFT JOIN per_exp e
        ON e.campaign_id = t.campaign_id AND e.comparison = t.comparison AND e.experiment = t.experiment
        AND e.workload = t.workload
    LEFT JOIN hits h
        ON h.campaign_id = t.campaign_id AND h.comparison = t.comparison AND h.experiment = t.experiment
        AND h.workload = t.workload
),
agg AS (SELECT * FROM side WHERE mode = 'aggregated'),
dis AS (SELECT * FROM side WHERE mode = 'disaggregated')
SELECT
    coalesce(a.campaign_id, d.campaign_id) AS campaign_id,
    coalesce(a.comparison, d.comparison) AS comparison,
    coalesce(a.workload, d.workload) AS workload,
    coalesce(a.turn_index, d.turn_index) + 1 AS turn,
    a.ttft_p50_ms AS agg_ttft_p50_ms,
    d.ttft_p50_ms AS disagg_ttft_p50_ms,
    a.ttft_p99_ms AS agg_ttft_p99_ms,
    d.ttft_p99_ms AS disagg_ttft_p99_ms,
    a.n_requests AS agg_n_requests,
    d.n_requests AS disagg_n_requests,
    a.conversation_p50_s AS agg_conversation_p50_s,
    d.conversation_p50_s AS disagg_conversation_p50_s,
    a.n_conversations AS agg_n_conversations,
    d.n_conversations AS disagg_n_conversations,
    a.cache_hit_rate AS agg_cache_hit_rate,
    d.cache_hit_rate AS disagg_cache_hit_rate,
    a.experiment AS agg_experiment,
    d.experiment AS disagg_experiment
FROM agg a
FULL OUTER JOIN dis d
    ON a.campaign_id = d.campaign_id AND a.comparison = d.comparison AND a.workload = d.workload
    AND a.turn_index = d.turn_index
ORDER BY 1, coalesce(a.comparison_index, d.comparison_index), 3, 4
