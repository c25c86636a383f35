{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- The search path of record: every level a search tested, and its sustain waves, judged by
-- the macro the live search ran (search_level_interval) on the staged rates of the trials
-- dbt counts (int_trials.is_valid), beside what the search decided live and why it stopped.
with trials as (
    select
        *,
        case when probe = 'sustain' then 'sustain' else 'level' end as kind
    from {{ ref('int_trials') }}
    where method = 'search' and trial > 0 and not coalesce(is_superseded, false)
        and (probe is null or probe = 'sustain')
        and {{ changed_runs_filter('run_id') }}
),

keyed as (
    -- the key the live judge hashed (loadgen/search.level_key): same waves, same interval
    select
        *,
        {{ level_key('run_id', 'deployment', 'workload', 'kind', 'concurrency') }} as level_key
    from trials
),

decisions as (
    select * from {{ ref('stg_search_levels') }}
),

rates as (
    select * from {{ ref('int_stream_rates') }}
),

counted_streams as (
    select k.level_key, k.trial, r.decode_tok_s, d.confidence
    from keyed as k
    inner join rates as r on r.wave_id = k.wave_id
    inner join decisions as d
        on d.run_id = k.run_id and d.deployment = k.deployment and d.workload = k.workload
        and d.kind = k.kind and d.concurrency = k.concurrency
    where k.is_valid
),

intervals as (
    {{ search_level_interval('counted_streams') }}
),

per_level as (
    select
        run_id,
        deployment,
        workload,
        kind,
        concurrency,
        level_key,
        min(search_step) as search_step,
        count(*) as n_trials,
        count(*) filter (where is_valid) as n_valid_trials,
        coalesce(bool_or(queued), false) as any_queued,
        median(ttft_quantile_s) filter (where is_valid) as ttft_quantile_s,
        string_agg(distinct invalid_reasons, '; ') filter (where not is_valid)
            as invalid_reasons,
        max(run_watermark) as run_watermark
    from keyed
    group by run_id, deployment, workload, kind, concurrency, level_key
),

final as (
    select
        p.run_id,
        p.deployment,
        p.workload,
        p.kind,
        p.search_step,
        p.concurrency,
        p.n_trials,
        p.n_valid_trials,
        p.any_queued,
        p.invalid_reasons,
        d.confidence,
        d.trials_max,
        i.n_samples,
        i.median_decode_tok_s,
        i.ci_low_tok_s,
        i.ci_high_tok_s,
        case
            when d.wave_id is null then 'incomplete'
            when p.any_queued then 'fail'
            when p.workload = 'agent' and p.ttft_quantile_s is not null
                and not {{ within_session_ttft_ceiling('p.ttft_quantile_s') }} then 'fail'
            else coalesce(i.verdict, 'straddles')
        end as verdict,
        case
            when d.wave_id is null then 'the night ended before the level was decided'
            when p.any_queued then 'a counted trial queued streams'
            when p.workload = 'agent' and p.ttft_quantile_s is not null
                and not {{ within_session_ttft_ceiling('p.ttft_quantile_s') }}
                then 'turn TTFT over the ceiling'
            when p.n_valid_trials = 0 then 'no valid trial'
            when i.verdict = 'pass' then 'interval above the threshold'
            when i.verdict = 'fail' then 'interval below the threshold'
            when i.too_few_stream_rates then 'too few stream rates'
            else 'interval straddles the threshold'
        end as verdict_reason,
        {{ level_passes(
            'i.median_decode_tok_s', 'p.any_queued', 'p.n_valid_trials > 0',
            ttft_p90_s='p.ttft_quantile_s',
            ttft_p90_ceiling_s="case when p.workload = 'agent' then "
                ~ var('ttft_ceiling_s') ~ " end"
        ) }} as passes_threshold,
        p.ttft_quantile_s,
        d.live_median_tok_s,
        d.live_ci_low_tok_s,
        d.live_ci_high_tok_s,
        d.live_verdict,
        d.stop_reason,
        d.next_action,
        p.run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from per_level as p
    left join intervals as i on i.level_key = p.level_key
    left join decisions as d
        on d.run_id = p.run_id and d.deployment = p.deployment and d.workload = p.workload
        and d.kind = p.kind and d.concurrency = p.concurrency
)

select * from final
