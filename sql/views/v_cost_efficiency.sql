-- v_cost_efficiency: the seeds' cost-efficiency table. One row per campaign x experiment.
-- Cost = the period's cost / the successful output tokens of the same period x 1,000,000, from the
-- costs rows (benchctl.costs.cost_rows: one per experiment x deployment x pool) and the steps.
--   category              'aggregated same-GPU baseline': aggregated, at most one GPU kind;
--                         'disaggregated same GPU total': disaggregated on one GPU kind with the same
--                         GPU kind and worker-GPU total (gpus) as an aggregated experiment of the
--                         campaign, on as many GPUs paid for (gpus_allocated); '... same GPU total, more
--                         GPUs paid (more nodes allocated)' (or fewer) where the two sides' allocated
--                         nodes differ (placement: e.g. prefill and decode on separate nodes), so that a
--                         $/1M difference is read with the node counts beside it;
--                         'disaggregated heterogeneous': disaggregated over pools of more than
--                         one GPU kind; else 'other' (e.g. disaggregated with more or fewer GPUs than any
--                         baseline: throughput bought with extra GPUs is not credited to disaggregation)
--   mode, router, kv_offload   the experiment's serving settings (experiments table)
--   gpus                  GPUs the workers use (replicas x tensor_parallel)
--   gpus_allocated        GPUs on the nodes allocated (nodes x GPUs per node, over its pools)
--   gpu_kinds             the pools' GPU kinds, sorted, joined with '+'
--   nodes                 nodes allocated over its pools (by one deployment: they run one at a time)
--   gpu_usd_per_hour      sum over pools of nodes x on-demand $/node-hour (the seeds' "GPU $/hr");
--                         NULL when a pool has no price
--   deployments           fresh deployments of the experiment (design.deployments); the costs below
--                         add up over all of them
--   node_hours, gpu_hours allocated node-hours and GPU-hours
--   cost_usd              allocation-based cost: nodes from scale request to pool restore x price,
--                         plus the EKS cluster fee share (eks_fee_usd); NULL when a pool is unpriced
--   usage_cost_usd        the same nodes and price over the steps' load windows only (no start-up,
--                         warm-up, idle or teardown time, no cluster fee)
--   cold_start_usd        the part of cost_usd from the experiment's first scale request until its
--                         deployment answered (timeline 'ready'): node boot (none when the previous
--                         experiment handed its pool over warm), image pull, model load, with the cluster
--                         fee of that time; the whole cost_usd when it never answered
--   steady_state_cost_usd cost_usd - cold_start_usd: from 'ready' to the pools' restore or handover
--   cold_start_share      cold_start_usd / cost_usd
--   successful_output_tokens   sum of AIPerf's total_output_tokens over the succeeded steps (all
--                         workloads); failed steps' tokens are not counted, their time is paid
--   usd_per_1m_output_tokens   cost_usd / successful_output_tokens x 1e6
--   usage_usd_per_1m_output_tokens   usage_cost_usd / successful_output_tokens x 1e6
--   steady_state_usd_per_1m_output_tokens   steady_state_cost_usd / successful_output_tokens x 1e6: the
--                         basis comparisons use (the cold start is paid once per campaign, not per token
--                         of one experiment; it is reported beside, in cold_start_usd)
--   output_tokens_per_s   successful_output_tokens / sum of benchmark_duration_s over the succeeded
--                         steps (the duration-weighted mean throughput over every workload)
--   sweep_peak_output_tokens_per_s   the highest concurrency-sweep throughput (mean over repeats per
--                         concurrency, then the max over concurrencies)
--   goodput_ratio         mean over the succeeded steps of v_step_stats.goodput_ratio (share of
--                         requests meeting the spec's SLO); NULL without an SLO
--   goodput_per_s         the highest SLO-meeting request rate of the concurrency sweep (mean over
--                         repeats per concurrency of v_step_stats.goodput_per_s, max over concurrencies)
-- Comparing at equal money (heterogeneous GPUs are judged at the same cost and SLO, not raw speed):
--   tokens_per_usd        successful_output_tokens / cost_usd (= 1e6 / usd_per_1m_output_tokens)
--   output_tokens_per_s_per_usd_hour   output_tokens_per_s / gpu_usd_per_hour
--   goodput_per_usd_hour  goodput_per_s / gpu_usd_per_hour: SLO-meeting requests per second that one
--                         dollar per hour of GPU nodes buys
--   n_steps_succeeded, n_steps_failed   the steps behind the figures
--   price_source          where the prices came from (spec pricing.source, as of); 'unpriced' if none
--   root_volume_usd       the part of cost_usd the nodes' root EBS volumes cost (gp3, their node-hours)
--   auto_mode_fee_usd     the part of cost_usd EKS Auto Mode's management fee cost; 0 without Auto Mode
--                         pools, NULL when one's fee is unpriced (then it is not in cost_usd: scope says so)
--   j_per_output_token    the GPUs' energy per successful output token over the steps that measured it
--                         (v_energy: DCGM's energy counter, or power x time); NULL where none did
--   energy_source         where it comes from, or why there is none ('not measured (no GPU)' locally)
--   scope                 what the cost includes and what it does not, item by item, with why
--   simulated             true for the local engine (mocker): simulated numbers, illustrative prices
-- The costs rows are written at Report; without them the cost columns are NULL.
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH deployment_held AS (
    -- what one deployment of the experiment holds (an experiment deployed several times, design.deployments,
    -- holds one deployment's nodes at a time; its costs below add up over all of them)
    SELECT
        campaign_id,
        experiment,
        coalesce(deployment, experiment) AS deployment,
        sum(nodes) AS nodes,
        sum(nodes * cast(json_extract_scalar(fees_json, '$.gpus_per_node') AS bigint)) AS gpus_allocated,
        CASE
            WHEN count(price_per_node_hour_usd) = count(*) THEN sum(nodes * price_per_node_hour_usd)
        END AS gpu_usd_per_hour
    FROM costs
    GROUP BY campaign_id, experiment, coalesce(deployment, experiment)
),
held AS (
    SELECT
        campaign_id,
        experiment,
        count(*) AS deployments,
        max(nodes) AS nodes,
        max(gpus_allocated) AS gpus_allocated,
        CASE WHEN count(gpu_usd_per_hour) = count(*) THEN max(gpu_usd_per_hour) END AS gpu_usd_per_hour
    FROM deployment_held
    GROUP BY campaign_id, experiment
),
pools AS (
    SELECT
        campaign_id,
        experiment,
        count(DISTINCT gpu_kind) AS n_gpu_kinds,
        array_join(array_sort(array_agg(DISTINCT gpu_kind)), '+') AS gpu_kinds,
        sum(node_hours) AS node_hours,
        sum(gpu_hours) AS gpu_hours,
        CASE WHEN count(cost_usd) = count(*) THEN sum(cost_usd) END AS cost_usd,
        sum(cast(json_extract_scalar(fees_json, '$.eks_cluster_usd') AS double)) AS eks_fee_usd,
        CASE
            WHEN count(json_extract_scalar(fees_json, '$.usage_based_usd')) = count(*)
            THEN sum(cast(json_extract_scalar(fees_json, '$.usage_based_usd') AS double))
        END AS usage_cost_usd,
        CASE
            WHEN count(json_extract_scalar(fees_json, '$.cold_start_usd')) = count(*)
            THEN sum(cast(json_extract_scalar(fees_json, '$.cold_start_usd') AS double))
        END AS cold_start_usd,
        CASE
            WHEN count(json_extract_scalar(fees_json, '$.steady_state_usd')) = count(*)
            THEN sum(cast(json_extract_scalar(fees_json, '$.steady_state_usd') AS double))
        END AS steady_state_cost_usd,
        array_join(array_sort(array_agg(DISTINCT price_source)), '; ') AS price_source,
        sum(cast(json_extract_scalar(fees_json, '$.root_volume_usd') AS double)) AS root_volume_usd,
        CASE
            WHEN count(json_extract_scalar(fees_json, '$.auto_mode_fee_usd')) = count(*)
            THEN sum(cast(json_extract_scalar(fees_json, '$.auto_mode_fee_usd') AS double))
        END AS auto_mode_fee_usd,
        max(json_extract_scalar(fees_json, '$.scope_text')) AS scope,
        bool_or(simulated) AS simulated
    FROM costs
    GROUP BY campaign_id, experiment
),
tok AS (
    SELECT
        campaign_id,
        experiment,
        count(CASE WHEN status = 'succeeded' THEN 1 END) AS n_steps_succeeded,
        count(CASE WHEN status IS NULL OR status <> 'succeeded' THEN 1 END) AS n_steps_failed,
        coalesce(sum(CASE WHEN status = 'succeeded' THEN total_output_tokens END), 0)
            AS successful_output_tokens,
        sum(CASE WHEN status = 'succeeded' AND total_output_tokens IS NOT NULL THEN benchmark_duration_s END)
            AS benchmark_s
    FROM steps
    GROUP BY campaign_id, experiment
),
energy AS (
    -- the GPUs' energy over the succeeded steps that have it, per output token of those steps (v_energy)
    SELECT
        campaign_id,
        experiment,
        sum(CASE WHEN status = 'succeeded' AND energy_j IS NOT NULL THEN energy_j END)
            / nullif(sum(CASE WHEN status = 'succeeded' AND energy_j IS NOT NULL THEN total_output_tokens END), 0)
            AS j_per_output_token,
        min(energy_source) AS energy_source
    FROM v_energy
    GROUP BY campaign_id, experiment
),
good AS (
    SELECT campaign_id, experiment, avg(goodput_ratio) AS goodput_ratio
    FROM v_step_stats
    WHERE status = 'succeeded'
    GROUP BY campaign_id, experiment
),
sweep AS (
    SELECT
        campaign_id, experiment, workload, concurrency,
        avg(output_tokens_per_s) AS output_tokens_per_s,
        avg(goodput_per_s) AS goodput_per_s
    FROM v_step_stats
    WHERE status = 'succeeded' AND workload_kind = 'concurrency_sweep' AND concurrency IS NOT NULL
    GROUP BY campaign_id, experiment, workload, concurrency
),
peak AS (
    SELECT
        campaign_id, experiment,
        max(output_tokens_per_s) AS sweep_peak_output_tokens_per_s,
        max(goodput_per_s) AS goodput_per_s
    FROM sweep
    GROUP BY campaign_id, experiment
),
base AS (
    SELECT
        e.campaign_id,
        e.experiment,
        e.experiment_index,
        e.mode,
        e.router,
        e.kv_offload,
        e.gpus,
        p.n_gpu_kinds,
        p.gpu_kinds,
        h.gpus_allocated
    FROM experiments e
    LEFT JOIN pools p ON p.campaign_id = e.campaign_id AND p.experiment = e.experiment
    LEFT JOIN held h ON h.campaign_id = e.campaign_id AND h.experiment = e.experiment
),
baselines AS (
    -- an aggregated baseline per GPU kind and total: the GPUs it paid for (its allocated nodes' GPUs) beside
    SELECT campaign_id, gpu_kinds, gpus, min(gpus_allocated) AS gpus_allocated
    FROM base
    WHERE mode = 'aggregated' AND n_gpu_kinds = 1
    GROUP BY campaign_id, gpu_kinds, gpus
)
SELECT
    b.campaign_id,
    b.experiment,
    CASE
        WHEN b.mode = 'aggregated' AND coalesce(b.n_gpu_kinds, 1) <= 1 THEN 'aggregated same-GPU baseline'
        WHEN b.mode = 'disaggregated' AND b.n_gpu_kinds > 1 THEN 'disaggregated heterogeneous'
        WHEN b.mode = 'disaggregated' AND b.n_gpu_kinds = 1 AND a.gpus IS NOT NULL
            AND b.gpus_allocated > a.gpus_allocated
            THEN 'disaggregated same GPU total, more GPUs paid (more nodes allocated)'
        WHEN b.mode = 'disaggregated' AND b.n_gpu_kinds = 1 AND a.gpus IS NOT NULL
            AND b.gpus_allocated < a.gpus_allocated
            THEN 'disaggregated same GPU total, fewer GPUs paid (fewer nodes allocated)'
        WHEN b.mode = 'disaggregated' AND b.n_gpu_kinds = 1 AND a.gpus IS NOT NULL
            THEN 'disaggregated same GPU total'
        ELSE 'other'
    END AS category,
    b.mode,
    b.router,
    b.kv_offload,
    b.gpus,
    h.gpus_allocated,
    b.gpu_kinds,
    h.nodes,
    h.gpu_usd_per_hour,
    h.deployments,
    p.node_hours,
    p.gpu_hours,
    p.cost_usd,
    p.eks_fee_usd,
    p.usage_cost_usd,
    p.cold_start_usd,
    p.steady_state_cost_usd,
    p.cold_start_usd / nullif(p.cost_usd, 0) AS cold_start_share,
    t.successful_output_tokens,
    p.cost_usd / nullif(t.successful_output_tokens, 0) * 1e6 AS usd_per_1m_output_tokens,
    p.usage_cost_usd / nullif(t.successful_output_tokens, 0) * 1e6 AS usage_usd_per_1m_output_tokens,
    p.steady_state_cost_usd / nullif(t.successful_output_tokens, 0) * 1e6 AS steady_state_usd_per_1m_output_tokens,
    t.successful_output_tokens / nullif(t.benchmark_s, 0) AS output_tokens_per_s,
    k.sweep_peak_output_tokens_per_s,
    g.goodput_ratio,
    k.goodput_per_s,
    t.successful_output_tokens / nullif(p.cost_usd, 0) AS tokens_per_usd,
    t.successful_output_tokens / nullif(t.benchmark_s, 0) / nullif(h.gpu_usd_per_hour, 0)
        AS output_tokens_per_s_per_usd_hour,
    k.goodput_per_s / nullif(h.gpu_usd_per_hour, 0) AS goodput_per_usd_hour,
    coalesce(t.n_steps_succeeded, 0) AS n_steps_succeeded,
    coalesce(t.n_steps_failed, 0) AS n_steps_failed,
    p.price_source,
    p.root_volume_usd,
    p.auto_mode_fee_usd,
    n.j_per_output_token,
    n.energy_source,
    p.scope,
    coalesce(p.simulated, c.simulated) AS simulated
FROM base b
LEFT JOIN pools p ON p.campaign_id = b.campaign_id AND p.experiment = b.experiment
LEFT JOIN held h ON h.campaign_id = b.campaign_id AND h.experiment = b.experiment
LEFT JOIN baselines a
    ON a.campaign_id = b.campaign_id AND a.gpu_kinds = b.gpu_kinds AND a.gpus = b.gpus
LEFT JOIN tok t ON t.campaign_id = b.campaign_id AND t.experiment = b.experiment
LEFT JOIN good g ON g.campaign_id = b.campaign_id AND g.experiment = b.experiment
LEFT JOIN peak k ON k.campaign_id = b.campaign_id AND k.experiment = b.experiment
LEFT JOIN energy n ON n.campaign_id = b.campaign_id AND n.experiment = b.experiment
LEFT JOIN campaigns c ON c.campaign_id = b.campaign_id
ORDER BY b.campaign_id, b.experiment_index, b.experiment
