-- What each step of a night did for each deployment, and for a failed one why: the part of
-- the night an imperfect fleet cost (an unreachable node, a server that died, a probe or link
-- check that failed). Deployments declared for the run but never swept appear as
-- 'not measured' even when no step recorded them (a run cut short).
with outcomes as (
    select * from {{ ref('stg_step_outcomes') }}
),

deployments as (
    select * from {{ ref('dim_deployments') }}
),

swept as (
    select distinct run_id, deployment from {{ ref('stg_waves') }}
    where probe is null
),

unrecorded as (
    -- declared, never swept, and no step says why: the run stopped before reaching it
    select
        d.run_id,
        d.deployment,
        'sweep' as step,
        'failed' as status,
        'never swept (the run stopped before reaching it)' as reason,
        cast(null as timestamptz) as recorded_at
    from deployments as d
    left join swept as s on s.run_id = d.run_id and s.deployment = d.deployment
    left join outcomes as o on o.run_id = d.run_id and o.deployment = d.deployment
        and o.step in ('preflight', 'sweep')
    inner join {{ ref('stg_runs') }} as r on r.run_id = d.run_id
    where s.deployment is null and o.step is null and r.run_status <> 'running'
        and exists (select 1 from outcomes as any_o where any_o.run_id = d.run_id)
),

unioned as (
    select * from outcomes
    union all
    select * from unrecorded
),

final as (
    select
        run_id,
        deployment,
        step,
        status,
        status = 'failed' as is_failed,
        case
            when status = 'ok' then 'measured'
            when step in ('preflight', 'sweep') then 'not measured'
            else step || ' failed'
        end as outcome,
        reason,
        recorded_at
    from unioned
)

select * from final
