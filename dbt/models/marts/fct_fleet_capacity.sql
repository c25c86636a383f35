-- Fleet capacity per run and workload: the sum over deployments, each counted once per replica
-- (the formula is macros/fleet_capacity.sql, shared with the multi-run report's table macro).
with capacity as (
    select * from {{ ref('fct_capacity') }}
),

deployments as (
    select * from {{ ref('dim_deployments') }}
),

per_workload as (
    {{ fleet_capacity_per_workload('capacity', 'deployments', 'c.run_id,') }}
),

missing as (
    -- a deployment's failed preflight or sweep leaves every workload of the run short
    select p.run_id, p.workload, s.deployment, coalesce(s.reason, s.outcome) as reason
    from per_workload as p
    inner join {{ ref('fct_step_outcomes') }} as s on s.run_id = p.run_id
    where s.is_failed and s.step in ('preflight', 'sweep')
    union all
    -- a sweep that ran and measured nothing of this workload: its verdict says why
    select run_id, workload, deployment, capacity_verdict as reason
    from capacity
    where not is_measured
),

not_measured as (
    -- deployments the sum leaves out or only partly covers, with why, per workload
    select
        run_id,
        workload,
        string_agg(distinct deployment, ', ' order by deployment) as deployments,
        string_agg(
            distinct deployment || ': ' || reason, '; ' order by deployment || ': ' || reason
        ) as reasons
    from missing
    group by run_id, workload
),

final as (
    select
        p.*,
        m.deployments as not_measured_deployments,
        m.reasons as not_measured_reasons,
        m.deployments is null as is_complete
    from per_workload as p
    left join not_measured as m on m.run_id = p.run_id and m.workload = p.workload
)

select * from final
