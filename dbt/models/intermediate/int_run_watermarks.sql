-- When each run's raw data last changed: its latest (re)staged wave or its latest validation.
-- Incremental models rebuild exactly the runs whose watermark moved past what they saw.
with waves as (
    select * from {{ ref('stg_waves') }}
),

staged as (
    select run_id, max(coalesce(staged_at, started_at)) as staged_watermark
    from waves
    group by run_id
),

validated as (
    select run_id, max(validated_at) as validated_watermark
    from {{ ref('stg_dq_results') }}
    group by run_id
),

final as (
    select
        s.run_id,
        greatest(s.staged_watermark, coalesce(v.validated_watermark, s.staged_watermark))
            as run_watermark
    from staged as s
    left join validated as v on v.run_id = s.run_id
)

select * from final
