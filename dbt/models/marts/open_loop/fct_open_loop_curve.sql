{{ config(materialized='view') }}
-- The open-loop model's curve for the report's chart: predicted median stream rate, TTFT p90
-- and streams in flight against the arrival rate, up to twice lambda* (fct_open_loop_capacity;
-- the whole grid's lower half where none holds).
with curve as (
    select * from {{ ref('int_open_loop_curve') }}
),

capacity as (
    select run_id, deployment, workload, open_loop_arrivals_per_s
    from {{ ref('fct_open_loop_capacity') }}
),

final as (
    select
        c.run_id,
        c.deployment,
        c.workload,
        c.grid_index,
        c.arrivals_per_s,
        c.requests_per_min,
        c.mean_in_flight,
        c.p95_in_flight,
        c.predicted_median_tok_s,
        c.predicted_ttft_p90_s,
        c.is_stable,
        c.arrivals_per_s = k.open_loop_arrivals_per_s as is_open_loop_capacity
    from curve as c
    inner join capacity as k
        on k.run_id = c.run_id and k.deployment = c.deployment and k.workload = c.workload
    where c.arrivals_per_s <= 2 * coalesce(k.open_loop_arrivals_per_s, c.arrivals_per_s)
)

select * from final
