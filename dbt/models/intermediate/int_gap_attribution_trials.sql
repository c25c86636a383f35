{{ config(materialized='view') }}

-- The gap-attribution probe's waves, one row per wave: which variant it ran (the label the
-- probe put in its wave_id, as the output-length probe puts L00400 there), what its streams
-- asked for, and the trial value and validity verdict of int_trials (the one verdict sweeps
-- and probes share). The warm-up wave (trial 0) is left out: it is never counted.
with trials as (
    select * from {{ ref('int_trials') }}
    where probe = 'gap-attribution' and trial > 0
),

requests as (
    select
        wave_id,
        median(temperature) as temperature,
        avg(requested_tokens) as mean_requested_tokens,
        min(requested_tokens) as min_requested_tokens,
        max(requested_tokens) as max_requested_tokens
    from {{ ref('stg_requests') }}
    group by wave_id
),

final as (
    select
        t.run_id,
        t.wave_id,
        t.deployment,
        regexp_extract(t.wave_id, '/gap-attribution/([^/]+)/c[0-9]+/t[0-9]+$', 1) as variant,
        t.workload as prompts_workload,
        t.concurrency,
        t.trial,
        r.temperature,
        r.mean_requested_tokens,
        r.min_requested_tokens,
        r.max_requested_tokens,
        t.n_streams,
        t.median_decode_tok_s,
        t.is_valid,
        t.invalid_reasons
    from trials as t
    left join requests as r on r.wave_id = t.wave_id
)

select * from final
