-- The context ladder, one row per run × deployment × rung: how long the first token of a
-- never-seen prompt of that size takes (cold) and of the same document with another question
-- (warm, served from the prefix cache where the server has one), the ladder stream's own
-- decode rate, and what its prefill did to the other streams. A rung meets the ceiling when
-- its cold TTFT is within dbt var ttft_ceiling_s. A cold prompt is a never-seen document, so
-- no reset is needed (nor possible on vLLM while the background streams hold blocks): the
-- server's own cached count verifies it, and a rung served from the cache is said so.
with req as (
    select * from {{ ref('int_ladder_requests') }}
    where request_role in ('ladder_cold', 'ladder_warm')
),

background as (
    select * from {{ ref('int_ladder_background') }}
),

rungs as (
    select
        run_id,
        wave_id,
        deployment,
        rung_tokens,
        any_value(context_tokens) as context_tokens,
        any_value(context_source) as context_source,
        max(prompt_tokens) filter (where request_role = 'ladder_cold') as cold_prompt_tokens,
        max(prompt_tokens) filter (where request_role = 'ladder_warm') as warm_prompt_tokens,
        max(ttft_s) filter (where request_role = 'ladder_cold') as cold_ttft_s,
        max(ttft_s) filter (where request_role = 'ladder_warm') as warm_ttft_s,
        max(cached_prompt_tokens) filter (where request_role = 'ladder_cold')
            as cold_cached_tokens,
        max(cached_prompt_tokens) filter (where request_role = 'ladder_warm')
            as warm_cached_tokens,
        max(decode_tok_s) filter (where request_role = 'ladder_cold') as cold_decode_tok_s,
        max(decode_tok_s) filter (where request_role = 'ladder_warm') as warm_decode_tok_s,
        max(status) filter (where request_role = 'ladder_cold') as cold_status,
        coalesce(bool_or(is_refused) filter (where request_role = 'ladder_cold'), false)
            as is_refused
    from req
    group by run_id, wave_id, deployment, rung_tokens
),

final as (
    select
        r.run_id,
        r.wave_id,
        r.deployment,
        r.rung_tokens,
        r.context_tokens,
        r.context_source,
        r.cold_prompt_tokens,
        r.warm_prompt_tokens,
        r.cold_ttft_s,
        r.warm_ttft_s,
        r.cold_cached_tokens,
        case
            when r.cold_ttft_s is null then null
            when r.cold_cached_tokens is null or r.cold_prompt_tokens is null then 'not reported'
            when r.cold_cached_tokens <= {{ var('cold_cached_max_share') }} * r.cold_prompt_tokens
                then 'cold'
            else 'served from cache'
        end as cold_cache_state,
        r.warm_cached_tokens,
        r.cold_decode_tok_s,
        r.warm_decode_tok_s,
        b.background_prefill_tok_s,
        b.background_outside_tok_s,
        b.background_prefill_tok_s / nullif(b.background_outside_tok_s, 0)
            as background_prefill_ratio,
        {{ var('ttft_ceiling_s') }}::double as ttft_ceiling_s,
        r.cold_ttft_s <= {{ var('ttft_ceiling_s') }} as meets_ceiling,
        r.warm_ttft_s <= {{ var('ttft_ceiling_s') }} as warm_meets_ceiling,
        r.cold_status,
        r.is_refused
    from rungs as r
    left join background as b on b.wave_id = r.wave_id and b.rung_tokens = r.rung_tokens
)

select * from final
