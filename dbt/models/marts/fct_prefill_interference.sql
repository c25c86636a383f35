-- Prefill-interference probe: N decode streams held while one long uncached prompt is
-- prefilled, with short probe requests sent at a fixed interval. The prefill window runs
-- from the long request's send to its first token. Background decode rates are tokens per
-- stream per second in equal-length windows before, during and after it. The dip itself is
-- read from the sliding-window series (int_probe_decode_windows): its depth is the lowest
-- window rate around the prefill, its measured duration the time the sliding rate stayed
-- below dip_share of the before rate.
with req as (
    select * from {{ ref('int_probe_requests') }}
    where probe = 'prefill-interference'
),

chunks as (
    select * from {{ ref('stg_chunks') }}
),

long_req as (
    select
        wave_id, run_id, deployment,
        prompt_tokens as long_prompt_tokens,
        sent_s as prefill_start_s,
        first_token_s as prefill_end_s,
        ttft_s as long_ttft_s
    from req
    where request_role = 'long'
),

background as (
    select r.wave_id, r.request_id, coalesce(c.n_tokens, r.tokens_per_chunk) as tokens,
           c.t_ns / 1e9 as t_s
    from req as r
    inner join chunks as c on c.request_id = r.request_id
    where r.request_role = 'background'
),

span as (
    select wave_id, min(t_s) as bg_first_s, max(t_s) as bg_last_s,
           count(distinct request_id) as n_background
    from background
    group by wave_id
),

windows as (
    select
        l.*,
        s.n_background,
        greatest(l.prefill_end_s - l.prefill_start_s, 0.001) as window_s,
        -- before/after windows as long as the prefill, clipped to when the streams decoded
        greatest(l.prefill_start_s - greatest(l.prefill_start_s
            - (l.prefill_end_s - l.prefill_start_s), s.bg_first_s), 0.001) as before_s,
        greatest(least(l.prefill_end_s + (l.prefill_end_s - l.prefill_start_s), s.bg_last_s)
            - l.prefill_end_s, 0.001) as after_s
    from long_req as l
    inner join span as s on s.wave_id = l.wave_id
),

rates as (
    select
        w.wave_id,
        -- no chunk at all in a window is a rate of 0, not unknown (macros/window_rate.sql)
        {{ window_stream_tok_s('sum(b.tokens) filter (
            where b.t_s >= w.prefill_start_s - w.before_s and b.t_s < w.prefill_start_s
        )', 'w.before_s', 'w.n_background') }} as before_tok_s,
        {{ window_stream_tok_s('sum(b.tokens) filter (
            where b.t_s >= w.prefill_start_s and b.t_s < w.prefill_end_s
        )', 'w.window_s', 'w.n_background') }} as during_tok_s,
        {{ window_stream_tok_s('sum(b.tokens) filter (
            where b.t_s >= w.prefill_end_s and b.t_s < w.prefill_end_s + w.after_s
        )', 'w.after_s', 'w.n_background') }} as after_tok_s
    from windows as w
    left join background as b on b.wave_id = w.wave_id
    group by w.wave_id, w.window_s, w.before_s, w.after_s, w.n_background
),

sliding as (
    select * from {{ ref('int_probe_decode_windows') }}
),

dip as (
    select
        w.wave_id,
        any_value(s.window_s) as sliding_window_s,
        min(s.decode_tok_s) filter (
            where s.window_end_s >= w.prefill_start_s
                and s.window_end_s <= w.prefill_end_s + s.window_s
        ) as min_window_tok_s,
        case when count(s.window_end_s) filter (where s.window_end_s >= w.prefill_start_s) > 0
            then {{ var('probe_step_s') }} * count(*) filter (
                where s.window_end_s >= w.prefill_start_s
                    and s.decode_tok_s < {{ var('dip_share') }} * r.before_tok_s
            )
        end as dip_below_share_s,
        -- the streams stopped while the rate was still low: the dip lasted at least this long
        arg_max(s.decode_tok_s, s.window_end_s) < {{ var('dip_share') }} * any_value(r.before_tok_s)
            as dip_truncated
    from windows as w
    inner join rates as r on r.wave_id = w.wave_id
    inner join sliding as s on s.wave_id = w.wave_id
    group by w.wave_id
),

probes as (
    select
        w.wave_id,
        median(p.ttft_s) filter (where p.sent_s < w.prefill_start_s) as baseline_probe_ttft_s,
        median(p.ttft_s) filter (
            where p.sent_s >= w.prefill_start_s and p.sent_s < w.prefill_end_s
        ) as during_probe_ttft_s,
        max(p.ttft_s) as max_probe_ttft_s,
        count(*) as n_probes
    from windows as w
    inner join req as p on p.wave_id = w.wave_id and p.request_role = 'probe'
    group by w.wave_id
),

final as (
    select
        w.run_id,
        w.wave_id,
        w.deployment,
        w.n_background,
        w.long_prompt_tokens,
        w.long_ttft_s,
        w.long_prompt_tokens / nullif(w.long_ttft_s, 0) as prefill_tok_s,
        w.window_s as dip_duration_s,
        r.before_tok_s,
        r.during_tok_s,
        r.after_tok_s,
        r.during_tok_s / nullif(r.before_tok_s, 0) as dip_ratio,
        -- decode time the other streams lost to the prefill, per stream
        w.window_s * (1 - coalesce(r.during_tok_s / nullif(r.before_tok_s, 0), 1))
            as decode_lost_s,
        d.sliding_window_s,
        d.min_window_tok_s,
        d.min_window_tok_s / nullif(r.before_tok_s, 0) as dip_depth_ratio,
        {{ var('dip_share') }}::double as dip_share,
        d.dip_below_share_s,
        d.dip_truncated,
        p.baseline_probe_ttft_s,
        p.during_probe_ttft_s,
        p.max_probe_ttft_s,
        p.n_probes
    from windows as w
    left join rates as r on r.wave_id = w.wave_id
    left join dip as d on d.wave_id = w.wave_id
    left join probes as p on p.wave_id = w.wave_id
)

select * from final
