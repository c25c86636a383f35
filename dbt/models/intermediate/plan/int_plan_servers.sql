-- The plan's servers: one row per replica of each deployment with a measured code or prose
-- capacity in the run, numbered within the run. A replica serves code and prose streams
-- within its capacities: x_code / code_capacity + x_prose / prose_capacity <= 1, the line
-- between the two measured points (additive shares; fct_plan_routing says where the mixed
-- probe measured it). A workload the deployment did not measure gets capacity 0 there.
with capacity as (
    select * from {{ ref('fct_capacity') }}
    where workload in ('code', 'prose')
),

deployments as (
    select * from {{ ref('dim_deployments') }}
),

per_deployment as (
    select
        c.run_id,
        c.deployment,
        coalesce(max(c.capacity_streams) filter (where c.workload = 'code' and c.is_measured), 0)
            as code_capacity_streams,
        coalesce(max(c.capacity_streams) filter (where c.workload = 'prose' and c.is_measured), 0)
            as prose_capacity_streams,
        bool_or(c.is_measured and c.workload = 'code') as code_is_measured,
        bool_or(c.is_measured and c.workload = 'prose') as prose_is_measured
    from capacity as c
    group by c.run_id, c.deployment
),

replicas as (
    select
        p.*,
        coalesce(d.replicas, 1) as replicas,
        unnest(range(1, coalesce(d.replicas, 1) + 1)) as replica
    from per_deployment as p
    left join deployments as d on d.run_id = p.run_id and d.deployment = p.deployment
    where p.code_capacity_streams > 0 or p.prose_capacity_streams > 0
),

final as (
    select
        run_id,
        row_number() over (partition by run_id order by deployment, replica)::integer
            as server_index,
        deployment,
        replica,
        replicas,
        code_capacity_streams::integer as code_capacity_streams,
        prose_capacity_streams::integer as prose_capacity_streams,
        code_is_measured,
        prose_is_measured
    from replicas
)

select * from final
