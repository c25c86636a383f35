-- Interconnect links checked by `sparkcap link-check` (or the nightly flow): achieved Gb/s
-- against nominal; a link below the configured share of nominal is unhealthy.
{% set links = adapter.get_relation(database=target.database, schema='raw', identifier='link_tests') %}
{% if links is not none %}
with links as (
    select * from {{ links }}
),

final as (
    select
        run_id, deployment, link, node_a, node_b, nominal_gbps, achieved_gbps,
        share as share_of_nominal, coalesce(healthy, false) as healthy, min_share, tool,
        error, measured_at
    from links
)
{% else %}
with final as (
    select
        cast(null as varchar) as run_id, cast(null as varchar) as deployment,
        cast(null as varchar) as link, cast(null as varchar) as node_a,
        cast(null as varchar) as node_b, cast(null as double) as nominal_gbps,
        cast(null as double) as achieved_gbps, cast(null as double) as share_of_nominal,
        cast(null as boolean) as healthy, cast(null as double) as min_share,
        cast(null as varchar) as tool, cast(null as varchar) as error,
        cast(null as timestamptz) as measured_at
    where false
)
{% endif %}

select * from final
