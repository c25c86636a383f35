-- Whether the plan's mixing was measured: a deployment the plan gives both workloads is
-- judged against the mixed probe's waves (fct_mixed_load): measured where its fullest replica
-- carries no more streams than the probe held the threshold at, contradicted where it carries
-- as many as the probe fell below it at, else assumed (capacity shares add).
with routing as (
    select * from {{ ref('int_plan_deployment_routing') }}
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

final as (
    select
        d.run_id,
        d.deployment,
        m.mixed_holds_streams,
        m.mixed_fails_streams,
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
        end as mixed_basis
    from routing as d
    left join mixed as m on m.run_id = d.run_id and m.deployment = d.deployment
)

select * from final
