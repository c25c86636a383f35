-- Speculative decoding, measured, per run, deployment, workload and level: tokens each step
-- gives a stream (from the server's counters generated / (generated - accepted), else
-- SGLang's accept length, else the per-chunk counts), and the share of drafted tokens
-- accepted where the server counts drafts. The study's "higher draft acceptance on code" as
-- a number: set code's row beside prose's at the same level.
with diag as (
    select * from {{ ref('int_level_diagnosis') }}
),

final as (
    select
        run_id,
        deployment,
        model,
        workload,
        concurrency,
        median_decode_tok_s,
        tokens_per_step,
        tokens_per_step_source,
        server_draft_tokens,
        server_accepted_tokens,
        server_accepted_tokens / nullif(server_draft_tokens, 0) as draft_acceptance,
        tokens_per_chunk
    from diag
    where tokens_per_step_source <> 'assumed 1 (no speculative evidence)'
)

select * from final
