-- The measured engine as the open-loop model reads it, per run, deployment, workload and d,
-- the streams decoding at once (1 .. max_in_flight): the time per token, linear in d between
-- tested levels (a decode step's cost grows with its batch), the lowest level's below it, the
-- last segment's slope (never falling) past the highest; with the measured output length,
-- prefill time and slot limit (int_open_loop_inputs) and the time one stream holds the engine
-- at d with no prefill stall (prefill_s + (output_tokens - 1) x s_per_token).
{% set max_in_flight = var('open_loop_max_in_flight') %}
with inputs as (
    select * from {{ ref('int_open_loop_inputs') }}
),

segments as (
    -- the per-token time between consecutive tested levels, and the extension past the last
    select
        *,
        lead(concurrency) over w as next_concurrency,
        coalesce(
            (lead(s_per_token) over w - s_per_token)
                / (lead(concurrency) over w - concurrency),
            greatest(
                (s_per_token - lag(s_per_token) over w) / (concurrency - lag(concurrency) over w),
                0.0),
            0.0) as slope_s_per_token_per_stream,
        row_number() over w = 1 as is_first
    from inputs
    window w as (partition by run_id, deployment, workload order by concurrency)
),

combos as (
    select run_id, deployment, workload,
        any_value(output_tokens) as output_tokens,
        any_value(prefill_s) as prefill_s,
        any_value(prefill_stall_s) as prefill_stall_s,
        any_value(long_prompt_stall_share) as long_prompt_stall_share,
        any_value(prefill_stall_basis) as prefill_stall_basis,
        any_value(measured_slots) as measured_slots,
        any_value(hold_cv2) as hold_cv2,
        any_value(highest_level) as highest_level,
        cast(least({{ max_in_flight }}, greatest(64, 4 * any_value(highest_level))) as integer)
            as max_in_flight
    from inputs
    where output_tokens >= 2
    group by all
),

decoding as (
    -- the per-token time with d streams decoding, d = 1 .. max_in_flight
    select d.run_id, d.deployment, d.workload, d.d,
        s.s_per_token + greatest(d.d - s.concurrency, 0) * s.slope_s_per_token_per_stream
            as s_per_token
    from (
        select run_id, deployment, workload, unnest(range(1, max_in_flight + 1)) as d
        from combos
    ) as d
    inner join segments as s
        on s.run_id = d.run_id and s.deployment = d.deployment and s.workload = d.workload
        and (d.d >= s.concurrency or s.is_first)
        and (d.d < s.next_concurrency or s.next_concurrency is null)
),

final as (
    select
        c.run_id,
        c.deployment,
        c.workload,
        cast(d.d as integer) as streams_decoding,
        d.s_per_token,
        1.0 / d.s_per_token as per_stream_tok_s,
        c.prefill_s + (c.output_tokens - 1) * d.s_per_token as stream_hold_s,
        c.output_tokens,
        c.prefill_s,
        c.prefill_stall_s,
        c.long_prompt_stall_share,
        c.prefill_stall_basis,
        c.measured_slots,
        c.hold_cv2,
        c.highest_level,
        c.max_in_flight
    from combos as c
    inner join decoding as d
        on d.run_id = c.run_id and d.deployment = c.deployment and d.workload = c.workload
)

select * from final
