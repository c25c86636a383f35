-- Fleet capacity per workload: the sum over deployments, each counted once per replica.
-- Code and prose are alternative workloads, not a simultaneous mixed load.
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
    select
        c.run_id,
        c.workload,
        any_value(c.threshold_tok_s) as threshold_tok_s,
        sum(c.capacity_streams * coalesce(d.replicas, 1)) as capacity_streams,
        sum(c.capacity_interpolated * coalesce(d.replicas, 1)) as capacity_interpolated,
        sum(c.ci_low_streams * coalesce(d.replicas, 1)) as ci_low_streams,
        sum(c.ci_high_streams * coalesce(d.replicas, 1)) as ci_high_streams,
        count(*) as n_deployments,
        sum(coalesce(d.replicas, 1)) as n_replicas,
        bool_or(coalesce(d.replicas, 1) > 1) as is_extrapolated,
        string_agg(c.deployment, ', ' order by c.deployment) filter (
            where coalesce(d.replicas, 1) > 1
        ) as extrapolated_deployments,
        bool_or(c.is_lower_bound) as is_lower_bound,
        'alternative workload, not a mixed load' as load_kind
    from capacity as c
    left join deployments as d on d.run_id = c.run_id and d.deployment = c.deployment
    group by c.run_id, c.workload
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
