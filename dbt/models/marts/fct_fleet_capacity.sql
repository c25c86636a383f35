-- Fleet capacity per run and workload: the sum over deployments, each counted once per replica
-- (the formula is macros/fleet_capacity.sql, shared with the multi-run report's table macro).
with capacity as (
    select * from {{ ref('fct_capacity') }}
),

deployments as (
    select * from {{ ref('dim_deployments') }}
),

not_measured as (
    -- deployments of the run the sum leaves out or only partly covers, with why
    select
        run_id,
        string_agg(distinct deployment, ', ' order by deployment) as deployments,
        string_agg(
            distinct deployment || ': ' || coalesce(reason, outcome), '; '
            order by deployment || ': ' || coalesce(reason, outcome)
        ) as reasons
    from {{ ref('fct_step_outcomes') }}
    where is_failed and step in ('preflight', 'sweep')
    group by run_id
),

per_workload as (
    {{ fleet_capacity_per_workload('capacity', 'deployments', 'c.run_id,') }}
),

final as (
    select
        p.*,
        m.deployments as not_measured_deployments,
        m.reasons as not_measured_reasons,
        m.deployments is null as is_complete
    from per_workload as p
    left join not_measured as m on m.run_id = p.run_id
)

select * from final
