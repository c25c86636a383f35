{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- Capacity recomputed on every bootstrap sample of the level medians, by the same rule as
-- int_capacity (macros/capacity_rule.sql). A level without valid trials has no bootstrap
-- median, so it never passes.
with boot as (
    select * from {{ ref('int_level_bootstrap') }}
    where {{ changed_runs_filter('run_id') }}
),

levels as (
    select * from {{ ref('int_levels') }}
    where {{ changed_runs_filter('run_id') }}
),

samples as (
    select unnest(range({{ var('bootstrap_samples') }})) as sample
),

grid as (
    select
        l.run_id, l.deployment, l.workload, l.concurrency, s.sample, l.any_queued,
        l.run_watermark,
        b.boot_median_tok_s
    from levels as l
    cross join samples as s
    left join boot as b
        on b.run_id = l.run_id and b.deployment = l.deployment and b.workload = l.workload
        and b.concurrency = l.concurrency and b.sample = s.sample
),

passes as (
    select
        *,
        {{ level_passes('boot_median_tok_s', 'any_queued') }} as passes
    from grid
),

first_fail as (
    select run_id, deployment, workload, sample, min(concurrency) as first_failing_level
    from passes
    where not passes
    group by all
),

final as (
    select
        p.run_id, p.deployment, p.workload, p.sample,
        coalesce(
            {{ capacity_level('p.concurrency', 'p.passes', 'f.first_failing_level') }}, 0
        ) as capacity_streams,
        max(p.run_watermark) as run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from passes as p
    left join first_fail as f
        on f.run_id = p.run_id and f.deployment = p.deployment and f.workload = p.workload
        and f.sample = p.sample
    group by p.run_id, p.deployment, p.workload, p.sample
)

select * from final
