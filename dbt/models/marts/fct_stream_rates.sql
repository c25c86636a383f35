{{ config(materialized='incremental', unique_key='run_id', incremental_strategy='delete+insert') }}
-- depends_on: {{ ref('int_run_watermarks') }}

with streams as (
    select * from {{ ref('int_stream_rates') }}
    where {{ changed_runs_filter('run_id') }}
),

final as (
    select
        request_id,
        run_id,
        wave_id,
        deployment,
        model,
        workload,
        concurrency,
        trial,
        probe,
        stream_index,
        prompt_id,
        status,
        requested_tokens,
        completion_tokens,
        count_source,
        finish_reason,
        decode_tok_s,
        ttft_s,
        decode_span_s,
        prompt_tokens,
        cached_prompt_tokens,
        n_chunks,
        run_watermark,
        {{ judgement_settings() }} as judgement_settings
    from streams
)

select * from final
