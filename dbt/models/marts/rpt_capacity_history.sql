{{ config(materialized='view') }}

-- Report-ready: every night's capacity per deployment × workload beside the same pair's
-- previous night (lag over nights in start order), for the report's history chart and its
-- "what changed since the previous night" table. Later nights never change an earlier row.
with capacity as (
    select * from {{ ref('fct_capacity') }}
),

runs as (
    select * from {{ ref('stg_runs') }}
),

joined as (
    select
        c.run_id,
        r.started_at,
        c.deployment,
        c.workload,
        c.threshold_tok_s,
        c.method,
        c.capacity_streams,
        c.is_measured
    from capacity as c
    inner join runs as r on r.run_id = c.run_id
),

final as (
    select
        *,
        lag(run_id) over nights as previous_run_id,
        lag(capacity_streams) over nights as previous_capacity_streams,
        -- a grid's 8 and a search's 11 can both be right: the change says which method gave each
        lag(method) over nights as previous_method,
        -- a night that measured nothing changed nothing (its 0 streams is no measurement)
        case
            when is_measured is not false and lag(is_measured) over nights is not false
                then capacity_streams - lag(capacity_streams) over nights
        end as capacity_change
    from joined
    window nights as (partition by deployment, workload order by started_at, run_id)
)

select * from final
