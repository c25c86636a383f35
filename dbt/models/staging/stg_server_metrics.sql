with source as (
    select * from {{ source('raw', 'server_metrics') }}
),

final as (
    select
        cast(wave_id as varchar) as wave_id,
        cast(phase as varchar) as phase,
        cast(name as varchar) as metric_name,
        cast(labels as varchar) as metric_labels,
        cast(label_map as map(varchar, varchar)) as metric_label_map,
        cast(value as double) as metric_value
    from source
)

select * from final
