{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}

-- The study's per-stream formulas. Only `ok` streams carry a decode rate.
with requests as (
    select * from {{ ref('stg_requests') }}
    where {{ changed_runs_filter('run_id') }}
),

waves as (
    select * from {{ ref('stg_waves') }}
),

watermarks as (
    select * from {{ ref('int_run_watermarks') }}
),

final as (
    select
        r.request_id,
        r.wave_id,
        r.run_id,
        w.deployment,
        w.model,
        w.workload,
        w.concurrency,
        w.trial,
        w.probe,
        r.request_role,
        r.stream_index,
        r.prompt_id,
        r.status,
        r.http_status,
        r.requested_tokens,
        r.required_tokens,
        r.completion_tokens,
        r.count_source,
        r.finish_reason,
        r.prompt_tokens,
        r.cached_prompt_tokens,
        r.sent_ns,
        r.first_token_ns,
        r.last_token_ns,
        r.n_chunks,
        {{ stream_decode_tok_s(
            'r.status', 'r.completion_tokens', 'r.first_token_ns', 'r.last_token_ns'
        ) }} as decode_tok_s,
        (r.first_token_ns - r.sent_ns) / 1e9 as ttft_s,
        (r.last_token_ns - r.first_token_ns) / 1e9 as decode_span_s,
        m.run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from requests as r
    inner join waves as w on w.wave_id = r.wave_id
    inner join watermarks as m on m.run_id = r.run_id
)

select * from final
