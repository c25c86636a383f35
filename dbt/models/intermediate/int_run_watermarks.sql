-- When each run's raw data last changed; incremental models rebuild runs newer than they saw.
with waves as (
    select * from {{ ref('stg_waves') }}
),

final as (
    select
        run_id,
        max(coalesce(staged_at, started_at)) as run_watermark
    from waves
    group by run_id
)

select * from final
