with capacity as (
    select * from {{ ref('int_capacity') }}
),

boot as (
    select
        run_id, deployment, workload,
        quantile_disc(capacity_streams, {{ var('ci_low_pct') }}) as ci_low_streams,
        quantile_disc(capacity_streams, {{ var('ci_high_pct') }}) as ci_high_streams
    from {{ ref('int_capacity_bootstrap') }}
    group by all
),

final as (
    select
        c.run_id,
        c.deployment,
        c.model,
        c.workload,
        c.threshold_tok_s,
        c.capacity_streams,
        c.first_failing_level,
        c.capacity_interpolated,
        c.is_lower_bound,
        c.is_non_monotonic,
        c.is_below_lowest_level,
        b.ci_low_streams,
        b.ci_high_streams,
        c.n_valid_trials,
        c.lowest_level,
        c.top_level,
        c.capacity_level_tok_s,
        c.first_failing_tok_s,
        c.judgement_settings
    from capacity as c
    left join boot as b
        on b.run_id = c.run_id and b.deployment = c.deployment and b.workload = c.workload
)

select * from final
