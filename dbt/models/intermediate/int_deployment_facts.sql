-- The facts a deployment's physical bound needs, one row per run × deployment (every
-- deployment the run recorded, with or without facts), each fact from the best source that
-- gave it. Precedence, fixed: declared (the fleet file) > gguf (the served file's metadata) >
-- llama-props (llama-server /props: what the server runs with) > llama-models-meta
-- (llama-server /v1/models meta: what the model was trained for) > vllm-models (max_model_len)
-- > models-owned-by (the listing's owned_by). The weight model is taken whole: once the fleet
-- file declares any of weight_bytes or the moe_* facts, nothing discovered joins them; and a
-- discovered dense weight_bytes (a file's size) is dropped when the model is known to be MoE,
-- whose steps read only the experts their tokens are routed to.
{% set weight_model = ['weight_bytes', 'moe_experts', 'moe_experts_per_token', 'moe_expert_bytes', 'moe_shared_bytes'] %}
{% set numbers = ['memory_bandwidth_gb_s', 'nodes_per_replica', 'weight_bytes', 'moe_experts', 'moe_experts_per_token', 'moe_expert_bytes', 'moe_shared_bytes', 'kv_bytes_per_token', 'context_tokens', 'server_slots'] %}
with deployments as (
    select run_id, deployment, nodes, replicas from {{ ref('stg_deployments') }}
),

all_facts as (
    select * from {{ ref('stg_deployment_facts') }}
),

facts as (
    select
        *,
        case fact_source
            when 'declared' then 0
            when 'gguf' then 1
            when 'llama-props' then 2
            when 'llama-models-meta' then 3
            when 'vllm-models' then 4
            when 'models-owned-by' then 5
        end as source_rank,
        fact in ('{{ weight_model | join("', '") }}') as is_weight_model
    from all_facts
    where fact <> 'discovery' and (fact_value is not null or fact_text is not null)
),

declared_weights as (
    select distinct run_id, deployment
    from facts
    where is_weight_model and fact_source = 'declared'
),

usable as (
    select f.*
    from facts as f
    left join declared_weights as w on f.run_id = w.run_id and f.deployment = w.deployment
    where not (f.is_weight_model and f.fact_source <> 'declared' and w.run_id is not null)
),

winners as (
    {{ best_source_facts('usable') }}
),

pivoted as (
    select
        run_id,
        deployment,
        max(fact_text) filter (where fact = 'engine') as engine,
        max(fact_source) filter (where fact = 'engine') as engine_source,
        max(fact_text) filter (where fact = 'memory_bandwidth_basis') as memory_bandwidth_basis,
        {%- for f in numbers %}
        max(fact_value) filter (where fact = '{{ f }}') as {{ f }},
        max(fact_source) filter (where fact = '{{ f }}') as {{ f }}_source{{ "," if not loop.last }}
        {%- endfor %}
    from winners
    group by run_id, deployment
),

problems as (
    select
        run_id,
        deployment,
        string_agg(fact_source || ': ' || coalesce(detail, 'no reason given'), '; '
            order by fact_source, detail) as discovery_problems
    from all_facts
    where fact = 'discovery'
    group by run_id, deployment
),

final as (
    select
        d.run_id,
        d.deployment,
        p.engine,
        p.engine_source,
        p.memory_bandwidth_gb_s * 1e9 as memory_bandwidth_bytes_s,
        p.memory_bandwidth_gb_s_source as memory_bandwidth_bytes_s_source,
        -- nominal (a data sheet's) or measured (a read benchmark's); NULL: not said
        p.memory_bandwidth_basis,
        coalesce(
            cast(p.nodes_per_replica as integer), greatest(1, d.nodes // d.replicas)
        ) as nodes_per_replica,
        coalesce(p.nodes_per_replica_source, 'nodes-over-replicas') as nodes_per_replica_source,
        p.memory_bandwidth_gb_s * 1e9 * coalesce(
            cast(p.nodes_per_replica as integer), greatest(1, d.nodes // d.replicas)
        ) as replica_bandwidth_bytes_s,
        case when p.moe_experts is null then p.weight_bytes end as weight_bytes,
        case when p.moe_experts is null then p.weight_bytes_source end as weight_bytes_source,
        cast(p.moe_experts as integer) as moe_experts,
        p.moe_experts_source,
        cast(p.moe_experts_per_token as integer) as moe_experts_per_token,
        p.moe_experts_per_token_source,
        p.moe_expert_bytes,
        p.moe_expert_bytes_source,
        p.moe_shared_bytes,
        p.moe_shared_bytes_source,
        p.kv_bytes_per_token,
        p.kv_bytes_per_token_source,
        cast(p.context_tokens as integer) as context_tokens,
        p.context_tokens_source,
        cast(p.server_slots as integer) as server_slots,
        p.server_slots_source,
        x.discovery_problems
    from deployments as d
    left join pivoted as p on d.run_id = p.run_id and d.deployment = p.deployment
    left join problems as x on d.run_id = x.run_id and d.deployment = x.deployment
)

select * from final
