{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- One row per synchronized wave: its figures (int_trial_figures) beside its verdict with every
-- reason that applies (int_trial_validity), the one table downstream models read.
with figures as (
    select * from {{ ref('int_trial_figures') }}
    where {{ changed_runs_filter('run_id') }}
),

validity as (
    select * from {{ ref('int_trial_validity') }}
)

select
    f.run_id,
    f.wave_id,
    f.deployment,
    f.model,
    f.probe,
    f.method,
    f.search_step,
    f.workload,
    f.concurrency,
    f.trial,
    f.started_at,
    f.n_streams,
    f.n_ok,
    f.n_failed,
    f.n_short,
    f.n_missing_counts,
    f.median_decode_tok_s,
    f.min_decode_tok_s,
    f.max_decode_tok_s,
    f.aggregate_tok_s,
    f.concurrency_x_median_tok_s,
    f.median_ttft_s,
    f.ttft_quantile_s,
    f.n_ttft,
    f.n_sessions,
    f.min_ttft_s,
    f.max_ttft_s,
    f.reference_ttft_s,
    f.effective_concurrency,
    f.peak_concurrency,
    v.client_saturated,
    f.timing_error_bound,
    f.loop_lag_max_ms,
    f.start_skew_ms,
    f.client_process_count,
    f.median_decode_span_s,
    f.attempt,
    v.is_superseded,
    f.superseded_reason,
    f.metrics_error,
    f.spec_acceptance,
    f.server_generated_tokens,
    v.queued,
    f.n_dq_failures,
    f.run_watermark,
    {{ judgement_settings() }} as judgement_settings,
    v.is_valid,
    v.invalid_reasons
from figures as f
inner join validity as v on v.wave_id = f.wave_id
