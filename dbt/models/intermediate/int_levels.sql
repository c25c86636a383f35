{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- The level value: median over the level's valid trials (warm-ups and waves superseded by a
-- re-measurement never count). A level where any counted trial queued streams cannot pass,
-- whatever its rate.
with trials as (
    select * from {{ ref('int_trials') }}
    where {{ changed_runs_filter('run_id') }}
),

counted as (
    select * from trials
    where probe is null and trial > 0 and not coalesce(is_superseded, false)
),

final as (
    select
        run_id,
        deployment,
        any_value(model) as model,
        workload,
        -- grid or search: one plan per deployment and workload in a run
        any_value(method) as method,
        min(search_step) as search_step,
        concurrency,
        count(*) as n_trials,
        count(*) filter (where is_valid) as n_valid_trials,
        coalesce(sum(n_failed), 0) as n_failed_streams,
        median(median_decode_tok_s) filter (where is_valid) as median_decode_tok_s,
        min(min_decode_tok_s) filter (where is_valid) as min_decode_tok_s,
        max(max_decode_tok_s) filter (where is_valid) as max_decode_tok_s,
        median(aggregate_tok_s) filter (where is_valid) as aggregate_tok_s,
        concurrency * median(median_decode_tok_s) filter (where is_valid)
            as concurrency_x_median_tok_s,
        median(median_ttft_s) filter (where is_valid) as median_ttft_s,
        median(effective_concurrency) filter (where is_valid) as effective_concurrency,
        bool_or(queued) as any_queued,
        {{ var('threshold_tok_s') }} as threshold_tok_s,
        {{ level_passes(
            'median(median_decode_tok_s) filter (where is_valid)',
            'bool_or(queued)',
            'count(*) filter (where is_valid) > 0'
        ) }} as passes_threshold,
        max(run_watermark) as run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from counted
    group by run_id, deployment, workload, concurrency
)

select * from final
