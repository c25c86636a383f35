-- Interconnect links checked by `sparkcap link-check` (or the nightly flow): achieved Gb/s
-- against nominal, judged in int_link_health (below the configured share of nominal, or no
-- achieved figure at all, is unhealthy).
with links as (
    select * from {{ ref('int_link_health') }}
),

final as (
    select
        run_id, deployment, link, node_a, node_b, nominal_gbps, achieved_gbps,
        share_of_nominal, is_healthy as healthy, min_share, tool,
        error, measured_at
    from links
)

select * from final
