with source as (
    select * from {{ source('raw', 'step_outcomes') }}
),

final as (
    select
        cast(run_id as varchar) as run_id,
        cast(deployment as varchar) as deployment,
        cast(step as varchar) as step,
        cast(status as varchar) as status,
        cast(reason as varchar) as reason,
        cast(recorded_at as timestamptz) as recorded_at
    from source
)

select * from final
