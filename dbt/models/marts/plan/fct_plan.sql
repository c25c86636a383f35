-- One plan per run: for the mix of var plan_code_share (code; the rest prose), the most
-- concurrent streams the fleet carries with every replica on or inside its capacity line at
-- the threshold, what limits it, and whether the fleet's prefill budget takes var
-- plan_long_prompts_per_min long prompts of var plan_long_prompt_tokens. The routing, per
-- deployment, is fct_plan_routing. A run nothing was measured in says so; it is not a plan of 0.
with servers as (
    select run_id, count(*) as n_servers from {{ ref('int_plan_servers') }} group by run_id
),

runs as (
    select distinct run_id from {{ ref('fct_capacity') }} where workload in ('code', 'prose')
),

chosen as (
    select * from {{ ref('int_plan_chosen') }}
),

routing as (
    select
        run_id,
        sum(spare_code_streams)::bigint as spare_code_streams,
        sum(spare_prose_streams)::bigint as spare_prose_streams,
        string_agg(deployment || ' (' || replace(limited_by, 'at capacity: ', '') || ')', ', '
            order by deployment) filter (where limited_by like 'at capacity:%')
            as deployments_at_capacity,
        bool_or(mixed_basis like 'assumed%') as assumes_additive_mixing,
        bool_or(mixed_basis like 'contradicted%') as mixing_contradicted,
        sum(prefill_budget_per_min) as prefill_budget_per_min,
        bool_or(prefill_budget_is_unbounded) as some_prefill_budget_unbounded,
        string_agg(deployment, ', ' order by deployment)
            filter (where below_threshold_s_per_long_prompt is null)
            as prefill_not_measured_deployments
    from {{ ref('fct_plan_routing') }}
    group by run_id
),

final as (
    select
        r.run_id,
        {{ var('plan_code_share') }}::double as code_share,
        1 - {{ var('plan_code_share') }}::double as prose_share,
        {{ var('threshold_tok_s') }}::double as threshold_tok_s,
        coalesce(s.n_servers, 0) as n_servers,
        c.planned_streams,
        c.code_streams as planned_code_streams,
        c.prose_streams as planned_prose_streams,
        t.spare_code_streams,
        t.spare_prose_streams,
        case
            when s.n_servers is null
                then 'not planned: no deployment measured a code or prose capacity'
            when s.n_servers > {{ var('plan_max_servers') }}
                then 'not planned: ' || s.n_servers || ' replicas exceed plan_max_servers ('
                    || {{ var('plan_max_servers') }} || ')'
            when c.planned_streams = 0 then 'no stream fits the mix'
            else 'planned'
        end as plan_verdict,
        case
            when t.deployments_at_capacity is null
                then 'the mix: no deployment is full, but one stream more at this mix fits none'
            else t.deployments_at_capacity
        end as limited_by,
        coalesce(t.assumes_additive_mixing, false) as assumes_additive_mixing,
        coalesce(t.mixing_contradicted, false) as mixing_contradicted,
        {{ var('plan_long_prompts_per_min') }}::double as long_prompts_per_min,
        {{ var('plan_long_prompt_tokens') }}::bigint as long_prompt_tokens,
        {{ var('plan_max_below_threshold_share') }}::double as max_below_threshold_share,
        t.prefill_budget_per_min,
        coalesce(t.some_prefill_budget_unbounded, false) as some_prefill_budget_unbounded,
        t.prefill_not_measured_deployments,
        case
            when {{ var('plan_long_prompts_per_min') }} = 0 then 'no long prompts planned'
            when coalesce(t.some_prefill_budget_unbounded, false)
                then 'fits: a deployment kept its decode at the threshold during prefill'
            when t.prefill_budget_per_min is null
                then 'unknown: no deployment measured its prefill interference'
            when t.prefill_budget_per_min >= {{ var('plan_long_prompts_per_min') }}
                then 'fits: ' || round(t.prefill_budget_per_min, 2) || ' per minute'
            else 'exceeds the budget of ' || round(t.prefill_budget_per_min, 2)
                || ' per minute'
        end as prefill_verdict
    from runs as r
    left join servers as s on s.run_id = r.run_id
    left join chosen as c on c.run_id = r.run_id
    left join routing as t on t.run_id = r.run_id
)

select * from final
