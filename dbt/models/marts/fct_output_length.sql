-- Output-length probe: the same concurrency at several requested lengths (warm-ups never
-- count; a wave with a failed stream does not count).
with streams as (
    select * from {{ ref('int_stream_rates') }}
    where probe = 'output-length' and trial > 0
),

waves as (
    select
        run_id, wave_id, deployment, workload, concurrency,
        max(requested_tokens) as requested_tokens,
        median(decode_tok_s) as median_decode_tok_s,
        count(*) filter (where status <> 'ok') as n_failed
    from streams
    group by run_id, wave_id, deployment, workload, concurrency
),

final as (
    select
        run_id, deployment, workload, concurrency, requested_tokens,
        count(*) as n_trials,
        count(*) filter (where n_failed = 0) as n_valid_trials,
        median(median_decode_tok_s) filter (where n_failed = 0) as median_decode_tok_s
    from waves
    group by run_id, deployment, workload, concurrency, requested_tokens
)

select * from final
