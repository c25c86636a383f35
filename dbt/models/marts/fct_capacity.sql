-- Capacity per run, deployment and workload: the level rule (int_capacity), its bootstrap
-- interval, and for a search the sustain verdict: a sustain wave that fell below the threshold
-- at N streams caps the capacity at N - 1 and is the first failing level when no lower level
-- failed (it decides over short trials that passed at and above N: macro
-- first_failing_with_sustain), so such a capacity is no lower bound; `sustain_result` says so. `capacity_verdict`
-- words it once for every reader (CLI, report, Prefect artifact, compare): a level without a
-- valid trial reads "no valid measurement at level N: why", never "below the threshold".
with capacity as (
    select * from {{ ref('int_capacity') }}
),

boot as (
    select
        run_id, deployment, workload,
        quantile_disc(capacity_streams, {{ var('ci_low_pct') }}) as ci_low_streams,
        quantile_disc(capacity_streams, {{ var('ci_high_pct') }}) as ci_high_streams
    from {{ ref('int_capacity_bootstrap') }}
    group by all
),

search as (
    select * from {{ ref('int_search_outcomes') }}
),

joined as (
    select
        c.*,
        b.ci_low_streams,
        b.ci_high_streams,
        s.search_low_streams,
        s.search_high_streams,
        s.n_straddling_levels,
        s.n_sustain_waves,
        s.sustained_streams,
        s.first_unsustained_streams,
        s.sustain_path,
        -- the sustain wave decides at its level when it fell there or below the first
        -- failing trials
        coalesce(s.first_unsustained_streams <= c.first_failing_level, s.first_unsustained_streams is not null)
            as sustain_decides_first_failure,
        s.sustained_streams = {{ capped_below_fallen_sustain('c.capacity_streams') }}
            as sustain_held_at_capacity,
        s.sustained_tok_s,
        s.first_unsustained_tok_s,
        {{ capped_below_fallen_sustain('c.capacity_streams') }} as sustained_capacity_streams
    from capacity as c
    left join boot as b
        on b.run_id = c.run_id and b.deployment = c.deployment and b.workload = c.workload
    left join search as s
        on s.run_id = c.run_id and s.deployment = c.deployment and s.workload = c.workload
),

final as (
    select
        run_id,
        deployment,
        model,
        workload,
        coalesce(method, 'grid') as method,
        threshold_tok_s,
        sustained_capacity_streams as capacity_streams,
        capacity_streams as level_capacity_streams,
        {{ first_failing_with_sustain('first_failing_level') }} as first_failing_level,
        {{ capped_below_fallen_sustain('capacity_interpolated') }} as capacity_interpolated,
        {{ first_failing_with_sustain('first_failing_level') }} is null as is_lower_bound,
        is_non_monotonic,
        is_below_lowest_level,
        is_measured,
        unmeasured_level,
        unmeasured_reason,
        {{ capped_below_fallen_sustain('ci_low_streams') }} as ci_low_streams,
        {{ capped_below_fallen_sustain('ci_high_streams') }} as ci_high_streams,
        -- a search's own interval: every tested level up to the low end cleared the threshold,
        -- the level above the high end clearly failed (NULL: none did), in its trials or in
        -- a sustain wave whose whole interval fell. A sustain wave that fell only by its
        -- median moves the capacity, and the low end with it, not the high end (a
        -- knife-edge level may hold or fall by chance)
        {{ capped_below_fallen_sustain('search_low_streams') }} as search_low_streams,
        search_high_streams,
        coalesce(n_straddling_levels, 0) as n_straddling_levels,
        case
            when coalesce(method, 'grid') = 'grid' then 'not run (grid)'
            when coalesce(n_sustain_waves, 0) = 0 then 'not run'
            when first_unsustained_streams is null
                then 'held at ' || sustained_streams || ' streams'
            when sustained_streams is not null
                then 'fell at ' || first_unsustained_streams || ', held at '
                    || sustained_streams || ' streams: capacity moved down'
            else 'fell at ' || first_unsustained_streams
                || ' streams, never held: capacity moved down, not confirmed'
        end as sustain_result,
        sustain_path,
        n_valid_trials,
        n_measured_levels,
        n_levels,
        lowest_level,
        top_level,
        -- the rate at the capacity and at the first failing level: a sustain wave's where it
        -- decides there (NULL at a capacity a fallen sustain wave moved to an untested level)
        case
            when coalesce(sustain_held_at_capacity, false) then sustained_tok_s
            when sustained_capacity_streams < capacity_streams then null
            else capacity_level_tok_s
        end as capacity_level_tok_s,
        case when sustain_decides_first_failure then first_unsustained_tok_s
            else first_failing_tok_s end as first_failing_tok_s,
        judgement_settings
    from joined
),

unit_named as (
    -- an agent level counts sessions, each sending its turns one after another
    select *, if(workload = 'agent', ' session', ' stream') as unit from final
)

select
    * exclude (unit),
    case
        when unmeasured_level is not null and level_capacity_streams = 0
            then 'no valid measurement at level ' || unmeasured_level || ': ' || unmeasured_reason
                || if(n_measured_levels = 0 and n_levels > 1, ' (nor at any other level)', '')
        when unmeasured_level is not null
            then capacity_streams || unit || if(capacity_streams = 1, '', 's')
                || ' (no valid measurement at level ' || unmeasured_level || ': '
                || unmeasured_reason || ')'
        when capacity_streams = 0 and workload = 'agent'
            -- failed turns, the rate or the TTFT: the levels and the why line say which
            then 'no level passes (median turn ≥ ' || printf('%g', threshold_tok_s::double)
                || ' tok/s, turn TTFT p' || round(100 * {{ var('ttft_quantile') }})
                || ' ≤ ' || printf('%g', {{ var('ttft_ceiling_s') }}::double) || ' s)'
        when capacity_streams = 0
            then 'below ' || printf('%g', threshold_tok_s::double)
                || ' tok/s even at the lowest level'
        when is_lower_bound
            then '≥ ' || capacity_streams || unit || 's (all tested levels pass)'
        when capacity_streams <> level_capacity_streams
            then capacity_streams || unit || if(capacity_streams = 1, '', 's')
        else capacity_streams || unit || if(capacity_streams = 1, '', 's')
            || ' (fails at ' || first_failing_level || ')'
    end
    || if(
        is_non_monotonic and first_failing_level is not null,
        ' · not monotone: a level above ' || first_failing_level || ' passes again',
        ''
    )
    || if(method = 'search', ' · search; sustain wave: ' || sustain_result, '')
    || if(
        method = 'search' and search_high_streams > search_low_streams,
        ' · undecided between ' || search_low_streams || ' and ' || search_high_streams,
        ''
    ) as capacity_verdict
from unit_named
