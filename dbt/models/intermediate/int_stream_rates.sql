{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}

-- The study's per-stream formulas. Only `ok` streams carry a decode rate. `decode_tok_s` is
-- the rate a level is judged by (macros/stream_rate.sql, level_decode_tok_s): the study's
-- formula for every full-length stream, and for a stream a search shortened, the study's
-- rate of the full-length stream it stands in for; `measured_decode_tok_s` is the study's
-- formula on the stream as delivered.
with requests as (
    select * from {{ ref('stg_requests') }}
    where {{ changed_runs_filter('run_id') }}
),

waves as (
    select * from {{ ref('stg_waves') }}
),

watermarks as (
    select * from {{ ref('int_run_watermarks') }}
),

shortened as (
    -- only a shortened stream needs its first chunk (k1): the chunks of the rest are not read
    select r.request_id
    from requests as r
    inner join waves as w on w.wave_id = r.wave_id
    where w.length_factor < 1
),

shortened_streams as (
    select
        r.request_id, r.wave_id, r.status, r.completion_tokens, r.first_token_ns,
        r.last_token_ns, r.full_tokens, r.requested_tokens, w.length_factor
    from requests as r
    inner join waves as w on w.wave_id = r.wave_id
    where w.length_factor < 1
),

shortened_chunks as (
    select c.*
    from {{ ref('stg_chunks') }} as c
    inner join shortened as s on s.request_id = c.request_id
),

first_chunks as (
    {{ first_chunk_figures('shortened_chunks') }}
),

window_rates as (
    {{ window_decode_tok_s('shortened_streams', 'shortened_chunks') }}
),

with_k1 as (
    select
        r.*,
        w.length_factor,
        case when w.length_factor < 1 and r.completion_tokens >= 2 then {{ first_chunk_tokens(
            'r.completion_tokens', 'f.first_chunk_counted_tokens', 'f.first_chunk_chars',
            'f.total_chars'
        ) }} end as first_chunk_tokens,
        wr.window_decode_tok_s
    from requests as r
    inner join waves as w on w.wave_id = r.wave_id
    left join first_chunks as f on f.request_id = r.request_id
    left join window_rates as wr on wr.request_id = r.request_id
),

final as (
    select
        r.request_id,
        r.wave_id,
        r.run_id,
        w.deployment,
        w.model,
        w.workload,
        w.concurrency,
        w.trial,
        w.probe,
        r.request_role,
        r.stream_index,
        r.session_id,
        r.turn_index,
        r.prompt_id,
        r.status,
        r.http_status,
        r.requested_tokens,
        r.full_tokens,
        r.required_tokens,
        r.completion_tokens,
        r.count_source,
        r.finish_reason,
        r.prompt_tokens,
        r.cached_prompt_tokens,
        r.sent_ns,
        r.first_token_ns,
        r.last_token_ns,
        r.end_ns,
        -- open-loop replay: when the request was due (NULL for every other wave)
        r.scheduled_ns,
        r.timing_error_bound,
        r.n_chunks,
        r.length_factor,
        r.first_chunk_tokens,
        r.window_decode_tok_s,
        {{ level_decode_tok_s(
            'r.status', 'r.completion_tokens', 'r.first_token_ns', 'r.last_token_ns',
            full_length_tokens('r.full_tokens', 'r.requested_tokens', 'r.length_factor'),
            'r.length_factor', 'r.first_chunk_tokens',
            'r.window_decode_tok_s'
        ) }} as decode_tok_s,
        {{ stream_decode_tok_s(
            'r.status', 'r.completion_tokens', 'r.first_token_ns', 'r.last_token_ns'
        ) }} as measured_decode_tok_s,
        {{ ttft_seconds('r.first_token_ns', 'r.sent_ns') }} as ttft_s,
        (r.last_token_ns - r.first_token_ns) / 1e9 as decode_span_s,
        -- a thinking model: TTFT is the first token on any channel (its decode span holds the
        -- reasoning, as completion_tokens counts it); the time to the first answer token
        -- beside it, and whether the stream reasoned (text streamed, tokens counted, or a
        -- <think> tag in the answer) or reasoned hidden (counted, none streamed)
        r.first_answer_ns,
        {{ ttft_seconds('r.first_answer_ns', 'r.sent_ns') }} as ttfo_s,
        r.reasoning_chars,
        r.reasoning_tokens,
        r.think_tag,
        coalesce(r.reasoning_chars > 0 or r.reasoning_tokens > 0 or r.think_tag, false)
            as reasoned,
        coalesce(r.reasoning_tokens > 0 and r.reasoning_chars = 0 and not r.think_tag, false)
            as reasoning_hidden,
        m.run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from with_k1 as r
    inner join waves as w on w.wave_id = r.wave_id
    inner join watermarks as m on m.run_id = r.run_id
)

select * from final
