-- Each run's plan: the largest number of streams N whose mix (round(N * var plan_code_share)
-- code, the rest prose) some state of int_plan_states carries, and that state's allocation.
-- A run with more servers than the unrolled programme holds is not planned (fct_plan).
with states as (
    select * from {{ ref('int_plan_states') }}
),

servers as (
    select run_id, count(*) as n_servers
    from {{ ref('int_plan_servers') }}
    group by run_id
),

fitting as (
    select *
    from states
    where code_streams = round(
        (code_streams + prose_streams) * {{ var('plan_code_share') }}::double
    )
),

final as (
    select
        f.run_id,
        f.code_streams,
        f.prose_streams,
        f.code_streams + f.prose_streams as planned_streams,
        f.allocation
    from fitting as f
    inner join servers as s on s.run_id = f.run_id
    where s.n_servers <= {{ var('plan_max_servers') }}
    qualify row_number() over (
        partition by f.run_id order by f.code_streams + f.prose_streams desc, f.allocation
    ) = 1
)

select * from final
