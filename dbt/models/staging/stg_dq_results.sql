with source as (
    select * from {{ source('raw', 'dq_results') }}
),

final as (
    select
        cast(run_id as varchar) as run_id,
        cast(wave_id as varchar) as wave_id,
        cast(deployment as varchar) as deployment,
        cast(workload as varchar) as workload,
        cast(concurrency as integer) as concurrency,
        cast(trial as integer) as trial,
        cast(suite as varchar) as suite,
        cast(expectation as varchar) as expectation,
        cast(expectation_type as varchar) as expectation_type,
        cast(blocking as boolean) as is_blocking,
        cast(success as boolean) as is_success,
        cast(observed_value as varchar) as observed_value,
        cast(element_count as bigint) as element_count,
        cast(unexpected_count as bigint) as unexpected_count,
        cast(sample_ids as varchar) as sample_ids,
        cast(validated_at as timestamptz) as validated_at
    from source
)

select * from final
