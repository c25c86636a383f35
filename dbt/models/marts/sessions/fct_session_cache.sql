-- The prefix cache every agent wave found against the one its plan assumed, flagged where
-- they differ (int_session_cache), with the wave's place in the night.
with cache as (
    select * from {{ ref('int_session_cache') }}
),

trials as (
    select * from {{ ref('int_trials') }}
    where workload = 'agent' and probe is null
),

final as (
    select
        t.run_id,
        t.deployment,
        t.concurrency as concurrent_sessions,
        t.trial,
        t.attempt,
        t.is_valid,
        c.*
    from cache as c
    inner join trials as t on t.wave_id = c.wave_id
)

select * from final
