-- The context ladder in one row per run × deployment: the context the ladder climbed to, the
-- largest prompt whose first token came within the TTFT ceiling (cold and warm) with every
-- smaller rung meeting it too, the rung where it first failed, and what ended the ladder.
-- Unavailable: no rung streamed a first token (the reason says why).
with rungs as (
    select * from {{ ref('fct_context_ladder') }}
),

per_wave as (
    select
        run_id,
        wave_id,
        deployment,
        any_value(context_tokens) as context_tokens,
        any_value(context_source) as context_source,
        any_value(ttft_ceiling_s) as ttft_ceiling_s,
        count(*) as n_rungs,
        count(cold_ttft_s) as n_measured_rungs,
        count(*) filter (where cold_cache_state = 'served from cache') as n_not_cold_rungs,
        min(rung_tokens) filter (where not coalesce(meets_ceiling, false)) as first_failing_rung,
        min(rung_tokens) filter (where not coalesce(warm_meets_ceiling, false))
            as first_warm_failing_rung,
        min(rung_tokens) filter (where is_refused) as refused_rung_tokens,
        min(rung_tokens) as first_rung_tokens,
        arg_min(cold_status, rung_tokens) as first_rung_status,
        arg_min(is_refused, rung_tokens) as first_rung_refused
    from rungs
    group by run_id, wave_id, deployment
),

largest as (
    select
        w.wave_id,
        max(r.cold_prompt_tokens) filter (
            where r.meets_ceiling and r.rung_tokens < coalesce(w.first_failing_rung, 2147483647)
                -- a rung that found its document cached measured no cold prefill
                and r.cold_cache_state is distinct from 'served from cache'
        ) as largest_cold_prompt_tokens,
        max(r.warm_prompt_tokens) filter (
            where r.warm_meets_ceiling
                and r.rung_tokens < coalesce(w.first_warm_failing_rung, 2147483647)
        ) as largest_warm_prompt_tokens
    from per_wave as w
    inner join rungs as r on r.wave_id = w.wave_id
    group by w.wave_id
),

final as (
    select
        w.run_id,
        w.wave_id,
        w.deployment,
        w.context_tokens,
        w.context_source,
        w.ttft_ceiling_s,
        w.n_rungs,
        w.n_measured_rungs,
        w.n_not_cold_rungs,
        l.largest_cold_prompt_tokens,
        l.largest_warm_prompt_tokens,
        w.first_failing_rung,
        w.refused_rung_tokens,
        case
            when w.n_measured_rungs = 0 then 'no rung measured'
            when w.refused_rung_tokens is not null
                and w.refused_rung_tokens = w.first_failing_rung then 'context'
            when w.first_failing_rung is not null then 'ttft'
            else 'none'
        end as limited_by,
        case when w.n_measured_rungs > 0 then 'measured' else 'unavailable' end as status,
        case
            when w.n_measured_rungs > 0 then null
            when w.first_rung_refused
                then 'the first rung (' || w.first_rung_tokens::varchar
                    || ' tokens) was refused as too long'
            else 'no rung streamed a first token (first rung: '
                || coalesce(w.first_rung_status, 'not sent') || ')'
        end as status_reason
    from per_wave as w
    left join largest as l on l.wave_id = w.wave_id
)

select * from final
