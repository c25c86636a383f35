{{ config(materialized='view') }}

-- What `sparkcap validate` checks per request (expectations/requests.json and
-- probe_requests.json): the stream's figures as every model has them (TTFT from
-- int_stream_rates), what its deployment promised, and the order of its chunks. Validation
-- runs this view, and its parents, before the night's build and feeds the trials' verdict
-- (int_dq_wave_failures -> int_trials), so nothing here may read data-quality results.
-- A view: `where run_id = ...` reaches the chunk scan, so one night's validation never
-- orders every night's chunks.
with rates as (
    select * from {{ ref('int_stream_rates') }}
),

deployments as (
    select * from {{ ref('stg_deployments') }}
),

chunks as (
    select
        r.run_id,
        c.request_id,
        c.t_ns,
        lag(c.t_ns) over (partition by r.run_id, c.request_id order by c.seq) as previous_t_ns
    from {{ ref('stg_chunks') }} as c
    inner join {{ ref('stg_requests') }} as r on r.request_id = c.request_id
),

chunk_order as (
    select
        run_id,
        request_id,
        count(*) as n_chunk_rows,
        count(*) filter (where t_ns < previous_t_ns) as n_chunks_earlier_than_previous,
        count(*) filter (where t_ns = previous_t_ns) as n_chunks_same_time_as_previous
    from chunks
    group by run_id, request_id
),

final as (
    select
        r.run_id,
        -- a search's sustain wave is a sweep's wave, held to the sweep's output-length checks
        r.probe is not null and r.probe <> 'sustain' as is_probe_request,
        r.request_id,
        r.wave_id,
        r.deployment,
        r.workload,
        r.concurrency,
        r.trial,
        r.probe,
        r.request_role,
        r.status,
        r.requested_tokens,
        r.required_tokens,
        r.completion_tokens,
        r.finish_reason,
        r.count_source,
        r.first_token_ns,
        r.last_token_ns,
        r.n_chunks,
        r.status in ('ok', 'short') as finished,
        r.completion_tokens is not null as has_count,
        r.first_token_ns is not null as has_first_token,
        r.completion_tokens::double / nullif(r.requested_tokens, 0) as length_ratio,
        r.ttft_s,
        r.ttft_s / coalesce(d.timeout_total_s, 1800) as ttft_over_timeout,
        coalesce(d.reports_usage, true) as reports_usage,
        coalesce(o.n_chunk_rows, 0) as n_chunk_rows,
        coalesce(o.n_chunks_earlier_than_previous, 0) as n_chunks_earlier_than_previous,
        coalesce(o.n_chunks_same_time_as_previous, 0) as n_chunks_same_time_as_previous
    from rates as r
    left join deployments as d on d.run_id = r.run_id and d.deployment = r.deployment
    left join chunk_order as o on o.run_id = r.run_id and o.request_id = r.request_id
)

select * from final
