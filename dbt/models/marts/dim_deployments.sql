with deployments as (
    select * from {{ ref('stg_deployments') }}
),

runs as (
    select * from {{ ref('stg_runs') }}
),

final as (
    select
        d.run_id,
        d.deployment,
        d.model,
        d.endpoint,
        d.nodes,
        d.hardware,
        d.replicas,
        d.parallel_slots,
        d.reports_usage,
        r.started_at as run_started_at,
        r.fleet_name
    from deployments as d
    inner join runs as r on r.run_id = d.run_id
)

select * from final
