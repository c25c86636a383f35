{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- One row per synchronized wave: the trial value (median over its streams), aggregate
-- throughput and the validity verdict with every reason that applies. Sweep waves
-- (probe is null), a search's sustain waves and the synchronized waves of the output-length
-- and mixed probes share this one verdict; consumers pick theirs by `probe`.
with streams as (
    select * from {{ ref('int_stream_rates') }}
    where {{ changed_runs_filter('run_id') }}
),

waves as (
    select * from {{ ref('stg_waves') }}
    where probe is null or probe in ('output-length', 'mixed', 'sustain', 'gap-attribution')
),

dq_failures as (
    select * from {{ ref('int_dq_wave_failures') }}
),

server as (
    select * from {{ ref('int_wave_server_metrics') }}
),

-- each stream with its wave's worst loop lag: how far its stamps may be off (decode_overlap)
overlap_streams as (
    select s.wave_id, s.first_token_ns, s.last_token_ns, w.loop_lag_max_ms
    from streams as s
    left join (select wave_id, loop_lag_max_ms from {{ ref('stg_waves') }}) as w
        on w.wave_id = s.wave_id
),

overlap as (
    {{ decode_overlap('overlap_streams') }}
),

per_wave as (
    select
        wave_id,
        run_id,
        any_value(run_watermark) as run_watermark,
        count(*) as n_streams,
        count(*) filter (where status = 'ok') as n_ok,
        count(*) filter (where status <> 'ok') as n_failed,
        count(*) filter (where status = 'short') as n_short,
        count(*) filter (where status = 'ok' and completion_tokens is null) as n_missing_counts,
        count(decode_tok_s) as n_rates,
        median(decode_tok_s) as median_decode_tok_s,
        min(decode_tok_s) as min_decode_tok_s,
        max(decode_tok_s) as max_decode_tok_s,
        sum(completion_tokens - 1) filter (
            where completion_tokens is not null and first_token_ns is not null
        ) as aggregate_tokens,
        min(first_token_ns) filter (where completion_tokens is not null) as earliest_first_ns,
        max(last_token_ns) filter (where completion_tokens is not null) as latest_last_ns,
        median(last_token_ns - first_token_ns) filter (
            where first_token_ns is not null and last_token_ns is not null
        ) / 1e9 as median_decode_span_s,
        count(first_token_ns) as n_decoded,
        -- time-weighted streams decoding at once over the wave's decode span
        sum(last_token_ns - first_token_ns) filter (where last_token_ns > first_token_ns)
        / nullif(
            max(last_token_ns) filter (where last_token_ns > first_token_ns)
            - min(first_token_ns) filter (where last_token_ns > first_token_ns),
            0
        ) as effective_concurrency,
        median(ttft_s) as median_ttft_s,
        -- the TTFT an agent session's next turn must meet (int_levels), over every turn
        {{ ttft_quantile('ttft_s') }} as ttft_quantile_s,
        count(ttft_s) as n_ttft,
        count(distinct session_id) as n_sessions,
        min(ttft_s) as min_ttft_s,
        max(ttft_s) as max_ttft_s,
        string_agg(distinct status, ',' order by status) filter (where status <> 'ok')
            as failure_statuses
    from streams
    group by wave_id, run_id
),

joined as (
    select
        w.run_id,
        w.wave_id,
        w.deployment,
        w.model,
        w.probe,
        w.method,
        w.search_step,
        w.workload,
        w.concurrency,
        w.trial,
        w.started_at,
        coalesce(o.peak_concurrency, 0) as peak_concurrency,
        w.client_saturated as legacy_client_saturated,
        w.saturation_reasons as legacy_saturation_reasons,
        w.timing_error_bound,
        w.loop_lag_max_ms,
        w.start_skew_ms,
        w.client_process_count,
        w.attempt,
        w.superseded_reason,
        w.metrics_error,
        -- a session's turns follow each other, so they never all decode at once: queueing
        -- shows in the turns' TTFT, which the level rule holds to the ceiling instead
        coalesce(o.queued_by_overlap and w.workload <> 'agent', false) as queued_by_overlap,
        'at most ' || coalesce(o.peak_concurrency, 0) || ' of ' || o.n_decoded_with_window
        || ' streams decoded at once (the server queued the rest)' as queued_reason,
        w.n_requests,
        p.* exclude (wave_id, run_id),
        case
            when p.latest_last_ns > p.earliest_first_ns
                then p.aggregate_tokens / ((p.latest_last_ns - p.earliest_first_ns) / 1e9)
        end as aggregate_tok_s,
        coalesce(d.n_blocking_failures, 0) as n_dq_failures,
        d.failed_expectations as dq_failed_expectations,
        sv.spec_acceptance,
        sv.server_generated_tokens
    from waves as w
    inner join per_wave as p on p.wave_id = w.wave_id
    left join overlap as o on o.wave_id = w.wave_id
    left join dq_failures as d on d.wave_id = w.wave_id
    left join server as sv on sv.wave_id = w.wave_id
),

with_reference as (
    -- TTFT reference: the median TTFT at the lowest tested level of the same sweep
    select
        *,
        first_value(median_ttft_s) over (
            partition by run_id, deployment, workload, probe
            order by (trial = 0), concurrency, trial
        ) as reference_ttft_s
    from joined
),

flagged as (
    select
        *,
        -- client-side verdicts, relative to the streams' own durations (docs/concepts/recording-rules.md, "Client
        -- timing"): loop stalls near first/last tokens, and a ragged release
        coalesce(timing_error_bound > {{ var('timing_error_tolerance') }}, false)
            as timing_spoiled,
        coalesce(
            start_skew_ms / 1e3 / nullif(median_decode_span_s, 0)
            > {{ var('start_skew_tolerance') }},
            false
        ) as skew_spoiled,
        workload <> 'agent' and concurrency > 1 and (max_ttft_s - min_ttft_s) > greatest(
            {{ var('queued_ttft_factor') }} * coalesce(reference_ttft_s, 0),
            {{ var('queued_ttft_min_s') }}
        ) as queued_by_ttft
    from with_reference
),

final as (
    select
        run_id,
        wave_id,
        deployment,
        model,
        probe,
        method,
        search_step,
        workload,
        concurrency,
        trial,
        started_at,
        n_streams,
        n_ok,
        n_failed,
        n_short,
        n_missing_counts,
        median_decode_tok_s,
        min_decode_tok_s,
        max_decode_tok_s,
        aggregate_tok_s,
        concurrency * median_decode_tok_s as concurrency_x_median_tok_s,
        median_ttft_s,
        ttft_quantile_s,
        n_ttft,
        n_sessions,
        min_ttft_s,
        max_ttft_s,
        reference_ttft_s,
        effective_concurrency,
        peak_concurrency,
        coalesce(legacy_client_saturated, false) or timing_spoiled or skew_spoiled
            as client_saturated,
        timing_error_bound,
        loop_lag_max_ms,
        start_skew_ms,
        client_process_count,
        median_decode_span_s,
        attempt,
        superseded_reason is not null as is_superseded,
        superseded_reason,
        metrics_error,
        spec_acceptance,
        server_generated_tokens,
        queued_by_overlap or queued_by_ttft as queued,
        n_dq_failures,
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
            case when timing_spoiled
                then printf(
                    'client timing: error bound %.2f%% > %.2f%%',
                    100 * timing_error_bound, 100 * {{ var('timing_error_tolerance') }}::double
                ) end,
            case when skew_spoiled
                then printf(
                    'client release: start skew %.1f ms > %.0f%% of the median decode span',
                    start_skew_ms, 100 * {{ var('start_skew_tolerance') }}::double
                ) end,
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
        ], lambda x: x is not null) as invalid_reason_list,
        run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from flagged
)

select
    * exclude (invalid_reason_list),
    len(invalid_reason_list) = 0 as is_valid,
    nullif(array_to_string(invalid_reason_list, '; '), '') as invalid_reasons
from final
