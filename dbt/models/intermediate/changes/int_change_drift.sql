-- The drift test of change detection, per run × deployment × workload: the Theil–Sen slope
-- of the workload's level medians over the last var('drift_window_runs') comparable runs (the
-- night's included), with Sen's rank interval. Each run's value y is the median over its
-- levels of 100 × the level median / that level's median over the window (so % of the
-- window's median, levels of any rate weighing alike); x is the run's place among the
-- comparable runs. slope = median of the pairwise slopes (y_j - y_i) / (x_j - x_i) over
-- i < j; its interval: with N = n(n-1)/2 slopes sorted ascending, C = z × sqrt(n(n-1)(2n+5)
-- / 18) (the variance of Kendall's S, no ties), z the normal quantile of 1 - alpha/2,
-- alpha = var('change_false_alarm_rate'): the slopes ranked floor((N - C)/2) and
-- ceil((N + C)/2) + 1. Too few runs for such ranks (floor((N - C)/2) < 1): no interval, no
-- decision. A drift is flagged when the interval excludes 0 and |slope| >=
-- var('drift_min_pct_per_run'). change_pct is the slope times the window's runs - 1.
{% set window = var('drift_window_runs') %}
{#- | float: a whole-number override (10) is an integer to DuckDB, which printf's %g refuses -#}
{% set alpha = var('change_false_alarm_rate') | float %}
{% set min_drift_pct = var('drift_min_pct_per_run') | float %}
with levels as (
    select * from {{ ref('int_change_level_nights') }}
    where night_index is not null
),

runs as (
    select
        deployment, workload, run_id, run_started_at,
        row_number() over (partition by deployment, workload order by run_started_at, run_id)
            as run_index
    from (select distinct deployment, workload, run_id, run_started_at from levels)
),

windows as (
    -- each run r with the runs w of its window
    select
        r.deployment, r.workload, r.run_id, r.run_index,
        w.run_id as window_run_id, w.run_index as x
    from runs as r
    inner join runs as w
        on w.deployment = r.deployment and w.workload = r.workload
        and w.run_index between r.run_index - {{ window }} + 1 and r.run_index
),

window_levels as (
    select
        wi.deployment, wi.workload, wi.run_id, wi.x, l.concurrency, l.level_median_tok_s,
        median(l.level_median_tok_s) over (
            partition by wi.deployment, wi.workload, wi.run_id, l.concurrency
        ) as window_median_tok_s
    from windows as wi
    inner join levels as l
        on l.deployment = wi.deployment and l.workload = wi.workload
        and l.run_id = wi.window_run_id
),

points as (
    select
        deployment, workload, run_id, x,
        median(100 * level_median_tok_s / nullif(window_median_tok_s, 0)) as y
    from window_levels
    group by all
),

slopes as (
    select
        a.deployment, a.workload, a.run_id,
        (b.y - a.y) / (b.x - a.x) as slope
    from points as a
    inner join points as b
        on b.deployment = a.deployment and b.workload = a.workload and b.run_id = a.run_id
        and b.x > a.x
),

fits as (
    select
        p.deployment, p.workload, p.run_id,
        count(*) as n_runs,
        any_value(s.n_slopes) as n_slopes,
        any_value(s.slope_pct) as slope_pct,
        any_value(s.sorted) as sorted
    from points as p
    left join (
        select
            deployment, workload, run_id, count(*) as n_slopes, median(slope) as slope_pct,
            list_sort(list(slope)) as sorted
        from slopes
        group by all
    ) as s
        on s.deployment = p.deployment and s.workload = p.workload and s.run_id = p.run_id
    group by all
),

ranked as (
    select
        *,
        cast(floor((n_slopes - {{ normal_upper_quantile(alpha ~ ' / 2') }}
            * sqrt(n_runs * (n_runs - 1) * (2 * n_runs + 5) / 18.0)) / 2) as integer)
            as low_rank,
        cast(ceil((n_slopes + {{ normal_upper_quantile(alpha ~ ' / 2') }}
            * sqrt(n_runs * (n_runs - 1) * (2 * n_runs + 5) / 18.0)) / 2) as integer) + 1
            as high_rank
    from fits
),

final as (
    select
        k.run_id,
        k.deployment,
        k.workload,
        r.run_started_at,
        lag(k.run_id) over (
            partition by k.deployment, k.workload order by r.run_index
        ) as previous_run_id,
        k.n_runs as n_baseline_runs,
        k.slope_pct as value,
        case when k.low_rank >= 1 and k.high_rank <= k.n_slopes then k.sorted[k.low_rank] end
            as value_low,
        case when k.low_rank >= 1 and k.high_rank <= k.n_slopes then k.sorted[k.high_rank] end
            as value_high,
        k.slope_pct * (k.n_runs - 1) as change_pct
    from ranked as k
    inner join runs as r
        on r.deployment = k.deployment and r.workload = k.workload and r.run_id = k.run_id
),

decided as (
    select
        *,
        coalesce(
            (value_low > 0 or value_high < 0)
            and abs(value) >= {{ min_drift_pct }},
            false
        ) as is_change
    from final
)

select
    *,
    case when is_change then if(value < 0, 'slower', 'faster') end as direction,
    case
        when value_low is null
            then 'drift not tested: ' || n_baseline_runs || ' run'
                || if(n_baseline_runs = 1, '', 's') || ' in the window, too few for a '
                || printf('%g %% interval', 100 * (1 - {{ alpha }}))
        else if(is_change, 'drift ' || direction, 'no drift')
            || printf(': %+.2f %%/run [%+.2f, %+.2f] over %d runs (%+.1f %% across them;',
                value, value_low, value_high, n_baseline_runs, change_pct)
            || printf(' Theil–Sen, %g %% interval; flagged when it excludes 0 and |slope| >= %g %%/run)',
                100 * (1 - {{ alpha }}), {{ min_drift_pct }})
    end as verdict
from decided
