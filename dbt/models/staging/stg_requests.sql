with source as (
    select * from {{ source('raw', 'requests') }}
),

final as (
    select
        cast(request_id as varchar) as request_id,
        cast(wave_id as varchar) as wave_id,
        cast(run_id as varchar) as run_id,
        cast(stream_index as integer) as stream_index,
        cast(prompt_id as varchar) as prompt_id,
        cast(requested_tokens as integer) as requested_tokens,
        cast(full_tokens as integer) as full_tokens,
        cast(required_tokens as integer) as required_tokens,
        cast(temperature as double) as temperature,
        cast(sent_ns as bigint) as sent_ns,
        cast(first_token_ns as bigint) as first_token_ns,
        cast(last_token_ns as bigint) as last_token_ns,
        cast(end_ns as bigint) as end_ns,
        cast(completion_tokens as integer) as completion_tokens,
        cast(prompt_tokens as integer) as prompt_tokens,
        cast(cached_prompt_tokens as integer) as cached_prompt_tokens,
        cast(count_source as varchar) as count_source,
        cast(finish_reason as varchar) as finish_reason,
        cast(status as varchar) as status,
        cast(http_status as integer) as http_status,
        cast(error as varchar) as error,
        cast(n_chunks as integer) as n_chunks,
        cast(role as varchar) as request_role,
        cast(session_id as varchar) as session_id,
        cast(turn_index as integer) as turn_index,
        cast(scheduled_ns as bigint) as scheduled_ns,
        cast(timing_error_bound as double) as timing_error_bound,
        cast(first_answer_ns as bigint) as first_answer_ns,
        coalesce(cast(reasoning_chars as bigint), 0) as reasoning_chars,
        cast(reasoning_tokens as integer) as reasoning_tokens,
        coalesce(cast(think_tag as boolean), false) as think_tag
    from source
)

select * from final
