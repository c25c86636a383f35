with source as (
    select * from {{ source('raw', 'runs') }}
),

final as (
    select
        cast(run_id as varchar) as run_id,
        cast(started_at as timestamptz) as started_at,
        cast(finished_at as timestamptz) as finished_at,
        cast(sparkcap_version as varchar) as sparkcap_version,
        cast(status as varchar) as run_status,
        cast(status_reason as varchar) as run_status_reason,
        config_json
    from source
)

select * from final
