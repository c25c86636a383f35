-- The context-ladder probe's requests, each with its rung (the target prompt tokens its
-- prompt_id carries, ladder-L004096-cold) and the context the ladder climbed to with its
-- source (the wave's label, ctx0008192-llama-props or ctx-none). A rung refused as too long
-- is an HTTP 400 or 413 answer: the server's context limit showing, not a failure of the probe.
with probe_requests as (
    select * from {{ ref('int_probe_requests') }}
    where probe = 'context-ladder'
),

streams as (
    select request_id, prompt_id, http_status, concurrency
    from {{ ref('int_stream_rates') }}
    where probe = 'context-ladder'
),

final as (
    select
        p.request_id,
        p.wave_id,
        p.run_id,
        p.deployment,
        p.model,
        p.request_role,
        s.prompt_id,
        nullif(regexp_extract(s.prompt_id, '^ladder-L([0-9]+)-', 1), '')::integer
            as rung_tokens,
        nullif(regexp_extract(p.wave_id, '/context-ladder/ctx([0-9]+)-', 1), '')::integer
            as context_tokens,
        coalesce(
            nullif(regexp_extract(p.wave_id, '/context-ladder/ctx[0-9]*-([a-z-]+)/', 1), ''),
            'none'
        ) as context_source,
        s.concurrency as n_background,
        p.status,
        s.http_status,
        coalesce(s.http_status in (400, 413), false) as is_refused,
        p.prompt_tokens,
        p.cached_prompt_tokens,
        p.completion_tokens,
        p.sent_s,
        p.first_token_s,
        p.last_token_s,
        p.ttft_s,
        p.decode_tok_s,
        p.tokens_per_chunk
    from probe_requests as p
    inner join streams as s on s.request_id = p.request_id
)

select * from final
