with source as (
    select * from {{ source('raw', 'deployments') }}
),

final as (
    select
        cast(run_id as varchar) as run_id,
        cast(deployment as varchar) as deployment,
        cast(model as varchar) as model,
        cast(endpoint as varchar) as endpoint,
        cast(nodes as integer) as nodes,
        cast(hardware as varchar) as hardware,
        cast(replicas as integer) as replicas,
        cast(parallel_slots as integer) as parallel_slots,
        cast(reports_usage as boolean) as reports_usage,
        cast(timeout_total_s as double) as timeout_total_s,
        -- a deployment recorded before the setting existed was measured as the study did
        coalesce(cast(reasoning as varchar), 'off') as reasoning,
        extra_body_json
    from source
)

select * from final
