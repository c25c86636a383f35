-- The plan's streams per run and deployment: for the allocation int_plan_chosen picked (the
-- largest fleet for the mix of var plan_code_share, every replica on or inside its capacity
-- line), the code and prose streams to send the deployment over its replicas, the share of
-- the fullest replica's line used, the room left of each workload alone, and what limits a
-- deployment with no room left (its bottleneck, fct_bottlenecks).
with servers as (
    select * from {{ ref('int_plan_servers') }}
),

chosen as (
    select * from {{ ref('int_plan_chosen') }}
),

bottlenecks as (
    select run_id, deployment, workload, bottleneck
    from {{ ref('fct_bottlenecks') }}
),

allocation as (
    select c.run_id, a.server_index, a.code_streams, a.prose_streams
    from chosen as c, unnest(c.allocation) as t(a)
),

per_server as (
    select
        s.*,
        coalesce(a.code_streams, 0) as code_streams,
        coalesce(a.prose_streams, 0) as prose_streams
    from servers as s
    inner join chosen as c on c.run_id = s.run_id
    left join allocation as a on a.run_id = s.run_id and a.server_index = s.server_index
),

spare as (
    -- what else a replica could carry of one workload alone, beside what it is planned
    select
        *,
        {%- for own, other in [('code', 'prose'), ('prose', 'code')] %}
        case
            when {{ own }}_capacity_streams = 0 then 0
            when {{ other }}_capacity_streams = 0
                then {{ own }}_capacity_streams - {{ own }}_streams
            else floor({{ plan_line_room('code_capacity_streams', 'prose_capacity_streams',
                'code_streams', 'prose_streams') }} / {{ other }}_capacity_streams)
        end as spare_{{ own }}_streams,
        {%- endfor %}
        coalesce(code_streams / nullif(code_capacity_streams, 0), 0)
            + coalesce(prose_streams / nullif(prose_capacity_streams, 0), 0)
            as capacity_share_used
    from per_server
),

per_deployment as (
    select
        run_id,
        deployment,
        any_value(replicas) as replicas,
        any_value(code_capacity_streams) as code_capacity_streams,
        any_value(prose_capacity_streams) as prose_capacity_streams,
        sum(code_streams)::bigint as code_streams,
        sum(prose_streams)::bigint as prose_streams,
        max(code_streams + prose_streams) as max_streams_per_replica,
        bool_or(code_streams > 0 and prose_streams > 0) as mixes_workloads,
        sum(spare_code_streams)::bigint as spare_code_streams,
        sum(spare_prose_streams)::bigint as spare_prose_streams,
        max(capacity_share_used) as capacity_share_used
    from spare
    group by run_id, deployment
),

final as (
    select
        d.run_id,
        d.deployment,
        d.replicas,
        d.code_capacity_streams,
        d.prose_capacity_streams,
        d.code_streams,
        d.prose_streams,
        d.code_streams + d.prose_streams as planned_streams,
        d.max_streams_per_replica,
        d.mixes_workloads,
        d.capacity_share_used,
        d.spare_code_streams,
        d.spare_prose_streams,
        case
            when d.spare_code_streams = 0 and d.spare_prose_streams = 0 then
                'at capacity: ' || coalesce(
                    case when d.code_streams >= d.prose_streams then b_code.bottleneck
                    else b_prose.bottleneck end, 'bottleneck not diagnosed')
            else 'room left'
        end as limited_by
    from per_deployment as d
    left join bottlenecks as b_code
        on b_code.run_id = d.run_id and b_code.deployment = d.deployment
        and b_code.workload = 'code'
    left join bottlenecks as b_prose
        on b_prose.run_id = d.run_id and b_prose.deployment = d.deployment
        and b_prose.workload = 'prose'
)

select * from final
