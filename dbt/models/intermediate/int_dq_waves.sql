{{ config(materialized='view') }}

-- What `sparkcap validate` checks per sweep wave (expectations/waves.json): the streams it
-- recorded and the share that did not end ok, counted from int_stream_rates as int_trials
-- counts n_failed. Read before the night's build, like int_dq_requests: no data-quality
-- result may feed it.
with waves as (
    select * from {{ ref('stg_waves') }}
    where probe is null or probe = 'sustain'
),

rates as (
    select * from {{ ref('int_stream_rates') }}
),

deployments as (
    select run_id, deployment, reasoning from {{ ref('stg_deployments') }}
),

final as (
    select
        w.run_id,
        w.wave_id,
        w.deployment,
        w.workload,
        w.concurrency,
        w.trial,
        -- an agent wave's level counts sessions (each sends its turns): those are what it
        -- must have recorded every one of
        if(w.workload = 'agent', count(distinct r.session_id), count(r.request_id))
            as n_recorded,
        count(r.request_id) filter (where r.status <> 'ok') / greatest(count(r.request_id), 1)
            as failure_rate,
        -- a thinking model measured in another state than intended measures another workload
        -- (thinking text, not the code or prose asked for): the deployment's reasoning
        -- setting against what its streams showed (int_stream_rates.reasoned)
        any_value(coalesce(d.reasoning, 'off')) as reasoning_intended,
        count(r.request_id) filter (where r.reasoned) as n_reasoned,
        count(r.request_id) filter (where r.reasoning_hidden) as n_reasoning_hidden,
        case any_value(coalesce(d.reasoning, 'off'))
            when 'off' then count(r.request_id) filter (where r.reasoned) = 0
            else count(r.request_id) filter (where r.status = 'ok' and not r.reasoned) = 0
        end as reasoning_as_intended
    from waves as w
    left join rates as r on r.wave_id = w.wave_id
    left join deployments as d on d.run_id = w.run_id and d.deployment = w.deployment
    group by w.run_id, w.wave_id, w.deployment, w.workload, w.concurrency, w.trial
)

select * from final
