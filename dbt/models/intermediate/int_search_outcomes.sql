{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- One row per searched deployment and workload: the interval the search's decided levels
-- give (all tested levels up to `search_low_streams` cleared the threshold; the level after
-- `search_high_streams` was clearly below it, in its trials or in a sustain wave whose whole
-- interval fell) and what the sustain waves said.
with levels as (
    select * from {{ ref('int_search_levels') }}
    where {{ changed_runs_filter('run_id') }}
),

tested as (
    select * from levels where kind = 'level'
),

bounds as (
    select
        run_id,
        deployment,
        workload,
        min(concurrency) filter (where verdict <> 'pass') as first_undecided_level,
        min(concurrency) filter (where verdict = 'fail') as first_clear_fail_level,
        count(*) filter (where verdict in ('straddles', 'incomplete')) as n_straddling_levels,
        max(concurrency) as top_tested_level,
        count(*) as n_levels,
        sum(n_trials) as n_trials
    from tested
    group by run_id, deployment, workload
),

low as (
    select
        t.run_id, t.deployment, t.workload,
        coalesce(max(t.concurrency) filter (
            where t.verdict = 'pass'
                and (b.first_undecided_level is null or t.concurrency < b.first_undecided_level)
        ), 0) as search_low_streams
    from tested as t
    inner join bounds as b
        on b.run_id = t.run_id and b.deployment = t.deployment and b.workload = t.workload
    group by t.run_id, t.deployment, t.workload
),

sustain as (
    select
        run_id,
        deployment,
        workload,
        count(*) as n_sustain_waves,
        max(concurrency) filter (where passes_threshold) as sustained_streams,
        min(concurrency) filter (where not passes_threshold) as first_unsustained_streams,
        arg_max(median_decode_tok_s, concurrency) filter (where passes_threshold)
            as sustained_tok_s,
        arg_min(median_decode_tok_s, concurrency) filter (where not passes_threshold)
            as first_unsustained_tok_s,
        -- a sustain wave whose whole interval fell below the threshold is a clear failure,
        -- like a level's: it decides the high end (one that straddles only moves the answer)
        min(concurrency) filter (where verdict = 'fail') as first_clearly_fallen_streams,
        string_agg(
            concurrency || ' streams: ' || case when passes_threshold then 'held' else 'fell' end
            || coalesce(' (' || round(median_decode_tok_s, 1) || ' tok/s)', ''),
            '; ' order by search_step
        ) as sustain_path
    from levels
    where kind = 'sustain'
    group by run_id, deployment, workload
),

watermarks as (
    select * from {{ ref('int_run_watermarks') }}
),

final as (
    select
        b.run_id,
        b.deployment,
        b.workload,
        b.n_levels,
        b.n_trials,
        b.n_straddling_levels,
        b.top_tested_level,
        l.search_low_streams,
        least(b.first_clear_fail_level, s.first_clearly_fallen_streams) - 1
            as search_high_streams,
        coalesce(s.n_sustain_waves, 0) as n_sustain_waves,
        s.sustained_streams,
        s.first_unsustained_streams,
        s.sustained_tok_s,
        s.first_unsustained_tok_s,
        s.sustain_path,
        w.run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from bounds as b
    inner join watermarks as w on w.run_id = b.run_id
    inner join low as l
        on l.run_id = b.run_id and l.deployment = b.deployment and l.workload = b.workload
    left join sustain as s
        on s.run_id = b.run_id and s.deployment = b.deployment and s.workload = b.workload
)

select * from final
