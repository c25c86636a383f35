{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- Capacity: the largest tested level that passes with every smaller tested level passing;
-- the first failing level; a crossing interpolated linearly in concurrency between the two
-- (floored to whole streams); flags for a lower bound and a non-monotonic curve. A first
-- failing level without a valid trial is no measured failure: `unmeasured_level` names it and
-- `unmeasured_reason` says why (the capacity below it stands, "fails at" would not).
with levels as (
    select * from {{ ref('int_levels') }}
    where {{ changed_runs_filter('run_id') }}
),

first_fail as (
    select
        run_id,
        deployment,
        workload,
        min(concurrency) as first_failing_level
    from levels
    where not passes_threshold
    group by run_id, deployment, workload
),

summary as (
    select
        l.run_id,
        l.deployment,
        l.workload,
        any_value(l.model) as model,
        any_value(l.method) as method,
        any_value(l.threshold_tok_s) as threshold_tok_s,
        min(l.concurrency) as lowest_level,
        max(l.concurrency) as top_level,
        f.first_failing_level,
        {{ capacity_level('l.concurrency', 'l.passes_threshold', 'f.first_failing_level') }}
            as capacity_level,
        coalesce(bool_or(l.passes_threshold and l.concurrency > f.first_failing_level), false)
            as is_non_monotonic,
        cast(sum(l.n_valid_trials) as integer) as n_valid_trials,
        cast(count(*) filter (where l.n_valid_trials > 0) as integer) as n_measured_levels,
        cast(count(*) as integer) as n_levels,
        max(l.run_watermark) as run_watermark
    from levels as l
    left join first_fail as f
        on f.run_id = l.run_id and f.deployment = l.deployment and f.workload = l.workload
    group by l.run_id, l.deployment, l.workload, f.first_failing_level
),

with_rates as (
    select
        s.*,
        lo.median_decode_tok_s as capacity_level_tok_s,
        hi.median_decode_tok_s as first_failing_tok_s,
        hi.any_queued as first_failing_queued,
        {{ unmeasured_first_failure('hi') }}
    from summary as s
    left join levels as lo
        on lo.run_id = s.run_id and lo.deployment = s.deployment
        and lo.workload = s.workload and lo.concurrency = s.capacity_level
    left join levels as hi
        on hi.run_id = s.run_id and hi.deployment = s.deployment
        and hi.workload = s.workload and hi.concurrency = s.first_failing_level
),

final as (
    select
        run_id,
        deployment,
        model,
        workload,
        method,
        threshold_tok_s,
        coalesce(capacity_level, 0) as capacity_streams,
        first_failing_level,
        case
            when capacity_level is null then 0
            when first_failing_level is null then capacity_level
            when first_failing_tok_s is null or first_failing_queued
                or capacity_level_tok_s <= first_failing_tok_s then capacity_level
            else cast(floor(
                capacity_level + (capacity_level_tok_s - threshold_tok_s)
                * (first_failing_level - capacity_level)
                / (capacity_level_tok_s - first_failing_tok_s)
            ) as integer)
        end as capacity_interpolated,
        first_failing_level is null as is_lower_bound,
        is_non_monotonic,
        -- the lowest tested level (above 1) was measured, and failed
        capacity_level is null and lowest_level > 1 and unmeasured_level is null
            as is_below_lowest_level,
        -- false: no capacity was measured, the lowest level had no valid trial (every request
        -- refused, every stream broken or every trial spoiled); 0 streams is then no verdict
        {{ capacity_is_measured('capacity_level', 'unmeasured_level') }} as is_measured,
        unmeasured_level,
        unmeasured_reason,
        n_measured_levels,
        n_levels,
        lowest_level,
        top_level,
        capacity_level_tok_s,
        first_failing_tok_s,
        n_valid_trials,
        run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from with_rates
)

select * from final
