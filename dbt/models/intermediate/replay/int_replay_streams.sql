-- Every request of an open-loop replay (probe 'replay'), with its lateness and two TTFTs: from
-- its scheduled start (what a user arriving then waits: a late send is a late request) and
-- from its actual send (what a closed-loop client reports, blind to its own stalls).
with streams as (
    select * from {{ ref('int_stream_rates') }}
    where probe = 'replay'
),

offers as (
    select * from {{ ref('stg_replay_offers') }}
),

final as (
    select
        s.run_id,
        s.wave_id,
        s.deployment,
        s.request_id,
        s.request_role as workload,
        s.status,
        s.completion_tokens,
        s.scheduled_ns,
        s.sent_ns,
        s.first_token_ns,
        s.last_token_ns,
        s.end_ns,
        s.decode_tok_s,
        -- a chunk's tokens where the server did not say (its mean: usage / chunks)
        {{ mean_chunk_tokens("s.completion_tokens", "s.n_chunks") }} as tokens_per_chunk,
        (s.sent_ns - s.scheduled_ns) / 1e9 as send_lag_s,
        {{ ttft_seconds('s.first_token_ns', 's.scheduled_ns') }} as ttft_from_scheduled_s,
        s.ttft_s as ttft_from_send_s,
        -- in flight from when it was due until its stream ended (or, unended, the schedule's end)
        s.scheduled_ns / 1e9 as due_s,
        coalesce(s.end_ns, s.last_token_ns, cast(o.duration_s * 1e9 as bigint)) / 1e9 as ended_s,
        o.duration_s,
        -- the first share of the schedule fills an empty server: its requests are sent and
        -- recorded, but the verdict reads the streams due after it (var replay_warmup_share)
        {{ var('replay_warmup_share') }} * o.duration_s as warmup_s,
        s.scheduled_ns / 1e9 >= {{ var('replay_warmup_share') }} * o.duration_s as is_after_warmup,
        -- a stream whose rate the client's own loop stalls may have moved by more than var
        -- timing_error_tolerance (the rule a sweep's wave is spoiled by): no figure of the
        -- replay reads it, and too many of them leave the replay without a verdict (fct_replay)
        s.request_role in ('code', 'prose')
            and coalesce(s.timing_error_bound > {{ var('timing_error_tolerance') }}, false)
            as is_client_spoiled,
        s.scheduled_ns / 1e9 >= {{ var('replay_warmup_share') }} * o.duration_s
            and not (s.request_role in ('code', 'prose')
                and coalesce(s.timing_error_bound > {{ var('timing_error_tolerance') }}, false))
            as is_counted,
        s.timing_error_bound,
        o.rate_factor
    from streams as s
    inner join offers as o on o.wave_id = s.wave_id
)

select * from final
