-- What each deployment declares and what its server said, one row per fact per source (a
-- failed discovery: fact 'discovery', the reason in detail). Which value counts is decided
-- once, in int_deployment_facts.
with source as (
    select * from {{ source('raw', 'deployment_facts') }}
),

final as (
    select
        cast(run_id as varchar) as run_id,
        cast(deployment as varchar) as deployment,
        cast(fact as varchar) as fact,
        cast(value as double) as fact_value,
        cast(text_value as varchar) as fact_text,
        cast(source as varchar) as fact_source,
        cast(detail as varchar) as detail,
        cast(recorded_at as timestamptz) as recorded_at
    from source
)

select * from final
