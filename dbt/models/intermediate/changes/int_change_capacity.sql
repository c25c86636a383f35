-- The capacity test of change detection, per run × deployment × workload (fct_capacity).
-- Comparable nights are measured ones (is_measured, no unmeasured level) with a capacity
-- interval; the baseline is the var('change_baseline_runs') comparable nights before the
-- night: its value the median of their capacities, its interval [median of their ci_low,
-- median of their ci_high]. The rule: a change when the night's interval [ci_low_streams,
-- ci_high_streams] and the baseline interval do not overlap (ci_high < baseline_low: lower;
-- ci_low > baseline_high: higher), with at least var('change_min_baseline_runs') baseline
-- nights. As for levels (int_change_levels), a change stays flagged while it lasts: the
-- change_baseline_runs - 1 nights after the night it started are also held against the
-- baseline before it ('still lower').
{% set n_base = var('change_baseline_runs') %}
with capacity as (
    select
        c.run_id, c.deployment, c.workload, c.capacity_streams, c.ci_low_streams,
        c.ci_high_streams, c.capacity_verdict, r.started_at as run_started_at,
        coalesce(c.is_measured, true) and c.unmeasured_level is null
            and c.ci_low_streams is not null and c.ci_high_streams is not null as is_comparable
    from {{ ref('fct_capacity') }} as c
    inner join {{ ref('stg_runs') }} as r on r.run_id = c.run_id
),

comparable as (
    select
        *,
        row_number() over (partition by deployment, workload order by run_started_at, run_id)
            as night_index
    from capacity
    where is_comparable
),

baselines as (
    select
        t.deployment, t.workload, t.night_index,
        count(*) as n_baseline_runs,
        median(b.capacity_streams) as baseline_value,
        median(b.ci_low_streams) as baseline_low,
        median(b.ci_high_streams) as baseline_high
    from comparable as t
    inner join comparable as b
        on b.deployment = t.deployment and b.workload = t.workload
        and b.night_index between t.night_index - {{ n_base }} and t.night_index - 1
    group by all
),

judged as (
    select
        t.*,
        lag(t.run_id) over (
            partition by t.deployment, t.workload order by t.night_index
        ) as previous_run_id,
        coalesce(b.n_baseline_runs, 0) as n_baseline_runs,
        b.baseline_value, b.baseline_low, b.baseline_high,
        case
            when coalesce(b.n_baseline_runs, 0) < {{ var('change_min_baseline_runs') }} then null
            when t.ci_high_streams < b.baseline_low then 'lower'
            when t.ci_low_streams > b.baseline_high then 'higher'
        end as own_direction
    from comparable as t
    left join baselines as b
        on b.deployment = t.deployment and b.workload = t.workload
        and b.night_index = t.night_index
),

since as (
    select
        *,
        max(case when starts_change then night_index end) over (
            partition by deployment, workload order by night_index
            rows between unbounded preceding and 1 preceding
        ) as change_index
    from (
        select
            *,
            own_direction is not null and not coalesce(if(own_direction = 'lower',
                bool_or(own_direction = 'lower') over recent,
                bool_or(own_direction = 'higher') over recent), false) as starts_change
        from judged
        window recent as (
            partition by deployment, workload order by night_index
            rows between {{ n_base - 1 }} preceding and 1 preceding
        )
    )
),

lasting as (
    select
        s.deployment, s.workload, s.night_index,
        c.run_id as change_run_id,
        b.n_baseline_runs as change_n_baseline_runs,
        b.baseline_value as change_baseline_value,
        b.baseline_low as change_baseline_low,
        b.baseline_high as change_baseline_high,
        case
            when c.own_direction = 'lower' and s.ci_high_streams < b.baseline_low then 'lower'
            when c.own_direction = 'higher' and s.ci_low_streams > b.baseline_high then 'higher'
        end as still_direction
    from since as s
    inner join judged as c
        on c.deployment = s.deployment and c.workload = s.workload
        and c.night_index = s.change_index
    inner join baselines as b
        on b.deployment = s.deployment and b.workload = s.workload
        and b.night_index = s.change_index
    where s.night_index - s.change_index < {{ n_base }}
),

final as (
    select
        j.run_id,
        j.deployment,
        j.workload,
        j.run_started_at,
        j.previous_run_id,
        j.capacity_streams::double as value,
        j.ci_low_streams::double as value_low,
        j.ci_high_streams::double as value_high,
        coalesce(l.still_direction is not null, false) as still_changed,
        if(l.still_direction is not null, l.change_baseline_value, j.baseline_value)
            as baseline_value,
        if(l.still_direction is not null, l.change_baseline_low, j.baseline_low)
            as baseline_low,
        if(l.still_direction is not null, l.change_baseline_high, j.baseline_high)
            as baseline_high,
        if(l.still_direction is not null, l.change_n_baseline_runs, j.n_baseline_runs)
            as n_baseline_runs,
        coalesce(l.still_direction, j.own_direction) as direction,
        case when l.still_direction is not null then l.change_run_id end
            as changed_since_run_id
    from judged as j
    left join lasting as l
        on l.deployment = j.deployment and l.workload = j.workload
        and l.night_index = j.night_index
)

select
    f.* exclude (still_changed),
    100 * (f.value - f.baseline_value) / nullif(f.baseline_value, 0) as change_pct,
    f.direction is not null as is_change,
    case
        when f.n_baseline_runs < {{ var('change_min_baseline_runs') }}
            then 'capacity not tested: ' || f.n_baseline_runs || ' baseline night'
                || if(f.n_baseline_runs = 1, '', 's') || ', '
                || {{ var('change_min_baseline_runs') }} || ' needed'
        else if(f.still_changed, 'capacity still ', 'capacity ')
            || coalesce(f.direction, 'unchanged')
            || printf(': %g [%g, %g] streams vs baseline %g [%g, %g] (median of %d nights)',
                f.value, f.value_low, f.value_high, f.baseline_value, f.baseline_low,
                f.baseline_high, f.n_baseline_runs)
            || if(f.still_changed, ' before ' || f.changed_since_run_id, '')
            || if(f.direction is null, '; the intervals overlap', '; the intervals do not overlap')
    end as verdict
from final as f

union all by name

select
    c.run_id, c.deployment, c.workload, c.run_started_at,
    c.capacity_streams::double as value, c.ci_low_streams::double as value_low,
    c.ci_high_streams::double as value_high, 0 as n_baseline_runs, false as is_change,
    'capacity not tested: ' || coalesce(c.capacity_verdict, 'no capacity interval')
        || '; in no baseline' as verdict
from capacity as c
where not c.is_comparable
