-- Streams in flight over an open-loop replay, second by second: at each whole second t of the
-- schedule (and the drain after it), the requests due by t whose streams had not ended.
with streams as (
    select * from {{ ref('int_replay_streams') }}
),

waves as (
    select wave_id, run_id, deployment, any_value(rate_factor) as rate_factor,
        cast(ceil(max(ended_s)) as integer) as last_s
    from streams
    group by all
),

seconds as (
    select w.*, t.t as t_s
    from waves as w, range(0, 100000) as t(t)
    where t.t <= w.last_s
),

final as (
    select
        s.run_id,
        s.wave_id,
        s.deployment,
        s.rate_factor,
        cast(s.t_s as integer) as t_s,
        cast(count(r.request_id) as integer) as streams_in_flight
    from seconds as s
    left join streams as r
        on r.wave_id = s.wave_id and r.due_s <= s.t_s and r.ended_s > s.t_s
    group by all
)

select * from final
