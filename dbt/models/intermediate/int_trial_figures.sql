{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

-- One row per synchronized wave: what was measured (the trial value, the median over its
-- streams; aggregate throughput; TTFT; concurrency from the token times; what the client,
-- data quality and the server recorded of it). The verdict on these figures is
-- int_trial_validity's; int_trials puts the two side by side. Sweep waves (probe is null),
-- a search's sustain waves and the synchronized waves of the output-length and mixed probes
-- share these figures; consumers pick theirs by `probe`.
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
        {{ median_decode_span_s('first_token_ns', 'last_token_ns') }} as median_decode_span_s,
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
)

select
    *,
    concurrency * median_decode_tok_s as concurrency_x_median_tok_s,
    {{ judgement_settings() }} as judgement_settings
from with_reference
