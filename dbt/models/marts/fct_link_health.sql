-- Interconnect links checked by `sparkcap link-check` (or the nightly flow): achieved Gb/s
-- against nominal; a link below the configured share of nominal is unhealthy, and so is a
-- link whose probe failed (no achieved figure).
with links as (
    select * from {{ ref('stg_link_tests') }}
),

final as (
    select
        run_id, deployment, link, node_a, node_b, nominal_gbps, achieved_gbps,
        share_of_nominal, coalesce(is_healthy, false) as healthy, min_share, tool,
        error, measured_at
    from links
)

select * from final
