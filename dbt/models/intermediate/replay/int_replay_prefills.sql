-- Each long prompt of an open-loop replay due after the warm-up, with the decode rate of the
-- code and prose streams that decoded through its prefill (from its send to its first token):
-- tokens per stream per second inside that window (macro window_stream_tok_s, the probes'
-- formula). The plan's prefill budget (fct_plan_routing) counts a long prompt's prefill as
-- time below the threshold when decode beside it falls under the threshold; a replay checks
-- the budget by the same rule, on the prefills it actually caused. below_threshold_new_s is the
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
    where workload = 'long' and is_counted and sent_ns is not null
),

beside as (
    -- the decode streams that decoded from before the prefill began until after it ended
    select p.request_id as long_request_id, s.request_id, s.tokens_per_chunk
    from prefills as p
    inner join streams as s
        on s.wave_id = p.wave_id
        and s.workload in ('code', 'prose')
        and s.first_token_ns / 1e9 <= p.prefill_start_s
        and s.last_token_ns / 1e9 >= p.prefill_end_s
),

n_beside as (
    select long_request_id, count(*) as n_streams_beside
    from beside
    group by long_request_id
),

tokens as (
    select b.long_request_id, sum(coalesce(c.n_tokens, b.tokens_per_chunk)) as tokens_beside
    from beside as b
    inner join prefills as p on p.request_id = b.long_request_id
    inner join chunks as c
        on c.request_id = b.request_id
        and c.t_ns / 1e9 >= p.prefill_start_s
        and c.t_ns / 1e9 < p.prefill_end_s
    group by b.long_request_id
),

rated as (
    select
        p.*,
        p.prefill_end_s - p.prefill_start_s as prefill_s,
        coalesce(n.n_streams_beside, 0) as n_streams_beside,
        case when n.n_streams_beside > 0 and p.prefill_end_s > p.prefill_start_s
            then {{ window_stream_tok_s('t.tokens_beside', 'p.prefill_end_s - p.prefill_start_s',
                'n.n_streams_beside') }}
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
