-- Blocking data-quality failures per wave, from the expectations step (raw.dq_results).
-- Until a validation has run the table is empty, and no wave has failures.
with results as (
    select * from {{ ref('stg_dq_results') }}
    where not is_success and is_blocking and wave_id is not null
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

select * from final
