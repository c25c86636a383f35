-- Which /metrics name says what, per engine: the one place sparkcap reads engine metrics by
-- meaning. `evidence` is the meaning, `kind` how a wave reads it (gauge: sampled during the
-- wave; counter / histogram parts: after - before), `preference` orders an engine's names for
-- one meaning (vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc; the first present
-- wins). A meaning an engine has no name for is absent here, and reads "unavailable" in
-- int_wave_server_evidence, never 0: stale names that silently report empty fields are a known
-- peer bug. Every name below for vLLM, SGLang, llama.cpp and TGI is on a recorded page of that
-- engine, with the type its kind needs (tests/data/metrics_pages, SOURCES.md says where each
-- came from; tests/unit/transform/test_engine_metric_pages.py checks it): vLLM V1 005a810
-- (~0.10), SGLang 00ae9c1 (older SGLang, as its docs' sample page, lacks the retraction,
-- queue-time and speculative families), llama.cpp 0c1e570 (the build sparkcap pins) and
-- TGI 3.3.7. Absent by engine: llama.cpp has no KV-cache gauge (kv_cache_usage_ratio is gone
-- from the pinned build), no preemption and no queue-time figure; TGI has no KV-cache gauge, no
-- preemption and no speculative totals; SGLang has no drafted/accepted totals (its
-- spec_accept_length is the accept_length meaning); only llama.cpp counts decode steps; only
-- SGLang publishes an accept length. TensorRT-LLM's small Prometheus set (with or without
-- Dynamo's prefix) and the simulator's own names are not checked against a recorded page.
with names (engine, evidence, kind, metric_name, preference) as (
    values
    ('vllm', 'requests_running', 'gauge', 'vllm:num_requests_running', 1),
    ('vllm', 'requests_waiting', 'gauge', 'vllm:num_requests_waiting', 1),
    ('vllm', 'kv_cache_usage', 'gauge', 'vllm:kv_cache_usage_perc', 1),
    ('vllm', 'kv_cache_usage', 'gauge', 'vllm:gpu_cache_usage_perc', 2),
    ('vllm', 'preemptions', 'counter', 'vllm:num_preemptions_total', 1),
    ('vllm', 'prompt_tokens', 'counter', 'vllm:prompt_tokens_total', 1),
    ('vllm', 'generation_tokens', 'counter', 'vllm:generation_tokens_total', 1),
    ('vllm', 'draft_tokens', 'counter', 'vllm:spec_decode_num_draft_tokens_total', 1),
    ('vllm', 'accepted_tokens', 'counter', 'vllm:spec_decode_num_accepted_tokens_total', 1),
    ('vllm', 'queue_time_s_sum', 'counter', 'vllm:request_queue_time_seconds_sum', 1),
    ('vllm', 'queue_time_count', 'counter', 'vllm:request_queue_time_seconds_count', 1),
    ('sglang', 'requests_running', 'gauge', 'sglang:num_running_reqs', 1),
    ('sglang', 'requests_waiting', 'gauge', 'sglang:num_queue_reqs', 1),
    ('sglang', 'kv_cache_usage', 'gauge', 'sglang:token_usage', 1),
    ('sglang', 'prompt_tokens', 'counter', 'sglang:prompt_tokens_total', 1),
    ('sglang', 'generation_tokens', 'counter', 'sglang:generation_tokens_total', 1),
    ('sglang', 'accept_length', 'gauge', 'sglang:spec_accept_length', 1),
    ('sglang', 'preemptions', 'counter', 'sglang:num_retracted_requests_total', 1),
    ('sglang', 'queue_time_s_sum', 'counter', 'sglang:queue_time_seconds_sum', 1),
    ('sglang', 'queue_time_count', 'counter', 'sglang:queue_time_seconds_count', 1),
    ('llamacpp', 'requests_running', 'gauge', 'llamacpp:requests_processing', 1),
    ('llamacpp', 'requests_waiting', 'gauge', 'llamacpp:requests_deferred', 1),
    ('llamacpp', 'prompt_tokens', 'counter', 'llamacpp:prompt_tokens_total', 1),
    ('llamacpp', 'generation_tokens', 'counter', 'llamacpp:tokens_predicted_total', 1),
    ('llamacpp', 'decode_steps', 'counter', 'llamacpp:n_decode_total', 1),
    ('llamacpp', 'draft_tokens', 'counter', 'llamacpp:spec_decode_num_draft_tokens_total', 1),
    ('llamacpp', 'accepted_tokens', 'counter', 'llamacpp:spec_decode_num_accepted_tokens_total', 1),
    ('tgi', 'requests_running', 'gauge', 'tgi_batch_current_size', 1),
    ('tgi', 'requests_waiting', 'gauge', 'tgi_queue_size', 1),
    ('tgi', 'prompt_tokens', 'counter', 'tgi_request_input_length_sum', 1),
    ('tgi', 'generation_tokens', 'counter', 'tgi_request_generated_tokens_sum', 1),
    ('tgi', 'queue_time_s_sum', 'counter', 'tgi_request_queue_duration_sum', 1),
    ('tgi', 'queue_time_count', 'counter', 'tgi_request_queue_duration_count', 1),
    ('trtllm', 'queue_time_s_sum', 'counter', 'trtllm_request_queue_time_seconds_sum', 1),
    ('trtllm', 'queue_time_s_sum', 'counter', 'trtllm:request_queue_time_seconds_sum', 2),
    ('trtllm', 'queue_time_count', 'counter', 'trtllm_request_queue_time_seconds_count', 1),
    ('trtllm', 'queue_time_count', 'counter', 'trtllm:request_queue_time_seconds_count', 2),
    ('sim', 'requests_running', 'gauge', 'sim:num_requests_running', 1),
    ('sim', 'requests_waiting', 'gauge', 'sim:num_requests_waiting', 1),
    ('sim', 'kv_cache_usage', 'gauge', 'sim:kv_cache_usage_perc', 1),
    ('sim', 'preemptions', 'counter', 'sim:num_preemptions_total', 1),
    ('sim', 'prompt_tokens', 'counter', 'sim:prompt_tokens_total', 1),
    ('sim', 'generation_tokens', 'counter', 'sim:generation_tokens_total', 1),
    ('sim', 'draft_tokens', 'counter', 'sim:spec_decode_num_draft_tokens_total', 1),
    ('sim', 'accepted_tokens', 'counter', 'sim:spec_decode_num_accepted_tokens_total', 1)
),

final as (
    select
        cast(engine as varchar) as engine,
        cast(evidence as varchar) as evidence,
        cast(kind as varchar) as kind,
        cast(metric_name as varchar) as metric_name,
        cast(preference as integer) as preference
    from names
)

select * from final
