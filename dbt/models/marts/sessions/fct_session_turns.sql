-- How an agent session's turns fare as its context grows: per level (concurrent sessions)
-- and turn index, over the level's counted valid trials (int_trials.is_valid), the median
-- turn decode rate, the TTFT at `ttft_quantile` (with the samples behind it, and whether
-- they are enough to show it: macro tail_min_samples) and the prompt the turn carried.
with turns as (
    select * from {{ ref('int_session_turns') }}
),

trials as (
    select wave_id, is_valid
    from {{ ref('int_trials') }}
    where workload = 'agent' and probe is null and trial > 0 and not coalesce(is_superseded, false)
),

final as (
    select
        t.run_id,
        t.deployment,
        t.concurrency as concurrent_sessions,
        t.turn_index,
        count(*) as n_turns,
        count(*) filter (where t.status = 'ok') as n_ok_turns,
        median(t.prompt_tokens) as median_prompt_tokens,
        median(t.cached_prompt_tokens) as median_cached_tokens,
        median(t.cache_hit_share) as median_cache_hit_share,
        median(t.decode_tok_s) as median_decode_tok_s,
        median(t.ttft_s) as median_ttft_s,
        quantile_cont(t.ttft_s, {{ var('ttft_quantile') }}) as ttft_quantile_s,
        {{ var('ttft_quantile') }}::double as ttft_quantile,
        cast(count(t.ttft_s) as integer) as n_ttft_samples,
        {{ tail_min_samples(var('ttft_quantile')) }} as ttft_quantile_min_samples,
        count(t.ttft_s) >= {{ tail_min_samples(var('ttft_quantile')) }}
            as ttft_quantile_is_supported,
        {{ var('ttft_ceiling_s') }}::double as ttft_ceiling_s,
        max(t.run_watermark) as run_watermark
    from turns as t
    inner join trials as v on v.wave_id = t.wave_id
    where v.is_valid
    group by t.run_id, t.deployment, t.concurrency, t.turn_index
)

select * from final
