-- The plan in rates: for the mix of var plan_code_share (a share of requests), the most
-- requests a second the fleet takes with every replica on or inside its open-loop line
-- (code rate / lambda*_code + prose rate / lambda*_prose <= 1 per replica, lambda* from
-- fct_open_loop_capacity; a workload with no lambda* takes none), and how they are routed.
-- The largest total is a two-commodity linear programme solved exactly: deployments sorted
-- by their code lambda* over prose lambda* (most code-leaning first) take code in that order,
-- the rest prose; the one deployment where the fleet's code share reaches the mix splits its
-- line. Users at var think_time_s: each workload's rate x (its W at lambda* + Z). The burst
-- plan (fct_plan_routing, streams) stays the study's figure; its prefill budget and long
-- prompt routing, and whether mixing was measured, are carried from it.
{% set m = var('plan_code_share') %}
with routing as (
    select run_id, deployment, replicas, mixed_basis, long_prompts_per_min, limited_by
    from {{ ref('fct_plan_routing') }}
),

open_loop as (
    select * from {{ ref('fct_open_loop_capacity') }}
),

lines as (
    -- a deployment's open-loop line, all replicas: requests a second of each workload alone
    select
        r.run_id,
        r.deployment,
        r.replicas,
        r.mixed_basis,
        r.long_prompts_per_min,
        coalesce(c.open_loop_arrivals_per_s, 0) * r.replicas as code_line_per_s,
        coalesce(p.open_loop_arrivals_per_s, 0) * r.replicas as prose_line_per_s,
        coalesce(c.mean_time_in_system_s, 0) as code_time_in_system_s,
        coalesce(p.mean_time_in_system_s, 0) as prose_time_in_system_s,
        c.open_loop_arrivals_per_s as code_lambda_per_s,
        p.open_loop_arrivals_per_s as prose_lambda_per_s
    from routing as r
    left join open_loop as c
        on c.run_id = r.run_id and c.deployment = r.deployment and c.workload = 'code'
    left join open_loop as p
        on p.run_id = r.run_id and p.deployment = r.deployment and p.workload = 'prose'
),

ordered as (
    -- most code-leaning first; position k: deployments 1..k take code only
    select
        *,
        row_number() over w as position,
        sum(code_line_per_s) over w as code_through,
        sum(prose_line_per_s) over (partition by run_id) - sum(prose_line_per_s) over w
            as prose_after
    from lines
    window w as (
        partition by run_id
        order by case when prose_line_per_s = 0 then 'infinity'::double
                      else code_line_per_s / prose_line_per_s end desc, deployment
    )
),

gaps as (
    -- g(k) = (1 - m) code(k) - m prose(k) rises with k; the mix is met where it crosses 0
    select
        *,
        (1 - {{ m }}) * (code_through - code_line_per_s)
            - {{ m }} * (prose_after + prose_line_per_s) as gap_before,
        (1 - {{ m }}) * code_through - {{ m }} * prose_after as gap_after
    from ordered
),

split as (
    -- the deployment whose line the crossing falls in, and the share of it given to code
    select run_id, position as split_position,
        case when gap_before = 0 then 0.0
             else -gap_before / (gap_after - gap_before) end as split_code_share
    from gaps
    where gap_before <= 0 and gap_after > 0
    qualify row_number() over (partition by run_id order by position) = 1
),

routed as (
    select
        g.*,
        -- no crossing: every deployment takes code (the mix is all code, or no line has any
        -- code to give, so nothing of the mix can be served), or all take prose at a mix of 0
        coalesce(s.split_position,
            case when {{ m }} = 0 then 0 else 1 + count(*) over (partition by g.run_id) end)
            as split_position,
        coalesce(s.split_code_share, 0) as split_code_share
    from gaps as g
    left join split as s on s.run_id = g.run_id
),

rates as (
    select
        *,
        case when position < split_position then code_line_per_s
             when position = split_position then split_code_share * code_line_per_s
             else 0 end as code_per_s,
        case when position > split_position then prose_line_per_s
             when position = split_position then (1 - split_code_share) * prose_line_per_s
             else 0 end as prose_per_s
    from routed
),

final as (
    select
        run_id,
        deployment,
        replicas,
        cast({{ m }} as double) as code_share,
        code_lambda_per_s * 60 as code_capacity_per_min,
        prose_lambda_per_s * 60 as prose_capacity_per_min,
        code_per_s * 60 as code_per_min,
        prose_per_s * 60 as prose_per_min,
        (code_per_s + prose_per_s) * 60 as requests_per_min,
        code_per_s / replicas as replica_code_per_s,
        prose_per_s / replicas as replica_prose_per_s,
        -- the share of each replica's open-loop line the plan uses (1 = at lambda*)
        coalesce(code_per_s / nullif(code_line_per_s, 0), 0)
            + coalesce(prose_per_s / nullif(prose_line_per_s, 0), 0) as line_share_used,
        code_per_s * (code_time_in_system_s + {{ var('think_time_s') }})
            + prose_per_s * (prose_time_in_system_s + {{ var('think_time_s') }}) as users,
        cast({{ var('think_time_s') }} as double) as think_time_s,
        code_per_s > 0 and prose_per_s > 0 as mixes_workloads,
        case when code_per_s > 0 and prose_per_s > 0 then mixed_basis end as mixed_basis,
        long_prompts_per_min,
        case
            when code_lambda_per_s is null and prose_lambda_per_s is null
                then 'no open-loop capacity: nothing routed'
            when code_lambda_per_s is null then 'no code open-loop capacity'
            when prose_lambda_per_s is null then 'no prose open-loop capacity'
        end as not_routed_reason
    from rates
)

select * from final
