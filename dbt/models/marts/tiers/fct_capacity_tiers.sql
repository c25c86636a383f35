-- Capacity per run, deployment, workload and tier (a per-stream threshold, alone or with a
-- TTFT p90 ceiling): fct_capacity's rule at the tier, from the levels the night measured
-- (int_tier_levels), no new wave. The level rule is int_capacity's (macros/capacity_rule.sql:
-- the largest level passing with every smaller level passing; a first failing level without
-- a valid trial is unmeasured, not a failure); a search's sustain waves cap it as in
-- fct_capacity, and a fallen one is the first failing level when no lower level failed
-- (macro first_failing_with_sustain). So the tier of record (the fleet's threshold, no ceiling) is fct_capacity's
-- capacity, and a tier at T is what `sparkcap build --threshold T` would report. A search
-- chose its levels for the fleet's threshold: at another tier the capacity is the rule on
-- those levels only, and the verdict says so (its bracket is first_failing_level).
with levels as (
    select * from {{ ref('int_tier_levels') }}
),

first_fail as (
    select
        run_id, deployment, workload, threshold_tok_s, ttft_p90_ceiling_s,
        min(concurrency) as first_failing_level
    from levels
    where kind = 'level' and not passes_tier
    group by all
),

sustain as (
    select
        run_id, deployment, workload, threshold_tok_s, ttft_p90_ceiling_s,
        min(concurrency) filter (where not passes_tier) as first_unsustained_streams
    from levels
    where kind = 'sustain'
    group by all
),

summary as (
    select
        l.run_id,
        l.deployment,
        l.workload,
        l.threshold_tok_s,
        l.ttft_p90_ceiling_s,
        any_value(l.model) as model,
        coalesce(any_value(l.method), 'grid') as method,
        bool_or(l.is_threshold_of_record) as is_threshold_of_record,
        f.first_failing_level,
        {{ capacity_level('l.concurrency', 'l.passes_tier', 'f.first_failing_level') }}
            as capacity_level,
        string_agg(l.concurrency::varchar, ', ' order by l.concurrency) as levels_tested,
        cast(count(*) as integer) as n_levels,
        max(l.run_watermark) as run_watermark
    from levels as l
    left join first_fail as f
        on f.run_id = l.run_id and f.deployment = l.deployment and f.workload = l.workload
        and f.threshold_tok_s = l.threshold_tok_s
        and f.ttft_p90_ceiling_s is not distinct from l.ttft_p90_ceiling_s
    where l.kind = 'level'
    group by l.run_id, l.deployment, l.workload, l.threshold_tok_s, l.ttft_p90_ceiling_s,
        f.first_failing_level
),

joined as (
    select
        s.* exclude (first_failing_level),
        {{ first_failing_with_sustain('s.first_failing_level') }} as first_failing_level,
        su.first_unsustained_streams,
        lo.median_decode_tok_s as capacity_level_tok_s,
        lo.ttft_p90_s as capacity_level_ttft_p90_s,
        lo.ttft_p90_samples as capacity_level_ttft_p90_samples,
        hi.fails_by as first_failing_by,
        {{ unmeasured_first_failure('hi') }}
    from summary as s
    left join sustain as su
        on su.run_id = s.run_id and su.deployment = s.deployment and su.workload = s.workload
        and su.threshold_tok_s = s.threshold_tok_s
        and su.ttft_p90_ceiling_s is not distinct from s.ttft_p90_ceiling_s
    left join levels as lo
        on lo.kind = 'level' and lo.run_id = s.run_id and lo.deployment = s.deployment
        and lo.workload = s.workload and lo.concurrency = s.capacity_level
        and lo.threshold_tok_s = s.threshold_tok_s
        and lo.ttft_p90_ceiling_s is not distinct from s.ttft_p90_ceiling_s
    left join levels as hi
        -- the wave that decided the first failure: a fallen sustain wave at or below the
        -- first failing trials, else those trials
        on hi.kind = case
            when su.first_unsustained_streams <= coalesce(s.first_failing_level, 2147483647)
                then 'sustain' else 'level' end
        and hi.run_id = s.run_id and hi.deployment = s.deployment
        and hi.workload = s.workload
        and hi.concurrency = {{ first_failing_with_sustain('s.first_failing_level') }}
        and hi.threshold_tok_s = s.threshold_tok_s
        and hi.ttft_p90_ceiling_s is not distinct from s.ttft_p90_ceiling_s
),

final as (
    select
        run_id,
        deployment,
        model,
        workload,
        method,
        threshold_tok_s,
        ttft_p90_ceiling_s,
        printf('%g tok/s', threshold_tok_s)
            || coalesce(printf(' · TTFT p90 ≤ %g s', ttft_p90_ceiling_s), '') as tier,
        {{ capped_below_fallen_sustain('coalesce(capacity_level, 0)') }} as capacity_streams,
        coalesce(capacity_level, 0) as level_capacity_streams,
        first_failing_level is null as is_lower_bound,
        {{ capacity_is_measured('capacity_level', 'unmeasured_level') }} as is_measured,
        is_threshold_of_record,
        first_failing_level,
        first_failing_by,
        unmeasured_level,
        unmeasured_reason,
        first_unsustained_streams,
        capacity_level_tok_s,
        capacity_level_ttft_p90_s,
        capacity_level_ttft_p90_samples,
        -- the fewest samples a p90 needs (macro tail_min_samples): below it the report says
        -- "not enough samples", never the figure
        capacity_level_ttft_p90_samples >= {{ tail_min_samples('0.9') }}
            as capacity_level_ttft_p90_is_supported,
        levels_tested,
        n_levels,
        run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from joined
)

select
    *,
    case
        when not is_measured
            then 'no valid measurement at level ' || unmeasured_level || ': ' || unmeasured_reason
        when unmeasured_level is not null
            then capacity_streams || ' stream' || if(capacity_streams = 1, '', 's')
                || ' (no valid measurement at level ' || unmeasured_level || ')'
        when capacity_streams <> level_capacity_streams
            then capacity_streams || ' stream' || if(capacity_streams = 1, '', 's')
                || ' (sustain wave fell at ' || first_unsustained_streams || ')'
        when capacity_streams = 0
            then 'none: level ' || first_failing_level || ' already fails (' || first_failing_by
                || ')'
        when is_lower_bound
            then '≥ ' || capacity_streams || ' streams (all tested levels pass)'
        else capacity_streams || ' stream' || if(capacity_streams = 1, '', 's')
            || ' (fails at ' || first_failing_level || ': ' || first_failing_by || ')'
    end
    || if(
        method = 'search' and not is_threshold_of_record,
        ' · from the levels a search chose for ' || printf('%g', {{ var('threshold_tok_s') }}::double)
            || ' tok/s: ' || levels_tested,
        ''
    ) as tier_verdict
from final
