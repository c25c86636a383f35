with trials as (
    select * from {{ ref('int_trials') }}
    where probe is null
),

final as (
    select
        run_id,
        wave_id,
        deployment,
        model,
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
        concurrency_x_median_tok_s,
        median_ttft_s,
        max_ttft_s,
        effective_concurrency,
        peak_concurrency,
        client_saturated,
        timing_error_bound,
        start_skew_ms,
        client_process_count,
        attempt,
        is_superseded,
        spec_acceptance,
        server_generated_tokens,
        metrics_error,
        queued,
        n_dq_failures,
        is_valid,
        invalid_reasons
    from trials
)

select * from final
