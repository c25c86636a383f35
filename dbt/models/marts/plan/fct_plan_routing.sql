-- The plan's routing table: for each run and deployment, the code and prose streams to send
-- it so every replica stays on or inside its capacity line and what room is left
-- (int_plan_deployment_routing), whether the mixed probe measured the mixing or the plan
-- assumes the capacities' shares add (int_plan_mixed_check), and its prefill budget with the
-- long prompts routed to it (int_plan_prefill_budget), side by side.
with routing as (
    select * from {{ ref('int_plan_deployment_routing') }}
),

mixed_check as (
    select * from {{ ref('int_plan_mixed_check') }}
),

prefill_budget as (
    select * from {{ ref('int_plan_prefill_budget') }}
),

final as (
    select
        r.run_id,
        r.deployment,
        r.replicas,
        r.code_capacity_streams,
        r.prose_capacity_streams,
        r.code_streams,
        r.prose_streams,
        r.planned_streams,
        r.capacity_share_used,
        r.spare_code_streams,
        r.spare_prose_streams,
        r.limited_by,
        m.mixed_basis,
        p.prefill_wave_id,
        p.probe_long_prompt_tokens,
        p.probe_prefill_tok_s,
        p.probe_during_decode_tok_s,
        p.below_threshold_s_per_long_prompt,
        p.prefill_budget_per_min,
        p.prefill_budget_is_unbounded,
        p.prefill_basis,
        p.long_prompts_per_min,
        p.long_prompt_routing
    from routing as r
    inner join mixed_check as m on m.run_id = r.run_id and m.deployment = r.deployment
    inner join prefill_budget as p on p.run_id = r.run_id and p.deployment = r.deployment
)

select * from final
