-- Requests of responsiveness probes (prefill interference, prompt cache), times in seconds
-- from the probe's wave anchor, with each stream's mean tokens per chunk so chunk timelines
-- can be turned into token rates when the server gave no per-chunk counts. TTFT and the
-- stream rate come from int_stream_rates: one formula for sweeps and probes.
with streams as (
    select * from {{ ref('int_stream_rates') }}
    where probe is not null
),

final as (
    select
        request_id,
        wave_id,
        run_id,
        deployment,
        model,
        probe,
        request_role,
        status,
        prompt_tokens,
        cached_prompt_tokens,
        completion_tokens,
        n_chunks,
        sent_ns / 1e9 as sent_s,
        first_token_ns / 1e9 as first_token_s,
        last_token_ns / 1e9 as last_token_s,
        ttft_s,
        decode_tok_s,
        {{ mean_chunk_tokens("completion_tokens", "n_chunks") }} as tokens_per_chunk
    from streams
)

select * from final
