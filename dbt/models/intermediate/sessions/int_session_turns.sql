-- Every turn of the agent workload's sessions, with the prefix the plan says it should have
-- found cached: a later turn's prompt begins with the previous turn's prompt, which the
-- server prefilled seconds before (sessions.py appends, never edits), so that prompt is the
-- intended hit; a first turn after a reset the server acknowledged should find nothing.
-- Where the previous turn was never prefilled (refused, or cut before its first token) the
-- intended hit is unknown (NULL), as it is for a first turn without a reset.
with turns as (
    select * from {{ ref('int_stream_rates') }}
    where workload = 'agent' and session_id is not null and probe is null
),

waves as (
    select wave_id, cache_reset from {{ ref('stg_waves') }}
),

ordered as (
    select
        t.*,
        w.cache_reset,
        lag(t.turn_index) over session_turns as previous_turn_index,
        lag(t.prompt_tokens) over session_turns as previous_prompt_tokens,
        lag(t.first_token_ns) over session_turns as previous_first_token_ns
    from turns as t
    inner join waves as w on w.wave_id = t.wave_id
    window session_turns as (partition by t.session_id order by t.turn_index)
),

intended as (
    select
        *,
        case
            when turn_index = 0 and cache_reset = 'reset' then 0
            when turn_index > 0 and previous_turn_index = turn_index - 1
                and previous_first_token_ns is not null
                then previous_prompt_tokens
        end as intended_cached_tokens
    from ordered
),

final as (
    select
        request_id,
        wave_id,
        run_id,
        deployment,
        concurrency,
        trial,
        session_id,
        turn_index,
        status,
        prompt_tokens,
        cached_prompt_tokens,
        intended_cached_tokens,
        -- the share of the intended prefix the server said it reused (NULL: nothing intended,
        -- or no count reported)
        case
            when intended_cached_tokens > 0 and cached_prompt_tokens is not null
                then least(cached_prompt_tokens, intended_cached_tokens)
                    / intended_cached_tokens::double
        end as cache_hit_share,
        decode_tok_s,
        ttft_s,
        run_watermark
    from intended
)

select * from final
