-- What each wave's server said, by meaning (int_wave_server_evidence): one row per wave and
-- evidence, `unavailable` with its reason where the engine has no such metric or no scrape
-- reached it.
with evidence as (
    select * from {{ ref('int_wave_server_evidence') }}
),

final as (
    select
        wave_id,
        run_id,
        deployment,
        workload,
        concurrency,
        trial,
        engine,
        engine_source,
        evidence,
        kind,
        metric_name,
        value,
        mean_during,
        n_during_samples,
        status,
        unavailable_reason
    from evidence
)

select * from final
