-- The plan's prefill budget per run and deployment: the long prompts per minute (var
-- plan_long_prompt_tokens each) its replicas take before their decode is below the threshold
-- for more than var plan_max_below_threshold_share of the time, from the night's newest
-- prefill-interference probe (a linear scaling from the probe's prompt length, which the
-- basis states), and the plan's var plan_long_prompts_per_min routed by those budgets.
with routing as (
    select run_id, deployment, replicas, planned_streams
    from {{ ref('int_plan_deployment_routing') }}
),

prefill as (
    -- the night's newest prefill-interference probe of each deployment
    select *
    from {{ ref('fct_prefill_interference') }}
    qualify row_number() over (partition by run_id, deployment order by wave_id desc) = 1
),

per_long_prompt as (
    select
        d.*,
        p.wave_id as prefill_wave_id,
        p.long_prompt_tokens as probe_long_prompt_tokens,
        p.prefill_tok_s as probe_prefill_tok_s,
        p.during_tok_s as probe_during_decode_tok_s,
        case
            when p.wave_id is null or p.prefill_tok_s is null then null
            when p.during_tok_s >= {{ var('threshold_tok_s') }} then 0.0
            else {{ var('plan_long_prompt_tokens') }} / p.prefill_tok_s
        end as below_threshold_s_per_long_prompt,
        case
            when p.wave_id is null then 'not measured: no prefill-interference probe'
            when p.prefill_tok_s is null then 'not measured: the probe timed no prefill'
            when p.during_tok_s >= {{ var('threshold_tok_s') }}
                then 'decode held the threshold during the probe''s prefill'
            else 'decode fell below the threshold for the prefill: '
                || {{ var('plan_long_prompt_tokens') }}::bigint || ' tokens at the probe''s '
                || round(p.prefill_tok_s)::bigint || ' tok/s (measured at '
                || p.long_prompt_tokens || ' tokens; scaled linearly)'
        end as prefill_basis
    from routing as d
    left join prefill as p on p.run_id = d.run_id and p.deployment = d.deployment
),

budgeted as (
    select
        *,
        case
            when below_threshold_s_per_long_prompt is null then null
            when below_threshold_s_per_long_prompt = 0 then null
            else replicas * {{ var('plan_max_below_threshold_share') }} * 60.0
                / below_threshold_s_per_long_prompt
        end as prefill_budget_per_min,
        below_threshold_s_per_long_prompt = 0 as prefill_budget_is_unbounded
    from per_long_prompt
),

fleet_budget as (
    select
        run_id,
        {{ var('plan_long_prompts_per_min') }}::double as long_per_min,
        sum(replicas) filter (where prefill_budget_is_unbounded) as unbounded_replicas,
        sum(prefill_budget_per_min) as budget_per_min,
        sum(planned_streams) as fleet_planned_streams
    from budgeted
    group by run_id
),

-- The long prompts routed to each deployment, as fct_plan's prefill verdict counts them: to
-- the deployments whose decode held the threshold during the probe's prefill (by replicas)
-- where there are any, else in proportion to the measured budgets (each within its own when
-- the fleet's is enough), never to a deployment whose budget was not measured; only when no
-- deployment measured one, shared by planned streams, and said to be an assumption.
final as (
    select
        b.run_id,
        b.deployment,
        b.prefill_wave_id,
        b.probe_long_prompt_tokens,
        b.probe_prefill_tok_s,
        b.probe_during_decode_tok_s,
        b.below_threshold_s_per_long_prompt,
        b.prefill_budget_per_min,
        b.prefill_budget_is_unbounded,
        b.prefill_basis,
        case
            when f.long_per_min = 0 then 0.0
            when f.unbounded_replicas > 0 then
                case when b.prefill_budget_is_unbounded
                    then f.long_per_min * b.replicas / f.unbounded_replicas
                    else 0.0 end
            when f.budget_per_min > 0
                then f.long_per_min * coalesce(b.prefill_budget_per_min, 0) / f.budget_per_min
            when f.fleet_planned_streams > 0
                then f.long_per_min * b.planned_streams / f.fleet_planned_streams
            else 0.0
        end::double as long_prompts_per_min,
        case
            when f.long_per_min = 0 then 'no long prompts planned'
            when f.unbounded_replicas > 0 then
                case when b.prefill_budget_is_unbounded
                    then 'routed here: its decode held the threshold during the probe''s prefill'
                    else 'none routed: a deployment whose decode held the threshold takes them'
                end
            when f.budget_per_min > 0 then
                case when b.prefill_budget_per_min > 0
                    then 'routed in proportion to its prefill budget'
                    else 'none routed: no measured prefill budget' end
            when f.fleet_planned_streams > 0
                then 'assumed: no deployment measured its prefill budget; shared by planned streams'
            else 'nothing planned'
        end as long_prompt_routing
    from budgeted as b
    left join fleet_budget as f on f.run_id = b.run_id
)

select * from final
