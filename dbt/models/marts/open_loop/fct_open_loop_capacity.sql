-- Open-loop capacity per run, deployment and workload: the largest Poisson arrival rate
-- lambda* (requests a second and a minute) at which the open-loop model
-- (int_open_loop_curve) still predicts a median stream rate >= var threshold_tok_s and a TTFT
-- p90 from arrival <= var ttft_ceiling_s, with a steady state; beside the burst capacity
-- (fct_capacity) and its Little rate (the burst capacity's streams over the time one of them
-- holds the engine at that level, int_open_loop_engine), the mean and p95 streams in flight,
-- the predictions at lambda*, and the users it serves at var think_time_s between requests
-- (N = lambda* (W + Z), the interactive response-time law, W the mean time in the system).
-- lambda* is the largest grid point below the lowest failing one (var open_loop_rate_step_pct).
with curve as (
    select
        *,
        is_stable
            and predicted_median_tok_s >= {{ var('threshold_tok_s') }}
            and predicted_ttft_p90_s <= {{ var('ttft_ceiling_s') }} as passes
    from {{ ref('int_open_loop_curve') }}
),

first_failing as (
    -- the lowest failing rate: the failing grid point with the largest index (the grid's
    -- index rises as the rate falls)
    select run_id, deployment, workload,
        max(grid_index) filter (where not passes) as failing_grid_index
    from curve
    group by all
),

best as (
    -- lambda*: the highest passing rate below the lowest failing one
    select c.run_id, c.deployment, c.workload,
        min(c.grid_index) filter (
            where c.passes and c.grid_index > coalesce(f.failing_grid_index, -1)
        ) as best_grid_index,
        any_value(f.failing_grid_index) as failing_grid_index
    from curve as c
    inner join first_failing as f using (run_id, deployment, workload)
    group by all
),

at_best as (
    select b.*, c.arrivals_per_s as open_loop_arrivals_per_s, c.mean_in_flight,
        c.p95_in_flight, c.predicted_median_tok_s, c.predicted_ttft_p90_s,
        c.mean_time_in_system_s, c.prefill_stall_share
    from best as b
    left join curve as c
        on c.run_id = b.run_id and c.deployment = b.deployment and c.workload = b.workload
        and c.grid_index = b.best_grid_index
),

at_failing as (
    -- what fails first above lambda*
    select b.run_id, b.deployment, b.workload,
        case when not c.is_stable then 'no steady state (arrivals outrun the engine)'
             when c.predicted_median_tok_s < {{ var('threshold_tok_s') }}
                 then 'decode rate'
             else 'TTFT from arrival' end as limited_by
    from best as b
    inner join curve as c
        on c.run_id = b.run_id and c.deployment = b.deployment and c.workload = b.workload
        and c.grid_index = b.failing_grid_index
),

burst as (
    select run_id, deployment, workload, capacity_streams, is_measured
    from {{ ref('fct_capacity') }}
),

engine as (
    select * from {{ ref('int_open_loop_engine') }}
),

facts as (
    select distinct run_id, deployment, workload, output_tokens, prefill_s, prefill_stall_s,
        prefill_stall_basis, measured_slots, hold_cv2, highest_level
    from engine
),

final as (
    select
        f.run_id,
        f.deployment,
        f.workload,
        f.output_tokens,
        f.prefill_s,
        f.prefill_stall_s,
        f.prefill_stall_basis,
        f.measured_slots,
        f.hold_cv2,
        f.highest_level as highest_tested_level,
        bu.capacity_streams as burst_capacity_streams,
        -- Little's rate of the burst plan: its streams over the time each holds the engine
        case when bu.capacity_streams > 0 then bu.capacity_streams / e.stream_hold_s end
            as little_arrivals_per_s,
        a.open_loop_arrivals_per_s,
        a.open_loop_arrivals_per_s * 60 as open_loop_requests_per_min,
        a.open_loop_arrivals_per_s
            / nullif(case when bu.capacity_streams > 0
                then bu.capacity_streams / e.stream_hold_s end, 0) as ratio_to_little,
        a.mean_in_flight,
        a.p95_in_flight,
        a.predicted_median_tok_s,
        a.predicted_ttft_p90_s,
        a.mean_time_in_system_s,
        a.prefill_stall_share,
        cast({{ var('think_time_s') }} as double) as think_time_s,
        a.open_loop_arrivals_per_s
            * (a.mean_time_in_system_s + {{ var('think_time_s') }}) as users,
        x.limited_by,
        a.p95_in_flight > f.highest_level as is_extrapolated,
        case
            when a.open_loop_arrivals_per_s is null
                then 'no arrival rate on the grid holds (even one stream at a time fails)'
        end as not_predicted_reason,
        cast({{ var('threshold_tok_s') }} as double) as threshold_tok_s,
        cast({{ var('ttft_ceiling_s') }} as double) as ttft_ceiling_s
    from facts as f
    left join at_best as a
        on a.run_id = f.run_id and a.deployment = f.deployment and a.workload = f.workload
    left join at_failing as x
        on x.run_id = f.run_id and x.deployment = f.deployment and x.workload = f.workload
    left join burst as bu
        on bu.run_id = f.run_id and bu.deployment = f.deployment and bu.workload = f.workload
    left join engine as e
        on e.run_id = f.run_id and e.deployment = f.deployment and e.workload = f.workload
        and e.streams_decoding = least(bu.capacity_streams, e.max_in_flight)
)

select * from final
