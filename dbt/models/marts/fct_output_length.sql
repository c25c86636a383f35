-- Output-length probe: the same concurrency at several requested lengths. A wave counts by
-- the same verdict as a sweep's trial (int_trials.is_valid: warm-ups, failed or short
-- streams, client timing, queueing, data quality).
with trials as (
    select * from {{ ref('int_trials') }}
    where probe = 'output-length' and trial > 0
),

streams as (
    select wave_id, max(requested_tokens) as requested_tokens
    from {{ ref('int_stream_rates') }}
    where probe = 'output-length'
    group by wave_id
),

waves as (
    select t.*, s.requested_tokens
    from trials as t
    inner join streams as s on s.wave_id = t.wave_id
),

final as (
    select
        run_id, deployment, workload, concurrency, requested_tokens,
        count(*) as n_trials,
        count(*) filter (where is_valid) as n_valid_trials,
        median(median_decode_tok_s) filter (where is_valid) as median_decode_tok_s
    from waves
    group by run_id, deployment, workload, concurrency, requested_tokens
)

select * from final
