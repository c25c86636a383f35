-- Per run, deployment, workload and level: the physical bound on the per-stream decode rate
-- and the measured rate as a share of it, beside what the level's waves said (int_level_signals:
-- the server's counters and the client's figures, one row per level of the kind that decides
-- it).
--
-- The bound. A decode step at c streams reads the weights the step touches plus each stream's
-- KV cache. Weights: a dense model's all (weight_bytes); a mixture of experts' shared bytes
-- plus the expected distinct experts a batch of c tokens touches per layer, E(1 - (1 - k/E)^c),
-- each expert_bytes. KV: c x the level's mean context x KV bytes per token (the mean context
-- each wave ran at: int_level_signals). The step cannot take less than bytes / the replica's
-- memory bandwidth, and each step gives each stream `tokens_per_step` tokens (1, or more with
-- a speculative decoder: int_level_signals), so
--     bound_decode_tok_s = tokens_per_step x bandwidth / (weight bytes + KV bytes).
-- A fact missing gives no bound, and `bound_missing` says which.
with signals as (
    select * from {{ ref('int_level_signals') }}
),

facts as (
    select * from {{ ref('int_deployment_facts') }}
),

deployments as (
    select * from {{ ref('stg_deployments') }}
),

joined as (
    select
        l.*,
        f.engine as declared_engine,
        f.replica_bandwidth_bytes_s,
        f.memory_bandwidth_basis,
        f.weight_bytes,
        f.moe_experts,
        f.moe_experts_per_token,
        f.moe_expert_bytes,
        f.moe_shared_bytes,
        f.kv_bytes_per_token,
        f.server_slots,
        d.parallel_slots,
        {{ weight_bytes_per_step(
            'f.weight_bytes', 'f.moe_experts', 'f.moe_experts_per_token', 'f.moe_expert_bytes',
            'f.moe_shared_bytes', 'l.concurrency'
        ) }} as weight_bytes_per_step
    from signals as l
    left join facts as f on f.run_id = l.run_id and f.deployment = l.deployment
    left join deployments as d
        on d.run_id = l.run_id and d.deployment = l.deployment
),

bounded as (
    select
        *,
        concurrency * mean_context_tokens * kv_bytes_per_token as kv_bytes_per_step,
        weight_bytes_per_step + concurrency * mean_context_tokens * kv_bytes_per_token
            as bytes_per_step,
        nullif(array_to_string(list_filter([
            case when replica_bandwidth_bytes_s is null then 'memory bandwidth' end,
            case when weight_bytes_per_step is null then 'weight bytes' end,
            case when kv_bytes_per_token is null then 'KV bytes per token' end,
            case when mean_context_tokens is null then 'prompt lengths (no usage)' end
        ], lambda x: x is not null), ', '), '') as bound_missing
    from joined
),

bound as (
    select
        *,
        {{ decode_bound_tok_s(
            'tokens_per_step', 'replica_bandwidth_bytes_s', 'weight_bytes_per_step',
            'concurrency', 'mean_context_tokens', 'kv_bytes_per_token'
        ) }} as bound_decode_tok_s
    from bounded
),

final as (
    select
        * exclude (bound_missing),
        1000 * bytes_per_step / replica_bandwidth_bytes_s as bound_step_ms,
        median_decode_tok_s / bound_decode_tok_s as share_of_bound,
        median_decode_tok_s / bound_decode_tok_s > {{ var('bound_above_tolerance') }}
            as is_above_bound,
        median_decode_tok_s / bound_decode_tok_s < {{ var('bound_far_below_share') }}
            as is_far_below_bound,
        case when bound_missing is not null then 'not computable: no ' || bound_missing end
            as bound_note
    from bound
)

select * from final
