-- The level test of change detection: each comparable night (int_change_level_nights) against
-- its baseline, the var('change_baseline_runs') comparable nights before it. The baseline
-- value is the median of those nights' level medians (one outlier night moves it at most one
-- place); the test is the seeded permutation test of the night's valid trial medians against
-- the baseline nights' (macro change_permutation_test). A change is flagged when p <
-- var('change_false_alarm_rate') and |change| >= var('change_min_effect_pct') % of the
-- baseline, with at least var('change_min_baseline_runs') baseline nights.
--
-- A change stays flagged while it lasts, until it fills the baseline: a change starts on a
-- flagged night c with no night flagged in its direction in the change_baseline_runs - 1
-- comparable nights before it; the change_baseline_runs - 1 nights after c are also tested
-- against c's baseline (the nights before the change), and flagged ('still ...') when that
-- test holds in c's direction. Without this the sliding median would take a lasting 8 %
-- slowdown for the normal after half the baseline had seen it (night c + 4 of 7).
{% set n_base = var('change_baseline_runs') %}
{#- | float: a whole-number override (10) is an integer to DuckDB, which printf's %g refuses -#}
{% set alpha = var('change_false_alarm_rate') | float %}
{% set min_effect = var('change_min_effect_pct') | float %}
with nights as (
    select * from {{ ref('int_change_level_nights') }}
),

comparable as (
    select * from nights where night_index is not null
),

members as (
    -- the nights of each comparable night's baseline
    select
        t.deployment, t.workload, t.concurrency, t.night_index,
        b.run_id as baseline_run_id, b.night_index as baseline_index,
        b.level_median_tok_s, b.trial_medians_tok_s
    from comparable as t
    inner join comparable as b
        on b.deployment = t.deployment and b.workload = t.workload
        and b.concurrency = t.concurrency
        and b.night_index between t.night_index - {{ n_base }} and t.night_index - 1
),

baselines as (
    select
        deployment, workload, concurrency, night_index,
        count(*) as n_baseline_runs,
        median(level_median_tok_s) as baseline_tok_s,
        quantile_disc(level_median_tok_s, {{ var('ci_low_pct') }}) as baseline_low_tok_s,
        quantile_disc(level_median_tok_s, {{ var('ci_high_pct') }}) as baseline_high_tok_s,
        arg_min(baseline_run_id, baseline_index) as first_baseline_run_id
    from members
    group by all
),

own as (
    select
        t.*,
        lag(t.run_id) over (
            partition by t.deployment, t.workload, t.concurrency order by t.night_index
        ) as previous_run_id,
        coalesce(b.n_baseline_runs, 0) as n_baseline_runs,
        b.baseline_tok_s,
        b.baseline_low_tok_s,
        b.baseline_high_tok_s,
        100 * (t.level_median_tok_s - b.baseline_tok_s) / nullif(b.baseline_tok_s, 0)
            as change_pct,
        t.deployment || '/' || t.workload || '/c' || t.concurrency || '/n' || t.night_index
            as night_key
    from comparable as t
    left join baselines as b
        on b.deployment = t.deployment and b.workload = t.workload
        and b.concurrency = t.concurrency and b.night_index = t.night_index
),

own_pool as (
    {{ change_test_pool(
        'own', 'night_index', where='n.n_baseline_runs >= ' ~ var('change_min_baseline_runs')
    ) }}
),

own_tests as (
    {{ change_permutation_test('own_pool') }}
),

judged as (
    select
        o.*,
        t.p_value,
        coalesce(
            t.p_value < {{ alpha }} and abs(o.change_pct) >= {{ min_effect }}, false
        ) as own_change,
        case when t.p_value < {{ alpha }} and abs(o.change_pct) >= {{ min_effect }}
            then if(o.change_pct < 0, 'slower', 'faster') end as own_direction
    from own as o
    left join own_tests as t on t.test_key = o.night_key || '/b' || o.night_index
),

starts as (
    -- the first flagged night of a change: no night flagged in its direction in the
    -- change_baseline_runs - 1 comparable nights before it
    select
        *,
        own_change and not coalesce(if(own_direction = 'slower',
            bool_or(own_direction = 'slower') over recent,
            bool_or(own_direction = 'faster') over recent), false) as starts_change
    from judged
    window recent as (
        partition by deployment, workload, concurrency order by night_index
        rows between {{ n_base - 1 }} preceding and 1 preceding
    )
),

since as (
    select
        *,
        max(case when starts_change then night_index end) over (
            partition by deployment, workload, concurrency order by night_index
            rows between unbounded preceding and 1 preceding
        ) as change_index
    from starts
),

lasting as (
    -- nights not flagged on their own, within change_baseline_runs - 1 nights of a change
    select
        s.*,
        c.run_id as change_run_id,
        c.own_direction as change_direction,
        b.n_baseline_runs as change_n_baseline_runs,
        b.baseline_tok_s as change_baseline_tok_s,
        b.baseline_low_tok_s as change_baseline_low_tok_s,
        b.baseline_high_tok_s as change_baseline_high_tok_s,
        100 * (s.level_median_tok_s - b.baseline_tok_s) / nullif(b.baseline_tok_s, 0)
            as change_since_pct
    from since as s
    inner join judged as c
        on c.deployment = s.deployment and c.workload = s.workload
        and c.concurrency = s.concurrency and c.night_index = s.change_index
    inner join baselines as b
        on b.deployment = s.deployment and b.workload = s.workload
        and b.concurrency = s.concurrency and b.night_index = s.change_index
    where s.night_index - s.change_index < {{ n_base }}
),

lasting_pool as (
    -- each night within a change against the change's baseline (the nights before it)
    {{ change_test_pool('lasting', 'change_index') }}
),

lasting_tests as (
    {{ change_permutation_test('lasting_pool') }}
),

lasting_judged as (
    select
        l.deployment, l.workload, l.concurrency, l.night_index,
        l.change_run_id, l.change_direction, l.change_n_baseline_runs,
        l.change_baseline_tok_s, l.change_baseline_low_tok_s, l.change_baseline_high_tok_s,
        l.change_since_pct,
        t.p_value as change_since_p_value,
        coalesce(
            t.p_value < {{ alpha }} and abs(l.change_since_pct) >= {{ min_effect }}
            and if(l.change_since_pct < 0, 'slower', 'faster') = l.change_direction,
            false
        ) as still_changed
    from lasting as l
    left join lasting_tests as t on t.test_key = l.night_key || '/b' || l.change_index
),

tested as (
    select
        j.*,
        coalesce(l.still_changed, false) as still_changed,
        l.change_run_id,
        l.change_n_baseline_runs,
        l.change_baseline_tok_s,
        l.change_baseline_low_tok_s,
        l.change_baseline_high_tok_s,
        l.change_since_pct,
        l.change_since_p_value
    from judged as j
    left join lasting_judged as l
        on l.deployment = j.deployment and l.workload = j.workload
        and l.concurrency = j.concurrency and l.night_index = j.night_index
),

final as (
    select
        t.run_id,
        t.deployment,
        t.workload,
        t.concurrency,
        t.run_started_at,
        t.night_index,
        t.previous_run_id,
        t.n_valid_trials,
        t.level_median_tok_s as value,
        if(t.still_changed, t.change_baseline_tok_s, t.baseline_tok_s) as baseline_value,
        if(t.still_changed, t.change_baseline_low_tok_s, t.baseline_low_tok_s)
            as baseline_low,
        if(t.still_changed, t.change_baseline_high_tok_s, t.baseline_high_tok_s)
            as baseline_high,
        if(t.still_changed, t.change_n_baseline_runs, t.n_baseline_runs) as n_baseline_runs,
        if(t.still_changed, t.change_since_pct, t.change_pct) as change_pct,
        if(t.still_changed, t.change_since_p_value, t.p_value) as p_value,
        t.own_change or t.still_changed as is_change,
        case
            when t.still_changed then if(t.change_since_pct < 0, 'slower', 'faster')
            when t.own_change then t.own_direction
        end as direction,
        case when t.still_changed then t.change_run_id end as changed_since_run_id,
        t.own_change,
        t.still_changed
    from tested as t
)

select
    f.*,
    case
        when f.n_baseline_runs < {{ var('change_min_baseline_runs') }}
            then 'not tested at ' || f.concurrency || ' streams: ' || f.n_baseline_runs
                || ' baseline night' || if(f.n_baseline_runs = 1, '', 's') || ', '
                || {{ var('change_min_baseline_runs') }} || ' needed'
        when f.still_changed
            then printf('still %.1f %% %s at %d streams than before %s', abs(f.change_pct),
                f.direction, f.concurrency, f.changed_since_run_id)
                || printf(': %.2f vs baseline %.2f tok/s (median of %d nights)',
                    f.value, f.baseline_value, f.n_baseline_runs)
                || printf(', p = %.3g < %g false alarm rate', f.p_value, {{ alpha }})
        when f.is_change
            then printf('%.1f %% %s at %d streams', abs(f.change_pct), f.direction, f.concurrency)
                || printf(': %.2f vs baseline %.2f tok/s (median of %d nights)',
                    f.value, f.baseline_value, f.n_baseline_runs)
                || printf(', p = %.3g < %g false alarm rate', f.p_value, {{ alpha }})
        else printf('no change at %d streams: %+.1f %% vs baseline %.2f tok/s (p = %.3g', f.concurrency,
                f.change_pct, f.baseline_value, f.p_value)
            || printf('; flagged at p < %g and |change| >= %g %%)', {{ alpha }}, {{ min_effect }})
    end as verdict
from final as f

union all by name

select
    n.run_id, n.deployment, n.workload, n.concurrency, n.run_started_at, n.n_valid_trials,
    0 as n_baseline_runs, false as is_change, false as own_change, false as still_changed,
    'not tested at ' || n.concurrency || ' streams: no valid trial (' || n.no_valid_trial_reason
        || '); in no baseline' as verdict
from nights as n
where n.night_index is null
