-- The measurement only: raw's share and healthy columns (written before sparkcap 0.7) are left
-- out; int_link_health judges every night's links by one rule.
with source as (
    select * from {{ source('raw', 'link_tests') }}
),

final as (
    select
        cast(run_id as varchar) as run_id,
        cast(deployment as varchar) as deployment,
        cast(link as varchar) as link,
        cast(node_a as varchar) as node_a,
        cast(node_b as varchar) as node_b,
        cast(nominal_gbps as double) as nominal_gbps,
        cast(achieved_gbps as double) as achieved_gbps,
        cast(min_share as double) as min_share,
        cast(tool as varchar) as tool,
        cast(error as varchar) as error,
        cast(measured_at as timestamptz) as measured_at
    from source
)

select * from final
