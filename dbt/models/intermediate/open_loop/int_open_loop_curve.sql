-- The open-loop model: what independent (Poisson) arrivals at rate lambda do to a deployment
-- whose streams decode as the night measured them, on a geometric grid of arrival rates.
--
-- The engine is a birth-death chain on n, the streams in flight. With d = min(n, slots)
-- decoding (the measured slot limit, else all n), each decoding stream advances at the
-- measured per-stream rate r(d), slowed by the share of time the engine spends prefilling the
-- arrivals (sigma = lambda x prefill_stall_s, each arrival's uncached prompt at the measured
-- prefill rate: a prefill stalls the batch, as on GB10 and in the twin's engine; plus the
-- share the plan's long prompts take, long_prompt_stall_share), and holds the
-- engine h(d) = prefill_s + (output_tokens - 1) / r_eff(d), prefill_s its time to first
-- token at the lowest tested level; so
-- streams complete at mu(n) = d / h(d). The stationary distribution is
-- pi(n) ~ prod_{k<=n} lambda / mu(k); for a processor-sharing engine it does not depend on the
-- output lengths' distribution (Kelly's symmetric queues), so fixed-length streams have it
-- too. r(d) between tested levels: the time per token 1 / r is linear in d (a decode step's
-- cost grows with its batch); below the lowest level it is the lowest level's, above the
-- highest it continues the last segment's slope (never falling).
--
-- Per grid point: the mean and p95 of streams in flight; the predicted median stream rate,
-- read as the stream-time-weighted mean rate (sum pi(n) d r_eff(d) / sum pi(n) d: a stream
-- spends time in state n in proportion to n pi(n)); the TTFT p90 from arrival (an arrival that
-- finds n >= slots waits for n - slots + 1 completions at mu(slots), scaled by (1 + cv2) / 2 of
-- the measured holding times (Allen-Cunneen), after PASTA: arrivals see
-- pi); the mean time in the system (Little: L / lambda). Where it stops being true: preemption
-- (a KV-full engine), curves measured at another output length, prefills longer than the
-- lowest level's (long prompts are budgeted apart, fct_plan_routing), and an engine whose
-- rate depends on more than the count in flight.
{% set step = 1 + var('open_loop_rate_step_pct') / 100 %}
{% set points = var('open_loop_grid_points') %}
with engine as (
    select * from {{ ref('int_open_loop_engine') }}
),

combos as (
    select distinct run_id, deployment, workload, output_tokens, prefill_s, prefill_stall_s,
        coalesce(long_prompt_stall_share, 0) as long_prompt_stall_share, measured_slots,
        hold_cv2, max_in_flight
    from engine
),

decoding as (
    select run_id, deployment, workload, streams_decoding as d, s_per_token from engine
),

states as (
    select *, least(n, coalesce(measured_slots, n)) as d
    from (select *, unnest(range(1, max_in_flight + 1)) as n from combos)
),

ceiling as (
    -- the most the engine completes a second at any n with no prefill stall: the grid's top
    select s.run_id, s.deployment, s.workload,
        max(s.d / (s.prefill_s + (s.output_tokens - 1) * d.s_per_token)) as max_completions_per_s
    from states as s
    inner join decoding as d
        on d.run_id = s.run_id and d.deployment = s.deployment and d.workload = s.workload
        and d.d = s.d
    group by all
),

grid as (
    select c.run_id, c.deployment, c.workload, g.grid_index,
        c.max_completions_per_s * 1.05 * pow({{ step }}, -g.grid_index) as arrivals_per_s
    from ceiling as c
    cross join (select unnest(range(0, {{ points }})) as grid_index) as g
),

chain as (
    select
        g.run_id, g.deployment, g.workload, g.grid_index, g.arrivals_per_s,
        s.n, s.d, s.prefill_s, s.measured_slots, s.hold_cv2, s.max_in_flight,
        {%- set sigma = 'least(g.arrivals_per_s * s.prefill_stall_s + s.long_prompt_stall_share, 0.999)' %}
        {{ sigma }} as prefill_stall_share,
        (1 - {{ sigma }}) / d.s_per_token as rate_tok_s,
        s.prefill_s + (s.output_tokens - 1) * d.s_per_token / (1 - {{ sigma }}) as hold_s
    from grid as g
    inner join states as s
        on s.run_id = g.run_id and s.deployment = g.deployment and s.workload = g.workload
    inner join decoding as d
        on d.run_id = s.run_id and d.deployment = s.deployment and d.workload = s.workload
        and d.d = s.d
),

log_weights as (
    -- log pi(n) up to a constant: the running sum of log(lambda / mu(k)), k <= n
    select *,
        sum(ln(arrivals_per_s * hold_s / d)) over (
            partition by run_id, deployment, workload, grid_index order by n
        ) as log_weight
    from chain
),

with_empty as (
    -- the empty state n = 0 has log weight 0
    select run_id, deployment, workload, grid_index, arrivals_per_s, n, d, rate_tok_s, hold_s,
        prefill_s, measured_slots, hold_cv2, max_in_flight, prefill_stall_share, log_weight
    from log_weights
    union all
    select distinct run_id, deployment, workload, grid_index, arrivals_per_s, 0, 0, null,
        null, prefill_s, measured_slots, hold_cv2, max_in_flight, prefill_stall_share, 0.0
    from log_weights
),

relative as (
    select *,
        log_weight - max(log_weight) over (
            partition by run_id, deployment, workload, grid_index
        ) as relative_log_weight
    from with_empty
),

probabilities as (
    select *,
        exp(relative_log_weight) / sum(exp(relative_log_weight)) over (
            partition by run_id, deployment, workload, grid_index
        ) as p
    from relative
),

with_waits as (
    -- an arrival that finds n in flight: its TTFT is its own prefill, after n - slots + 1
    -- completions where every slot is taken, at the mean spacing hold / slots, scaled by
    -- (1 + hold_cv2) / 2 (Allen-Cunneen: holds that vary less than exponential ones wait less)
    select p.*,
        p.prefill_s + case when p.measured_slots is not null and p.n >= p.measured_slots
            then (p.n - p.measured_slots + 1) * at_slots.hold_s / p.measured_slots
                * (1 + p.hold_cv2) / 2 else 0 end
            as ttft_from_arrival_s,
        sum(p.p) over (
            partition by p.run_id, p.deployment, p.workload, p.grid_index order by p.n
        ) as cumulative_p
    from probabilities as p
    left join chain as at_slots
        on at_slots.run_id = p.run_id and at_slots.deployment = p.deployment
        and at_slots.workload = p.workload and at_slots.grid_index = p.grid_index
        and at_slots.n = p.measured_slots
),

final as (
    select
        run_id,
        deployment,
        workload,
        grid_index,
        arrivals_per_s,
        arrivals_per_s * 60 as requests_per_min,
        any_value(prefill_stall_share) as prefill_stall_share,
        sum(p * n) as mean_in_flight,
        min(n) filter (where cumulative_p >= 0.95) as p95_in_flight,
        sum(p * n) / arrivals_per_s as mean_time_in_system_s,
        sum(p * d * rate_tok_s) / nullif(sum(p * d), 0) as predicted_median_tok_s,
        -- TTFT grows with n, so its p90 over arrivals is the TTFT at the state where the
        -- arrivals' cumulative share first reaches 0.9
        min(ttft_from_arrival_s) filter (where cumulative_p >= 0.9) as predicted_ttft_p90_s,
        -- the chain cut at max_in_flight: mass left at the cut means the arrivals outrun the
        -- engine (no steady state within what the model may extrapolate)
        sum(p) filter (where n = max_in_flight) as p_at_cut,
        any_value(max_in_flight) as max_in_flight,
        coalesce(sum(p) filter (where n = max_in_flight), 0) <= 1e-4
            and any_value(prefill_stall_share) < 0.999 as is_stable
    from with_waits
    group by run_id, deployment, workload, grid_index, arrivals_per_s
)

select * from final
