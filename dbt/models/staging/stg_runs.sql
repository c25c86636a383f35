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
        -- a fleet night records its fleet file whole; an ad-hoc sweep has no fleet (NULL)
        json_extract_string(config_json, '$.fleet.name') as fleet_name,
        config_json
    from source
)

select * from final
