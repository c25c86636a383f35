-- The plan's routing table: for each run and deployment, the code and prose streams to send
-- it so every replica stays on or inside its capacity line (the largest fleet for the mix of
-- var plan_code_share, fct_plan), what room is left, what limits it, whether the mixed probe
-- measured mixing or the plan assumes the capacities' shares add, and its prefill budget: the
-- long prompts per minute (var plan_long_prompt_tokens each) it takes before its decode is
-- below the threshold for more than var plan_max_below_threshold_share of the time.
with servers as (
    select * from {{ ref('int_plan_servers') }}
),

chosen as (
    select * from {{ ref('int_plan_chosen') }}
),

allocation as (
    select c.run_id, a.server_index, a.code_streams, a.prose_streams
    from chosen as c, unnest(c.allocation) as t(a)
),

per_server as (
    select
        s.*,
        coalesce(a.code_streams, 0) as code_streams,
        coalesce(a.prose_streams, 0) as prose_streams
    from servers as s
    inner join chosen as c on c.run_id = s.run_id
    left join allocation as a on a.run_id = s.run_id and a.server_index = s.server_index
),

spare as (
    -- what else a replica could carry of one workload alone, beside what it is planned
    select
        *,
        case
            when code_capacity_streams = 0 then 0
            when prose_capacity_streams = 0 then code_capacity_streams - code_streams
            else floor({{ plan_line_room('code_capacity_streams', 'prose_capacity_streams',
                'code_streams', 'prose_streams') }} / prose_capacity_streams)
        end as spare_code_streams,
        case
            when prose_capacity_streams = 0 then 0
            when code_capacity_streams = 0 then prose_capacity_streams - prose_streams
            else floor({{ plan_line_room('code_capacity_streams', 'prose_capacity_streams',
                'code_streams', 'prose_streams') }} / code_capacity_streams)
        end as spare_prose_streams,
        coalesce(code_streams / nullif(code_capacity_streams, 0), 0)
            + coalesce(prose_streams / nullif(prose_capacity_streams, 0), 0)
            as capacity_share_used
    from per_server
),

per_deployment as (
    select
        run_id,
        deployment,
        any_value(replicas) as replicas,
        any_value(code_capacity_streams) as code_capacity_streams,
        any_value(prose_capacity_streams) as prose_capacity_streams,
        sum(code_streams)::bigint as code_streams,
        sum(prose_streams)::bigint as prose_streams,
        max(code_streams + prose_streams) as max_streams_per_replica,
        bool_or(code_streams > 0 and prose_streams > 0) as mixes_workloads,
        sum(spare_code_streams)::bigint as spare_code_streams,
        sum(spare_prose_streams)::bigint as spare_prose_streams,
        max(capacity_share_used) as capacity_share_used
    from spare
    group by run_id, deployment
),

mixed as (
    -- the mixed probe's waves: the concurrency at which both workloads' medians held the
    -- threshold together, and the lowest at which one fell below
    select
        run_id,
        deployment,
        max(concurrency) filter (where holds) as mixed_holds_streams,
        min(concurrency) filter (where not holds) as mixed_fails_streams
    from (
        select
            run_id, deployment, concurrency,
            bool_and(median_decode_tok_s >= {{ var('threshold_tok_s') }}) as holds
        from {{ ref('fct_mixed_load') }}
        group by all
    )
    group by all
),

prefill as (
    -- the night's newest prefill-interference probe of each deployment
    select *
    from {{ ref('fct_prefill_interference') }}
    qualify row_number() over (partition by run_id, deployment order by wave_id desc) = 1
),

bottlenecks as (
    select run_id, deployment, workload, bottleneck
    from {{ ref('fct_bottlenecks') }}
),

judged as (
    select
        d.*,
        case
            when not d.mixes_workloads then 'one workload per replica: no mixing'
            when m.mixed_fails_streams is not null
                and d.max_streams_per_replica >= m.mixed_fails_streams
                then 'contradicted: the mixed probe fell below the threshold at '
                    || m.mixed_fails_streams || ' streams'
            when m.mixed_holds_streams is not null
                and d.max_streams_per_replica <= m.mixed_holds_streams
                then 'measured: the mixed probe held the threshold at '
                    || m.mixed_holds_streams || ' streams'
            when m.mixed_holds_streams is not null
                then 'assumed beyond the mixed probe (held at ' || m.mixed_holds_streams
                    || ' streams): capacity shares add'
            else 'assumed: capacity shares add (no mixed probe)'
        end as mixed_basis,
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
        end as prefill_basis,
        b_code.bottleneck as code_bottleneck,
        b_prose.bottleneck as prose_bottleneck
    from per_deployment as d
    left join mixed as m on m.run_id = d.run_id and m.deployment = d.deployment
    left join prefill as p on p.run_id = d.run_id and p.deployment = d.deployment
    left join bottlenecks as b_code
        on b_code.run_id = d.run_id and b_code.deployment = d.deployment
        and b_code.workload = 'code'
    left join bottlenecks as b_prose
        on b_prose.run_id = d.run_id and b_prose.deployment = d.deployment
        and b_prose.workload = 'prose'
),

budgeted as (
    select
        run_id,
        deployment,
        replicas,
        code_capacity_streams,
        prose_capacity_streams,
        code_streams,
        prose_streams,
        code_streams + prose_streams as planned_streams,
        capacity_share_used,
        spare_code_streams,
        spare_prose_streams,
        case
            when spare_code_streams = 0 and spare_prose_streams = 0 then
                'at capacity: ' || coalesce(
                    case when code_streams >= prose_streams then code_bottleneck
                    else prose_bottleneck end, 'bottleneck not diagnosed')
            else 'room left'
        end as limited_by,
        mixed_basis,
        prefill_wave_id,
        probe_long_prompt_tokens,
        probe_prefill_tok_s,
        probe_during_decode_tok_s,
        below_threshold_s_per_long_prompt,
        case
            when below_threshold_s_per_long_prompt is null then null
            when below_threshold_s_per_long_prompt = 0 then null
            else replicas * {{ var('plan_max_below_threshold_share') }} * 60.0
                / below_threshold_s_per_long_prompt
        end as prefill_budget_per_min,
        below_threshold_s_per_long_prompt = 0 as prefill_budget_is_unbounded,
        prefill_basis
    from judged
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
        b.*,
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
