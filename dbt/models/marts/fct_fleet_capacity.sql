-- Fleet capacity per workload: the sum over deployments, each counted once per replica.
-- Code and prose are alternative workloads, not a simultaneous mixed load.
with capacity as (
    select * from {{ ref('fct_capacity') }}
),

deployments as (
    select * from {{ ref('dim_deployments') }}
),

final as (
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
)

select * from final
