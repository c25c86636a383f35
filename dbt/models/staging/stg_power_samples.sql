-- The power readings of each wave (raw.power_samples), typed; unavailable readings kept with
-- their reason, so a wave whose source read N/A says so instead of reading 0 W.
with source as (
    select * from {{ source('raw', 'power_samples') }}
),

final as (
    select
        cast(wave_id as varchar) as wave_id,
        cast(seq as integer) as seq,
        cast(t_ns as bigint) as t_ns,
        cast(source as varchar) as power_source,
        cast(sensor as varchar) as sensor,
        cast(metric as varchar) as metric_name,
        cast(quantity as varchar) as quantity,
        cast(value as double) as reading_value,
        cast(status as varchar) as status,
        cast(reason as varchar) as reason,
        -- the read's round trip: the reading's instant is t_ns within half of it either way
        cast(read_rtt_ns as double) / 1e9 as read_rtt_s
    from source
)

select * from final
