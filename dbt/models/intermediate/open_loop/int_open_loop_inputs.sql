-- What the open-loop model reads of one night, per run, deployment and workload: the measured
-- per-stream decode curve (every level with a valid median), the measured output length, the
-- time one request holds the engine before its first token, the decode time each arriving
-- request's prefill takes from the batch (its uncached prompt at the prefill rate the
-- prefill-interference probe measured; none where no probe measured one, said so), the share
-- of time the plan's long prompts routed to the deployment stall it (fct_plan_routing's rate
-- a replica x fct_plan's prompt length over the same prefill rate: the prefill budget is
-- reserved out of the decode budget), and the request slots the server's own gauges showed
-- full. One row per tested level; the per-workload figures repeat.
with levels as (
    select run_id, deployment, workload, concurrency, median_decode_tok_s, median_ttft_s
    from {{ ref('int_levels') }}
    where workload in ('code', 'prose')
      and n_valid_trials > 0 and median_decode_tok_s > 0
),

streams as (
    -- the measured output length: the median usage count of the night's ok sweep streams
    select t.run_id, t.deployment, t.workload,
        median(s.completion_tokens) as output_tokens,
        median(s.prompt_tokens - coalesce(s.cached_prompt_tokens, 0)) as uncached_prompt_tokens,
        count(*) as n_output_streams
    from {{ ref('int_trials') }} as t
    inner join {{ ref('int_stream_rates') }} as s on s.wave_id = t.wave_id
    where t.probe is null and t.trial > 0 and t.is_valid
      and s.status = 'ok' and s.completion_tokens >= 2
    group by all
),

prefill_rate as (
    -- the prefill rate the night's prefill-interference probe measured: a long uncached
    -- prompt's tokens over its time to first token (the median over the deployment's probes)
    select run_id, deployment, median(prompt_tokens / ttft_s) as prefill_tok_s
    from {{ ref('int_probe_requests') }}
    where probe = 'prefill-interference' and request_role = 'long'
      and prompt_tokens > 0 and ttft_s > 0
    group by all
),

long_prompts as (
    -- the plan's long prompts a second on one replica, and the prefill time each takes
    select r.run_id, r.deployment,
        coalesce(r.long_prompts_per_min, 0) / 60.0 / r.replicas as long_prompts_per_s,
        p.long_prompt_tokens
    from {{ ref('fct_plan_routing') }} as r
    inner join {{ ref('fct_plan') }} as p on p.run_id = r.run_id
),

spread as (
    -- how much one request's time in the engine varies: the squared coefficient of variation
    -- of the ok streams' send-to-end times within each tested level, the median over levels
    -- (fixed-length streams hold the engine almost alike: waits are shorter than exponential
    -- holding times give, Allen-Cunneen's (1 + cv2) / 2 for Poisson arrivals)
    select run_id, deployment, workload, median(cv2) as hold_cv2
    from (
        select t.run_id, t.deployment, t.workload, t.concurrency,
            coalesce(var_pop((s.end_ns - s.sent_ns) / 1e9)
                / nullif(pow(avg((s.end_ns - s.sent_ns) / 1e9), 2), 0), 0) as cv2
        from {{ ref('int_trials') }} as t
        inner join {{ ref('int_stream_rates') }} as s on s.wave_id = t.wave_id
        where t.probe is null and t.trial > 0 and t.is_valid
          and s.status = 'ok' and s.end_ns > s.sent_ns
        group by all
    )
    group by all
),

slots as (
    -- a slot limit is what the gauges showed: the most requests running at a level where
    -- others waited (a declared slot count alone is configuration, not a measurement)
    select run_id, deployment,
        cast(max(peak_running_requests) filter (where peak_waiting_requests > 0) as integer)
            as measured_slots
    from {{ ref('int_level_diagnosis') }}
    group by run_id, deployment
),

lowest as (
    -- the time a request holds the engine before its first token: the median TTFT at the
    -- lowest tested level, where no other request's prefill stands in front of it
    select run_id, deployment, workload,
        arg_min(median_ttft_s, concurrency) as prefill_s,
        min(concurrency) as lowest_level,
        max(concurrency) as highest_level,
        count(*) as n_levels
    from levels
    group by all
),

final as (
    select
        l.run_id,
        l.deployment,
        l.workload,
        cast(l.concurrency as integer) as concurrency,
        cast(l.median_decode_tok_s as double) as median_decode_tok_s,
        1.0 / l.median_decode_tok_s as s_per_token,
        cast(s.output_tokens as double) as output_tokens,
        s.n_output_streams,
        cast(coalesce(w.prefill_s, 0) as double) as prefill_s,
        cast(s.uncached_prompt_tokens as double) as uncached_prompt_tokens,
        pr.prefill_tok_s,
        -- the batch's decode time one arrival's prefill takes (0 where no rate was measured)
        cast(coalesce(s.uncached_prompt_tokens / pr.prefill_tok_s, 0) as double)
            as prefill_stall_s,
        -- the share of time the plan's long prompts hold the batch's decode (0 without a rate)
        cast(coalesce(lp.long_prompts_per_s * lp.long_prompt_tokens / pr.prefill_tok_s, 0)
            as double) as long_prompt_stall_share,
        case when pr.prefill_tok_s is null
            then 'not measured: no prefill-interference probe; no stall counted'
            else 'measured: ' || round(pr.prefill_tok_s)::bigint || ' tok/s (prefill-interference)'
        end as prefill_stall_basis,
        w.lowest_level,
        w.highest_level,
        w.n_levels,
        sl.measured_slots,
        cast(coalesce(sp.hold_cv2, 1.0) as double) as hold_cv2
    from levels as l
    inner join lowest as w
        on w.run_id = l.run_id and w.deployment = l.deployment and w.workload = l.workload
    left join streams as s
        on s.run_id = l.run_id and s.deployment = l.deployment and s.workload = l.workload
    left join slots as sl on sl.run_id = l.run_id and sl.deployment = l.deployment
    left join prefill_rate as pr on pr.run_id = l.run_id and pr.deployment = l.deployment
    left join long_prompts as lp on lp.run_id = l.run_id and lp.deployment = l.deployment
    left join spread as sp
        on sp.run_id = l.run_id and sp.deployment = l.deployment and sp.workload = l.workload
)

select * from final
