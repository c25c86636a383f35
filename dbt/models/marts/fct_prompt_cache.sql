-- Prompt-cache probe: the same long document cold, then warm with other questions, and a
-- distinct document of the same size as the control.
with req as (
    select * from {{ ref('int_probe_requests') }}
    where probe = 'prompt-cache'
),

per_wave as (
    select
        run_id,
        wave_id,
        deployment,
        max(prompt_tokens) filter (where request_role = 'cold') as document_tokens,
        max(ttft_s) filter (where request_role = 'cold') as cold_ttft_s,
        median(ttft_s) filter (where request_role = 'warm') as warm_ttft_s,
        max(ttft_s) filter (where request_role = 'control') as control_ttft_s,
        max(cached_prompt_tokens) filter (where request_role = 'cold') as cold_cached_tokens,
        median(cached_prompt_tokens) filter (where request_role = 'warm') as warm_cached_tokens,
        max(cached_prompt_tokens) filter (where request_role = 'control')
            as control_cached_tokens,
        count(*) filter (where request_role = 'warm') as n_warm,
        count(*) filter (where status <> 'ok') as n_failed
    from req
    group by run_id, wave_id, deployment
),

final as (
    select
        *,
        warm_ttft_s / nullif(cold_ttft_s, 0) as warm_over_cold
    from per_wave
)

select * from final
