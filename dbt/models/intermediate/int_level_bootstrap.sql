{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- Seeded bootstrap samples of each level median over its valid counted trials, by the one
-- bootstrap there is (macros/level_bootstrap.sql): a searched level gets the very samples, so
-- the very interval, int_search_levels and the live search gave it. fct_levels takes the
-- interval from these samples, int_capacity_bootstrap the capacity interval.
with streams as (
    select
        r.run_id, r.deployment, r.workload, r.concurrency, r.trial, r.decode_tok_s,
        {{ level_key('r.run_id', 'r.deployment', 'r.workload', "'level'", 'r.concurrency') }}
            as level_key
    from {{ ref('int_stream_rates') }} as r
    inner join {{ ref('int_trials') }} as t on t.wave_id = r.wave_id
    where t.probe is null and t.is_valid and t.trial > 0 and r.decode_tok_s is not null
        and {{ changed_runs_filter('r.run_id') }}
),

levels as (
    select distinct level_key, run_id, deployment, workload, concurrency
    from streams
),

boot as (
    {{ level_bootstrap('streams') }}
),

watermarks as (
    select * from {{ ref('int_run_watermarks') }}
),

final as (
    select
        l.run_id, l.deployment, l.workload, l.concurrency, b.sample,
        b.boot_median_tok_s,
        w.run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from boot as b
    inner join levels as l on l.level_key = b.level_key
    inner join watermarks as w on w.run_id = l.run_id
)

select * from final
