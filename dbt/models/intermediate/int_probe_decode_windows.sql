-- Background decode rate of each prefill-interference probe in sliding windows: tokens per
-- background stream per second over (window_end - probe_window_s, window_end], evaluated
-- every probe_step_s while every background stream is decoding, so streams that finish at the
-- end never read as a dip. A chunk's tokens come from continuous usage when the server sent
-- it, otherwise from the stream's mean tokens per chunk (final usage / chunks).
{% set window_s = var('probe_window_s') %}
{% set step_s = var('probe_step_s') %}
with req as (
    select * from {{ ref('int_probe_requests') }}
    where probe = 'prefill-interference' and request_role = 'background'
),

chunks as (
    select * from {{ ref('stg_chunks') }}
),

events as (
    select r.wave_id, c.t_ns / 1e9 as t_s,
           sum(coalesce(c.n_tokens, r.tokens_per_chunk)) as tokens
    from req as r
    inner join chunks as c on c.request_id = r.request_id
    group by r.wave_id, c.t_ns
),

cumulative as (
    select wave_id, t_s,
           sum(tokens) over (partition by wave_id order by t_s
                             rows between unbounded preceding and current row) as cum_tokens
    from events
),

span as (
    -- the interval in which all background streams were between first and last token
    select wave_id, any_value(run_id) as run_id, any_value(deployment) as deployment,
           count(*) as n_background,
           max(first_token_s) as all_active_from_s,
           min(last_token_s) as all_active_to_s
    from req
    group by wave_id
),

grid as (
    select s.*,
           s.all_active_from_s + {{ window_s }} + {{ step_s }}
               * unnest(range(0, greatest(cast(floor((s.all_active_to_s - s.all_active_from_s
                   - {{ window_s }}) / {{ step_s }}) as bigint) + 1, 0))) as window_end_s
    from span as s
),

at_end as (
    select g.*, c.cum_tokens as cum_at_end
    from grid as g
    asof left join cumulative as c on c.wave_id = g.wave_id and c.t_s <= g.window_end_s
),

at_start as (
    select e.*, c.cum_tokens as cum_at_start
    from at_end as e
    asof left join cumulative as c
        on c.wave_id = e.wave_id and c.t_s <= e.window_end_s - {{ window_s }}
),

final as (
    select
        run_id,
        wave_id,
        deployment,
        n_background,
        {{ window_s }}::double as window_s,
        window_end_s,
        window_end_s - {{ window_s }} / 2 as window_mid_s,
        (coalesce(cum_at_end, 0) - coalesce(cum_at_start, 0))
            / {{ window_s }} / n_background as decode_tok_s
    from at_start
)

select * from final
