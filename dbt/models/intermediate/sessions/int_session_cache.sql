-- The prefix cache each agent wave found, beside the one its plan assumed. The plan assumes
-- every later turn reuses its previous prompt (int_session_turns.intended_cached_tokens);
-- a wave whose turns reused less than `cache_hit_min_share` of that was served by a cache
-- that evicted them or does not cache at all, and is flagged: its TTFT is a cold session's,
-- not the warm one the plan measures. A reset the server acknowledged is verified by the
-- wave's first turns: the first one prefilled cannot have found anything cached.
with turns as (
    select * from {{ ref('int_session_turns') }}
),

waves as (
    select wave_id, cache_reset from {{ ref('stg_waves') }}
),

per_wave as (
    select
        wave_id,
        count(*) as n_turns,
        count(*) filter (where intended_cached_tokens > 0) as n_intended_turns,
        count(*) filter (where cache_hit_share is not null) as n_judged_turns,
        count(*) filter (
            where intended_cached_tokens > 0 and cached_prompt_tokens is null
        ) as n_unreported_turns,
        sum(intended_cached_tokens) filter (where cache_hit_share is not null)
            as intended_cached_tokens,
        sum(least(cached_prompt_tokens, intended_cached_tokens))
            filter (where cache_hit_share is not null) as reused_cached_tokens,
        sum(prompt_tokens) filter (where cache_hit_share is not null) as judged_prompt_tokens,
        min(cached_prompt_tokens) filter (where turn_index = 0) as first_turn_min_cached_tokens,
        count(cached_prompt_tokens) filter (where turn_index = 0) as n_first_turn_counts
    from turns
    group by wave_id
),

judged as (
    select
        p.*,
        w.cache_reset,
        -- of the judged turns' prompts, the share the plan meant to be cached and the share
        -- the server said was
        p.intended_cached_tokens / nullif(p.judged_prompt_tokens, 0)::double
            as intended_prefix_share,
        p.reused_cached_tokens / nullif(p.judged_prompt_tokens, 0)::double
            as observed_prefix_share,
        p.reused_cached_tokens / nullif(p.intended_cached_tokens, 0)::double
            as cache_hit_share
    from per_wave as p
    inner join waves as w on w.wave_id = p.wave_id
),

stated as (
    select
        *,
        case
            when n_judged_turns = 0 and n_unreported_turns > 0 then 'not reported'
            when n_judged_turns = 0 then null
            when reused_cached_tokens = 0 then 'not cached'
            when cache_hit_share < {{ var('cache_hit_min_share') }} then 'evicted'
            else 'as planned'
        end as cache_state,
        case
            when cache_reset is null then null
            when cache_reset = 'unsupported' then 'no reset route'
            when cache_reset like 'failed%' then 'reset failed'
            when n_first_turn_counts = 0 then 'unverified: no cached-token counts'
            when first_turn_min_cached_tokens = 0 then 'verified'
            else 'did not take'
        end as reset_verdict
    from judged
),

final as (
    select
        wave_id,
        n_turns,
        n_intended_turns,
        n_judged_turns,
        n_unreported_turns,
        intended_cached_tokens,
        reused_cached_tokens,
        intended_prefix_share,
        observed_prefix_share,
        cache_hit_share,
        cache_state,
        cache_reset,
        reset_verdict,
        first_turn_min_cached_tokens,
        coalesce(cache_state in ('evicted', 'not cached'), false)
            or coalesce(reset_verdict = 'did not take', false) as is_flagged,
        nullif(concat_ws('; ',
            case when cache_state = 'not cached'
                then 'no turn found its previous prompt cached (the server does not cache?)'
            end,
            case when cache_state = 'evicted'
                then printf(
                    'turns found %.0f%% of their previous prompt cached, under %.0f%% '
                    || '(the cache evicted sessions)',
                    100 * cache_hit_share, 100 * {{ var('cache_hit_min_share') }}::double
                )
            end,
            case when reset_verdict = 'did not take'
                then 'the cache reset was acknowledged but a first turn found '
                    || first_turn_min_cached_tokens || ' tokens cached'
            end
        ), '') as flag_reason
    from stated
)

select * from final
