with source as (
    select * from {{ source('raw', 'chunks') }}
),

final as (
    select
        cast(request_id as varchar) as request_id,
        cast(seq as integer) as seq,
        cast(t_ns as bigint) as t_ns,
        cast(n_tokens as integer) as n_tokens,
        cast(n_chars as integer) as n_chars
    from source
)

select * from final
