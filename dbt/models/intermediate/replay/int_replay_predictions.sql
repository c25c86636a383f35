{{ config(materialized='view') }}
-- What the open-loop model predicts for each replay wave's offer: the deployment's load as a
-- share u of its open-loop line (offered code / lambda*_code + offered prose / lambda*_prose,
-- fct_open_loop_capacity; the offer's rates x its factor), each workload read on its own curve
-- (int_open_loop_curve) at u x its lambda*, the grid point nearest that rate: the predicted
-- median stream rate and, by Little's law over both workloads, the streams in flight. And how
-- long the backlog takes to settle: the M/M/1 relaxation time 1 / (mu (1 - sqrt(rho))^2),
-- with mu the engine's most completions a second (the curve's top over 1.05) and rho the
-- offered rate over it; rho >= 1 has no steady state. The model reserves the long prompts the
-- plan routes (int_open_loop_inputs): an offer made under other long prompts than the plan
-- as built now gets no prediction, never one from another model.
with offers as (
    select o.wave_id, w.run_id, w.deployment, o.code_per_s * o.rate_factor as code_per_s,
        o.prose_per_s * o.rate_factor as prose_per_s, o.duration_s
    from {{ ref('stg_replay_offers') }} as o
    inner join {{ ref('stg_waves') }} as w on w.wave_id = o.wave_id
    left join {{ ref('fct_plan_routing') }} as r
        on r.run_id = w.run_id and r.deployment = w.deployment
    where abs(coalesce(o.long_per_min, 0)
        - coalesce(r.long_prompts_per_min / r.replicas, 0)) < 1e-9
),

capacity as (
    select run_id, deployment, workload, open_loop_arrivals_per_s
    from {{ ref('fct_open_loop_capacity') }}
),

curve as (
    select * from {{ ref('int_open_loop_curve') }}
),

engine_top as (
    select run_id, deployment, workload, max(arrivals_per_s) / 1.05 as max_completions_per_s
    from curve
    group by all
),

per_workload as (
    select o.wave_id, o.run_id, o.deployment, 'code' as workload, o.code_per_s as offered_per_s
    from offers as o where o.code_per_s > 0
    union all
    select o.wave_id, o.run_id, o.deployment, 'prose', o.prose_per_s
    from offers as o where o.prose_per_s > 0
),

shares as (
    -- u: the offer as a share of the deployment's open-loop line (NULL where a workload
    -- offered has no lambda*: no prediction)
    select p.wave_id,
        sum(p.offered_per_s / c.open_loop_arrivals_per_s) as line_share,
        count(*) filter (where c.open_loop_arrivals_per_s is null) as n_unpredicted
    from per_workload as p
    left join capacity as c
        on c.run_id = p.run_id and c.deployment = p.deployment and c.workload = p.workload
    group by p.wave_id
),

at_load as (
    select p.*, s.line_share, c.open_loop_arrivals_per_s,
        s.line_share * c.open_loop_arrivals_per_s as equivalent_per_s,
        t.max_completions_per_s
    from per_workload as p
    inner join shares as s on s.wave_id = p.wave_id and s.n_unpredicted = 0
    inner join capacity as c
        on c.run_id = p.run_id and c.deployment = p.deployment and c.workload = p.workload
    inner join engine_top as t
        on t.run_id = p.run_id and t.deployment = p.deployment and t.workload = p.workload
),

read as (
    -- the curve's grid point nearest the equivalent rate
    select a.*, k.predicted_median_tok_s, k.mean_time_in_system_s, k.is_stable
    from at_load as a
    inner join curve as k
        on k.run_id = a.run_id and k.deployment = a.deployment and k.workload = a.workload
    qualify row_number() over (
        partition by a.wave_id, a.workload
        order by abs(ln(k.arrivals_per_s / a.equivalent_per_s))
    ) = 1
),

final as (
    select
        wave_id,
        any_value(line_share) as line_share,
        max(predicted_median_tok_s) filter (where workload = 'code')
            as predicted_code_median_tok_s,
        max(predicted_median_tok_s) filter (where workload = 'prose')
            as predicted_prose_median_tok_s,
        -- Little: each workload's offered rate x its time in the system at that load
        sum(offered_per_s * mean_time_in_system_s) as predicted_mean_in_flight,
        bool_and(is_stable) as predicted_steady,
        -- the load against the engine's most completions a second, by the busier workload
        max(equivalent_per_s / max_completions_per_s) as utilisation,
        case when max(equivalent_per_s / max_completions_per_s) < 1
            then 1.0 / (min(max_completions_per_s)
                * pow(1 - sqrt(max(equivalent_per_s / max_completions_per_s)), 2))
        end as settle_s
    from read
    group by wave_id
)

select * from final
