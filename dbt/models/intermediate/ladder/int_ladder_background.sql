-- The background streams' decode rate on each rung of a context ladder: during the cold
-- prompt's prefill (chunks between its send and its first token) and outside prefills (the
-- rest of the rung, from the cold send to the rung's last token, less both prefill windows).
-- A chunk's tokens: the server's per-chunk count, else its stream's mean tokens per chunk.
with req as (
    select * from {{ ref('int_ladder_requests') }}
),

chunks as (
    select * from {{ ref('stg_chunks') }}
),

rungs as (
    select
        wave_id,
        rung_tokens,
        any_value(n_background) as n_background,
        max(sent_s) filter (where request_role = 'ladder_cold') as cold_sent_s,
        max(first_token_s) filter (where request_role = 'ladder_cold') as cold_first_s,
        max(sent_s) filter (where request_role = 'ladder_warm') as warm_sent_s,
        max(first_token_s) filter (where request_role = 'ladder_warm') as warm_first_s,
        max(last_token_s) as rung_end_s
    from req
    where request_role in ('ladder_cold', 'ladder_warm')
    group by wave_id, rung_tokens
),

windows as (
    select
        *,
        cold_first_s - cold_sent_s as cold_prefill_s,
        coalesce(warm_first_s - warm_sent_s, 0) as warm_prefill_s,
        rung_end_s - cold_sent_s - (cold_first_s - cold_sent_s)
            - coalesce(warm_first_s - warm_sent_s, 0) as outside_s
    from rungs
    where cold_first_s > cold_sent_s
),

background as (
    select r.wave_id, c.t_ns / 1e9 as t_s, coalesce(c.n_tokens, r.tokens_per_chunk) as tokens
    from req as r
    inner join chunks as c on c.request_id = r.request_id
    where r.request_role = 'background'
),

tokens as (
    select
        w.wave_id,
        w.rung_tokens,
        sum(b.tokens) filter (where b.t_s >= w.cold_sent_s and b.t_s < w.cold_first_s)
            as prefill_tokens,
        sum(b.tokens) filter (
            where b.t_s >= w.cold_first_s and b.t_s < w.rung_end_s
                and not (w.warm_first_s is not null and b.t_s >= w.warm_sent_s
                    and b.t_s < w.warm_first_s)
        ) as outside_tokens
    from windows as w
    left join background as b on b.wave_id = w.wave_id
    group by w.wave_id, w.rung_tokens
),

final as (
    select
        w.wave_id,
        w.rung_tokens,
        w.n_background,
        w.cold_prefill_s,
        w.outside_s,
        {{ window_stream_tok_s('t.prefill_tokens', 'w.cold_prefill_s', 'w.n_background') }}
            as background_prefill_tok_s,
        case when w.outside_s > 0 then
            {{ window_stream_tok_s('t.outside_tokens', 'w.outside_s', 'w.n_background') }}
        end as background_outside_tok_s
    from windows as w
    inner join tokens as t on t.wave_id = w.wave_id and t.rung_tokens = w.rung_tokens
)

select * from final
