-- Change detection (issue 27), one row per run × deployment × workload × subject: 'level'
-- (one per concurrency swept: int_change_levels' permutation test of the trial medians),
-- 'capacity' (int_change_capacity's interval-overlap rule) and 'drift' (int_change_drift's
-- Theil–Sen slope over a window). Beside each, what else changed since the previous comparable
-- night (int_run_context: engine, version, model, a server restart, settings, sparkcap, the
-- judgement settings, the client host), so a change reads with what may explain it.
with levels as (
    select * from {{ ref('int_change_levels') }}
),

capacity as (
    select * from {{ ref('int_change_capacity') }}
),

drift as (
    select * from {{ ref('int_change_drift') }}
),

level_intervals as (
    select run_id, deployment, workload, concurrency, ci_low_tok_s, ci_high_tok_s
    from {{ ref('fct_levels') }}
),

context as (
    select * from {{ ref('int_run_context') }}
),

subjects as (
    select
        l.run_id, l.deployment, l.workload, 'level' as subject, l.concurrency,
        l.run_started_at, l.previous_run_id,
        l.baseline_value, l.baseline_low, l.baseline_high,
        l.value, i.ci_low_tok_s as value_low, i.ci_high_tok_s as value_high, 'tok/s' as unit,
        l.change_pct, l.p_value, l.is_change, l.direction, l.n_baseline_runs,
        l.changed_since_run_id, l.verdict
    from levels as l
    left join level_intervals as i
        on i.run_id = l.run_id and i.deployment = l.deployment
        and i.workload = l.workload and i.concurrency = l.concurrency

    union all by name

    select
        run_id, deployment, workload, 'capacity' as subject, null::integer as concurrency,
        run_started_at, previous_run_id, baseline_value, baseline_low, baseline_high,
        value, value_low, value_high, 'streams' as unit, change_pct,
        null::double as p_value, is_change, direction, n_baseline_runs, changed_since_run_id,
        verdict
    from capacity

    union all by name

    select
        run_id, deployment, workload, 'drift' as subject, null::integer as concurrency,
        run_started_at, previous_run_id, null::double as baseline_value,
        null::double as baseline_low, null::double as baseline_high,
        value, value_low, value_high, '%/run' as unit, change_pct, null::double as p_value,
        is_change, direction, n_baseline_runs, null::varchar as changed_since_run_id, verdict
    from drift
),

explained as (
    select
        s.*,
        {{ what_else_changed('now', 'before') }} as what_else_changed
    from subjects as s
    left join context as now on now.run_id = s.run_id and now.deployment = s.deployment
    left join context as before
        on before.run_id = s.previous_run_id and before.deployment = s.deployment
)

select
    run_id,
    deployment,
    workload,
    subject,
    concurrency,
    baseline_value,
    baseline_low,
    baseline_high,
    value,
    change_pct,
    p_value,
    is_change,
    -- the night was compared at all: enough baseline nights and a value (a drift: a slope
    -- interval), so "no change" is said only of what was tested
    case
        when subject = 'drift' then value_low is not null and value_high is not null
        else coalesce(n_baseline_runs, 0) >= {{ var('change_min_baseline_runs') }}
            and value is not null
    end as is_tested,
    direction,
    n_baseline_runs,
    what_else_changed,
    verdict || coalesce(
        ' · what else changed since ' || previous_run_id || ': ' || what_else_changed, ''
    ) as verdict,
    value_low,
    value_high,
    unit,
    run_started_at,
    previous_run_id,
    changed_since_run_id,
    {{ var('change_false_alarm_rate') }}::double as false_alarm_rate
from explained
