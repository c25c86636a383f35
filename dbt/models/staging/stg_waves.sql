with source as (
    select * from {{ source('raw', 'waves') }}
),

final as (
    select
        cast(wave_id as varchar) as wave_id,
        cast(run_id as varchar) as run_id,
        cast(deployment as varchar) as deployment,
        cast(model as varchar) as model,
        cast(endpoint as varchar) as endpoint,
        cast(workload as varchar) as workload,
        cast(concurrency as integer) as concurrency,
        cast(trial as integer) as trial,
        cast(started_at as timestamptz) as started_at,
        cast(start_skew_ms as double) as start_skew_ms,
        cast(loop_lag_p99_ms as double) as loop_lag_p99_ms,
        cast(client_cpu_pct as double) as client_cpu_pct,
        cast(client_saturated as boolean) as client_saturated,
        cast(saturation_reasons as varchar) as saturation_reasons,
        cast(duration_s as double) as duration_s,
        cast(n_requests as integer) as n_requests,
        cast(staged_at as timestamptz) as staged_at,
        cast(probe as varchar) as probe,
        cast(loop_lag_max_ms as double) as loop_lag_max_ms,
        cast(timing_error_bound as double) as timing_error_bound,
        coalesce(cast(attempt as integer), 1) as attempt,
        cast(superseded_reason as varchar) as superseded_reason,
        cast(metrics_error as varchar) as metrics_error,
        cast(client_process_count as integer) as client_process_count,
        coalesce(cast(method as varchar), 'grid') as method,
        cast(search_step as integer) as search_step,
        coalesce(cast(length_factor as double), 1.0) as length_factor,
        cast(cache_reset as varchar) as cache_reset
    from source
)

select * from final
