-- Each long prompt of an open-loop replay whose prefill reaches the counted schedule (due
-- after the warm-up, or due in it and still prefilling when the count begins: a 16 s stall
-- sent at 3.4 s held the streams counted from 15 s, the twin, 2026-12-05), with the decode
-- rate of the code and prose streams decoding during its prefill (from its send to its first
-- token): their tokens inside the window per stream-second of decode inside it (macro
-- window_stream_tok_s, the probes' formula, over stream-seconds). The plan's prefill budget
-- (fct_plan_routing) counts a long prompt's prefill as time below the threshold when decode
-- beside it falls under the threshold; a replay checks the budget by the same rule, on the
-- prefills it actually caused. below_threshold_new_s is the
-- part of this prefill's below-threshold window (clipped to the counted schedule) that no
-- earlier one already covered, so the windows' union is their sum.
with streams as (
    select * from {{ ref('int_replay_streams') }}
),

chunks as (
    select * from {{ ref('stg_chunks') }}
),

prefills as (
    select
        run_id,
        wave_id,
        deployment,
        request_id,
        status,
        warmup_s,
        duration_s,
        sent_ns / 1e9 as prefill_start_s,
        -- a prompt that never produced a token held the server until its request ended
        coalesce(first_token_ns, end_ns, last_token_ns) / 1e9 as prefill_end_s,
        first_token_ns is not null as prefill_ended
    from streams
    where workload = 'long' and sent_ns is not null
        and (is_counted or coalesce(first_token_ns, end_ns, last_token_ns) / 1e9 > warmup_s)
),

beside as (
    -- the code and prose streams decoding (first token to last) during some of the prefill,
    -- each for the part it overlaps: a 16 s prefill outlasts every 3 s stream, and the streams
    -- that came and went inside it are the ones it held (a stream decoding through the whole
    -- window overlaps all of it, the probes' case)
    select
        p.request_id as long_request_id,
        s.request_id,
        s.tokens_per_chunk,
        greatest(s.first_token_ns / 1e9, p.prefill_start_s) as overlap_start_s,
        least(s.last_token_ns / 1e9, p.prefill_end_s) as overlap_end_s
    from prefills as p
    inner join streams as s
        on s.wave_id = p.wave_id
        and s.workload in ('code', 'prose')
        and s.first_token_ns / 1e9 < p.prefill_end_s
        and s.last_token_ns / 1e9 > p.prefill_start_s
),

n_beside as (
    select
        long_request_id,
        count(*) as n_streams_beside,
        -- stream-seconds of decode inside the window: n streams x the window where each
        -- overlaps all of it
        sum(overlap_end_s - overlap_start_s) as stream_seconds_beside
    from beside
    group by long_request_id
),

tokens as (
    -- each stream's tokens inside its overlap, its own first token left out (a stream's rate
    -- counts the tokens after its first)
    select b.long_request_id, sum(coalesce(c.n_tokens, b.tokens_per_chunk)) as tokens_beside
    from beside as b
    inner join streams as s on s.request_id = b.request_id
    inner join chunks as c
        on c.request_id = b.request_id
        and c.t_ns / 1e9 >= b.overlap_start_s
        and c.t_ns / 1e9 < b.overlap_end_s
        and c.t_ns > s.first_token_ns
    group by b.long_request_id
),

rated as (
    select
        p.*,
        p.prefill_end_s - p.prefill_start_s as prefill_s,
        coalesce(n.n_streams_beside, 0) as n_streams_beside,
        -- the probes' formula over stream-seconds: tokens / (window x streams) where every
        -- stream overlaps the whole window
        case when n.stream_seconds_beside > 0 and p.prefill_end_s > p.prefill_start_s
            then {{ window_stream_tok_s('t.tokens_beside', 'n.stream_seconds_beside', 1) }}
        end as decode_beside_tok_s
    from prefills as p
    left join n_beside as n on n.long_request_id = p.request_id
    left join tokens as t on t.long_request_id = p.request_id
),

below as (
    select
        *,
        decode_beside_tok_s < {{ var('threshold_tok_s') }} as is_below_threshold,
        -- the window inside the counted schedule (after the warm-up, before its end)
        greatest(prefill_start_s, warmup_s) as clipped_start_s,
        least(prefill_end_s, duration_s) as clipped_end_s
    from rated
),

final as (
    select
        * exclude (clipped_start_s, clipped_end_s),
        case when is_below_threshold then greatest(0, clipped_end_s - greatest(clipped_start_s,
            coalesce(max(case when is_below_threshold then clipped_end_s end) over (
                partition by wave_id order by clipped_start_s, request_id
                rows between unbounded preceding and 1 preceding
            ), clipped_start_s)))
        else 0.0 end as below_threshold_new_s
    from below
)

select * from final
