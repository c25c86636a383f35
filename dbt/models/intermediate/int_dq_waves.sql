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
            as failure_rate
    from waves as w
    left join rates as r on r.wave_id = w.wave_id
    group by w.run_id, w.wave_id, w.deployment, w.workload, w.concurrency, w.trial
)

select * from final
