-- The path each search took: one row per tested level and sustain wave, in the order run,
-- with its trials, the interval of its median at the search's confidence, the verdict of
-- record (dbt's, from the staged waves) beside the live one, and why the level stopped.
with levels as (
    select * from {{ ref('int_search_levels') }}
),

final as (
    select
        run_id,
        deployment,
        workload,
        search_step,
        kind,
        concurrency,
        n_trials,
        n_valid_trials,
        n_samples,
        confidence,
        trials_max,
        median_decode_tok_s,
        ci_low_tok_s,
        ci_high_tok_s,
        verdict,
        verdict_reason,
        passes_threshold,
        stop_reason,
        next_action,
        live_verdict,
        live_median_tok_s,
        live_ci_low_tok_s,
        live_ci_high_tok_s,
        -- the live search decided on the client's figures; where dbt's verdict (data quality,
        -- queueing from token overlap) differs, the path it took is not the one of record
        live_verdict is not distinct from verdict as live_agrees,
        invalid_reasons
    from levels
)

select * from final
