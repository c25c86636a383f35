{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- Every measured level (int_levels) and every sustain wave of a search (int_search_levels)
-- judged at every capacity tier (macros/tiers.sql, capacity_tiers) by the one level rule
-- (macros/capacity_rule.sql, level_passes) with the tier's threshold and TTFT ceiling: no new
-- wave, only the stored streams. `fails_by` says what a level that does not pass missed.
with levels as (
    select
        run_id, deployment, model, workload, method, 'level' as kind, concurrency,
        n_valid_trials, median_decode_tok_s, any_queued, no_valid_trial_reason, run_watermark,
        ttft_quantile_s
    from {{ ref('int_levels') }}
    where {{ changed_runs_filter('run_id') }}
),

sustain as (
    select
        run_id, deployment, null::varchar as model, workload, 'search' as method,
        'sustain' as kind, concurrency, n_valid_trials, median_decode_tok_s, any_queued,
        null::varchar as no_valid_trial_reason, run_watermark,
        -- an agent sustain wave's turns are held to the TTFT ceiling as its levels are
        ttft_quantile_s
    from {{ ref('int_search_levels') }}
    where kind = 'sustain' and {{ changed_runs_filter('run_id') }}
),

measured as (
    select * from levels
    union all by name
    select * from sustain
),

ttft as (
    select * from {{ ref('int_level_ttft') }}
),

tiers as (
    {{ capacity_tiers() }}
),

judged as (
    select
        m.*,
        t.threshold_tok_s,
        t.ttft_p90_ceiling_s,
        f.ttft_p90_s,
        f.n_ttft_streams as ttft_p90_samples,
        -- an agent level is held to its turns' TTFT ceiling at every tier that sets none
        -- of its own, as the capacity of record is (int_levels)
        {{ level_passes(
            'm.median_decode_tok_s', 'm.any_queued', 'm.n_valid_trials > 0',
            threshold_tok_s='t.threshold_tok_s',
            ttft_p90_s="case when t.ttft_p90_ceiling_s is null and m.workload = 'agent'"
                ~ " then m.ttft_quantile_s else f.ttft_p90_s end",
            ttft_p90_ceiling_s="case when t.ttft_p90_ceiling_s is null and m.workload = 'agent'"
                ~ " then " ~ var('ttft_ceiling_s') ~ " else t.ttft_p90_ceiling_s end"
        ) }} as passes_tier
    from measured as m
    cross join tiers as t
    left join ttft as f
        on f.run_id = m.run_id and f.deployment = m.deployment and f.workload = m.workload
        and f.kind = m.kind and f.concurrency = m.concurrency
)

select
    run_id,
    deployment,
    model,
    workload,
    method,
    kind,
    concurrency,
    threshold_tok_s,
    ttft_p90_ceiling_s,
    threshold_tok_s = {{ var('threshold_tok_s') }} and ttft_p90_ceiling_s is null
        as is_threshold_of_record,
    n_valid_trials,
    median_decode_tok_s,
    ttft_p90_s,
    ttft_p90_samples,
    any_queued,
    no_valid_trial_reason,
    passes_tier,
    case
        when passes_tier then null
        when n_valid_trials = 0 then 'no valid trial'
        when any_queued then 'queued'
        when not coalesce(median_decode_tok_s >= threshold_tok_s, false)
            and not coalesce(ttft_p90_s <= ttft_p90_ceiling_s, ttft_p90_ceiling_s is null)
            then 'decode rate and TTFT'
        when not coalesce(median_decode_tok_s >= threshold_tok_s, false) then 'decode rate'
        else 'TTFT'
    end as fails_by,
    run_watermark,
    {{ judgement_settings() }} as judgement_settings
from judged
