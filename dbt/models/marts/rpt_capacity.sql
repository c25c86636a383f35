{{ config(materialized='view') }}

-- Report-ready capacity rows: fct_capacity with the deployment's replicas and the texts the
-- report prints (bracket, interval, flags; fct_capacity's verdict), so the page formats no
-- judgement of its own.
with capacity as (
    select * from {{ ref('fct_capacity') }}
),

deployments as (
    select * from {{ ref('dim_deployments') }}
),

open_loop as (
    -- the newest replay of the plan at its own rate (sparkcap replay, factor 1.0) per
    -- deployment: the capacity of record is a burst figure, this the steady one
    select run_id, deployment, arg_max(verdict, started_at) as open_loop_verdict
    from {{ ref('fct_replay') }}
    where rate_factor = 1.0
    group by run_id, deployment
),

final as (
    select
        c.*,
        coalesce(d.replicas, 1) as replicas,
        d.nodes,
        d.hardware,
        d.model as model_name,
        case o.open_loop_verdict when 'holds' then 'yes' when 'fails' then 'no' end
            as holds_open_loop,
        case
            -- a level without a valid trial bounds nothing: it was not measured
            when not c.is_measured then 'no valid measurement'
            when c.unmeasured_level is not null
                then '≥ ' || c.capacity_streams || ' (level ' || c.unmeasured_level
                    || ' not measured)'
            when c.first_failing_level is not null
                then '[' || c.capacity_streams || ', ' || c.first_failing_level || ']'
            else '≥ ' || c.capacity_streams || ' (lower bound)'
        end as bracket,
        case
            when c.ci_low_streams is not null
                then c.ci_low_streams || '–' || c.ci_high_streams
        end as capacity_interval,
        array_to_string(
            list_filter(
                [
                    case when c.is_lower_bound then 'lower bound' end,
                    case when c.is_non_monotonic then 'non-monotonic' end,
                    case when coalesce(d.replicas, 1) > 1
                        then '×' || d.replicas || ' replicas' end,
                    case when c.method = 'search' and c.search_high_streams > c.search_low_streams
                        then 'undecided: between ' || c.search_low_streams || ' and '
                            || c.search_high_streams
                    end,
                    case when c.capacity_streams < c.level_capacity_streams
                        then 'moved down by a sustain wave' end
                ],
                lambda x: x is not null
            ),
            ', '
        ) as flags
    from capacity as c
    left join deployments as d on d.run_id = c.run_id and d.deployment = c.deployment
    left join open_loop as o on o.run_id = c.run_id and o.deployment = c.deployment
)

select * from final
