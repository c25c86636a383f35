-- The arrival rates that replay the plan open-loop, from Little's law (L = lambda W): per
-- deployment and workload, the plan's streams on one replica (fct_plan_routing's streams /
-- replicas: the mean replica) over the measured stream duration W, the median send-to-end
-- time of the night's ok streams at the tested level that carries the plan's total (the
-- smallest tested level at or above it, else the highest tested). Long prompts: where the plan
-- routes them (fct_plan_routing.long_prompts_per_min, by measured prefill budget), a replica's
-- share, on the code row (the replay sends them beside the replica's streams of either
-- workload; none where it has nothing planned). W holds only for streams as long as those it
-- was measured on: the replay asks for stream_requested_tokens, the median max_tokens of the
-- same streams (a night measured at 64 tokens replayed at the fleet file's 512 would hold
-- ~8x the planned streams in flight and judge a load nobody planned).
-- The rate plan (fct_plan_rates, the default replay): one replica's share of the requests a
-- second the plan routes to the deployment by open-loop capacity, and the streams in flight
-- the model predicts for it (the rate x the workload's mean time in the system at lambda*).
with routing as (
    select * from {{ ref('fct_plan_routing') }}
),

plan as (
    select run_id, long_prompt_tokens, max_below_threshold_share
    from {{ ref('fct_plan') }}
),

rate_plan as (
    select run_id, deployment, 'code' as workload, replica_code_per_s as replica_per_s
    from {{ ref('fct_plan_rates') }}
    union all
    select run_id, deployment, 'prose', replica_prose_per_s
    from {{ ref('fct_plan_rates') }}
),

open_loop as (
    select run_id, deployment, workload, mean_time_in_system_s
    from {{ ref('fct_open_loop_capacity') }}
),

trials as (
    select wave_id, run_id, deployment, workload, concurrency
    from {{ ref('int_trials') }}
    where probe is null and trial > 0 and not coalesce(is_superseded, false) and is_valid
),

durations as (
    -- every ok stream's send-to-end time, per tested level
    select t.run_id, t.deployment, t.workload, t.concurrency,
        median((s.end_ns - s.sent_ns) / 1e9) as stream_duration_s,
        cast(round(median(s.requested_tokens)) as integer) as stream_requested_tokens,
        count(*) as n_streams
    from trials as t
    inner join {{ ref('int_stream_rates') }} as s on s.wave_id = t.wave_id
    where s.status = 'ok' and s.end_ns > s.sent_ns
    group by all
),

per_workload as (
    select r.run_id, r.deployment, r.replicas, 'code' as workload,
        r.code_streams / r.replicas as planned_streams,
        r.planned_streams / r.replicas as replica_planned_streams,
        coalesce(r.long_prompts_per_min, 0.0) / r.replicas as replica_long_prompts_per_min
    from routing as r
    union all
    select r.run_id, r.deployment, r.replicas, 'prose',
        r.prose_streams / r.replicas, r.planned_streams / r.replicas, null
    from routing as r
),

chosen as (
    select
        p.*,
        coalesce(
            min(d.concurrency) filter (where d.concurrency >= ceil(p.replica_planned_streams)),
            max(d.concurrency)
        ) as duration_level
    from per_workload as p
    left join durations as d
        on d.run_id = p.run_id and d.deployment = p.deployment and d.workload = p.workload
    group by all
),

final as (
    select
        c.run_id,
        c.deployment,
        c.workload,
        c.replicas,
        cast(c.planned_streams as double) as planned_streams,
        cast(c.replica_planned_streams as double) as replica_planned_streams,
        c.duration_level,
        d.stream_duration_s,
        d.stream_requested_tokens,
        d.n_streams as duration_streams,
        -- Little's law: arrivals a second that keep planned_streams in flight on average
        case when c.planned_streams = 0 then 0.0
             when d.stream_duration_s > 0 then c.planned_streams / d.stream_duration_s
        end as arrivals_per_s,
        cast(c.replica_long_prompts_per_min as double) as long_prompts_per_min,
        pl.long_prompt_tokens,
        pl.max_below_threshold_share,
        -- the rate plan: requests a second on one replica, and the streams in flight the
        -- open-loop model predicts for them
        coalesce(rp.replica_per_s, 0.0) as rate_arrivals_per_s,
        coalesce(rp.replica_per_s * ol.mean_time_in_system_s, 0.0) as rate_planned_streams,
        case when c.planned_streams = 0 then 'nothing planned'
             when d.stream_duration_s is null then 'no measured stream duration: no replay rate'
        end as not_replayable_reason
    from chosen as c
    left join durations as d
        on d.run_id = c.run_id and d.deployment = c.deployment and d.workload = c.workload
        and d.concurrency = c.duration_level
    left join plan as pl on pl.run_id = c.run_id
    left join rate_plan as rp
        on rp.run_id = c.run_id and rp.deployment = c.deployment and rp.workload = c.workload
    left join open_loop as ol
        on ol.run_id = c.run_id and ol.deployment = c.deployment and ol.workload = c.workload
)

select * from final
