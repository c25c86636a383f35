-- Efficiency at the capacity of record (fct_capacity, the fleet's threshold): tokens per joule
-- and streams per kW of the level the capacity names, for each run, deployment and workload
-- whose deployment named a power source. Streams per kW = capacity streams / (the level's
-- mean power / 1000). 'unavailable', with the reason, when no capacity was measured, the
-- capacity is 0 streams, or that level's energy is unavailable or was not swept (a search's
-- sustained capacity can name an untested level): never 0.
with capacity as (
    select run_id, deployment, workload, capacity_streams, is_measured
    from {{ ref('fct_capacity') }}
),

energy as (
    select * from {{ ref('fct_energy') }}
),

powered as (
    select distinct run_id, deployment, workload from energy
),

joined as (
    select
        c.run_id,
        c.deployment,
        c.workload,
        c.capacity_streams,
        e.mean_power_w,
        e.mean_power_low_w,
        e.mean_power_high_w,
        e.tokens_per_joule,
        case
            when not c.is_measured then 'no capacity measured'
            when c.capacity_streams < 1 then 'capacity is 0 streams'
            when e.concurrency is null
                then 'no power reading at ' || c.capacity_streams || ' streams (level not swept)'
            when e.status <> 'measured' then e.unavailable_reason
            when e.mean_power_w is null or e.mean_power_w <= 0
                then 'no power drawn at ' || c.capacity_streams || ' streams'
        end as unavailable_reason
    from capacity as c
    inner join powered as p
        on p.run_id = c.run_id and p.deployment = c.deployment and p.workload = c.workload
    left join energy as e
        on e.run_id = c.run_id and e.deployment = c.deployment and e.workload = c.workload
        and e.concurrency = c.capacity_streams
),

final as (
    select
        run_id,
        deployment,
        workload,
        capacity_streams,
        case when unavailable_reason is null then mean_power_w end as mean_power_w,
        case when unavailable_reason is null then tokens_per_joule end as tokens_per_joule,
        case when unavailable_reason is null then capacity_streams / (mean_power_w / 1000) end
            as streams_per_kw,
        -- the range the power readings' timing allows (fct_energy's mean power range)
        case when unavailable_reason is null
            then capacity_streams / (mean_power_high_w / 1000) end as streams_per_kw_low,
        case when unavailable_reason is null
            then capacity_streams / (mean_power_low_w / 1000) end as streams_per_kw_high,
        case when unavailable_reason is null then 'measured' else 'unavailable' end as status,
        unavailable_reason
    from joined
)

select * from final
