-- Requests of responsiveness probes (prefill interference, prompt cache), times in seconds
-- from the probe's wave anchor, with each stream's mean tokens per chunk so chunk timelines
-- can be turned into token rates when the server gave no per-chunk counts.
with waves as (
    select * from {{ ref('stg_waves') }}
    where probe is not null
),

requests as (
    select * from {{ ref('stg_requests') }}
),

final as (
    select
        r.request_id,
        r.wave_id,
        r.run_id,
        w.deployment,
        w.model,
        w.probe,
        r.request_role,
        r.status,
        r.prompt_tokens,
        r.cached_prompt_tokens,
        r.completion_tokens,
        r.n_chunks,
        r.sent_ns / 1e9 as sent_s,
        r.first_token_ns / 1e9 as first_token_s,
        r.last_token_ns / 1e9 as last_token_s,
        (r.first_token_ns - r.sent_ns) / 1e9 as ttft_s,
        r.completion_tokens::double / nullif(r.n_chunks, 0) as tokens_per_chunk
    from requests as r
    inner join waves as w on w.wave_id = r.wave_id
)

select * from final
