with source as (
    select * from {{ source('raw', 'search_levels') }}
),

final as (
    select
        cast(wave_id as varchar) as wave_id,
        cast(run_id as varchar) as run_id,
        cast(deployment as varchar) as deployment,
        cast(workload as varchar) as workload,
        cast(kind as varchar) as kind,
        cast(search_step as integer) as search_step,
        cast(concurrency as integer) as concurrency,
        cast(n_trials as integer) as n_trials,
        cast(n_valid_trials as integer) as n_valid_trials,
        cast(confidence as double) as confidence,
        cast(trials_max as integer) as trials_max,
        cast(live_median_tok_s as double) as live_median_tok_s,
        cast(live_ci_low_tok_s as double) as live_ci_low_tok_s,
        cast(live_ci_high_tok_s as double) as live_ci_high_tok_s,
        cast(live_verdict as varchar) as live_verdict,
        cast(stop_reason as varchar) as stop_reason,
        cast(next_action as varchar) as next_action
    from source
)

select * from final
