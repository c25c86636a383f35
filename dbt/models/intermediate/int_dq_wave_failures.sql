-- Blocking data-quality failures per wave, from the expectations step (raw.dq_results).
-- Until a validation has run there is no such table, and no wave has failures.
{% set dq = adapter.get_relation(database=target.database, schema='raw', identifier='dq_results') %}
{% if dq is not none %}
with results as (
    select * from {{ dq }}
    where not success and blocking and wave_id is not null
),

final as (
    select
        wave_id,
        count(*) as n_blocking_failures,
        string_agg(distinct expectation, ', ' order by expectation) as failed_expectations,
        max(validated_at) as last_validated_at
    from results
    group by wave_id
)
{% else %}
with final as (
    select
        cast(null as varchar) as wave_id,
        cast(null as bigint) as n_blocking_failures,
        cast(null as varchar) as failed_expectations,
        cast(null as timestamptz) as last_validated_at
    where false
)
{% endif %}

select * from final
