-- Link health, judged once: a link's achieved share of its nominal Gb/s against the fleet's
-- min_share. A probe that measured nothing (achieved_gbps NULL, its error kept) is no healthy
-- link. raw.link_tests holds the measurement only (its share/healthy columns were written by
-- sparkcap before 0.7 and are not read), so a changed rule reaches every night already checked.
with links as (
    select * from {{ ref('stg_link_tests') }}
),

shares as (
    select
        *,
        achieved_gbps / nullif(nominal_gbps, 0) as share_of_nominal
    from links
),

final as (
    select
        run_id,
        deployment,
        link,
        node_a,
        node_b,
        nominal_gbps,
        achieved_gbps,
        share_of_nominal,
        coalesce(share_of_nominal >= min_share, false) as is_healthy,
        min_share,
        tool,
        error,
        measured_at
    from shares
)

select * from final
