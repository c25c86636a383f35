-- Each measured level beside its physical bound (int_level_diagnosis): the measured median
-- per-stream rate, what the memory bandwidth allows at the level's context, and the share
-- (a searched level where a full-length sustain wave ran: that wave's, `kind` 'sustain').
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
        kind,
        median_decode_tok_s,
        threshold_tok_s,
        passes_threshold,
        mean_context_tokens,
        weight_bytes_per_step,
        kv_bytes_per_step,
        bytes_per_step,
        replica_bandwidth_bytes_s,
        memory_bandwidth_basis,
        tokens_per_step,
        tokens_per_step_source,
        bound_step_ms,
        bound_decode_tok_s,
        share_of_bound,
        is_above_bound,
        is_far_below_bound,
        bound_note
    from diag
)

select * from final
