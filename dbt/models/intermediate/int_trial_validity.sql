{{ config(materialized='view') }}

-- One row per synchronized wave of int_trial_figures: whether it counts, and every reason it
-- does not. The client's own causes (timing, release) are macro client_spoiled's, the rule the
-- capture re-measures by; queueing is the server's (streams that never all decoded at once, or
-- a TTFT spread far beyond the lowest level's TTFT).
with figures as (
    select * from {{ ref('int_trial_figures') }}
),

flagged as (
    select
        *,
        {{ client_timing_spoiled('timing_error_bound') }} as is_client_timing_spoiled,
        {{ client_release_spoiled('start_skew_ms', 'median_decode_span_s') }}
            as is_client_release_spoiled,
        workload <> 'agent' and concurrency > 1 and (max_ttft_s - min_ttft_s) > greatest(
            {{ var('queued_ttft_factor') }} * coalesce(reference_ttft_s, 0),
            {{ var('queued_ttft_min_s') }}
        ) as queued_by_ttft
    from figures
),

reasons as (
    select
        *,
        list_filter([
            case when trial = 0 then 'warm-up wave (never counted)' end,
            case when workload <> 'agent' and n_streams <> concurrency
                then 'recorded ' || n_streams || ' of ' || concurrency || ' streams' end,
            case when workload = 'agent' and n_sessions <> concurrency
                then 'recorded ' || n_sessions || ' of ' || concurrency || ' sessions' end,
            case when n_failed > 0
                then n_failed || ' failed stream(s): ' || failure_statuses end,
            case when n_missing_counts > 0
                then n_missing_counts || ' stream(s) without a completion length' end,
            case when superseded_reason is not null
                then 'superseded: ' || superseded_reason end,
            {{ client_timing_reason('timing_error_bound') }},
            {{ client_release_reason('start_skew_ms', 'median_decode_span_s') }},
            case when legacy_client_saturated
                then 'client saturated: ' || coalesce(legacy_saturation_reasons, '') end,
            case when queued_by_overlap then 'queued: ' || queued_reason end,
            case when queued_by_ttft
                then 'queued: TTFT spread ' || round(max_ttft_s - min_ttft_s, 2)
                    || ' s vs ' || round(coalesce(reference_ttft_s, 0), 2)
                    || ' s median TTFT at the lowest level' end,
            case when n_dq_failures > 0
                then 'data-quality: ' || dq_failed_expectations end,
            case when n_rates = 0 and n_failed = 0 then 'no measurable stream rate' end
        ], lambda x: x is not null) as invalid_reason_list
    from flagged
)

select
    wave_id,
    run_id,
    is_client_timing_spoiled,
    is_client_release_spoiled,
    -- a night recorded before the client's causes were judged here keeps its capture-time one
    coalesce(legacy_client_saturated, false)
        or is_client_timing_spoiled
        or is_client_release_spoiled as client_saturated,
    superseded_reason is not null as is_superseded,
    queued_by_overlap or queued_by_ttft as queued,
    len(invalid_reason_list) = 0 as is_valid,
    nullif(array_to_string(invalid_reason_list, '; '), '') as invalid_reasons
from reasons
