-- Every night's level as change detection sees it: one row per run × deployment × workload
-- × concurrency swept, with the level median over its valid counted trials (int_levels' value)
-- and those trials' medians. Only valid trials count: a client-starved or otherwise spoiled
-- trial never feeds a baseline or a test, so a night whose level has no valid trial is not
-- comparable (night_index NULL, no_valid_trial_reason says why) and is skipped by the
-- baselines of the nights after it. night_index numbers the comparable nights of each
-- deployment × workload × level in start order. Every night is built with this build's
-- judgement settings (the models are rebuilt whole), so the nights compared share them.
with trials as (
    select * from {{ ref('int_trials') }}
    where probe is null and trial > 0 and not coalesce(is_superseded, false)
),

runs as (
    select run_id, started_at from {{ ref('stg_runs') }}
),

levels as (
    select
        t.run_id,
        t.deployment,
        t.workload,
        t.concurrency,
        r.started_at as run_started_at,
        count(*) as n_trials,
        count(*) filter (where t.is_valid and t.median_decode_tok_s is not null)
            as n_valid_trials,
        median(t.median_decode_tok_s) filter (where t.is_valid) as level_median_tok_s,
        list(t.median_decode_tok_s order by t.trial) filter (
            where t.is_valid and t.median_decode_tok_s is not null
        ) as trial_medians_tok_s,
        string_agg(distinct t.invalid_reasons, '; ' order by t.invalid_reasons)
            filter (where not t.is_valid) as invalid_reasons
    from trials as t
    inner join runs as r on r.run_id = t.run_id
    group by all
)

select
    run_id,
    deployment,
    workload,
    concurrency,
    run_started_at,
    n_trials,
    n_valid_trials,
    level_median_tok_s,
    coalesce(trial_medians_tok_s, []) as trial_medians_tok_s,
    case when n_valid_trials > 0 then
        row_number() over (
            partition by deployment, workload, concurrency, n_valid_trials > 0
            order by run_started_at, run_id
        )
    end as night_index,
    case when n_valid_trials = 0 then
        n_trials || ' of ' || n_trials || ' trial' || if(n_trials = 1, '', 's')
        || ' invalid: ' || coalesce(invalid_reasons, 'no reason recorded')
    end as no_valid_trial_reason
from levels
