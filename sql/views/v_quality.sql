-- v_quality: per experiment, the settings every request carried (sampling and thinking, as AIPerf recorded
-- sending them with each step) and the output-quality gate's result. One row per campaign x experiment.
--   temperature, top_p, sampling_seed, thinking   the steps' settings (steps: AIPerf's own record of the
--                         --extra-inputs it merged into every request); NULL when the steps disagree
--   n_steps, n_steps_with_settings   steps recorded / those whose AIPerf record holds the settings
--   settings_consistent   every step of the experiment carried the same settings
--   quality_kind          the question set (arithmetic: one operation; multistep: three, 2- to 4-digit)
--   quality_questions, quality_correct, quality_score   the gate (quality table): questions asked,
--                         answered right (exact integer), correct / questions
--   quality_score_low, quality_score_high   the score's 95 % Wilson interval (benchctl.quality): two
--                         experiments' scores differ only where their intervals do not overlap
--   quality_min_score, quality_gate   the spec's threshold and the verdict: passed | failed |
--                         not applied (SIMULATED): on the local mocker (random tokens) the score is not
--                         meaningful and the threshold is not applied
--   quality_errors        questions whose request failed
--   simulated             true for the local engine
-- Athena (Trino) dialect; the local engine transpiles it to DuckDB with sqlglot.
WITH st AS (
    SELECT
        campaign_id,
        experiment,
        count(*) AS n_steps,
        count(temperature) AS n_steps_with_settings,
        count(DISTINCT temperature) AS n_temperature,
        count(DISTINCT top_p) AS n_top_p,
        count(DISTINCT sampling_seed) AS n_seed,
        count(DISTINCT thinking) AS n_thinking,
        min(temperature) AS temperature,
        min(top_p) AS top_p,
        min(sampling_seed) AS sampling_seed,
        bool_and(thinking) AS thinking
    FROM steps
    GROUP BY campaign_id, experiment
),
q AS (
    SELECT
        campaign_id,
        experiment,
        count(*) AS quality_questions,
        count(CASE WHEN correct THEN 1 END) AS quality_correct,
        count(error) AS quality_errors,
        max(min_score) AS quality_min_score,
        max(gate) AS quality_gate,
        max(kind) AS quality_kind,
        max(score_low) AS quality_score_low,
        max(score_high) AS quality_score_high,
        bool_or(simulated) AS quality_simulated,
        max(temperature) AS q_temperature,
        max(top_p) AS q_top_p,
        max(sampling_seed) AS q_seed,
        bool_or(thinking) AS q_thinking
    FROM quality
    GROUP BY campaign_id, experiment
)
SELECT
    e.campaign_id,
    e.experiment,
    e.mode,
    c.model,
    CASE WHEN st.n_temperature <= 1 THEN coalesce(st.temperature, q.q_temperature) END AS temperature,
    CASE WHEN st.n_top_p <= 1 THEN coalesce(st.top_p, q.q_top_p) END AS top_p,
    CASE WHEN st.n_seed <= 1 THEN coalesce(st.sampling_seed, q.q_seed) END AS sampling_seed,
    CASE WHEN st.n_thinking <= 1 THEN coalesce(st.thinking, q.q_thinking) END AS thinking,
    coalesce(st.n_steps, 0) AS n_steps,
    coalesce(st.n_steps_with_settings, 0) AS n_steps_with_settings,
    coalesce(st.n_temperature <= 1 AND st.n_top_p <= 1 AND st.n_seed <= 1 AND st.n_thinking <= 1
             AND st.n_steps_with_settings = st.n_steps, false) AS settings_consistent,
    q.quality_kind,
    q.quality_questions,
    q.quality_correct,
    cast(q.quality_correct AS double) / nullif(q.quality_questions, 0) AS quality_score,
    q.quality_score_low,
    q.quality_score_high,
    q.quality_min_score,
    q.quality_gate,
    q.quality_errors,
    coalesce(q.quality_simulated, c.simulated, false) AS simulated
FROM experiments e
LEFT JOIN campaigns c ON c.campaign_id = e.campaign_id
LEFT JOIN st ON st.campaign_id = e.campaign_id AND st.experiment = e.experiment
LEFT JOIN q ON q.campaign_id = e.campaign_id AND q.experiment = e.experiment
ORDER BY e.campaign_id, e.experiment_index, e.experiment
