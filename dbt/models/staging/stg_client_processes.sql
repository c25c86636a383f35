with source as (
    select * from {{ source('raw', 'client_processes') }}
),

final as (
    select
        cast(wave_id as varchar) as wave_id,
        cast(process_index as integer) as process_index,
        cast(pid as integer) as pid,
        cast(n_streams as integer) as n_streams,
        cast(released_ns as bigint) as released_ns,
        cast(ended_ns as bigint) as ended_ns,
        cast(loop_lag_p99_ms as double) as loop_lag_p99_ms,
        cast(loop_lag_max_ms as double) as loop_lag_max_ms,
        cast(cpu_pct as double) as cpu_pct,
        cast(timing_error_bound as double) as timing_error_bound
    from source
)

select * from final
