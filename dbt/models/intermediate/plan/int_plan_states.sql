-- Every (code streams, prose streams) a run's servers can carry together, with one
-- allocation per server that reaches it: an exact dynamic programme over the servers (at most
-- var plan_max_servers; fct_plan refuses a run with more), unrolled server by server. Each
-- server's options are every integer pair inside its capacity line, so each state is a sum of
-- feasible allocations and no feasible sum is missing: the largest mix that fits is read off
-- these states exactly (a brute force over every allocation agrees, tests/integration).
{% set max_servers = var('plan_max_servers') | int %}
with servers as (
    select * from {{ ref('int_plan_servers') }}
),

options as (
    -- x_code in 0..C_code, x_prose in 0..floor(C_prose * (C_code - x_code) / C_code); a
    -- server with one workload's capacity 0 takes only the other
    select
        s.run_id,
        s.server_index,
        c.x as code_streams,
        p.x as prose_streams
    from servers as s,
        unnest(range(0, s.code_capacity_streams + 1)) as c(x),
        unnest(range(0, s.prose_capacity_streams + 1)) as p(x)
    where (s.code_capacity_streams = 0 and c.x = 0)
        or (s.prose_capacity_streams = 0 and p.x = 0)
        or (
            s.code_capacity_streams > 0 and s.prose_capacity_streams > 0
            and {{ plan_line_room('s.code_capacity_streams', 's.prose_capacity_streams',
                'c.x', 'p.x') }} >= 0
        )
),

step_0 as (
    select distinct
        run_id,
        0::bigint as code_streams,
        0::bigint as prose_streams,
        []::struct(server_index integer, code_streams bigint, prose_streams bigint)[]
            as allocation
    from servers
),
{% for k in range(1, max_servers + 1) %}
step_{{ k }} as (
    -- a run with fewer servers carries its states through unchanged
    select
        s.run_id,
        s.code_streams + coalesce(o.code_streams, 0) as code_streams,
        s.prose_streams + coalesce(o.prose_streams, 0) as prose_streams,
        min(
            case when o.server_index is null then s.allocation
            else list_append(
                s.allocation,
                {'server_index': o.server_index::integer, 'code_streams': o.code_streams::bigint,
                 'prose_streams': o.prose_streams::bigint}
            ) end
        ) as allocation
    from step_{{ k - 1 }} as s
    left join options as o on o.run_id = s.run_id and o.server_index = {{ k }}
    group by all
),
{% endfor %}

final as (
    select run_id, code_streams, prose_streams, allocation
    from step_{{ max_servers }}
)

select * from final
