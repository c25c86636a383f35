-- What each open-loop replay was asked to send (raw.replay_offers), typed.
with source as (
    select * from {{ source('raw', 'replay_offers') }}
),

final as (
    select
        cast(wave_id as varchar) as wave_id,
        cast(rate_factor as double) as rate_factor,
        cast(duration_s as double) as duration_s,
        cast(seed as bigint) as seed,
        cast(planned_streams as double) as planned_streams,
        cast(code_per_s as double) as code_per_s,
        cast(prose_per_s as double) as prose_per_s,
        cast(long_per_min as double) as long_per_min,
        cast(long_prompt_tokens as integer) as long_prompt_tokens,
        cast(client_stall_s as double) as client_stall_s,
        cast(client_stall_at_s as double) as client_stall_at_s,
        cast(max_below_threshold_share as double) as max_below_threshold_share,
        -- a replay stored alone (before replay ids, or run on its own) is judged alone
        coalesce(cast(replay_id as varchar), cast(wave_id as varchar)) as replay_id,
        cast(plan_kind as varchar) as plan_kind,
        cast(search_id as varchar) as search_id,
        cast(not_replayed_reason as varchar) as not_replayed_reason
    from source
)

select * from final
